"""Make every track strictly nested, and order slice begins/ends for a BEGIN/END stream.

A Perfetto ``SLICE_BEGIN``/``SLICE_END`` stream (and a Chrome JSON viewer) closes
whatever slice is open on top of its track.  Slices that overlap without nesting
would take each other's ends, so :func:`nest` moves such slices to extra
"overlap" tracks (lanes) of the same thread or track: nothing is hidden, nothing
is shortened, and the move is counted as a warning.

Nesting rule (the same one Perfetto applies to Chrome ``X`` events): slices of a
track sorted by start, longer first on ties; a slice is inside the open slice
``p`` when ``p.start <= s.start`` and ``s.end <= p.end``; an open slice whose
end is at or before ``s.start`` is closed first.

trace_processor keeps slices down to depth :data:`MAX_DEPTH` - 1 of a track and drops deeper ones
(stat ``slice_max_depth_exceeded``, from a JSON file too): the slices a track holds deeper than that
(a deep recursion, begins never ended) go to lanes of their own, :data:`MAX_DEPTH` levels a lane,
each at its depth less the levels above it, also counted.

Only the slices that cannot nest on their own track move, one by one: a slice
stays on its track whenever it nests there, and what starts inside a moved slice
is placed by the same rule (so it stays where it nests).  This is what Perfetto
does with the ``X`` events of a JSON file (its overflow tracks, stat
``slice_spill_overlapping_complete_event``): the same slices move, to the same
depths.  :func:`nest_reference` states the rule in plain Python; the loop :func:`nest` runs is
compiled, beside it in ``rust/src/nest.rs`` (``traceconv._core.nest``).
"""

from __future__ import annotations

from array import array
from typing import Any, Iterator

import numpy as np

from .._native import _core
from ..errors import WarningCode, clip
from .. import memory
from ..progress import report
from .trace import Trace, TrackKind


# Perfetto v58's SliceTracker: a slice that would be at this depth of its track or deeper is dropped
MAX_DEPTH = 512
_KEY_LIMIT = 1 << 62      # (track, lane, level) numbered in one int64 below this many of them


def _col(a: array, dtype: str) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)


def slice_order(trace: Trace) -> np.ndarray:
    """Slice indices sorted by (track, start, longer first, input order): ``np.lexsort((-dur, ts,
    track))``, as one sort in the compiled core (630k slices: 135 -> 40 ms)."""
    s = trace.slices
    if not len(s):
        return np.zeros(0, np.int64)
    return _core.nest.slice_order(_col(s.ts, np.int64), _col(s.dur, np.int64), _col(s.track, np.int32))


def taken_order(trace: Trace) -> np.ndarray:
    """:func:`slice_order` of a trace :func:`nest` laid out: the order it left in the table (taken
    from it, so that its 4 bytes a slice are not kept through the writing), else sorted again."""
    s = trace.slices
    order, s.order = s.order, None
    return order if order is not None and len(order) == len(s) else slice_order(trace)


def counters_on_counter_tracks(trace: Trace) -> None:
    """Counter samples on a track that is not a counter track go to a counter track of their own,
    named after it, in its process (a note, counted).  A .pftrace can hold them: a ``TYPE_COUNTER``
    event on a thread's or a process's track, which trace_processor counts as an error
    (``track_event_counter_invalid_track_uuid``) and drops; written there again, they would be the
    same error in the output.  Every writer then draws them as a counter series.  Idempotent."""
    c = trace.counters
    if not len(c):
        return
    track = np.frombuffer(c.track, np.int32)
    # (the tracks used, by a count: np.unique imports numpy.ma on first use, ~9 ms of every conversion)
    used = np.flatnonzero(np.bincount(track, minlength=len(trace.tracks))).tolist()
    wrong = [t for t in used if trace.tracks[t].kind is not TrackKind.COUNTER]
    if not wrong:
        return
    to = np.arange(len(trace.tracks), dtype=np.int32)
    for t in wrong:
        tr = trace.tracks[t]
        # (a track of its own, not one found by name: a counter track of the same name keeps its series)
        to[t] = trace._add_track(TrackKind.COUNTER, trace.track_label(tr), process=tr.process).id
    new = to[track]
    moved = int(np.count_nonzero(new != track))
    track[:] = new
    trace.diagnostics.warn(WarningCode.NOTE, "counter values on a track that is not a counter track were "
                           f"drawn on a counter track of their own named after it ({_shown(trace, wrong)})",
                           moved)


def _shown(trace: Trace, tracks: Any) -> str:
    """The names of ``tracks`` (ids) for a warning: the first three in order, and how many more
    (each without the spaces around it: Kineto's ``"stream 7 "`` made ``"stream 7 , stream 13 "``)."""
    names = sorted({clip(trace.track_label(trace.tracks[t]).strip()) or "unnamed track" for t in tracks})
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def nest(trace: Trace) -> tuple[int, int]:
    """Move the slices that cannot nest on their track to its overlap lanes, and record each
    slice's depth (on its lane) and parent (the innermost slice enclosing it on any lane of its
    track: self times count what starts inside a moved slice as its child).  Counter samples go
    on counter tracks first (:func:`counters_on_counter_tracks`).  Idempotent.  Returns how many
    slices it moved to overlap lanes and to depth lanes (each also a warning; (0, 0) on a trace
    already laid out)."""
    counters_on_counter_tracks(trace)
    s = trace.slices
    if s.depth is not None and len(s.depth) == len(s):
        return 0, 0
    report("laying out tracks", 0, None)
    n = len(s)
    depth, parent = array("i"), array("q")
    if n == 0:
        s.depth, s.parent, s.order = depth, parent, np.zeros(0, np.int32)
        return 0, 0
    ts = _col(s.ts, np.int64)
    dur = _col(s.dur, np.int64)
    track = _col(s.track, np.int32)
    order = slice_order(trace)
    order = order.astype(np.int64, copy=False)
    d, p, lane = _core.nest.nest(ts, dur, track, order)
    _chain_zero_slices(ts, dur, track, order, d, p)
    if n < 2**31:
        order = order.astype(np.int32)         # (kept for the writer: 4 bytes a slice, not 8)
    moved: dict[int, int] = {}
    overlapping = np.flatnonzero(lane)
    for t, c in zip(*np.unique(track[overlapping], return_counts=True)):
        moved[int(t)] = int(c)
    deep_of, deep_moved, pos = _deep_lanes(trace, track, order, d, lane)
    depth.frombytes(memoryview(d).cast("B"))     # (the arrays' own buffers: no intermediate copy)
    parent.frombytes(memoryview(p).cast("B"))
    del d, p, overlapping
    lanes = np.flatnonzero(lane)
    if len(lanes):
        # one track per (original track, lane), made in the order the lanes were first needed
        keys = track[lanes].astype(np.int64) << 32 | lane[lanes].astype(np.int64)
        uniq, inv = np.unique(keys, return_inverse=True)
        inv = inv.reshape(-1)
        if pos is None:
            pos = _positions(order)
        first = np.full(len(uniq), n, np.int64)
        np.minimum.at(first, inv, pos[lanes])
        made = np.empty(len(uniq), np.int32)
        labels = trace.thread_labels(p.id for p in trace.processes)    # (no lane adds a thread)
        for u in np.argsort(first, kind="stable").tolist():
            t, k = int(uniq[u] >> 32), int(uniq[u] & 0xFFFF_FFFF)
            made[u] = trace.add_lane(trace.tracks[t], k, labels, deep_of.get((t, k), 0)).id
        new_track = track.copy()
        new_track[lanes] = made[inv]
        s.track = array("i")
        s.track.frombytes(memoryview(new_track).cast("B"))
        at, lane_track = pos[lanes], made[inv]
        del keys, uniq, inv, pos, first, made, new_track      # (before the trim: ~8 MB at 630k slices)
        order = _order_after_moves(order, at, lane_track)
        del at, lane_track
    s.depth, s.parent, s.order = depth, parent, order
    del order, lanes, lane, ts, dur, track
    memory.trim()
    if moved:
        trace.diagnostics.warn(WarningCode.OVERLAP_LANES,
                  f"slices that partially overlap another on their track (so cannot nest there) were "
                  f"moved to 'overlap' lanes drawn with it; what nests stayed ({_shown(trace, moved)})",
                  sum(moved.values()))
    if deep_moved:
        trace.diagnostics.warn(WarningCode.OVERLAP_LANES,
                               f"slices nested {MAX_DEPTH} levels deep or more on their track (which Perfetto drops: "
                               f"stat slice_max_depth_exceeded) were moved to lanes drawn with it, {MAX_DEPTH} levels "
                               f"a lane ({_shown(trace, deep_moved)})", sum(deep_moved.values()))
    return sum(moved.values()), sum(deep_moved.values())


def _positions(order: np.ndarray) -> np.ndarray:
    """Each slice's place in ``order`` (its inverse)."""
    pos = np.empty(len(order), np.int64)
    pos[order] = np.arange(len(order))
    return pos


def _deep_lanes(trace: Trace, track: np.ndarray, order: np.ndarray, depth: np.ndarray, lane: np.ndarray
                ) -> tuple[dict[tuple[int, int], int], dict[int, int], np.ndarray | None]:
    """The slices :func:`nest` placed :data:`MAX_DEPTH` levels deep or more on their lane, given
    lanes of their own (in place: ``lane`` numbered after the track's overlap lanes, in the order
    the lanes were first needed; ``depth`` less the levels above).  A lane's slices from depth
    ``m * MAX_DEPTH`` up to the next such depth nest as they did (each one's enclosing slices
    down to that depth come along).  Returns the depth each new lane starts at, by (track, lane),
    the slices moved, by track, and each slice's place in ``order`` when it was needed (else None)."""
    if not len(depth) or int(depth.max()) < MAX_DEPTH:
        return {}, {}, None
    deep = np.flatnonzero(depth >= MAX_DEPTH)
    level = depth[deep] // MAX_DEPTH
    depth[deep] -= level * MAX_DEPTH
    last = np.zeros(len(trace.tracks), np.int64)             # each track's last overlap lane
    np.maximum.at(last, track, lane)
    pos = _positions(order)
    # one int64 key per (track, lane, level) (np.unique of rows sorted 400k of them in 0.36 s),
    # or the rows where so many could not be numbered in one
    lanes, levels = int(lane[deep].max()) + 1, int(level.max()) + 1
    if len(trace.tracks) * lanes * levels < _KEY_LIMIT:
        key = (track[deep].astype(np.int64) * lanes + lane[deep]) * levels + level
        uniq, inv = np.unique(key, return_inverse=True)
        uniq = np.stack([uniq // (lanes * levels), uniq // levels % lanes, uniq % levels], 1)
    else:
        uniq, inv = np.unique(np.stack([track[deep], lane[deep], level], 1), axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    first = np.full(len(uniq), len(order), np.int64)
    np.minimum.at(first, inv, pos[deep])
    new = np.empty(len(uniq), np.int32)
    deep_of: dict[tuple[int, int], int] = {}
    for u in np.argsort(first, kind="stable").tolist():
        t, lv = int(uniq[u, 0]), int(uniq[u, 2])
        last[t] += 1
        new[u] = last[t]
        deep_of[(t, int(last[t]))] = lv * MAX_DEPTH
    lane[deep] = new[inv]
    return deep_of, {int(t): int(c) for t, c in zip(*np.unique(track[deep], return_counts=True))}, pos


def _order_after_moves(order: np.ndarray, at: np.ndarray, lane_track: np.ndarray) -> np.ndarray:
    """:func:`slice_order` after :func:`nest` moved the slices at positions ``at`` of ``order`` (the
    order before the moves) to the tracks ``lane_track``, without sorting every slice again (630k
    slices: 32 ms on the writer's critical path): the slices that stayed keep their order; a lane
    made here is a new track, numbered after every other (:meth:`Trace.add_lane`), so the moved
    slices follow, by lane, each lane's in the order they had on their track (a lane takes slices
    of one track: by start, longer first, index).  One new array as long as ``order``."""
    keep = np.ones(len(order), np.bool_)
    keep[at] = False
    out = np.empty_like(order)
    k = len(order) - len(at)
    np.compress(keep, order, out=out[:k])
    out[k:] = order[at[np.lexsort((at, lane_track))]]
    return out


def _zero_groups(ts: np.ndarray, dur: np.ndarray, track: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zero-duration slices in ``order`` and where each one's group starts: a group is the
    zero-duration slices of one track at one time (consecutive in :func:`slice_order`, which puts
    the longer first at one time)."""
    zo = order[dur[order] == 0]
    head = np.ones(len(zo), np.bool_)
    if len(zo) > 1:
        head[1:] = (track[zo][1:] != track[zo][:-1]) | (ts[zo][1:] != ts[zo][:-1])
    return zo, np.maximum.accumulate(np.where(head, np.arange(len(zo)), 0))


def _chain_zero_slices(ts: np.ndarray, dur: np.ndarray, track: np.ndarray, order: np.ndarray,
                       depth: np.ndarray, parent: np.ndarray) -> None:
    """Zero-duration slices at one time on one track nest one in the other, in order, as
    trace_processor reads Chrome ``X`` events: a zero-duration slice stays open for what begins at
    its own time (three at one time are at depths d, d+1, d+2).  They never move to a lane (a
    zero-duration slice nests wherever it starts), so the rule only deepens each group's later
    members (the kernel, which closes a slice whose end is at the next one's start, made them
    siblings)."""
    zo, start = _zero_groups(ts, dur, track, order)
    k = np.arange(len(zo)) - start
    if not k.any():
        return
    chained = np.flatnonzero(k)
    depth[zo[chained]] = depth[zo[start[chained]]] + k[chained]
    parent[zo[chained]] = zo[chained - 1]


def nest_reference(ts: list[int], dur: list[int], track: list[int], order: list[int]
                   ) -> tuple[list[int], list[int], list[int]]:
    """The lane assignment of :func:`nest`, written for reading: (depth, parent or -1, lane) per
    slice, for slices visited in ``order`` (:func:`slice_order`: track, start, longer first, input
    order).  The compiled loop (``traceconv._core.nest.nest``, ``rust/src/nest.rs``) gives the
    same arrays; ``tests/test_layout_lanes.py`` compares the two on random inputs.

    Each track has lanes: lane 0 is the track itself, lanes 1, 2, ... its "overlap" tracks, each a
    stack of open slices.  A slice goes on lane 0 whenever it nests there (once the slices of lane 0
    that end at or before its start are closed, lane 0 is empty or the slice is inside its top:
    ``top.start <= s.start`` and ``s.end <= top.end``), else on the first lane 1, 2, ... where it
    nests the same way, else on a new lane.  A moved slice takes nothing along.  A slice's depth is
    its depth on its lane; its parent is the innermost slice that encloses it on any lane of its
    track (of each lane's innermost open slice that encloses it, the one that started last; the
    first lane's on a tie)."""
    n = len(ts)
    depth, parent, lane = [0] * n, [-1] * n, [0] * n
    stacks: list[list[int]] = []          # the current track's lanes, each a stack of open slices
    current = None
    for i in order:
        if track[i] != current:
            current, stacks = track[i], [[]]
        start, end = ts[i], ts[i] + dur[i]
        for stack in stacks:
            while stack and ts[stack[-1]] + dur[stack[-1]] <= start:
                stack.pop()
        k = next((j for j, st in enumerate(stacks) if not st or end <= ts[st[-1]] + dur[st[-1]]), None)
        if k is None:
            k = len(stacks)
            stacks.append([])
        # the parent: of each lane's innermost open slice that encloses it (not always the top:
        # a moved slice ends after the top of the lane it left), the one that started last (the
        # first lane's on a tie)
        enclosing = [x for x in (next((t for t in reversed(st) if end <= ts[t] + dur[t]), None)
                                 for st in stacks) if x is not None]
        parent[i] = max(enclosing, key=lambda t: ts[t], default=-1)
        stack = stacks[k]
        depth[i] = len(stack)
        lane[i] = k
        stack.append(i)
    return depth, parent, lane


# Kinds of events in the writer's merged stream.
BEGIN, END, INSTANT, COUNTER = 0, 1, 2, 3


def stream_length(trace: Trace) -> int:
    return 2 * len(trace.slices) + len(trace.instants) + len(trace.counters)


def _begin_order(trace: Trace, ts: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """The order of the slices' begins at one time: :func:`slice_order`, except that a flow's
    source begins before its destination when both begin at the same time on different tracks (a
    TrackEvent flow goes from the event read first: a destination read first would end a flow that
    does not exist yet, and trace_processor would drop the link).  Each slice gets a level: one
    above its same-time source's for a destination, and at least that of the slices it begins
    inside of at the same time on its track, so that each track keeps its nesting order.  Begins at
    one time go by level, then by :func:`slice_order`; with no such flow, that is slice_order."""
    if order is None:
        order = slice_order(trace)
    f = trace.flows
    if not len(f):
        return order
    src = _col(f.src, np.int64)
    dst = _col(f.dst, np.int64)
    track = _col(trace.slices.track, np.int32)
    same = (ts[src] == ts[dst]) & (track[src] != track[dst])
    if not same.any():
        return order
    src, dst = src[same], dst[same]
    # runs of slice_order that begin at one time on one track: each slice inside the one before
    o_ts, o_tr = ts[order], track[order]
    head = np.ones(len(order), np.bool_)
    head[1:] = (o_ts[1:] != o_ts[:-1]) | (o_tr[1:] != o_tr[:-1])
    offset = (np.cumsum(head) - 1) << 20              # a run's base: below every later run's
    level = np.zeros(len(ts), np.int64)
    for _ in range(64):                               # (same-time flows in a cycle: stop there)
        before = level.copy()
        np.maximum.at(level, dst, level[src] + 1)
        level[order] = np.maximum.accumulate(level[order] + offset) - offset   # a run's max so far
        if np.array_equal(level, before):
            break
    return order[np.argsort(level[order], kind="stable")]


_WINDOW_CHUNK = 1 << 16     # rows of a time column tested against a window's edges at a time
_KERNEL_EDGES = 2**16 - 1   # window edges the compiled sort takes at most (each event's window is a uint16)


def _in_window(t: np.ndarray, d: "np.ndarray | None", lo: "int | None", hi: "int | None",
               itype: Any) -> np.ndarray:
    """The rows whose time (``t``, or ``t + d``) is in ``[lo, hi)`` (None: no edge), ``_WINDOW_CHUNK``
    rows at a time: no temporary as long as the column."""
    if lo is None and hi is None:
        return np.arange(len(t), dtype=itype)
    found = []
    for a in range(0, len(t), _WINDOW_CHUNK):
        v = t[a:a + _WINDOW_CHUNK]
        if d is not None:
            v = v + d[a:a + _WINDOW_CHUNK]
        m = v >= lo if lo is not None else v < hi
        if lo is not None and hi is not None:
            m &= v < hi
        found.append(np.flatnonzero(m) + a)
    return np.concatenate(found).astype(itype) if found else np.zeros(0, itype)


def event_windows(trace: Trace, size: int = 1 << 18) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """All events in the order a BEGIN/END writer must emit them, a window of time at a time.

    Yields ``(time, kind, index)`` of the events whose time is in ``[a, b)``, each window of about
    ``size`` events: kind is BEGIN/END (index into slices), INSTANT (into instants) or COUNTER
    (into counters).  Requires :func:`nest`.  Order: by time; at one time, ends of slices with a
    duration first (deepest first), then begins in nesting order (a same-time flow's source
    first: :func:`_begin_order`) with each zero-length slice ended right after its begin -- or,
    where zero-length slices of one track and time nest in one another (:func:`nest`), after the
    begin of the group's last, deepest first -- then instants and counters.  A window holds every event of its times,
    so each is sorted on its own by the same keys and the windows follow one another: their
    concatenation is the whole stream, while only one window's sort keys exist at a time (a
    million slices: ~35 MB less at the peak than sorting the stream at once)."""
    s = trace.slices
    if s.depth is None or len(s.depth) != len(s):
        raise RuntimeError("layout.nest() must run before event_windows()")
    n, ni, nc = len(s), len(trace.instants), len(trace.counters)
    total = 2 * n + ni + nc
    ts = _col(s.ts, np.int64)
    dur = _col(s.dur, np.int64)
    depth = _col(s.depth, np.int32)
    its = _col(trace.instants.ts, np.int64)
    cts = _col(trace.counters.ts, np.int64)
    # int32 keys and rows where they fit (below 2**30 slices): less memory, a faster sort
    itype = np.int32 if total + 2 < 2**31 else np.int64
    pos = np.empty(n, dtype=itype)
    order = taken_order(trace)            # (one order, for the begins and the zero-length groups)
    pos[_begin_order(trace, ts, order)] = np.arange(n, dtype=itype)
    # a zero-length slice ends after the last begin of its group (zero-length slices of one track
    # and time, nested in one another), the deepest first
    zend = pos.copy()
    zo, start = _zero_groups(ts, _col(s.dur, np.int64), _col(s.track, np.int32), order)
    del order
    if len(zo):
        heads = np.flatnonzero(np.r_[True, start[1:] != start[:-1]])
        zend[zo] = np.repeat(np.maximum.reduceat(pos[zo], heads), np.diff(np.r_[heads, len(zo)]))
    # the times of begins, ends (ts + dur: computed where needed, never kept for all slices),
    # instants and counters
    times = ((ts, None), (ts, dur), (its, None), (cts, None))
    edges: list[int] = []
    if total > size:
        # window edges: quantiles of a sample of all the times
        step = max(1, total // (1 << 16))
        sample = np.concatenate([t[::step] if d is None else t[::step] + d[::step] for t, d in times])
        q = np.quantile(sample, np.linspace(0, 1, total // size + 1)[1:-1], method="lower")
        edges = sorted(set(q.astype(np.int64).tolist()))    # (np.unique imports numpy.ma: 9 ms)
    if itype is np.int32 and len(edges) < _KERNEL_EDGES:
        # each event's window (2 bytes an event), then each window's events sorted by the compiled
        # core (1M events, 21 windows: 0.12-0.13 -> 0.09-0.10 s, on the thread that sorts the next
        # window while the writer encodes this one)
        at = np.asarray(edges, np.int64)
        ids = [_window_ids(t, d, at) for t, d in times]
        for k in range(len(edges) + 1):
            time, kind, index = _core.nest.window(ts, dur, depth, pos, zend, its, cts, *ids, k,
                                                  (BEGIN, END, INSTANT, COUNTER))
            if len(time):
                yield time, kind, index
        return
    for lo, hi in zip([None, *edges], [*edges, None]):
        time, kind, index = _window_reference(ts, dur, depth, pos, zend, its, cts, lo, hi, itype)
        if len(time):
            yield time, kind, index


def _window_ids(t: np.ndarray, d: "np.ndarray | None", edges: np.ndarray) -> np.ndarray:
    """Each row's window: how many of the window ``edges`` its time (``t``, or ``t + d``) is at or
    past, ``_WINDOW_CHUNK`` rows at a time (no temporary as long as the column)."""
    out = np.empty(len(t), np.uint16)
    for a in range(0, len(t), _WINDOW_CHUNK):
        v = t[a:a + _WINDOW_CHUNK]
        if d is not None:
            v = v + d[a:a + _WINDOW_CHUNK]
        out[a:a + _WINDOW_CHUNK] = np.searchsorted(edges, v, side="right")
    return out


def _window_reference(ts: np.ndarray, dur: np.ndarray, depth: np.ndarray, pos: np.ndarray, zend: np.ndarray,
                      its: np.ndarray, cts: np.ndarray, lo: "int | None", hi: "int | None",
                      itype: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The events of :func:`event_windows`' window ``[lo, hi)``, in its order, by NumPy: what the
    compiled ``_core.nest.window`` does (the tests compare them), and the way for a stream of 2^31
    events or more, past its keys."""
    n, ni = len(ts), len(its)
    big = 2 * n + 2
    times = ((ts, None), (ts, dur), (its, None), (cts, None))
    sel = [_in_window(t, d, lo, hi, itype) for t, d in times]
    b, e, i, c = sel
    nb, ne, nw = len(b), len(e), sum(len(x) for x in sel)
    time = np.concatenate([ts[b], ts[e] + dur[e], its[i], cts[c]])
    phase = np.ones(nw, np.int8)
    z = dur[e] == 0
    phase[nb:nb + ne] = z
    sub = np.empty(nw, itype)
    sub[:nb] = 2 * pos[b]
    sub[nb:nb + ne] = np.where(z, 2 * zend[e] + 1, -depth[e])
    sub[nb + ne:] = np.concatenate([big + i, big + ni + c])
    tie = np.zeros(nw, itype)                   # the ends of one zero-length group: deepest first
    tie[nb:nb + ne] = np.where(z, -pos[e], 0)
    order = np.lexsort((tie, sub, phase, time))
    del sub, phase, tie
    kind = np.empty(nw, np.int8)
    kind[:nb], kind[nb:nb + ne], kind[nb + ne:nb + ne + len(i)], kind[nb + ne + len(i):] = \
        BEGIN, END, INSTANT, COUNTER
    index = np.concatenate(sel)
    return time[order], kind[order], index[order]
