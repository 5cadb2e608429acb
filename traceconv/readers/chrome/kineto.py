"""PyTorch profiler / Kineto trace (``*.pt.trace.json[.gz]``) → timeline: a small delta on the
generic Chrome reader (:mod:`traceconv.readers.chrome.reader`).

What it maps where:

* Time: ``baseTimeNanoseconds`` + relative ``ts`` (kineto ≥ 2023, 3 decimals = ns) and the older
  absolute integer µs both become absolute Unix ns (``Clock.UNIX``), exactly.
* Processes: the host pid (``process_labels`` "CPU"); each GPU device (pid = device index, tid =
  stream, thread ``"stream 7 "``) is its own process named ``GPU n`` after its ``process_labels``,
  with the host process name kept as a second label, and sorted after the host processes.  The
  string pids ``"Spans"`` (the profiling window, tid = span name), ``"Traces"`` and ``""``
  (``Iteration Start`` / ``Record Window End``, global instants) are kept as Perfetto shows them;
  the ``"Spans"`` tracks are marked as the profiler's own window (``Track.summary``), which
  ``traceconv summary`` leaves out unless asked.
* Flows: ``ac2g`` (CPU launch → GPU kernel), ``fwdbwd`` (forward op → backward op) and the legacy
  ``async_cpu_to_gpu`` are v1 flows between the slices they bind to; flow ends whose start is not
  in the window (kineto writes many) are counted.
* ``[memory]`` instants stay instants (with their args) and are also rebuilt into counter tracks per
  device: ``<device> memory allocated`` / ``<device> memory reserved`` (bytes, from ``Total
  Allocated`` / ``Total Reserved``), on the host process for CPU memory and on ``GPU n`` for device n;
  events of older PyTorch that carry only ``Bytes`` give ``<device> memory allocated since trace
  start``, their running sum.
* ``distributedInfo`` (rank, world size, backend, process groups), ``deviceProperties`` and the other
  top-level keys (``trace_id``, ``host_name``, ``record_shapes``, ...) go to the trace metadata;
  rank/world size to ``trace.meta.rank``/``world_size``.  The header is checked with
  :class:`traceconv.readers.chrome.schema.KinetoHeader` (``schemaVersion`` is optional: HTA-trimmed files
  lack it) before the events are read; what needs the checked header is applied when the reader
  finishes.
* The old bare-array writer of ``torch.autograd.profiler`` (pids ``"CPU functions"`` /
  ``"CUDA functions"``) reads through the same path.
"""

from __future__ import annotations

import re
from array import array
from typing import Any

import msgspec
from msgspec import UNSET
import numpy as np

from ...errors import WarningCode
from ...io import Source
from ...model import Clock, Trace
from ..schema import check
from .reader import ChromeReader, Document, Event, looks_like_own_output, looks_unix
from .stream import SCAN

WHAT = "PyTorch profiler (Kineto) trace"
_GPU_LABEL = re.compile(r"^GPU (\d+)$")
_DEVICE_TYPES = {0: "CPU", 1: "GPU"}     # c10::DeviceType: CUDA (and ROCm/HIP) is 1

_KINETO_KEYS = re.compile(rb'"(schemaVersion|deviceProperties|distributedInfo|baseTimeNanoseconds)"\s*:')
_KINETO_CATS = re.compile(rb'"cat"\s*:\s*"(cpu_op|cuda_runtime|cuda_driver|kernel|gpu_memcpy|gpu_memset|'
                          rb'python_function|user_annotation|gpu_user_annotation|ac2g|fwdbwd|cpu_instant_event)"')
_OLD_TORCH = re.compile(rb'"pid"\s*:\s*"(CPU|CUDA) functions"')


def sniff(head: bytes) -> bool:
    h = head.lstrip()
    if looks_like_own_output(h):
        return False
    if h[:1] == b"{":
        events_at = h.find(b'"traceEvents"')
        top = h if events_at < 0 else h[:events_at]
        if _KINETO_KEYS.search(top):
            return True
        return events_at >= 0 and _KINETO_CATS.search(h) is not None
    if h[:1] == b"[":
        return _OLD_TORCH.search(h) is not None
    return False


class KinetoReader(ChromeReader):
    format_name = "kineto"
    what = WHAT

    def __init__(self, source: Source | None = None, data: bytes | None = None) -> None:
        super().__init__(source, data)
        # the [memory] events' values, for the memory counters made at the end (decoded as they
        # are read: the scanner's batches leave the converting thread idle part of the time)
        self._mem = _MemoryEvents()
        self._header: Any = None                   # the checked header (on_header)

    def on_header(self, header: dict[str, Any], doc: Document) -> None:
        if doc.is_array:
            return super().on_header(header, doc)
        from .schema import KinetoHeader      # (not for sniffing)

        self._header = check(KinetoHeader, header, self.what)     # (applied by finish())
        for k, v in header.items():
            if k not in ("displayTimeUnit", "baseTimeNanoseconds", "traceName"):
                self.trace.meta.extra[k] = v

    def time_base(self, header: dict[str, Any], events: list[Event]) -> None:
        base = header.get("baseTimeNanoseconds")
        if isinstance(base, int) and base > 0:
            self.base_ns = base
            self.trace.meta.clock = Clock.UNIX
        else:
            # before ~2023: absolute integer µs; the old autograd writer: µs from profiler start
            self.trace.meta.clock = Clock.UNIX if looks_unix(events) else Clock.RELATIVE

    def on_instant(self, ev: Event, ts: int, pid: Any, tid: Any) -> None:
        if ev.name == "[memory]" and len(ev.args):
            self._mem.add([ts], [pid], [bytes(ev.args)])

    def on_instants(self, names: np.ndarray, ts: np.ndarray, pid: np.ndarray, args: Any, lens: np.ndarray) -> None:
        sid = self.trace.strings._ids.get("[memory]")
        if sid is None:
            return
        rows = np.flatnonzero((names == sid) & (lens > 0))
        if not len(rows):
            return
        values = SCAN.memory_values(args, lens, rows, pid)
        if values is not None:          # (PyTorch's shape, read by the compiled scanner's helper)
            self._mem.add_values(ts[rows], *values)
            return
        ends = np.cumsum(lens, dtype=np.int64)
        text = memoryview(args).cast("B")
        self._mem.add(ts[rows].tolist(), pid[rows].tolist(),
                      [bytes(text[e - n:e]) for e, n in zip(ends[rows].tolist(), lens[rows].tolist())])

    def finish(self) -> None:
        if self._header is not None:
            h = self._header
            meta = self.trace.meta
            if h.distributedInfo is not None:
                meta.rank = h.distributedInfo.rank
                meta.world_size = h.distributedInfo.world_size
            if h.traceName is not None:
                meta.extra["traceName"] = h.traceName
        self._devices()
        self._memory_counters()
        mark_profiler_spans(self.trace)

    def _devices(self) -> None:
        """GPU processes: named "GPU n", host name kept as a label, sorted after the host."""
        gpus = []
        host_max = None
        for p in self.trace.processes:
            m = next((m for m in map(_GPU_LABEL.match, p.labels) if m), None)
            if m is not None:
                gpus.append((int(m.group(1)), p))
            elif p.sort_index is not None and isinstance(p.raw_pid, int):
                host_max = p.sort_index if host_max is None else max(host_max, p.sort_index)
        for n, p in gpus:
            label = f"GPU {n}"
            if p.name and p.name != label:
                p.args["host_process"] = p.name
                if p.name not in p.labels:
                    p.labels.append(p.name)
            p.name = label
            self.trace.process_track(p).name = label
            if host_max is not None and (p.sort_index is None or p.sort_index <= host_max):
                p.sort_index = host_max + 1 + n

    def _memory_counters(self) -> None:
        """The memory counters of the [memory] events, in time order (the file's order at one time):
        per device, "allocated" and "reserved" from each event's totals, or for older PyTorch, whose
        events carry only the change ("Bytes"), "allocated since trace start", their running sum.
        Places and tracks are made in the order a walk over the events in time order meets them;
        that walk visits only the events where something is first, the rows are built with numpy."""
        m = self._mem
        self._mem = _MemoryEvents()
        n = len(m)
        if m.too_big:
            self.warn(WarningCode.NOTE, "[memory] values beyond the range of a double (kept in the events' "
                      "args) were left out of the memory counters", m.too_big)
        if not n:
            return
        trace = self.trace
        ts = np.frombuffer(m.ts, np.int64)
        order = np.argsort(ts, kind="stable")
        place = np.frombuffer(m.place, np.int32)[order]
        vals = np.stack([np.frombuffer(m.values[j], np.float64) for j in range(3)], axis=1)[order]
        ok = ~np.isnan(vals)                   # (allocated, reserved, since trace start) per event
        ok[:, 2] &= np.frombuffer(m.no_total, np.bool_)[order]
        firsts: set[int] = set()
        for j in (None, 0, 1, 2):
            sel = place if j is None else np.where(ok[:, j], place, -1)
            _, first = np.unique(sel, return_index=True)
            firsts.update(first[sel[first] >= 0].tolist())
        tracks: dict[tuple[Any, str, str], int] = {}

        def track(owner: Any, dev: str, what: str) -> int:
            t = tracks.get((owner, dev, what))
            if t is None:
                t = tracks[(owner, dev, what)] = self.counter_track(owner, f"{dev} memory {what}", unit="bytes")
            return t

        # per place: [owner, device, its allocated, reserved and since-start tracks] (-1: none)
        made: list[list[Any] | None] = [None] * len(m.places)
        for e in sorted(firsts):
            p = int(place[e])
            r = made[p]
            if r is None:
                r = made[p] = [*self._place(*m.places[p]), -1, -1, -1]
            for j, what in enumerate(("allocated", "reserved", "allocated since trace start")):
                if ok[e, j] and r[2 + j] < 0:
                    r[2 + j] = track(r[0], r[1], what)
        per_place = np.array([r[2:] if r is not None else [-1, -1, -1] for r in made], np.int32).reshape(-1, 3)
        rows = per_place[place]
        since = ok[:, 2]
        if since.any():
            # the running sum of each since-start track's "Bytes", in time order (+ 0.0: from 0.0,
            # as a sum started at 0.0 is never -0.0)
            t_s, v = rows[since, 2], vals[since, 2]
            for t in np.unique(t_s).tolist():
                sel = t_s == t
                v[sel] = np.cumsum(v[sel]) + 0.0
            vals[since, 2] = v
            self.warn(WarningCode.NOTE, "[memory] events without 'Total Allocated' (older PyTorch): the "
                      "memory counter is the running sum of their 'Bytes' since the trace started")
        keep = ok.ravel()
        c = trace.counters
        c.track.frombytes(rows.ravel()[keep].astype(np.int32).tobytes())
        c.ts.frombytes(np.repeat(ts[order], 3)[keep].tobytes())
        c.value.frombytes(vals.ravel()[keep].tobytes())

    def _place(self, dtype: Any, did: Any, pid: Any, hashable: bool) -> tuple[Any, str]:
        """The (owner, device name) of a [memory] event's place: a GPU's memory on that GPU's
        process (made if the trace has none), the rest on the event's process."""
        dtype = None if dtype is UNSET else dtype
        did = None if did is UNSET else did
        if dtype == 0 or did == -1 or did is None:
            return pid, "CPU"
        kind = _DEVICE_TYPES.get(dtype, f"device type {dtype}") if hashable else f"device type {dtype}"
        dev = f"{kind} {did}"
        owner = did if kind == "GPU" and isinstance(did, int) else pid
        if owner == did and not any(p.raw_pid == did for p in self.trace.processes):
            self.trace.process(did, dev)
        return owner, dev


_NAN = float("nan")


class _MemoryArgs(msgspec.Struct):
    """The args of a ``[memory]`` event the counters use (UNSET: the key is not there)."""
    dtype: Any = msgspec.field(default=UNSET, name="Device Type")
    did: Any = msgspec.field(default=UNSET, name="Device Id")
    total: Any = msgspec.field(default=UNSET, name="Total Allocated")
    reserved: Any = msgspec.field(default=UNSET, name="Total Reserved")
    nbytes: Any = msgspec.field(default=UNSET, name="Bytes")


_MEMORY_ARGS = msgspec.json.Decoder(list[_MemoryArgs])
_MEMORY_ONE = msgspec.json.Decoder(_MemoryArgs)


class _TypedMemoryArgs(msgspec.Struct):
    """The same fields as PyTorch writes them: integer places, numbers (NaN: absent; msgspec reads
    an integer as the double Python's ``float`` makes of it).  A batch with anything else -- a
    bool, a string, a number beyond a double, a non-integer place -- fails to decode as these and
    takes :class:`_MemoryArgs`'s way."""
    dtype: int | msgspec.UnsetType = msgspec.field(default=UNSET, name="Device Type")
    did: int | msgspec.UnsetType = msgspec.field(default=UNSET, name="Device Id")
    total: float = msgspec.field(default=float("nan"), name="Total Allocated")
    reserved: float = msgspec.field(default=float("nan"), name="Total Reserved")
    nbytes: float = msgspec.field(default=float("nan"), name="Bytes")


_MEMORY_TYPED = msgspec.json.Decoder(list[_TypedMemoryArgs])


class _MemoryEvents:
    """The [memory] events whose args are an object, as read: time, place (an index into
    ``places``: (Device Type, Device Id, pid, hashable), one per distinct hashable triple, one per
    event otherwise), and the three values the counters use as doubles (NaN: absent or not a
    number), with whether 'Total Allocated' was absent."""

    def __init__(self) -> None:
        self.ts = array("q")
        self.place = array("i")
        self.values = (array("d"), array("d"), array("d"))      # Total Allocated, Total Reserved, Bytes
        self.no_total = array("b")
        self.places: list[tuple[Any, Any, Any, bool]] = []
        self._ids: dict[tuple[Any, Any, Any], int] = {}
        self.too_big = 0            # values that are numbers beyond a double's range

    def __len__(self) -> int:
        return len(self.ts)

    def add(self, ts: list[int], pid: list[Any], raw: list[bytes]) -> None:
        text = b"[" + b",".join(raw) + b"]"
        try:
            typed = _MEMORY_TYPED.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.add_any(ts, pid, raw, text)
            return
        # the common case, without a Python call per value (the bench's 55k [memory] events,
        # 200 a batch: 40 -> 20-25 ms, half of it msgspec's decoding)
        ids, places = self._ids, self.places
        keys = [(a.dtype, a.did, p) for a, p in zip(typed, pid)]
        try:
            at = [ids.get(k) for k in keys]
        except TypeError:                     # a pid that is a list or an object
            self.add_any(ts, pid, raw, text)
            return
        for j, k in enumerate(at):
            if k is None:                     # a place seen first (in event order, as add_any)
                k = ids.get(keys[j])
                if k is None:
                    k = ids[keys[j]] = len(places)
                    places.append((*keys[j], True))
                at[j] = k
        self.ts.extend(ts)
        self.place.extend(at)
        total, reserved, nbytes = self.values
        total.extend([a.total for a in typed])
        reserved.extend([a.reserved for a in typed])
        nbytes.extend([a.nbytes for a in typed])
        self.no_total.extend([a.total != a.total for a in typed])

    def add_values(self, ts: np.ndarray, places: list[tuple[Any, Any, int]], place: np.ndarray,
                   total: np.ndarray, reserved: np.ndarray, nbytes: np.ndarray) -> None:
        """:meth:`add` of a batch read by ``SCAN.memory_values`` (rust/src/scan/memory.rs): the
        batch's distinct places in the order first seen (None: the key is absent), each row's
        index in them, and the three values (NaN: absent)."""
        ids, known = self._ids, self.places
        at = []
        for dtype, did, pid in places:
            key = (UNSET if dtype is None else dtype, UNSET if did is None else did, pid)
            k = ids.get(key)
            if k is None:
                k = ids[key] = len(known)
                known.append((*key, True))
            at.append(k)
        self.ts.frombytes(ts.astype(np.int64, copy=False).tobytes())
        self.place.frombytes(np.asarray(at, np.int32)[place].tobytes())
        for col, v in zip(self.values, (total, reserved, nbytes)):
            col.frombytes(v.tobytes())
        self.no_total.frombytes(np.isnan(total).view(np.int8).tobytes())

    def add_any(self, ts: list[int], pid: list[Any], raw: list[bytes], text: bytes | None = None) -> None:
        """:meth:`add` of args of any shape (the reference the typed way is tested against)."""
        try:
            decoded: list[_MemoryArgs | None] = list(_MEMORY_ARGS.decode(text if text is not None else
                                                                         b"[" + b",".join(raw) + b"]"))
        except (msgspec.DecodeError, msgspec.ValidationError):
            decoded = []
            for r in raw:
                try:
                    decoded.append(_MEMORY_ONE.decode(r))
                except (msgspec.DecodeError, msgspec.ValidationError):
                    decoded.append(None)         # not an object: no counter
        rows = [(t, p, a) for t, p, a in zip(ts, pid, decoded) if a is not None]
        ids, places = self._ids, self.places
        at = []
        for _, p, a in rows:
            key = (a.dtype, a.did, p)
            try:
                k = ids.get(key)
                if k is None:
                    k = ids[key] = len(places)
                    places.append((*key, True))
            except TypeError:                 # a list or an object where a number belongs
                k = len(places)
                places.append((*key, False))
            at.append(k)
        self.ts.extend([t for t, _, _ in rows])
        self.place.extend(at)
        total, reserved, nbytes = self.values
        double = self._double
        total.extend([double(a.total) for _, _, a in rows])
        reserved.extend([double(a.reserved) for _, _, a in rows])
        nbytes.extend([double(a.nbytes) for _, _, a in rows])
        self.no_total.extend([a.total is UNSET for _, _, a in rows])

    def _double(self, v: Any) -> float:
        if type(v) is float:
            return v
        if type(v) is not int:
            return _NAN
        try:
            return float(v)
        except OverflowError:
            self.too_big += 1
            return _NAN


def mark_profiler_spans(trace: Trace) -> int:
    """The profiler's own window (``PyTorch Profiler (0)``, ``__cupti_profiler__ (-1)``: kineto
    writes them at pid ``"Spans"``, one tid per span) spans everything it recorded: its tracks are
    marked ``summary = "profiler"``, so ``traceconv summary`` leaves them out unless asked.
    Returns the number of tracks marked."""
    spans = {p.id for p in trace.processes if p.raw_pid == "Spans"}
    return trace.mark_summary(spans, "profiler")


def read(source: Source) -> Trace:
    return KinetoReader(source).read()


def read_header(path_head: bytes) -> int | None:
    """``baseTimeNanoseconds`` from the start of a Kineto file, if it is there."""
    m = re.search(rb'"baseTimeNanoseconds"\s*:\s*(\d+)', path_head)
    return int(m.group(1)) if m else None

