"""A drop-in for Sample Factory's ``Timing`` (``sample_factory.utils.timing``) that also records the
real timeline.

Change one import::

    from traceconv.record.samplefactory import Timing

``Timing(name)`` behaves as Sample Factory's: an attribute dict of the latest values by key
(``timing.main_loop``), a tree of the ``with`` blocks as they nest, ``timeit(key)`` keeping the
last duration, ``add_time(key)`` summing them, ``time_avg(key, average=10)`` the mean of the last
``average``, durations at least ``EPS`` (1e-8 s), and ``str(timing)`` printing the same
``<name> tree view:`` text (leaves of a node on one line first, then each inner node and its
subtree, two spaces per level, ``key: value`` with 4 decimals) -- so the log lines and
``traceconv convert`` of the log keep working.  When a recorder runs, each block is also a slice
on its thread (named by its key, category ``Timing``'s name); without one, nothing is recorded.

Sample Factory times with ``time.time()``; this module with ``time.perf_counter_ns`` (a
monotonic clock: a wall-clock step does not make a block negative).
"""

from __future__ import annotations

import collections
import dataclasses
import time
import typing
from collections import deque
from dataclasses import dataclass
from typing import Any, Optional, Union

from . import _core
from ._core import SPAN

EPS = 1e-8
_clock = time.perf_counter_ns


class AttrDict(dict):
    __setattr__ = dict.__setitem__

    def __getattribute__(self, item: str) -> Any:
        if item in self:
            return self[item]
        return super().__getattribute__(item)


class AvgTime:
    def __init__(self, num_values_to_avg: int) -> None:
        self.values: deque = deque([], maxlen=num_values_to_avg)

    def __str__(self) -> str:
        avg_time = sum(self.values) / max(1, len(self.values))
        return f"{avg_time:.4f}"


@dataclass
class TimingTreeNode:
    self_time: Union[float, AvgTime] = 0
    timing: typing.OrderedDict[str, Any] = dataclasses.field(default_factory=collections.OrderedDict)


class TimingContext:
    __slots__ = ("timing_tree_node", "_timing", "_key", "_additive", "_average", "_time_enter", "_time")

    def __init__(self, timing: "Timing", key: str, additive: bool = False, average: int | None = None) -> None:
        self.timing_tree_node: Optional[TimingTreeNode] = None
        self._timing = timing
        self._key = key
        self._additive = additive
        self._average = average
        self._time_enter = 0
        self._time = 0

    def set_tree_node(self, node: TimingTreeNode) -> None:
        self.timing_tree_node = node

    def initial_value(self) -> Any:
        if self._average is not None:
            return AvgTime(num_values_to_avg=self._average)
        return 0.0

    def _record_measurement(self, key: str, value: float) -> None:
        if self._additive:
            self._timing[key] += value
            self.timing_tree_node.self_time += value
        elif self._average is not None:
            self._timing[key].values.append(value)
            self.timing_tree_node.self_time.values.append(value)
        else:
            self._timing[key] = value
            self.timing_tree_node.self_time = value

    def __enter__(self) -> None:
        self._time_enter = _clock()
        self._timing._open_contexts_stack.append(self)

    def __exit__(self, type_: Any, value: Any, traceback: Any) -> None:
        t1 = _clock()
        t0 = self._time_enter
        self._record_measurement(self._key, max((t1 - t0) / 1e9, EPS))
        self._timing._open_contexts_stack.pop()
        if _core._rec is not None:
            try:
                buf = _core._tls.ev
            except AttributeError:
                buf = _core._register_thread()
            buf.append((SPAN, t0, t1, self._key, self._timing._name, None))
            if len(buf) >= _core._cap:
                _core._full(buf)


class Timing(AttrDict):
    def __init__(self, name: str = "Profile", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._name = name
        self._root_context = TimingContext(self, "~")
        self._root_context.set_tree_node(TimingTreeNode())
        self._open_contexts_stack = [self._root_context]

    def _push_context(self, ctx: TimingContext) -> TimingContext:
        self._open_contexts_stack.append(ctx)
        return ctx

    def _init_context(self, key: str, *args: Any, **kwargs: Any) -> TimingContext:
        ctx = TimingContext(self, key, *args, **kwargs)
        if key not in self:
            self[key] = ctx.initial_value()
        parent_tree_node = self._open_contexts_stack[-1].timing_tree_node
        if key not in parent_tree_node.timing:
            parent_tree_node.timing[key] = TimingTreeNode(ctx.initial_value())
        ctx.set_tree_node(parent_tree_node.timing[key])
        return ctx

    def timeit(self, key: str) -> TimingContext:
        return self._init_context(key)

    def add_time(self, key: str) -> TimingContext:
        return self._init_context(key, additive=True)

    def time_avg(self, key: str, average: int = 10) -> TimingContext:
        return self._init_context(key, average=average)

    @staticmethod
    def _time_str(value: Any) -> str:
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    def flat_str(self) -> str:
        skip_names = ["_root_context", "_open_contexts_stack"]
        return ", ".join(f"{key}: {self._time_str(value)}" for key, value in self.items() if key not in skip_names)

    @classmethod
    def _tree_str_func(cls, node: TimingTreeNode, depth: int) -> list[str]:
        indent = " " * 2 * depth

        def node_str(k: str, node_: TimingTreeNode) -> str:
            return f"{k}: {cls._time_str(node_.self_time)}"

        tokens = [node_str(k, v) for k, v in node.timing.items() if not v.timing]
        lines = [f'{indent}{", ".join(tokens)}'] if tokens else []
        for key, child_node in node.timing.items():
            if child_node.timing:
                lines.append(f"{indent}{node_str(key, child_node)}")
                lines.extend(cls._tree_str_func(child_node, depth + 1))
        return lines

    def tree_str(self) -> str:
        lines = [f"{self._name} tree view:"]
        lines.extend(self._tree_str_func(self._root_context.timing_tree_node, 0))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.tree_str()
