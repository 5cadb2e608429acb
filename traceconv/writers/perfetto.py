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

How it is written: the few descriptor and metadata packets are built with
``perfetto_trace_pb2``.  The event packets -- millions of them -- are encoded
straight into protobuf's wire format, because building a pb2 message per event
costs ~14 µs in Python: each packet is a few cached byte strings (the track's
prefix, the interned name and category ids, varints of small numbers) around
the timestamp, and each arg's encoded annotation is cached by (key, raw JSON
value), since most values repeat (shapes, dtypes, zeros).  ``tests/test_writers.py``
checks every hand-written tag against the pb2 descriptors and decodes the
output with ``perfetto_trace_pb2``.  The file is written in chunks as it goes.
"""

from __future__ import annotations

import struct
from typing import Any, BinaryIO

import msgspec
import numpy as np
import orjson
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .. import __version__
from ..layout import BEGIN, COUNTER, END, INSTANT, event_stream
from ..model import Trace, TrackKind
from ..progress import report

SEQ_ID = 1
_CHUNK = 1 << 20          # bytes written at a time
_STEP = 1 << 16           # events encoded per step
_CACHE = 200_000          # encoded arg values remembered (the cache starts over when full)
INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
_UNITS = {"bytes": pb.CounterDescriptor.UNIT_SIZE_BYTES, "ns": pb.CounterDescriptor.UNIT_TIME_NS,
          "count": pb.CounterDescriptor.UNIT_COUNT}
SEQ_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
SEQ_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


# ---------------------------------------------------------------- protobuf wire format

def _varint_slow(v: int) -> bytes:
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_SMALL = [_varint_slow(i) for i in range(1 << 14)]
# 14-bit groups with the continuation bit set on both bytes: for the middle of long varints
_CONT = [bytes(((i & 0x7F) | 0x80, ((i >> 7) & 0x7F) | 0x80)) for i in range(1 << 14)]


def varint(v: int) -> bytes:
    """Unsigned varint (negative int64 values as their 64-bit two's complement)."""
    if 0 <= v < 16384:
        return _SMALL[v]
    v &= 0xFFFF_FFFF_FFFF_FFFF
    out = b""
    while v >= 16384:
        out += _CONT[v & 0x3FFF]
        v >>= 14
    return out + _SMALL[v]


def varints(values: "np.ndarray") -> tuple[bytes, list[int]]:
    """Varints of many non-negative int64 values at once: (all bytes, offsets) -- value i is
    ``blob[off[i]:off[i + 1]]``."""
    v = values.astype(np.uint64)
    n = len(v)
    nbytes = np.ones(n, dtype=np.int64)
    for k in range(1, 10):
        nbytes += v >= np.uint64(1) << np.uint64(7 * k)
    out = np.zeros((n, 10), dtype=np.uint8)
    for k in range(10):
        group = ((v >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        out[:, k] = group | np.where(k < nbytes - 1, 0x80, 0).astype(np.uint8)
    blob = out[np.arange(10) < nbytes[:, None]].tobytes()
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(nbytes, out=off[1:])
    return blob, off.tolist()


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


VARINT, I64, LEN = 0, 1, 2
# (message, field name) -> tag bytes; every one of them is checked against the pb2 descriptors in the tests
TAGS: dict[tuple[str, str], bytes] = {
    ("Trace", "packet"): tag(1, LEN),
    ("TracePacket", "timestamp"): tag(8, VARINT),
    ("TracePacket", "trusted_packet_sequence_id"): tag(10, VARINT),
    ("TracePacket", "sequence_flags"): tag(13, VARINT),
    ("TracePacket", "track_event"): tag(11, LEN),
    ("TracePacket", "interned_data"): tag(12, LEN),
    ("TrackEvent", "type"): tag(9, VARINT),
    ("TrackEvent", "track_uuid"): tag(11, VARINT),
    ("TrackEvent", "name_iid"): tag(10, VARINT),
    ("TrackEvent", "category_iids"): tag(3, VARINT),
    ("TrackEvent", "debug_annotations"): tag(4, LEN),
    ("TrackEvent", "double_counter_value"): tag(44, I64),
    ("TrackEvent", "flow_ids"): tag(47, I64),
    ("TrackEvent", "terminating_flow_ids"): tag(48, I64),
    ("DebugAnnotation", "name_iid"): tag(1, VARINT),
    ("DebugAnnotation", "name"): tag(10, LEN),
    ("DebugAnnotation", "bool_value"): tag(2, VARINT),
    ("DebugAnnotation", "uint_value"): tag(3, VARINT),
    ("DebugAnnotation", "int_value"): tag(4, VARINT),
    ("DebugAnnotation", "double_value"): tag(5, I64),
    ("DebugAnnotation", "string_value"): tag(6, LEN),
    ("DebugAnnotation", "legacy_json_value"): tag(9, LEN),
    ("DebugAnnotation", "dict_entries"): tag(11, LEN),
    ("DebugAnnotation", "array_values"): tag(12, LEN),
    ("InternedData", "event_categories"): tag(1, LEN),
    ("InternedData", "event_names"): tag(2, LEN),
    ("InternedData", "debug_annotation_names"): tag(3, LEN),
    ("EventName", "iid"): tag(1, VARINT),
    ("EventName", "name"): tag(2, LEN),
}
_T = TAGS
P_PACKET = _T["Trace", "packet"]
P_TS = _T["TracePacket", "timestamp"]
P_SEQ = _T["TracePacket", "trusted_packet_sequence_id"] + varint(SEQ_ID)
P_NEEDS = _T["TracePacket", "sequence_flags"] + varint(SEQ_NEEDS)
P_TE = _T["TracePacket", "track_event"]
P_INTERNED = _T["TracePacket", "interned_data"]
E_TYPE = _T["TrackEvent", "type"]
E_TRACK = _T["TrackEvent", "track_uuid"]
E_NAME = _T["TrackEvent", "name_iid"]
E_CAT = _T["TrackEvent", "category_iids"]
E_ANN = _T["TrackEvent", "debug_annotations"]
E_DOUBLE = _T["TrackEvent", "double_counter_value"]
E_FLOW = _T["TrackEvent", "flow_ids"]
E_TFLOW = _T["TrackEvent", "terminating_flow_ids"]
A_NAME_IID = _T["DebugAnnotation", "name_iid"]
A_NAME = _T["DebugAnnotation", "name"]
A_BOOL = _T["DebugAnnotation", "bool_value"]
A_UINT = _T["DebugAnnotation", "uint_value"]
A_INT = _T["DebugAnnotation", "int_value"]
A_DOUBLE = _T["DebugAnnotation", "double_value"]
A_STR = _T["DebugAnnotation", "string_value"]
A_JSON = _T["DebugAnnotation", "legacy_json_value"]
A_DICT = _T["DebugAnnotation", "dict_entries"]
A_ARRAY = _T["DebugAnnotation", "array_values"]
I_CATS = _T["InternedData", "event_categories"]
I_NAMES = _T["InternedData", "event_names"]
I_ANN = _T["InternedData", "debug_annotation_names"]
N_IID = _T["EventName", "iid"]         # EventCategory and DebugAnnotationName have the same layout
N_NAME = _T["EventName", "name"]
TYPE = {BEGIN: E_TYPE + varint(pb.TrackEvent.TYPE_SLICE_BEGIN), END: E_TYPE + varint(pb.TrackEvent.TYPE_SLICE_END),
        INSTANT: E_TYPE + varint(pb.TrackEvent.TYPE_INSTANT), COUNTER: E_TYPE + varint(pb.TrackEvent.TYPE_COUNTER)}
_pack_d = struct.Struct("<d").pack
_pack_q = struct.Struct("<Q").pack


def ld(t: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    return t + varint(len(payload)) + payload


def interned_entry(iid: int, name: str) -> bytes:
    return N_IID + varint(iid) + ld(N_NAME, name.encode("utf-8", "surrogatepass"))


def value_fields(v: Any) -> bytes:
    """The value fields of a DebugAnnotation holding the JSON value ``v``."""
    if v is True or v is False:
        return A_BOOL + (b"\x01" if v else b"\x00")
    if isinstance(v, int):
        if INT64_MIN <= v <= INT64_MAX:
            return A_INT + varint(v)
        if v <= UINT64_MAX:
            return A_UINT + varint(v)
        return ld(A_STR, str(v).encode())
    if isinstance(v, float):
        return A_DOUBLE + _pack_d(v)
    if isinstance(v, str):
        return ld(A_STR, v.encode("utf-8", "surrogatepass"))
    if isinstance(v, dict):
        if not v:
            return ld(A_JSON, b"{}")
        return b"".join(ld(A_DICT, ld(A_NAME, str(k).encode("utf-8", "surrogatepass")) + value_fields(x))
                        for k, x in v.items())
    if isinstance(v, list):
        if not v:
            return ld(A_JSON, b"[]")
        return b"".join(ld(A_ARRAY, value_fields(x)) for x in v)
    if v is None:
        return ld(A_JSON, b"null")
    return ld(A_STR, str(v).encode())


_split_args = msgspec.json.Decoder(dict[str, msgspec.Raw])


class _Interning:
    """Interned ids (string id + 1; iid 0 is invalid) and what a packet must define first."""

    def __init__(self, trace: Trace) -> None:
        self.strings = trace.strings
        self.seen_names = bytearray(len(trace.strings))
        self.seen_cats = bytearray(len(trace.strings))
        self.ann_iids: dict[str, int] = {}
        self.name_field = [b""] * len(trace.strings)   # cached "name_iid: n" bytes
        self.cat_field = [b""] * len(trace.strings)
        self.values: dict[tuple[int, bytes], bytes] = {}  # (arg name iid, raw JSON value) -> annotation
        self.pending: list[bytes] = []

    def name(self, sid: int) -> bytes:
        f = self.name_field[sid]
        if not f:
            f = self.name_field[sid] = E_NAME + varint(sid + 1)
        if not self.seen_names[sid]:
            self.seen_names[sid] = 1
            self.pending.append(ld(I_NAMES, interned_entry(sid + 1, self.strings[sid])))
        return f

    def category(self, sid: int) -> bytes:
        if not sid:
            return b""
        f = self.cat_field[sid]
        if not f:
            f = self.cat_field[sid] = E_CAT + varint(sid + 1)
        if not self.seen_cats[sid]:
            self.seen_cats[sid] = 1
            self.pending.append(ld(I_CATS, interned_entry(sid + 1, self.strings[sid])))
        return f

    def args(self, raw: bytes | None) -> bytes:
        if raw is None:
            return b""
        out = []
        values = self.values
        for k, rv in _split_args.decode(raw).items():
            iid = self.ann_iids.get(k)
            if iid is None:
                iid = self.ann_iids[k] = len(self.ann_iids) + 1
                self.pending.append(ld(I_ANN, interned_entry(iid, k)))
            b = bytes(rv)
            key = (iid, b)
            enc = values.get(key)
            if enc is None:
                first = b[:1]
                if first.isdigit() and b.isdigit() and len(b) < 19:
                    val = A_INT + varint(int(b))                          # a plain int, no parse
                elif first == b'"' and b"\\" not in b:
                    val = ld(A_STR, b[1:-1])                              # a string with no escapes
                else:
                    val = value_fields(orjson.loads(b))
                enc = ld(E_ANN, A_NAME_IID + varint(iid) + val)
                if len(values) >= _CACHE:
                    values.clear()
                values[key] = enc
            out.append(enc)
        return b"".join(out)

    def take_pending(self) -> bytes:
        if not self.pending:
            return b""
        data = b"".join(self.pending)
        self.pending.clear()
        return ld(P_INTERNED, data)


def _descriptor_packets(trace: Trace, uuids: list[int]) -> pb.Trace:
    out = pb.Trace()
    proc_uuid = {t.process: uuids[t.id] for t in trace.tracks if t.kind is TrackKind.PROCESS}
    first = True
    for t in trace.tracks:
        p = out.packet.add()
        p.trusted_packet_sequence_id = SEQ_ID
        if first:
            p.first_packet_on_sequence = True
            p.sequence_flags = SEQ_CLEARED | SEQ_NEEDS
            first = False
        d = p.track_descriptor
        d.uuid = uuids[t.id]
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
            d.parent_uuid = uuids[t.parent]
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
    p = out.packet.add()
    p.trusted_packet_sequence_id = SEQ_ID
    if first:
        p.first_packet_on_sequence = True
        p.sequence_flags = SEQ_CLEARED | SEQ_NEEDS
    meta = {"traceconv": {"version": __version__, **trace.meta.as_dict()}, **trace.meta.extra}
    for k, v in meta.items():
        m = p.chrome_events.metadata.add()
        m.name = k
        if isinstance(v, str):
            m.string_value = v
        else:
            m.json_value = orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS).decode()
    return out


def write(trace: Trace, out: BinaryIO) -> None:
    uuids = [t.id + 1 for t in trace.tracks]
    out.write(_descriptor_packets(trace, uuids).SerializeToString())

    intern = _Interning(trace)
    track_field = [E_TRACK + varint(u) for u in uuids]
    end_body = [TYPE[END] + f for f in track_field]
    s, ins, cnt, flows = trace.slices, trace.instants, trace.counters, trace.flows
    s_track, s_name, s_cat, s_args = s.track, s.name, s.cat, s.args
    flow_out: dict[int, list[int]] = {}
    flow_in: dict[int, list[int]] = {}
    for i in range(len(flows)):
        flow_out.setdefault(flows.src[i], []).append(i + 1)
        flow_in.setdefault(flows.dst[i], []).append(i + 1)
    t_begin, t_instant, t_counter = TYPE[BEGIN], TYPE[INSTANT], TYPE[COUNTER]

    time, kind, index = event_stream(trace)
    total = len(time)
    if total and int(time.min()) < 0:
        raise ValueError("negative timestamps cannot be written to a Perfetto trace")
    buf: list[bytes] = []
    size = 0
    # walk the stream in steps, so that its Python lists and varints exist for one step at a time
    for lo in range(0, total, _STEP):
        hi = min(lo + _STEP, total)
        report("writing Perfetto protobuf", lo, total)
        ts_blob, ts_off = varints(time[lo:hi])
        for n, (k, i) in enumerate(zip(kind[lo:hi].tolist(), index[lo:hi].tolist())):
            ts = P_TS + ts_blob[ts_off[n]:ts_off[n + 1]]
            if k == END:
                body = ts + P_SEQ + ld(P_TE, end_body[s_track[i]])
            else:
                if k == BEGIN:
                    te = t_begin + track_field[s_track[i]] + intern.name(s_name[i]) + intern.category(s_cat[i]) \
                        + intern.args(s_args[i])
                    if i in flow_out:
                        te += b"".join(E_FLOW + _pack_q(f) for f in flow_out[i])
                    if i in flow_in:
                        te += b"".join(E_TFLOW + _pack_q(f) for f in flow_in[i])
                elif k == INSTANT:
                    te = t_instant + track_field[ins.track[i]] + intern.name(ins.name[i]) \
                        + intern.category(ins.cat[i]) + intern.args(ins.args[i])
                else:
                    te = t_counter + track_field[cnt.track[i]] + E_DOUBLE + _pack_d(cnt.value[i])
                body = ts + P_SEQ + P_NEEDS + intern.take_pending() + ld(P_TE, te)
            packet = P_PACKET + varint(len(body)) + body
            buf.append(packet)
            size += len(packet)
            if size >= _CHUNK:
                out.write(b"".join(buf))
                buf.clear()
                size = 0
    out.write(b"".join(buf))
