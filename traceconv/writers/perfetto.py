"""Perfetto TrackEvent protobuf writer.

Follows Perfetto's TrackEvent docs ("Writing TrackEvent protos synthetically"):

* one packet sequence (``trusted_packet_sequence_id`` 1); its first packet says
  ``first_packet_on_sequence`` and ``SEQ_INCREMENTAL_STATE_CLEARED``; every
  packet that uses incremental state (interned ids, the sequence's clock) says
  ``SEQ_NEEDS_INCREMENTAL_STATE``;
* timestamps in ns as deltas on a sequence-scoped incremental clock: the first
  packet's ``ClockSnapshot`` says that clock 64 (``is_incremental``) reads T
  when the trace clock BOOTTIME reads T (T = the first event's time), and its
  ``TracePacketDefaults.timestamp_clock_id`` = 64 makes every later timestamp
  on the sequence a delta from the previous one -- what trace_processor turns
  back into the absolute times on the default trace clock, unchanged (the same
  setup the Perfetto SDK writes for its own track events);
* a TrackDescriptor for every process (ProcessDescriptor), thread
  (ThreadDescriptor), counter (CounterDescriptor) and other track, before the
  events that use it;
* slices as ``SLICE_BEGIN``/``SLICE_END`` pairs on strictly nested tracks
  (overlaps were moved to lanes by :func:`traceconv.model.layout.nest`), in the
  order :func:`traceconv.model.layout.event_windows` gives;
* a lane is a child track of its track (of a thread: trace_processor makes it a
  track of that thread), named ``<track> (overlap N)``, with
  ``sibling_merge_behavior`` BY_SIBLING_MERGE_KEY and one ``sibling_merge_key``
  for all lanes of a track (the UI draws them as one row under it) and
  ``sibling_order_rank`` N; the track's ``child_ordering`` is EXPLICIT;
* every event name, category and debug-annotation name, and every repeated
  string value that takes fewer bytes as an iid, interned up front: in packets
  after the descriptors and before the first event;
* args as debug annotations (nested dicts and lists kept as such, their keys
  as interned names too; ``null``, ``{}`` and ``[]`` as an annotation with no
  value, which trace_processor shows as no arg, as it does for the same JSON;
  see :func:`value_fields` and :mod:`traceconv.writers.argtext` for the values
  no client loads as they are);
* flows as ``flow_ids`` on the source's begin and ``terminating_flow_ids`` on
  the destination's begin, one id per link of the model (a flow id in
  TrackEvent joins a chain, so a fan-out -- one source, several destinations --
  needs an id for each link: trace_processor's ``flow`` table then has every
  link).

How it is written: the few header packets (clock, descriptors, metadata) are
built with ``perfetto_trace_pb2``.  The event packets -- millions of them --
are encoded in protobuf's wire format by compiled kernels
(:mod:`traceconv.fast.pbwrite`): a first pass over all args rows collects
their keys and counts their string values, a second pass transcodes each row's
JSON text straight into ``DebugAnnotation`` bytes and assembles the packets of
a step of the event stream into a 1 MB buffer, which is written out as it
fills.  The rare rows the kernel leaves alone (floats beyond the exact fast
path, integers beyond 64 bits, ...) are encoded by the Python reference here
(:func:`value_fields`).  With a second core, pass 1 runs beside the sort of
the event stream and each step's rows are split between two threads (the
kernels release the GIL); the output is the same byte for byte.
``tests/test_writers.py`` and ``tests/test_pbwrite.py`` check every
hand-written tag against the pb2 descriptors, the kernel's annotations against
the Python reference (hypothesis), and decode whole outputs with
``perfetto_trace_pb2``.
"""

from __future__ import annotations

import os
import struct
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

import msgspec
import numpy as np
import orjson
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .. import __version__
from ..fast import pbwrite
from . import argtext
from ..model.layout import BEGIN, COUNTER, END, INSTANT, event_windows, stream_length
from ..model import Trace, TrackKind
from ..progress import report

SEQ_ID = 1
SEQ_CLOCK = 64            # the sequence's incremental clock (ids 64..127 are sequence-scoped)
# the sibling_merge_key of the lanes of one track: this and the track's uuid
LANE_MERGE_KEY = "traceconv overlap lanes of"
_CHUNK = 1 << 20          # bytes written at a time
_INTERNED_MAX = 1 << 20   # interned entries per packet, in bytes
_STEP = 1 << 15           # events encoded per step (their annotations exist for that step only)
_WINDOW = 1 << 16         # events per window of the sorted stream (layout.event_windows)
_CACHE = 200_000          # Python-encoded arg values remembered (the cache starts over when full)
INTERN_STRINGS = True     # repeated string values as DebugAnnotation.string_value_iid
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


def varint(v: int) -> bytes:
    """Unsigned varint (negative int64 values as their 64-bit two's complement)."""
    if 0 <= v < 16384:
        return _SMALL[v]
    return _varint_slow(v & 0xFFFF_FFFF_FFFF_FFFF)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


VARINT, I64, LEN = 0, 1, 2
# (message, field name) -> tag bytes; every one of them is checked against the pb2 descriptors in
# the tests.  The kernels' own (pbwrite.FIELDS) are part of it.
TAGS: dict[tuple[str, str], bytes] = {k: tag(n, w) for k, (n, w) in pbwrite.FIELDS.items()}
TAGS.update({
    ("TracePacket", "interned_data"): tag(12, LEN),
    ("DebugAnnotation", "name"): tag(10, LEN),
    ("InternedData", "event_categories"): tag(1, LEN),
    ("InternedData", "event_names"): tag(2, LEN),
    ("InternedData", "debug_annotation_names"): tag(3, LEN),
    ("InternedData", "debug_annotation_string_values"): tag(29, LEN),
    ("EventName", "iid"): tag(1, VARINT),
    ("EventName", "name"): tag(2, LEN),
})
_T = TAGS
P_PACKET = _T["Trace", "packet"]
P_SEQ = _T["TracePacket", "trusted_packet_sequence_id"] + varint(SEQ_ID)
P_NEEDS = _T["TracePacket", "sequence_flags"] + varint(SEQ_NEEDS)
P_INTERNED = _T["TracePacket", "interned_data"]
E_ANN = _T["TrackEvent", "debug_annotations"]
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
# tag numbers (not bytes) of the interned-data lists, for the entry kernel
_I_CATS, _I_NAMES, _I_ANN, _I_STRINGS = 1 << 3 | LEN, 2 << 3 | LEN, 3 << 3 | LEN, 29 << 3 | LEN
_pack_d = struct.Struct("<d").pack


def ld(t: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    return t + varint(len(payload)) + payload


def value_fields(v: Any) -> bytes:
    """The value fields of a DebugAnnotation holding the JSON value ``v`` (the reference the
    compiled encoder is tested against, and the encoder of the rows it leaves alone).

    ``null``, ``{}`` and ``[]`` have no value field: an annotation with a name and nothing else (an
    empty ``dict_entries`` / ``array_values`` list is no field at all on the wire).  trace_processor
    shows no arg for it and skips it in an array's numbering -- exactly what its JSON importer does
    with the same values -- where a ``legacy_json_value`` of ``null``, ``{}`` or ``[]`` makes it abort.
    As an element of a list, ``{}`` and ``[]`` are one nameless entry with no value: still no arg, but
    the element takes its index, as in the JSON importer (``[1,{},2]``: ``l[0]``, ``l[2]``; a ``null``
    takes none).
    (The writer never hands it an integer beyond uint64: orjson and :func:`argtext.clean` read those as
    the nearest double; given one, it writes a string of its digits.)"""
    if v is True or v is False:
        return A_BOOL + (b"\x01" if v else b"\x00")
    if isinstance(v, int):
        if INT64_MIN <= v <= INT64_MAX:
            return A_INT + varint(v)
        if 0 <= v <= UINT64_MAX:
            return A_UINT + varint(v)
        return ld(A_STR, str(v).encode())
    if isinstance(v, float):
        return A_DOUBLE + _pack_d(v)
    if isinstance(v, str):
        return ld(A_STR, v.encode("utf-8", "surrogatepass"))
    if isinstance(v, dict):
        return b"".join(ld(A_DICT, ld(A_NAME, str(k).encode("utf-8", "surrogatepass")) + value_fields(x))
                        for k, x in v.items())
    if isinstance(v, list):
        return b"".join(ld(A_ARRAY, _EMPTY_IN_LIST if isinstance(x, (dict, list)) and not x else value_fields(x))
                        for x in v)
    if v is None:
        return b""
    return ld(A_STR, str(v).encode())


_EMPTY_IN_LIST = ld(A_DICT, ld(A_NAME, b""))      # {} or [] as a list's element


_split_args = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _key(k: str) -> bytes:
    return k.encode("utf-8", "surrogatepass")


class PythonArgs:
    """The Python encoder of a row of args (the rows the kernel leaves alone): its annotations,
    top-level names as ``name_iid`` when interned (else as ``name``).  A row that is not plain JSON
    within :data:`argtext.MAX_DEPTH` levels (deeper nesting, a lone surrogate escape, a number
    beyond the double range, NaN, text that is not JSON) is first made writable by
    :func:`argtext.clean`; what that changed is counted in ``counts``."""

    def __init__(self, key_iids: dict[bytes, int]) -> None:
        self.key_iids = key_iids
        self.values: dict[tuple[bytes, bytes], bytes] = {}  # (arg name, raw JSON value) -> annotation
        self.counts: Counter = Counter()

    def _name(self, kb: bytes) -> bytes:
        iid = self.key_iids.get(kb)
        return A_NAME_IID + varint(iid) if iid else ld(A_NAME, kb)

    def _cleaned(self, raw: bytes) -> bytes:
        v = argtext.clean(raw, self.counts)
        return b"".join(ld(E_ANN, self._name(_key(k)) + value_fields(x)) for k, x in v.items())

    def __call__(self, raw: bytes) -> bytes:
        if raw.count(b"{") + raw.count(b"[") > argtext.MAX_DEPTH + 1:
            return self._cleaned(raw)                 # (maybe) too deep: without recursion
        try:
            raw.decode("utf-8")                       # (msgspec lets bytes that are not UTF-8 through)
            items = _split_args.decode(raw).items()
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            return self._cleaned(raw)
        out = []
        values = self.values
        for k, rv in items:
            kb = _key(k)
            b = bytes(rv)
            ck = (kb, b)
            enc = values.get(ck)
            if enc is None:
                first = b[:1]
                if first.isdigit() and b.isdigit() and len(b) < 19:
                    val = A_INT + varint(int(b))                          # a plain int, no parse
                elif first == b'"' and b"\\" not in b:
                    val = ld(A_STR, b[1:-1])                              # a string with no escapes
                else:
                    try:
                        val = value_fields(orjson.loads(b))
                    except orjson.JSONDecodeError:                        # 1e400, a lone surrogate, ...
                        return self._cleaned(raw)
                enc = ld(E_ANN, self._name(kb) + val)
                if len(values) >= _CACHE:
                    values.clear()
                values[ck] = enc
            out.append(enc)
        return b"".join(out)


class ArgsPlan:
    """Pass 1 over every args row of the trace: the interned annotation names and string values."""

    def __init__(self, trace: Trace, strings: bool = INTERN_STRINGS) -> None:
        self.strings = strings
        self.s_data, self.s_off = trace.slices.args.packed()
        self.i_data, self.i_off = trace.instants.args.packed()
        table = pbwrite.new_table()
        for col, data, off in ((trace.slices.args, self.s_data, self.s_off),
                               (trace.instants.args, self.i_data, self.i_off)):
            for lo in range(0, len(off) - 1, _STEP):     # a spilled column's pages a step at a time
                table = pbwrite.collect_args(data, off[lo:lo + _STEP + 1], table, strings)
                col.forget()
        self.table = table
        _, _, tkind, tdata, toff, tcount, tiid, _, _, tstate = table
        n = int(tstate[0])
        kind = tkind[:n] & 1
        # annotation names: the kernel numbered them 1, 2, ...
        keys = np.flatnonzero(kind == pbwrite.KEY)
        self.key_iids = {bytes(tdata[toff[j]:toff[j + 1]]): int(tiid[j]) for j in keys.tolist()}
        self.values = np.flatnonzero(kind == pbwrite.VALUE)
        if strings and len(self.values):
            tiid[self.values] = _value_iids(tcount[self.values], toff[self.values + 1] - toff[self.values])
        self.python = PythonArgs(self.key_iids)

    def annotation_names(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _packed(list(self.key_iids.values()), list(self.key_iids))

    def string_values(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        _, _, _, tdata, toff, _, tiid, _, _, _ = self.table
        sel = self.values[tiid[self.values] > 0]
        sel = sel[np.argsort(tiid[sel])]
        lens = toff[sel + 1] - toff[sel]
        off = np.zeros(len(sel) + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        idx = np.repeat(toff[sel] - off[:-1], lens) + np.arange(int(off[-1]))
        return tiid[sel], tdata[idx], off


def _value_iids(count: np.ndarray, ln: np.ndarray) -> np.ndarray:
    """iids for the string values that take fewer bytes interned than inline (0 = inline), the
    most used first (so that they get the shortest iids)."""
    n = len(count)

    def vlen(x: np.ndarray) -> np.ndarray:
        return 1 + (x >= 1 << 7) + (x >= 1 << 14) + (x >= 1 << 21) + (x >= 1 << 28) + (x >= 1 << 35)

    order = np.argsort(-count, kind="stable")
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(1, n + 1)
    inline = 1 + vlen(ln) + ln                                  # string_value
    interned = 2 + vlen(rank)                                   # string_value_iid (a 2-byte tag)
    inner = 1 + vlen(rank) + 1 + vlen(ln) + ln
    entry = 2 + vlen(inner) + inner                             # InternedData.debug_annotation_string_values
    chosen = count * (inline - interned) > entry
    iids = np.zeros(n, np.int64)
    chosen_order = order[chosen[order]]
    iids[chosen_order] = np.arange(1, len(chosen_order) + 1)
    return iids


def _packed(iids: list[int], items: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data = np.frombuffer(bytearray(b"".join(items)), np.uint8)
    off = np.zeros(len(items) + 1, np.int64)
    np.cumsum(np.fromiter((len(x) for x in items), np.int64, len(items)), out=off[1:])
    return np.asarray(iids, np.int64), data, off


def _interned_packets(out: BinaryIO, field_tag: int, iids: np.ndarray, data: np.ndarray, off: np.ndarray) -> None:
    """Interned entries in packets of at most about _INTERNED_MAX bytes each."""
    if not len(iids):
        return
    buf, ends = pbwrite.interned_entries(field_tag, iids, data, off)
    start, base = 0, 0
    while start < len(ends):
        stop = max(int(np.searchsorted(ends, base + _INTERNED_MAX, side="right")), start + 1)
        body = P_SEQ + P_NEEDS + ld(P_INTERNED, buf[base:ends[stop - 1]].tobytes())
        out.write(P_PACKET + varint(len(body)) + body)
        start, base = stop, int(ends[stop - 1])


def _header_packets(trace: Trace, uuids: list[int], t0: int) -> pb.Trace:
    out = pb.Trace()
    # the sequence's clock: timestamps are deltas on clock 64, which reads t0 when BOOTTIME (the
    # default trace clock) reads t0
    p = out.packet.add()
    p.trusted_packet_sequence_id = SEQ_ID
    p.first_packet_on_sequence = True
    p.sequence_flags = SEQ_CLEARED
    p.trace_packet_defaults.timestamp_clock_id = SEQ_CLOCK
    boot = p.clock_snapshot.clocks.add()
    boot.clock_id = pb.BuiltinClock.BUILTIN_CLOCK_BOOTTIME
    boot.timestamp = t0
    seq = p.clock_snapshot.clocks.add()
    seq.clock_id = SEQ_CLOCK
    seq.timestamp = t0
    seq.is_incremental = True

    proc_uuid = {t.process: uuids[t.id] for t in trace.tracks if t.kind is TrackKind.PROCESS}
    has_lanes = {t.parent for t in trace.tracks if t.kind is TrackKind.LANE and t.parent is not None}
    for t in trace.tracks:
        p = out.packet.add()
        p.trusted_packet_sequence_id = SEQ_ID
        d = p.track_descriptor
        d.uuid = uuids[t.id]
        if t.id in has_lanes:
            d.child_ordering = pb.TrackDescriptor.EXPLICIT       # its lanes by sibling_order_rank
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
            # a lane is a child of its track (for a thread: a track of that thread in
            # trace_processor), merged with the other lanes of that track into one row of the UI,
            # in lane order
            d.parent_uuid = uuids[t.parent]
            d.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY
            d.sibling_merge_key = f"{LANE_MERGE_KEY} {uuids[t.parent]}"
            d.sibling_order_rank = t.lane
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
    meta = {"traceconv": {"version": __version__, **trace.meta.as_dict()}, **trace.meta.extra}
    for k, v in meta.items():
        m = p.chrome_events.metadata.add()
        m.name = k
        if isinstance(v, str):
            m.string_value = v
        else:
            m.json_value = orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS).decode()
    return out


def _col(a: Any, dtype: Any) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)


def _flow_lists(ends: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per slice, the ids (index + 1) of the flows with that end, in flow order: (start, ids)."""
    order = np.argsort(ends, kind="stable")
    start = np.zeros(n + 1, np.int32 if len(ends) < 2**31 else np.int64)     # int32: half the memory
    np.cumsum(np.bincount(ends, minlength=n), out=start[1:])
    return start, (order + 1).astype(np.uint64)


def write(trace: Trace, out: BinaryIO) -> None:
    # a second thread, when there is a second core: pass 1 over the args beside the event stream's
    # sort, then half of each step's args (the kernels release the GIL)
    pool = ThreadPoolExecutor(1) if (os.cpu_count() or 1) > 1 else None
    try:
        _write(trace, out, pool)
    finally:
        if pool is not None:
            pool.shutdown()


def _write(trace: Trace, out: BinaryIO, pool: ThreadPoolExecutor | None) -> None:
    planned = pool.submit(ArgsPlan, trace) if pool is not None else None
    windows = event_windows(trace, _WINDOW)
    window = next(windows, None)             # the first window of the stream, sorted
    plan = planned.result() if planned is not None else ArgsPlan(trace)
    total = stream_length(trace)
    t0 = int(window[0][0]) if window is not None else 0       # the earliest time of all
    if t0 < 0:
        raise ValueError("negative timestamps cannot be written to a Perfetto trace")
    uuids = [t.id + 1 for t in trace.tracks]
    out.write(_header_packets(trace, uuids, t0).SerializeToString())

    report("writing Perfetto protobuf", 0, total)
    s, ins, cnt, flows = trace.slices, trace.instants, trace.counters, trace.flows
    s_name, i_name = _col(s.name, np.int32), _col(ins.name, np.int32)
    s_cat, i_cat = _col(s.cat, np.int32), _col(ins.cat, np.int32)
    strings = trace.strings
    for field_tag, sids in ((_I_NAMES, np.unique(np.concatenate([s_name, i_name]))),
                            (_I_CATS, np.unique(np.concatenate([s_cat, i_cat])))):
        sids = sids[sids != 0] if field_tag == _I_CATS else sids
        _interned_packets(out, field_tag, *_packed((sids + 1).tolist(), [_key(strings[i]) for i in sids.tolist()]))
    _interned_packets(out, _I_ANN, *plan.annotation_names())
    _interned_packets(out, _I_STRINGS, *plan.string_values())

    n = len(s)
    columns = (s.args, ins.args)

    def fallback(which: int, rows: np.ndarray) -> list[bytes]:
        col = columns[which]
        return [plan.python(col[r]) for r in rows.tolist()]

    enc = pbwrite.EventEncoder(
        codes=(BEGIN, END, INSTANT, COUNTER), seq_id=SEQ_ID, flags=SEQ_NEEDS,
        uuids=np.asarray(uuids, np.int64),
        slices=(_col(s.track, np.int32), s_name, s_cat, plan.s_data, plan.s_off),
        instants=(_col(ins.track, np.int32), i_name, i_cat, plan.i_data, plan.i_off),
        counters=(_col(cnt.track, np.int32), _col(cnt.value, np.float64).view(np.uint64)),
        flows_out=_flow_lists(_col(flows.src, np.int64), n), flows_in=_flow_lists(_col(flows.dst, np.int64), n),
        table=plan.table, strings=plan.strings, chunk=_CHUNK, last=t0, fallback=fallback, pool=pool)
    # the stream a window at a time, each in steps: the annotations of a step's rows exist for that
    # step only
    done = 0
    while window is not None:
        enc.stream = window
        size = len(window[0])
        for lo in range(0, size, _STEP):
            report("writing Perfetto protobuf", done + lo, total)
            for chunk in enc.run(lo, min(lo + _STEP, size)):
                out.write(chunk)
            s.args.forget()
            ins.args.forget()
        done += size
        window = next(windows, None)
    argtext.warn(trace.diagnostics, plan.python.counts)
