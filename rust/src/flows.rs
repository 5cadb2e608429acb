//! Flow binding and linking, for the v1 flow events (`s`/`t`/`f`) of
//! `traceconv.readers.chrome.flows.FlowPoints`, and linking its v2 points (`link_v2`).
//!
//! `bind`: the rule is Perfetto's (its JSON importer sorts events stably by time, then a flow
//! point binds to what is open on its thread at that moment); `flows.bind_points` states it
//! and this is its loop over arrays.  `link`: Perfetto's v1 rule (its JSON importer, v58) over
//! the bound points of each flow.  Their plain-Python statements, `bind_reference` and
//! `link_reference`, are in `tests/test_flows.py`, which compares them with these on random
//! inputs.

use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::nest::{column, same_length, sorted, Column};

const NONE: usize = usize::MAX;

/// Slice columns for `bind`: start, duration, track, and the file positions of each slice's begin
/// and end (`eseq` < 0: none, an `X` event).
pub struct Slices<'a> {
    pub ts: &'a [i64],
    pub dur: &'a [i64],
    pub track: &'a [i32],
    pub bseq: &'a [i32],
    pub eseq: &'a [i32],
}

/// Flow points for `bind`: track, time, file position, and whether the point binds to the
/// enclosing slice (`s`, `t`, `f` with `bp: "e"`) or to the next one to begin (other `f`).
pub struct Points<'a> {
    pub track: &'a [i32],
    pub ts: &'a [i64],
    pub seq: &'a [i64],
    pub enc: &'a [bool],
}

impl Slices<'_> {
    fn end(&self, i: usize) -> i64 {
        self.ts[i].wrapping_add(self.dur[i])
    }

    /// Whether slice `i` is open at a point of time `ts`, file position `seq`: begun before it (or
    /// at its time, earlier in the file), not ended before it (an `X` stays open through its end).
    fn is_open(&self, i: usize, ts: i64, seq: i64) -> bool {
        let start = self.ts[i];
        if start > ts || (start == ts && i64::from(self.bseq[i]) > seq) {
            return false;
        }
        let end = self.end(i);
        end > ts || (end == ts && (self.eseq[i] < 0 || i64::from(self.eseq[i]) > seq))
    }
}

/// For each point, the slice it binds to (-1: none).
pub fn bind_kernel(s: &Slices, q: &Points) -> Vec<i64> {
    let (ns, nq) = (s.ts.len(), q.ts.len());
    // slices by (track, start, longer first, begin's file position); points by (track, time, file
    // position); the index breaks the last ties, as a stable sort would
    let s_order = sorted(
        ns,
        |i| (s.track[i], s.ts[i]),
        |i| (s.dur[i].wrapping_neg(), i64::from(s.bseq[i])),
    );
    let q_order = sorted(nq, |i| (q.track[i], q.ts[i]), |i| (q.seq[i], 0));
    let mut out = vec![-1i64; nq];
    let mut stack: Vec<usize> = Vec::new(); // the open slices of the current track
    let mut a = 0; // the current track's slices: s_order[a..b]
    let mut qi = 0;
    while qi < nq {
        let track = q.track[q_order[qi] as usize];
        while a < ns && s.track[s_order[a] as usize] < track {
            a += 1;
        }
        let mut b = a;
        while b < ns && s.track[s_order[b] as usize] == track {
            b += 1;
        }
        stack.clear();
        let mut p = a;
        while qi < nq && q.track[q_order[qi] as usize] == track {
            let pt = q_order[qi] as usize;
            qi += 1;
            let (ts, seq) = (q.ts[pt], q.seq[pt]);
            if !q.enc[pt] {
                // the next slice to begin: later, or at the same time but after it in the file
                let mut k = a + s_order[a..b].partition_point(|&i| s.ts[i as usize] < ts);
                while k < b
                    && s.ts[s_order[k] as usize] == ts
                    && i64::from(s.bseq[s_order[k] as usize]) < seq
                {
                    k += 1;
                }
                out[pt] = if k < b { i64::from(s_order[k]) } else { -1 };
                continue;
            }
            while p < b && s.ts[s_order[p] as usize] < ts {
                let i = s_order[p] as usize;
                let start = s.ts[i];
                while let Some(&t) = stack.last() {
                    if s.ts[t] <= start && start < s.end(t) {
                        break;
                    }
                    stack.pop();
                }
                stack.push(i);
                p += 1;
            }
            while let Some(&t) = stack.last() {
                if s.is_open(t, ts, seq) {
                    break;
                }
                stack.pop();
            }
            let mut best = stack.last().copied().unwrap_or(NONE);
            let mut k = p;
            while k < b && s.ts[s_order[k] as usize] == ts {
                if s.is_open(s_order[k] as usize, ts, seq) {
                    best = s_order[k] as usize;
                }
                k += 1;
            }
            out[pt] = if best != NONE { best as i64 } else { -1 };
        }
        a = b;
    }
    out
}

/// The links of flow points sorted by flow (`group`) and time, each bound to a slice (`bound`,
/// -1: none), by Perfetto's v1 rule.  A flow has one slot, the slice it leaves from: an `s` fills
/// the empty slot (an `s` while it is full starts nothing: `flow_duplicate_id`); a `t` links the
/// slot's slice to its own and takes the slot; an `f` links the slot's slice to its own and leaves
/// the slot as it is, so the next `f` links from the same slice (a fan-out: one launch, several
/// kernels); a `t` or `f` with the slot empty links nothing; a point bound to no slice is skipped.
/// Returns (src, dst, group of each link) and [unresolved points, dropped events, used events].
pub fn link_kernel(
    group: &[i64],
    ph: &[u8],
    bound: &[i64],
) -> (Vec<i64>, Vec<i64>, Vec<i64>, [i64; 3]) {
    let n = group.len();
    let (mut src, mut dst, mut grp) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut unresolved, mut dropped, mut used) = (0i64, 0i64, 0i64);
    let mut i = 0;
    while i < n {
        let g = group[i];
        let mut slot = -1i64;
        let mut slot_new = 0i64; // the slot's event is in no link yet
        while i < n && group[i] == g {
            let (sl, p) = (bound[i], ph[i]);
            i += 1;
            if sl < 0 {
                unresolved += 1;
                dropped += 1;
                continue;
            }
            if p == b's' {
                if slot >= 0 {
                    unresolved += 1;
                    dropped += 1;
                } else {
                    slot = sl;
                    slot_new = 1;
                }
                continue;
            }
            if slot < 0 {
                // t or f before any s
                unresolved += 1;
                dropped += 1;
                continue;
            }
            src.push(slot);
            dst.push(sl);
            grp.push(g);
            used += slot_new + 1;
            slot_new = 0;
            if p == b't' {
                slot = sl;
            }
        }
        if slot >= 0 && slot_new != 0 {
            // an s never followed by anything: its event is not in the model
            dropped += 1;
            unresolved += 1;
        }
    }
    (src, dst, grp, [unresolved, dropped, used])
}

/// bind(s_ts, s_dur, s_track, bseq, eseq, q_track, q_ts, q_seq, q_enc) -> int64 array
///
/// For each query point (track, ts, file position, whether it binds to the enclosing slice or to
/// the next one), the slice index it binds to, or -1.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn bind<'py>(
    py: Python<'py>,
    s_ts: Column<'py, i64>,
    s_dur: Column<'py, i64>,
    s_track: Column<'py, i32>,
    bseq: Column<'py, i32>,
    eseq: Column<'py, i32>,
    q_track: Column<'py, i32>,
    q_ts: Column<'py, i64>,
    q_seq: Column<'py, i64>,
    q_enc: Column<'py, bool>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let (s_ts, s_dur, s_track, bseq, eseq) = (
        column(&s_ts),
        column(&s_dur),
        column(&s_track),
        column(&bseq),
        column(&eseq),
    );
    let (q_track, q_ts, q_seq, q_enc) = (
        column(&q_track),
        column(&q_ts),
        column(&q_seq),
        column(&q_enc),
    );
    same_length(
        "bind (slices)",
        &[
            s_ts.len(),
            s_dur.len(),
            s_track.len(),
            bseq.len(),
            eseq.len(),
        ],
    )?;
    same_length(
        "bind (points)",
        &[q_track.len(), q_ts.len(), q_seq.len(), q_enc.len()],
    )?;
    if s_ts.len() > u32::MAX as usize || q_ts.len() > u32::MAX as usize {
        return Err(PyValueError::new_err(
            "bind: more than 2^32 slices or points",
        ));
    }
    let out = py.detach(|| {
        let s = Slices {
            ts: &s_ts,
            dur: &s_dur,
            track: &s_track,
            bseq: &bseq,
            eseq: &eseq,
        };
        let q = Points {
            track: &q_track,
            ts: &q_ts,
            seq: &q_seq,
            enc: &q_enc,
        };
        bind_kernel(&s, &q)
    });
    Ok(out.into_pyarray(py))
}

type Links<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    i64,
    i64,
    i64,
);

/// link(group, ph, bound) -> (src, dst, group of each link, unresolved points, dropped events,
/// used events)
///
/// For flow points sorted by group and time, each bound to a slice (or -1); `ph` is the byte
/// `s`, `t` or `f`.
#[pyfunction]
fn link<'py>(
    py: Python<'py>,
    group: Column<'py, i64>,
    ph: Column<'py, u8>,
    bound: Column<'py, i64>,
) -> PyResult<Links<'py>> {
    let (group, ph, bound) = (column(&group), column(&ph), column(&bound));
    same_length("link", &[group.len(), ph.len(), bound.len()])?;
    let (src, dst, grp, [unresolved, dropped, used]) =
        py.detach(|| link_kernel(&group, &ph, &bound));
    Ok((
        src.into_pyarray(py),
        dst.into_pyarray(py),
        grp.into_pyarray(py),
        unresolved,
        dropped,
        used,
    ))
}

/// `link_v2`'s loop: the flows of v2 points (`bind_id`, `flow_in`, `flow_out` on slices), each
/// id's points in the order its first point came; returns (src, dst, unresolved).
fn link_v2_kernel(
    id: &[i64],
    slice: &[i64],
    fin: &[bool],
    fout: &[bool],
    ts: &[i64],
) -> (Vec<i64>, Vec<i64>, i64) {
    // each id's points, the ids in the order first seen (as a dict of lists keeps them)
    let mut groups: indexmap::IndexMap<i64, Vec<usize>, rustc_hash::FxBuildHasher> =
        Default::default();
    for (k, &i) in id.iter().enumerate() {
        groups.entry(i).or_default().push(k);
    }
    let (mut src, mut dst, mut unresolved) = (Vec::new(), Vec::new(), 0i64);
    for items in groups.values_mut() {
        // one pure source and one pure destination: linked whatever their order in time
        if let [a, b] = items[..] {
            if fin[a] != fout[a] && fin[b] != fout[b] && fout[a] != fout[b] {
                let (s, d) = if fout[a] { (a, b) } else { (b, a) };
                src.push(slice[s]);
                dst.push(slice[d]);
                continue;
            }
        }
        // at one time, a source before its ends (stable: the input order after that)
        items.sort_by_key(|&k| (ts[k], !fout[k], slice[k]));
        let (mut pending, mut linked) = (None, false);
        for &k in items.iter() {
            if fin[k] {
                match pending {
                    Some(p) => {
                        src.push(p);
                        dst.push(slice[k]);
                        linked = true;
                    }
                    None => unresolved += 1,
                }
            }
            if fout[k] {
                if pending.is_some() && !linked {
                    unresolved += 1;
                }
                pending = Some(slice[k]);
                linked = false;
            }
        }
        if pending.is_some() && !linked {
            unresolved += 1;
        }
    }
    (src, dst, unresolved)
}

/// link_v2(id, slice, flow_in, flow_out, ts) -> (src, dst, unresolved)
///
/// Perfetto's v2 rule over the points of `FlowPoints.binds` (integer ids): `flow_in` ends the
/// flow at its slice without closing it (several slices may take one flow: a fan-out),
/// `flow_out` starts a new hop from its slice; an id with one pure source and one pure
/// destination is linked whatever their order in time.  The flows in the order
/// `FlowPoints._resolve_v2_reference` makes them, and how many points found no other end.  Runs
/// without the GIL.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn link_v2<'py>(
    py: Python<'py>,
    id: Column<'py, i64>,
    slice: Column<'py, i64>,
    flow_in: Column<'py, bool>,
    flow_out: Column<'py, bool>,
    ts: Column<'py, i64>,
) -> PyResult<(Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>, i64)> {
    let (id, slice, fin, fout, ts) = (
        column(&id),
        column(&slice),
        column(&flow_in),
        column(&flow_out),
        column(&ts),
    );
    same_length(
        "link_v2",
        &[id.len(), slice.len(), fin.len(), fout.len(), ts.len()],
    )?;
    let (src, dst, unresolved) = py.detach(|| link_v2_kernel(&id, &slice, &fin, &fout, &ts));
    Ok((src.into_pyarray(py), dst.into_pyarray(py), unresolved))
}

pub fn register(core: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(core.py(), "flows")?;
    m.add_function(wrap_pyfunction!(bind, &m)?)?;
    m.add_function(wrap_pyfunction!(link, &m)?)?;
    m.add_function(wrap_pyfunction!(link_v2, &m)?)?;
    core.add_submodule(&m)
}
