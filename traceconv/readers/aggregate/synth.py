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


class ThreadNames:
    """The names of a process's threads, and new ones made unique with a ``#k`` suffix (the first
    ``k`` from 2 up that is free).  A reader laying many trees out in one process keeps one: made
    for each tree, with the suffixes tried from 2 each time, a Sample Factory log of 20k timing
    lines took 149 s.  It takes in the threads the process gained since it last looked."""

    def __init__(self, trace: Trace, process: Process) -> None:
        self.threads = trace.process_threads(process)
        self.seen = 0
        self.taken: set[str] = set()
        self.next: dict[str, int] = {}          # name -> the first suffix worth trying

    def unique(self, name: str) -> str:
        self.taken.update(th.name for th in self.threads[self.seen:])
        self.seen = len(self.threads)
        n = name
        if n in self.taken:
            k = self.next.get(name, 2)
            while f"{name} #{k}" in self.taken:
                k += 1
            n = f"{name} #{k}"
            self.next[name] = k + 1
        self.taken.add(n)
        return n


def lay_out(trace: Trace, root: AggNode, process: Process, thread_name: str, start: int,
            *, cat: str | None = None, names: ThreadNames | None = None) -> int:
    """Lay ``root`` out on a new thread of ``process`` from ``start``; returns the number of slices.
    ``names``: the process's :class:`ThreadNames`, from a caller laying out many trees there."""
    unique = (names or ThreadNames(trace, process)).unique

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
