//! A batch of the scanner's rows into what the reader (`traceconv.readers.chrome.reader`) takes
//! in bulk: [`split`] and [`Pairs`] (see the module docstring of `scan`).

use indexmap::IndexSet;
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rustc_hash::FxBuildHasher;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use smallvec::SmallVec;
use std::borrow::Cow;
use std::fmt;
use std::sync::Mutex;

use super::{
    lock, F_ARGS, F_BIND, F_BP, F_DUR, F_ID, F_ID_U64, F_PH, F_PID, F_PID_U64, F_S, F_TID,
    F_TID_U64, F_TS, SLOW,
};
use crate::nest::{column, same_length, Column};

/// The (pid, tid) pairs the reader has placed, each with its id (the order it was first seen
/// in): the reader keeps each pair's track in an array indexed by these ids, so that placing a
/// batch of rows is one hash lookup per row here and one `thread()` call per new pair there.
/// A pair is its two int64 columns and which of them hold an unsigned 64-bit id's bits (`big`:
/// 1 the pid, 2 the tid), so that such an id and a negative one with the same bits stay apart.
#[pyclass(frozen, module = "traceconv._core.scan")]
pub struct Pairs {
    table: Mutex<IndexSet<(i64, i64, u8), FxBuildHasher>>,
}

/// An id column's value as Python's int: its unsigned 64-bit value when `big`.
fn id_value(v: i64, big: bool) -> i128 {
    if big {
        i128::from(v as u64)
    } else {
        i128::from(v)
    }
}

#[pymethods]
impl Pairs {
    #[new]
    fn new() -> Self {
        Pairs {
            table: Mutex::new(IndexSet::default()),
        }
    }

    fn __len__(&self) -> usize {
        lock(&self.table).len()
    }

    /// ids(pid, tid, big=None) -> (ids, new): each row's pair id (int64), and the pairs this call
    /// added, in id order, as Python ints (an unsigned id as its value).  Runs without the GIL.
    #[pyo3(signature = (pid, tid, big=None))]
    #[allow(clippy::type_complexity)]
    fn ids<'py>(
        &self,
        py: Python<'py>,
        pid: Column<'py, i64>,
        tid: Column<'py, i64>,
        big: Option<Column<'py, u8>>,
    ) -> PyResult<(Bound<'py, PyArray1<i64>>, Vec<(i128, i128)>)> {
        let (pid, tid) = (column(&pid), column(&tid));
        let big = big.as_ref().map(column);
        same_length("ids", &[pid.len(), tid.len()])?;
        if let Some(b) = &big {
            same_length("ids", &[pid.len(), b.len()])?;
        }
        let (ids, new) = py.detach(|| {
            let mut t = lock(&self.table);
            let before = t.len();
            let ids: Vec<i64> = (0..pid.len())
                .map(|r| {
                    let b = big.as_ref().map_or(0, |b| b[r] & 3);
                    t.insert_full((pid[r], tid[r], b)).0 as i64
                })
                .collect();
            let new: Vec<(i128, i128)> = (before..t.len())
                .filter_map(|k| t.get_index(k).copied())
                .map(|(p, q, b)| (id_value(p, b & 1 != 0), id_value(q, b & 2 != 0)))
                .collect();
            (ids, new)
        });
        Ok((ids.into_pyarray(py), new))
    }
}

/// The counter tracks the reader has made of the scanner's `C` rows: one per (pid, the event's
/// name id, the args key), numbered in the order first seen, as [`Pairs`] numbers threads.
#[pyclass(frozen, module = "traceconv._core.scan")]
pub struct Counters {
    table: Mutex<CounterTable>,
}

#[derive(Default)]
struct CounterTable {
    keys: IndexSet<Box<str>, FxBuildHasher>,
    /// (pid, whether it holds an unsigned id's bits, name id, key id)
    combos: IndexSet<(i64, bool, i32, u32), FxBuildHasher>,
}

#[pymethods]
impl Counters {
    #[new]
    fn new() -> Self {
        Counters {
            table: Mutex::new(CounterTable::default()),
        }
    }

    fn __len__(&self) -> usize {
        lock(&self.table).combos.len()
    }
}

/// A counter event's members: (key, value) in text order.
type Members<'a> = SmallVec<[(Cow<'a, str>, f64); 4]>;

/// A `C` event's samples, from its compacted args text: `(key, value)` per member, in text order;
/// None unless every member is a number a double holds as Python's `float()` of orjson's value
/// would (an integer of at most 64 bits, or a plain decimal) and no key repeats -- any other
/// event the general decoder reads (a string or boolean value, `{}`, a key twice).
fn counter_samples(args: &[u8]) -> Option<Members<'_>> {
    struct Samples<'de>(Members<'de>, bool);
    impl<'de> Deserialize<'de> for Samples<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Samples<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("an args object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                    let mut out = Samples(SmallVec::new(), true);
                    while let Some(k) = map.next_key::<Cow<'de, str>>()? {
                        let raw = map.next_value::<&'de RawValue>()?.get();
                        let v = number(raw);
                        match v {
                            Some(x) if out.1 && !out.0.iter().any(|(q, _)| *q == k) => {
                                out.0.push((k, x))
                            }
                            _ => out.1 = false,
                        }
                    }
                    Ok(out)
                }
            }
            d.deserialize_map(V)
        }
    }
    let Samples(samples, ok) = serde_json::from_slice::<Samples>(args).ok()?;
    (ok && !samples.is_empty()).then_some(samples)
}

/// A number token as a double, as Python's `float()` of what orjson reads it as: an integer of at
/// most 64 bits rounded to the nearest double, a decimal without exponent correctly rounded; None
/// for anything else (a bigger integer, which orjson reads as a double of its own, is left to it).
fn number(raw: &str) -> Option<f64> {
    let b = raw.as_bytes();
    if !matches!(b.first(), Some(b'-' | b'0'..=b'9')) || b.iter().any(|&c| c == b'e' || c == b'E') {
        return None;
    }
    if b.contains(&b'.') {
        return raw.parse::<f64>().ok();
    }
    raw.parse::<i64>()
        .map(|v| v as f64)
        .or_else(|_| raw.parse::<u64>().map(|v| v as f64))
        .ok()
}

/// The counters of a batch (see [`split`]): a sample per member of each `C` row's args.
struct CounterPart {
    rows: Vec<i64>,
    ts: Vec<i64>,
    /// each sample's counter (the [`Counters`] table's number of its pid, name and key)
    ids: Vec<i64>,
    value: Vec<f64>,
    /// the counters this batch added to the table, in number order: (pid, name id, key)
    new: Vec<(i128, i32, String)>,
    top: i64,
}

/// One category of a batch's rows (see [`split`]): the rows, their place, names and times, and
/// (X rows and instants) their args gathered back to back.
struct Part {
    rows: Vec<i64>,
    ts: Vec<i64>,
    pid: Vec<i64>,
    tid: Vec<i64>,
    name: Vec<i32>,
    cat: Vec<i32>,
    args: Vec<u8>,
    lens: Vec<i64>,
    /// X: duration; flows: id
    val: Vec<i64>,
    /// flows: the phase; instants: the scope letter (`t` when the event has no `s`)
    letter: Vec<u8>,
    /// flows: `bp: "e"`
    bp_e: Vec<bool>,
    /// begins and ends: the event has an args member (an object, maybe `{}`)
    has_args: Vec<bool>,
    /// X, flows, begins and ends: which of pid (1) and tid (2) hold an unsigned 64-bit id
    big: Vec<u8>,
    /// X, begins and ends: v2 flows' `bind_id` (0 for none) ...
    bind: Vec<i64>,
    /// ... and 1 `flow_in`, 2 `flow_out`, 4 the event has a `bind_id`
    flow: Vec<u8>,
    /// the latest time (an X's end), i64::MIN if none
    top: i64,
}

impl Part {
    /// Room for `rows` rows and `text` bytes of args.
    fn with_room(rows: usize, text: usize) -> Self {
        Part {
            rows: Vec::with_capacity(rows),
            ts: Vec::with_capacity(rows),
            pid: Vec::with_capacity(rows),
            tid: Vec::with_capacity(rows),
            name: Vec::with_capacity(rows),
            cat: Vec::with_capacity(rows),
            args: Vec::with_capacity(text),
            lens: Vec::with_capacity(rows),
            val: Vec::with_capacity(rows),
            letter: Vec::with_capacity(rows),
            bp_e: Vec::with_capacity(rows),
            has_args: Vec::with_capacity(rows),
            big: Vec::with_capacity(rows),
            bind: Vec::with_capacity(rows),
            flow: Vec::with_capacity(rows),
            top: i64::MIN,
        }
    }

    fn into_dict<'py>(self, py: Python<'py>, d: &Bound<'py, PyDict>, pre: &str) -> PyResult<()> {
        let Part {
            rows,
            ts,
            pid,
            tid,
            name,
            cat,
            args,
            lens,
            val,
            letter,
            bp_e,
            has_args,
            big,
            bind,
            flow,
            top,
        } = self;
        d.set_item(format!("{pre}rows"), rows.into_pyarray(py))?;
        d.set_item(format!("{pre}ts"), ts.into_pyarray(py))?;
        d.set_item(format!("{pre}pid"), pid.into_pyarray(py))?;
        d.set_item(format!("{pre}tid"), tid.into_pyarray(py))?;
        d.set_item(format!("{pre}name"), name.into_pyarray(py))?;
        d.set_item(format!("{pre}cat"), cat.into_pyarray(py))?;
        d.set_item(format!("{pre}args"), args.into_pyarray(py))?;
        d.set_item(format!("{pre}lens"), lens.into_pyarray(py))?;
        d.set_item(format!("{pre}val"), val.into_pyarray(py))?;
        d.set_item(format!("{pre}letter"), letter.into_pyarray(py))?;
        d.set_item(format!("{pre}bp_e"), bp_e.into_pyarray(py))?;
        d.set_item(format!("{pre}has_args"), has_args.into_pyarray(py))?;
        d.set_item(format!("{pre}big"), big.into_pyarray(py))?;
        d.set_item(format!("{pre}bind"), bind.into_pyarray(py))?;
        d.set_item(format!("{pre}flow"), flow.into_pyarray(py))?;
        d.set_item(format!("{pre}top"), top)?;
        Ok(())
    }
}

/// split(flags, ph, name, cat, ts, dur, pid, tid, id, s, bp, bind, flow, args, args_off, smap, base,
/// tid_zero, counters, thread_be) -> dict
///
/// The rows of one `scan` call sorted into what the reader takes in bulk, in one pass (the rules
/// `ChromeReader._take_rows` states):
///
/// * `x_`: complete events of the plain shape (`ts`, `dur` >= 0 and `ph` "X", nothing SLOW; those
///   with a `bind_id` only when every one of the batch is so);
/// * `f_`: flow events (`s`/`t`/`f` with `ts` and an int64 `id`, nothing SLOW);
/// * `i_`: instants (`i`/`I`/`R` with `ts`, without `id`, pid and tid int64, nothing SLOW);
/// * `b_`: begins and ends (`B`/`E` with `ts`, nothing SLOW; `b`/`e` too with `thread_be`, the
///   dialect's say that they nest per thread, MXNet's), for `readers/chrome/stacks.py`;
/// * `c_`: counters (`C` with `ts` and args, without `id`, nothing SLOW, every member a number
///   (`counter_samples`), when every counter of the batch is so -- else all go to the rest):
///   `rows`, then per sample (a member) `ts` (+ `base`), `ids` (its counter's number in the
///   `counters` table: pid (0 when missing), name id, key), `value`;
///   `new` the counters this call numbered, as (pid, name id, key); `top`;
/// * `rest`: every other row, for the general decoder.
///
/// Each part has `rows` (the row numbers), `ts` (+ `base`), `pid` (0 when missing), `tid` (when
/// missing: 0 with `tid_zero`, else the pid), `name`/`cat` (model string ids through `smap`, 0
/// for none), `args`/`lens` (the rows' compacted args back to back; X and instants), `val` (X: the
/// duration; flows: the id), `letter` (flows: the phase; instants: `s`, or `t` without one),
/// `big` (which of pid (1) and tid (2) hold an unsigned 64-bit id's bits: see `Pairs`),
/// `bind`/`flow` (X, begins and ends: v2 flows' `bind_id`, and 1 `flow_in`, 2 `flow_out`, 4 has a
/// `bind_id`), `bp_e` (flows: `bp` is "e"), `has_args` (begins and ends: an args member, maybe `{}`, which
/// the compacted text leaves empty) and `top` (the latest time, an X's end; i64 min for none).
/// Runs without the GIL.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(super) fn split<'py>(
    py: Python<'py>,
    flags: Column<'py, i32>,
    ph: Column<'py, u8>,
    name: Column<'py, i32>,
    cat: Column<'py, i32>,
    ts: Column<'py, i64>,
    dur: Column<'py, i64>,
    pid: Column<'py, i64>,
    tid: Column<'py, i64>,
    id: Column<'py, i64>,
    s: Column<'py, u8>,
    bp: Column<'py, u8>,
    bind: Column<'py, i64>,
    flow: Column<'py, u8>,
    args: Column<'py, u8>,
    args_off: Column<'py, i64>,
    smap: Column<'py, i32>,
    base: i64,
    tid_zero: bool,
    counters: Bound<'py, Counters>,
    thread_be: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let counters = counters.get();
    let (flags, ph, name, cat) = (column(&flags), column(&ph), column(&name), column(&cat));
    let (ts, dur, pid, tid, id) = (
        column(&ts),
        column(&dur),
        column(&pid),
        column(&tid),
        column(&id),
    );
    let (bind, flow) = (column(&bind), column(&flow));
    let (s, bp, args, args_off, smap) = (
        column(&s),
        column(&bp),
        column(&args),
        column(&args_off),
        column(&smap),
    );
    let n = flags.len();
    same_length(
        "split",
        &[
            n,
            ph.len(),
            name.len(),
            cat.len(),
            ts.len(),
            dur.len(),
            pid.len(),
            tid.len(),
            id.len(),
            s.len(),
            bp.len(),
            bind.len(),
            flow.len(),
        ],
    )?;
    if args_off.len() != n + 1 {
        return Err(PyValueError::new_err(
            "split: args_off must be one longer than the columns",
        ));
    }
    let parts = py.detach(|| -> Result<([Part; 4], Vec<i64>, CounterPart), String> {
        let sid = |k: i32| -> Result<i32, String> {
            if k < 0 {
                return Ok(0);
            }
            smap.get(k as usize)
                .copied()
                .ok_or_else(|| format!("split: string {k} has no model id"))
        };
        // which part each row goes to (3: the rest), and each part's size: the parts' columns
        // are made once at their size, not by doubling
        // the counters' samples: (row, its members as keys and values)
        let mut samples = Vec::new();
        let mut kind: Vec<u8> = (0..n)
            .map(|r| {
                let (fl, p) = (flags[r], ph[r]);
                let args_of = |r: usize| {
                    let lo = usize::try_from(args_off[r]).ok()?;
                    let hi = usize::try_from(args_off[r + 1]).ok()?;
                    args.get(lo..hi)
                };
                if fl & (SLOW | F_TS | F_PH) != (F_TS | F_PH) {
                    3
                } else if p == b'X' && fl & F_DUR != 0 && dur[r] >= 0 {
                    0
                } else if matches!(p, b's' | b't' | b'f') && fl & (F_ID | F_ID_U64) == F_ID {
                    1
                } else if matches!(p, b'i' | b'I' | b'R')
                    && fl & (F_ID | F_PID_U64 | F_TID_U64) == 0
                {
                    2
                } else if matches!(p, b'B' | b'E') || thread_be && matches!(p, b'b' | b'e') {
                    4
                } else if p == b'C' && fl & (F_ID | F_ARGS) == F_ARGS {
                    match args_of(r).and_then(counter_samples) {
                        Some(v) => {
                            samples.push((r, v));
                            5
                        }
                        None => 3,
                    }
                } else {
                    3
                }
            })
            .collect();
        // a batch with a complete event with a bind_id left to the general decoder leaves it all of
        // them: the v2 flow points stay in the file's order (the order flows are linked in)
        if (0..n).any(|r| kind[r] == 3 && ph[r] == b'X' && flags[r] & F_BIND != 0) {
            for r in 0..n {
                if kind[r] == 0 && flags[r] & F_BIND != 0 {
                    kind[r] = 3;
                }
            }
        }
        // a batch with a counter left to the general decoder leaves it all of them: the samples
        // stay in the file's order (at one time on one track, the order is what a viewer shows)
        if kind
            .iter()
            .zip(ph.iter())
            .any(|(&k, &p)| k == 3 && p == b'C')
        {
            kind.iter_mut().filter(|k| **k == 5).for_each(|k| *k = 3);
            samples.clear();
        }
        let (mut rows, mut text) = ([0usize; 6], [0usize; 6]);
        for (r, &k) in kind.iter().enumerate() {
            rows[k as usize] += 1;
            let (lo, hi) = (args_off[r], args_off[r + 1]);
            text[k as usize] += usize::try_from(hi.saturating_sub(lo)).unwrap_or(0);
        }
        let mut parts = [
            Part::with_room(rows[0], text[0]),
            Part::with_room(rows[1], 0),
            Part::with_room(rows[2], text[2]),
            Part::with_room(rows[4], text[4]),
        ];
        let mut rest = Vec::with_capacity(rows[3]);
        for r in 0..n {
            let k = kind[r];
            if k == 3 {
                rest.push(r as i64);
                continue;
            }
            if k == 5 {
                continue; // (a counter: its samples, below)
            }
            let fl = flags[r];
            let p = ph[r];
            let part = &mut parts[if k == 4 { 3 } else { k as usize }];
            let t = ts[r].wrapping_add(base);
            let pd = if fl & F_PID != 0 { pid[r] } else { 0 };
            let td = if fl & F_TID != 0 {
                tid[r]
            } else if tid_zero {
                0
            } else {
                pd
            };
            let big_pid = u8::from(fl & F_PID != 0 && fl & F_PID_U64 != 0);
            let big_tid = if fl & F_TID != 0 {
                u8::from(fl & F_TID_U64 != 0)
            } else if tid_zero {
                0
            } else {
                big_pid
            };
            part.rows.push(r as i64);
            part.ts.push(t);
            part.pid.push(pd);
            part.tid.push(td);
            part.big.push(big_pid | big_tid << 1);
            if k == 0 || k == 4 {
                let b = fl & F_BIND != 0;
                part.bind.push(if b { bind[r] } else { 0 });
                part.flow.push(if b { flow[r] & 3 | 4 } else { 0 });
            }
            part.name.push(sid(name[r])?);
            part.cat.push(sid(cat[r])?);
            match k {
                0 => {
                    part.val.push(dur[r]);
                    part.top = part.top.max(t.wrapping_add(dur[r]));
                }
                1 => {
                    part.val.push(id[r]);
                    part.letter.push(p);
                    part.bp_e.push(fl & F_BP != 0 && bp[r] == b'e');
                    part.top = part.top.max(t);
                }
                2 => {
                    part.letter.push(if fl & F_S != 0 { s[r] } else { b't' });
                    part.top = part.top.max(t);
                }
                _ => {
                    part.letter.push(p);
                    part.has_args.push(fl & F_ARGS != 0);
                    part.top = part.top.max(t);
                }
            }
            if k != 1 {
                let (lo, hi) = (args_off[r], args_off[r + 1]);
                let (Ok(lo), Ok(hi)) = (usize::try_from(lo), usize::try_from(hi)) else {
                    return Err(format!("split: row {r}'s args offsets are negative"));
                };
                let Some(a) = args.get(lo..hi) else {
                    return Err(format!("split: row {r}'s args are outside the data"));
                };
                part.args.extend_from_slice(a);
                part.lens.push(a.len() as i64);
            }
        }
        // counters: a sample per member, on the counter track of (pid, name, key)
        let n_samples: usize = samples.iter().map(|(_, v)| v.len()).sum();
        let mut c = CounterPart {
            rows: Vec::with_capacity(samples.len()),
            ts: Vec::with_capacity(n_samples),
            ids: Vec::with_capacity(n_samples),
            value: Vec::with_capacity(n_samples),
            new: Vec::new(),
            top: i64::MIN,
        };
        let mut t = lock(&counters.table);
        let CounterTable { keys, combos } = &mut *t;
        for (r, members) in samples {
            let t = ts[r].wrapping_add(base);
            let (pd, big) = if flags[r] & F_PID != 0 {
                (pid[r], flags[r] & F_PID_U64 != 0)
            } else {
                (0, false)
            };
            let nm = sid(name[r])?;
            c.rows.push(r as i64);
            c.top = c.top.max(t);
            for (k, v) in members {
                let kid = match keys.get_index_of(&*k) {
                    Some(i) => i,
                    None => keys.insert_full(Box::from(&*k)).0,
                } as u32;
                let (id, added) = combos.insert_full((pd, big, nm, kid));
                if added {
                    c.new.push((id_value(pd, big), nm, k.into_owned()));
                }
                c.ts.push(t);
                c.ids.push(id as i64);
                c.value.push(v);
            }
        }
        Ok((parts, rest, c))
    });
    let (parts, rest, c) = parts.map_err(PyValueError::new_err)?;
    let d = PyDict::new(py);
    for (part, pre) in parts.into_iter().zip(["x_", "f_", "i_", "b_"]) {
        part.into_dict(py, &d, pre)?;
    }
    d.set_item("c_rows", c.rows.into_pyarray(py))?;
    d.set_item("c_ts", c.ts.into_pyarray(py))?;
    d.set_item("c_ids", c.ids.into_pyarray(py))?;
    d.set_item("c_value", c.value.into_pyarray(py))?;
    d.set_item("c_new", c.new)?;
    d.set_item("c_top", c.top)?;
    d.set_item("rest", rest.into_pyarray(py))?;
    Ok(d)
}
