"""Perfetto TrackEvent protobuf writer.

Follows Perfetto's TrackEvent docs ("Writing TrackEvent protos synthetically"):

* one packet sequence (``trusted_packet_sequence_id`` 1); its first packet says
  ``first_packet_on_sequence`` and ``SEQ_INCREMENTAL_STATE_CLEARED``; every
  packet that uses interned ids says ``SEQ_NEEDS_INCREMENTAL_STATE``;
* a TrackDescriptor for every process (ProcessDescriptor), thread
  (ThreadDescriptor), counter (CounterDescriptor) and other track, before the
  events that use it;
* slices as ``SLICE_BEGIN``/``SLICE_END`` pairs on strictly nested tracks
  (overlaps were moved to lanes by :func:`traceconv.layout.nest`), in the
  order :func:`traceconv.layout.event_stream` gives;
* event names, categories and debug-annotation names interned on first use;
* args as debug annotations (nested dicts and lists kept as such);
* flows as ``flow_ids`` on the source's begin and ``terminating_flow_ids`` on
  the destination's begin;
* timestamps in ns, on the default trace clock.

Packets are serialized in batches (a ``Trace`` message of a few thousand
packets, which is the same bytes as the packets one after another) and written
as they are made, so the output is never held in memory whole.
"""

from __future__ import annotations

from typing import Any, BinaryIO

import orjson
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .. import __version__
from ..layout import BEGIN, COUNTER, END, INSTANT, event_stream
from ..model import Trace, TrackKind
from ..progress import EVERY, report

SEQ_ID = 1
_BATCH = 4096
_UUID_BASE = 0   # small uuids: 1-2 byte varints on every packet (a big base cost 9 bytes each)
INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1

SEQ_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
SEQ_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
T_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
T_END = pb.TrackEvent.TYPE_SLICE_END
T_INSTANT = pb.TrackEvent.TYPE_INSTANT
T_COUNTER = pb.TrackEvent.TYPE_COUNTER
_UNITS = {"bytes": pb.CounterDescriptor.UNIT_SIZE_BYTES, "ns": pb.CounterDescriptor.UNIT_TIME_NS,
          "count": pb.CounterDescriptor.UNIT_COUNT}


def track_uuid(track_id: int) -> int:
    return _UUID_BASE + track_id + 1


def set_value(ann: Any, v: Any) -> None:
    """Store a JSON value in a DebugAnnotation (nested dicts and lists as such)."""
    if isinstance(v, bool):
        ann.bool_value = v
    elif isinstance(v, int):
        if INT64_MIN <= v <= INT64_MAX:
            ann.int_value = v
        elif 0 <= v <= UINT64_MAX:
            ann.uint_value = v
        else:
            ann.string_value = str(v)
    elif isinstance(v, float):
        ann.double_value = v
    elif isinstance(v, str):
        ann.string_value = v
    elif isinstance(v, dict):
        if not v:
            ann.legacy_json_value = "{}"
        for k, sub in v.items():
            e = ann.dict_entries.add()
            e.name = str(k)
            set_value(e, sub)
    elif isinstance(v, list):
        if not v:
            ann.legacy_json_value = "[]"
        for sub in v:
            set_value(ann.array_values.add(), sub)
    elif v is None:
        ann.legacy_json_value = "null"
    else:
        ann.string_value = str(v)


class _Writer:
    def __init__(self, trace: Trace, out: BinaryIO) -> None:
        self.trace = trace
        self.out = out
        self.batch = pb.Trace()
        self.count = 0
        self.first = True
        self.seen_names = bytearray(len(trace.strings))
        self.seen_cats = bytearray(len(trace.strings))
        self.ann_iids: dict[str, int] = {}

    def packet(self) -> Any:
        # Flush a full batch *before* adding: the caller fills the packet after this returns,
        # so a packet must not be serialized here (it would be written empty).
        if self.count >= _BATCH:
            self.flush()
        p = self.batch.packet.add()
        p.trusted_packet_sequence_id = SEQ_ID
        if self.first:
            p.first_packet_on_sequence = True
            p.sequence_flags = SEQ_CLEARED | SEQ_NEEDS
            self.first = False
        self.count += 1
        return p

    def flush(self) -> None:
        if len(self.batch.packet):
            self.out.write(self.batch.SerializeToString())
            self.batch = pb.Trace()
        self.count = 0

    # interning: iid = string id + 1 (iid 0 is invalid)
    def name(self, p: Any, te: Any, sid: int) -> None:
        if not self.seen_names[sid]:
            self.seen_names[sid] = 1
            e = p.interned_data.event_names.add()
            e.iid = sid + 1
            e.name = self.trace.strings[sid]
        te.name_iid = sid + 1

    def category(self, p: Any, te: Any, sid: int) -> None:
        if not sid:
            return
        if not self.seen_cats[sid]:
            self.seen_cats[sid] = 1
            e = p.interned_data.event_categories.add()
            e.iid = sid + 1
            e.name = self.trace.strings[sid]
        te.category_iids.append(sid + 1)

    def args(self, p: Any, te: Any, raw: bytes | None) -> None:
        if raw is None:
            return
        for k, v in orjson.loads(raw).items():
            iid = self.ann_iids.get(k)
            if iid is None:
                iid = self.ann_iids[k] = len(self.ann_iids) + 1
                n = p.interned_data.debug_annotation_names.add()
                n.iid = iid
                n.name = k
            a = te.debug_annotations.add()
            a.name_iid = iid
            set_value(a, v)


def _descriptors(w: _Writer) -> None:
    trace = w.trace
    proc_uuid = {}
    for t in trace.tracks:
        if t.kind is TrackKind.PROCESS:
            proc_uuid[t.process] = track_uuid(t.id)
    for t in trace.tracks:
        p = w.packet()
        d = p.track_descriptor
        d.uuid = track_uuid(t.id)
        if t.kind is TrackKind.PROCESS:
            proc = trace.processes[t.process]
            d.process.pid = proc.pid
            if proc.name:
                d.process.process_name = proc.name
            if proc.sort_index is not None:
                d.process.legacy_sort_index = proc.sort_index
            d.process.process_labels.extend(proc.labels)
            continue
        if t.kind is TrackKind.THREAD:
            th = trace.threads[t.thread]
            d.parent_uuid = proc_uuid[th.process]
            d.thread.pid = trace.processes[th.process].pid
            d.thread.tid = th.tid
            d.thread.thread_name = trace.track_label(t)
            if th.sort_index is not None:
                d.thread.legacy_sort_index = th.sort_index
            continue
        if t.kind is TrackKind.LANE and t.parent is not None:
            d.parent_uuid = track_uuid(t.parent)
        elif t.process is not None:
            d.parent_uuid = proc_uuid[t.process]
        d.name = trace.track_label(t)
        if t.kind is TrackKind.COUNTER:
            unit = _UNITS.get(t.unit or "")
            if unit is not None:
                d.counter.unit = unit
            elif t.unit:
                d.counter.unit_name = t.unit
            else:
                d.counter.SetInParent()


def _metadata(w: _Writer) -> None:
    trace = w.trace
    meta = {"traceconv": {"version": __version__, **trace.meta.as_dict()}, **trace.meta.extra}
    p = w.packet()
    for k, v in meta.items():
        m = p.chrome_events.metadata.add()
        m.name = k
        if isinstance(v, str):
            m.string_value = v
        else:
            m.json_value = orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS).decode()


def write(trace: Trace, out: BinaryIO) -> None:
    w = _Writer(trace, out)
    _descriptors(w)
    _metadata(w)

    tracks = trace.tracks
    uuids = [track_uuid(t.id) for t in tracks]
    s = trace.slices
    ins = trace.instants
    cnt = trace.counters
    flows = trace.flows
    flow_out: dict[int, list[int]] = {}
    flow_in: dict[int, list[int]] = {}
    for i in range(len(flows)):
        flow_out.setdefault(flows.src[i], []).append(i + 1)
        flow_in.setdefault(flows.dst[i], []).append(i + 1)

    time, kind, index = event_stream(trace)
    total = len(time)
    for n, (t, k, i) in enumerate(zip(time.tolist(), kind.tolist(), index.tolist())):
        if not n & (EVERY - 1):
            report("writing Perfetto protobuf", n, total)
        p = w.packet()
        p.timestamp = t
        te = p.track_event
        if k == END:
            te.type = T_END
            te.track_uuid = uuids[s.track[i]]
            continue
        p.sequence_flags |= SEQ_NEEDS
        if k == BEGIN:
            te.type = T_BEGIN
            te.track_uuid = uuids[s.track[i]]
            w.name(p, te, s.name[i])
            w.category(p, te, s.cat[i])
            w.args(p, te, s.args[i])
            if i in flow_out:
                te.flow_ids.extend(flow_out[i])
            if i in flow_in:
                te.terminating_flow_ids.extend(flow_in[i])
        elif k == INSTANT:
            te.type = T_INSTANT
            te.track_uuid = uuids[ins.track[i]]
            w.name(p, te, ins.name[i])
            w.category(p, te, ins.cat[i])
            w.args(p, te, ins.args[i])
        elif k == COUNTER:
            te.type = T_COUNTER
            te.track_uuid = uuids[cnt.track[i]]
            te.double_counter_value = cnt.value[i]
    w.flush()
