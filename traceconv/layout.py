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
"""

from __future__ import annotations

from array import array

import numpy as np

from .errors import WarningCode
from .model import Trace


def _col(a: array, dtype: str) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)


def slice_order(trace: Trace) -> np.ndarray:
    """Slice indices sorted by (track, start, longer first, input order)."""
    s = trace.slices
    n = len(s)
    ts = _col(s.ts, np.int64)
    dur = _col(s.dur, np.int64)
    track = _col(s.track, np.int32)
    return np.lexsort((np.arange(n), -dur, ts, track))


def nest(trace: Trace) -> None:
    """Assign overlapping slices to lanes and record each slice's depth.  Idempotent."""
    s = trace.slices
    if s.depth is not None and len(s.depth) == len(s):
        return
    n = len(s)
    depth = array("i", bytes(4 * n))
    parent = array("q", [-1]) * n
    if n == 0:
        s.depth, s.parent = depth, parent
        return
    order = slice_order(trace).tolist()
    ts_col, dur_col, track_col = s.ts, s.dur, s.track
    moved: dict[int, int] = {}
    lane_tracks: dict[tuple[int, int], int] = {}

    cur_track = -1
    lanes: list[list[tuple[int, int, int]]] = []   # per lane: stack of (start, end, slice)
    for i in order:
        t = track_col[i]
        if t != cur_track:
            cur_track = t
            lanes = [[]]
        start = ts_col[i]
        end = start + dur_col[i]
        best = -1
        best_start = -1
        first_free = -1
        for k, stack in enumerate(lanes):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack:
                top_start, top_end, _ = stack[-1]
                if end <= top_end and top_start > best_start:
                    best, best_start = k, top_start
            elif first_free < 0:
                first_free = k
        k = best if best >= 0 else first_free
        if k < 0:
            k = len(lanes)
            lanes.append([])
        stack = lanes[k]
        depth[i] = len(stack)
        if stack:
            parent[i] = stack[-1][2]
        stack.append((start, end, i))
        if k > 0:
            key = (t, k)
            lt = lane_tracks.get(key)
            if lt is None:
                lt = trace.add_lane(trace.tracks[t], k).id
                lane_tracks[key] = lt
            track_col[i] = lt
            moved[t] = moved.get(t, 0) + 1
    s.depth, s.parent = depth, parent
    if moved:
        names = sorted({trace.track_label(trace.tracks[t]) or "unnamed track" for t in moved})
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        trace.diagnostics.warn(WarningCode.OVERLAP_LANES,
                  f"slices that overlap without nesting were moved to extra 'overlap' tracks "
                  f"beside their own ({shown})", sum(moved.values()))


# Kinds of events in the writer's merged stream.
BEGIN, END, INSTANT, COUNTER = 0, 1, 2, 3


def event_stream(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All events in the order a BEGIN/END writer must emit them.

    Returns ``(time, kind, index)``: kind is BEGIN/END (index into slices),
    INSTANT (into instants) or COUNTER (into counters).  Requires :func:`nest`.
    Order: by time; at one time, ends of slices with a duration first (deepest
    first), then begins in nesting order with each zero-length slice ended right
    after its begin, then instants and counters.
    """
    s = trace.slices
    if s.depth is None or len(s.depth) != len(s):
        raise RuntimeError("layout.nest() must run before event_stream()")
    n = len(s)
    ts = _col(s.ts, np.int64)
    dur = _col(s.dur, np.int64)
    depth = _col(s.depth, np.int32).astype(np.int64)
    pos = np.empty(n, dtype=np.int64)
    pos[slice_order(trace)] = np.arange(n, dtype=np.int64)
    zero = dur == 0

    ni, nc = len(trace.instants), len(trace.counters)
    its = _col(trace.instants.ts, np.int64)
    cts = _col(trace.counters.ts, np.int64)
    big = 2 * n + 2

    time = np.concatenate([ts, ts + dur, its, cts])
    phase = np.concatenate([np.ones(n, np.int8), np.where(zero, 1, 0).astype(np.int8),
                            np.ones(ni, np.int8), np.ones(nc, np.int8)])
    sub = np.concatenate([2 * pos, np.where(zero, 2 * pos + 1, -depth),
                          big + np.arange(ni, dtype=np.int64), big + ni + np.arange(nc, dtype=np.int64)])
    kind = np.concatenate([np.full(n, BEGIN, np.int8), np.full(n, END, np.int8),
                           np.full(ni, INSTANT, np.int8), np.full(nc, COUNTER, np.int8)])
    index = np.concatenate([np.arange(n), np.arange(n), np.arange(ni), np.arange(nc)]).astype(np.int64)
    order = np.lexsort((sub, phase, time))
    return time[order], kind[order], index[order]
