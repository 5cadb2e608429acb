"""MegEngine imperative-profiler chrome timeline (``profile/<pid>.chrome_timeline.json``) → timeline:
a delta on the generic Chrome reader.

What it maps where:

* Layouts: ≤1.4 bare array; 1.5 ``{"traceEvents"}`` whose first event is ``Metadata`` (``ph`` ``I``)
  with ``args.localTime`` (µs); ≥1.6 ``{"traceEvents", "metadata": {"localTime": "<ns>"}}``
  (validated with :class:`traceconv.readers.chrome.schema.MegEngineMetadata`).
* Time: ``ts`` is µs since the profile started; ``localTime`` (the start, Unix epoch) makes it
  absolute Unix ns (``Clock.UNIX``); without it (≤1.4) the clock is relative.
* Omitted zero fields (nlohmann writer): no ``tid`` means tid 0 (not the pid), no ``ts`` means 0, an
  ``X`` without ``dur`` lasted 0.
* Process = the profiled pid, named ``MegEngine (pid N)``; host threads and devices are its
  threads (``thread_name`` M events: ``interpreter``, ``worker``, ``cpu0:0``...).
* ``B``/``E`` (scopes, ``OpDispatch``, op execution, tensor commands, ``Kernel`` on device threads)
  → slices, ``E`` args merged in; ``X`` (``TensorGetProp``) → slices; ``i`` (``StopStep``) → instants;
  ``C`` (``args.value``; ``nr_alive_tensor``, ``device_ahead_ms``, ``<device>_alloc_mem``,
  ``gpu_usgae_ratio`` [sic]) → counter tracks.
* Flows ``s``/``t``/``f`` (``OpDispatch``, ``KernelLaunch``, ``TensorLink``...; the extra ``scope``
  field is the pid string and carries nothing more) → flows between the slices they bind to; a
  kernel launch whose device-side end is stamped before its host-side start (device times are
  interpolated) is kept and noted.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from ...errors import TraceconvError, WarningCode
from ...io import Source
from ...model import Clock, Trace
from ..schema import check
from .reader import ChromeReader, Document, Event, looks_like_own_output, us_to_ns

WHAT = "MegEngine chrome timeline"

_MGE_CATS = re.compile(rb'"cat"\s*:\s*"(OpDispatch|KernelLaunch|TensorLink|TensorProp|KernelLink|CUPTILink)"')
_MGE_NAMES = re.compile(rb'"name"\s*:\s*"(gpu_usgae_ratio|train_time_ratio|OpDispatch|TensorWaitProp|'
                        rb'TensorGetProp|StartProfile|StopStep)"')
_MGE_META = re.compile(rb'"name"\s*:\s*"Metadata"[^{}]*"args"\s*:\s*\{\s*"localTime"|"localTime"\s*:\s*"\d+"')


def sniff(head: bytes) -> bool:
    h = head.lstrip()
    if looks_like_own_output(h):
        return False
    if h[:1] not in (b"{", b"["):
        return False
    if h[:1] == b"{" and (b'"graph_exec"' in h or b'"traceEvents"' not in h):
        return False      # the static-graph profile (megengine-static), or not a timeline
    return bool(_MGE_CATS.search(h) or _MGE_NAMES.search(h) or _MGE_META.search(h))


class MegEngineReader(ChromeReader):
    format_name = "megengine"
    what = WHAT
    missing_tid = "zero"
    missing_ts_zero = True
    missing_dur_zero = True

    def on_header(self, header: dict[str, Any], doc: Document) -> None:
        meta = header.get("metadata")
        if meta is not None:
            if not isinstance(meta, dict):
                raise TraceconvError(f"not a valid {self.what}: 'metadata' is not an object")
            from .schema import MegEngineMetadata     # (not for sniffing)

            m = check(MegEngineMetadata, meta, self.what, at="metadata")
            lt = m.local_time_ns()
            if lt is not None:
                self.base_ns = lt
            self.trace.meta.extra["megengine.metadata"] = meta
        elif doc.events and doc.events[0].name == "Metadata":
            # MegEngine 1.5: the first event carries localTime in µs
            try:
                args = orjson.loads(memoryview(doc.events[0].args)) if len(doc.events[0].args) else {}
            except orjson.JSONDecodeError:
                args = {}
            lt = args.get("localTime") if isinstance(args, dict) else None
            if isinstance(lt, (int, float, str)) and not isinstance(lt, bool):
                v = us_to_ns(orjson.dumps(lt) if not isinstance(lt, str) else lt.encode())
                if v is not None:
                    self.base_ns = v
                    self.header_event = 0
                    self.trace.meta.extra["megengine.metadata"] = args
        for k, v in header.items():
            if k != "metadata":
                self.trace.meta.extra[k] = v

    def time_base(self, header: dict[str, Any], events: list[Event]) -> None:
        self.trace.meta.clock = Clock.UNIX if self.base_ns else Clock.RELATIVE

    def finish(self) -> None:
        for p in self.trace.processes:
            if not p.name and isinstance(p.raw_pid, int):
                p.name = f"MegEngine (pid {p.raw_pid})"
                self.trace.process_track(p).name = p.name
        if not self.base_ns:
            self.warn(WarningCode.NOTE, "no localTime in the file (MegEngine ≤1.4): times are relative to "
                      "the profile start")


def read(source: Source) -> Trace:
    return MegEngineReader(source).read()
