//! The predictions both passes over the args try before reading a row whole: the shapes of the
//! rows before it (see [`Pred`]).

use prost::encoding::{encode_key, encode_varint, WireType};
use serde::de::DeserializeSeed;
use smallvec::SmallVec;

use super::{Ann, Collect, Table};
use crate::encode::{close, open, A_NAME_IID, E_ANN};

/// Row shapes remembered (rows of a few shapes interleave: an op, its launch, its kernel, ...).
const SHAPES: usize = 16;
/// Shapes tried for one row (those that start with its first key).
const TRIES: usize = 4;
/// Values longer than this are not remembered.
const MAX_REMEMBERED: usize = 256;

/// A row shape: its keys' entries in order, and per key the last value's text, with that value's
/// whole annotation, name and value, as encoded (pass 2) or its string values' entries (pass 1).
#[derive(Default)]
struct Shape {
    keys: Vec<u32>,
    raw: Vec<Vec<u8>>,
    enc: Vec<Vec<u8>>,
    strs: Vec<Vec<u32>>,
}

/// The predictions of a pass, learnt from the rows before (what made numba's encoder fast): rows
/// of one source come in a few shapes -- the same keys in the same order --, and many values under
/// a key repeat.  A row is checked against a shape that starts with its first key, byte for byte,
/// instead of being read: `{`, each key's `"key":`, its value (the text it had last time followed
/// by `,` or `}`, or else read by serde_json up to where the next key's `,"key":` starts), and so
/// on to the `}` that ends the row.  Whatever does not match sends the row to serde_json whole (which
/// teaches a new shape), so the results are those of the full read in every case
/// (tests/test_pbwrite.py compares, under hypothesis).  Shapes are learnt only from rows read whole
/// with no key repeated (pass 2 leaves those to Python), so a predicted row never repeats a key.
#[derive(Default)]
pub struct Pred {
    shapes: Vec<Shape>,
    turn: usize,
    /// rows seen, rows checked against a shape and rows that matched, since the last count reset
    rows: u32,
    tried: u32,
    won: u32,
    /// a scratch buffer for the keys of a row read whole
    pub(super) keys: Vec<u32>,
    found: Vec<u32>,
}

impl Pred {
    /// Whether to check this row against the shapes: not while they fail for 3 rows of 4 or more
    /// (rows of too many shapes, or not compact), counted afresh every 4096 rows.
    #[inline]
    fn worth(&mut self) -> bool {
        self.rows += 1;
        if self.rows == 4096 {
            (self.rows, self.tried, self.won) = (0, 0, 0);
        }
        self.tried < 256 || self.won * 4 >= self.tried
    }

    /// The shape that matched, `tries[k]`, moved to where the first shape tried is (which takes its
    /// place): shapes that start with the same key are then tried last-matched first.  Rows of a
    /// few shapes with one first key come in runs (the bench's Kineto trace: its ops in three shapes
    /// that start with `"External id"`, its kernels in two that start with `"queued"`), so the next
    /// such row most often has the shape the last one had (its 1M events, shapes tried and not
    /// matched: pass 2, in time order, 218k -> 31k; pass 1, in file order, 63k -> 31k).
    #[inline]
    fn ahead(&mut self, tries: &[usize], k: usize) {
        if k > 0 {
            self.shapes.swap(tries[0], tries[k]);
        }
    }

    #[inline]
    fn count(&mut self, won: bool) -> bool {
        self.tried += 1;
        self.won += won as u32;
        won
    }

    /// The key order of a row read whole: a new shape unless known (or it has a key JSON escapes).
    pub(super) fn learn(&mut self, t: &Table, keys: &[u32]) {
        if keys.is_empty()
            || !keys.iter().all(|&e| t.quoted.get(e as usize).is_some_and(|q| !q.is_empty()))
            || self.shapes.iter().any(|s| s.keys == keys)
        {
            return;
        }
        let n = keys.len();
        let shape = Shape {
            keys: keys.to_vec(),
            raw: vec![Vec::new(); n],
            enc: vec![Vec::new(); n],
            strs: vec![Vec::new(); n],
        };
        if self.shapes.len() < SHAPES {
            self.shapes.push(shape);
        } else {
            self.shapes[self.turn % SHAPES] = shape;
            self.turn += 1;
        }
    }
}

/// Whether `s` starts with `q`: eight bytes at a time (the last eight overlapping the word before
/// them), a byte loop when `q` is shorter, leaving at the first word that differs (most often the
/// first) without a call to `memcmp` (10 % of the writer's time when it was one, for such short
/// texts).  Word by word, pass 1 and pass 2 of the bench's 100k trace take 41 % fewer instructions
/// than byte by byte.
#[inline]
fn starts(s: &[u8], q: &[u8]) -> bool {
    let n = q.len();
    if s.len() < n {
        return false;
    }
    let s = &s[..n];
    if n < 8 {
        return s.iter().zip(q).all(|(a, b)| a == b);
    }
    let word = |x: &[u8], i: usize| u64::from_ne_bytes(x[i..i + 8].try_into().unwrap());
    let mut i = 0;
    while i + 8 < n {
        if word(s, i) != word(q, i) {
            return false;
        }
        i += 8;
    }
    word(s, n - 8) == word(q, n - 8)
}

/// Where the value that starts at `pos` ends if the key `next` follows it (None: it is the last):
/// the first `,"next":` (or the row's closing `}`); serde_json then reads exactly `row[pos..end]`
/// as one value or the row is read whole.  (A complete JSON value followed by `,` or `}` is where
/// any JSON parser starting at `pos` stops, so a wrong split can only fail, never mislead.)
#[inline]
fn value_end(t: &Table, row: &[u8], pos: usize, next: Option<u32>) -> Option<usize> {
    let Some(n) = next else { return Some(row.len() - 1) };
    let q = &t.quoted[n as usize];
    let mut i = pos;
    while let Some(c) = memchr::memchr(b',', &row[i..]) {
        let c = i + c;
        if starts(&row[c + 1..], q) {
            return Some(c);
        }
        i = c + 1;
    }
    None
}

/// The shapes (indices) a row may have: those whose first key starts it.  The row's first `"key":`
/// is found once (a shape's keys hold no `"` or `\\`), so most shapes are passed over on its length.
#[inline]
fn candidates(t: &Table, p: &Pred, row: &[u8]) -> SmallVec<[usize; TRIES]> {
    let n = row.len();
    if n < 4 || row[0] != b'{' || row[n - 1] != b'}' || row[1] != b'"' {
        return SmallVec::new();
    }
    let Some(q) = memchr::memchr(b'"', &row[2..]) else { return SmallVec::new() };
    let first = &row[1..(q + 4).min(n)]; // `"key":`, if the row is as a shape predicts
    p.shapes
        .iter()
        .enumerate()
        .filter(|(_, s)| *t.quoted[s.keys[0] as usize] == *first)
        .map(|(j, _)| j)
        .take(TRIES)
        .collect()
}

/// A row as predicted (see [`Pred`]): true with its annotations appended to `out`, false (`out`
/// as it was) when it is not as any shape predicts.
pub(super) fn predicted_row(t: &Table, p: &mut Pred, row: &[u8], out: &mut Vec<u8>) -> bool {
    if !p.worth() {
        return false;
    }
    let start = out.len();
    let tries = candidates(t, p, row);
    for (k, &j) in tries.iter().enumerate() {
        if row_as_shape(t, &mut p.shapes[j], row, out) {
            p.ahead(&tries, k);
            return p.count(true);
        }
        out.truncate(start);
    }
    p.count(false)
}

fn row_as_shape(t: &Table, s: &mut Shape, row: &[u8], out: &mut Vec<u8>) -> bool {
    let n = row.len();
    let mut pos = 1;
    for i in 0..s.keys.len() {
        let e = s.keys[i];
        let q = &t.quoted[e as usize];
        if !starts(&row[pos..], q) {
            return false;
        }
        pos += q.len();
        let raw = &s.raw[i];
        let end = if !raw.is_empty()
            && starts(&row[pos..], raw)
            && matches!(row.get(pos + raw.len()), Some(b',' | b'}'))
        {
            // the annotation as last time, name and value: one copy
            out.extend_from_slice(&s.enc[i]);
            pos + raw.len()
        } else {
            let Some(end) = value_end(t, row, pos, s.keys.get(i + 1).copied()) else { return false };
            let a0 = out.len();
            let at = open(E_ANN, out);
            encode_key(A_NAME_IID, WireType::Varint, out);
            encode_varint(e as u64 + 1, out);
            let mut de = serde_json::Deserializer::from_slice(&row[pos..end]);
            let ann = Ann { t, out: &mut *out, depth: 1, in_list: false, top: None };
            if ann.deserialize(&mut de).is_err() || de.end().is_err() {
                return false;
            }
            close(at, out);
            if end - pos <= MAX_REMEMBERED {
                s.raw[i].clear();
                s.raw[i].extend_from_slice(&row[pos..end]);
                s.enc[i].clear();
                s.enc[i].extend_from_slice(&out[a0..]);
            }
            end
        };
        // the last key's value ends the row; another's is followed by `,` and the next key
        let last = i + 1 == s.keys.len();
        if last {
            return end == n - 1;
        }
        if row[end] != b',' {
            return false;
        }
        pos = end + 1;
    }
    false
}

impl Table {
    /// Pass 1 of a row as predicted (see [`Pred`]: the same walk as pass 2's): true once its keys
    /// and string values are recorded -- the same entries in the same order, the same counts as
    /// the full read --, false (nothing counted) when it is not as any shape predicts.
    pub(super) fn collect_predicted(&mut self, row: &[u8]) -> bool {
        if !self.pred.worth() {
            return false;
        }
        let mut p = std::mem::take(&mut self.pred);
        let mut found = std::mem::take(&mut p.found);
        let mut ok = false;
        let tries = candidates(self, &p, row);
        for (k, &j) in tries.iter().enumerate() {
            found.clear();
            if self.walk_predicted(&mut p.shapes[j], row, &mut found) {
                p.ahead(&tries, k);
                ok = true;
                break;
            }
        }
        if ok {
            for &e in &found {
                self.counts[e as usize] += 1;
            }
        }
        p.found = found;
        p.count(ok);
        self.pred = p;
        ok
    }

    fn walk_predicted(&mut self, s: &mut Shape, row: &[u8], found: &mut Vec<u32>) -> bool {
        let n = row.len();
        let mut pos = 1;
        for i in 0..s.keys.len() {
            let q = &self.quoted[s.keys[i] as usize];
            if !starts(&row[pos..], q) {
                return false;
            }
            pos += q.len();
            let raw = &s.raw[i];
            let end = if !raw.is_empty()
                && starts(&row[pos..], raw)
                && matches!(row.get(pos + raw.len()), Some(b',' | b'}'))
            {
                found.extend_from_slice(&s.strs[i]);
                pos + raw.len()
            } else {
                let Some(end) = value_end(self, row, pos, s.keys.get(i + 1).copied()) else { return false };
                let f0 = found.len();
                let mut de = serde_json::Deserializer::from_slice(&row[pos..end]);
                let c = Collect { t: &mut *self, found: Some(&mut *found), top: None };
                if c.deserialize(&mut de).is_err() || de.end().is_err() {
                    return false;
                }
                if end - pos <= MAX_REMEMBERED {
                    s.raw[i].clear();
                    s.raw[i].extend_from_slice(&row[pos..end]);
                    s.strs[i].clear();
                    s.strs[i].extend_from_slice(&found[f0..]);
                }
                end
            };
            if i + 1 == s.keys.len() {
                return end == n - 1;
            }
            if row[end] != b',' {
                return false;
            }
            pos = end + 1;
        }
        false
    }
}
