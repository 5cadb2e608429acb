//! The Perfetto protobuf encoding of events and their args, for `traceconv.writers.perfetto`
//! (and the args screen of `traceconv.writers.chrome_json`).
//!
//! * **The tag table.**  [`FIELDS`] holds the field number and wire type of every field traceconv
//!   writes by hand -- the one table of the project: the Python writer builds its few hand-made
//!   fields from it (`_core.encode.FIELDS`) and the tests check every entry against the descriptors
//!   of Perfetto's own protos (`perfetto_trace_pb2`).  Bytes are written with prost's encoding
//!   primitives (`prost::encoding`: keys, varints, lengths): a message struct per event would cost
//!   an allocation per annotation for nothing (the wire bytes are the same).
//! * **Args.**  Each event's args are the compact JSON text of an object (the model's spilled args
//!   column).  [`ArgsTable::collect`] (pass 1) reads every row with serde_json and numbers every key
//!   (an annotation name, by first appearance) and counts every string value, so that the interned
//!   data can be written before the first event; [`ArgsTable::encode_args`] (pass 2) reads a step's
//!   rows again with serde_json -- straight from its deserializer into protobuf bytes, no value tree --
//!   into repeated `TrackEvent.debug_annotations`.  Both passes first check a row against the shapes
//!   of the rows before it ([`Pred`]: keys in the same order, compared byte for byte; a value the same
//!   text as last time under that key is not read again; only a value that differs is read by
//!   serde_json), and read it whole when it is not as predicted: the same results either way.  The value mapping is the writer's Python reference
//!   `value_fields` on what orjson makes of the text (see the module docstring of
//!   `traceconv.writers.perfetto`); serde_json's `float_roundtrip` gives every double exactly as
//!   Python's `float(text)`.  The rows it leaves to the Python encoder are flagged: a key repeated in
//!   one object (Python keeps the last value), text serde_json refuses (a lone surrogate escape,
//!   bytes that are not UTF-8, NaN, a number beyond the double range, anything not JSON, a row that
//!   is not an object), nesting 60 deep or more, and `-0` (serde_json reads it as the double -0.0,
//!   orjson as the integer 0).
//! * **Packets.**  [`EventEncoder::run`] writes the `TracePacket`s of a step of the writer's event
//!   stream: its args on two threads (rayon) once the step has enough rows, then the packets.
//!   The GIL is released while it works; its buffers are kept from step to step ([`Scratch`]).

use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use indexmap::IndexSet;
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

use crate::nest::{column, same_length, Column};

// ---------------------------------------------------------------- the tag table

/// (message, field, number, wire type) of every field written by hand: the one tag table, checked
/// against Perfetto's protos (`perfetto_trace_pb2`) by `tests/test_writers.py`.
pub const FIELDS: &[(&str, &str, u32, WireType)] = &[
    ("Trace", "packet", 1, WireType::LengthDelimited),
    ("TracePacket", "timestamp", 8, WireType::Varint),
    ("TracePacket", "trusted_packet_sequence_id", 10, WireType::Varint),
    ("TracePacket", "track_event", 11, WireType::LengthDelimited),
    ("TracePacket", "interned_data", 12, WireType::LengthDelimited),
    ("TracePacket", "sequence_flags", 13, WireType::Varint),
    ("TrackEvent", "category_iids", 3, WireType::Varint),
    ("TrackEvent", "debug_annotations", 4, WireType::LengthDelimited),
    ("TrackEvent", "type", 9, WireType::Varint),
    ("TrackEvent", "name_iid", 10, WireType::Varint),
    ("TrackEvent", "track_uuid", 11, WireType::Varint),
    ("TrackEvent", "counter_value", 30, WireType::Varint),
    ("TrackEvent", "double_counter_value", 44, WireType::SixtyFourBit),
    ("TrackEvent", "flow_ids", 47, WireType::SixtyFourBit),
    ("TrackEvent", "terminating_flow_ids", 48, WireType::SixtyFourBit),
    ("DebugAnnotation", "name_iid", 1, WireType::Varint),
    ("DebugAnnotation", "bool_value", 2, WireType::Varint),
    ("DebugAnnotation", "uint_value", 3, WireType::Varint),
    ("DebugAnnotation", "int_value", 4, WireType::Varint),
    ("DebugAnnotation", "double_value", 5, WireType::SixtyFourBit),
    ("DebugAnnotation", "string_value", 6, WireType::LengthDelimited),
    ("DebugAnnotation", "legacy_json_value", 9, WireType::LengthDelimited),
    ("DebugAnnotation", "name", 10, WireType::LengthDelimited),
    ("DebugAnnotation", "dict_entries", 11, WireType::LengthDelimited),
    ("DebugAnnotation", "array_values", 12, WireType::LengthDelimited),
    ("DebugAnnotation", "string_value_iid", 17, WireType::Varint),
    ("InternedData", "event_categories", 1, WireType::LengthDelimited),
    ("InternedData", "event_names", 2, WireType::LengthDelimited),
    ("InternedData", "debug_annotation_names", 3, WireType::LengthDelimited),
    ("InternedData", "debug_annotation_string_values", 29, WireType::LengthDelimited),
    // EventCategory, EventName, DebugAnnotationName and InternedString share this layout
    ("EventName", "iid", 1, WireType::Varint),
    ("EventName", "name", 2, WireType::LengthDelimited),
    ("InternedString", "iid", 1, WireType::Varint),
    ("InternedString", "str", 2, WireType::LengthDelimited),
    // the header packets (the sequence's clock, track descriptors, metadata), written by the
    // Python writer from this table
    ("TracePacket", "chrome_events", 5, WireType::LengthDelimited),
    ("TracePacket", "clock_snapshot", 6, WireType::LengthDelimited),
    ("TracePacket", "trace_packet_defaults", 59, WireType::LengthDelimited),
    ("TracePacket", "track_descriptor", 60, WireType::LengthDelimited),
    ("TracePacket", "first_packet_on_sequence", 87, WireType::Varint),
    ("TracePacketDefaults", "timestamp_clock_id", 58, WireType::Varint),
    ("TracePacketDefaults", "track_event_defaults", 11, WireType::LengthDelimited),
    ("TrackEventDefaults", "track_uuid", 11, WireType::Varint),
    ("ClockSnapshot", "clocks", 1, WireType::LengthDelimited),
    ("ClockSnapshot.Clock", "clock_id", 1, WireType::Varint),
    ("ClockSnapshot.Clock", "timestamp", 2, WireType::Varint),
    ("ClockSnapshot.Clock", "is_incremental", 3, WireType::Varint),
    ("TrackDescriptor", "uuid", 1, WireType::Varint),
    ("TrackDescriptor", "name", 2, WireType::LengthDelimited),
    ("TrackDescriptor", "process", 3, WireType::LengthDelimited),
    ("TrackDescriptor", "thread", 4, WireType::LengthDelimited),
    ("TrackDescriptor", "parent_uuid", 5, WireType::Varint),
    ("TrackDescriptor", "counter", 8, WireType::LengthDelimited),
    ("TrackDescriptor", "child_ordering", 11, WireType::Varint),
    ("TrackDescriptor", "sibling_order_rank", 12, WireType::Varint),
    ("TrackDescriptor", "sibling_merge_behavior", 15, WireType::Varint),
    ("TrackDescriptor", "sibling_merge_key", 16, WireType::LengthDelimited),
    ("ProcessDescriptor", "pid", 1, WireType::Varint),
    ("ProcessDescriptor", "legacy_sort_index", 3, WireType::Varint),
    ("ProcessDescriptor", "process_name", 6, WireType::LengthDelimited),
    ("ProcessDescriptor", "process_labels", 8, WireType::LengthDelimited),
    ("ThreadDescriptor", "pid", 1, WireType::Varint),
    ("ThreadDescriptor", "tid", 2, WireType::Varint),
    ("ThreadDescriptor", "legacy_sort_index", 3, WireType::Varint),
    ("ThreadDescriptor", "thread_name", 5, WireType::LengthDelimited),
    ("CounterDescriptor", "unit", 3, WireType::Varint),
    ("CounterDescriptor", "unit_name", 6, WireType::LengthDelimited),
    ("ChromeEventBundle", "metadata", 2, WireType::LengthDelimited),
    ("ChromeMetadata", "name", 1, WireType::LengthDelimited),
    ("ChromeMetadata", "string_value", 2, WireType::LengthDelimited),
    ("ChromeMetadata", "json_value", 5, WireType::LengthDelimited),
];

/// The field number of (message, field) in [`FIELDS`] (evaluated at compile time).
const fn num(message: &str, field: &str) -> u32 {
    let mut i = 0;
    while i < FIELDS.len() {
        if str_eq(FIELDS[i].0, message) && str_eq(FIELDS[i].1, field) {
            return FIELDS[i].2;
        }
        i += 1;
    }
    panic!("no such field in FIELDS");
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const T_PACKET: u32 = num("Trace", "packet");
const P_TS: u32 = num("TracePacket", "timestamp");
const P_SEQ: u32 = num("TracePacket", "trusted_packet_sequence_id");
const P_TE: u32 = num("TracePacket", "track_event");
const P_INTERNED: u32 = num("TracePacket", "interned_data");
const P_FLAGS: u32 = num("TracePacket", "sequence_flags");
const E_CAT: u32 = num("TrackEvent", "category_iids");
const E_ANN: u32 = num("TrackEvent", "debug_annotations");
const E_TYPE: u32 = num("TrackEvent", "type");
const E_NAME: u32 = num("TrackEvent", "name_iid");
const E_TRACK: u32 = num("TrackEvent", "track_uuid");
const E_COUNTER: u32 = num("TrackEvent", "counter_value");
const E_DOUBLE: u32 = num("TrackEvent", "double_counter_value");
const E_FLOW: u32 = num("TrackEvent", "flow_ids");
const E_TFLOW: u32 = num("TrackEvent", "terminating_flow_ids");
const A_NAME_IID: u32 = num("DebugAnnotation", "name_iid");
const A_BOOL: u32 = num("DebugAnnotation", "bool_value");
const A_UINT: u32 = num("DebugAnnotation", "uint_value");
const A_INT: u32 = num("DebugAnnotation", "int_value");
const A_DOUBLE: u32 = num("DebugAnnotation", "double_value");
const A_STR: u32 = num("DebugAnnotation", "string_value");
const A_NAME: u32 = num("DebugAnnotation", "name");
const A_DICT: u32 = num("DebugAnnotation", "dict_entries");
const A_ARRAY: u32 = num("DebugAnnotation", "array_values");
const A_STR_IID: u32 = num("DebugAnnotation", "string_value_iid");
const S_IID: u32 = num("InternedString", "iid");
const S_STR: u32 = num("InternedString", "str");

/// TrackEvent.Type values (checked against the protos in the tests too).
pub const TYPE_SLICE_BEGIN: u64 = 1;
pub const TYPE_SLICE_END: u64 = 2;
pub const TYPE_INSTANT: u64 = 3;
pub const TYPE_COUNTER: u64 = 4;

/// Rows nested this deep (the row's object is depth 0) go to the Python encoder.
pub const MAX_DEPTH: usize = 60;
/// Keys per object checked for repeats; larger objects go to the Python encoder.
const MAX_KEYS: usize = 1024;
/// Pass 2 runs on two threads from this many rows in a step.
pub const PARALLEL_ROWS: usize = 8192;

#[inline]
fn key_len(field: u32) -> usize {
    prost::encoding::key_len(field)
}

/// A length-delimited field's key and a one-byte length placeholder; returns where the
/// placeholder is, for [`close`].
#[inline]
fn open(field: u32, out: &mut Vec<u8>) -> usize {
    encode_key(field, WireType::LengthDelimited, out);
    out.push(0);
    out.len() - 1
}

/// A length-delimited field holding `s`.
#[inline]
fn put_bytes(field: u32, s: &[u8], out: &mut Vec<u8>) {
    encode_key(field, WireType::LengthDelimited, out);
    encode_varint(s.len() as u64, out);
    out.extend_from_slice(s);
}

/// Fill in the length of the field opened at `at` (moving its body when the length takes more than
/// one byte).
#[inline]
fn close(at: usize, out: &mut Vec<u8>) {
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut v = Vec::with_capacity(10);
        encode_varint(len as u64, &mut v);
        out.splice(at..at + 1, v);
    }
}

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

    /// Pass 1 of a row as predicted (see [`Pred`]: the same walk as pass 2's): true once its keys
    /// and string values are recorded -- the same entries in the same order, the same counts as
    /// the full read --, false (nothing counted) when it is not as any shape predicts.
    fn collect_predicted(&mut self, row: &[u8]) -> bool {
        if !self.pred.worth() {
            return false;
        }
        let mut p = std::mem::take(&mut self.pred);
        let mut found = std::mem::take(&mut p.found);
        let mut ok = false;
        for j in candidates(self, &p, row) {
            found.clear();
            if self.walk_predicted(&mut p.shapes[j], row, &mut found) {
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

fn row_bytes<'a>(data: &'a [u8], off: &[i64], r: usize) -> Result<&'a [u8], String> {
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

/// Row shapes remembered (rows of a few shapes interleave: an op, its launch, its kernel, ...).
const SHAPES: usize = 16;
/// Shapes tried for one row (those that start with its first key).
const TRIES: usize = 4;
/// Values longer than this are not remembered.
const MAX_REMEMBERED: usize = 256;

/// A row shape: its keys' entries in order, and per key the last value's text, with that value's
/// encoded fields (pass 2) or its string values' entries (pass 1).
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
    keys: Vec<u32>,
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

    #[inline]
    fn count(&mut self, won: bool) -> bool {
        self.tried += 1;
        self.won += won as u32;
        won
    }

    /// The key order of a row read whole: a new shape unless known (or it has a key JSON escapes).
    fn learn(&mut self, t: &Table, keys: &[u32]) {
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

/// Whether `s` starts with `q`: a byte loop, which leaves at the first byte that differs (most
/// often the first few) without a call to `memcmp` (10 % of the writer's time when it was one).
#[inline]
fn starts(s: &[u8], q: &[u8]) -> bool {
    s.len() >= q.len() && s.iter().zip(q).all(|(a, b)| a == b)
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
    while let Some(c) = row[i..].iter().position(|&b| b == b',') {
        let c = i + c;
        if starts(&row[c + 1..], q) {
            return Some(c);
        }
        i = c + 1;
    }
    None
}

/// The shapes (indices) a row may have: those whose first key starts it.
#[inline]
fn candidates(t: &Table, p: &Pred, row: &[u8]) -> SmallVec<[usize; TRIES]> {
    let n = row.len();
    if n < 2 || row[0] != b'{' || row[n - 1] != b'}' {
        return SmallVec::new();
    }
    p.shapes
        .iter()
        .enumerate()
        .filter(|(_, s)| starts(&row[1..], &t.quoted[s.keys[0] as usize]))
        .map(|(j, _)| j)
        .take(TRIES)
        .collect()
}

/// A row as predicted (see [`Pred`]): true with its annotations appended to `out`, false (`out`
/// as it was) when it is not as any shape predicts.
fn predicted_row(t: &Table, p: &mut Pred, row: &[u8], out: &mut Vec<u8>) -> bool {
    if !p.worth() {
        return false;
    }
    let start = out.len();
    for j in candidates(t, p, row) {
        if row_as_shape(t, &mut p.shapes[j], row, out) {
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
        let at = open(E_ANN, out);
        encode_key(A_NAME_IID, WireType::Varint, out);
        encode_varint(e as u64 + 1, out);
        let raw = &s.raw[i];
        let end = if !raw.is_empty()
            && starts(&row[pos..], raw)
            && matches!(row.get(pos + raw.len()), Some(b',' | b'}'))
        {
            out.extend_from_slice(&s.enc[i]);
            pos + raw.len()
        } else {
            let Some(end) = value_end(t, row, pos, s.keys.get(i + 1).copied()) else { return false };
            let v0 = out.len();
            let mut de = serde_json::Deserializer::from_slice(&row[pos..end]);
            let ann = Ann { t, out: &mut *out, depth: 1, in_list: false, top: None };
            if ann.deserialize(&mut de).is_err() || de.end().is_err() {
                return false;
            }
            if end - pos <= MAX_REMEMBERED {
                s.raw[i].clear();
                s.raw[i].extend_from_slice(&row[pos..end]);
                s.enc[i].clear();
                s.enc[i].extend_from_slice(&out[v0..]);
            }
            end
        };
        close(at, out);
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

/// Annotations of rows: (bytes, end offset of each row's, flags: 1 = left to Python).
type Encoded = (Vec<u8>, Vec<i64>, Vec<u8>);

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

/// [`encode_rows`] in two halves on two threads (rayon) when there are enough rows (the second
/// half's into `spare`, then appended); the same bytes.
#[allow(clippy::too_many_arguments)]
fn encode_rows_par(
    t: &Table,
    data: &[u8],
    off: &[i64],
    rows: &[i64],
    parallel_rows: usize,
    preds: &mut [Pred; 2],
    into: &mut Encoded,
    spare: &mut Encoded,
) -> Result<(), String> {
    let [p0, p1] = preds;
    if rows.len() < parallel_rows.max(2) || rayon::current_num_threads() < 2 {
        return encode_rows(t, p0, data, off, rows, into);
    }
    let (a, b) = rows.split_at(rows.len() / 2);
    let (ra, rb) = rayon::join(|| encode_rows(t, p0, data, off, a, into),
                               || encode_rows(t, p1, data, off, b, spare));
    ra?;
    rb?;
    let (out, ends, flags) = into;
    let base = out.len() as i64;
    out.extend_from_slice(&spare.0);
    ends.extend(spare.1.iter().map(|e| e + base));
    flags.extend_from_slice(&spare.2);
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

type EncodedArrays<'py> = (Bound<'py, PyArray1<u8>>, Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<u8>>);
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

    /// encode_args(data, off, rows, parallel_rows=8192) -> (bytes uint8, offsets int64, flags uint8):
    /// the annotations of row `rows[j]` are `bytes[offsets[j]:offsets[j + 1]]`, empty with
    /// `flags[j]` = 1 where the row is left to the Python encoder.
    #[pyo3(signature = (data, off, rows, parallel_rows = PARALLEL_ROWS))]
    fn encode_args<'py>(
        &self,
        py: Python<'py>,
        data: Column<'py, u8>,
        off: Column<'py, i64>,
        rows: Column<'py, i64>,
        parallel_rows: usize,
    ) -> PyResult<EncodedArrays<'py>> {
        let (data, off, rows) = (column(&data), column(&off), column(&rows));
        let t = &self.t;
        let (mut got, mut spare) = Default::default();
        py.detach(|| encode_rows_par(t, &data, &off, &rows, parallel_rows, &mut Default::default(), &mut got,
                                     &mut spare))
            .map_err(PyValueError::new_err)?;
        let (out, ends, flags) = got;
        Ok((out.into_pyarray(py), offsets(&ends).into_pyarray(py), flags.into_pyarray(py)))
    }
}

// ---------------------------------------------------------------- packets

fn arr<'py, T: numpy::Element>(py: Python<'py>, a: &Py<PyArray1<T>>) -> PyResult<PyReadonlyArray1<'py, T>> {
    Ok(a.bind(py).try_readonly()?)
}

fn slice<'a, T: numpy::Element>(a: &'a PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice().map_err(|e| PyValueError::new_err(format!("a column that is not contiguous: {e}")))
}

/// EventEncoder(table, codes, seq_id, flags (0: no sequence_flags field), uuids, iids, slices, instants, counters,
/// flows_out, flows_in, last, default_uuid=0, parallel_rows=8192)
///
/// Pass 2: the packets of the writer's event stream, a step at a time ([`run`]).  `codes` are the
/// stream's kind values for (begin, end, instant, counter); `uuids[track]` is a track's uuid, left
/// out of the events on the track whose uuid is `default_uuid` (the sequence's
/// `TrackEventDefaults.track_uuid`; 0: none); `iids` are (name iids, category iids), each an int32
/// per string id: the iid of an event whose name (category) is that string (a category iid 0: none);
/// `slices` / `instants` are (track int32, name int32, category int32 (string ids), args data uint8,
/// args offsets int64);
/// `counters` (track int32, value bits uint64); `flows_out` / `flows_in` per flow, the slice it
/// leaves from / arrives at (int64; the flow with index k has id (k + 1) * scale + base, `flow_ids =
/// (scale, base)`: (1, 0) unless the trace is one of several sequences of a file, each its own ids)
/// -- `flow_ids` / `terminating_flow_ids`.  `last` is the time the first event's delta is from.
#[pyclass(module = "traceconv._core.encode")]
pub struct EventEncoder {
    table: Py<ArgsTable>,
    codes: [i64; 4],
    seq_id: u64,
    flags: u64,
    uuids: Vec<u64>,
    name_iids: Vec<u64>,
    cat_iids: Vec<u64>,
    default_uuid: u64,
    s: Cols,
    i: Cols,
    c: (Py<PyArray1<i32>>, Py<PyArray1<u64>>),
    fo: Flows,
    fi: Flows,
    last: i64,
    /// a flow's id: (index + 1) * scale + base
    flow_ids: (u64, u64),
    parallel_rows: usize,
    /// the predictions of pass 2 (one set per thread), kept from step to step
    preds_s: [Pred; 2],
    preds_i: [Pred; 2],
    /// a step's buffers, kept for the next step (see [`Scratch`]) once `keeps`
    scratch: Scratch,
    keeps: bool,
}

/// The buffers a step fills and empties, kept from step to step: the annotations of its slices and
/// instants, and its packets (each in two halves, one per thread).  Made anew for each step, they
/// were fresh mappings (each past glibc's mmap threshold) that the system zeroed page by page.
#[derive(Default)]
struct Scratch {
    s: [Encoded; 2],
    i: [Encoded; 2],
    packets: [Vec<u8>; 2],
}

/// Flow ids by slice, looked up in O(1) per slice begin: a bit per slice says whether it has any;
/// the slices that have are numbered by the bits before theirs (a count per 64 slices, and the
/// word's own bits), and the `k`-th one's ids are `ids[start[k]..start[k + 1]]`, ascending.  About
/// the memory of the (slice, id) pairs sorted for a binary search per begin, which this replaced
/// (8 bytes per flow end, and here 1.5 bits per slice more; a dense start per slice takes 4 bytes
/// a slice, 2.5 MB per direction at 1M events): the searches missed the cache at every step, and
/// the 1M trace's encoder spent 0.29-0.35 s in its steps against 0.27-0.31 s now.
#[derive(Default)]
struct Flows {
    bits: Vec<u64>,
    before: Vec<u32>,
    start: Vec<u32>,
    ids: Vec<u32>,
}

impl Flows {
    /// The flow ids of slice `r`.
    #[inline]
    fn of(&self, r: usize) -> &[u32] {
        let (w, b) = (r / 64, r % 64);
        let Some(&word) = self.bits.get(w) else { return &[] };
        if word >> b & 1 == 0 {
            return &[];
        }
        let k = self.before[w] as usize + (word & ((1u64 << b) - 1)).count_ones() as usize;
        &self.ids[self.start[k] as usize..self.start[k + 1] as usize]
    }
}

fn flow_ends(ends: &[i64], n: usize, what: &str) -> PyResult<Flows> {
    if n >= u32::MAX as usize || ends.len() >= u32::MAX as usize {
        return Err(PyValueError::new_err("EventEncoder: more than 2^32 slices or flows"));
    }
    if ends.is_empty() {
        return Ok(Flows::default());
    }
    let mut pairs = Vec::with_capacity(ends.len());
    for (k, &e) in ends.iter().enumerate() {
        let r = idx(e, n, what).map_err(PyValueError::new_err)?;
        pairs.push((r as u32, k as u32 + 1));
    }
    pairs.sort_unstable();
    let words = n.div_ceil(64);
    let mut f = Flows { bits: vec![0; words], before: vec![0; words], start: Vec::new(), ids: Vec::with_capacity(pairs.len()) };
    for (j, &(r, id)) in pairs.iter().enumerate() {
        if j == 0 || pairs[j - 1].0 != r {
            f.bits[r as usize / 64] |= 1 << (r % 64);
            f.start.push(j as u32);
        }
        f.ids.push(id);
    }
    f.start.push(pairs.len() as u32);
    let mut count = 0u32;
    for w in 0..words {
        f.before[w] = count;
        count += f.bits[w].count_ones();
    }
    Ok(f)
}

type Cols = (Py<PyArray1<i32>>, Py<PyArray1<i32>>, Py<PyArray1<i32>>, Py<PyArray1<u8>>, Py<PyArray1<i64>>);

/// One event's packet, given its parts.
struct Ev<'a> {
    etype: u64,
    uuid: u64,
    name: u64,
    cat: u64,
    ann: &'a [u8],
    counter: Option<u64>,
    fo: &'a [u32],
    fi: &'a [u32],
}

/// A counter's value as `counter_value` (an int64 varint) when that is the same number in fewer
/// bytes -- a whole, non-negative double below 2^56 (not -0.0) -- else None (`double_counter_value`).
fn counter_int(bits: u64) -> Option<u64> {
    let v = f64::from_bits(bits);
    (bits >> 63 == 0 && v.fract() == 0.0 && v < (1u64 << 56) as f64).then_some(v as u64)
}

/// The packet of one event: its sequence id and flags, its track event, its timestamp.  `default_uuid` is the sequence's `TrackEventDefaults.track_uuid`: an
/// event on that track leaves its `track_uuid` out.
fn put_packet(out: &mut Vec<u8>, delta: u64, seq: u64, flags: u64, default_uuid: u64, flow_ids: (u64, u64), ev: &Ev) {
    let vl = |v: u64| encoded_len_varint(v);
    let own_track = ev.uuid != default_uuid;
    let mut te = key_len(E_TYPE) + vl(ev.etype);
    if own_track {
        te += key_len(E_TRACK) + vl(ev.uuid);
    }
    let counter_int = ev.counter.and_then(counter_int);
    if let Some(v) = counter_int {
        te += key_len(E_COUNTER) + vl(v);
    } else if ev.counter.is_some() {
        te += key_len(E_DOUBLE) + 8;
    } else if ev.etype != TYPE_SLICE_END {
        te += key_len(E_NAME) + vl(ev.name) + ev.ann.len();
        if ev.cat != 0 {
            te += key_len(E_CAT) + vl(ev.cat);
        }
        te += (key_len(E_FLOW) + 8) * ev.fo.len() + (key_len(E_TFLOW) + 8) * ev.fi.len();
    }
    let mut body = key_len(P_TS) + vl(delta) + key_len(P_SEQ) + vl(seq) + key_len(P_TE) + vl(te as u64) + te;
    if flags != 0 {
        body += key_len(P_FLAGS) + vl(flags);
    }
    encode_key(T_PACKET, WireType::LengthDelimited, out);
    encode_varint(body as u64, out);
    encode_key(P_SEQ, WireType::Varint, out);
    encode_varint(seq, out);
    if flags != 0 {
        encode_key(P_FLAGS, WireType::Varint, out);
        encode_varint(flags, out);
    }
    encode_key(P_TE, WireType::LengthDelimited, out);
    encode_varint(te as u64, out);
    encode_key(E_TYPE, WireType::Varint, out);
    encode_varint(ev.etype, out);
    if own_track {
        encode_key(E_TRACK, WireType::Varint, out);
        encode_varint(ev.uuid, out);
    }
    if let Some(v) = counter_int {
        encode_key(E_COUNTER, WireType::Varint, out);
        encode_varint(v, out);
    } else if let Some(bits) = ev.counter {
        encode_key(E_DOUBLE, WireType::SixtyFourBit, out);
        out.extend_from_slice(&bits.to_le_bytes());
    } else if ev.etype != TYPE_SLICE_END {
        encode_key(E_NAME, WireType::Varint, out);
        encode_varint(ev.name, out);
        if ev.cat != 0 {
            encode_key(E_CAT, WireType::Varint, out);
            encode_varint(ev.cat, out);
        }
        out.extend_from_slice(ev.ann);
        let (scale, base) = flow_ids;
        for &f in ev.fo {
            encode_key(E_FLOW, WireType::SixtyFourBit, out);
            out.extend_from_slice(&(f as u64 * scale + base).to_le_bytes());
        }
        for &f in ev.fi {
            encode_key(E_TFLOW, WireType::SixtyFourBit, out);
            out.extend_from_slice(&(f as u64 * scale + base).to_le_bytes());
        }
    }
    // the timestamp last: protobuf readers take fields in any order, and the one field that differs
    // in every packet, put after the event instead of before it, makes the gzipped file 6 % smaller
    encode_key(P_TS, WireType::Varint, out);
    encode_varint(delta, out);
}

fn idx(v: i64, n: usize, what: &str) -> Result<usize, String> {
    if v < 0 || v as usize >= n {
        Err(format!("{what} {v} out of range ({n})"))
    } else {
        Ok(v as usize)
    }
}

#[pymethods]
impl EventEncoder {
    #[new]
    #[pyo3(signature = (table, codes, seq_id, flags, uuids, iids, slices, instants, counters, flows_out, flows_in,
                        last, default_uuid = 0, parallel_rows = PARALLEL_ROWS, flow_ids = (1, 0)))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        table: Py<ArgsTable>,
        codes: [i64; 4],
        seq_id: u64,
        flags: u64,
        uuids: Column<'_, i64>,
        iids: (Column<'_, i32>, Column<'_, i32>),
        slices: Cols,
        instants: Cols,
        counters: (Py<PyArray1<i32>>, Py<PyArray1<u64>>),
        flows_out: Column<'_, i64>,
        flows_in: Column<'_, i64>,
        last: i64,
        default_uuid: u64,
        parallel_rows: usize,
        flow_ids: (u64, u64),
    ) -> PyResult<Self> {
        if flow_ids.0 == 0 || (u32::MAX as u64 + 1).checked_mul(flow_ids.0).and_then(|m| m.checked_add(flow_ids.1)).is_none() {
            return Err(PyValueError::new_err("EventEncoder: flow_ids (scale, base) would give 0 or overflow 64 bits"));
        }
        let n = slices.0.bind(py).len()?;
        let (fo, fi) = (flow_ends(&column(&flows_out), n, "flow source")?,
                        flow_ends(&column(&flows_in), n, "flow destination")?);
        let uuids = column(&uuids).iter().map(|&u| u as u64).collect();
        let name_iids = column(&iids.0).iter().map(|&u| u.max(0) as u64).collect();
        let cat_iids = column(&iids.1).iter().map(|&u| u.max(0) as u64).collect();
        Ok(EventEncoder {
            table, codes, seq_id, flags, uuids, name_iids, cat_iids, default_uuid, s: slices, i: instants, c: counters, fo, fi,
            last, flow_ids, parallel_rows, preds_s: Default::default(), preds_i: Default::default(),
            scratch: Default::default(), keeps: false,
        })
    }

    /// run(time int64, kind int8/any int, index int64, fallback, buf=None) -> (uint8 array, n): the
    /// packets of these events (a step of the stream) are the array's first n bytes.  The array
    /// is `buf` when it is given and has room (a buffer the caller reuses from step to step, done
    /// with before the next call); a new one with room to spare for the next steps when `buf` is
    /// too small; without `buf`, a new one of the step's bytes alone.  Rows
    /// the encoder leaves alone go to `fallback(0 for slices or 1 for instants, rows int64 array)
    /// -> list of bytes` (their encoded annotations).
    #[pyo3(signature = (time, kind, index, fallback, buf = None))]
    fn run<'py>(
        &mut self,
        py: Python<'py>,
        time: Column<'py, i64>,
        kind: Column<'py, i64>,
        index: Column<'py, i64>,
        fallback: Bound<'py, PyAny>,
        buf: Option<Bound<'py, PyArray1<u8>>>,
    ) -> PyResult<(Bound<'py, PyArray1<u8>>, usize)> {
        let (time, kind, index) = (column(&time), column(&kind), column(&index));
        let n = time.len();
        same_length("run", &[n, kind.len(), index.len()])?;
        let [k_begin, _, k_instant, _] = self.codes;
        let (st, sn, sc, sd, so) = (arr(py, &self.s.0)?, arr(py, &self.s.1)?, arr(py, &self.s.2)?,
                                    arr(py, &self.s.3)?, arr(py, &self.s.4)?);
        let (it, inm, ic, id, io) = (arr(py, &self.i.0)?, arr(py, &self.i.1)?, arr(py, &self.i.2)?,
                                     arr(py, &self.i.3)?, arr(py, &self.i.4)?);
        let (ct, cb) = (arr(py, &self.c.0)?, arr(py, &self.c.1)?);
        let (st, sn, sc, sd, so) = (slice(&st)?, slice(&sn)?, slice(&sc)?, slice(&sd)?, slice(&so)?);
        let (it, inm, ic, id, io) = (slice(&it)?, slice(&inm)?, slice(&ic)?, slice(&id)?, slice(&io)?);
        let (ct, cb) = (slice(&ct)?, slice(&cb)?);
        let rows_s: Vec<i64> = (0..n).filter(|&e| kind[e] == k_begin).map(|e| index[e]).collect();
        let rows_i: Vec<i64> = (0..n).filter(|&e| kind[e] == k_instant).map(|e| index[e]).collect();
        let table = self.table.borrow(py);
        let t = &table.t;
        let par = self.parallel_rows;
        let (ps, pi) = (&mut self.preds_s, &mut self.preds_i);
        let mut scratch = std::mem::take(&mut self.scratch);
        let Scratch { s: [s_got, s_spare], i: [i_got, i_spare], packets: [out, spare] } = &mut scratch;
        py.detach(|| {
            encode_rows_par(t, sd, so, &rows_s, par, ps, s_got, s_spare)?;
            encode_rows_par(t, id, io, &rows_i, par, pi, i_got, i_spare)
        })
        .map_err(PyValueError::new_err)?;
        let ((sa, se, sf), (ia, ie, if_)) = (&*s_got, &*i_got);
        // the rows left to the Python encoder
        let mut parts: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
        for (w, (rows, flags)) in [(&rows_s, sf), (&rows_i, if_)].into_iter().enumerate() {
            let left: Vec<i64> = rows.iter().zip(flags.iter()).filter(|(_, &f)| f != 0).map(|(&r, _)| r).collect();
            if !left.is_empty() {
                let got = fallback.call1((w, left.clone().into_pyarray(py)))?;
                let list = got.cast::<PyList>()?;
                if list.len() != left.len() {
                    return Err(PyValueError::new_err("fallback: one bytes object per row expected"));
                }
                for x in list.iter() {
                    parts[w].push(x.cast::<PyBytes>()?.as_bytes().to_vec());
                }
            }
        }
        let a = Assembly {
            enc: &*self, kind: &kind, time: &time, index: &index, st, sn, sc, it, inm, ic, ct, cb,
            s_ann: Anns { text: sa, ends: se, flags: sf, python: &parts[0] },
            i_ann: Anns { text: ia, ends: ie, flags: if_, python: &parts[1] },
        };
        let last = self.last;
        out.clear();
        spare.clear();
        py.detach(|| {
            if n < par.max(2) || rayon::current_num_threads() < 2 {
                return a.packets(0, n, Start { last, ..Default::default() }, out);
            }
            // two halves on two threads: the second starts where the first ends (its row
            // counters, and the time its first delta is from)
            let m = n / 2;
            let js = kind[..m].iter().filter(|&&k| k == k_begin).count();
            let ji = kind[..m].iter().filter(|&&k| k == k_instant).count();
            let second = Start {
                last: time[m - 1], js, ji,
                fs: sf[..js].iter().filter(|&&f| f != 0).count(),
                fi: if_[..ji].iter().filter(|&&f| f != 0).count(),
            };
            let (x, y) = rayon::join(|| a.packets(0, m, Start { last, ..Default::default() }, out),
                                     || a.packets(m, n, second, spare));
            x?;
            y
        })
        .map_err(PyValueError::new_err)?;
        // the two halves into the caller's buffer (kept: they are not handed over), or without a
        // buffer, as they are (the first half's buffer goes with them, made anew next step)
        let (first, size) = (out.len(), out.len() + spare.len());
        let arr = match buf {
            None => {
                let mut all = std::mem::take(out);
                all.extend_from_slice(spare);
                all.into_pyarray(py)
            }
            Some(b) => {
                let b = if numpy::PyUntypedArrayMethods::len(&b) >= size {
                    b
                } else {
                    // (zeroed by the system, not written: only the pages the steps fill are touched)
                    PyArray1::zeros(py, size + size / 4, false)
                };
                let mut w = b
                    .try_readwrite()
                    .map_err(|e| PyValueError::new_err(format!("run: the buffer cannot be written ({e})")))?;
                let dst = w.as_slice_mut().map_err(|_| PyValueError::new_err("run: the buffer is not contiguous"))?;
                dst[..first].copy_from_slice(out);
                dst[first..size].copy_from_slice(spare);
                drop(w);
                b
            }
        };
        // kept for the next steps once a step has been split over two threads (a conversion's;
        // its windows' last steps are often too short to split): on one thread (a merge's worker,
        // whose heap keeps what it frees) the buffers freed here serve the next step's
        // allocations, and kept beside them they raised its peak (+3-5 MiB)
        self.keeps |= n >= par.max(2);
        if self.keeps {
            self.scratch = scratch;
        }
        if n > 0 {
            self.last = time[n - 1];
        }
        Ok((arr, size))
    }
}

/// Where [`Assembly::packets`] starts in a step: the time its first delta is from, and how many
/// slice begins and instants (`js`, `ji`) and of those how many left to Python (`fs`, `fi`) came
/// before it.
#[derive(Default, Clone, Copy)]
struct Start {
    last: i64,
    js: usize,
    ji: usize,
    fs: usize,
    fi: usize,
}

/// A step's annotations of one table: the encoder's, back to back, each row's end, its flag (1:
/// left to Python), and the Python encoder's annotations of the flagged rows, in order.
struct Anns<'a> {
    text: &'a [u8],
    ends: &'a [i64],
    flags: &'a [u8],
    python: &'a [Vec<u8>],
}

impl<'a> Anns<'a> {
    /// Row `j`'s annotations; `f` counts the flagged rows before it (and counts this one).
    fn row(&self, j: usize, f: &mut usize) -> &'a [u8] {
        if self.flags[j] != 0 {
            *f += 1;
            &self.python[*f - 1]
        } else {
            let a0 = if j == 0 { 0 } else { self.ends[j - 1] as usize };
            &self.text[a0..self.ends[j] as usize]
        }
    }
}

/// A step's events and the columns their packets are made of, borrowed (the rest is the encoder's).
struct Assembly<'a> {
    enc: &'a EventEncoder,
    kind: &'a [i64],
    time: &'a [i64],
    index: &'a [i64],
    st: &'a [i32],
    sn: &'a [i32],
    sc: &'a [i32],
    it: &'a [i32],
    inm: &'a [i32],
    ic: &'a [i32],
    ct: &'a [i32],
    cb: &'a [u64],
    s_ann: Anns<'a>,
    i_ann: Anns<'a>,
}

impl Assembly<'_> {
    /// About the bytes of the packets of events `lo..hi`: their share of the annotations, and a
    /// packet's own fields.
    fn room(&self, lo: usize, hi: usize) -> usize {
        let n = self.kind.len().max(1);
        (self.s_ann.text.len() + self.i_ann.text.len()) / n * (hi - lo) + 48 * (hi - lo)
    }

    /// The packets of events `lo..hi`, added to `out`.
    fn packets(&self, lo: usize, hi: usize, at: Start, out: &mut Vec<u8>) -> Result<(), String> {
        let enc = self.enc;
        let [k_begin, k_end, k_instant, k_counter] = enc.codes;
        let (uuids, name_iids, cat_iids) = (&enc.uuids, &enc.name_iids, &enc.cat_iids);
        let (nn, nc, nt) = (name_iids.len(), cat_iids.len(), uuids.len());
        let Start { mut last, mut js, mut ji, mut fs, mut fi } = at;
        out.reserve(self.room(lo, hi));
        for e in lo..hi {
            let k = self.kind[e];
            let t = self.time[e];
            let delta = t.wrapping_sub(last) as u64;
            let ev = if k == k_end {
                let r = idx(self.index[e], self.st.len(), "slice")?;
                Ev { etype: TYPE_SLICE_END, uuid: uuids[idx(self.st[r] as i64, nt, "track")?], name: 0, cat: 0,
                     ann: &[], counter: None, fo: &[], fi: &[] }
            } else if k == k_begin {
                let r = idx(self.index[e], self.st.len(), "slice")?;
                let ann = self.s_ann.row(js, &mut fs);
                js += 1;
                Ev { etype: TYPE_SLICE_BEGIN, uuid: uuids[idx(self.st[r] as i64, nt, "track")?],
                     name: name_iids[idx(self.sn[r] as i64, nn, "name")?],
                     cat: cat_iids[idx(self.sc[r] as i64, nc, "category")?], ann, counter: None,
                     fo: enc.fo.of(r), fi: enc.fi.of(r) }
            } else if k == k_instant {
                let r = idx(self.index[e], self.it.len(), "instant")?;
                let ann = self.i_ann.row(ji, &mut fi);
                ji += 1;
                Ev { etype: TYPE_INSTANT, uuid: uuids[idx(self.it[r] as i64, nt, "track")?],
                     name: name_iids[idx(self.inm[r] as i64, nn, "name")?],
                     cat: cat_iids[idx(self.ic[r] as i64, nc, "category")?], ann, counter: None, fo: &[], fi: &[] }
            } else if k == k_counter {
                let r = idx(self.index[e], self.ct.len(), "counter")?;
                Ev { etype: TYPE_COUNTER, uuid: uuids[idx(self.ct[r] as i64, nt, "track")?], name: 0, cat: 0,
                     ann: &[], counter: Some(self.cb[r]), fo: &[], fi: &[] }
            } else {
                return Err(format!("run: unknown event kind {k}"));
            };
            put_packet(out, delta, enc.seq_id, enc.flags, enc.default_uuid, enc.flow_ids, &ev);
            last = t;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- interned data

/// interned_packets(field, iids, data, off, seq_id, flags, max_bytes) -> bytes: the entries
/// `field { iid: iids[j], name/str: data[off[j]:off[j + 1]] }` of `InternedData` (the layout of
/// EventName, EventCategory, DebugAnnotationName and InternedString), in `TracePacket`s of at most
/// about `max_bytes` of entries each.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn interned_packets<'py>(
    py: Python<'py>,
    field: u32,
    iids: Column<'py, i64>,
    data: Column<'py, u8>,
    off: Column<'py, i64>,
    seq_id: u64,
    flags: u64,
    max_bytes: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let (iids, data, off) = (column(&iids), column(&data), column(&off));
    if off.len() != iids.len() + 1 {
        return Err(PyValueError::new_err("interned_packets: offsets must be one more than iids"));
    }
    let out = py
        .detach(|| {
            let mut out = Vec::new();
            let mut entries = Vec::new();
            let flush = |entries: &mut Vec<u8>, out: &mut Vec<u8>| {
                let body = key_len(P_SEQ) + encoded_len_varint(seq_id) + key_len(P_FLAGS) + encoded_len_varint(flags)
                    + key_len(P_INTERNED) + encoded_len_varint(entries.len() as u64) + entries.len();
                encode_key(T_PACKET, WireType::LengthDelimited, out);
                encode_varint(body as u64, out);
                encode_key(P_SEQ, WireType::Varint, out);
                encode_varint(seq_id, out);
                encode_key(P_FLAGS, WireType::Varint, out);
                encode_varint(flags, out);
                put_bytes(P_INTERNED, entries, out);
                entries.clear();
            };
            for j in 0..iids.len() {
                let s = row_bytes(&data, &off, j)?;
                let inner = key_len(S_IID) + encoded_len_varint(iids[j] as u64) + key_len(S_STR)
                    + encoded_len_varint(s.len() as u64) + s.len();
                let size = key_len(field) + encoded_len_varint(inner as u64) + inner;
                if !entries.is_empty() && entries.len() + size > max_bytes {
                    flush(&mut entries, &mut out);
                }
                encode_key(field, WireType::LengthDelimited, &mut entries);
                encode_varint(inner as u64, &mut entries);
                encode_key(S_IID, WireType::Varint, &mut entries);
                encode_varint(iids[j] as u64, &mut entries);
                put_bytes(S_STR, s, &mut entries);
            }
            if !entries.is_empty() {
                flush(&mut entries, &mut out);
            }
            Ok::<_, String>(out)
        })
        .map_err(PyValueError::new_err)?;
    Ok(PyBytes::new(py, &out))
}

// ---------------------------------------------------------------- rows a JSON writer cannot copy

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
fn screen_args<'py>(
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

/// varint(v) -> bytes: protobuf's varint of `v` (a negative int64 as its 64-bit two's complement),
/// for the Python encoder of the rows left to it.
#[pyfunction]
fn varint<'py>(py: Python<'py>, v: i128) -> PyResult<Bound<'py, PyBytes>> {
    if v < i64::MIN as i128 || v > u64::MAX as i128 {
        return Err(PyValueError::new_err(format!("varint: {v} is outside int64/uint64")));
    }
    let mut out = Vec::with_capacity(10);
    encode_varint(v as u64, &mut out);
    Ok(PyBytes::new(py, &out))
}

pub fn register(core: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = core.py();
    let m = PyModule::new(py, "encode")?;
    m.add_class::<ArgsTable>()?;
    m.add_class::<EventEncoder>()?;
    m.add_function(wrap_pyfunction!(interned_packets, &m)?)?;
    m.add_function(wrap_pyfunction!(screen_args, &m)?)?;
    m.add_function(wrap_pyfunction!(varint, &m)?)?;
    let fields = PyDict::new(py);
    for &(message, field, number, wire) in FIELDS {
        fields.set_item((message, field), (number, wire as u8))?;
    }
    m.add("FIELDS", fields)?;
    for (name, v) in [("TYPE_SLICE_BEGIN", TYPE_SLICE_BEGIN), ("TYPE_SLICE_END", TYPE_SLICE_END),
                      ("TYPE_INSTANT", TYPE_INSTANT), ("TYPE_COUNTER", TYPE_COUNTER)] {
        m.add(name, v)?;
    }
    m.add("MAX_DEPTH", MAX_DEPTH)?;
    m.add("PARALLEL_ROWS", PARALLEL_ROWS)?;
    for (name, v) in [("SCREEN_DEEP", SCREEN_DEEP), ("SCREEN_SURROGATE", SCREEN_SURROGATE),
                      ("SCREEN_SUSPECT", SCREEN_SUSPECT), ("SCREEN_LONG", SCREEN_LONG)] {
        m.add(name, v)?;
    }
    core.add_submodule(&m)
}
