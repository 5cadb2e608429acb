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

from ..io import Source
from ..model import Trace, TrackKind
from .chrome import ChromeReader, Event, looks_like_own_output

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

    def on_async(self, ev: Event) -> str:
        return "thread"

    def frame_track(self, ev: Event, pid: Any, tid: Any) -> int:
        domain = (ev.cat or "").split(",")[0] or "frames"
        return self.trace.track(TrackKind.ASYNC, f"{domain} frames", self.trace.process(pid)).id

    def counter_unit(self, name: str) -> str | None:
        return "bytes" if name.startswith("Memory: ") else None


def read(source: Source) -> Trace:
    return MXNetReader(source).read()
