"""The lane assignment of :func:`traceconv.layout.nest`, compiled: one pass over slices sorted by
(track, start, longer first, input order), with one stack of open slices per lane kept as a linked
list through the slices themselves (``below``), so the pass allocates nothing per slice."""

from __future__ import annotations

import numpy as np

from . import jit


@jit
def _nest(ts, dur, track, order, depth, parent, lane):
    n = len(order)
    below = np.empty(n if n else 1, np.int64)     # the slice under each one on its lane's stack
    lane_top = np.empty(n if n else 1, np.int64)  # per lane of the current track: its top slice, -1 empty
    cur = -1
    nl = 0
    for q in range(n):
        i = order[q]
        t = track[i]
        if q == 0 or t != cur:
            cur = t
            nl = 1
            lane_top[0] = -1
        start = ts[i]
        end = start + dur[i]
        best = -1
        best_start = -1
        first_free = -1
        for k in range(nl):
            top = lane_top[k]
            while top >= 0 and ts[top] + dur[top] <= start:
                top = below[top]
            lane_top[k] = top
            if top >= 0:
                if end <= ts[top] + dur[top] and (best < 0 or ts[top] > best_start):
                    best = k
                    best_start = ts[top]
            elif first_free < 0:
                first_free = k
        k = best if best >= 0 else first_free
        if k < 0:
            k = nl
            lane_top[nl] = -1
            nl += 1
        top = lane_top[k]
        depth[i] = depth[top] + 1 if top >= 0 else 0
        parent[i] = top
        below[i] = top
        lane_top[k] = i
        lane[i] = k


def nest(ts: np.ndarray, dur: np.ndarray, track: np.ndarray, order: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(depth, parent slice or -1, lane: 0 for the slice's own track, 1.. for overlap lanes)."""
    n = len(order)
    depth = np.zeros(n, np.int32)
    parent = np.full(n, -1, np.int64)
    lane = np.zeros(n, np.int32)
    _nest(ts, dur, track, order.astype(np.int64), depth, parent, lane)
    return depth, parent, lane
