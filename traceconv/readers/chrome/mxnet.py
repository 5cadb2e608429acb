"""Apache MXNet ``profiler.dump()`` trace → timeline: a delta on the generic Chrome reader.

What it maps where:

* Processes: the device slots (pid 0..N-1, ``process_name`` ``cpu/0``, ``cpu pinned/``...) hold the
  operator ``B``/``E`` events; every other category (``MXNET_C_API``, ``Device Storage``, ``operator``
  tasks, user domains) is a process whose pid is a 64-bit string hash, often above 2^63: each keeps
  its own process (Perfetto's JSON importer would collapse them all to pid 0), named after its
  category; a hash pid/tid with no name keeps its number in the name (``tid 1124...``).
* ``b``/``e`` (C API calls, operator tasks, user tasks; ``id`` = the thread hash) nest per thread:
  they become ordinary slices of their thread, matched like ``B``/``E``.
* Frames (``(`` / ``)``, category ``<domain>,frame``) → slices on a ``<domain> frames`` track of
  their process.  Markers (``n`` without ``id``, ``s`` = g/p/t) → instants with that scope.
* Each operator call is written twice: ``B``/``E`` on its device slot and ``b``/``e`` on the
  ``operator`` process.  Both are drawn; the ``operator`` process's tracks are marked as a mirror
  (``Track.summary``), so a summary counts each call once, as MXNet's own aggregate does.
* Counters → counter tracks (``Memory: cpu/0`` in bytes; C API call counts; user counters).
* Time: absolute µs (``high_resolution_clock``, Unix epoch on Linux) → Unix ns; MXNet ≤1.1 wrote µs
  from profiler start → relative.
* Files MXNet could not finish (``continuous_dump`` taken mid-run, a killed job: no closing ``]``),
  trailing commas (≤1.1 with no operators) and names written without JSON escaping are read up to
  the last complete event, with a warning that says how much was kept.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ...io import Source
from ...model import Trace, TrackKind
from .reader import ChromeReader, Event, looks_like_own_output

WHAT = "MXNet profiler trace (profiler.dump())"

_MXNET_META = re.compile(rb'\{\s*"ph"\s*:\s*"M"\s*,\s*"args"\s*:\s*\{\s*"name"\s*:\s*"[^"]*"\s*\}\s*,\s*"pid"\s*:\s*\d+\s*,'
                         rb'\s*"name"\s*:\s*"process_name"\s*\}')
_MXNET_CATS = re.compile(rb'"cat"\s*:\s*"(MXNET_C_API|Device Storage|operator|category)"\s*,\s*"ph"\s*:')


def sniff(head: bytes) -> bool:
    h = head.lstrip()
    if looks_like_own_output(h):
        return False
    if h[:1] != b"{" or re.search(rb'"traceEvents"\s*:\s*\[', h) is None:
        return False
    return _MXNET_META.search(h) is not None or _MXNET_CATS.search(h) is not None


class MXNetReader(ChromeReader):
    format_name = "mxnet"
    what = WHAT

    async_on_threads = True      # MXNet's b/e are its C API calls, nested per thread

    def frame_track(self, ev: Event, pid: Any, tid: Any) -> int:
        domain = (ev.cat or "").split(",")[0] or "frames"
        return self.trace.track(TrackKind.ASYNC, f"{domain} frames", self.trace.process(pid)).id

    def counter_unit(self, name: str) -> str | None:
        return "bytes" if name.startswith("Memory: ") else None

    def finish(self) -> None:
        mark_operator_mirror(self.trace)


def mark_operator_mirror(trace: Trace) -> int:
    """MXNet writes each operator call twice: ``B``/``E`` on its device slot (``cpu/0``: what its
    aggregate table counts) and ``b``/``e`` on the ``operator`` category's process.  Both stay on
    the timeline; the ``operator`` process's tracks are marked ``summary = "mirror"`` so that
    ``traceconv summary`` counts each call once, as MXNet does.  Only when operator slices are
    also on another process's tracks.  Returns the number of tracks marked."""
    ops = [p.id for p in trace.processes if p.name == "operator" and not _is_device_slot(p.raw_pid)]
    if not ops:
        return 0
    cat = trace.strings._ids.get("operator")
    if cat is None:
        return 0
    s = trace.slices
    mine = np.array([tr.process in ops for tr in trace.tracks], dtype=bool)
    cats = np.frombuffer(s.cat, dtype=np.int32) if len(s) else np.zeros(0, np.int32)
    tracks = np.frombuffer(s.track, dtype=np.int32) if len(s) else np.zeros(0, np.int32)
    if not ((cats == cat) & ~mine[tracks]).any():
        return 0
    return trace.mark_summary(ops, "mirror")


def _is_device_slot(raw_pid: Any) -> bool:
    """The device slots are pids 0..N-1 (N = number of devices); categories have 64-bit hashes."""
    return isinstance(raw_pid, int) and 0 <= raw_pid < 1 << 16


def read(source: Source) -> Trace:
    return MXNetReader(source).read()
