"""Read a ``.pftrace`` that traceconv wrote (a recording, its shards, any conversion) back into the
model: the registry's reader of the ``perfetto`` format (``traceconv summary run.pftrace`` of a
recording, ``traceconv merge`` of its shards, ``traceconv convert run.pftrace -o run.json``), and
what a recording's stop merges its shards and links its flows with.  Only traceconv's own files:
traceconv converts into Perfetto's format, not out of it (that is Perfetto's own traceconv), so
a Perfetto trace without traceconv's metadata is refused with one line.

It reads what :mod:`traceconv.writers.perfetto` writes, chunk after chunk: a packet that clears
the sequence's incremental state starts over the interned names and the sequence's clock (whose
``ClockSnapshot`` gives its value; event timestamps are deltas on it when the sequence's
``TracePacketDefaults`` say so, and an event with no ``track_uuid`` is on their
``TrackEventDefaults`` track), track descriptors name processes, threads and counter tracks,
``SLICE_BEGIN``/``SLICE_END`` pairs become slices (args from the debug annotations), instants
and counter values their own rows, the ``chrome_events`` metadata the trace's metadata.
Extra "overlap" tracks are read as their thread's (the model lays them out again when written);
flows are read from the ids the writer gives them (a slice's ``flow_ids`` and the other end's
``terminating_flow_ids``).  A recording keeps each flow's id in its spans' args too (``flow_out`` /
``flow_in``), and :func:`traceconv.record.merge.link_flows` links those across chunks and shards.
A file cut inside a packet (a killed process) is read up to that packet.

Two readers, one result: the compiled one (``_core.readback``, ``rust/src/readback.rs``) walks the
packets and hands back the events as columns, the descriptor and metadata packets for the code
here, and the order in which the reference makes tracks and interns names; the reference
(``read_pftrace(path, compiled=False)``, this module's loop over ``perfetto_trace_pb2``) reads
every file the compiled one declines (a field traceconv does not write, text that is not UTF-8,
a key twice in one object, a track described again differently after its first use, ...).
``tests/test_pftrace_reader.py`` checks that both give the same trace.

A cut or damaged packet ends what is read (a ``truncated-input`` warning).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .._native import _core
from ..errors import TraceconvError, WarningCode
from ..model import Clock, Trace, TrackKind
from .chrome.stream import BAD_UTF8, repair_utf8
from .pftrace_head import packets

_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_TE = pb.TrackEvent
_BOOT = pb.BuiltinClock.BUILTIN_CLOCK_BOOTTIME


def read(source: Any) -> Trace:
    """The registry's reader: a :class:`traceconv.io.Source` holding a .pftrace traceconv wrote."""
    from ..formats import FOREIGN_PERFETTO
    trace, own = _read(source.read_bytes(), source.path, compiled=True)
    if not own:
        raise TraceconvError(FOREIGN_PERFETTO, path=source.path)
    return trace


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


def _text(trace: Trace, v: str | bytes) -> str:
    """A string field as text: upb gives a proto2 string that is not UTF-8 as bytes; those bytes
    are read as '?', counted as the JSON readers count theirs."""
    if isinstance(v, str):
        return v
    fixed, bad = repair_utf8(v)
    trace.diagnostics.warn(WarningCode.CLAMPED_VALUE, BAD_UTF8, bad)
    return fixed.decode("utf-8")


def _key(a: Any, seq: _Seq, trace: Trace) -> str:
    """An annotation's name: its own, or its interned one."""
    return _text(trace, a.name) or seq.ann.get(a.name_iid, "")


def _value(a: Any, seq: _Seq, trace: Trace) -> Any:
    which = a.WhichOneof("value")
    if which is None:
        if len(a.dict_entries) == 1 and _nothing(a.dict_entries[0]):
            return []                   # the writer's empty list (or object) in a list
        if len(a.dict_entries):
            return {_key(e, seq, trace): _value(e, seq, trace) for e in a.dict_entries}
        if len(a.array_values):
            return [_value(e, seq, trace) for e in a.array_values]
        return None
    if which == "string_value_iid":
        return seq.strs.get(a.string_value_iid, "")
    if which == "legacy_json_value":
        try:
            return orjson.loads(a.legacy_json_value)
        except orjson.JSONDecodeError:
            trace.diagnostics.warn(WarningCode.NOTE, "args given as JSON that is not JSON kept as their text", 1)
            return _text(trace, a.legacy_json_value)
    if which == "pointer_value":
        return hex(a.pointer_value)
    if which == "string_value":
        return _text(trace, a.string_value)
    return getattr(a, which)


def _nothing(a: Any) -> bool:
    """An annotation with no name, no value and no entries (what the writer writes for ``[]`` or
    ``{}`` as an element of a list, which must take a place in it)."""
    return not a.name and not a.name_iid and a.WhichOneof("value") is None and not len(a.dict_entries) \
        and not len(a.array_values)


def read_pftrace(path: str | os.PathLike[str], *, compiled: bool = True) -> Trace:
    """The trace in a .pftrace, traceconv's metadata in it or not (``compiled=False``: read by the
    reference alone; the tests hold the two readers to each other with it)."""
    from ..io import open_source
    return _read(open_source(path).read_bytes(), path, compiled)[0]


def _read(data: bytes, path: Any, compiled: bool) -> tuple[Trace, bool]:
    """The trace in ``data``, and whether traceconv's metadata was in it."""
    got = _read_compiled(data) if compiled else None
    trace, packets, own = got if got is not None else _read_reference(data)
    if own is not None:
        trace.restore_marks(own)
    if packets == 0:
        raise TraceconvError("not a Perfetto trace (no packet could be read)", path=path)
    rec = trace.meta.extra.get("record")
    if isinstance(rec, dict) and trace.meta.rank is None and rec.get("shard") is not None:
        trace.meta.rank = rec["shard"]
    return trace, own is not None


def _new_trace() -> Trace:
    trace = Trace("perfetto")
    trace.meta.clock = Clock.UNIX
    return trace


def _describe(trace: Trace, descs: dict[int, Any], d: Any) -> None:
    """A track descriptor: its process or thread made (and named), the descriptor kept."""
    descs[d.uuid] = d
    if d.HasField("process"):
        proc = trace.process(d.process.pid, _text(trace, d.process.process_name) or None, pid=d.process.pid)
        if d.process.process_labels:
            proc.labels = [_text(trace, x) for x in d.process.process_labels]
    elif d.HasField("thread"):
        proc = trace.process(d.thread.pid, None, pid=d.thread.pid)
        name = _text(trace, d.thread.thread_name)
        th = trace.thread(proc, d.thread.tid, name or None)
        if name:
            trace.set_thread_name(th, name)


def _metadata(trace: Trace, bundle: Any) -> "dict[str, Any] | None":
    """The ``chrome_events`` metadata read into the trace: traceconv's own (rank, world size,
    synthesized, source format, clock) and the rest.  Returns traceconv's own, if it was there (its
    marks are applied once the whole file is read)."""
    own = None
    for m in bundle.metadata:
        if m.HasField("json_value"):
            try:
                v: Any = orjson.loads(m.json_value)
            except orjson.JSONDecodeError:
                v = _text(trace, m.json_value)
                trace.diagnostics.warn(WarningCode.NOTE, "metadata values that are not JSON kept as their text", 1)
        else:
            v = _text(trace, m.string_value) if m.HasField("string_value") else \
                m.int_value if m.HasField("int_value") else m.bool_value
        key = _text(trace, m.name)
        if key == "traceconv" and isinstance(v, dict):
            own = v
            trace.meta.restore(v)
            if v.get("source_format"):
                trace.meta.extra.setdefault("recorded_as", v["source_format"])
            if v.get("clock") and v["clock"] != "unix":
                try:
                    trace.meta.clock = Clock(v["clock"])
                except ValueError:
                    trace.diagnostics.warn(WarningCode.NOTE, "a clock traceconv does not know in its metadata: "
                                           "times read as Unix time", 1)
        else:
            trace.meta.extra[key] = v
    return own


def _truncated(trace: Trace, data: bytes, read_to: int) -> None:
    if read_to < len(data):
        trace.diagnostics.warn(WarningCode.TRUNCATED_INPUT, "the file ends inside a packet, or a packet is "
                               "damaged: the packets before it were read", 1)


def _read_compiled(data: bytes) -> "tuple[Trace, int, dict[str, Any] | None] | None":
    """The trace, the number of packets read and traceconv's metadata if it was among them, or
    None where the compiled reader leaves the file to the reference."""
    r = _core.readback.read(data)
    if isinstance(r, str):
        return None
    trace, own = _new_trace(), None
    descs: dict[int, Any] = {}
    uuids = r["uuids"].tolist()
    first = {u: k for k, u in enumerate(uuids)}  # (each uuid's place in the order of first use)
    owner: dict[tuple, int] = {}                # the track describing each process and thread
    children: dict[int, set[int]] = {}          # the tracks described with each as their parent
    tids = np.zeros(len(uuids), np.int32)
    done = 0                                    # tracks made so far, in the order of first use
    for start, end, used_before in r["others"]:
        for k in range(done, used_before):
            tids[k] = _track(trace, descs, uuids[k])
        done = max(done, used_before)
        try:
            p = pb.TracePacket.FromString(data[start:end])
        except Exception:  # noqa: BLE001 - damaged: the reference stops there
            return None
        if not p.HasField("track_descriptor"):
            own = m if (m := _metadata(trace, p.chrome_events)) is not None else own
            continue
        d = p.track_descriptor
        # The compiled reader leaves out a descriptor the same as its track's last: the same calls
        # again, which change nothing unless another track names the same process or thread
        # between the two (not in what traceconv writes): such a file goes to the reference.
        named = ("p", d.process.pid) if d.HasField("process") else \
            ("t", d.thread.pid, d.thread.tid) if d.HasField("thread") else None
        if named is not None and owner.setdefault(named, d.uuid) != d.uuid:
            return None
        old = descs.get(d.uuid)
        _describe(trace, descs, d)
        if d.parent_uuid:
            children.setdefault(d.parent_uuid, set()).add(d.uuid)
        if old != d:
            # described anew: the reference makes the track again for the events after this, and
            # those of the tracks whose place it gives (a lane's thread, a counter's process); the
            # compiled reader keeps one track per uuid, so a track used before must come out the same
            for u in (d.uuid, *children.get(d.uuid, ())):
                k = first.get(u, done)
                if k < done and _track(trace, descs, u) != tids[k]:
                    return None
    for k in range(done, len(uuids)):
        tids[k] = _track(trace, descs, uuids[k])
    ids = np.zeros(len(r["strings"]), np.int32)
    for i in r["used"].tolist():                # interned in the order the reference's rows use them
        ids[i] = trace.strings.intern(r["strings"][i])
    for table, cols in ((trace.slices, r["slices"]), (trace.instants, r["instants"])):
        if len(cols["ts"]):
            table.ts.frombytes(cols["ts"].tobytes())
            if table is trace.slices:
                table.dur.frombytes(cols["dur"].tobytes())
            table.track.frombytes(tids[cols["track"]].tobytes())
            table.name.frombytes(ids[cols["name"]].tobytes())
            table.cat.frombytes(ids[cols["cat"]].tobytes())
            table.args.extend_packed(cols["args"], cols["lens"])
    c = r["counters"]
    if len(c["ts"]):
        trace.counters.ts.frombytes(c["ts"].tobytes())
        trace.counters.track.frombytes(tids[c["track"]].tobytes())
        trace.counters.value.frombytes(c["value"].tobytes())
    trace.slices.depth = trace.slices.parent = None
    trace.diagnostics.warn(WarningCode.UNMATCHED_END, "slice ends without a begin", r["unmatched_ends"])
    trace.diagnostics.warn(WarningCode.UNMATCHED_BEGIN, "slices still open where the file ends were left out",
                           r["open_begins"])
    f = r["flows"]
    _flows(trace, f["id"], f["slice"], f["ends"], r["other_flow_ends"])
    _truncated(trace, data, r["read_to"])
    return trace, r["packets"], own


def _read_reference(data: bytes) -> "tuple[Trace, int, dict[str, Any] | None]":
    """The reference: every packet through ``perfetto_trace_pb2``; the trace, the packets read and
    traceconv's metadata if it was among them."""
    trace, own = _new_trace(), None
    seqs: dict[int, _Seq] = {}
    descs: dict[int, Any] = {}
    tracks: dict[int, int] = {}                  # uuid -> model track id
    # begins wait for their end on the track they were written on (an overlap lane is a stack of
    # its own, though its slices are read as its thread's)
    stacks: dict[int, list] = {}
    flow_points: list[tuple[int, int, bool]] = []          # (flow id, slice row, ends there)
    other_flow_ends = 0
    parsed = 0
    read_to = 0
    for raw, end in packets(data):
        try:
            p = pb.TracePacket.FromString(raw)
        except Exception:  # noqa: BLE001 - a damaged packet ends the readable part
            break
        parsed += 1
        read_to = end
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
                seq.names[e.iid] = _text(trace, e.name)
            for e in d.event_categories:
                seq.cats[e.iid] = _text(trace, e.name)
            for e in d.debug_annotation_names:
                seq.ann[e.iid] = _text(trace, e.name)
            for e in d.debug_annotation_string_values:
                seq.strs[e.iid] = e.str.decode("utf-8", "surrogateescape")
        which = p.WhichOneof("data")
        if which == "track_descriptor":
            tracks.pop(p.track_descriptor.uuid, None)   # a later descriptor may rename it
            _describe(trace, descs, p.track_descriptor)
            continue
        if which == "chrome_events":
            own = m if (m := _metadata(trace, p.chrome_events)) is not None else own
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
        flows = [(f, False) for f in te.flow_ids] + [(f, True) for f in te.terminating_flow_ids]
        if kind != _TE.TYPE_SLICE_BEGIN:
            other_flow_ends += len(flows)
        if kind == _TE.TYPE_SLICE_END:
            st = stacks.get(uuid)
            if st:
                t0, row = st.pop()
                trace.slices.dur[row] = trace._time(ts - t0)
            else:
                trace.diagnostics.warn(WarningCode.UNMATCHED_END, "slice ends without a begin", 1)
            continue
        if kind == _TE.TYPE_COUNTER:
            v = te.double_counter_value if te.HasField("double_counter_value") else te.counter_value
            trace.add_counter(tid, ts, float(v))
            continue
        name = _text(trace, te.name) if te.HasField("name") else seq.names.get(te.name_iid, "")
        cat = _text(trace, te.categories[0]) if len(te.categories) else \
            (seq.cats.get(te.category_iids[0]) if len(te.category_iids) else None)
        args = {_key(a, seq, trace): _value(a, seq, trace) for a in te.debug_annotations}
        if kind == _TE.TYPE_SLICE_BEGIN:
            # the row now, its duration at its end: the rows in the order of their begins (the
            # writer's, the source's: an enclosing slice before what it holds, which decides how
            # slices of the same start and duration nest when laid out again, and with it self
            # times); a begin never ended is taken out at the end
            row = trace.add_slice(tid, ts, 0, name, cat, args or None)
            flow_points += [(f, row, ends) for f, ends in flows]
            stacks.setdefault(uuid, []).append((ts, row))
        elif kind == _TE.TYPE_INSTANT:
            trace.add_instant(tid, ts, name, cat, args or None)
    open_rows = sorted(row for st in stacks.values() for _, row in st)
    if open_rows:
        trace.diagnostics.warn(WarningCode.UNMATCHED_BEGIN, "slices still open where the file ends were left out",
                               len(open_rows))
        keep = np.ones(len(trace.slices), bool)
        keep[open_rows] = False
        new_row = np.cumsum(keep) - 1
        flow_points = [(f, int(new_row[row]), ends) for f, row, ends in flow_points if keep[row]]
        trace.take_slices(np.flatnonzero(keep))
    ids, rows, ends = zip(*flow_points) if flow_points else ((), (), ())
    _flows(trace, np.array(ids, np.uint64), np.array(rows, np.int64), np.array(ends, bool), other_flow_ends)
    _truncated(trace, data, read_to)
    return trace, parsed, own


def _flows(trace: Trace, ids: np.ndarray, rows: np.ndarray, ends: np.ndarray, other: int) -> None:
    """The flow ids on slices as the model's flows.  traceconv's writer gives each flow an id of its
    own, in the source slice's ``flow_ids`` and the destination's ``terminating_flow_ids``: each id
    found so, once on each side, is a flow, in the order of the ids (the model's order).  Any other
    use of an id (one end only, an id on more slices, on an event that is not a slice's begin) is
    left out and counted."""
    paired = 0
    if len(ids):
        order = np.lexsort((ends, ids))                 # by id, the leaving end first
        ids, rows, ends = ids[order], rows[order], ends[order]
        _, first, count = np.unique(ids, return_index=True, return_counts=True)
        two = first[count == 2]
        two = two[~ends[two] & ends[two + 1]]
        paired = len(two)
        trace.flows.src.frombytes(rows[two].astype(np.int64).tobytes())
        trace.flows.dst.frombytes(rows[two + 1].astype(np.int64).tobytes())
        trace.flows.name.frombytes(np.zeros(paired, np.int32).tobytes())
    trace.diagnostics.warn(WarningCode.UNRESOLVED_FLOW, "flow ids on one end only (or on more than two slices, or on "
                           "an event that is not a slice's begin) left out", len(ids) - 2 * paired + other)


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
                pb.CounterDescriptor.UNIT_COUNT: "count"}.get(d.counter.unit) or _text(trace, d.counter.unit_name) or None
        return trace.track(TrackKind.COUNTER, _text(trace, d.name), proc, unit=unit).id
    return trace.track(TrackKind.ASYNC, _text(trace, d.name), proc).id
