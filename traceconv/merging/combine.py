"""Combining ranks: the filters (categories, durations, a time window), one namespace per rank
(:func:`append_rank`), and the clock offsets applied in place."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import TraceconvError
from ..model import Trace, TrackKind
from .align import Alignment
from .options import Window, parse_window_spec


# What _filter leaves out, the keys of its result.  Slices, by the filter that left each out: the
# parameter's name as errors spell it (:func:`traceconv.errors.spell`; the CLI shows its flag) ...
BY_CATEGORY = "{opt:drop_cat}"
BY_DURATION = "{opt:min_dur}"
BY_WINDOW = "{opt:window}"
SLICE_FILTERS = (BY_CATEGORY, BY_DURATION, BY_WINDOW)
# ... and what goes with them: flows that lost an end, instants, counter samples.  In this order
# the merge's notes name what a window leaves out.
LOST_FLOWS = "flows whose slice was filtered out"
LOST_INSTANTS = "instants"
LOST_COUNTERS = "counter samples"
WINDOW_LEAVES_OUT = (BY_WINDOW, LOST_FLOWS, LOST_INSTANTS, LOST_COUNTERS)


def _filter(trace: Trace, drop_cats: frozenset[str], min_dur: int,
            window: tuple[int, int] | None = None) -> dict[str, int]:
    """Drop slices/instants/counters in place by category, duration and time window; returns
    what was left out, keyed as above."""
    st = trace.strings
    s = trace.slices
    n = len(s)
    keep = np.ones(n, dtype=bool)
    dropped: dict[str, int] = {}
    # per string id: a category dropped?
    bad = np.array([x in drop_cats for x in st.strings], dtype=bool) if drop_cats else None
    if n:
        ts = np.frombuffer(s.ts, dtype=np.int64)
        dur = np.frombuffer(s.dur, dtype=np.int64)
        if bad is not None:
            m = bad[np.frombuffer(s.cat, dtype=np.int32)]
            dropped[BY_CATEGORY] = int(m.sum())
            keep &= ~m
        if min_dur:
            m = (dur < min_dur) & keep
            dropped[BY_DURATION] = int(m.sum())
            keep &= ~m
        if window:
            w0, w1 = window
            inside = (ts < w1) & ((ts + dur > w0) | ((dur == 0) & (ts >= w0)))
            m = ~inside & keep
            dropped[BY_WINDOW] = int(m.sum())
            keep &= ~m
    if not keep.all():
        lost = trace.take_slices(np.nonzero(keep)[0])
        if lost:
            dropped[LOST_FLOWS] = lost
    ins = trace.instants
    if len(ins) and (drop_cats or window):
        its = np.frombuffer(ins.ts, dtype=np.int64)
        k = np.ones(len(ins), dtype=bool)
        if bad is not None:
            k &= ~bad[np.frombuffer(ins.cat, dtype=np.int32)]
        if window:
            k &= (its >= window[0]) & (its < window[1])
        if not k.all():
            dropped[LOST_INSTANTS] = dropped.get(LOST_INSTANTS, 0) + int((~k).sum())
            idx = np.nonzero(k)[0]
            for col in ("ts", "track", "name", "cat"):
                a = getattr(ins, col)
                setattr(ins, col, type(a)(a.typecode, np.frombuffer(a, dtype=a.typecode).take(idx).tobytes()))
            ins.args = ins.args.take(idx.tolist())
    c = trace.counters
    if len(c) and window:
        cts = np.frombuffer(c.ts, dtype=np.int64)
        k = (cts >= window[0]) & (cts < window[1])
        if not k.all():
            dropped[LOST_COUNTERS] = int((~k).sum())
            for col in ("ts", "track", "value"):
                a = getattr(c, col)
                setattr(c, col, type(a)(a.typecode, np.frombuffer(a, dtype=a.typecode)[k].tobytes()))
    return {k: v for k, v in dropped.items() if v}



def _is_device(name: str, labels: list[str]) -> bool:
    return name.startswith("GPU ") or any(l.startswith("GPU ") for l in labels)


def append_rank(dst: Trace, src: Trace, rank: int, offset: int) -> None:
    """Copy ``src`` into ``dst`` as rank ``rank``'s namespace, shifted by ``offset`` ns."""
    smap = np.array([dst.strings.intern(x) for x in src.strings.strings], dtype=np.int32)
    tmap = _rank_tracks(dst, src, rank, lanes=False)

    def ext(dst_arr, src_arr, dtype, fn=None):
        a = np.frombuffer(src_arr, dtype=dtype) if len(src_arr) else np.zeros(0, dtype)
        dst_arr.frombytes((fn(a) if fn is not None else a).astype(dtype).tobytes())

    s, d = src.slices, dst.slices
    first = len(d)
    ext(d.ts, s.ts, np.int64, lambda a: a + offset)
    ext(d.dur, s.dur, np.int64)
    ext(d.track, s.track, np.int32, lambda a: tmap[a])
    ext(d.name, s.name, np.int32, lambda a: smap[a])
    ext(d.cat, s.cat, np.int32, lambda a: smap[a])
    d.args.extend(s.args)
    d.depth = d.parent = None
    si, di = src.instants, dst.instants
    ext(di.ts, si.ts, np.int64, lambda a: a + offset)
    ext(di.track, si.track, np.int32, lambda a: tmap[a])
    ext(di.name, si.name, np.int32, lambda a: smap[a])
    ext(di.cat, si.cat, np.int32, lambda a: smap[a])
    di.args.extend(si.args)
    sc, dc = src.counters, dst.counters
    ext(dc.ts, sc.ts, np.int64, lambda a: a + offset)
    ext(dc.track, sc.track, np.int32, lambda a: tmap[a])
    ext(dc.value, sc.value, np.float64)
    sf, df = src.flows, dst.flows
    ext(df.src, sf.src, np.int64, lambda a: a + first)
    ext(df.dst, sf.dst, np.int64, lambda a: a + first)
    ext(df.name, sf.name, np.int32, lambda a: smap[a])
    dst.diagnostics.extend(src.diagnostics)


def append_tracks(dst: Trace, src: Trace, rank: int) -> np.ndarray:
    """Copy ``src``'s processes, threads and tracks -- not its events -- into ``dst`` as rank
    ``rank``'s namespace, each track its own (lanes kept as lanes): the merged trace of ranks whose
    events were encoded where they were read.  Returns the ``dst`` track of each ``src`` track."""
    return _rank_tracks(dst, src, rank, lanes=True)


def _rank_tracks(dst: Trace, src: Trace, rank: int, lanes: bool) -> np.ndarray:
    """``src``'s processes, threads and tracks in ``dst`` as rank ``rank``'s: the ``dst`` track of
    each ``src`` track.  A lane goes onto its track (``lanes`` False: nesting the merged trace makes
    them again), or stays a lane of it; a named track is a new one (``lanes`` True: one ``dst``
    track per ``src`` track) or one of the rank's of that name."""
    # processes: host before devices, then by their own sort order
    order = sorted(src.processes, key=lambda p: (_is_device(p.name, p.labels),
                                                 p.sort_index if p.sort_index is not None else 0, p.id))
    pmap: dict[int, Any] = {}
    base_sort = rank * 1000
    for k, p in enumerate(order):
        if isinstance(p.raw_pid, int) and not _is_device(p.name, p.labels):
            name = f"rank {rank} · {p.name or 'process'} (pid {p.raw_pid})"
        else:
            name = f"rank {rank} · {p.name or p.raw_pid or 'process'}"
        q = dst.process(("rank", rank, id(src), p.id), name, synthetic=True, pid=base_sort + k + 1)
        q.sort_index = base_sort + k
        q.labels = [f"rank {rank}", *p.labels]
        q.args = {**p.args, "rank": rank, "raw_pid": p.raw_pid if isinstance(p.raw_pid, (int, str)) else None}
        pmap[p.id] = q
    tmap = np.zeros(len(src.tracks), dtype=np.int32)
    for t in src.tracks:
        if t.kind is TrackKind.LANE and t.parent is not None:
            continue
        if t.kind is TrackKind.PROCESS:
            tmap[t.id] = dst.process_track(pmap[t.process]).id
        elif t.kind is TrackKind.THREAD:
            th = src.threads[t.thread]
            nt = dst.thread(pmap[th.process], th.tid, th.name)
            nt.sort_index = th.sort_index
            tmap[t.id] = nt.track
        else:
            proc = pmap[t.process] if t.process is not None else None
            name = t.name if proc is not None else f"rank {rank} · {t.name}"
            if lanes:
                tr = dst.new_track(t.kind, name, proc)
                tr.unit, tr.series = t.unit, t.series
                tmap[t.id] = tr.id
            elif t.kind is TrackKind.COUNTER:
                tmap[t.id] = dst.track(TrackKind.COUNTER, name, proc, unit=t.unit, series=t.series).id
            else:
                tmap[t.id] = dst.new_track(t.kind, name, proc).id
        if t.summary is not None:              # (what summary counts of the merged trace)
            dst.tracks[tmap[t.id]].summary = t.summary
    labels = None
    for t in src.tracks:                       # (a lane comes after its track)
        if t.kind is TrackKind.LANE and t.parent is not None:
            base = t
            while base.kind is TrackKind.LANE and base.parent is not None:
                base = src.tracks[base.parent]
            if not lanes:
                tmap[t.id] = tmap[base.id]
                continue
            if labels is None:                 # (the rank's threads, all made above)
                labels = dst.thread_labels(q.id for q in pmap.values())
            tmap[t.id] = dst.add_lane(dst.tracks[tmap[base.id]], t.lane, labels, t.deep).id
    return tmap


def _named_window(trace: Trace, name: str) -> tuple[int, int]:
    span = named_span(trace, name)
    if span is None:
        raise TraceconvError(f"{{opt:window}}: no slice named '{name}' in any rank")
    return span


def named_span(trace: Trace, name: str) -> tuple[int, int] | None:
    """(first start, last end) of the slices named ``name``, or None if there is none (the name
    may still be a string of the trace: an instant's, a category's, or a slice's that a filter
    dropped)."""
    sid = trace.strings._ids.get(name)
    if sid is None:
        return None
    s = trace.slices
    idx = np.flatnonzero(np.frombuffer(s.name, dtype=np.int32) == sid)
    if not len(idx):
        return None
    ts = np.frombuffer(s.ts, dtype=np.int64)[idx]
    dur = np.frombuffer(s.dur, dtype=np.int64)[idx]
    return int(ts.min()), int((ts + dur).max())


def resolve_window(window: Window, start: int | None, spans: list[tuple[int, int]]) -> tuple[int, int]:
    """The window in the merged trace's time: a range counted from ``start`` (the merged trace's
    first event), or the union of the named slices' ``spans`` (already shifted by each rank's offset)."""
    if window.name is None:
        s = start or 0
        return s + window.start_ns, s + window.end_ns
    if not spans:
        raise TraceconvError(f"{{opt:window}}: no slice named '{window.name}' in any rank")
    return min(a for a, _ in spans), max(b for _, b in spans)


def parse_window(text: str | Window, trace: Trace) -> tuple[int, int]:
    """``A:B`` (durations from the trace's start, e.g. ``1.5s:2s``) or a slice name, in ``trace``'s time."""
    w = text if isinstance(text, Window) else parse_window_spec(text)
    if w.name is None:
        rng = trace.time_range()
        return resolve_window(w, rng[0] if rng else 0, [])
    return _named_window(trace, w.name)


def shift(trace: Trace, spans: list, alignments: dict[int, Alignment]) -> None:
    """Add each rank's clock offset to its rows of the columns, in place."""
    s_ts = np.frombuffer(trace.slices.ts, dtype=np.int64) if len(trace.slices) else None
    i_ts = np.frombuffer(trace.instants.ts, dtype=np.int64) if len(trace.instants) else None
    c_ts = np.frombuffer(trace.counters.ts, dtype=np.int64) if len(trace.counters) else None
    for r, (s0, s1), (i0, i1), (c0, c1) in spans:
        off = alignments[r].offset_ns
        if not off:
            continue
        for col, a, b in ((s_ts, s0, s1), (i_ts, i0, i1), (c_ts, c0, c1)):
            if col is not None and b > a:
                col[a:b] += off
