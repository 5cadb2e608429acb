"""Chrome Trace Event JSON writer (object form, one event per line).

* ``ts``/``dur`` are microseconds written as exact decimals of the model's
  nanoseconds (``12.345``), relative to ``baseTimeNanoseconds`` (the trace's
  first second) so that doubles keep ns precision, as Kineto does; a trace
  whose events reach more than 26 days from it is written in whole µs, every
  start and end floored (counted; :func:`_whole_us`).
* Every slice is an ``X`` event.  Tracks that are not threads (overlap lanes,
  async tracks, a process track's slices) become threads of their own in their
  process, named after the track, so that Perfetto and chrome://tracing show the
  same tracks as the protobuf output (and trace_processor the same slice table).
* pids/tids are the model's: unique and within 0..2^31-1 (Perfetto's JSON
  importer turns anything else into 0), but for a thread 0 of a process P that
  also has a thread P, written with a free tid (Perfetto's JSON importer reads
  tid 0 as the main thread, tid P).
* Args are the model's JSON text, copied; the rare rows no client loads as
  they are (nesting deeper than 64 levels, lone surrogate escapes, numbers
  beyond the double range, NaN; escaped surrogate pairs and numbers of 20+
  digits, which Perfetto's JSON importer fails on) are rewritten by :mod:`traceconv.writers.argtext`
  (counted where something changed), so every output parses with orjson.
* Flows are written as v2 flows (``bind_id`` + ``flow_out``/``flow_in`` on the
  slices themselves, which binds them exactly) where both slices take part in
  that one link only; every other link (a fan-out's, a chain's) is a v1
  ``s``/``f`` pair with an id of its own.  The bind_ids start at
  :data:`V2_BIND_BASE`: trace_processor (v58.2) gives the v1 flows of a file
  small numbers in the id space of the bind_ids (bind_id 1 joined the first v1
  flow of perfetto_connected_flow_data.json), so small bind_ids would join
  unrelated v1 flows.
* Overlap lanes are threads of their own (a JSON thread cannot hold slices that
  overlap without nesting), named ``<thread> (overlap N)``, with their thread's
  sort index when it has one (trace_processor gives both outputs the same slice
  table: a .pftrace lane is named the same).
"""

from __future__ import annotations

from array import array
from collections import Counter
from typing import BinaryIO

import numpy as np
import orjson

from .. import __version__
from .._native import _core
from ..errors import WarningCode
from ..io import WriteBehind
from ..model import ArgsColumn, Clock, Trace, TrackKind
from ..model.layout import nest
from ..progress import EVERY, report
from . import argtext

_CHUNK = 8192
# Tracks that are not threads (overlap lanes, async tracks) become threads numbered from here.
SYNTHETIC_TID_BASE = 2_000_000_000
# Tracks that belong to no process (global tracks) are shown in a process of this name.
GLOBAL_PROCESS_NAME = "Global"
# v2 bind_ids from here: trace_processor numbers v1 flows (s/t/f) with small ids in the space of the
# bind_ids, so small bind_ids would join v1 flows of the same file
V2_BIND_BASE = 1 << 40


def us(ns: int) -> str:
    """Nanoseconds as an exact decimal number of microseconds."""
    if ns < 0:
        return "-" + us(-ns)
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}" if r else str(q)


def time_base(trace: Trace, rng: tuple[int, int] | None) -> int:
    """``baseTimeNanoseconds`` for the output: the first whole second of a Unix-clock trace, else 0
    (``rng``: the trace's :meth:`~traceconv.model.Trace.time_range`)."""
    if trace.meta.clock is not Clock.UNIX:
        return 0
    if rng is None or rng[0] < 0:
        return 0
    return rng[0] - rng[0] % 1_000_000_000


# trace_processor reads a JSON ts/dur as a double of µs: exact to the ns within 2^51 ns (26 days) of
# baseTimeNanoseconds (measured: 3,000 random times each of 30..51 bits came back exact, of 52 bits
# 40 came back 1 ns off).  Past this span from the base, times are written in whole µs.
EXACT_SPAN_NS = 1 << 51


def _whole_us(trace: Trace, base: int, rng: tuple[int, int] | None) -> Trace:
    """``trace`` itself, or, when its events reach further than :data:`EXACT_SPAN_NS` from ``base``,
    a shallow copy whose times are floored to whole µs (counted): every start and end is floored,
    so what nests still nests and nothing that was apart comes to overlap, and a double holds each
    of them exactly (a slice spilled in trace_processor when its end, rounded by the double, passed
    its parent's; a fuzz case of a log whose runs are at 0 and in 2022)."""
    import copy

    if rng is None or max(abs(rng[0] - base), abs(rng[1] - base)) < EXACT_SPAN_NS:
        return trace

    def floor_us(t: np.ndarray) -> np.ndarray:
        return t // 1000 * 1000

    out = copy.copy(trace)
    s = out.slices = copy.copy(trace.slices)
    ts = np.frombuffer(trace.slices.ts, np.int64)
    ends = ts + np.frombuffer(trace.slices.dur, np.int64)
    start, end = floor_us(ts), floor_us(ends)
    s.ts, s.dur = array("q", start.tobytes()), array("q", (end - start).tobytes())
    s.order = None          # (nest's order was of the times before flooring: ties may now break otherwise)
    changed = int(np.count_nonzero((start != ts) | (end != ends)))
    for name in ("instants", "counters"):
        table = copy.copy(getattr(trace, name))
        t = np.frombuffer(table.ts, np.int64)
        f = floor_us(t)
        changed += int(np.count_nonzero(f != t))
        table.ts = array("q", f.tobytes())
        setattr(out, name, table)
    trace.diagnostics.warn(WarningCode.CLAMPED_VALUE, "times written in whole µs in the JSON: its events "
                           "span more than 26 days, past what a reader's doubles hold to the ns", changed)
    return out


class _Ids:
    """(pid, tid) for every track, inventing threads for non-thread tracks."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        used_pids = {p.pid for p in trace.processes}
        self.used_tids: dict[int, set[int]] = {p.pid: set() for p in trace.processes}
        for th in trace.threads:
            self.used_tids[trace.processes[th.process].pid].add(th.tid)
        # each thread's tid in the file: its own, but for a thread 0 of process P (P > 0) that also
        # has a thread P: trace_processor's JSON importer reads tid 0 as the process's main thread
        # (tid P), which would put both threads' slices on one track; such a thread 0 gets the
        # first tid its process does not use (counted: ``renumbered``)
        self.tids = [th.tid for th in trace.threads]
        self.renumbered = 0
        for k, th in enumerate(trace.threads):
            pid = trace.processes[th.process].pid
            used = self.used_tids[pid]
            if th.tid == 0 and pid != 0 and pid in used:
                tid = 1
                while tid in used:
                    tid += 1
                used.add(tid)
                self.tids[k] = tid
                self.renumbered += 1
        self.global_pid: int | None = None
        if any(t.process is None for t in trace.tracks):
            pid = 0
            while pid in used_pids:
                pid += 1
            self.global_pid = pid
            self.used_tids[pid] = set()
        self.extra_threads: list[tuple[int, int, str, int | None]] = []  # pid, tid, name, sort
        self.pid_tid: list[tuple[int, int | None]] = []
        for t in trace.tracks:
            self.pid_tid.append(self._place(t))
        # where each track's slices go: a process track's are X events, which JSON has only on
        # threads (one written with a pid alone lands on the main thread, tid = pid, in
        # trace_processor): a thread of their own, named after the track (instants keep "s":"p")
        self.slice_pid_tid = list(self.pid_tid)
        holds = np.bincount(np.frombuffer(trace.slices.track, np.int32), minlength=len(trace.tracks)) \
            if len(trace.slices) else np.zeros(len(trace.tracks), np.int64)
        for t in trace.tracks:
            if t.kind is TrackKind.PROCESS and holds[t.id]:
                self.slice_pid_tid[t.id] = self._extra(self._pid(t), self.trace.track_label(t), None)

    def _pid(self, track) -> int:
        if track.process is None:
            assert self.global_pid is not None
            return self.global_pid
        return self.trace.processes[track.process].pid

    def _place(self, t) -> tuple[int, int | None]:
        pid = self._pid(t)
        if t.kind is TrackKind.THREAD:
            return pid, self.tids[t.thread]
        if t.kind in (TrackKind.PROCESS, TrackKind.COUNTER):
            return pid, None
        sort = None
        if t.kind is TrackKind.LANE and t.parent is not None:
            base = self.trace.tracks[t.parent]
            if base.thread is not None:
                sort = self.trace.threads[base.thread].sort_index
        return self._extra(pid, self.trace.track_label(t), sort)

    def _extra(self, pid: int, name: str, sort: int | None) -> tuple[int, int]:
        """A thread invented for a track that is not a thread: the next synthetic tid of ``pid``."""
        used = self.used_tids[pid]
        tid = SYNTHETIC_TID_BASE + len(used)
        while tid in used:
            tid += 1
        used.add(tid)
        self.extra_threads.append((pid, tid, name, sort))
        return pid, tid


_SCREEN_ROWS = 1 << 16     # rows screened at a time (a spilled column's pages dropped between)


def _rewritten(col: ArgsColumn, counts: Counter) -> dict[int, bytes]:
    """The rows of ``col`` that cannot be copied as they are, rewritten: the rows
    :func:`_core.encode.screen_args` flags, checked (a mere suspect that orjson reads is kept) and made
    writable by :func:`argtext.clean`.  Usually empty."""
    out: dict[int, bytes] = {}
    data, off = col.packed()
    for lo in range(0, len(off) - 1, _SCREEN_ROWS):
        flags = _core.encode.screen_args(data, off[lo:lo + _SCREEN_ROWS + 1], argtext.MAX_DEPTH)
        col.forget()
        for j in np.flatnonzero(flags).tolist():
            i = lo + j
            a = col[i]
            if flags[j] == _core.encode.SCREEN_SUSPECT:
                try:
                    orjson.loads(a)
                    continue
                except orjson.JSONDecodeError:
                    pass
            out[i] = argtext.dumps(argtext.clean(a, counts))
    return out


class _FlowPoints:
    """Where to put a v1 flow event so that it binds to its slice.  trace_processor binds an ``s``
    or ``f`` (``bp:"e"``) to the slice on top of its track's stack, and pops ended slices only when
    a slice begins: from a slice's begin until the next slice begins on its track (a child, a
    sibling), the slice is the top, even after it ended.  chrome://tracing (and traceconv's reader)
    take the innermost slice open at that time.  So the point is the slice's start, or ``lo`` (an
    ``f`` goes no earlier than its ``s``: the file is read by time, and an ``f`` read first ends
    nothing) when that is before both its end and the next begin on its track.  A slice whose child
    begins at its very start has no such point; then the first ns that none of its children covers
    is used, which only the innermost-open rule binds to it."""

    def __init__(self, trace: Trace) -> None:
        import numpy as np

        from ..model.layout import taken_order
        self.s = trace.slices
        self.order = taken_order(trace)
        self.pos = np.empty_like(self.order)
        self.pos[self.order] = np.arange(len(self.order))

    def at(self, i: int, lo: int | None = None) -> int:
        s = self.s
        start, end, track = s.ts[i], s.ts[i] + s.dur[i], s.track[i]
        k = int(self.pos[i]) + 1
        order = self.order
        nxt = s.ts[int(order[k])] if k < len(order) and s.track[int(order[k])] == track else None
        if nxt is None or nxt > start:
            x = start if lo is None else max(start, lo)
            if x == start or (x < end and (nxt is None or x < nxt)):
                return x
            return start
        # a child begins at the slice's start: the first ns no child covers (from lo when that is
        # inside the slice; an end earlier than its start -- clock skew -- is placed from the start)
        depth = s.depth[i] if s.depth is not None else 0
        p = start if lo is None or lo >= end else max(start, lo)
        while k < len(order):
            c = int(order[k])
            if s.track[c] != track or s.ts[c] > end:
                break
            if s.depth is not None and s.depth[c] <= depth:
                break                      # a sibling: no more children
            if s.ts[c] > p:
                break                      # a gap before this child
            if s.ts[c] + s.dur[c] >= p:
                p = s.ts[c] + s.dur[c] + 1
            k += 1
        return p if p == start or p < end else start


def _meta_event(name: str, pid: int, tid: int | None, args: dict) -> bytes:
    ev = {"ph": "M", "name": name, "pid": pid}
    if tid is not None:
        ev["tid"] = tid
    ev["args"] = args
    return orjson.dumps(ev)


def write(trace: Trace, out: BinaryIO, *, threads: bool = True) -> None:
    """``trace`` as Chrome JSON on ``out``; with a second core, its chunks are written (and
    compressed, for a .gz) by a thread of their own while the next ones are made
    (:class:`~traceconv.io.WriteBehind`).  ``threads`` False: on the calling thread only (a
    recorder's save, which may run at interpreter exit, when no thread can start)."""
    with WriteBehind(out, threaded=threads) as sink:
        _write(trace, sink)


def _write(trace: Trace, out: WriteBehind) -> None:
    nest(trace)             # (overlapping slices to their lanes; a no-op on a nested trace)
    strings = trace.strings
    jstr = [orjson.dumps(s) for s in strings.strings]
    rng = trace.time_range()
    base = time_base(trace, rng)
    trace = _whole_us(trace, base, rng)
    ids = _Ids(trace)

    out.write(b'{"traceEvents":[\n')
    lines: list[bytes] = []
    first = True

    def emit(line: bytes) -> None:
        nonlocal first
        lines.append(line if first else b",\n" + line)
        first = False
        if len(lines) >= _CHUNK:
            out.write(b"".join(lines))
            lines.clear()

    # -- names and ordering of processes and threads
    for p in trace.processes:
        if p.name:
            emit(_meta_event("process_name", p.pid, None, {"name": p.name}))
        if p.sort_index is not None:
            emit(_meta_event("process_sort_index", p.pid, None, {"sort_index": p.sort_index}))
        if p.labels:
            emit(_meta_event("process_labels", p.pid, None, {"labels": ",".join(p.labels)}))
    if ids.global_pid is not None:
        emit(_meta_event("process_name", ids.global_pid, None, {"name": GLOBAL_PROCESS_NAME}))
    for th, tid in zip(trace.threads, ids.tids):
        pid = trace.processes[th.process].pid
        emit(_meta_event("thread_name", pid, tid, {"name": trace.track_label(trace.tracks[th.track])}))
        if th.sort_index is not None:
            emit(_meta_event("thread_sort_index", pid, tid, {"sort_index": th.sort_index}))
    for pid, tid, name, sort in ids.extra_threads:
        emit(_meta_event("thread_name", pid, tid, {"name": name}))
        if sort is not None:
            emit(_meta_event("thread_sort_index", pid, tid, {"sort_index": sort}))

    # -- flows: which slices can carry a v2 bind_id
    f = trace.flows
    nflow = len(f)
    ends: dict[int, int] = {}
    for i in range(nflow):
        ends[f.src[i]] = ends.get(f.src[i], 0) + 1
        ends[f.dst[i]] = ends.get(f.dst[i], 0) + 1
    sts_ = trace.slices.ts
    v2_out: dict[int, int] = {}
    v2_in: dict[int, int] = {}
    v1: list[int] = []
    for i in range(nflow):
        s, d = f.src[i], f.dst[i]
        # v2 binds in the order a viewer reads the events (by time, then file order): the source
        # slice must come first, or the flow_in finds no flow yet
        if ends[s] == 1 and ends[d] == 1 and (sts_[s], s) < (sts_[d], d):
            v2_out[s] = V2_BIND_BASE + i
            v2_in[d] = V2_BIND_BASE + i
        else:
            v1.append(i)

    # -- slices
    def placed(pid_tid: list[tuple[int, int | None]]) -> list[bytes]:
        return [(b'"pid":%d,"tid":%d' % pt) if pt[1] is not None else b'"pid":%d' % pt[0] for pt in pid_tid]

    where, where_slice = placed(ids.pid_tid), placed(ids.slice_pid_tid)
    s = trace.slices
    counts: Counter = Counter()
    sts, sdur, strack, sname, scat = s.ts, s.dur, s.track, s.name, s.cat
    sargs, s_fixed = s.args, _rewritten(s.args, counts)
    total = trace.event_count()
    for i in range(len(s)):
        if not i & (EVERY - 1):
            report("writing Chrome JSON", i, total)
            sargs.forget()
        parts = [b'{"ph":"X","name":', jstr[sname[i]]]
        c = scat[i]
        if c:
            parts += [b',"cat":', jstr[c]]
        parts += [b',"ts":', us(sts[i] - base).encode(), b',"dur":', us(sdur[i]).encode(), b",",
                  where_slice[strack[i]]]
        a = s_fixed.get(i) if s_fixed else None
        if a is None:
            a = sargs[i]
        if a is not None:
            parts += [b',"args":', a]
        if v2_out or v2_in:
            b_out = v2_out.get(i)
            b_in = v2_in.get(i)
            if b_out is not None:
                parts.append(b',"bind_id":%d,"flow_out":true' % b_out)
            elif b_in is not None:
                parts.append(b',"bind_id":%d,"flow_in":true' % b_in)
        parts.append(b"}")
        emit(b"".join(parts))

    # -- v1 flows for slices with several flow ends
    point = _FlowPoints(trace) if v1 else None
    for i in v1:
        fid = nflow + 1 + i
        name = jstr[f.name[i]] if f.name[i] else b'"flow"'
        at_src = point.at(f.src[i])
        # (a destination that begins before its source keeps its own point: trace_processor draws
        # such a link from neither this file nor the .pftrace, whose flow starts at the event read
        # first, nor from the raw input)
        lo = at_src if sts_[f.dst[i]] >= sts_[f.src[i]] else None
        for ph, si, at in ((b"s", f.src[i], at_src), (b"f", f.dst[i], point.at(f.dst[i], lo))):
            emit(b'{"ph":"%s","id":%d,"name":%s,"cat":%s,"ts":%s,%s,"bp":"e"}'
                 % (ph, fid, name, name, us(at - base).encode(), where_slice[strack[si]]))

    # -- instants
    ins = trace.instants
    i_fixed = _rewritten(ins.args, counts)
    for i in range(len(ins)):
        if not i & (EVERY - 1):
            ins.args.forget()
        tr = trace.tracks[ins.track[i]]
        if tr.kind is TrackKind.PROCESS:
            scope = b"p"
        elif tr.process is None:
            scope = b"g"
        else:
            scope = b"t"
        parts = [b'{"ph":"i","s":"', scope, b'","name":', jstr[ins.name[i]]]
        if ins.cat[i]:
            parts += [b',"cat":', jstr[ins.cat[i]]]
        parts += [b',"ts":', us(ins.ts[i] - base).encode(), b",", where[ins.track[i]]]
        a = i_fixed.get(i) if i_fixed else None
        if a is None:
            a = ins.args[i]
        if a is not None:
            parts += [b',"args":', a]
        parts.append(b"}")
        emit(b"".join(parts))

    # -- counters
    cnt = trace.counters
    cname = [orjson.dumps(t.name) for t in trace.tracks]
    cseries = [orjson.dumps(t.series or "value") for t in trace.tracks]
    for i in range(len(cnt)):
        t = cnt.track[i]
        emit(b'{"ph":"C","name":%s,"ts":%s,%s,"args":{%s:%s}}'
             % (cname[t], us(cnt.ts[i] - base).encode(), where[t], cseries[t], orjson.dumps(cnt.value[i])))

    out.write(b"".join(lines))
    argtext.warn(trace.diagnostics, counts)
    if ids.renumbered:
        trace.diagnostics.warn(WarningCode.REMAPPED_ID, "threads 0 of processes that also have the thread numbered "
                               "as the process were written with an unused tid (trace_processor reads tid 0 in "
                               "JSON as the process's main thread)", ids.renumbered)
    tail: dict = {"displayTimeUnit": "ms"}
    if base:
        tail["baseTimeNanoseconds"] = base
    own = {"version": __version__, **trace.meta.as_dict(), **trace.written_marks(lambda t: ids.slice_pid_tid[t.id])}
    # the threads that hold overlap lanes, each with its track's thread: read back, a lane's slices
    # go onto that thread again (and are laid out as they were: what starts inside a lane's slice
    # is its child, for summary's self times)
    lanes = [[*ids.slice_pid_tid[t.id], ids.slice_pid_tid[t.parent][1]] for t in trace.tracks
             if t.kind is TrackKind.LANE and t.parent is not None]
    if lanes:
        own["lanes"] = lanes
    meta = {"traceconv": own}
    meta.update(trace.meta.extra)
    tail["metadata"] = meta
    # trace_processor refuses a whole file whose metadata holds a raw DEL (0x7f) character; JSON
    # allows it raw, and escaped it loads.  (In UTF-8 the byte 0x7f is only ever that character.)
    text = orjson.dumps(tail, option=orjson.OPT_NON_STR_KEYS).replace(b"\x7f", b"\\u007f")
    out.write(b"\n]," + text[1:] + b"\n")
