//! The args rows: pass 1 ([`ArgsTable::collect`]: every key numbered, every string value counted)
//! and pass 2 ([`encode_row`]: a row's JSON text straight into `TrackEvent.debug_annotations`
//! bytes, by serde_json, no value tree); both first try the rows' predicted shapes (`predict.rs`).

use numpy::{IntoPyArray, PyArray1};
use prost::encoding::{encode_key, encode_varint, WireType};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use indexmap::IndexSet;
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

mod predict;

pub(super) use predict::Pred;
use predict::predicted_row;
use super::{close, key_len, open, put_bytes, E_ANN, A_ARRAY, A_BOOL, A_DICT, A_DOUBLE, A_INT, A_NAME, A_NAME_IID, A_STR, A_STR_IID,
            A_UINT, MAX_DEPTH, MAX_KEYS, PARALLEL_ROWS};
use crate::nest::{column, Column};

// ---------------------------------------------------------------- the table of keys and values

/// Interned strings of one kind, in order of first appearance (an entry is its index).
#[derive(Default, Clone)]
struct Strings(IndexSet<Box<[u8]>, FxBuildHasher>);

impl Strings {
    #[inline]
    fn add(&mut self, s: &[u8]) -> u32 {
        match self.0.get_index_of(s) {
            Some(e) => e as u32,
            None => self.0.insert_full(s.into()).0 as u32,
        }
    }
    #[inline]
    fn get(&self, s: &[u8]) -> Option<u32> {
        self.0.get_index_of(s).map(|e| e as u32)
    }
    /// The entries, in order.
    fn order(&self) -> &indexmap::set::Slice<Box<[u8]>> {
        self.0.as_slice()
    }
}

/// Pass 1's findings: the annotation names (keys, iid = entry + 1) and the string values (with
/// their counts; an iid > 0 once the caller chose to intern it).
#[derive(Default)]
struct Table {
    keys: Strings,
    values: Strings,
    counts: Vec<i64>,
    value_iids: Vec<u64>,
    strings: bool,
    /// whether rows are checked against predictions before being read whole (the tests compare)
    predict: bool,
    /// pass 1's predictions
    pred: Pred,
    /// per key entry, the bytes `"key":` as compact JSON writes it (empty when the key has a
    /// character JSON escapes): what pass 2 checks the input against, see [`Pred`]
    quoted: Vec<Box<[u8]>>,
    /// pass 1's rows taken as predicted (what the tests check the predictions by)
    predicted: u64,
}

// ---- pass 1: a serde visitor that records keys and counts string values, in document order

struct Collect<'a> {
    t: &'a mut Table,
    /// the string values' entries go here, to be counted once the row is read (else: counted now)
    found: Option<&'a mut Vec<u32>>,
    /// the row's object leaves its keys' entries here, in order
    top: Option<&'a mut Vec<u32>>,
}

impl<'de> DeserializeSeed<'de> for Collect<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

struct KeyOf<'a>(&'a mut Strings);

impl<'de> DeserializeSeed<'de> for KeyOf<'_> {
    type Value = u32;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u32, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyOf<'_> {
    type Value = u32;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<u32, E> {
        Ok(self.0.add(s.as_bytes()))
    }
}

impl<'de> Visitor<'de> for Collect<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        if self.t.strings {
            let e = self.t.values.add(s.as_bytes()) as usize;
            if e == self.t.counts.len() {
                self.t.counts.push(0);
            }
            match self.found {
                Some(found) => found.push(e as u32),
                None => self.t.counts[e] += 1,
            }
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        let Collect { t, mut found, mut top } = self;
        if let Some(top) = top.as_deref_mut() {
            top.clear();
        }
        while let Some(e) = m.next_key_seed(KeyOf(&mut t.keys))? {
            if let Some(top) = top.as_deref_mut() {
                top.push(e);
            }
            m.next_value_seed(Collect { t: &mut *t, found: found.as_deref_mut(), top: None })?;
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
        let Collect { t, mut found, .. } = self;
        while s.next_element_seed(Collect { t: &mut *t, found: found.as_deref_mut(), top: None })?.is_some() {}
        Ok(())
    }
}

impl Table {
    fn collect(&mut self, data: &[u8], off: &[i64]) -> Result<(), String> {
        for r in 0..off.len().saturating_sub(1) {
            let row = row_bytes(data, off, r)?;
            if row.is_empty() {
                continue;
            }
            if self.predict && self.collect_predicted(row) {
                self.predicted += 1;
                continue;
            }
            let mut de = serde_json::Deserializer::from_slice(row);
            // a row serde_json refuses keeps what it found before (pass 2 leaves it to Python)
            let mut keys = std::mem::take(&mut self.pred.keys);
            keys.clear();
            let ok = Collect { t: self, found: None, top: Some(&mut keys) }.deserialize(&mut de).is_ok();
            if ok && de.end().is_ok() {
                self.quote_new();
                let mut pred = std::mem::take(&mut self.pred);
                pred.learn(self, &keys);
                self.pred = pred;
            }
            self.pred.keys = keys;
        }
        self.value_iids.resize(self.counts.len(), 0);
        self.quote_new();
        Ok(())
    }

    /// The `"key":` bytes of the keys added since the last call.
    fn quote_new(&mut self) {
        for k in &self.keys.order()[self.quoted.len()..] {
            // a key with no character JSON escapes is written `"key":` (the bytes are its text)
            let plain = k.iter().all(|&c| c >= 0x20 && c != b'"' && c != b'\\');
            self.quoted.push(if plain { [&b"\""[..], k, b"\":"].concat().into() } else { Box::default() });
        }
    }
}

pub(super) fn row_bytes<'a>(data: &'a [u8], off: &[i64], r: usize) -> Result<&'a [u8], String> {
    let (a, b) = (off[r], off[r + 1]);
    if a < 0 || b < a || b as usize > data.len() {
        return Err(format!("args row {r}: offsets {a}..{b} outside its {} bytes", data.len()));
    }
    Ok(&data[a as usize..b as usize])
}

// ---- pass 2: a serde visitor that writes DebugAnnotation bytes as it reads

/// Why a row is left to the Python encoder (the error's text; never shown to a user).
fn leave<E: de::Error>(why: &str) -> E {
    E::custom(why)
}

struct Ann<'a> {
    t: &'a Table,
    out: &'a mut Vec<u8>,
    depth: usize,
    in_list: bool,
    /// the row's object (depth 0) leaves its keys' entries here, in order
    top: Option<&'a mut Vec<u32>>,
}

impl<'de> DeserializeSeed<'de> for Ann<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// A key of an object: its annotation name's entry in the table.
struct KeyIid<'a>(&'a Strings);

impl<'de> DeserializeSeed<'de> for KeyIid<'_> {
    type Value = u32;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u32, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIid<'_> {
    type Value = u32;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<u32, E> {
        self.0.get(s.as_bytes()).ok_or_else(|| leave("a key pass 1 did not see"))
    }
}

/// `{}` or `[]` as an element of a list: one nameless entry with no value.
const EMPTY_IN_LIST: [u8; 4] = [(A_DICT << 3 | 2) as u8, 2, (A_NAME << 3 | 2) as u8, 0];

impl<'de> Visitor<'de> for Ann<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        encode_key(A_BOOL, WireType::Varint, self.out);
        self.out.push(v as u8);
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        let f = if v <= i64::MAX as u64 { A_INT } else { A_UINT };
        encode_key(f, WireType::Varint, self.out);
        encode_varint(v, self.out);
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        encode_key(A_INT, WireType::Varint, self.out);
        encode_varint(v as u64, self.out); // a negative int64 as its 10-byte two's complement
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        if v == 0.0 && v.is_sign_negative() {
            return Err(leave("-0 or -0.0")); // serde_json reads both as -0.0; orjson "-0" as 0
        }
        encode_key(A_DOUBLE, WireType::SixtyFourBit, self.out);
        self.out.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(()) // null: no value field
    }
    fn visit_str<E>(self, s: &str) -> Result<(), E> {
        let t = self.t;
        let iid = if t.strings {
            t.values.get(s.as_bytes()).map_or(0, |e| t.value_iids[e as usize])
        } else {
            0
        };
        if iid > 0 {
            encode_key(A_STR_IID, WireType::Varint, self.out);
            encode_varint(iid, self.out);
        } else {
            put_bytes(A_STR, s.as_bytes(), self.out);
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        let Ann { t, out, depth, in_list, top } = self;
        let mut seen: SmallVec<[u32; 16]> = SmallVec::new();
        while let Some(e) = m.next_key_seed(KeyIid(&t.keys))? {
            if seen.is_empty() && depth > 0 && depth >= MAX_DEPTH {
                return Err(leave("too deep"));
            }
            if seen.len() >= MAX_KEYS || seen.contains(&e) {
                return Err(leave("a repeated key")); // Python keeps the last value
            }
            seen.push(e);
            let at = open(if depth == 0 { E_ANN } else { A_DICT }, out);
            encode_key(A_NAME_IID, WireType::Varint, out);
            encode_varint(e as u64 + 1, out);
            m.next_value_seed(Ann { t, out: &mut *out, depth: depth + 1, in_list: false, top: None })?;
            close(at, out);
        }
        if seen.is_empty() && in_list {
            out.extend_from_slice(&EMPTY_IN_LIST);
        }
        if let Some(top) = top {
            top.clear();
            top.extend_from_slice(&seen);
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
        let Ann { t, out, depth, in_list, .. } = self;
        if depth == 0 {
            return Err(leave("not an object"));
        }
        let mut n = 0usize;
        loop {
            let at = open(A_ARRAY, out);
            match s.next_element_seed(Ann { t, out: &mut *out, depth: depth + 1, in_list: true, top: None })? {
                None => {
                    out.truncate(at - key_len(A_ARRAY));
                    break;
                }
                Some(()) => close(at, out),
            }
            if n == 0 && depth >= MAX_DEPTH {
                return Err(leave("too deep")); // (an empty list takes no depth)
            }
            n += 1;
        }
        if n == 0 && in_list {
            out.extend_from_slice(&EMPTY_IN_LIST);
        }
        Ok(())
    }
}

/// The top of a row: an object, whose entries are the event's annotations.
struct Row<'a> {
    t: &'a Table,
    out: &'a mut Vec<u8>,
    keys: &'a mut Vec<u32>,
}

impl<'de> DeserializeSeed<'de> for Row<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(Ann { t: self.t, out: self.out, depth: 0, in_list: false, top: Some(self.keys) })
    }
}

/// Appends the annotations of `row` to `out`; false (and `out` as it was) when the row is left to
/// the Python encoder.  A row of a shape seen before takes [`predicted_row`]; any other, or one
/// that does not go as predicted, is read by serde_json whole (and teaches the predictions).
fn encode_row(t: &Table, p: &mut Pred, row: &[u8], out: &mut Vec<u8>) -> bool {
    if row.is_empty() {
        return true;
    }
    let start = out.len();
    if t.predict && predicted_row(t, p, row, out) {
        return true;
    }
    out.truncate(start);
    let mut de = serde_json::Deserializer::from_slice(row);
    let mut keys = std::mem::take(&mut p.keys);
    let ok = Row { t, out: &mut *out, keys: &mut keys }.deserialize(&mut de).is_ok() && de.end().is_ok();
    if ok {
        p.learn(t, &keys);
    } else {
        out.truncate(start);
    }
    p.keys = keys;
    ok
}

/// Annotations of rows: (bytes, end offset of each row's, flags: 1 = left to Python).
pub(super) type Encoded = (Vec<u8>, Vec<i64>, Vec<u8>);

/// The annotations of `rows`, into `into` (emptied first: its buffers are reused from step to step).
fn encode_rows(t: &Table, p: &mut Pred, data: &[u8], off: &[i64], rows: &[i64], into: &mut Encoded)
    -> Result<(), String> {
    let mut size = 0usize;
    for &r in rows {
        if r < 0 || r as usize + 1 >= off.len() {
            return Err(format!("args row {r} out of range ({} rows)", off.len().saturating_sub(1)));
        }
        size += row_bytes(data, off, r as usize)?.len();
    }
    let (out, ends, flags) = into;
    out.clear();
    ends.clear();
    flags.clear();
    out.reserve(size + size / 4 + 64); // annotations take about their JSON's size
    ends.reserve(rows.len());
    flags.resize(rows.len(), 0);
    for (j, &r) in rows.iter().enumerate() {
        let row = row_bytes(data, off, r as usize)?;
        if !encode_row(t, p, row, out) {
            flags[j] = 1;
        }
        ends.push(out.len() as i64);
    }
    Ok(())
}

fn offsets(ends: &[i64]) -> Vec<i64> {
    let mut off = Vec::with_capacity(ends.len() + 1);
    off.push(0);
    off.extend_from_slice(ends);
    off
}

/// ArgsTable(strings: bool = True, predict: bool = True)
///
/// The keys and string values of a trace's args rows (pass 1, [`collect`]) and the encoder of a
/// step's rows (pass 2, [`encode_args`]).  Keys get iids 1, 2, ... in order of first appearance;
/// string values are counted, and written as `string_value_iid` once given an iid
/// ([`set_value_iids`]).  With `predict` (the default) both passes check each row against what the
/// rows before it predict before reading it whole (see [`Pred`]); without, every row is read whole:
/// the same results, which the tests compare.
#[pyclass(module = "traceconv._core.encode")]
pub struct ArgsTable {
    t: Table,
    /// pass 1's second thread: its own table over the second half of each call's rows (keeping its
    /// predictions from call to call), merged into `t` after each call
    aux: Option<Box<Aux>>,
}

impl ArgsTable {
    /// Pass 2 over `rows` ([`encode_rows`]) on this thread, with predictions `pred`.
    pub(super) fn encode(&self, data: &[u8], off: &[i64], rows: &[i64], pred: &mut Pred, into: &mut Encoded)
        -> Result<(), String> {
        encode_rows(&self.t, pred, data, off, rows, into)
    }
}

/// The second half's table, and where its entries are in the main table.
#[derive(Default)]
struct Aux {
    t: Table,
    keys: Vec<u32>,
    values: Vec<u32>,
}

impl Table {
    /// Adds what `aux` found since the last merge: its keys and string values not in this table,
    /// in its order of first appearance (so the table is the one a single pass over this table's
    /// rows, then aux's, makes), and its counts (then zeroed).
    fn merge(&mut self, aux: &mut Aux) {
        for k in &aux.t.keys.order()[aux.keys.len()..] {
            aux.keys.push(self.keys.add(k));
        }
        for v in &aux.t.values.order()[aux.values.len()..] {
            let e = self.values.add(v);
            if e as usize == self.counts.len() {
                self.counts.push(0);
            }
            aux.values.push(e);
        }
        for (e, c) in aux.t.counts.iter_mut().enumerate() {
            if *c != 0 {
                self.counts[aux.values[e] as usize] += *c;
                *c = 0;
            }
        }
        self.value_iids.resize(self.counts.len(), 0);
        self.quote_new();
    }
}

pub(super) type EncodedArrays<'py> = (Bound<'py, PyArray1<u8>>, Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<u8>>);
type Packed<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<u8>>, Bound<'py, PyArray1<i64>>);

fn packed<'py>(py: Python<'py>, iids: Vec<i64>, items: &[&[u8]]) -> Packed<'py> {
    let mut data = Vec::with_capacity(items.iter().map(|s| s.len()).sum());
    let mut off = Vec::with_capacity(items.len() + 1);
    off.push(0i64);
    for s in items {
        data.extend_from_slice(s);
        off.push(data.len() as i64);
    }
    (iids.into_pyarray(py), data.into_pyarray(py), off.into_pyarray(py))
}

#[pymethods]
impl ArgsTable {
    #[new]
    #[pyo3(signature = (strings = true, predict = true))]
    fn new(strings: bool, predict: bool) -> Self {
        ArgsTable { t: Table { strings, predict, ..Default::default() }, aux: None }
    }

    /// collect(data uint8, off int64, parallel_rows=8192): pass 1 over the rows `data[off[r]:off[r + 1]]`:
    /// every key numbered, every string value counted (when the table interns strings).  From
    /// `parallel_rows` rows on, in two halves on two threads: the same table.
    #[pyo3(signature = (data, off, parallel_rows = PARALLEL_ROWS))]
    fn collect(&mut self, py: Python<'_>, data: Column<'_, u8>, off: Column<'_, i64>, parallel_rows: usize) -> PyResult<()> {
        let (data, off) = (column(&data), column(&off));
        let rows = off.len().saturating_sub(1);
        let (t, aux) = (&mut self.t, &mut self.aux);
        py.detach(|| {
            if rows < parallel_rows.max(2) || rayon::current_num_threads() < 2 {
                return t.collect(&data, &off);
            }
            let aux = aux.get_or_insert_with(|| {
                Box::new(Aux { t: Table { strings: t.strings, predict: t.predict, ..Default::default() }, ..Default::default() })
            });
            let m = rows / 2;
            let (a, b) = rayon::join(|| t.collect(&data, &off[..=m]), || aux.t.collect(&data, &off[m..]));
            a?;
            b?;
            t.merge(aux);
            Ok(())
        })
        .map_err(PyValueError::new_err)
    }

    /// The rows pass 1 took as predicted, without reading them whole (see [`Pred`]).
    #[getter]
    fn predicted_rows(&self) -> u64 {
        self.t.predicted + self.aux.as_ref().map_or(0, |a| a.t.predicted)
    }

    /// keys() -> (iids int64, data uint8, offsets int64): the annotation names in iid order.
    fn keys<'py>(&self, py: Python<'py>) -> Packed<'py> {
        let items: Vec<&[u8]> = self.t.keys.order().iter().map(|b| &**b).collect();
        packed(py, (1..=items.len() as i64).collect(), &items)
    }

    /// value_stats() -> (counts int64, byte lengths int64) of the string values, in table order.
    fn value_stats<'py>(&self, py: Python<'py>) -> (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>) {
        let lens: Vec<i64> = self.t.values.order().iter().map(|b| b.len() as i64).collect();
        (self.t.counts.clone().into_pyarray(py), lens.into_pyarray(py))
    }

    /// set_value_iids(iids int64): per string value (table order), its iid (0: written inline).
    fn set_value_iids(&mut self, iids: Column<'_, i64>) -> PyResult<()> {
        let iids = column(&iids);
        if iids.len() != self.t.counts.len() {
            return Err(PyValueError::new_err(format!(
                "set_value_iids: {} iids for {} string values",
                iids.len(),
                self.t.counts.len()
            )));
        }
        self.t.value_iids = iids.iter().map(|&i| i.max(0) as u64).collect();
        Ok(())
    }

    /// string_values() -> (iids, data, offsets): the interned string values, in iid order.
    fn string_values<'py>(&self, py: Python<'py>) -> Packed<'py> {
        let mut sel: Vec<(u64, &[u8])> = self
            .t
            .value_iids
            .iter()
            .zip(self.t.values.order())
            .filter(|(&i, _)| i > 0)
            .map(|(&i, b)| (i, &**b))
            .collect();
        sel.sort_unstable_by_key(|x| x.0);
        let iids = sel.iter().map(|x| x.0 as i64).collect();
        let items: Vec<&[u8]> = sel.iter().map(|x| x.1).collect();
        packed(py, iids, &items)
    }

    /// encode_args(data, off, rows, piece_rows=2**62) -> (bytes uint8, offsets int64, flags uint8):
    /// the annotations of row `rows[j]` are `bytes[offsets[j]:offsets[j + 1]]`, empty with
    /// `flags[j]` = 1 where the row is left to the Python encoder.  The rows are read in pieces of
    /// `piece_rows`, each with predictions of its own, as the writer's pieces are: the same bytes.
    #[pyo3(signature = (data, off, rows, piece_rows = 1 << 62))]
    fn encode_args<'py>(
        &self,
        py: Python<'py>,
        data: Column<'py, u8>,
        off: Column<'py, i64>,
        rows: Column<'py, i64>,
        piece_rows: usize,
    ) -> PyResult<EncodedArrays<'py>> {
        let (data, off, rows) = (column(&data), column(&off), column(&rows));
        let (mut got, mut piece): (Encoded, Encoded) = Default::default();
        py.detach(|| {
            for part in rows.chunks(piece_rows.max(1)) {
                self.encode(&data, &off, part, &mut Pred::default(), &mut piece)?;
                let base = got.0.len() as i64;
                got.0.extend_from_slice(&piece.0);
                got.1.extend(piece.1.iter().map(|e| e + base));
                got.2.extend_from_slice(&piece.2);
            }
            Ok::<_, String>(())
        })
        .map_err(PyValueError::new_err)?;
        let (out, ends, flags) = got;
        Ok((out.into_pyarray(py), offsets(&ends).into_pyarray(py), flags.into_pyarray(py)))
    }
}
