//! The Perfetto protobuf encoding of events and their args, for `traceconv.writers.perfetto`
//! (and the args screen of `traceconv.writers.chrome_json`).
//!
//! * **The tag table** (here).  [`FIELDS`] holds the field number and wire type of every field
//!   traceconv writes by hand -- the one table of the project: the Python writer builds its few
//!   hand-made fields from it (`_core.encode.FIELDS`) and the tests check every entry against the
//!   descriptors of Perfetto's own protos (`perfetto_trace_pb2`).  Bytes are written with prost's
//!   encoding primitives (`prost::encoding`: keys, varints, lengths): a message struct per event
//!   would cost an allocation per annotation for nothing (the wire bytes are the same).
//! * **Args** (`args.rs`, its predictions in `args/predict.rs`).  Each event's args are the compact
//!   JSON text of an object (the model's spilled args column).  [`ArgsTable::collect`] (pass 1)
//!   reads every row with serde_json and numbers every key (an annotation name, by first
//!   appearance) and counts every string value, so that the interned data can be written before the
//!   first event; [`ArgsTable::encode_args`] (pass 2) reads a step's rows again with serde_json --
//!   straight from its deserializer into protobuf bytes, no value tree -- into repeated
//!   `TrackEvent.debug_annotations`.  Both passes first check a row against the shapes of the rows
//!   before it ([`Pred`]: keys in the same order, compared byte for byte; a value the same text as
//!   last time under that key is not read again; only a value that differs is read by serde_json),
//!   and read it whole when it is not as predicted: the same results either way. The value mapping
//!   is the writer's Python reference `value_fields` on what orjson makes of the text (see the
//!   module docstring of `traceconv.writers.perfetto`); serde_json's `float_roundtrip` gives every
//!   double exactly as Python's `float(text)`.  The rows it leaves to the Python encoder are
//!   flagged: a key repeated in one object (Python keeps the last value), text serde_json refuses
//!   (a lone surrogate escape, bytes that are not UTF-8, NaN, a number beyond the double range,
//!   anything not JSON, a row that is not an object), nesting 60 deep or more, and `-0` (serde_json
//!   reads it as the double -0.0, orjson as the integer 0).
//! * **Packets** (`packets.rs`).  [`EventEncoder::run`] writes the `TracePacket`s of a step of the
//!   writer's event stream: with two cores and enough events, in pieces that this thread and one
//!   more take in turn, each piece's args and then its packets. The GIL is released while it
//!   works; its pieces' buffers and predictions are kept from step to step.  The
//!   interned data's packets too (`interned_packets`).
//! * **The screen** (`screen.rs`): which args rows the Chrome JSON writer cannot copy as they are.

use prost::encoding::{encode_key, encode_varint, WireType};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

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
    // read back only (`readback.rs`): traceconv does not write these, Perfetto's other writers do
    ("TracePacket", "incremental_state_cleared", 41, WireType::Varint),
    ("TracePacket", "timestamp_clock_id", 58, WireType::Varint),
    ("TrackEvent", "categories", 22, WireType::LengthDelimited),
    ("TrackEvent", "name", 23, WireType::LengthDelimited),
    ("DebugAnnotation", "pointer_value", 7, WireType::Varint),
    ("DebugAnnotation", "nested_value", 8, WireType::LengthDelimited),
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
pub(crate) const fn num(message: &str, field: &str) -> u32 {
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

pub(crate) const T_PACKET: u32 = num("Trace", "packet");
pub(crate) const P_TS: u32 = num("TracePacket", "timestamp");
pub(crate) const P_SEQ: u32 = num("TracePacket", "trusted_packet_sequence_id");
pub(crate) const P_TE: u32 = num("TracePacket", "track_event");
pub(crate) const P_INTERNED: u32 = num("TracePacket", "interned_data");
pub(crate) const P_FLAGS: u32 = num("TracePacket", "sequence_flags");
pub(crate) const E_CAT: u32 = num("TrackEvent", "category_iids");
pub(crate) const E_ANN: u32 = num("TrackEvent", "debug_annotations");
pub(crate) const E_TYPE: u32 = num("TrackEvent", "type");
pub(crate) const E_NAME: u32 = num("TrackEvent", "name_iid");
pub(crate) const E_TRACK: u32 = num("TrackEvent", "track_uuid");
pub(crate) const E_COUNTER: u32 = num("TrackEvent", "counter_value");
pub(crate) const E_DOUBLE: u32 = num("TrackEvent", "double_counter_value");
pub(crate) const E_FLOW: u32 = num("TrackEvent", "flow_ids");
pub(crate) const E_TFLOW: u32 = num("TrackEvent", "terminating_flow_ids");
pub(crate) const A_NAME_IID: u32 = num("DebugAnnotation", "name_iid");
pub(crate) const A_BOOL: u32 = num("DebugAnnotation", "bool_value");
pub(crate) const A_UINT: u32 = num("DebugAnnotation", "uint_value");
pub(crate) const A_INT: u32 = num("DebugAnnotation", "int_value");
pub(crate) const A_DOUBLE: u32 = num("DebugAnnotation", "double_value");
pub(crate) const A_STR: u32 = num("DebugAnnotation", "string_value");
pub(crate) const A_NAME: u32 = num("DebugAnnotation", "name");
pub(crate) const A_DICT: u32 = num("DebugAnnotation", "dict_entries");
pub(crate) const A_ARRAY: u32 = num("DebugAnnotation", "array_values");
pub(crate) const A_STR_IID: u32 = num("DebugAnnotation", "string_value_iid");
pub(crate) const S_IID: u32 = num("InternedString", "iid");
pub(crate) const S_STR: u32 = num("InternedString", "str");

/// TrackEvent.Type values (checked against the protos in the tests too).
pub const TYPE_SLICE_BEGIN: u64 = 1;
pub const TYPE_SLICE_END: u64 = 2;
pub const TYPE_INSTANT: u64 = 3;
pub const TYPE_COUNTER: u64 = 4;

/// Rows nested this deep (the row's object is depth 0) go to the Python encoder.
pub const MAX_DEPTH: usize = 60;
/// Keys per object checked for repeats; larger objects go to the Python encoder.
const MAX_KEYS: usize = 1024;
/// Pass 1 runs on two threads from this many rows in a call, and a step of pass 2 from this many
/// events.
pub const PARALLEL_ROWS: usize = 8192;
/// On two threads a step of pass 2 is cut into pieces of this many events, which the calling thread
/// and one more ([`both`]) take in turn as each finishes one, so that neither waits for the other at
/// the step's end for longer than a piece takes; each piece's args rows are encoded and its packets
/// made by one task.
pub const PIECE_EVENTS: usize = 4096;

/// Whether this machine has a second core for the encoder's two threads.
fn two_cores() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// `a` on this thread and `b` on a thread of its own at once; their results.  For the steps of
/// pass 2: the calling thread works instead of waiting while two of rayon's threads, asleep
/// between steps, are woken for the step (1M events: 10-30 ms less; pass 1, whose calls follow one
/// another on a thread of the writer's, measured no faster this way and keeps rayon's `join`).
fn both<A: Send, B: Send>(a: impl FnOnce() -> A + Send, b: impl FnOnce() -> B + Send) -> (A, B) {
    std::thread::scope(|s| {
        let other = s.spawn(b);
        let here = a();
        (here, other.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    })
}

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

mod args;
mod packets;
mod screen;

use args::ArgsTable;
use packets::{interned_packets, EventEncoder};
use screen::{screen_args, SCREEN_DEEP, SCREEN_LONG, SCREEN_SURROGATE, SCREEN_SUSPECT};

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
    m.add("PIECE_EVENTS", PIECE_EVENTS)?;
    for (name, v) in [("SCREEN_DEEP", SCREEN_DEEP), ("SCREEN_SURROGATE", SCREEN_SURROGATE),
                      ("SCREEN_SUSPECT", SCREEN_SUSPECT), ("SCREEN_LONG", SCREEN_LONG)] {
        m.add(name, v)?;
    }
    core.add_submodule(&m)
}
