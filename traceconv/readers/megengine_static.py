"""MegEngine static-graph profile (``trace.get_profile()`` JSON) → timeline on its own times.

Layout rule: the file has real per-operator ``start``/``kern``/``end`` times
(seconds, relative to the profiler's start: Clock.RELATIVE) for every comp node
(``profiler.device``) and host thread (``profiler.host``), so each operator is
a slice from ``start`` to ``end`` on the track of that comp node or thread
(one process, device tracks first), added in execution order
(``graph_exec.comp_seq``; ``seq`` in args).  Args hold the operator's id and
type, its ``start``/``kern``/``end`` as written, its ``opr_footprint``
(computation, memory, in/out shapes, param) and, as MegEngine's
profile_analyze computes them, ``flops`` = computation / time and
``bandwidth`` = memory / time with time = end - start on that track.  Every
operator's device/host time (max over comp nodes/threads, as profile_analyze
does), FLOPS and bandwidth are also in ``trace.meta.extra["summary_tables"]``.  The host tracks
are marked as a mirror of the device tracks (``Track.summary``): ``traceconv summary`` counts an
operator once, by its device time, as profile_analyze does.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import TraceconvError, WarningCode
from ..io import Source
from ..model import Clock, Trace
from .schema import parse_json, validate
from .aggregate.synth import seconds_to_ns

WHAT = "MegEngine static-graph profile"
_SNIFF = re.compile(rb'^\s*\{\s*"(?:graph_exec|profiler)"\s*:')
_SNIFF_KEYS = (b'"comp_seq"', b'"opr_footprint"', b'"opr_internal_pf"', b'"mem_chunk"', b'"waiting_spec"')
_COMP_NODE = re.compile(r'CompNode\("([^"]*)" from "([^"]*)"\)')
_THREAD_ON_NODE = re.compile(r'^([^:"(]+):(CompNode\(.*\))$')


def sniff(head: bytes) -> bool:
    return bool(_SNIFF.match(head)) and any(k in head for k in _SNIFF_KEYS)


def _pretty(where: str) -> str:
    """``CompNode("cpu0:0" from "xpux:0")`` → ``cpu0:0 (xpux:0)``;
    ``comp_node_dispatch:CompNode("cpu:default" from "cpu:default")`` → ``comp_node_dispatch cpu:default``."""
    def repl(m: re.Match[str]) -> str:
        return m.group(1) if m.group(1) == m.group(2) else f"{m.group(1)} ({m.group(2)})"
    m = _THREAD_ON_NODE.match(where)
    if m:
        return f"{m.group(1)} {_COMP_NODE.sub(repl, m.group(2))}"
    return _COMP_NODE.sub(repl, where)


def _ns(seconds: float) -> int:
    return seconds_to_ns(seconds)      # 1e300 s: saturated, then dropped or clamped by the loader (counted)


def read(source: Source) -> Trace:
    raw = parse_json(source.read_bytes(), WHAT)
    if not isinstance(raw, dict) or "graph_exec" not in raw or "profiler" not in raw:
        found = f"keys {sorted(raw)[:5]}" if isinstance(raw, dict) else f"a {type(raw).__name__}"
        raise TraceconvError(f"not a {WHAT}: expected an object with 'graph_exec' and 'profiler', found {found}")
    from .megengine_static_schema import StaticProfile     # (not for sniffing)
    prof = validate(StaticProfile, raw, WHAT)
    ge, pf = prof.graph_exec, prof.profiler
    ops = ge.operator
    if isinstance(ge.var, list):
        varz = {str(i): v for i, v in enumerate(ge.var)}
    else:
        varz = ge.var

    # execution order
    timed = set(pf.device) | set(pf.host)
    if ge.comp_seq is not None:
        order = [str(o) for o in ge.comp_seq]
    else:
        def first_start(o: str) -> float:
            ts = [t.start for t in pf.device.get(o, {}).values()] or [t.start for t in pf.host.get(o, {}).values()]
            return min(ts) if ts else float("inf")
        order = sorted(timed, key=lambda o: (first_start(o), int(o) if o.isdigit() else 0, o))
    in_order = set(order)
    extra_ops = sorted(timed - in_order, key=lambda o: (int(o) if o.isdigit() else 0, o))
    order += extra_ops
    seq = {o: i for i, o in enumerate(order)}

    trace = Trace("megengine-static")
    trace.meta.clock = Clock.RELATIVE
    trace.meta.synthesized = False
    proc = trace.process(("megengine-static",), "MegEngine static graph", synthetic=True)
    proc.sort_index = 0

    def thread_for(kind: str, where: str):
        th = trace.thread(proc, (kind, where), f"{kind} {_pretty(where)}", synthetic=True)
        if kind == "host":   # the same calls as the device tracks: a summary counts device time
            trace.tracks[th.track].summary = "mirror"
        return th

    # device tracks first, in first-seen order, then host threads
    for kind, section in (("device", pf.device), ("host", pf.host)):
        for o in order:
            for where in section.get(o, {}):
                th = thread_for(kind, where)
                if th.sort_index is None:
                    th.sort_index = len(trace.threads)

    rows: list[list[Any]] = []
    unknown = 0
    clamped = 0
    for o in order:
        op = ops.get(o)
        if op is None:
            unknown += 1
        fp = pf.opr_footprint.get(o)
        base: dict[str, Any] = {"id": o, "seq": seq[o]}
        if op is not None:
            base["type"] = op.type
            outs = [varz.get(str(v), {}).get("name") for v in op.output]
            if any(outs):
                base["outputs"] = outs
        comp = mem = None
        if fp is not None:
            comp, mem = (int(v) if v is not None and float(v).is_integer() else v
                         for v in (fp.computation, fp.memory))
            for key in ("computation", "memory", "in_shapes", "out_shapes", "in_layouts", "param"):
                v = getattr(fp, key)
                if v is not None:
                    base[key] = int(v) if key in ("computation", "memory") and float(v).is_integer() else v
        name = op.name if op is not None else f"opr {o}"
        cat = op.type if op is not None else "operator"
        times: dict[str, float] = {}
        for kind, section in (("device", pf.device), ("host", pf.host)):
            best = None
            for where, t in section.get(o, {}).items():
                th = thread_for(kind, where)
                ts = _ns(t.start)
                end = _ns(t.end)
                if end < ts:
                    clamped += 1
                    end = ts
                dt = t.end - t.start
                args = dict(base)
                args.update(start_s=t.start, kern_s=t.kern, end_s=t.end, time_s=dt)
                if dt > 0:
                    if comp:
                        args["flops"] = comp / dt
                    if mem is not None:
                        args["bandwidth"] = mem / dt
                trace.add_slice(th.track, ts, end - ts, name, cat, args)
                best = dt if best is None else max(best, dt)
            if best is not None:
                times[kind] = best
        dev = times.get("device")
        rows.append([seq[o], o, name, op.type if op is not None else None, dev, times.get("host"),
                     comp, mem,
                     comp / dev if comp and dev else None,
                     mem / dev if mem is not None and dev else None])

    untimed = [o for o in ops if o not in timed]
    if untimed:
        trace.diagnostics.warn(WarningCode.NOTE, "operators of graph_exec with no profile times (not executed "
                               "in the profiled run: constants, inputs); not on the timeline", len(untimed))
    if unknown:
        trace.diagnostics.warn(WarningCode.NOTE, "profiled operator ids missing from graph_exec.operator "
                               "(named 'opr <id>')", unknown)
    if extra_ops and ge.comp_seq is not None:
        trace.diagnostics.warn(WarningCode.NOTE, "profiled operators not in graph_exec.comp_seq "
                               "(placed after it in id order)", len(extra_ops))
    if clamped:
        trace.diagnostics.warn(WarningCode.CLAMPED_VALUE, "operator times whose end is before their start "
                               "(drawn with zero length; the times are in args)", clamped)
    if not len(trace.slices):
        raise TraceconvError(f"this {WHAT} has no operator times: 'profiler.device' and 'profiler.host' "
                             "are empty (was the trace run with profiling=True?)")
    trace.meta.extra = {
        "producer": "MegEngine static graph profiler (GraphProfiler)",
        "megengine_static": {"operators": len(ops), "executed": len(order), "untimed": len(untimed),
                             "comp_nodes": sorted({w for s in pf.device.values() for w in s}),
                             "host_threads": sorted({w for s in pf.host.values() for w in s}),
                             "time_unit": "s"},
        "summary_tables": [{
            "name": "operators", "unit": "s",
            "columns": ["seq", "id", "name", "type", "device_time", "host_time", "computation", "memory",
                        "flops", "bandwidth"],
            "rows": rows,
        }],
    }
    return trace
