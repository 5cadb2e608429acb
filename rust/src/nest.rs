//! Lane assignment and nesting, for `traceconv.model.layout.nest`: the fewest slices moved.
//!
//! Slices are visited in the order `traceconv.model.layout.slice_order` gives (track, start, longer
//! first, input order).  Each track has lanes: lane 0 is the track itself, lanes 1, 2, ... are its
//! "overlap" tracks.  Every lane keeps a stack of its open slices.  A slice goes:
//!
//! 1. on lane 0 whenever it nests there: once the slices of lane 0 that end at or before its start
//!    are closed, lane 0 is empty or the slice is inside its top (`top.start <= s.start` and
//!    `s.end <= top.end`) -- so a slice moves only when it partially overlaps an open slice of its
//!    own track, the rule Perfetto's importer applies to JSON `X` events (stat
//!    `slice_spill_overlapping_complete_event`);
//! 2. else on the first lane 1, 2, ... where it nests the same way;
//! 3. else on a new lane.
//!
//! A moved slice takes nothing along: a slice that starts inside it is placed by the same rule.
//! A slice's depth is its depth on its lane; its parent is the innermost slice that encloses it on
//! any lane of its track (of each lane's innermost open slice that encloses it, the one that
//! started last; the first lane's on a tie).
//!
//! `traceconv.model.layout.nest_reference` states the rule in plain Python; the property tests in
//! `tests/test_layout_lanes.py` compare it with this loop on random inputs.  The loop keeps every
//! lane's stack as a linked list through the slices themselves (`below`), so it allocates nothing
//! per slice.  It is sequential by nature (each slice depends on the ones before it on its
//! track); the tracks could run in parallel, but the whole pass over the 630k slices of the bench's
//! 1M-event trace takes about 16 ms, too little for threads to pay on a shared 2-core machine.

use numpy::{Element, IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{intern, Borrowed};
use std::borrow::Cow;

/// A 1-D input column: a NumPy array of the dtype (used in place) or anything NumPy converts to
/// one (a list, another integer dtype).
///
/// Not numpy's `PyArrayLike1<T, AllowTypeChange>`: that one first extracts an array of another
/// dtype into a `Vec<T>` element by element through Python (a NumPy scalar made per element), which
/// took a third of the writer's main thread for its int8 `kind` column.  Here NumPy converts it
/// (`asarray`), in C.
pub(crate) struct Column<'py, T: Element>(PyReadonlyArray1<'py, T>);

impl<'a, 'py, T: Element> FromPyObject<'a, 'py> for Column<'py, T> {
    type Error = PyErr;

    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(a) = ob.cast::<PyArray1<T>>() {
            return Ok(Column(a.readonly()));
        }
        let py = ob.py();
        let np = py.import(intern!(py, "numpy"))?;
        let kwargs = PyDict::new(py);
        kwargs.set_item(intern!(py, "dtype"), T::get_dtype(py))?;
        let a = np.call_method(intern!(py, "asarray"), (ob,), Some(&kwargs))?;
        Ok(Column(a.cast_into::<PyArray1<T>>()?.readonly()))
    }
}

impl<'py, T: Element> std::ops::Deref for Column<'py, T> {
    type Target = PyReadonlyArray1<'py, T>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// The column's values: its own buffer when contiguous, else a copy.
pub(crate) fn column<'a, T: Element + Copy>(c: &'a Column<'_, T>) -> Cow<'a, [T]> {
    match c.as_slice() {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(c.as_array().iter().copied().collect()),
    }
}

/// An error naming `what` unless every length in `lens` is the same.
pub(crate) fn same_length(what: &str, lens: &[usize]) -> PyResult<()> {
    if lens.iter().any(|&l| l != lens[0]) {
        return Err(PyValueError::new_err(format!(
            "{what}: columns of different lengths {lens:?}"
        )));
    }
    Ok(())
}

/// `parent`'s mark of a slice not placed yet.
const UNSEEN: i64 = i64::MIN;

/// The assignment over slices given by index arrays; `order` visits them by (track, start, longer
/// first).  Writes `depth` (on the slice's lane), `parent` (-1: none) and `lane` of every slice.
/// `order` must be a permutation of the slices (each visited once: the lanes' stacks are linked
/// lists through the slices); else an error names the first index out of range or seen twice.
/// The caller's `parent` may hold anything: it is filled (with a mark of the slices not placed
/// yet, which finds an index seen twice at no extra cost).
pub fn nest_kernel(
    ts: &[i64],
    dur: &[i64],
    track: &[i32],
    order: &[i64],
    depth: &mut [i32],
    parent: &mut [i64],
    lane: &mut [i32],
) -> Result<(), String> {
    let n = ts.len();
    if order.len() != n
        || dur.len() != n
        || track.len() != n
        || depth.len() != n
        || parent.len() != n
        || lane.len() != n
    {
        return Err(format!(
            "nest: columns of different lengths (ts: {n}, order: {})",
            order.len()
        ));
    }
    if n >= u32::MAX as usize {
        return Err(format!(
            "nest: {n} slices, more than this loop's u32 indices hold"
        ));
    }
    // (every column cut to n: the compiler then drops the bounds checks of index i < n)
    let (ts, dur, track, depth, parent, lane) = (
        &ts[..n],
        &dur[..n],
        &track[..n],
        &mut depth[..n],
        &mut parent[..n],
        &mut lane[..n],
    );
    let end = |i: u32| ts[i as usize].wrapping_add(dur[i as usize]);
    const NONE: u32 = u32::MAX;
    // Slice indices as u32 in the loop's own arrays: half the memory traffic of usize, 10 % faster
    // on the bench's 1M-event trace (a model never holds 2**32 slices: checked above).
    // The slice under each one on its lane's stack (written when the slice is placed, before any
    // read; zeroed memory costs nothing until touched).
    let mut below = vec![0u32; n];
    let below = &mut below[..n];
    let mut lane_top: Vec<u32> = Vec::with_capacity(4); // the current track's lanes: top slice
    let mut cur: Option<i32> = None;
    parent.fill(UNSEEN);
    for &o in order {
        let i = match usize::try_from(o) {
            Ok(i) if i < n && parent[i] == UNSEEN => i,
            _ => {
                return Err(format!(
                    "nest: order is not a permutation of the {n} slices (at {o})"
                ))
            }
        };
        let t = track[i];
        if cur != Some(t) {
            cur = Some(t);
            lane_top.clear();
            lane_top.push(NONE);
        }
        let start = ts[i];
        let e = end(i as u32);
        let mut k = NONE;
        let mut best = NONE;
        for (j, slot) in lane_top.iter_mut().enumerate() {
            let mut top = *slot;
            while top != NONE && end(top) <= start {
                // close what ended by this start
                top = below[top as usize];
            }
            *slot = top;
            if top == NONE {
                if k == NONE {
                    k = j as u32;
                }
            } else if e <= end(top) && k == NONE {
                k = j as u32;
            }
            // this lane's innermost slice that encloses it: its stack holds ever-wider slices
            // downwards, all begun by `start` (a moved slice's parent may lie under the top)
            let mut x = top;
            while x != NONE && end(x) < e {
                x = below[x as usize];
            }
            if x != NONE && (best == NONE || ts[x as usize] > ts[best as usize]) {
                best = x;
            }
        }
        if k == NONE {
            k = lane_top.len() as u32;
            lane_top.push(NONE);
        }
        let top = lane_top[k as usize];
        depth[i] = if top != NONE {
            depth[top as usize] + 1
        } else {
            0
        };
        parent[i] = if best != NONE { best as i64 } else { -1 };
        below[i] = top;
        lane_top[k as usize] = i as u32;
        lane[i] = k as i32;
    }
    Ok(())
}

type Nested<'py> = (
    Bound<'py, PyArray1<i32>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i32>>,
);

/// nest(ts, dur, track, order) -> (depth int32, parent int64 (-1: none), lane int32)
///
/// Lane 0 is the slice's own track, 1, 2, ... its overlap lanes.  `order` must be a permutation
/// of the slices sorted by (track, start, longer first, input order).
#[pyfunction]
fn nest<'py>(
    py: Python<'py>,
    ts: Column<'py, i64>,
    dur: Column<'py, i64>,
    track: Column<'py, i32>,
    order: Column<'py, i64>,
) -> PyResult<Nested<'py>> {
    let (ts, dur, track, order) = (column(&ts), column(&dur), column(&track), column(&order));
    let n = ts.len();
    if dur.len() != n || track.len() != n || order.len() != n {
        return Err(PyValueError::new_err(format!(
            "nest: columns of different lengths (ts, dur, track, order: {}, {}, {}, {})",
            n,
            dur.len(),
            track.len(),
            order.len()
        )));
    }
    let (depth, parent, lane) = py
        .detach(|| {
            let mut depth = vec![0i32; n];
            let mut parent = vec![0i64; n];
            let mut lane = vec![0i32; n];
            nest_kernel(
                &ts,
                &dur,
                &track,
                &order,
                &mut depth,
                &mut parent,
                &mut lane,
            )?;
            Ok::<_, String>((depth, parent, lane))
        })
        .map_err(PyValueError::new_err)?;
    Ok((
        depth.into_pyarray(py),
        parent.into_pyarray(py),
        lane.into_pyarray(py),
    ))
}

/// The slices' indices by (track, start, longer first, index): `np.lexsort((-dur, ts, track))`
/// (a stable sort), as one unstable sort of (track, start, index) keys, the runs of one start
/// then by duration ([`sorted`]; 3x faster than the lexsort's three passes on the bench's 630k
/// slices).
pub fn slice_order_kernel(ts: &[i64], dur: &[i64], track: &[i32]) -> Vec<i64> {
    sorted(
        ts.len(),
        |i| (track[i], ts[i]),
        |i| (dur[i].wrapping_neg(), 0),
    )
    .into_iter()
    .map(i64::from)
    .collect()
}

/// The indices `0..n` sorted by `major(i)` (track, time), then `minor(i)`, then `i`.
///
/// Sorted as 16-byte keys (track, time, index) and then each run of one (track, time) by its
/// minor key (such runs are short): at 630k slices the keys take 10 MB where whole (track, time,
/// -dur, bseq, index) tuples took 25 MB in `flows::bind` (the peak of a whole 1M-event
/// conversion's memory) and 20 MB here, and the sort moves half the bytes.  The indices are
/// `u32` (callers check the counts).
pub(crate) fn sorted(
    n: usize,
    major: impl Fn(usize) -> (i32, i64),
    minor: impl Fn(usize) -> (i64, i64),
) -> Vec<u32> {
    let mut keys: Vec<(i32, i64, u32)> = (0..n)
        .map(|i| {
            let (a, b) = major(i);
            (a, b, i as u32)
        })
        .collect();
    let mut order = sort_keys(&mut keys);
    drop(keys);
    let mut a = 0;
    while a < n {
        let first = major(order[a] as usize);
        let mut b = a + 1;
        while b < n && major(order[b] as usize) == first {
            b += 1;
        }
        if b - a > 1 {
            order[a..b].sort_unstable_by_key(|&i| (minor(i as usize), i));
        }
        a = b;
    }
    order
}

/// Keys from this many up are sorted in two halves on two threads, then merged.
const PAR_SORT: usize = 1 << 16;

/// The indices of `keys` (unique: each ends with its index) in sorted order.  Many keys are
/// sorted in two halves at once, a thread of its own for the first (spawned here, not taken from
/// rayon's pool: a merge's worker forked from a process whose pool had started would wait
/// forever for threads it does not have), and the halves merged: on the bench's 630k slices
/// 24 -> 10-13 ms, and called twice by each conversion's nesting and once by its flows.
fn sort_keys(keys: &mut [(i32, i64, u32)]) -> Vec<u32> {
    let two = std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
    if keys.len() < PAR_SORT || !two {
        keys.sort_unstable();
        return keys.iter().map(|k| k.2).collect();
    }
    let (a, b) = keys.split_at_mut(keys.len() / 2);
    std::thread::scope(|s| {
        s.spawn(|| a.sort_unstable());
        b.sort_unstable();
    });
    let mut order = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] < b[j] {
            order.push(a[i].2);
            i += 1;
        } else {
            order.push(b[j].2);
            j += 1;
        }
    }
    order.extend(a[i..].iter().map(|k| k.2));
    order.extend(b[j..].iter().map(|k| k.2));
    order
}

/// slice_order(ts, dur, track) -> int64 array: the slices by (track, start, longer first, index),
/// the order `nest` takes.
#[pyfunction]
fn slice_order<'py>(
    py: Python<'py>,
    ts: Column<'py, i64>,
    dur: Column<'py, i64>,
    track: Column<'py, i32>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let (ts, dur, track) = (column(&ts), column(&dur), column(&track));
    if dur.len() != ts.len() || track.len() != ts.len() {
        return Err(PyValueError::new_err(format!(
            "slice_order: columns of different lengths (ts, dur, track: {}, {}, {})",
            ts.len(),
            dur.len(),
            track.len()
        )));
    }
    if ts.len() > u32::MAX as usize {
        return Err(PyValueError::new_err("slice_order: more than 2^32 slices"));
    }
    let order = py.detach(|| slice_order_kernel(&ts, &dur, &track));
    Ok(order.into_pyarray(py))
}

pub fn register(core: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(core.py(), "nest")?;
    m.add_function(wrap_pyfunction!(nest, &m)?)?;
    m.add_function(wrap_pyfunction!(slice_order, &m)?)?;
    core.add_submodule(&m)
}
