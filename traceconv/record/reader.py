"""Read a ``.pftrace`` that traceconv wrote (a recording, its shards, any conversion) back into the
model, so the shards of a run can be merged.

It reads what :mod:`traceconv.writers.perfetto` writes, chunk after chunk: a packet that clears
the sequence's incremental state starts over the interned names and the sequence's clock (whose
``ClockSnapshot`` gives its value; event timestamps are deltas on it when the sequence's
``TracePacketDefaults`` say so, and an event with no ``track_uuid`` is on their
``TrackEventDefaults`` track), track descriptors name processes, threads and counter tracks,
``SLICE_BEGIN``/``SLICE_END`` pairs become slices (args from the debug annotations), instants
and counter values their own rows, the ``chrome_events`` metadata the trace's metadata.
Extra "overlap" tracks are read as their thread's (the model lays them out again when written);
flow arrows are not read back: the recorder keeps each flow's id in its spans' args
(``flow_out`` / ``flow_in``), and :func:`traceconv.record.merge.link_flows` links them again
across every shard.  A file cut inside a packet (a killed process) is read up to that packet.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ..errors import TraceconvError, WarningCode
from ..model import Clock, Trace, TrackKind

_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_TE = pb.TrackEvent
_BOOT = pb.BuiltinClock.BUILTIN_CLOCK_BOOTTIME


def read_any(path: str | os.PathLike[str]) -> Trace:
    """A traceconv .pftrace with :func:`read_pftrace`; any other format with ``traceconv.load``."""
    p = Path(path)
    if p.name.endswith((".pftrace", ".pftrace.gz", ".perfetto-trace", ".pb")):
        return read_pftrace(p)
    from ..api import load
    return load(p)


def _packets(data: bytes):
    pos, n = 0, len(data)
    while pos < n:
        if data[pos] != 0x0A:
            return
        pos += 1
        size, shift = 0, 0
        while pos < n:
            b = data[pos]
            pos += 1
            size |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if pos + size > n:
            return                       # cut in the middle: what came before is kept
        yield data[pos:pos + size]
        pos += size


class _Seq:
    __slots__ = ("names", "cats", "ann", "strs", "clock", "clock_id", "offset", "track")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.names: dict[int, str] = {}
        self.cats: dict[int, str] = {}
        self.ann: dict[int, str] = {}
        self.strs: dict[int, str] = {}
        self.clock = 0
        self.offset = 0
        self.clock_id = 0                # TracePacketDefaults: incremental state too
        self.track = 0                   # TrackEventDefaults.track_uuid (0: none)


def _value(a: Any, seq: _Seq) -> Any:
    which = a.WhichOneof("value")
    if which is None:
        if len(a.dict_entries) == 1 and _nothing(a.dict_entries[0]):
            return []                   # the writer's empty list (or object) in a list
        if len(a.dict_entries):
            return {(e.name or seq.ann.get(e.name_iid, "")): _value(e, seq) for e in a.dict_entries}
        if len(a.array_values):
            return [_value(e, seq) for e in a.array_values]
        return None
    if which == "string_value_iid":
        return seq.strs.get(a.string_value_iid, "")
    if which == "legacy_json_value":
        return orjson.loads(a.legacy_json_value)
    if which == "pointer_value":
        return hex(a.pointer_value)
    return getattr(a, which)


def _nothing(a: Any) -> bool:
    """An annotation with no name, no value and no entries (what the writer writes for ``[]`` or
    ``{}`` as an element of a list, which must take a place in it)."""
    return not a.name and not a.name_iid and a.WhichOneof("value") is None and not len(a.dict_entries) \
        and not len(a.array_values)


def read_pftrace(path: str | os.PathLike[str]) -> Trace:
    from ..io import open_source
    src = open_source(path)
    data = src.read_bytes()
    trace = Trace("perfetto")
    trace.meta.clock = Clock.UNIX
    seqs: dict[int, _Seq] = {}
    descs: dict[int, Any] = {}
    tracks: dict[int, int] = {}                  # uuid -> model track id
    # begins wait for their end on the track they were written on (an overlap lane is a stack of
    # its own, though its slices are read as its thread's)
    stacks: dict[int, list] = {}
    procs: dict[int, Any] = {}
    parsed = 0
    for raw in _packets(data):
        try:
            p = pb.TracePacket.FromString(raw)
        except Exception:  # noqa: BLE001 - a damaged packet ends the readable part
            break
        parsed += 1
        sid = p.trusted_packet_sequence_id
        seq = seqs.get(sid)
        if seq is None:
            seq = seqs[sid] = _Seq()
        if p.sequence_flags & _CLEARED or p.incremental_state_cleared:
            seq.clear()
        if p.HasField("trace_packet_defaults"):
            seq.clock_id = p.trace_packet_defaults.timestamp_clock_id
            seq.track = p.trace_packet_defaults.track_event_defaults.track_uuid
        if p.HasField("clock_snapshot"):
            boot = None
            for c in p.clock_snapshot.clocks:
                if c.clock_id == _BOOT:
                    boot = c.timestamp
            for c in p.clock_snapshot.clocks:
                if c.clock_id >= 64:
                    seq.clock = c.timestamp
                    seq.offset = (boot - c.timestamp) if boot is not None else 0
        if p.HasField("interned_data"):
            d = p.interned_data
            for e in d.event_names:
                seq.names[e.iid] = e.name
            for e in d.event_categories:
                seq.cats[e.iid] = e.name
            for e in d.debug_annotation_names:
                seq.ann[e.iid] = e.name
            for e in d.debug_annotation_string_values:
                seq.strs[e.iid] = e.str.decode("utf-8", "surrogateescape")
        which = p.WhichOneof("data")
        if which == "track_descriptor":
            d = p.track_descriptor
            descs[d.uuid] = d
            tracks.pop(d.uuid, None)                 # a later descriptor may rename it
            if d.HasField("process"):
                procs[d.process.pid] = d
                proc = trace.process(d.process.pid, d.process.process_name or None, pid=d.process.pid)
                if d.process.process_labels:
                    proc.labels = list(d.process.process_labels)
            elif d.HasField("thread"):
                proc = trace.process(d.thread.pid, None, pid=d.thread.pid)
                th = trace.thread(proc, d.thread.tid, d.thread.thread_name or None)
                if d.thread.thread_name:
                    trace.set_thread_name(th, d.thread.thread_name)
            continue
        if which == "chrome_events":
            for m in p.chrome_events.metadata:
                v: Any = m.string_value if m.HasField("string_value") else \
                    orjson.loads(m.json_value) if m.HasField("json_value") else \
                    m.int_value if m.HasField("int_value") else m.bool_value
                if m.name == "traceconv" and isinstance(v, dict):
                    if v.get("rank") is not None:
                        trace.meta.rank = v["rank"]
                    if v.get("source_format"):
                        trace.meta.extra.setdefault("recorded_as", v["source_format"])
                    if v.get("clock") and v["clock"] != "unix":
                        trace.meta.clock = Clock(v["clock"])
                else:
                    trace.meta.extra[m.name] = v
            continue
        if which != "track_event":
            continue
        te = p.track_event
        cid = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else seq.clock_id
        if cid >= 64:
            seq.clock += p.timestamp
            ts = seq.clock + seq.offset
        else:
            ts = p.timestamp
        uuid = te.track_uuid if te.HasField("track_uuid") else seq.track
        tid = tracks.get(uuid)
        if tid is None:
            tid = tracks[uuid] = _track(trace, descs, uuid)
        kind = te.type
        if kind == _TE.TYPE_SLICE_END:
            st = stacks.get(uuid)
            if st:
                t0, name, cat, args = st.pop()
                trace.add_slice(tid, t0, ts - t0, name, cat, args or None)
            else:
                trace.diagnostics.warn(WarningCode.UNMATCHED_END, "slice ends without a begin", 1)
            continue
        if kind == _TE.TYPE_COUNTER:
            v = te.double_counter_value if te.HasField("double_counter_value") else te.counter_value
            trace.add_counter(tid, ts, float(v))
            continue
        name = te.name if te.HasField("name") else seq.names.get(te.name_iid, "")
        cat = te.categories[0] if len(te.categories) else \
            (seq.cats.get(te.category_iids[0]) if len(te.category_iids) else None)
        args = {(a.name or seq.ann.get(a.name_iid, "")): _value(a, seq) for a in te.debug_annotations}
        if kind == _TE.TYPE_SLICE_BEGIN:
            stacks.setdefault(uuid, []).append((ts, name, cat, args))
        elif kind == _TE.TYPE_INSTANT:
            trace.add_instant(tid, ts, name, cat, args or None)
    open_slices = sum(len(s) for s in stacks.values())
    if open_slices:
        trace.diagnostics.warn(WarningCode.UNMATCHED_BEGIN, "slices still open where the file ends were left out",
                               open_slices)
    if parsed == 0:
        raise TraceconvError("not a Perfetto trace (no packet could be read)", path=path)
    rec = trace.meta.extra.get("record")
    if isinstance(rec, dict) and trace.meta.rank is None and rec.get("shard") is not None:
        trace.meta.rank = rec["shard"]
    return trace


def _track(trace: Trace, descs: dict[int, Any], uuid: int) -> int:
    d = descs.get(uuid)
    if d is None:
        p = trace.process(("uuid", uuid), f"track {uuid}", synthetic=True)
        return trace.process_track(p).id
    if d.HasField("thread"):
        proc = trace.process(d.thread.pid, None, pid=d.thread.pid)
        return trace.thread(proc, d.thread.tid).track
    if d.HasField("process"):
        proc = trace.process(d.process.pid, None, pid=d.process.pid)
        return trace.process_track(proc).id
    parent = descs.get(d.parent_uuid) if d.parent_uuid else None
    if parent is not None and parent.HasField("thread") and not d.HasField("counter"):
        return _track(trace, descs, d.parent_uuid)          # an overlap lane: its thread's track
    proc = None
    if parent is not None and parent.HasField("process"):
        proc = trace.process(parent.process.pid, None, pid=parent.process.pid)
    if d.HasField("counter"):
        unit = {pb.CounterDescriptor.UNIT_SIZE_BYTES: "bytes", pb.CounterDescriptor.UNIT_TIME_NS: "ns",
                pb.CounterDescriptor.UNIT_COUNT: "count"}.get(d.counter.unit) or d.counter.unit_name or None
        return trace.track(TrackKind.COUNTER, d.name, proc, unit=unit).id
    return trace.track(TrackKind.ASYNC, d.name, proc).id
