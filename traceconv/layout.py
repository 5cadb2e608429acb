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
from .fast import memory, nesting
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
    depth, parent = array("i"), array("q")
    if n == 0:
        s.depth, s.parent = depth, parent
        return
    ts = _col(s.ts, np.int64)
    dur = _col(s.dur, np.int64)
    track = _col(s.track, np.int32)
    order = slice_order(trace)
    d, p, lane = nesting.nest(ts, dur, track, order)
    depth.frombytes(memoryview(d).cast("B"))     # (the arrays' own buffers: no intermediate copy)
    parent.frombytes(memoryview(p).cast("B"))
    del d, p
    moved: dict[int, int] = {}
    lanes = np.flatnonzero(lane)
    if len(lanes):
        # one track per (original track, lane), made in the order the lanes were first needed
        keys = track[lanes].astype(np.int64) << 32 | lane[lanes].astype(np.int64)
        uniq, inv = np.unique(keys, return_inverse=True)
        inv = inv.reshape(-1)
        pos = np.empty(n, np.int64)
        pos[order] = np.arange(n)
        first = np.full(len(uniq), n, np.int64)
        np.minimum.at(first, inv, pos[lanes])
        made = np.empty(len(uniq), np.int32)
        for u in np.argsort(first, kind="stable").tolist():
            t, k = int(uniq[u] >> 32), int(uniq[u] & 0xFFFF_FFFF)
            made[u] = trace.add_lane(trace.tracks[t], k).id
            moved[t] = 0
        new_track = track.copy()
        new_track[lanes] = made[inv]
        for t, c in zip(*np.unique(track[lanes], return_counts=True)):
            moved[int(t)] = int(c)
        s.track = array("i")
        s.track.frombytes(memoryview(new_track).cast("B"))
    s.depth, s.parent = depth, parent
    del order, lanes, lane
    memory.trim()
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
    depth = _col(s.depth, np.int32)
    # int32 keys where they fit (they do below 2**30 slices): less memory, a faster sort
    small = 2 * n + len(trace.instants) + len(trace.counters) + 2 < 2**31
    itype = np.int32 if small else np.int64
    pos = np.empty(n, dtype=itype)
    pos[slice_order(trace)] = np.arange(n, dtype=itype)
    zero = dur == 0

    ni, nc = len(trace.instants), len(trace.counters)
    its = _col(trace.instants.ts, np.int64)
    cts = _col(trace.counters.ts, np.int64)
    big = 2 * n + 2

    total = 2 * n + ni + nc
    # the sort keys, filled in place (a million slices: no temporaries of the whole stream's size)
    time = np.empty(total, np.int64)
    time[:n] = ts
    np.add(ts, dur, out=time[n:2 * n])
    time[2 * n:2 * n + ni] = its
    time[2 * n + ni:] = cts
    phase = np.ones(total, np.int8)
    phase[n:2 * n] = zero
    sub = np.empty(total, itype)
    np.multiply(pos, 2, out=sub[:n])
    np.negative(depth, out=sub[n:2 * n])
    sub[n:2 * n][zero] = sub[:n][zero] + 1
    sub[2 * n:] = np.arange(big, big + ni + nc, dtype=itype)
    del pos, depth, zero
    order = np.lexsort((sub, phase, time))
    del sub, phase
    time = time[order]
    kind = np.empty(total, np.int8)
    kind[:n], kind[n:2 * n], kind[2 * n:2 * n + ni], kind[2 * n + ni:] = BEGIN, END, INSTANT, COUNTER
    kind = kind[order]
    index = order.astype(itype)
    del order
    for k, first in ((END, n), (INSTANT, 2 * n), (COUNTER, 2 * n + ni)):   # each event's row in its table
        if first:
            index[kind == k] -= first
    return time, kind, index
