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
from .fast import nesting
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
    ts = _col(s.ts, np.int64)
    dur = _col(s.dur, np.int64)
    track = _col(s.track, np.int32)
    order = slice_order(trace)
    d, p, lane = nesting.nest(ts, dur, track, order)
    depth = array("i", d.tobytes())
    parent = array("q", p.tobytes())
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
        s.track = array("i", new_track.tobytes())
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
