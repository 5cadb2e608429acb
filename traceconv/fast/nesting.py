"""The lane assignment of :func:`traceconv.layout.nest`: the fewest slices moved.

Slices are visited in the order :func:`traceconv.layout.slice_order` gives (track, start, longer
first, input order).  Each track has lanes: lane 0 is the track itself, lanes 1, 2, ... are its
"overlap" tracks.  Every lane keeps a stack of its open slices.  A slice goes:

1. on lane 0 whenever it nests there: once the slices of lane 0 that end at or before its start
   are closed, lane 0 is empty or the slice is inside its top (``top.start <= s.start`` and
   ``s.end <= top.end``) -- so a slice moves only when it partially overlaps an open slice of its
   own track, the rule Perfetto's importer applies to JSON ``X`` events (stat
   ``slice_spill_overlapping_complete_event``);
2. else on the first lane 1, 2, ... where it nests the same way;
3. else on a new lane.

A moved slice takes nothing along: a slice that starts inside it is placed by the same rule, so it
stays on lane 0 when it nests there.  A slice's depth is its depth on its lane (what a viewer
draws); its parent is the innermost slice that encloses it on any lane of its track (of the lanes'
open top slices that enclose it, the one that started last; the first lane's on a tie), so a slice
inside a moved one still counts as that one's child in self times, as before lanes moved singly.

:func:`nest_reference` is that rule in plain Python (the specification, and what a port to another
language is checked against); :func:`nest` runs the compiled loop, which keeps every lane's stack as
a linked list through the slices themselves (``below``) and so allocates nothing per slice.
``tests/test_layout_lanes.py`` compares the two on random inputs.
"""

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
        k = -1
        best = -1
        for j in range(nl):
            top = lane_top[j]
            while top >= 0 and ts[top] + dur[top] <= start:     # close what ended by this start
                top = below[top]
            lane_top[j] = top
            if top < 0:
                if k < 0:
                    k = j
            elif end <= ts[top] + dur[top]:
                if k < 0:
                    k = j
                if best < 0 or ts[top] > ts[best]:
                    best = top
        if k < 0:
            k = nl
            lane_top[nl] = -1
            nl += 1
        top = lane_top[k]
        depth[i] = depth[top] + 1 if top >= 0 else 0
        parent[i] = best
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
    _nest(ts, dur, track, order.astype(np.int64, copy=False), depth, parent, lane)
    return depth, parent, lane


def nest_reference(ts: list[int], dur: list[int], track: list[int], order: list[int]
                   ) -> tuple[list[int], list[int], list[int]]:
    """The same assignment, written for reading: (depth, parent or -1, lane) per slice."""
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
        # the parent: of the lanes' top slices that enclose it, the one that started last (the
        # first lane's on a tie)
        enclosing = [st[-1] for st in stacks if st and end <= ts[st[-1]] + dur[st[-1]]]
        parent[i] = max(enclosing, key=lambda t: ts[t], default=-1)
        stack = stacks[k]
        depth[i] = len(stack)
        lane[i] = k
        stack.append(i)
    return depth, parent, lane
