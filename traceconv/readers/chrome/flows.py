"""The flows of a Chrome JSON read: their points gathered while the events are converted
(:class:`FlowPoints`), then, once every slice is known, bound to slices and linked by Perfetto's
rules (:meth:`FlowPoints.resolve`).  The binding loop and the linking are compiled
(``traceconv._core.flows``, rust/src/flows.rs); the reader (:mod:`.reader`) feeds the points.

* Flows v1 (``s``/``t``/``f``, identity = category + name + id): every point binds to a slice
  (:func:`bind_points`), then each flow's points are walked in time order.  The scanner's points
  come in batches of columns (:attr:`FlowPoints.rows`), those the general decoder read one by one
  (:attr:`FlowPoints.v1`); both are one table before they are linked.
* Flows v2: ``bind_id`` with ``flow_out``/``flow_in`` on the slices themselves
  (:attr:`FlowPoints.binds`).
"""

from __future__ import annotations

from array import array
from collections import Counter, defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

from ..._native import _core
from ... import memory
from ...errors import WarningCode
from ...model import Trace

Warn = Callable[..., Any]       # the trace's diagnostics.warn(code, message, count)
EARLY_BIND = 1 << 14            # flow points from which they are bound on a thread of their own (below)


class FlowPoints:
    """The flow points of one read, as the reader converts its events."""

    def __init__(self) -> None:
        # v1 points the general decoder read: (category, name, id) -> [(ts, seq, ph, track, bp "e")]
        self.v1: dict[tuple, list[tuple[int, int, str, int, bool]]] = defaultdict(list)
        # v1 points the scanner read, in batches: (category id, name id, id, ts, seq, ph, track, bp "e")
        self.rows: list[tuple[np.ndarray, ...]] = []
        # v2: (bind_id, slice, flow_in, flow_out, ts)
        self.binds: list[tuple[Any, int, bool, bool, int]] = []

    def resolve(self, trace: Trace, bseq: array, eseq: array, warn: Warn, used: Counter[str]) -> int:
        """Link every flow into ``trace.flows`` (v2, then v1); ``bseq``/``eseq`` are each slice's
        input positions (of the events that began and ended it).  Counts the flow events used in
        ``used`` and warns of what could not be linked; returns how many input events were
        dropped."""
        self._resolve_v2(trace, warn)
        return self._resolve_v1(trace, bseq, eseq, warn, used)

    def _resolve_v2(self, trace: Trace, warn: Warn) -> None:
        """Link the v2 points (``bind_id``, ``flow_in``, ``flow_out`` on slices) by Perfetto's v2 rule
        (compiled: ``_core.flows.link_v2``; its plain-Python statement is ``link_v2_reference`` in
        tests/test_flows.py).  Each id is numbered as a dict keys it (``1`` and ``1.0`` are one id)."""
        if not self.binds:
            return
        number: dict[Any, int] = {}
        ids = np.fromiter((number.setdefault(b[0], len(number)) for b in self.binds), np.int64, len(self.binds))
        _, slices, fin, fout, ts = zip(*self.binds)
        src, dst, unresolved = _core.flows.link_v2(ids, np.array(slices, np.int64), np.array(fin, bool),
                                                   np.array(fout, bool), np.array(ts, np.int64))
        f = trace.flows
        f.src.frombytes(src.tobytes())
        f.dst.frombytes(dst.tobytes())
        f.name.frombytes(bytes(4 * len(src)))
        if unresolved:
            warn(WarningCode.UNRESOLVED_FLOW, "slices with a v2 flow (bind_id) that has no other end in "
                 "the trace: the slices were kept, not the flow", unresolved)
        self.binds = []

    def _resolve_v1(self, trace: Trace, bseq: array, eseq: array, warn: Warn, used: Counter[str]) -> int:
        """Link the v1 flow points (s/t/f) of each flow (category + name + id): bind every point to a
        slice (:func:`bind_points`), then walk each flow's points in time order."""
        parts = self.rows
        if not parts and not self.v1:
            return 0
        strs = trace.strings.strings

        def column(k: int, t: Any) -> np.ndarray:
            return np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, t)

        # binding a point to a slice does not depend on the other points, nor on their order: the
        # scanner's points are bound on a thread of their own (the compiled kernel releases the GIL)
        # while this one groups and orders them, and the slices they bound to follow the points'
        # moves below (1M events: 315k points, the flows' linking 0.12 -> ~0.08 s).  Its columns
        # are joined first, the thread started, then the rest joined beside it.
        ts, seq, ph, track, bp_e = (column(k, t) for k, t in ((3, np.int64), (4, np.int64), (5, np.uint8),
                                                               (6, np.int32), (7, np.bool_)))
        early: Future | None = None
        if not self.v1 and len(ts) >= EARLY_BIND:
            pool = ThreadPoolExecutor(1, thread_name_prefix="traceconv-bind")
            early = pool.submit(bind_points, trace, bseq, eseq, track, ts, seq, (ph != ord("f")) | bp_e)
            pool.shutdown(wait=False)
        cat, name, fid = (column(k, t) for k, t in ((0, np.int32), (1, np.int32), (2, np.int64)))
        parts.clear()                       # the batches' arrays: their copies are joined now
        memory.trim()                       # (small blocks, ~12 MB at 1M events: back to the system)
        # one group per flow: the scanner's rows by (category, name, id) ids, the rest by their key
        # (each gathered column made once: at 1M events every temporary is 1-2.5 MB of new pages)
        if len(cat):
            o = np.lexsort((fid, name, cat))
            new = np.zeros(len(o), np.bool_)
            new[0] = True
            for col in (cat, name, fid):
                c = col[o]
                new[1:] |= c[1:] != c[:-1]
            del c
            starts = np.flatnonzero(new)
            group = np.empty(len(o), np.int64)
            group[o] = np.cumsum(new) - 1
            first = np.minimum.reduceat(seq[o], starts)        # each flow's first point in the file
            u = o[starts]
            del o, new, starts
        else:
            group, first, u = (np.zeros(0, np.int64) for _ in range(3))
        # each flow's name: its category, else its name (string ids); flows only the general decoder
        # saw are matched to the scanner's by their key (category, name, id) as text
        g_name = np.where(cat[u] != 0, cat[u], name[u]).astype(np.int32)
        extra: list[tuple[int, int, int, str, int, bool]] = []
        if self.v1:
            keys = [(strs[c], strs[nm], i) for c, nm, i in zip(cat[u].tolist(), name[u].tolist(), fid[u].tolist())]
            gid = {k: g for g, k in enumerate(keys)}
            intern = trace.strings.intern
            more: list[int] = []
            for key, items in self.v1.items():
                g = gid.setdefault(key, len(gid))
                if g == len(keys):
                    keys.append(key)
                    more.append(intern(key[0] or key[1] or None))
                for t, q, p, tr, e in items:
                    extra.append((g, t, q, p, tr, e))
            g_name = np.concatenate([g_name, np.array(more, np.int32)])
        del cat, name, fid, u
        n_groups = len(g_name)
        if extra:
            g2, t2, q2, p2, tr2, e2 = zip(*extra)
            first = np.concatenate([first, np.full(n_groups - len(first), np.iinfo(np.int64).max)])
            np.minimum.at(first, np.array(g2, np.int64), np.array(q2, np.int64))
            group = np.concatenate([group, np.array(g2, np.int64)])
            ts = np.concatenate([ts, np.array(t2, np.int64)])
            seq = np.concatenate([seq, np.array(q2, np.int64)])
            ph = np.concatenate([ph, np.frombuffer("".join(p2).encode("latin-1"), np.uint8)])
            track = np.concatenate([track, np.array(tr2, np.int32)])
            bp_e = np.concatenate([bp_e, np.array(e2, np.bool_)])
        # flows in the order they first appear in the file; each flow's points by time, then file order
        ranked = np.argsort(first, kind="stable")
        rank = np.empty(n_groups, np.int64)
        rank[ranked] = np.arange(n_groups)
        group = rank[group]
        order = np.lexsort((seq, ts, group))
        group, ph = group[order], ph[order]
        # (the points' times, positions and tracks only for binding them here: bound on the thread
        # above, only the slice each is bound to follows the order)
        if early is not None:
            bound = early.result()[order]
            moved: tuple[np.ndarray, ...] = (ph, bound)
        else:
            ts, seq, track, bp_e = (a[order] for a in (ts, seq, track, bp_e))
            moved = (ts, seq, ph, track, bp_e)
        g_name = g_name[ranked]
        del order, rank, ranked, first
        # one start and one end, the end earlier: host and device clocks disagree (MegEngine's
        # interpolated device times, Kineto before its fix); keep the link
        sizes = np.bincount(group, minlength=n_groups)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        two = np.flatnonzero(sizes == 2)
        a0 = starts[two]
        swap = a0[(ph[a0] == ord("f")) & (ph[a0 + 1] == ord("s"))]
        skewed = len(swap)
        if skewed:
            for arr in moved:
                arr[swap], arr[swap + 1] = arr[swap + 1].copy(), arr[swap].copy()
        if early is None:
            bound = bind_points(trace, bseq, eseq, track, ts, seq, (ph != ord("f")) | bp_e)
        del track, ts, seq, bp_e, moved
        if skewed:
            warn(WarningCode.NOTE, "flows whose end is earlier than their start (host and device clocks "
                 "disagree) were kept as drawn by the producer", skewed)
        src, dst, grp, unresolved, dropped_events, n_used = _core.flows.link(group, ph, bound)
        if len(src):
            f = trace.flows
            f.src.frombytes(memoryview(src).cast("B"))      # (int64 already; from the buffers, no copy)
            f.dst.frombytes(memoryview(dst).cast("B"))
            f.name.frombytes(memoryview(g_name[grp].astype(np.int32)).cast("B"))
        used["flow event"] += n_used
        dropped = 0
        if unresolved:
            warn(WarningCode.UNRESOLVED_FLOW, "flow events (s/t/f) that bind to no slice or have no other "
                 "end in the trace were not kept", dropped_events)
            dropped = dropped_events
        self.v1 = defaultdict(list)
        self.rows = []
        return dropped


def bind_points(trace: Trace, bseq: array, eseq: array, q_track: np.ndarray, q_ts: np.ndarray,
                q_seq: np.ndarray, q_enc: np.ndarray) -> np.ndarray:
    """For each flow point (track, time, file position, whether it binds to the enclosing
    slice), the slice it binds to (-1: none), as Perfetto's importer sees it after its stable
    sort by time: the innermost slice open on the track at that point (begun before it; not yet
    ended by an E before it; an X stays open through its end time), or the next slice to begin
    (later, or at the same time but after the point in the file).  At one start time the longer
    slice is the parent (Perfetto's order for complete events).  ``bseq``/``eseq`` are the slices'
    input positions, when every slice has them.  The loop is compiled
    (``traceconv._core.flows.bind``, ``rust/src/flows.rs``)."""
    s = trace.slices
    ns = len(s)
    if len(bseq) == ns:
        b = np.frombuffer(bseq, np.int32) if ns else np.zeros(0, np.int32)
        e = np.frombuffer(eseq, np.int32) if ns else np.zeros(0, np.int32)
    else:                                   # slices added by other means: file order unknown
        b, e = np.arange(ns, dtype=np.int32), np.full(ns, -1, np.int32)
    col = (lambda a, t: np.frombuffer(a, t) if ns else np.zeros(0, t))
    return _core.flows.bind(col(s.ts, np.int64), col(s.dur, np.int64), col(s.track, np.int32), b, e,
                            q_track.astype(np.int32, copy=False), q_ts.astype(np.int64, copy=False),
                            q_seq.astype(np.int64, copy=False), q_enc.astype(np.bool_, copy=False))
