//! Screening args rows for the Chrome JSON writer: which rows it cannot copy as they are.

use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::args::row_bytes;
use crate::nest::{column, Column};

pub const SCREEN_DEEP: u8 = 1;
pub const SCREEN_SURROGATE: u8 = 2;
pub const SCREEN_SUSPECT: u8 = 4;
pub const SCREEN_LONG: u8 = 8;

/// Per row of args text, the reasons it may not be copied into a JSON output as it is (bits):
/// SCREEN_DEEP -- a container more than `max_depth` containers deep inside the row's object;
/// SCREEN_SURROGATE -- a `\u` escape of a UTF-16 surrogate; SCREEN_SUSPECT -- something orjson may
/// refuse (a letter outside strings that no JSON literal or exponent has, an exponent of 3+ digits,
/// a run of 300+ digits, bytes that are not UTF-8: the caller checks with orjson); SCREEN_LONG -- a
/// number of 20 or more digits before its exponent, which Perfetto's JSON importer misreads.
/// A screen of byte classes, not a parser: the rows it flags are parsed by orjson in Python.
fn screen_row(row: &[u8], max_depth: usize) -> u8 {
    let b = row.len();
    let (mut f, mut depth, mut digits, mut i) = (0u8, 0usize, 0usize, 0usize);
    while i < b {
        let c = row[i];
        if c == b'"' {
            i += 1;
            while i < b && row[i] != b'"' {
                if row[i] == b'\\' {
                    if i + 3 < b && row[i + 1] == b'u' && (row[i + 2] | 0x20) == b'd'
                        && matches!(row[i + 3] | 0x20, b'8'..=b'9' | b'a'..=b'f')
                    {
                        f |= SCREEN_SURROGATE;
                    }
                    i += 2;
                } else if row[i] >= 0x80 {
                    // a UTF-8 sequence: std's validation of at most 4 bytes
                    let end = (i + 4).min(b);
                    let n = match std::str::from_utf8(&row[i..end]) {
                        Ok(_) => utf8_width(row[i]),
                        Err(e) if e.valid_up_to() > 0 => utf8_width(row[i]),
                        Err(_) => 0,
                    };
                    if n == 0 {
                        f |= SCREEN_SUSPECT;
                        i += 1;
                    } else {
                        i += n;
                    }
                } else {
                    i += 1;
                }
            }
            i += 1;
            digits = 0;
            continue;
        }
        match c {
            b'{' | b'[' => {
                depth += 1;
                if depth > max_depth + 1 {
                    f |= SCREEN_DEEP;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'0'..=b'9' => {
                digits += 1;
                if digits >= 20 {
                    f |= SCREEN_LONG;
                }
                if digits >= 300 {
                    f |= SCREEN_SUSPECT;
                }
                i += 1;
                continue;
            }
            b'e' | b'E' => {
                if digits == 0 {
                    i += 1;
                    continue;
                }
                let mut j = i + 1;
                if j < b && (row[j] == b'+' || row[j] == b'-') {
                    j += 1;
                }
                let k = j + row[j.min(b)..].iter().take_while(|x| x.is_ascii_digit()).count();
                if k - j >= 3 {
                    f |= SCREEN_SUSPECT;
                }
            }
            0x80..=0xFF => f |= SCREEN_SUSPECT,
            b'A'..=b'Z' | b'a'..=b'z' if !b"truefalsn".contains(&c) => f |= SCREEN_SUSPECT,
            _ => {}
        }
        if c != b'.' {
            digits = 0;
        }
        i += 1;
    }
    f
}

/// The width of the UTF-8 sequence a lead byte starts (its validity checked by the caller).
fn utf8_width(c: u8) -> usize {
    match c {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    }
}

/// screen_args(data uint8, off int64, max_depth) -> uint8 flags per row (see `screen_row`).
#[pyfunction]
pub(super) fn screen_args<'py>(
    py: Python<'py>,
    data: Column<'py, u8>,
    off: Column<'py, i64>,
    max_depth: usize,
) -> PyResult<Bound<'py, PyArray1<u8>>> {
    let (data, off) = (column(&data), column(&off));
    let flags = py
        .detach(|| {
            (0..off.len().saturating_sub(1))
                .map(|r| row_bytes(&data, &off, r).map(|row| screen_row(row, max_depth)))
                .collect::<Result<Vec<u8>, String>>()
        })
        .map_err(PyValueError::new_err)?;
    Ok(flags.into_pyarray(py))
}
