//! Byte-level questions the stream and the whole-document reader ask of JSON text
//! (`traceconv.readers.chrome.stream`, `.document`): is it UTF-8, where does the whitespace or a
//! value end, where are the containers nested too deep.

use pyo3::prelude::*;
use serde_json::value::RawValue;

use super::{cut_short, skip_ws_at, walk};

/// is_utf8(data) -> bool: whether `data` is valid UTF-8 (checked without the GIL: the reading
/// thread checks each block before the scanners get it, and holding the GIL for it kept them waiting).
#[pyfunction]
pub(super) fn is_utf8(py: Python<'_>, data: &[u8]) -> bool {
    py.detach(|| std::str::from_utf8(data).is_ok())
}

/// The index of the first non-whitespace byte at or after `i` (`len(buf)` if none).
#[pyfunction]
pub(super) fn skip_ws(buf: &[u8], i: usize) -> usize {
    skip_ws_at(buf, i.min(buf.len()))
}

/// value_end(buf, i) -> int: the index just after the JSON value at `buf[i]` (after whitespace):
/// -1 if the bytes end first (a number that reaches the end may go on), -2 if it is not JSON or
/// is nested deeper than MAX_DEPTH.
#[pyfunction]
pub(super) fn value_end(buf: &[u8], i: usize) -> i64 {
    let Some(text) = buf.get(i..) else {
        return -1;
    };
    let mut stream = serde_json::Deserializer::from_slice(text).into_iter::<&RawValue>();
    match stream.next() {
        None => -1,
        Some(Err(e)) => {
            if cut_short(text, &e) {
                -1
            } else {
                -2
            }
        }
        Some(Ok(v)) => {
            let end = i + stream.byte_offset();
            let raw = v.get();
            let first = raw.as_bytes().first().copied().unwrap_or(0);
            if (first == b'-' || first.is_ascii_digit()) && end >= buf.len() {
                return -1;
            }
            if walk(raw, 1, None).is_err() {
                return -2;
            }
            end as i64
        }
    }
}

/// deep_spans(data, limit) -> list[(start, end)]: the containers of `data` that open deeper than
/// `limit` levels (outermost only); one the text ends inside ends at the text's end.
///
/// The one byte loop here that follows strings: it must work on text that is not JSON (the
/// repairing path's input: truncated, trailing commas, bad escapes), which no JSON parser reads;
/// it only tracks whether it is inside a string (a quote not escaped by a backslash) and the
/// bracket depth, and reads no value.
#[pyfunction]
pub(super) fn deep_spans(py: Python<'_>, data: &[u8], limit: usize) -> Vec<(usize, usize)> {
    py.detach(|| {
        let mut out = Vec::new();
        let mut depth = 0usize;
        let mut instr = false;
        let mut open_at: Option<usize> = None;
        let mut i = 0usize;
        let n = data.len();
        while i < n {
            let c = data[i];
            if instr {
                if c == b'\\' {
                    i += 2;
                    continue;
                }
                if c == b'"' {
                    instr = false;
                }
                i += 1;
                continue;
            }
            match c {
                b'"' => instr = true,
                b'{' | b'[' => {
                    depth += 1;
                    if depth == limit + 1 {
                        open_at = Some(i);
                    }
                }
                b'}' | b']' => {
                    if depth == limit + 1 {
                        if let Some(s) = open_at.take() {
                            out.push((s, i + 1));
                        }
                    }
                    depth = depth.saturating_sub(1);
                }
                _ => {}
            }
            i += 1;
        }
        if let Some(s) = open_at {
            out.push((s, n));
        }
        out
    })
}
