"""A drop-in for ML-Agents' timers (``mlagents_envs.timers``) that also records the real timeline.

Change one import::

    from traceconv.record.mlagents import hierarchical_timer, timed, set_gauge, add_metadata, \\
        get_timer_tree, reset_timers

Everything ML-Agents' module does is done the same way -- one :class:`TimerStack` per thread, a
node per name under the open node, ``total``/``count`` summed, ``self`` = total minus the
children's, ``is_parallel`` merges, gauges (value, min, max, count; NaN ignored; the later value
wins a merge), the default metadata -- so :func:`get_timer_tree` returns the same tree and the
``timers.json`` written from it converts with ``traceconv convert`` as before.  When a recorder
runs (:func:`traceconv.record.start` or ``$TRACECONV_RECORD``), every timed block is also a
slice on its thread with its real start and duration, every gauge update a counter sample, every
metadata entry an instant; without one, nothing is recorded.

Times: the blocks are timed with ``time.perf_counter_ns`` (ML-Agents reads ``perf_counter()``,
the same clock) and summed in seconds, as ML-Agents does.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from typing import Any, Callable, Dict, Optional, TypeVar

from . import _core
from ._core import COUNTER, INSTANT, SPAN

TIMER_FORMAT_VERSION = "0.1.0"
_clock = time.perf_counter_ns


class TimerNode:
    """The time spent in a block of code (total seconds, count) and its children by name."""

    __slots__ = ["children", "total", "count", "is_parallel"]

    def __init__(self) -> None:
        self.children: Dict[str, TimerNode] = {}
        self.total: float = 0.0
        self.count: int = 0
        self.is_parallel = False

    def get_child(self, name: str) -> "TimerNode":
        child = self.children.get(name)
        if child is None:
            child = TimerNode()
            self.children[name] = child
        return child

    def add_time(self, elapsed: float) -> None:
        self.total += elapsed
        self.count += 1

    def merge(self, other: "TimerNode", root_name: str | None = None, is_parallel: bool = True) -> None:
        node = self.get_child(root_name) if root_name else self
        node.total += other.total
        node.count += other.count
        node.is_parallel |= is_parallel
        for other_child_name, other_child_node in other.children.items():
            node.get_child(other_child_name).merge(other_child_node, is_parallel=is_parallel)


class GaugeNode:
    """The most recent value of a metric, with its min, max and count."""

    __slots__ = ["value", "min_value", "max_value", "count", "_timestamp"]

    def __init__(self, value: float) -> None:
        self.value = value
        self.min_value = value
        self.max_value = value
        self.count = 1
        self._timestamp = time.time()

    def update(self, new_value: float) -> None:
        self.min_value = min(self.min_value, new_value)
        self.max_value = max(self.max_value, new_value)
        self.value = new_value
        self.count += 1
        self._timestamp = time.time()

    def merge(self, other: "GaugeNode") -> None:
        if self._timestamp < other._timestamp:
            self.value = other.value
            self._timestamp = other._timestamp
        self.min_value = min(self.min_value, other.min_value)
        self.max_value = max(self.max_value, other.max_value)
        self.count += other.count

    def as_dict(self) -> Dict[str, float]:
        return {"value": self.value, "min": self.min_value, "max": self.max_value, "count": self.count}


class TimerStack:
    """One thread's timers: the root node, the stack of open nodes, gauges and metadata."""

    __slots__ = ["root", "stack", "start_time", "gauges", "metadata"]

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.root = TimerNode()
        self.stack = [self.root]
        self.start_time = time.perf_counter()
        self.gauges: Dict[str, GaugeNode] = {}
        self.metadata: Dict[str, str] = {}
        self._add_default_metadata()

    def push(self, name: str) -> TimerNode:
        next_node = self.stack[-1].get_child(name)
        self.stack.append(next_node)
        return next_node

    def pop(self) -> None:
        self.stack.pop()

    def get_root(self) -> TimerNode:
        root = self.root
        root.total = time.perf_counter() - self.start_time
        root.count = 1
        return root

    def get_timing_tree(self, node: TimerNode | None = None) -> Dict[str, Any]:
        res: Dict[str, Any] = {}
        if node is None:
            node = self.get_root()
            res["name"] = "root"
            if self.gauges:
                res["gauges"] = self._get_gauges()
            if self.metadata:
                self.metadata["end_time_seconds"] = str(int(time.time()))
                res["metadata"] = self.metadata
        res["total"] = node.total
        res["count"] = node.count
        if node.is_parallel:
            res["is_parallel"] = True
        child_total = 0.0
        child_dict = {}
        for child_name, child_node in node.children.items():
            child_res = self.get_timing_tree(child_node)
            child_dict[child_name] = child_res
            child_total += child_res["total"]
        res["self"] = max(0.0, node.total - child_total)
        if child_dict:
            res["children"] = child_dict
        return res

    def set_gauge(self, name: str, value: float) -> None:
        if math.isnan(value):
            return
        gauge_node = self.gauges.get(name)
        if gauge_node:
            gauge_node.update(value)
        else:
            self.gauges[name] = GaugeNode(value)

    def add_metadata(self, key: str, value: str) -> None:
        self.metadata[key] = value

    def _get_gauges(self) -> Dict[str, Dict[str, float]]:
        return {name: g.as_dict() for name, g in self.gauges.items()}

    def _add_default_metadata(self) -> None:
        self.metadata["timer_format_version"] = TIMER_FORMAT_VERSION
        self.metadata["start_time_seconds"] = str(int(time.time()))
        self.metadata["python_version"] = sys.version
        self.metadata["command_line_arguments"] = " ".join(sys.argv)


_thread_timer_stacks: Dict[int, TimerStack] = {}


def _get_thread_timer() -> TimerStack:
    ident = threading.get_ident()
    stack = _thread_timer_stacks.get(ident)
    if stack is None:
        stack = _thread_timer_stacks[ident] = TimerStack()
    return stack


def get_timer_stack_for_thread(t: threading.Thread) -> Optional[TimerStack]:
    if t.ident is None:
        return None
    return _thread_timer_stacks.get(t.ident)


class hierarchical_timer:  # noqa: N801 - the name ML-Agents users call
    """``with hierarchical_timer("env_step") as node: ...`` -- times the block into the thread's
    timer tree (and records it as a slice when a recorder runs)."""

    __slots__ = ("name", "stack", "node", "t0")

    def __init__(self, name: str, timer_stack: TimerStack | None = None) -> None:
        self.name = name
        self.stack = timer_stack or _get_thread_timer()

    def __enter__(self) -> TimerNode:
        self.node = self.stack.push(self.name)
        self.t0 = _clock()
        return self.node

    def __exit__(self, et: Any, ev: Any, tb: Any) -> bool:
        t1 = _clock()
        t0 = self.t0
        self.node.add_time((t1 - t0) / 1e9)
        self.stack.pop()
        if _core._rec is not None:
            try:
                buf = _core._tls.ev
            except AttributeError:
                buf = _core._register_thread()
            buf.append((SPAN, t0, t1, self.name, None, None))
            if len(buf) >= _core._cap:
                _core._full(buf)
        return False


FuncT = TypeVar("FuncT", bound=Callable[..., Any])


def timed(func: FuncT) -> FuncT:
    """Decorator: time every call under the function's ``__qualname__``."""
    name = func.__qualname__

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with hierarchical_timer(name):
            return func(*args, **kwargs)

    return wrapped  # type: ignore[return-value]


def set_gauge(name: str, value: float, timer_stack: TimerStack | None = None) -> None:
    (timer_stack or _get_thread_timer()).set_gauge(name, value)
    if _core._rec is not None and not math.isnan(value):
        _record((COUNTER, _clock(), name, value, None))


def merge_gauges(gauges: Dict[str, GaugeNode], timer_stack: TimerStack | None = None) -> None:
    timer_stack = timer_stack or _get_thread_timer()
    for n, g in gauges.items():
        if n in timer_stack.gauges:
            timer_stack.gauges[n].merge(g)
        else:
            timer_stack.gauges[n] = g


def add_metadata(key: str, value: str, timer_stack: TimerStack | None = None) -> None:
    (timer_stack or _get_thread_timer()).add_metadata(key, value)
    if _core._rec is not None:
        _record((INSTANT, _clock(), "add_metadata", "mlagents", {key: value}))


def get_timer_tree(timer_stack: TimerStack | None = None) -> Dict[str, Any]:
    return (timer_stack or _get_thread_timer()).get_timing_tree()


def get_timer_root(timer_stack: TimerStack | None = None) -> TimerNode:
    return (timer_stack or _get_thread_timer()).get_root()


def reset_timers(timer_stack: TimerStack | None = None) -> None:
    (timer_stack or _get_thread_timer()).reset()


def write_timing_tree(path: str, timer_stack: TimerStack | None = None) -> None:
    """Write ``get_timer_tree()`` as ML-Agents' ``learn.py`` does (``json.dump(..., indent=4)``)."""
    with open(path, "w") as f:
        json.dump(get_timer_tree(timer_stack), f, indent=4)


def _record(event: tuple) -> None:
    try:
        buf = _core._tls.ev
    except AttributeError:
        buf = _core._register_thread()
    buf.append(event)
    if len(buf) >= _core._cap:
        _core._full(buf)
