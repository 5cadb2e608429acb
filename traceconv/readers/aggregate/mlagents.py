"""Unity ML-Agents ``timers.json`` → synthesized timeline.

The file holds an aggregate timer tree (no timestamps), so the timeline is laid
out by :mod:`traceconv.readers.aggregate.synth`: each node is a slice as long as its ``total``,
children one after another from the parent's start, self time as the remainder.
``is_parallel`` subtrees (timers merged from env worker processes and trainer
threads) go on thread tracks of their own.  Gauges and metadata are kept as the
root slice's args and the trace metadata: they are end-of-run aggregates, not
time series, so no counter track is invented for them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ...errors import TraceconvError, WarningCode
from ...io import Source
from ...model import Clock, Trace
from ..schema import parse_json, validate
from .synth import AggNode, lay_out, seconds_to_ns

if TYPE_CHECKING:
    from .mlagents_schema import TimerNode

_FIRST_KEY = re.compile(rb'^\s*\{\s*"(name|gauges|metadata|total|count|self|children|is_parallel)"\s*:')
_RUN_ID = re.compile(r"--run[-_]id[= ]+(\S+)")
WHAT = "ML-Agents timers file"


def sniff(head: bytes) -> bool:
    return bool(_FIRST_KEY.match(head)) and b'"total"' in head and b'"count"' in head \
        and b'"self"' in head


def _node(name: str, n: TimerNode, parent_parallel: bool) -> AggNode:
    args: dict[str, Any] = {"count": n.count, "total_s": n.total}
    if n.self_ is not None:
        args["self_s"] = n.self_
    if n.count:
        args["mean_s"] = n.total / n.count
    if n.is_parallel:
        args["is_parallel"] = True
    node = AggNode(
        name=name,
        dur=seconds_to_ns(n.total),
        args=args,
        children=[_node(cn, c, n.is_parallel) for cn, c in n.child_items()],
        # Only the root of a merged subtree starts a track; its descendants are also marked parallel.
        parallel=n.is_parallel and not parent_parallel,
    )
    if n.count == 0 and n.total == 0 and node.children:
        # Legacy (<= 0.14) roots were never refreshed: total 0, count 0.  Their real span is unknown,
        # so the node spans its children instead of being a zero-length slice.
        node.dur = sum(c.dur for c in node.children if not c.parallel)
        args["total_unknown"] = True
    return node


def read(source: Source) -> Trace:
    data = parse_json(source.read_bytes(), WHAT)
    if not isinstance(data, dict):
        raise TraceconvError(f"not a valid {WHAT}: expected a JSON object at the top level, "
                             f"found a {type(data).__name__}")
    from .mlagents_schema import TimersFile      # (not for sniffing: the schema takes 5 ms to build)
    tf = validate(TimersFile, data, WHAT)
    meta = {k: v for k, v in tf.metadata.items()}
    csharp = tf.name is None or "unity_version" in meta

    trace = Trace("mlagents")
    trace.meta.synthesized = True
    start = 0
    trace.meta.clock = Clock.SYNTHETIC
    try:
        start = int(float(str(meta["start_time_seconds"]))) * 1_000_000_000
        trace.meta.clock = Clock.UNIX
    except (KeyError, ValueError, OverflowError):
        pass
    trace.meta.extra = {
        "producer": "Unity ML-Agents (C#)" if csharp else "Unity ML-Agents (Python)",
        "mlagents.metadata": meta,
    }
    if tf.gauges:
        trace.meta.extra["mlagents.gauges"] = {k: g.model_dump() for k, g in tf.gauges.items()}

    if csharp:
        pname = f"Unity: {meta['scene_name']}" if meta.get("scene_name") else "Unity ML-Agents"
    else:
        m = _RUN_ID.search(str(meta.get("command_line_arguments", "")))
        pname = f"mlagents-learn ({m.group(1)})" if m else "mlagents-learn"
    process = trace.process(("mlagents", pname), pname + " [synthesized timeline]", synthetic=True)

    root = _node(tf.name or "root", tf, False)
    root.parallel = False
    if tf.gauges:
        root.args["gauges"] = {k: g.model_dump() for k, g in tf.gauges.items()}
    lay_out(trace, root, process, "timers", start, cat="timer")
    if root.args.get("total_unknown"):
        trace.diagnostics.warn(WarningCode.NOTE, "the root timer has no total (ML-Agents <= 0.14 never "
                               "refreshed it): it is drawn spanning its children, with total_unknown in args")
    return trace
