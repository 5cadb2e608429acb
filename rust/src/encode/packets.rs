//! The packets of the writer's event stream ([`EventEncoder`]: a step at a time, its args by
//! `args.rs`; on two threads from [`PARALLEL_ROWS`] events, in pieces of [`PIECE_EVENTS`]) and of
//! its interned data ([`interned_packets`]).

use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use super::args::{row_bytes, ArgsTable, Encoded, Pred};
use super::{both, key_len, put_bytes, two_cores, E_CAT, E_COUNTER, E_DOUBLE, E_FLOW, E_NAME, E_TFLOW, E_TRACK,
            E_TYPE, PARALLEL_ROWS, PIECE_EVENTS, P_FLAGS, P_INTERNED, P_SEQ, P_TE, P_TS, S_IID, S_STR, TYPE_COUNTER,
            TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_SLICE_END, T_PACKET};
use crate::nest::{column, same_length, Column};

fn arr<'py, T: numpy::Element>(py: Python<'py>, a: &Py<PyArray1<T>>) -> PyResult<PyReadonlyArray1<'py, T>> {
    Ok(a.bind(py).try_readonly()?)
}

fn slice<'a, T: numpy::Element>(a: &'a PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice().map_err(|e| PyValueError::new_err(format!("a column that is not contiguous: {e}")))
}

/// EventEncoder(table, codes, seq_id, flags (0: no sequence_flags field), uuids, iids, slices, instants, counters,
/// flows_out, flows_in, last, default_uuid=0, parallel_rows=8192, flow_ids=(1, 0), piece_events=4096)
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
/// -- `flow_ids` / `terminating_flow_ids`.  `last` is the time the first event's delta is from.  A
/// step of `parallel_rows` events or more is encoded on two threads, in pieces of `piece_events`.
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
    /// events per piece of a step on two threads ([`PIECE_EVENTS`])
    piece_events: usize,
    /// a step's pieces (see [`Piece`]): their predictions are kept from step to step, and their
    /// buffers too once `keeps`
    pieces: Vec<Piece>,
    keeps: bool,
}

/// One piece of a step: its slice begins' and instants' args rows, their annotations, and its
/// packets, made by one task.  Each piece has its own predictions of pass 2 ([`Pred`]), kept from
/// step to step (piece k of each step: rows of the same part of the stream's windows), and its
/// buffers: made anew for each step they were fresh mappings the system zeroed page by page.
#[derive(Default)]
struct Piece {
    pred_s: Pred,
    pred_i: Pred,
    rows_s: Vec<i64>,
    rows_i: Vec<i64>,
    s: Encoded,
    i: Encoded,
    packets: Vec<u8>,
    /// its packets are made (else some of its rows were left to Python, and they wait for them)
    done: bool,
}

impl Piece {
    /// Its buffers given back (its predictions kept).
    fn release(&mut self) {
        let (pred_s, pred_i) = (std::mem::take(&mut self.pred_s), std::mem::take(&mut self.pred_i));
        *self = Piece { pred_s, pred_i, ..Default::default() };
    }
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
                        last, default_uuid = 0, parallel_rows = PARALLEL_ROWS, flow_ids = (1, 0),
                        piece_events = PIECE_EVENTS))]
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
        piece_events: usize,
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
            last, flow_ids, parallel_rows, piece_events: piece_events.max(1), pieces: Vec::new(), keeps: false,
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
        let table = self.table.borrow(py);
        let args: &ArgsTable = &table;
        // the step in pieces, on two threads from `parallel_rows` events: each piece's args rows
        // encoded and, unless one was left to Python, its packets made, in one task
        let par = self.parallel_rows;
        let two = n >= par.max(2) && two_cores();
        let each = self.piece_events;
        let count = if two { n.div_ceil(each) } else { 1 };
        let mut pieces = std::mem::take(&mut self.pieces);
        if pieces.len() < count {
            pieces.resize_with(count, Default::default);
        }
        let size_of = |k: usize| if two { (k * each).min(n) } else { k * n };
        let at = |k: usize| if k == 0 { self.last } else { time[size_of(k) - 1] };
        let cols = StepCols { kind: &kind, time: &time, index: &index, st, sn, sc, it, inm, ic, ct, cb };
        let work = |k: usize, p: &mut Piece| -> Result<(), String> {
            let (lo, hi) = (size_of(k), size_of(k + 1));
            p.rows_s.clear();
            p.rows_i.clear();
            for e in lo..hi {
                if kind[e] == k_begin {
                    p.rows_s.push(index[e]);
                } else if kind[e] == k_instant {
                    p.rows_i.push(index[e]);
                }
            }
            args.encode(sd, so, &p.rows_s, &mut p.pred_s, &mut p.s)?;
            args.encode(id, io, &p.rows_i, &mut p.pred_i, &mut p.i)?;
            p.packets.clear();
            p.done = p.s.2.iter().chain(&p.i.2).all(|&f| f == 0);
            if p.done {
                let no: &[Vec<u8>] = &[];
                cols.assembly(&*self, &p.s, &p.i, no, no).packets(lo, hi, at(k), &mut p.packets)?;
            }
            Ok(())
        };
        py.detach(|| {
            if two {
                // this thread and another take the pieces in turn, each the next one left
                let queue = std::sync::Mutex::new(pieces[..count].iter_mut().enumerate());
                let take = || -> Result<(), String> {
                    loop {
                        // (the lock is let go at the statement's end, before the piece's work)
                        let next = queue.lock().map_err(|_| "run: a piece failed".to_string())?.next();
                        let Some((k, p)) = next else { return Ok(()) };
                        work(k, p)?;
                    }
                };
                let (here, there) = both(take, take);
                here.and(there)
            } else {
                work(0, &mut pieces[0])
            }
        })
        .map_err(PyValueError::new_err)?;
        // the rows left to the Python encoder, all at once for each table, in order; then the
        // packets of the pieces that waited for them
        if pieces[..count].iter().any(|p| !p.done) {
            let mut parts: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
            for (w, part) in parts.iter_mut().enumerate() {
                let left: Vec<i64> = pieces[..count].iter()
                    .flat_map(|p| {
                        let (rows, (_, _, flags)) = if w == 0 { (&p.rows_s, &p.s) } else { (&p.rows_i, &p.i) };
                        rows.iter().zip(flags.iter()).filter(|(_, &f)| f != 0).map(|(&r, _)| r)
                    })
                    .collect();
                if !left.is_empty() {
                    let got = fallback.call1((w, left.clone().into_pyarray(py)))?;
                    let list = got.cast::<PyList>()?;
                    if list.len() != left.len() {
                        return Err(PyValueError::new_err("fallback: one bytes object per row expected"));
                    }
                    for x in list.iter() {
                        part.push(x.cast::<PyBytes>()?.as_bytes().to_vec());
                    }
                }
            }
            let (mut fs, mut fi) = (0, 0);
            for (k, p) in pieces[..count].iter_mut().enumerate() {
                let (ns, ni) = (p.s.2.iter().filter(|&&f| f != 0).count(), p.i.2.iter().filter(|&&f| f != 0).count());
                if !p.done {
                    let (lo, hi) = (size_of(k), size_of(k + 1));
                    cols.assembly(&*self, &p.s, &p.i, &parts[0][fs..fs + ns], &parts[1][fi..fi + ni])
                        .packets(lo, hi, at(k), &mut p.packets)
                        .map_err(PyValueError::new_err)?;
                    p.done = true;
                }
                (fs, fi) = (fs + ns, fi + ni);
            }
        }
        // the pieces' packets into the caller's buffer (kept: they are not handed over), or
        // without a buffer, into a new one
        let size: usize = pieces[..count].iter().map(|p| p.packets.len()).sum();
        let arr = match buf {
            None if count == 1 => std::mem::take(&mut pieces[0].packets).into_pyarray(py),
            None => {
                let mut all = Vec::with_capacity(size);
                for p in &pieces[..count] {
                    all.extend_from_slice(&p.packets);
                }
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
                let mut o = 0;
                for p in &pieces[..count] {
                    dst[o..o + p.packets.len()].copy_from_slice(&p.packets);
                    o += p.packets.len();
                }
                drop(w);
                b
            }
        };
        // the pieces' buffers kept for the next steps once a step has been cut in pieces (a
        // conversion's; its windows' last steps are often too short to cut): on one thread (a
        // merge's worker, whose heap keeps what it frees) the buffers freed here serve the next
        // step's allocations, and kept beside them they raised its peak (+3-5 MiB)
        self.keeps |= two;
        if !self.keeps {
            pieces.iter_mut().for_each(Piece::release);
        }
        self.pieces = pieces;
        if n > 0 {
            self.last = time[n - 1];
        }
        Ok((arr, size))
    }
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

/// A step's events (their kind, time and row) and the columns of the rows, borrowed.
#[derive(Clone, Copy)]
struct StepCols<'a> {
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
}

impl<'a> StepCols<'a> {
    /// The assembly of a piece's packets, given its annotations and those the Python encoder made
    /// of its rows left to it.
    fn assembly(self, enc: &'a EventEncoder, s: &'a Encoded, i: &'a Encoded, s_py: &'a [Vec<u8>],
                i_py: &'a [Vec<u8>]) -> Assembly<'a> {
        Assembly {
            enc,
            c: self,
            s_ann: Anns { text: &s.0, ends: &s.1, flags: &s.2, python: s_py },
            i_ann: Anns { text: &i.0, ends: &i.1, flags: &i.2, python: i_py },
        }
    }
}

/// A piece's events, the columns and annotations its packets are made of, borrowed (the rest is
/// the encoder's).
struct Assembly<'a> {
    enc: &'a EventEncoder,
    c: StepCols<'a>,
    s_ann: Anns<'a>,
    i_ann: Anns<'a>,
}

impl Assembly<'_> {
    /// About the bytes of the packets of events `lo..hi` (the piece's): its annotations, and a
    /// packet's own fields.
    fn room(&self, lo: usize, hi: usize) -> usize {
        self.s_ann.text.len() + self.i_ann.text.len() + 48 * (hi - lo)
    }

    /// The packets of events `lo..hi` (the piece's), added to `out`; `last` is the time the
    /// first one's delta is from.
    fn packets(&self, lo: usize, hi: usize, mut last: i64, out: &mut Vec<u8>) -> Result<(), String> {
        let enc = self.enc;
        let [k_begin, k_end, k_instant, k_counter] = enc.codes;
        let (uuids, name_iids, cat_iids) = (&enc.uuids, &enc.name_iids, &enc.cat_iids);
        let (nn, nc, nt) = (name_iids.len(), cat_iids.len(), uuids.len());
        let StepCols { kind, time, index, st, sn, sc, it, inm, ic, ct, cb } = self.c;
        let (mut js, mut ji, mut fs, mut fi) = (0, 0, 0, 0);
        out.reserve(self.room(lo, hi));
        for e in lo..hi {
            let k = kind[e];
            let t = time[e];
            let delta = t.wrapping_sub(last) as u64;
            let ev = if k == k_end {
                let r = idx(index[e], st.len(), "slice")?;
                Ev { etype: TYPE_SLICE_END, uuid: uuids[idx(st[r] as i64, nt, "track")?], name: 0, cat: 0,
                     ann: &[], counter: None, fo: &[], fi: &[] }
            } else if k == k_begin {
                let r = idx(index[e], st.len(), "slice")?;
                let ann = self.s_ann.row(js, &mut fs);
                js += 1;
                Ev { etype: TYPE_SLICE_BEGIN, uuid: uuids[idx(st[r] as i64, nt, "track")?],
                     name: name_iids[idx(sn[r] as i64, nn, "name")?],
                     cat: cat_iids[idx(sc[r] as i64, nc, "category")?], ann, counter: None,
                     fo: enc.fo.of(r), fi: enc.fi.of(r) }
            } else if k == k_instant {
                let r = idx(index[e], it.len(), "instant")?;
                let ann = self.i_ann.row(ji, &mut fi);
                ji += 1;
                Ev { etype: TYPE_INSTANT, uuid: uuids[idx(it[r] as i64, nt, "track")?],
                     name: name_iids[idx(inm[r] as i64, nn, "name")?],
                     cat: cat_iids[idx(ic[r] as i64, nc, "category")?], ann, counter: None, fo: &[], fi: &[] }
            } else if k == k_counter {
                let r = idx(index[e], ct.len(), "counter")?;
                Ev { etype: TYPE_COUNTER, uuid: uuids[idx(ct[r] as i64, nt, "track")?], name: 0, cat: 0,
                     ann: &[], counter: Some(cb[r]), fo: &[], fi: &[] }
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
pub(super) fn interned_packets<'py>(
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
