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
//!
//! The loop visits every lane of the track for each slice, and each lane's stack down to its
//! innermost slice enclosing this one: fast for the few lanes of real tracks, quadratic for a
//! track of thousands (slices that each partly overlap all the others: a lane each).  A track with
//! more than [`WIDE_FROM`] lanes is placed from then on with two trees ([`Wide`]): its lanes by
//! the end of their top slice (the leftmost that takes the slice, those whose top has ended) and
//! its open slices by their end (the one the rule takes as parent), O(log) a slice.  The stacks
//! stay as they are; the trees follow them, so the result is the loop's.

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
#[allow(clippy::too_many_arguments)]
pub fn nest_kernel(
    ts: &[i64],
    dur: &[i64],
    track: &[i32],
    order: &[i64],
    depth: &mut [i32],
    parent: &mut [i64],
    lane: &mut [i32],
    wide_from: usize,
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
    let mut run = 0; // where the current track's slices start in `order`
    let mut wide: Option<Wide> = None; // the current track's trees, once it has many lanes
    let mut leaf_of: Vec<u32> = Vec::new(); // each slice's leaf in its track's `Open` tree
    parent.fill(UNSEEN);
    for (p, &o) in order.iter().enumerate() {
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
            run = p;
            wide = None;
        }
        let start = ts[i];
        let e = end(i as u32);
        if wide.is_none() && lane_top.len() > wide_from {
            if leaf_of.is_empty() {
                leaf_of = vec![0u32; n];
            }
            let m = order[run..]
                .iter()
                .take_while(|&&q| usize::try_from(q).is_ok_and(|q| q < n && track[q] == t))
                .count();
            wide = Some(Wide::new(&order[run..run + m], &lane_top, below, &mut leaf_of, &end, ts, depth));
        }
        if let Some(w) = wide.as_mut() {
            let (k, top, best) = w.place(start, e, &mut lane_top, below, &leaf_of, &end);
            depth[i] = if top != NONE { depth[top as usize] + 1 } else { 0 };
            parent[i] = if best != NONE { best as i64 } else { -1 };
            below[i] = top;
            lane_top[k] = i as u32;
            lane[i] = k as i32;
            w.open.set(leaf_of[i] as usize, open_key(ts[i], k, depth[i]));
            continue;
        }
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

/// Lanes from which a track is placed with [`Wide`]'s trees.  Below it the loop over the lanes
/// is the faster (the bench's tracks have 1-3 lanes); past it each slice costs O(log) instead of
/// a visit of every lane, and of every lane's stack down to its innermost enclosing slice (80k
/// slices, each partly overlapping all the others: 80k lanes, 9.4 s in that loop).
const WIDE_FROM: usize = 32;

/// An empty lane in [`Lanes`]: it takes any slice and has nothing to close.
const EMPTY: i128 = i128::MAX;

/// The end of each lane's top slice ([`EMPTY`]: none), the minimum and maximum of each node's
/// leaves: the leftmost lane a slice nests on, and the lanes whose top has ended, in O(log lanes).
/// Leaves past the lanes in use are empty, so the leftmost fit past them is the next new lane.
struct Lanes {
    cap: usize,
    min: Vec<i128>,
    max: Vec<i128>,
}

impl Lanes {
    fn new(lanes: usize) -> Self {
        let cap = (2 * lanes).next_power_of_two();
        Lanes { cap, min: vec![EMPTY; 2 * cap], max: vec![EMPTY; 2 * cap] }
    }

    fn set(&mut self, j: usize, v: i128) {
        let mut x = j + self.cap;
        self.min[x] = v;
        self.max[x] = v;
        while x > 1 {
            x >>= 1;
            self.min[x] = self.min[2 * x].min(self.min[2 * x + 1]);
            self.max[x] = self.max[2 * x].max(self.max[2 * x + 1]);
        }
    }

    /// The leftmost lane whose value is at least `e` (an empty one, or one whose top ends at or
    /// after `e`); None when every leaf is a lane in use that ends before.
    fn first_at_least(&self, e: i128) -> Option<usize> {
        if self.max[1] < e {
            return None;
        }
        let mut x = 1;
        while x < self.cap {
            x = if self.max[2 * x] >= e { 2 * x } else { 2 * x + 1 };
        }
        Some(x - self.cap)
    }

    /// The leftmost lane whose top ended at or before `s`.
    fn first_at_most(&self, s: i128) -> Option<usize> {
        if self.min[1] > s {
            return None;
        }
        let mut x = 1;
        while x < self.cap {
            x = if self.min[2 * x] <= s { 2 * x } else { 2 * x + 1 };
        }
        Some(x - self.cap)
    }
}

/// No open slice at a leaf of [`Open`].
const CLOSED: i128 = i128::MIN;

/// The open slice the rule takes as parent, ordered: the later start, then the lower lane, then
/// the deeper on its lane (unique among open slices: one per lane and depth).
fn open_key(start: i64, lane: usize, depth: i32) -> i128 {
    ((start as i128) << 64) | (((u32::MAX - lane as u32) as i128) << 32) | depth as u32 as i128
}

/// The open slices of a track, a leaf per slice of the track in the order of their ends: the
/// parent of a slice ending at `e` is the greatest [`open_key`] among the leaves from the first
/// end `>= e` on, found in O(log slices).
struct Open {
    cap: usize,
    key: Vec<i128>,
    leaf: Vec<u32>, // the leaf of each node's greatest key
    ends: Vec<i64>, // the leaves' ends, ascending
    slice: Vec<u32>, // the leaves' slices
}

impl Open {
    fn set(&mut self, at: usize, k: i128) {
        let mut x = at + self.cap;
        self.key[x] = k;
        while x > 1 {
            x >>= 1;
            let (a, b) = (2 * x, 2 * x + 1);
            let c = if self.key[a] >= self.key[b] { a } else { b };
            self.key[x] = self.key[c];
            self.leaf[x] = self.leaf[c];
        }
    }

    /// The open slice with the greatest key among those ending at or after `e`, if any.
    fn enclosing(&self, e: i64) -> Option<u32> {
        let (mut l, mut r) = (self.ends.partition_point(|&x| x < e) + self.cap, 2 * self.cap);
        let (mut best, mut at) = (CLOSED, 0);
        while l < r {
            if l & 1 == 1 {
                if self.key[l] > best {
                    (best, at) = (self.key[l], self.leaf[l]);
                }
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                if self.key[r] > best {
                    (best, at) = (self.key[r], self.leaf[r]);
                }
            }
            l >>= 1;
            r >>= 1;
        }
        (best != CLOSED).then(|| self.slice[at as usize])
    }
}

/// A track with many lanes: [`Lanes`] over its lanes and [`Open`] over its slices, made from the
/// lanes' stacks as they are when the track gets there (the stacks stay the truth; the trees
/// follow them).
struct Wide {
    lanes: Lanes,
    open: Open,
}

impl Wide {
    /// `slices`: the track's slices (its run of `order`); `leaf_of` gets each one's leaf.
    fn new(
        slices: &[i64],
        lane_top: &[u32],
        below: &[u32],
        leaf_of: &mut [u32],
        end: &impl Fn(u32) -> i64,
        ts: &[i64],
        depth: &[i32],
    ) -> Self {
        let mut by_end: Vec<(i64, u32)> = slices.iter().map(|&q| (end(q as u32), q as u32)).collect();
        by_end.sort_unstable();
        let cap = by_end.len().next_power_of_two();
        for (k, &(_, q)) in by_end.iter().enumerate() {
            leaf_of[q as usize] = k as u32;
        }
        let mut leaf = vec![0u32; 2 * cap];
        for (k, l) in leaf[cap..].iter_mut().enumerate() {
            *l = k as u32;
        }
        let mut open = Open {
            cap,
            key: vec![CLOSED; 2 * cap],
            leaf,
            ends: by_end.iter().map(|x| x.0).collect(),
            slice: by_end.iter().map(|x| x.1).collect(),
        };
        for x in (1..cap).rev() {
            open.leaf[x] = open.leaf[2 * x];
        }
        let mut lanes = Lanes::new(lane_top.len());
        for (j, &top) in lane_top.iter().enumerate() {
            if top != u32::MAX {
                lanes.set(j, end(top) as i128);
            }
            let mut x = top;
            while x != u32::MAX {
                open.set(leaf_of[x as usize] as usize, open_key(ts[x as usize], j, depth[x as usize]));
                x = below[x as usize];
            }
        }
        Wide { lanes, open }
    }

    /// Closes what ended by `start`, then finds the lane of the slice from `start` to `e`
    /// (growing the lanes when it takes a new one), the top of that lane's stack, and its parent:
    /// (lane, top, parent), as the loop over the lanes finds them.
    fn place(
        &mut self,
        start: i64,
        e: i64,
        lane_top: &mut Vec<u32>,
        below: &[u32],
        leaf_of: &[u32],
        end: &impl Fn(u32) -> i64,
    ) -> (usize, u32, u32) {
        while let Some(j) = self.lanes.first_at_most(start as i128) {
            let top = lane_top[j];
            self.open.set(leaf_of[top as usize] as usize, CLOSED);
            let next = below[top as usize];
            lane_top[j] = next;
            self.lanes.set(j, if next == u32::MAX { EMPTY } else { end(next) as i128 });
        }
        let best = self.open.enclosing(e).unwrap_or(u32::MAX);
        let k = match self.lanes.first_at_least(e as i128) {
            Some(k) => k,
            None => {
                // every leaf a lane in use, none that fits: twice the leaves
                let mut grown = Lanes::new(self.lanes.cap);
                for (j, &top) in lane_top.iter().enumerate() {
                    if top != u32::MAX {
                        grown.set(j, end(top) as i128);
                    }
                }
                self.lanes = grown;
                lane_top.len()
            }
        };
        if k == lane_top.len() {
            lane_top.push(u32::MAX);
        }
        self.lanes.set(k, e as i128);
        (k, lane_top[k], best)
    }
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
///
/// `wide_from`: a track with more lanes than this is placed with the trees of [`Wide`] from then
/// on (the same result; tests lower it to check that).
#[pyfunction]
#[pyo3(signature = (ts, dur, track, order, wide_from = WIDE_FROM))]
fn nest<'py>(
    py: Python<'py>,
    ts: Column<'py, i64>,
    dur: Column<'py, i64>,
    track: Column<'py, i32>,
    order: Column<'py, i64>,
    wide_from: usize,
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
                wide_from,
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

/// The events of one window of the writer's stream, sorted (see [`window`]): each event's key
/// packs `event_windows`' sort keys into one `u128`, unique, so that one unstable sort of the keys
/// alone gives the order of its stable `np.lexsort((tie, sub, phase, time))`: the time (its sign
/// bit flipped), then `sub` with the phase folded in (an end with a duration, phase 0, at
/// `-depth - 1`: below every phase-1 `sub`, which are `>= 0`), then `tie`: for a zero-length end
/// `-pos` as in Python; for an end with a duration its row (lexsort's tie is 0 for all of them, and
/// its stability keeps them in row order); for a begin its row too, and 0 for the rest, whose
/// `sub` is theirs alone.  Every `sub` and `tie` fits 32 bits once offset by 2^31 when the stream
/// has fewer than 2^31 - 2 events (the caller's int32 case).  The kind and row of each event are
/// read back from its key: a key of 16 bytes sorts in ~60 % of the time a key with its row beside it
/// takes (68k events: 1.6 against 2.7 ms).
#[allow(clippy::too_many_arguments)]
pub fn window_kernel(ts: &[i64], dur: &[i64], depth: &[i32], pos: &[i32], zend: &[i32], its: &[i64], cts: &[i64],
                     ids: [&[u16]; 4], k: u16, codes: [i8; 4]) -> (Vec<i64>, Vec<i8>, Vec<i32>) {
    let [b_id, e_id, i_id, c_id] = ids;
    let (n, ni) = (ts.len() as i64, its.len() as i64);
    let big = 2 * n + 2;
    const OFF: i64 = 1 << 31;
    let key = |t: i64, sub: i64, tie: i64| -> u128 {
        (((t as u64) ^ (1 << 63)) as u128) << 64 | (((sub + OFF) as u64) << 32 | (tie + OFF) as u64) as u128
    };
    let mut keys: Vec<u128> = Vec::new();
    // the zero-length ends' rows by their tie (-pos), to read them back
    let mut zero: Vec<(i64, i32)> = Vec::new();
    each_in(b_id, k, |b| keys.push(key(ts[b], 2 * pos[b] as i64, b as i64)));
    each_in(e_id, k, |e| {
        let t = ts[e].wrapping_add(dur[e]);
        keys.push(if dur[e] == 0 {
            zero.push((-(pos[e] as i64), e as i32));
            key(t, 2 * zend[e] as i64 + 1, -(pos[e] as i64))
        } else {
            key(t, -(depth[e] as i64) - 1, e as i64)
        });
    });
    each_in(i_id, k, |i| keys.push(key(its[i], big + i as i64, 0)));
    each_in(c_id, k, |c| keys.push(key(cts[c], big + ni + c as i64, 0)));
    keys.sort_unstable();
    zero.sort_unstable();
    let [k_begin, k_end, k_instant, k_counter] = codes;
    let m = keys.len();
    let (mut time, mut kind, mut index) = (Vec::with_capacity(m), Vec::with_capacity(m), Vec::with_capacity(m));
    for &k in &keys {
        time.push(((k >> 64) as u64 ^ (1 << 63)) as i64);
        let sub = ((k >> 32) as u32) as i64 - OFF;
        let tie = (k as u32) as i64 - OFF;
        let (what, row) = if sub < 0 {
            (k_end, tie)
        } else if sub < big {
            if sub % 2 == 0 {
                (k_begin, tie)
            } else {
                // (every zero-length end's tie is in `zero`, each once: pos is a permutation)
                let j = zero.binary_search_by_key(&tie, |z| z.0).unwrap_or(0);
                (k_end, zero.get(j).map_or(-1, |z| z.1 as i64))
            }
        } else if sub < big + ni {
            (k_instant, sub - big)
        } else {
            (k_counter, sub - big - ni)
        };
        kind.push(what);
        index.push(row as i32);
    }
    (time, kind, index)
}

/// `f(i)` for each `i` where `ids[i] == k`, in order.  A window's events are few among all (1M
/// events: 21 windows) and lie close together (the rows come about in time order), so the ids are
/// read 64 at a time and a block without one is passed over after one comparison of the 64 (which
/// the compiler makes a few vector instructions): 1M events, all 21 windows, 25 -> 7-17 ms.
fn each_in(ids: &[u16], k: u16, mut f: impl FnMut(usize)) {
    for (c, block) in ids.chunks(64).enumerate() {
        if block.iter().fold(false, |any, &x| any | (x == k)) {
            for (j, &x) in block.iter().enumerate() {
                if x == k {
                    f(c * 64 + j);
                }
            }
        }
    }
}

type Window<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i8>>, Bound<'py, PyArray1<i32>>);

/// window(ts, dur, depth, pos, zend, its, cts, b_id, e_id, i_id, c_id, k, codes) -> (time int64, kind
/// int8, index int32): the events of window `k` in the order `traceconv.model.layout.event_windows`
/// writes them (its docstring): the begins (time `ts`) and ends (`ts + dur`) of the slices, the
/// instants (`its`) and the counters (`cts`) whose window (`b_id`, `e_id`, `i_id`, `c_id`: each
/// one's, uint16) is `k`; `codes` the kinds' codes (BEGIN, END, INSTANT, COUNTER).  `pos` is each
/// slice's rank among the begins (a permutation of `0..len(ts)`), `zend` the rank its zero-length
/// end follows (one of those ranks), `depth` its depth (`>= 0`), as `event_windows` makes them.
/// For a stream of fewer than 2^31 - 2 events; `layout._window_reference` is the same in NumPy,
/// which the tests compare.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn window<'py>(
    py: Python<'py>,
    ts: Column<'py, i64>,
    dur: Column<'py, i64>,
    depth: Column<'py, i32>,
    pos: Column<'py, i32>,
    zend: Column<'py, i32>,
    its: Column<'py, i64>,
    cts: Column<'py, i64>,
    b_id: Column<'py, u16>,
    e_id: Column<'py, u16>,
    i_id: Column<'py, u16>,
    c_id: Column<'py, u16>,
    k: u16,
    codes: [i8; 4],
) -> PyResult<Window<'py>> {
    let (ts, dur, depth, pos, zend) = (column(&ts), column(&dur), column(&depth), column(&pos), column(&zend));
    let (its, cts) = (column(&its), column(&cts));
    let (b_id, e_id, i_id, c_id) = (column(&b_id), column(&e_id), column(&i_id), column(&c_id));
    same_length("window", &[ts.len(), dur.len(), depth.len(), pos.len(), zend.len(), b_id.len(), e_id.len()])?;
    same_length("window", &[its.len(), i_id.len()])?;
    same_length("window", &[cts.len(), c_id.len()])?;
    if 2 * ts.len() + its.len() + cts.len() + 2 >= 1 << 31 {
        return Err(PyValueError::new_err("window: 2^31 - 2 events or more"));
    }
    let ids = [&*b_id, &*e_id, &*i_id, &*c_id];
    let (time, kind, index) = py.detach(|| window_kernel(&ts, &dur, &depth, &pos, &zend, &its, &cts, ids, k, codes));
    Ok((time.into_pyarray(py), kind.into_pyarray(py), index.into_pyarray(py)))
}

pub fn register(core: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(core.py(), "nest")?;
    m.add_function(wrap_pyfunction!(nest, &m)?)?;
    m.add_function(wrap_pyfunction!(slice_order, &m)?)?;
    m.add_function(wrap_pyfunction!(window, &m)?)?;
    core.add_submodule(&m)
}
