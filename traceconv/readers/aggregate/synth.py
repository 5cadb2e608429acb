"""Synthesize a timeline from an aggregate timer tree (no timestamps in the source).

The layout rule, shared by every aggregate format (ML-Agents timers, Sample
Factory profile trees, MXNet aggregate stats):

* every node is a slice whose duration is its total;
* a node's children are laid one after another from the node's start, in the
  file's order; what remains of the node after its children is its self time;
* a *parallel* child (work merged from other processes or threads, whose total
  may exceed its parent's) goes on a thread track of its own in the same
  process, starting at its parent's start;
* children whose totals add up to more than their parent (some producers keep
  only the last duration of a node) are still laid end to end; those that run
  past the parent's end are flagged in the parent's args and end up on an extra
  "overlap" track (see :mod:`traceconv.model.layout`), so no slice escapes its parent
  on a track.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import WarningCode
from ...model import Process, Trace


@dataclass
class AggNode:
    name: str
    dur: int                                  # ns
    args: dict[str, Any] = field(default_factory=dict)
    children: list["AggNode"] = field(default_factory=list)
    parallel: bool = False
    cat: str | None = None


def seconds_to_ns(seconds: float) -> int:
    """Seconds (any number) as integer ns.  Beyond int64 (1e26 s, Infinity) comes back as a value
    the model saturates and the loader's time domain then clamps or drops, counted; NaN as a
    negative one (a duration of 0, counted)."""
    return to_ns(seconds, 1e9)


def to_ns(value: float, ns_per_unit: float) -> int:
    """``value`` units as integer ns, as :func:`seconds_to_ns` (which is ``to_ns(s, 1e9)``)."""
    try:
        return int(round(value * ns_per_unit))
    except OverflowError:                  # Infinity, or a finite value whose product is not
        return 2**63 if value > 0 else -(2**63) - 1
    except ValueError:                     # NaN
        return -(2**63) - 1


def lay_out(trace: Trace, root: AggNode, process: Process, thread_name: str, start: int,
            *, cat: str | None = None) -> int:
    """Lay ``root`` out on a new thread of ``process`` from ``start``; returns the number of slices."""
    # (the names of this process's threads: a set of every thread of the trace, made for each
    # tree, took 149 s for a Sample Factory log of 20k reports, a process each)
    taken = {th.name for th in trace.process_threads(process)}

    def unique(name: str) -> str:
        n, k = name, 2
        while n in taken:
            n, k = f"{name} #{k}", k + 1
        taken.add(n)
        return n

    main = trace.thread(process, ("synthesized", thread_name), unique(thread_name), synthetic=True)
    count = 0
    overflowing = 0
    # explicit stack: (node, track id, start, path)
    work: list[tuple[AggNode, int, int, str]] = [(root, main.track, start, root.name)]
    while work:
        node, track, t0, path = work.pop()
        args = dict(node.args)
        sequential = [c for c in node.children if not c.parallel]
        if sum(c.dur for c in sequential) > node.dur:
            args["children_exceed_total"] = True
            overflowing += 1
        trace.add_slice(track, t0, node.dur, node.name, node.cat or cat, args)
        count += 1
        cursor = t0
        placed: list[tuple[AggNode, int, int, str]] = []
        for child in node.children:
            child_path = f"{path} > {child.name}"
            if child.parallel:
                th = trace.thread(process, ("synthesized", child_path),
                                  unique(f"{child.name} (parallel, in {node.name})"), synthetic=True)
                placed.append((child, th.track, t0, child_path))
            else:
                placed.append((child, track, cursor, child_path))
                cursor += child.dur
        work.extend(reversed(placed))
    if overflowing:
        trace.diagnostics.warn(WarningCode.CHILDREN_EXCEED_PARENT,
                  "timer nodes whose children add up to more than their own total "
                  "(flagged with children_exceed_total in args)", overflowing)
    return count
