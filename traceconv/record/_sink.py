"""From buffered event tuples to the model, and from the model to files.

* :class:`Builder` turns the tuples the hot path appended into a :class:`traceconv.model.Trace`
  (columns in bulk, names interned once per chunk), with the process's tracks made in the same
  order every time, so a track keeps its number (the Perfetto writer's track uuid) in every chunk.
* :class:`PftraceSink` appends one chunk per flush to the ``.pftrace``: the chunk is written by
  the project's Perfetto writer (:func:`traceconv.writers.perfetto.write`) as a complete trace of
  its own -- its first packet clears the sequence's incremental state
  (``SEQ_INCREMENTAL_STATE_CLEARED``) and sets the sequence's clock again, then the track
  descriptors, the interned names and the events follow -- so a file cut after any chunk is a
  valid trace, and a concatenation of chunks is one trace (Perfetto's docs: a trace is a
  concatenation of TracePackets; interned data is valid until the sequence's state is cleared).
* :class:`WholeSink` keeps the model and writes the file once, whole: Chrome JSON at stop, and
  the ring buffer's window (replaced on each flush).
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..model import Clock, Trace, TrackKind
from . import _core
from ._core import COUNTER, FSPAN, INSTANT, SPAN

COUNTER_NAME = "traceconv.record: events written"
_OPT = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _args(a: dict | None) -> bytes | None:
    if not a:
        return None
    return orjson.dumps(a, default=str, option=_OPT)


class Specs:
    """The process's tracks in the order they were first needed: ("thread", tid),
    ("counter", name, unit), ("lane", track id, lane, deep).  Track id = index + 1 (0 is the process)."""

    def __init__(self) -> None:
        self.items: list[tuple] = []
        self.index: dict[tuple, int] = {}

    def add(self, spec: tuple) -> int:
        i = self.index.get(spec)
        if i is None:
            i = len(self.items)
            self.items.append(spec)
            self.index[spec] = i
        return i + 1


class Builder:
    def __init__(self, rec: "_core.Recorder", specs: Specs, names: dict[int, str] | None = None) -> None:
        self.rec, self.specs = rec, specs
        self.names: dict[int, str] = dict(names or {})
        self.trace = t = Trace("record")
        self._meta()
        self.proc = t.process(rec.pid, rec.process_name, pid=rec.pid)
        for spec in list(specs.items):
            self._make(spec)
        self.flow_src: dict[int, int] = {}
        self.flow_dst: dict[int, int] = {}

    def _meta(self) -> None:
        rec, t = self.rec, self.trace
        t.meta.source_format = "record"
        t.meta.clock = Clock.UNIX
        t.meta.rank = rec.shard
        t.meta.extra["record"] = {
            "clock": "time.perf_counter_ns (CLOCK_MONOTONIC) + anchor",
            "anchor_unix_ns": rec.anchor[0], "anchor_monotonic_ns": rec.anchor[1],
            "pid": rec.pid, "process": rec.process_name, "shard": rec.shard,
        }

    def _make(self, spec: tuple) -> int:
        t = self.trace
        kind = spec[0]
        if kind == "thread":
            th = t.thread(self.proc, spec[1], self.names.get(spec[1], f"thread {spec[1]}"))
            return th.track
        if kind == "counter":
            return t.track(TrackKind.COUNTER, spec[1], self.proc, unit=spec[2]).id
        if kind == "lane":
            return t.add_lane(t.tracks[spec[1]], spec[2], deep=spec[3]).id
        raise AssertionError(spec)

    def _track(self, spec: tuple) -> int:
        n = len(self.specs.items)
        tid = self.specs.add(spec)
        if tid > n:                                 # new: make it now (its id is the next one)
            made = self._make(spec)
            assert made == tid, (made, tid)
        return tid

    def add(self, taken: list[tuple["_core.ThreadInfo", list]]) -> None:
        t = self.trace
        t.processes[0].name = self.rec.process_name
        s, ins = t.slices, t.instants
        intern = t.strings.intern
        off = self.rec.offset
        for info, evs in taken:
            self.names[info.tid] = info.name
            tr = self._track(("thread", info.tid))
            th = t.threads[t.tracks[tr].thread]
            if th.name != info.name:
                t.set_thread_name(th, info.name)
            if not evs:
                continue
            spans = [e for e in evs if e[0] == SPAN]
            if spans:
                self._spans(spans, tr)
            if len(spans) == len(evs):
                continue
            for e in evs:
                k = e[0]
                if k == SPAN:
                    continue
                if k == FSPAN:
                    args = dict(e[5]) if e[5] else {}
                    if e[6]:
                        args["flow_out"] = list(e[6]) if len(e[6]) > 1 else e[6][0]
                    if e[7]:
                        args["flow_in"] = list(e[7]) if len(e[7]) > 1 else e[7][0]
                    i = len(s.ts)
                    s.ts.append(e[1] + off)
                    s.dur.append(e[2] - e[1])
                    s.track.append(tr)
                    s.name.append(intern(e[3]))
                    s.cat.append(intern(e[4]))
                    s.args.append(_args(args))
                    for f in e[6]:
                        self.flow_src[f] = i
                    for f in e[7]:
                        self.flow_dst[f] = i
                elif k == INSTANT:
                    ins.ts.append(e[1] + off)
                    ins.track.append(tr)
                    ins.name.append(intern(e[2]))
                    ins.cat.append(intern(e[3]))
                    ins.args.append(_args(e[4]))
                else:  # COUNTER
                    ctr = self._track(("counter", e[2], e[4]))
                    t.add_counter(ctr, e[1] + off, float(e[3]))
        s.depth = s.parent = None

    def _spans(self, spans: list, tr: int) -> None:
        """Plain spans in bulk: the tuples transposed once, the columns filled with numpy."""
        s = self.trace.slices
        _, t0, t1, names, cats, args = zip(*spans)
        a0 = np.fromiter(t0, np.int64, len(t0))
        s.ts.frombytes((a0 + self.rec.offset).tobytes())
        s.dur.frombytes((np.fromiter(t1, np.int64, len(t1)) - a0).tobytes())
        s.track.frombytes(np.full(len(t0), tr, np.int32).tobytes())
        intern = self.trace.strings.intern
        for col, values in ((s.name, names), (s.cat, cats)):
            ids = {v: intern(v) for v in set(values)}
            col.frombytes(np.fromiter(map(ids.__getitem__, values), np.int32, len(values)).tobytes())
        if any(args):
            rows = [_args(x) or b"" for x in args]
            s.args.extend_packed(np.frombuffer(b"".join(rows), np.uint8),
                                 np.fromiter(map(len, rows), np.int64, len(rows)))
        else:
            s.args.extend_packed(b"", np.zeros(len(args), np.int64))

    def link_flows(self) -> int:
        """Flows whose two ends are both in this trace become links; the rest stay as ids in the
        spans' args (``flow_out`` / ``flow_in``), linked by a later merge.  Returns those left."""
        left = 0
        for f, src in self.flow_src.items():
            dst = self.flow_dst.get(f)
            if dst is None:
                left += 1
                continue
            self.trace.add_flow(src, dst, "flow")
        left += sum(1 for f in self.flow_dst if f not in self.flow_src)
        self.flow_src, self.flow_dst = {}, {}
        return left

    def adopt_lanes(self) -> None:
        """After layout: lanes the writer will use become specs, so later chunks keep the numbers."""
        t = self.trace
        for tr in t.tracks[len(self.specs.items) + 1:]:
            assert tr.kind is TrackKind.LANE
            self.specs.add(("lane", tr.parent, tr.lane, tr.deep))


def make_sink(rec: "_core.Recorder") -> Any:
    ext = _core._ext(rec.path)
    if rec.ring_ns or ext.startswith(".json") or ext.endswith(".gz"):
        return WholeSink(rec)
    return PftraceSink(rec)


HOLD_EVENTS = 1 << 14      # flow spans a stream keeps for a later chunk, at most (see PftraceSink._hold)


class Heights:
    """Whether spans nest past the depth Perfetto keeps across the chunks of a stream.

    A chunk is laid out alone (its spans nested 512 levels deep or more go to depth lanes), but a
    span is written when it exits, so the spans that enclose a chunk's outermost ones (its roots)
    come in later chunks, laid out without what they enclose: trace_processor then sees the whole
    nesting, and drops what is 512 levels deep or more.  Per track this keeps the finished trees
    of earlier chunks not yet known to be enclosed, as (start, height).  A span of a later chunk
    that began before a kept tree did encloses it (it exited after that tree's chunk was written),
    so the tree hangs below the deepest such span of the chunk: the root enclosing it makes a tree
    of that depth + 1 + the kept tree's height, or its own if taller.  A kept tree no taller than a
    newer one never matters again (what encloses the older encloses the newer, at least as deep),
    so the kept trees' heights decrease: at most as many as the tallest is high.  ``crossed``
    counts the trees that grew past :data:`~traceconv.model.layout.MAX_DEPTH` levels so; then
    ``stop()`` reads the file back and writes it again, laid out whole."""

    def __init__(self) -> None:
        self.stacks: dict[int, list[tuple[int, int]]] = {}
        self.crossed = 0

    def add(self, trace: Trace) -> None:
        """A chunk's trace, laid out (:func:`~traceconv.model.layout.nest`: its parents)."""
        from ..model.layout import MAX_DEPTH
        s = trace.slices
        n = len(s)
        if not n:
            return
        parent = np.frombuffer(s.parent, np.int64)
        ts = np.frombuffer(s.ts, np.int64)
        end = ts + np.frombuffer(s.dur, np.int64)
        # each slice's root and number of ancestors in the chunk (its depth), by pointer doubling
        up = np.where(parent >= 0, parent, np.arange(n))
        depth = (parent >= 0).astype(np.int64)
        while True:
            nxt = up[up]
            if np.array_equal(nxt, up):
                break
            depth += depth[up]
            up = nxt
        height = np.zeros(n, np.int64)
        np.maximum.at(height, up, depth + 1)
        roots = np.flatnonzero(parent < 0)
        base = np.array([t.parent if t.parent is not None else t.id for t in trace.tracks],
                        np.int64)[np.frombuffer(s.track, np.int32)]
        for t in np.unique(base[roots]).tolist():
            mine = roots[base[roots] == t]
            mine = mine[np.argsort(end[mine], kind="stable")]          # in the order they exited
            r0, rh = ts[mine], height[mine].copy()
            stack = self.stacks.setdefault(t, [])
            enclosing = np.flatnonzero(r0 <= stack[-1][0]) if stack else []
            if len(enclosing):
                # the deepest span of the chunk begun by each time
                on = np.flatnonzero(base == t)
                by = np.argsort(ts[on], kind="stable")
                begun, deepest = ts[on][by], np.maximum.accumulate(depth[on][by])
                for j in enclosing.tolist():
                    h = int(rh[j])
                    while stack and stack[-1][0] >= r0[j]:
                        p0, ph = stack.pop()
                        h = max(h, int(deepest[np.searchsorted(begun, p0, "right") - 1]) + 1 + ph)
                    if h > MAX_DEPTH and h > rh[j]:
                        self.crossed += 1
                    rh[j] = h
            # the chunk's trees that stay: each taller than every later one
            taller = np.ones(len(rh), bool)
            taller[:-1] = rh[:-1] > np.maximum.accumulate(rh[::-1])[::-1][1:]
            top = int(rh.max())
            while stack and stack[-1][1] <= top:
                stack.pop()
            stack += zip(r0[taller].tolist(), rh[taller].tolist())


class PftraceSink:
    """Appends a self-contained chunk of packets per flush."""

    def __init__(self, rec: "_core.Recorder") -> None:
        self.rec = rec
        self.specs = Specs()
        self.names: dict[int, str] = {}
        rec.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(rec.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        self.unlinked_flows = 0
        self.chunks = 0
        self.events = 0
        self.held: list[tuple[Any, tuple]] = []   # (thread, flow span) kept for a later chunk
        self.heights = Heights()
        _warm_up()

    def _hold(self, taken: list, final: bool) -> list:
        """``taken`` without the flow spans to keep for a later chunk, with those kept before that
        can go now.  A flow whose two ends are in one chunk is a link there; one across chunks
        was linked only at :func:`stop`, by reading the whole file back and writing it again
        (~35 us an event: 200k flows stopped in 14 s).  So a span whose flow has not ended yet
        waits, with every span linked to it by a flow, until its flow's end is recorded (at most
        :data:`HOLD_EVENTS` spans; past that, and at the last flush, all go, their flows then
        linked at stop as before).  A flow that ends in another process (a worker's shard), or
        whose end came first, holds its start until then: at most that many spans, a few MB."""
        old = len(self.held)
        events = [e for _, e in self.held]
        owner = [info for info, _ in self.held]            # (of the held ones; the new ones' below)
        firsts = []                                          # where each thread's new ones start
        for info, evs in taken:
            firsts.append(len(events))
            events += [e for e in evs if e[0] == FSPAN]
        if not events:
            return taken
        src = {f: k for k, e in enumerate(events) for f in e[6]}     # flow -> the span starting it
        dst = {f: k for k, e in enumerate(events) for f in e[7]}     # flow -> the span ending it
        keep: set[int] = set()
        started = src.keys() - dst.keys()                     # flows not ended yet
        if started and not final:
            # the spans that start them, and whatever a flow links a kept span to
            todo = [src[f] for f in started]
            keep.update(todo)
            while todo and len(keep) <= HOLD_EVENTS:
                e = events[todo.pop()]
                for j in [*(dst[f] for f in e[6] if f in dst), *(src[f] for f in e[7] if f in src)]:
                    if j not in keep:
                        keep.add(j)
                        todo.append(j)
            if len(keep) > HOLD_EVENTS:
                keep = set()
        if not keep and not old:
            return taken
        kept_new = {id(events[k]) for k in keep if k >= old}
        released: dict[int, tuple[Any, list]] = {}            # thread -> its spans that go now
        for k in range(old):
            if k not in keep:
                released.setdefault(id(owner[k]), (owner[k], []))[1].append(events[k])
        out = [(info, ([e for e in evs if id(e) not in kept_new] if kept_new else evs)
                + (released.pop(id(info))[1] if id(info) in released else [])) for info, evs in taken]
        out += released.values()
        self.held = [(owner[k] if k < old else taken[bisect.bisect_right(firsts, k) - 1][0], events[k])
                     for k in sorted(keep)]
        return out

    def append(self, taken: list) -> None:
        taken = self._hold(taken, final=self.rec.closing)
        if not any(evs for _, evs in taken):
            return
        from ..model.layout import nest
        from ..writers import perfetto
        b = Builder(self.rec, self.specs, self.names)
        b.add(taken)
        self.names.update(b.names)
        # every chunk starts with a sample of the "recorded events" counter at the recording's
        # start: the writer's clock snapshot is taken at a chunk's earliest event, and snapshots
        # must not go back in time (a chunk can hold a span that began before the previous chunk)
        ctr = b._track(("counter", COUNTER_NAME, None))
        b.trace.add_counter(ctr, self.rec.anchor[0], 0.0)
        self.events += sum(len(evs) for _, evs in taken)
        b.trace.add_counter(ctr, self.rec.offset + _core._clock(), float(self.events))
        self.unlinked_flows += b.link_flows()
        b.trace.meta.extra["record"]["chunk"] = self.chunks
        nest(b.trace)
        b.adopt_lanes()
        self.heights.add(b.trace)
        out = _FdWriter(self.fd)
        write_pftrace(b.trace, out)
        out.close()
        self.chunks += 1

    def write_window(self, threads: list) -> None:        # not used: ring mode writes whole
        raise AssertionError

    def close(self) -> None:
        os.close(self.fd)


_warm = False


def write_pftrace(trace: Trace, out: Any) -> None:
    """The project's Perfetto writer on the calling thread only: no pool thread per flush (the
    recorder must not take a core from the program, and at interpreter exit no new thread can
    start)."""
    from ..writers import perfetto
    perfetto.write(trace, out, threads=False)


def _warm_up() -> None:
    """Import the writer and the compiled core and run them once now, before the first span, rather
    than in the middle of the first flush."""
    global _warm
    if _warm:
        return
    import io

    from ..model.layout import nest
    from ..writers import perfetto
    t = Trace("record")
    p = t.process(1, "warm-up")
    th = t.thread(p, 1, "warm-up")
    t.add_slice(th.track, 1000, 10, "a", "c", {"k": 1, "s": "v"})
    t.add_instant(th.track, 1005, "b")
    t.add_counter(t.track(TrackKind.COUNTER, "n", p).id, 1000, 1.0)
    nest(t)
    write_pftrace(t, io.BytesIO())
    _warm = True


class _FdWriter:
    """A file-like object that writes a chunk with as few system calls as it can, and all of it
    (a killed process leaves whole chunks plus at most a cut last one)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.parts: list[bytes] = []
        self.size = 0

    def write(self, b: Any) -> int:
        b = bytes(b)
        self.parts.append(b)
        self.size += len(b)
        if self.size >= 1 << 22:
            self._out()
        return len(b)

    def _out(self) -> None:
        data = memoryview(b"".join(self.parts))
        self.parts, self.size = [], 0
        while data:
            n = os.write(self.fd, data)
            data = data[n:]

    def close(self) -> None:
        self._out()


class WholeSink:
    """The model of the whole recording (or of the ring's window), written at once."""

    def __init__(self, rec: "_core.Recorder") -> None:
        self.rec = rec
        self.specs = Specs()
        self.builder: Builder | None = None
        rec.path.parent.mkdir(parents=True, exist_ok=True)
        self.unlinked_flows = 0

    def append(self, taken: list) -> None:
        if self.builder is None:
            self.builder = Builder(self.rec, self.specs)
        self.builder.add(taken)

    def write_window(self, threads: list) -> None:
        b = Builder(self.rec, Specs())
        b.add(threads)
        self._save(b)

    def _save(self, b: Builder) -> None:
        from ..api import save
        self.unlinked_flows = b.link_flows()
        b.trace.meta.extra["record"]["dropped"] = self.rec.dropped
        if self.rec.dropped:
            from ..errors import WarningCode
            b.trace.diagnostics.warn(WarningCode.DROPPED_EVENT, "events dropped by the ring buffer's limit",
                                     self.rec.dropped)
        save(b.trace, self.rec.path, threads=False)

    def close(self) -> None:
        if self.rec.ring_ns:
            return                              # the last flush wrote the window
        b = self.builder or Builder(self.rec, self.specs)
        self._save(b)


# ---------------------------------------------------------------- shards

def shard_files(shard_dir: Path) -> list[Path]:
    if not shard_dir.is_dir():
        return []
    return sorted((p for p in shard_dir.iterdir() if p.is_file() and p.name.startswith("rank")
                   and not p.name.startswith(".")), key=_rank_key)


def _rank_key(p: Path) -> tuple[int, str]:
    import re
    m = re.match(r"rank(\d+)", p.name)
    return (int(m.group(1)) if m else 1 << 30, p.name)


def _merge(inputs: list[Path], output: Path, single: bool, elsewhere: bool) -> None:
    """:func:`traceconv.record.merge.merge` of ``inputs`` into ``output``; ``elsewhere``: in a child
    interpreter, as the stop at interpreter exit must: Python has shut its threads down by then,
    and concurrent.futures' pools, which reading and writing use, take no more work (nor can
    their module be imported).  A fresh interpreter has them, and both cores; it records nothing
    ($TRACECONV_RECORD* left out) and finds the modules this one does (its ``sys.path``).  A
    failed merge raises (the child's last line of stderr)."""
    if not elsewhere:
        from .merge import merge
        merge(inputs, output, single=single)
        return
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACECONV_RECORD")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    code = ("import sys; from traceconv.record.merge import merge; "
            "merge(sys.argv[1:-2], sys.argv[-1], single=sys.argv[-2] == 'single')")
    r = subprocess.run([sys.executable, "-c", code, *map(str, inputs), "single" if single else "ranks", str(output)],
                       env=env, stdin=subprocess.DEVNULL, capture_output=True)
    if r.returncode:
        lines = r.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit {r.returncode}")


def _relink(rec: "_core.Recorder", elsewhere: bool) -> Path | None:
    """A streamed .pftrace whose flows, or spans nested past the depth Perfetto keeps
    (:class:`Heights`), crossed a chunk boundary: read it back and write it again, those flows
    linked and the spans laid out whole (at stop only; the chunks on disk stay valid until the
    rename)."""
    tmp = rec.path.with_name(f".{rec.path.name}.chunks.pftrace")
    os.replace(rec.path, tmp)
    try:
        _merge([tmp], rec.path, True, elsewhere)
    except Exception:  # noqa: BLE001 - keep the streamed file as it was
        os.replace(tmp, rec.path)
        return None
    os.unlink(tmp)
    return rec.path


def merge_shards_into(rec: "_core.Recorder", elsewhere: bool = False) -> Path | None:
    """The parent's stop: if workers wrote shards, move the parent's own file into the shard folder
    as rank 0 and write the merged timeline at the parent's path (``elsewhere``: in a child
    interpreter, at interpreter exit: :func:`_merge`)."""
    d = rec.shard_dir
    shards = shard_files(d) if d is not None else []
    sink = rec.sink
    crossed = getattr(sink, "unlinked_flows", 0) or (sink.heights.crossed if isinstance(sink, PftraceSink) else 0)
    if not shards and crossed and getattr(sink, "chunks", 0) > 1:
        return _relink(rec, elsewhere)
    if not shards or not rec.path.exists():
        return None
    own = d / f"rank0-pid{rec.pid}{_core._ext(rec.path)}"
    os.replace(rec.path, own)
    try:
        _merge([own, *shards], rec.path, False, elsewhere)
    except Exception as e:  # noqa: BLE001 - the recording must survive a failed merge
        os.replace(own, rec.path)
        import sys
        print(f"traceconv.record: could not merge the shards in {d} into {rec.path} ({e}); "
              f"merge them with: python -m traceconv.record merge {d} {rec.path} -o merged.pftrace",
              file=sys.stderr)
        return None
    return rec.path
