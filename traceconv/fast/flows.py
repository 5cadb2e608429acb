"""Bind flow points to slices, at compiled speed.

The rule is Perfetto's (its JSON importer sorts events stably by time, then a flow point binds to
what is open on its thread at that moment); :meth:`traceconv.convert.chrome.ChromeReader._bind_flow_points`
states it and this is its loop over arrays.  Then link the bound points of each flow:
:func:`link` (Perfetto's v1 rule, compiled; :func:`link_reference` states it in plain Python).
"""

from __future__ import annotations

import numpy as np

from . import jit


@jit
def _is_open(i, ts, seq, s_ts, s_dur, bseq, eseq):
    start = s_ts[i]
    if start > ts or (start == ts and bseq[i] > seq):
        return False
    end = start + s_dur[i]
    return end > ts or (end == ts and (eseq[i] < 0 or eseq[i] > seq))


@jit
def _bind(s_ts, s_dur, s_track, bseq, eseq, s_order, q_track, q_ts, q_seq, q_enc, q_order, out, stack):
    ns = len(s_order)
    nq = len(q_order)
    a = 0                      # the current track's slices: s_order[a:b]
    qi = 0
    while qi < nq:
        track = q_track[q_order[qi]]
        while a < ns and s_track[s_order[a]] < track:
            a += 1
        b = a
        while b < ns and s_track[s_order[b]] == track:
            b += 1
        top = 0
        p = a
        while qi < nq and q_track[q_order[qi]] == track:
            q = q_order[qi]
            qi += 1
            ts = q_ts[q]
            seq = q_seq[q]
            if not q_enc[q]:
                # the next slice to begin: later, or at the same time but after it in the file
                lo = a
                hi = b
                while lo < hi:
                    mid = (lo + hi) // 2
                    if s_ts[s_order[mid]] < ts:
                        lo = mid + 1
                    else:
                        hi = mid
                k = lo
                while k < b and s_ts[s_order[k]] == ts and bseq[s_order[k]] < seq:
                    k += 1
                out[q] = s_order[k] if k < b else -1
                continue
            while p < b and s_ts[s_order[p]] < ts:
                i = s_order[p]
                start = s_ts[i]
                while top > 0:
                    t = stack[top - 1]
                    if s_ts[t] <= start and start < s_ts[t] + s_dur[t]:
                        break
                    top -= 1
                stack[top] = i
                top += 1
                p += 1
            while top > 0 and not _is_open(stack[top - 1], ts, seq, s_ts, s_dur, bseq, eseq):
                top -= 1
            best = stack[top - 1] if top > 0 else -1
            k = p
            while k < b and s_ts[s_order[k]] == ts:
                if _is_open(s_order[k], ts, seq, s_ts, s_dur, bseq, eseq):
                    best = s_order[k]
                k += 1
            out[q] = best
        a = b


def bind(s_ts: np.ndarray, s_dur: np.ndarray, s_track: np.ndarray, bseq: np.ndarray, eseq: np.ndarray,
         q_track: np.ndarray, q_ts: np.ndarray, q_seq: np.ndarray, q_enc: np.ndarray) -> np.ndarray:
    """For each query point (track, ts, file position, whether it binds to the enclosing slice or
    to the next one), the slice index it binds to, or -1."""
    s_order = np.lexsort((bseq, -s_dur, s_ts, s_track)).astype(np.int64, copy=False)
    q_order = np.lexsort((np.arange(len(q_ts)), q_seq, q_ts, q_track)).astype(np.int64, copy=False)
    out = np.full(len(q_ts), -1, np.int64)
    # the open slices of a track (indices): int32 while they fit, half the memory
    stack = np.empty(max(len(s_ts), 1), np.int32 if len(s_ts) < 2**31 else np.int64)
    _bind(s_ts, s_dur, s_track, bseq, eseq, s_order, q_track, q_ts, q_seq, q_enc, q_order, out, stack)
    return out


@jit
def _link(group, ph, bound, src, dst, grp, counts):
    """Perfetto's v1 flow rule (its JSON importer, v58) over points sorted by flow (``group``) and
    time.  A flow has one slot, the slice it leaves from: an ``s`` fills the empty slot (an ``s``
    while it is full starts nothing: ``flow_duplicate_id``); a ``t`` links the slot's slice to its
    own and takes the slot; an ``f`` links the slot's slice to its own and leaves the slot as it
    is, so the next ``f`` links from the same slice (a fan-out: one launch, several kernels); a
    ``t`` or ``f`` with the slot empty links nothing; a point bound to no slice is skipped.
    Writes the links; counts: [links, unresolved points, dropped events, used events]."""
    n = len(group)
    k = 0
    unresolved = 0
    dropped = 0
    used = 0
    i = 0
    while i < n:
        g = group[i]
        slot = -1
        slot_new = 0                             # the slot's event is in no link yet
        while i < n and group[i] == g:
            sl = bound[i]
            p = ph[i]
            i += 1
            if sl < 0:
                unresolved += 1
                dropped += 1
                continue
            if p == 115:                         # s
                if slot >= 0:
                    unresolved += 1
                    dropped += 1
                else:
                    slot = sl
                    slot_new = 1
                continue
            if slot < 0:                         # t or f before any s
                unresolved += 1
                dropped += 1
                continue
            src[k] = slot
            dst[k] = sl
            grp[k] = g
            k += 1
            used += slot_new + 1
            slot_new = 0
            if p == 116:                         # t
                slot = sl
        if slot >= 0 and slot_new:
            # an s (or t) never followed by anything: its event is not in the model
            dropped += 1
            unresolved += 1
    counts[0] = k
    counts[1] = unresolved
    counts[2] = dropped
    counts[3] = used


def link_reference(group: list[int], ph: list[int], bound: list[int]) -> list[tuple[int, int, int]]:
    """The links ``(src, dst, group)`` of :func:`_link`'s rule, in plain Python."""
    links: list[tuple[int, int, int]] = []
    slot: dict[int, int] = {}
    for g, p, sl in zip(group, ph, bound):
        if sl < 0:
            continue                      # bound to no slice: skipped
        if p == ord("s"):
            slot.setdefault(g, sl)        # a second s while the flow is started: ignored
        elif g in slot:
            links.append((slot[g], sl, g))
            if p == ord("t"):
                slot[g] = sl              # a step: the next hop leaves from here
    return links


def link(group: np.ndarray, ph: np.ndarray, bound: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int, int]:
    """(src slices, dst slices, flow group of each link, unresolved points, dropped events, used
    events) for flow points sorted by group and time, each bound to a slice (or -1)."""
    n = len(group)
    src = np.empty(n, np.int64)
    dst = np.empty(n, np.int64)
    grp = np.empty(n, np.int64)
    counts = np.zeros(4, np.int64)
    _link(group.astype(np.int64), ph.astype(np.uint8), bound.astype(np.int64), src, dst, grp, counts)
    k = int(counts[0])
    return src[:k], dst[:k], grp[:k], int(counts[1]), int(counts[2]), int(counts[3])
