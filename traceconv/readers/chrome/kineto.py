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
  rank/world size to ``trace.meta.rank``/``world_size``.  The header is validated with
  :class:`traceconv.readers.chrome.schema.KinetoHeader` (``schemaVersion`` is optional: HTA-trimmed files
  lack it).
* The old bare-array writer of ``torch.autograd.profiler`` (pids ``"CPU functions"`` /
  ``"CUDA functions"``) reads through the same path.
"""

from __future__ import annotations

import re
from array import array
from typing import Any, Iterator

import msgspec
from msgspec import UNSET
import numpy as np

from ...errors import WarningCode
from ...io import Source
from ...model import ArgsColumn, Clock, Trace
from ..schema import validate
from .schema import KinetoHeader
from .reader import ChromeReader, Document, Event, looks_like_own_output, looks_unix

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
        # the [memory] events, for the memory counters made at the end: time, raw pid, and where
        # the args are: r >= 0 is the instant r of the model, whose args are the event's (the
        # scanner's rows: no copy is kept); r < 0 is row -r - 1 of _mem_args, the event's own args
        # text (the general decoder's events: the model may hold them changed, see compact_args)
        self._mem_ts = array("q")
        self._mem_pid: list[Any] = []
        self._mem_row = array("q")
        self._mem_args = ArgsColumn()

    def on_header(self, header: dict[str, Any], doc: Document) -> None:
        if doc.is_array:
            return super().on_header(header, doc)
        h = validate(KinetoHeader, header, self.what)
        meta = self.trace.meta
        if h.distributedInfo is not None:
            meta.rank = h.distributedInfo.rank
            meta.world_size = h.distributedInfo.world_size
        for k, v in header.items():
            if k not in ("displayTimeUnit", "baseTimeNanoseconds", "traceName"):
                meta.extra[k] = v
        if h.traceName is not None:
            meta.extra["traceName"] = h.traceName

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
            self._mem_ts.append(ts)
            self._mem_pid.append(pid)
            self._mem_row.append(-len(self._mem_args) - 1)
            self._mem_args.append(bytes(ev.args))

    def on_instants(self, names: np.ndarray, ts: np.ndarray, pid: np.ndarray, lens: np.ndarray) -> None:
        sid = self.trace.strings._ids.get("[memory]")
        if sid is None:
            return
        rows = np.flatnonzero((names == sid) & (lens > 0))
        if not len(rows):
            return
        self._mem_ts.frombytes(ts[rows].astype(np.int64).tobytes())
        self._mem_pid.extend(pid[rows].tolist())
        # the batch's instants are the last len(names) of the model's
        first = len(self.trace.instants) - len(names)
        self._mem_row.frombytes((rows + first).astype(np.int64).tobytes())

    def finish(self) -> None:
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
        if not self._mem_pid:
            return
        trace = self.trace
        running: dict[tuple[Any, str], float] = {}     # devices whose events carry only "Bytes"
        order = np.argsort(np.frombuffer(self._mem_ts, np.int64), kind="stable")  # file order at one time
        c_track: list[int] = []
        c_ts: list[int] = []
        c_val: list[float] = []
        # (type, id, pid) -> [owner, device, its allocated track, its reserved track] (-1: not made yet)
        places: dict[tuple[Any, Any, Any], list[Any]] = {}
        tracks: dict[tuple[Any, str, str], int] = {}
        numbers = _NUMBERS

        def track(owner: Any, dev: str, what: str) -> int:
            t = tracks.get((owner, dev, what))
            if t is None:
                t = tracks[(owner, dev, what)] = self.counter_track(owner, f"{dev} memory {what}", unit="bytes")
            return t

        def place_of(dtype: Any, did: Any, pid: Any) -> list[Any]:
            key: tuple[Any, Any, Any] | None = (dtype, did, pid)
            try:
                place = places.get(key)         # type: ignore[arg-type]
            except TypeError:                   # a list or an object where a number belongs
                key, place = None, None
            if place is not None:
                return place
            dtype = None if dtype is UNSET else dtype
            did = None if did is UNSET else did
            if dtype == 0 or did == -1 or did is None:
                owner, dev = pid, "CPU"
            else:
                kind = _DEVICE_TYPES.get(dtype, f"device type {dtype}") if key else f"device type {dtype}"
                dev = f"{kind} {did}"
                owner = did if kind == "GPU" and isinstance(did, int) else pid
                if owner == did and not any(p.raw_pid == did for p in trace.processes):
                    trace.process(did, dev)
            place = [owner, dev, -1, -1]
            if key is not None:
                places[key] = place
            return place

        c = trace.counters
        for ts, pid, m in _decoded(order, self._mem_ts, self._mem_pid, self._mem_row, self._mem_args,
                                   trace.instants.args):
            if len(c_ts) >= _MEMORY_BATCH:              # into the model a batch at a time
                c.track.extend(c_track)
                c.ts.extend(c_ts)
                c.value.extend(c_val)
                c_track, c_ts, c_val = [], [], []
            if m is None:
                continue
            place = place_of(m.dtype, m.did, pid)
            v = m.total
            if type(v) in numbers:
                if place[2] < 0:
                    place[2] = track(place[0], place[1], "allocated")
                c_track.append(place[2])
                c_ts.append(ts)
                c_val.append(float(v))
            v = m.reserved
            if type(v) in numbers:
                if place[3] < 0:
                    place[3] = track(place[0], place[1], "reserved")
                c_track.append(place[3])
                c_ts.append(ts)
                c_val.append(float(v))
            b = m.nbytes
            if m.total is UNSET and type(b) in numbers:
                # older PyTorch: only the change; the running sum counts from the trace's start
                key2 = (place[0], place[1])
                running[key2] = running.get(key2, 0.0) + b
                c_track.append(track(place[0], place[1], "allocated since trace start"))
                c_ts.append(ts)
                c_val.append(running[key2])
        c.track.extend(c_track)
        c.ts.extend(c_ts)
        c.value.extend(c_val)
        if running:
            self.warn(WarningCode.NOTE, "[memory] events without 'Total Allocated' (older PyTorch): the "
                      "memory counter is the running sum of their 'Bytes' since the trace started")
        self._mem_ts, self._mem_pid, self._mem_row, self._mem_args = array("q"), [], array("q"), ArgsColumn()


_NUMBERS = (int, float)     # a JSON number's types (exactly: bool is not one)


class _MemoryArgs(msgspec.Struct):
    """The args of a ``[memory]`` event the counters use (UNSET: the key is not there)."""
    dtype: Any = msgspec.field(default=UNSET, name="Device Type")
    did: Any = msgspec.field(default=UNSET, name="Device Id")
    total: Any = msgspec.field(default=UNSET, name="Total Allocated")
    reserved: Any = msgspec.field(default=UNSET, name="Total Reserved")
    nbytes: Any = msgspec.field(default=UNSET, name="Bytes")


def mark_profiler_spans(trace: Trace) -> int:
    """The profiler's own window (``PyTorch Profiler (0)``, ``__cupti_profiler__ (-1)``: kineto
    writes them at pid ``"Spans"``, one tid per span) spans everything it recorded: its tracks are
    marked ``summary = "profiler"``, so ``traceconv summary`` leaves them out unless asked.
    Returns the number of tracks marked."""
    spans = {p.id for p in trace.processes if p.raw_pid == "Spans"}
    return trace.mark_summary(spans, "profiler")


_MEMORY_ARGS = msgspec.json.Decoder(list[_MemoryArgs])
_MEMORY_ONE = msgspec.json.Decoder(_MemoryArgs)
_MEMORY_BATCH = 1 << 13


def _decoded(order: np.ndarray, ts: array, pid: list[Any], where: array, own: ArgsColumn,
             model: ArgsColumn) -> Iterator[tuple[int, Any, Any]]:
    """(ts, pid, the args the counters use, or None if they are not a JSON object) of each [memory] event, in ``order``: one
    decode call per batch of events, not one per event, and only a batch's dicts alive at a time.
    ``where[r]`` says where event r's args are (see ``KinetoReader.__init__``)."""
    for lo in range(0, len(order), _MEMORY_BATCH):
        rows = order[lo:lo + _MEMORY_BATCH].tolist()
        raw = [(model[w] if w >= 0 else own[-w - 1]) or b"{}" for w in (where[r] for r in rows)]
        own.forget()
        model.forget()
        try:
            decoded = _MEMORY_ARGS.decode(b"[" + b",".join(raw) + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError):
            decoded = []
            for r in raw:
                try:
                    decoded.append(_MEMORY_ONE.decode(r))
                except (msgspec.DecodeError, msgspec.ValidationError):
                    decoded.append(None)
        for r, a in zip(rows, decoded):
            yield ts[r], pid[r], a


def read(source: Source) -> Trace:
    return KinetoReader(source).read()


def read_header(path_head: bytes) -> int | None:
    """``baseTimeNanoseconds`` from the start of a Kineto file, if it is there."""
    m = re.search(rb'"baseTimeNanoseconds"\s*:\s*(\d+)', path_head)
    return int(m.group(1)) if m else None

