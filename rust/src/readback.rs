//! Reading back the `.pftrace` traceconv writes, for `traceconv.readers.pftrace`: the `perfetto`
//! input (`traceconv summary run.pftrace` of a recording), the shards of a recording merged at its
//! `stop()`, a chunked recording whose flows are linked again, `python -m traceconv.record merge`.
//!
//! [`read`] walks the packets once and does what the reader's Python reference
//! (`pftrace._read_reference`, `read_pftrace(path, compiled=False)`) does per packet: each
//! sequence's incremental state (interned names, categories, annotation names and strings, its
//! clock from a `ClockSnapshot`, its `TracePacketDefaults`) cleared where a packet says so;
//! `TrackEvent` timestamps as deltas on the sequence's clock; begins and ends paired on the track
//! they were written on, with the flow ids of each slice; each event's debug annotations as the
//! compact JSON text of the args the reference would build (doubles as serde_json writes them,
//! which Python's `float()` reads as the same double as the reference's text).  What the model
//! needs Python for -- track descriptors and the `chrome_events` metadata, a few packets -- is
//! handed back as packets, in file order.  Fields are read with prost's wire primitives, the
//! numbers from the one tag table (`encode::FIELDS`), like the encoder writes them.
//!
//! It reads what traceconv writes.  Anything else it cannot be sure to read exactly as the
//! reference does -- a field traceconv never writes, a damaged packet, text that is not UTF-8, a
//! double that is not finite, a key twice in one object, a time beyond int64, nesting 48 deep --
//! makes it return why instead, and the caller reads the file with the reference.  A file cut
//! inside a packet (a killed process) is read up to that packet, as the reference does.

use indexmap::IndexSet;
use numpy::IntoPyArray;
use prost::encoding::{decode_key, decode_varint, WireType};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};

use crate::encode::{num, TYPE_COUNTER, TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_SLICE_END};

// the fields the encoder writes, from the tag table; and the few more the reader meets
use crate::encode::{
    A_ARRAY, A_BOOL, A_DICT, A_DOUBLE, A_INT, A_NAME, A_NAME_IID, A_STR, A_STR_IID, A_UINT, E_ANN,
    E_CAT as E_CAT_IIDS, E_COUNTER, E_DOUBLE, E_FLOW, E_NAME as E_NAME_IID, E_TFLOW, E_TRACK, E_TYPE,
    P_FLAGS, P_INTERNED, P_SEQ, P_TE, P_TS, T_PACKET,
};
const PACKET_KEY: u8 = (T_PACKET << 3 | WireType::LengthDelimited as u32) as u8;
const P_CLEARED: u32 = num("TracePacket", "incremental_state_cleared");
const P_CLOCK_ID: u32 = num("TracePacket", "timestamp_clock_id");
const P_DEFAULTS: u32 = num("TracePacket", "trace_packet_defaults");
const P_SNAPSHOT: u32 = num("TracePacket", "clock_snapshot");
const P_DESCRIPTOR: u32 = num("TracePacket", "track_descriptor");
const P_CHROME: u32 = num("TracePacket", "chrome_events");
const P_FIRST: u32 = num("TracePacket", "first_packet_on_sequence");
const T_UUID: u32 = num("TrackDescriptor", "uuid");
const D_CLOCK_ID: u32 = num("TracePacketDefaults", "timestamp_clock_id");
const D_EVENT: u32 = num("TracePacketDefaults", "track_event_defaults");
const D_TRACK: u32 = num("TrackEventDefaults", "track_uuid");
const C_CLOCKS: u32 = num("ClockSnapshot", "clocks");
const C_ID: u32 = num("ClockSnapshot.Clock", "clock_id");
const C_TS: u32 = num("ClockSnapshot.Clock", "timestamp");
const C_INCREMENTAL: u32 = num("ClockSnapshot.Clock", "is_incremental");
const I_CATS: u32 = num("InternedData", "event_categories");
const I_NAMES: u32 = num("InternedData", "event_names");
const I_ANN: u32 = num("InternedData", "debug_annotation_names");
const I_STRS: u32 = num("InternedData", "debug_annotation_string_values");
// (every interned entry traceconv writes is laid out as an EventName: iid, then its text)
const N_IID: u32 = num("EventName", "iid");
const N_NAME: u32 = num("EventName", "name");
const E_NAME: u32 = num("TrackEvent", "name");
const E_CATS: u32 = num("TrackEvent", "categories");
const A_PTR: u32 = num("DebugAnnotation", "pointer_value");
const A_NESTED: u32 = num("DebugAnnotation", "nested_value");
const A_LEGACY: u32 = num("DebugAnnotation", "legacy_json_value");

/// `TracePacket.SEQ_INCREMENTAL_STATE_CLEARED`, `BUILTIN_CLOCK_BOOTTIME`, and the first
/// sequence-scoped clock id (checked against the protos by the tests).
pub const SEQ_CLEARED: u64 = 1;
pub const CLOCK_BOOTTIME: u64 = 6;
const SEQ_CLOCKS: u64 = 64;
/// The last value of `TrackEvent.Type` (TYPE_STATE, checked against the protos by the tests).
pub const TYPE_MAX: u64 = 5;
/// Args nested this deep go to the reference (the model's `MAX_ARGS_DEPTH` is 64).
pub const MAX_DEPTH: usize = 48;

/// Why the file is left to the reference.
type Why = &'static str;

/// One field of a message: its number and value.
enum Val<'a> {
    Int(u64),
    Fixed(u64),
    Bytes(&'a [u8]),
}

/// The fields of a message, in wire order.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Val<'a>), Why>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        Some(self.field())
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<(u32, Val<'a>), Why> {
        let (tag, wire) = decode_key(&mut self.0).map_err(|_| "a damaged packet")?;
        let v = match wire {
            WireType::Varint => Val::Int(decode_varint(&mut self.0).map_err(|_| "a damaged packet")?),
            WireType::SixtyFourBit => {
                let (b, rest) = self.0.split_first_chunk::<8>().ok_or("a damaged packet")?;
                self.0 = rest;
                Val::Fixed(u64::from_le_bytes(*b))
            }
            WireType::LengthDelimited => {
                let n = decode_varint(&mut self.0).map_err(|_| "a damaged packet")?;
                let n = usize::try_from(n).map_err(|_| "a damaged packet")?;
                if n > self.0.len() {
                    return Err("a damaged packet");
                }
                let (b, rest) = self.0.split_at(n);
                self.0 = rest;
                Val::Bytes(b)
            }
            _ => return Err("a field of a wire type traceconv does not write"),
        };
        Ok((tag, v))
    }
}

fn int(v: &Val) -> Result<u64, Why> {
    match v {
        Val::Int(x) => Ok(*x),
        _ => Err("a field of another wire type than its proto's"),
    }
}

fn bytes<'a>(v: &Val<'a>) -> Result<&'a [u8], Why> {
    match v {
        Val::Bytes(b) => Ok(b),
        _ => Err("a field of another wire type than its proto's"),
    }
}

fn text(b: &[u8]) -> Result<&str, Why> {
    std::str::from_utf8(b).map_err(|_| "text that is not UTF-8")
}

fn time(t: i128) -> Result<i64, Why> {
    i64::try_from(t).map_err(|_| "a time beyond int64")
}

/// A sequence's incremental state.
#[derive(Default)]
struct Seq {
    names: FxHashMap<u64, u32>,
    cats: FxHashMap<u64, u32>,
    ann: FxHashMap<u64, String>,
    strs: FxHashMap<u64, Option<String>>, // None: not UTF-8
    clock: i128,
    offset: i128,
    clock_id: u64,
    track: u64,
}

/// Rows of one table: the track (an index into the uuids), times, name and category (ids into
/// the strings), args text back to back with each row's length (0: none).
#[derive(Default)]
struct Rows {
    track: Vec<u32>,
    ts: Vec<i64>,
    dur: Vec<i64>,
    name: Vec<u32>,
    cat: Vec<u32>,
    args: Vec<u8>,
    lens: Vec<i64>,
}

/// A begun slice waiting for its end: its row (made at its begin, the rows being in the order
/// of their begins) and its start.
struct Open {
    ts: i128,
    row: usize,
}

#[derive(Default)]
struct Reader {
    strings: IndexSet<String, FxBuildHasher>,
    uuids: IndexSet<u64, FxBuildHasher>,
    seqs: FxHashMap<u64, Seq>,
    stacks: FxHashMap<u64, Vec<Open>>,
    slices: Rows,
    instants: Rows,
    counters: Rows, // ts, track, and the value's bits in `dur`
    values: Vec<f64>,
    // flow ends on slices: the flow id, the slice (its row), whether the flow ends there
    flow_ids: Vec<u64>,
    flow_slices: Vec<i64>,
    flow_ends: Vec<bool>,
    other_flow_ends: u64, // flow ids on events other than a slice's begin (left out)
    // descriptor and metadata packets: their range in the file, and how many tracks were used
    // before them (the reference makes the model's tracks as they are first used)
    others: Vec<(usize, usize, usize)>,
    described: FxHashMap<u64, Vec<u8>>, // each track's last descriptor handed over
    used: IndexSet<u32, FxBuildHasher>, // names and categories in the order rows use them
    unmatched_ends: u64,
    packets: u64,
    read_to: usize, // where the last packet read ends
}

impl Reader {
    fn intern(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        match self.strings.get_index_of(s) {
            Some(i) => i as u32,
            None => self.strings.insert_full(s.to_owned()).0 as u32,
        }
    }

    /// Take out the rows of the slices still open where the file ends (their flow ends with them),
    /// as the reference does; the stacks stay, to be counted.
    fn drop_open(&mut self) {
        let open: Vec<usize> = self.stacks.values().flatten().map(|o| o.row).collect();
        if open.is_empty() {
            return;
        }
        let r = &mut self.slices;
        let n = r.ts.len();
        let mut keep = vec![true; n];
        for &k in &open {
            keep[k] = false;
        }
        let mut new_row = vec![-1i64; n];
        let old = std::mem::take(r);
        let mut start = 0usize;
        for k in 0..n {
            let len = old.lens[k] as usize;
            if keep[k] {
                new_row[k] = r.ts.len() as i64;
                r.track.push(old.track[k]);
                r.ts.push(old.ts[k]);
                r.dur.push(old.dur[k]);
                r.name.push(old.name[k]);
                r.cat.push(old.cat[k]);
                r.lens.push(old.lens[k]);
                r.args.extend_from_slice(&old.args[start..start + len]);
            }
            start += len;
        }
        let (mut ids, mut rows, mut ends) = (Vec::new(), Vec::new(), Vec::new());
        for ((&id, &row), &end) in self.flow_ids.iter().zip(&self.flow_slices).zip(&self.flow_ends) {
            let to = new_row[row as usize];
            if to >= 0 {
                ids.push(id);
                rows.push(to);
                ends.push(end);
            }
        }
        (self.flow_ids, self.flow_slices, self.flow_ends) = (ids, rows, ends);
    }

    /// The packets of `data` (a `Trace`), up to the first that is cut or not a packet.
    fn run(&mut self, data: &[u8]) -> Result<(), Why> {
        self.strings.insert(String::new());
        let mut pos = 0;
        while pos < data.len() {
            if data[pos] != PACKET_KEY {
                return Ok(()); // (the reference stops at a byte that is not a packet's key)
            }
            let mut rest = &data[pos + 1..];
            let n = decode_varint(&mut rest).map_err(|_| "a packet's length cut or damaged")?;
            let start = data.len() - rest.len();
            let end = usize::try_from(n).ok().and_then(|n| start.checked_add(n)).unwrap_or(usize::MAX);
            if end > data.len() {
                return Ok(()); // cut in the middle: what came before is kept
            }
            self.packet(&data[start..end], start, end)?;
            self.packets += 1;
            pos = end;
            self.read_to = end;
        }
        Ok(())
    }

    fn packet(&mut self, p: &[u8], start: usize, end: usize) -> Result<(), Why> {
        let (mut ts, mut sid, mut flags, mut cleared) = (0u64, 0u64, 0u64, false);
        let mut clock_id = None;
        let (mut defaults, mut interned) = (None, None);
        let mut data: Option<(u32, &[u8])> = None; // the `data` oneof: the last one on the wire
        for f in Fields(p) {
            let (tag, v) = f?;
            match tag {
                P_TS => ts = int(&v)?,
                P_SEQ => sid = int(&v)?,
                P_FLAGS => flags = int(&v)?,
                P_CLEARED => cleared = int(&v)? != 0,
                P_CLOCK_ID => clock_id = Some(int(&v)?),
                P_FIRST => {
                    int(&v)?;
                }
                P_DEFAULTS if defaults.is_none() => defaults = Some(bytes(&v)?),
                P_INTERNED if interned.is_none() => interned = Some(bytes(&v)?),
                P_TE | P_DESCRIPTOR | P_CHROME | P_SNAPSHOT if data.is_none() => data = Some((tag, bytes(&v)?)),
                _ => return Err("a packet field traceconv does not write"),
            }
        }
        // (the reference's order: clear, defaults, clock snapshot, interned data, the event)
        let seq = self.seqs.entry(sid).or_default();
        if flags & SEQ_CLEARED != 0 || cleared {
            *seq = Seq::default();
        }
        if let Some(d) = defaults {
            let (mut cid, mut track) = (0, 0);
            for f in Fields(d) {
                match f? {
                    (D_CLOCK_ID, v) => cid = int(&v)?,
                    (D_EVENT, v) => {
                        for g in Fields(bytes(&v)?) {
                            match g? {
                                (D_TRACK, v) => track = int(&v)?,
                                _ => return Err("track event defaults traceconv does not write"),
                            }
                        }
                    }
                    _ => return Err("packet defaults traceconv does not write"),
                }
            }
            seq.clock_id = cid;
            seq.track = track;
        }
        if let Some((P_SNAPSHOT, s)) = data {
            let mut clocks = Vec::new();
            for f in Fields(s) {
                let (tag, v) = f?;
                if tag != C_CLOCKS {
                    return Err("a clock snapshot field traceconv does not write");
                }
                let (mut id, mut t) = (0, 0);
                for g in Fields(bytes(&v)?) {
                    match g? {
                        (C_ID, v) => id = int(&v)?,
                        (C_TS, v) => t = int(&v)?,
                        (C_INCREMENTAL, v) => {
                            int(&v)?; // (the reference reads a sequence's clock as incremental)
                        }
                        _ => return Err("a clock field traceconv does not write"),
                    }
                }
                clocks.push((id, t));
            }
            let boot = clocks.iter().rev().find(|c| c.0 == CLOCK_BOOTTIME).map(|c| c.1);
            let seq = self.seqs.get_mut(&sid).expect("made above");
            for &(id, t) in &clocks {
                if id >= SEQ_CLOCKS {
                    seq.clock = i128::from(t);
                    seq.offset = boot.map_or(0, |b| i128::from(b) - i128::from(t));
                }
            }
        }
        if let Some(d) = interned {
            self.interned(sid, d)?;
        }
        match data {
            Some((P_TE, e)) => self.event(sid, ts, clock_id, e),
            Some((P_DESCRIPTOR, d)) => {
                // a track described again as it was last (every chunk of a recording describes
                // every track): nothing for Python to do again
                let mut uuid = 0;
                for f in Fields(d) {
                    if let (T_UUID, v) = f? {
                        uuid = int(&v)?;
                    }
                }
                if self.described.get(&uuid).is_some_and(|last| last.as_slice() == d) {
                    return Ok(());
                }
                self.described.insert(uuid, d.to_vec());
                self.others.push((start, end, self.uuids.len()));
                Ok(())
            }
            Some((P_CHROME, _)) => {
                self.others.push((start, end, self.uuids.len()));
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn interned(&mut self, sid: u64, d: &[u8]) -> Result<(), Why> {
        for f in Fields(d) {
            let (table, v) = f?;
            if ![I_NAMES, I_CATS, I_ANN, I_STRS].contains(&table) {
                return Err("interned data traceconv does not write");
            }
            let (mut iid, mut name) = (0, &b""[..]);
            for g in Fields(bytes(&v)?) {
                match g? {
                    (N_IID, v) => iid = int(&v)?,
                    (N_NAME, v) => name = bytes(&v)?,
                    _ => return Err("interned data traceconv does not write"),
                }
            }
            if table == I_STRS {
                let s = std::str::from_utf8(name).ok().map(str::to_owned);
                self.seqs.get_mut(&sid).expect("made").strs.insert(iid, s);
                continue;
            }
            let name = text(name)?;
            if table == I_ANN {
                self.seqs.get_mut(&sid).expect("made").ann.insert(iid, name.to_owned());
                continue;
            }
            let id = self.intern(name);
            let seq = self.seqs.get_mut(&sid).expect("made");
            if table == I_NAMES { seq.names.insert(iid, id) } else { seq.cats.insert(iid, id) };
        }
        Ok(())
    }

    fn event(&mut self, sid: u64, ts: u64, clock_id: Option<u64>, e: &[u8]) -> Result<(), Why> {
        let mut kind = 0;
        let mut track = None;
        let (mut name_iid, mut name) = (0u64, None::<&[u8]>);
        let (mut cat_iid, mut cat) = (None::<u64>, None::<&[u8]>);
        let mut anns = Vec::new();
        let mut counter = (false, 0u64); // (a double?, the bits or the int64)
        let mut flows = Vec::new();
        for f in Fields(e) {
            let (tag, v) = f?;
            match tag {
                E_TYPE => {
                    kind = int(&v)?;
                    if kind > TYPE_MAX {
                        // (a closed proto2 enum: protobuf keeps the type before it, in the reference)
                        return Err("a track event type Perfetto's protos do not know");
                    }
                }
                E_TRACK => track = Some(int(&v)?),
                E_NAME_IID => (name_iid, name) = (int(&v)?, None),
                E_NAME => (name_iid, name) = (0, Some(bytes(&v)?)),
                E_CAT_IIDS => match v {
                    Val::Int(x) => {
                        cat_iid.get_or_insert(x);
                    }
                    Val::Bytes(mut packed) => {
                        while !packed.is_empty() {
                            let x = decode_varint(&mut packed).map_err(|_| "a damaged packet")?;
                            cat_iid.get_or_insert(x);
                        }
                    }
                    Val::Fixed(_) => return Err("a field of another wire type than its proto's"),
                },
                E_CATS => {
                    let b = bytes(&v)?;
                    cat.get_or_insert(b);
                }
                E_ANN => anns.push(bytes(&v)?),
                E_COUNTER => counter = (false, int(&v)?),
                E_DOUBLE => match v {
                    Val::Fixed(bits) => counter = (true, bits),
                    _ => return Err("a field of another wire type than its proto's"),
                },
                E_FLOW | E_TFLOW => match v {
                    Val::Fixed(id) => flows.push((id, tag == E_TFLOW)),
                    Val::Bytes(packed) if packed.len() % 8 == 0 => {
                        for b in packed.chunks_exact(8) {
                            flows.push((u64::from_le_bytes(b.try_into().expect("8 bytes")), tag == E_TFLOW));
                        }
                    }
                    Val::Bytes(_) => return Err("a damaged packet"),
                    Val::Int(_) => return Err("a field of another wire type than its proto's"),
                },
                _ => return Err("a track event field traceconv does not write"),
            }
        }
        let seq = self.seqs.get_mut(&sid).expect("made");
        let t = if clock_id.unwrap_or(seq.clock_id) >= SEQ_CLOCKS {
            seq.clock += i128::from(ts);
            seq.clock + seq.offset
        } else {
            i128::from(ts)
        };
        let uuid = track.unwrap_or(seq.track);
        let at = self.uuids.insert_full(uuid).0 as u32;
        if ![TYPE_SLICE_BEGIN, TYPE_INSTANT].contains(&kind) {
            for a in &anns {
                check(a, 0)?; // (not read, but a damaged one fails the reference's whole packet)
            }
        }
        if kind == TYPE_SLICE_END || kind == TYPE_COUNTER {
            self.other_flow_ends += flows.len() as u64;
        }
        if kind == TYPE_SLICE_END {
            match self.stacks.get_mut(&uuid).and_then(Vec::pop) {
                Some(o) => self.slices.dur[o.row] = time(t - o.ts)?,
                None => self.unmatched_ends += 1,
            }
            return Ok(());
        }
        if kind == TYPE_COUNTER {
            let value = if counter.0 { f64::from_bits(counter.1) } else { counter.1 as i64 as f64 };
            self.counters.track.push(at);
            self.counters.ts.push(time(t)?);
            self.values.push(value);
            return Ok(());
        }
        let seq = &self.seqs[&sid];
        let name = match name {
            Some(b) => {
                let s = text(b)?.to_owned();
                self.intern(&s)
            }
            None => seq.names.get(&name_iid).copied().unwrap_or(0),
        };
        let seq = &self.seqs[&sid];
        let cat = match (cat, cat_iid) {
            (Some(b), _) => {
                let s = text(b)?.to_owned();
                self.intern(&s)
            }
            (None, Some(iid)) => seq.cats.get(&iid).copied().unwrap_or(0),
            (None, None) => 0,
        };
        let mut args = Vec::new();
        if !anns.is_empty() {
            Json { seq: &self.seqs[&sid], out: &mut args }.object(&anns, 0)?;
        }
        if kind == TYPE_SLICE_BEGIN {
            // the row now, its duration at its end (a begin never ended is taken out at the end)
            let r = &mut self.slices;
            let row = r.ts.len();
            r.track.push(at);
            r.ts.push(time(t)?);
            r.dur.push(0);
            r.name.push(name);
            r.cat.push(cat);
            self.used.extend([name, cat]);
            r.lens.push(args.len() as i64);
            r.args.extend_from_slice(&args);
            for (id, ends) in flows {
                self.flow_ids.push(id);
                self.flow_slices.push(row as i64);
                self.flow_ends.push(ends);
            }
            self.stacks.entry(uuid).or_default().push(Open { ts: t, row });
            return Ok(());
        }
        self.other_flow_ends += flows.len() as u64;
        if kind == TYPE_INSTANT {
            let r = &mut self.instants;
            r.track.push(at);
            r.ts.push(time(t)?);
            r.name.push(name);
            r.cat.push(cat);
            self.used.extend([name, cat]);
            r.lens.push(args.len() as i64);
            r.args.extend_from_slice(&args);
        }
        Ok(())
    }
}

/// One debug annotation's fields.
#[derive(Default)]
struct Ann<'a> {
    name: Option<&'a [u8]>, // the `name_field` oneof: a name, or (None) the iid
    name_iid: u64,
    value: Option<Val<'a>>, // the `value` oneof (its tag in `tag`)
    tag: u32,
    dict: Vec<&'a [u8]>,
    array: Vec<&'a [u8]>,
}

impl<'a> Ann<'a> {
    fn parse(b: &'a [u8]) -> Result<Self, Why> {
        let mut a = Ann::default();
        for f in Fields(b) {
            let (tag, v) = f?;
            match tag {
                A_NAME_IID => (a.name, a.name_iid) = (None, int(&v)?),
                A_NAME => (a.name, a.name_iid) = (Some(bytes(&v)?), 0),
                A_BOOL | A_UINT | A_INT | A_DOUBLE | A_STR | A_PTR | A_STR_IID => (a.tag, a.value) = (tag, Some(v)),
                A_NESTED | A_LEGACY => return Err("an annotation value traceconv does not write"),
                A_DICT => a.dict.push(bytes(&v)?),
                A_ARRAY => a.array.push(bytes(&v)?),
                _ => return Err("a debug annotation field traceconv does not write"),
            }
        }
        Ok(a)
    }

    /// No name, no value, no entries: the writer's `[]` (or `{}`) as an element of a list.
    fn nothing(&self) -> bool {
        self.name.is_none_or(<[u8]>::is_empty) && self.name_iid == 0 && self.value.is_none()
            && self.dict.is_empty() && self.array.is_empty()
    }
}

/// Annotations as the JSON text the reference's args make (compact, keys in order).
struct Json<'s, 'o> {
    seq: &'s Seq,
    out: &'o mut Vec<u8>,
}

impl Json<'_, '_> {
    fn object(&mut self, entries: &[&[u8]], depth: usize) -> Result<(), Why> {
        if depth >= MAX_DEPTH {
            return Err("args nested deeper than the compiled reader reads");
        }
        // (the keys so far: a set, so that an object of many keys is not checked in their square)
        let mut keys: FxHashSet<&str> = FxHashSet::with_capacity_and_hasher(entries.len(), FxBuildHasher);
        self.out.push(b'{');
        for (k, e) in entries.iter().enumerate() {
            let a = Ann::parse(e)?;
            let key = match a.name {
                Some(b) if !b.is_empty() => text(b)?,
                _ => self.seq.ann.get(&a.name_iid).map_or("", String::as_str),
            };
            if !keys.insert(key) {
                return Err("a key twice in one object");
            }
            if k > 0 {
                self.out.push(b',');
            }
            put(self.out, key)?;
            self.out.push(b':');
            self.value(&a, depth + 1)?;
        }
        self.out.push(b'}');
        Ok(())
    }

    fn value(&mut self, a: &Ann, depth: usize) -> Result<(), Why> {
        // the entries the value leaves unread must still be whole messages, as the reference's
        // parse of the packet requires
        let (dict, array): (&[&[u8]], &[&[u8]]) = match (&a.value, a.dict.is_empty()) {
            (Some(_), _) => (&a.dict, &a.array), // a value: neither is read
            (None, false) => (&[], &a.array),    // an object: its entries are read, not the list
            (None, true) => (&[], &[]),          // a list (or null): read
        };
        for e in dict.iter().chain(array) {
            check(e, depth)?;
        }
        let out = &mut *self.out;
        let Some(v) = &a.value else {
            if a.dict.len() == 1 && Ann::parse(a.dict[0])?.nothing() {
                out.extend_from_slice(b"[]");
            } else if !a.dict.is_empty() {
                self.object(&a.dict, depth)?;
            } else if !a.array.is_empty() {
                if depth >= MAX_DEPTH {
                    return Err("args nested deeper than the compiled reader reads");
                }
                self.out.push(b'[');
                for (k, e) in a.array.iter().enumerate() {
                    if k > 0 {
                        self.out.push(b',');
                    }
                    self.value(&Ann::parse(e)?, depth + 1)?;
                }
                self.out.push(b']');
            } else {
                out.extend_from_slice(b"null");
            }
            return Ok(());
        };
        match (a.tag, v) {
            (A_BOOL, Val::Int(x)) => out.extend_from_slice(if *x != 0 { b"true" } else { b"false" }),
            (A_UINT, Val::Int(x)) => put(out, x)?,
            (A_INT, Val::Int(x)) => put(out, &(*x as i64))?,
            (A_PTR, Val::Int(x)) => put(out, &format!("0x{x:x}"))?,
            (A_DOUBLE, Val::Fixed(bits)) => {
                let d = f64::from_bits(*bits);
                if !d.is_finite() {
                    return Err("a double that is not finite");
                }
                put(out, &d)?
            }
            (A_STR, Val::Bytes(b)) => put(out, text(b)?)?,
            (A_STR_IID, Val::Int(iid)) => match self.seq.strs.get(iid) {
                None => out.extend_from_slice(b"\"\""),
                Some(Some(s)) => put(out, s)?,
                Some(None) => return Err("text that is not UTF-8"),
            },
            _ => return Err("an annotation value traceconv does not write"),
        }
        Ok(())
    }
}

/// A debug annotation checked whole (its entries too, to `MAX_DEPTH`) without being read.
fn check(b: &[u8], depth: usize) -> Result<(), Why> {
    if depth >= MAX_DEPTH {
        return Err("args nested deeper than the compiled reader reads");
    }
    let a = Ann::parse(b)?;
    for e in a.dict.iter().chain(&a.array) {
        check(e, depth + 1)?;
    }
    Ok(())
}

/// A key or a scalar as serde_json writes it (its string escapes; doubles as ryu's shortest
/// round-trip text, which Python's `float()` reads back as the same double).
fn put<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) -> Result<(), Why> {
    serde_json::to_writer(out, v).map_err(|_| "a value serde_json cannot write")
}

fn rows_dict<'py>(py: Python<'py>, r: Rows) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("track", r.track.into_pyarray(py))?;
    d.set_item("ts", r.ts.into_pyarray(py))?;
    d.set_item("dur", r.dur.into_pyarray(py))?;
    d.set_item("name", r.name.into_pyarray(py))?;
    d.set_item("cat", r.cat.into_pyarray(py))?;
    d.set_item("args", PyBytes::new(py, &r.args))?;
    d.set_item("lens", r.lens.into_pyarray(py))?;
    Ok(d)
}

/// read(data) -> dict | str
///
/// The events of a `.pftrace` traceconv wrote (`data`: the whole file), or why it must be read by
/// the reference.  The dict holds `strings` (names and categories; id 0 is ""), `uuids` (the
/// events' tracks, in the order each was first used), `others` (the descriptor and metadata
/// packets, `(start, end, uuids used before it)` in `data`, in file order; a descriptor the same
/// bytes as its track's last one is left out), `used` (the ids of
/// the strings the rows use, in the order the reference interns them: a slice's name and category
/// at its end, an instant's at its place), `slices` and `instants` (dicts of columns:
/// `track` an index into `uuids`, `ts`, `dur`, `name`, `cat`, `args` and `lens`), `counters`
/// (`track`, `ts`, `value`), `flows` (the flow ids on slices: `id`, `slice` (its row), `ends` (a
/// terminating id)), `other_flow_ends` (flow ids on other events), `unmatched_ends`, `open_begins`,
/// `packets` and `read_to` (where the last packet read ends).  Runs without the GIL.
#[pyfunction]
fn read<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    let (r, done) = py.detach(|| {
        let mut r = Reader::default();
        let done = r.run(data);
        if done.is_ok() {
            r.drop_open();
        }
        (r, done)
    });
    if let Err(why) = done {
        return Ok(why.into_pyobject(py)?.into_any());
    }
    let d = PyDict::new(py);
    d.set_item("strings", PyList::new(py, r.strings.iter())?)?;
    d.set_item("uuids", r.uuids.into_iter().collect::<Vec<u64>>().into_pyarray(py))?;
    d.set_item("others", r.others)?;
    d.set_item("used", r.used.into_iter().filter(|&i| i != 0).collect::<Vec<u32>>().into_pyarray(py))?;
    d.set_item("open_begins", r.stacks.values().map(Vec::len).sum::<usize>())?;
    d.set_item("slices", rows_dict(py, r.slices)?)?;
    d.set_item("instants", rows_dict(py, r.instants)?)?;
    let c = PyDict::new(py);
    c.set_item("track", r.counters.track.into_pyarray(py))?;
    c.set_item("ts", r.counters.ts.into_pyarray(py))?;
    c.set_item("value", r.values.into_pyarray(py))?;
    d.set_item("counters", c)?;
    d.set_item("unmatched_ends", r.unmatched_ends)?;
    let f = PyDict::new(py);
    f.set_item("id", r.flow_ids.into_pyarray(py))?;
    f.set_item("slice", r.flow_slices.into_pyarray(py))?;
    f.set_item("ends", r.flow_ends.into_pyarray(py))?;
    d.set_item("flows", f)?;
    d.set_item("other_flow_ends", r.other_flow_ends)?;
    d.set_item("packets", r.packets)?;
    d.set_item("read_to", r.read_to)?;
    Ok(d.into_any())
}

pub fn register(core: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(core.py(), "readback")?;
    m.add_function(wrap_pyfunction!(read, &m)?)?;
    for (name, v) in [("SEQ_CLEARED", SEQ_CLEARED), ("CLOCK_BOOTTIME", CLOCK_BOOTTIME), ("TYPE_MAX", TYPE_MAX)] {
        m.add(name, v)?;
    }
    m.add("MAX_DEPTH", MAX_DEPTH)?;
    core.add_submodule(&m)
}
