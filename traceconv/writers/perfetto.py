"""Perfetto TrackEvent protobuf writer.

Follows Perfetto's TrackEvent docs ("Writing TrackEvent protos synthetically"):

* the track descriptors and the metadata on a packet sequence of their own
  (``trusted_packet_sequence_id`` 1), the events on another (2; a merge of ranks writes one per
  rank, see :func:`write_sequences`, each laid out the same way): trace_processor takes a thread
  descriptor on the events' sequence as the thread that sequence writes from, and then gives an
  instant on a global or process track a ``legacy_event.passthrough_utid`` arg naming it, which
  the JSON the events came from does not give.  A sequence's first packet says
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
* the same first packet's ``TrackEventDefaults.track_uuid`` names the track
  with the most event packets, whose events then leave their ``track_uuid``
  out (2 bytes of each of most packets);
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
  after the descriptors and before the first event; names and categories each
  have their own iids, the most used first (one-byte varints for the 127 most
  used);
* a counter value that is a whole, non-negative number below 2^56 as an int64
  ``counter_value`` (its varint is shorter than a double), any other as
  ``double_counter_value``;
* args as debug annotations (nested dicts and lists kept as such, their keys
  as interned names too; ``null``, ``{}`` and ``[]`` as an annotation with no
  value, which trace_processor shows as no arg, as it does for the same JSON;
  see :func:`value_fields` and :mod:`traceconv.writers.argtext` for the values
  no client loads as they are);
* an event's packet holds, in this order, its sequence id and flags, its
  ``track_event`` and last its timestamp (protobuf readers take fields in any
  order; the one field that differs in every packet, after the event instead
  of before it, makes the gzipped file about 6 % smaller);
* flows as ``flow_ids`` on the source's begin and ``terminating_flow_ids`` on
  the destination's begin, one id per link of the model (a flow id in
  TrackEvent joins a chain, so a fan-out -- one source, several destinations --
  needs an id for each link: trace_processor's ``flow`` table then has every
  link).

How it is written: the few header packets (clock, descriptors, metadata) are
written here field by field from the one tag table (no pb2 message: importing
``perfetto_trace_pb2`` is most of a small conversion's start-up).  The event
packets -- millions of them --
and the interned data are encoded by the compiled core
(``rust/src/encode/``, ``traceconv._core.encode``): a first pass over all
args rows (serde_json) numbers their keys and counts their string values, a
second pass reads each row's JSON text again straight into
``DebugAnnotation`` bytes and writes the packets of a step of the event
stream; both passes first check a row against the shapes of the rows before
it (keys compared byte for byte, a value that repeats its text is not read
again) and read it whole only when it is not as predicted.  The rare rows it leaves alone (a key repeated in one object, a lone
surrogate escape, NaN, ...) are encoded by the Python reference here
(:func:`value_fields`).  With a second core, pass 1 runs beside the sort of
the event stream, each step's rows are split between two threads (the
core releases the GIL), and a step's packets are written (gzipped, for a
.gz) by a thread of their own while the next step is encoded; the output is
the same byte for byte.  Field numbers
come from one table, ``_core.encode.FIELDS``, which ``tests/test_writers.py``
checks against the pb2 descriptors; ``tests/test_pbwrite.py`` checks the
core's annotations against the Python reference (hypothesis), and whole
outputs are decoded with ``perfetto_trace_pb2``.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Iterable, Iterator

import msgspec
import numpy as np
import orjson

from .. import __version__, memory
from .._native import _core
from . import argtext
from ..model.layout import BEGIN, COUNTER, END, INSTANT, event_windows, nest, stream_length
from ..model import Trace, TrackKind
from ..io import Piece, WriteBehind, write_pieces
from ..progress import report

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

SEQ_ID = 1                # the descriptors' and the metadata's sequence
EVENTS_SEQ_ID = SEQ_ID + 1  # one trace's events (a merge's ranks: SEQ_ID + 1 + k)
SEQ_CLOCK = 64            # the sequence's incremental clock (ids 64..127 are sequence-scoped)
# the sibling_merge_key of the lanes of one track: this and the track's uuid
LANE_MERGE_KEY = "traceconv overlap lanes of"
_INTERNED_MAX = 1 << 20   # interned entries per packet, in bytes
_NEVER = 1 << 62           # parallel_rows that keep the compiled core on the calling thread
_STEP = 1 << 15           # events encoded per step (their annotations exist for that step only)
_WINDOW = 1 << 16         # events per window of the sorted stream (layout.event_windows)
_CACHE = 200_000          # Python-encoded arg values remembered (the cache starts over when full)
PARALLEL_ROWS = 8192      # pass 1's rows of a call, a step's events, go on two threads from this many
PIECE_EVENTS = 4096       # ... a step in pieces of this many events, taken in turn by the two threads
INTERN_STRINGS = True     # repeated string values as DebugAnnotation.string_value_iid
INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1

# Header packets (the sequence's clock, track descriptors, metadata), written by the one tag table:
# the writer needs no pb2 message (importing perfetto_trace_pb2 costs ~60 ms and ~13 MB, most of a
# small conversion's start-up).  Fields go in field-number order, as protobuf serializes them.
# Enum values of the protos the header uses (tests/test_writers.py checks them against pb2).
BUILTIN_CLOCK_BOOTTIME = 6
CHILD_ORDERING_EXPLICIT = 3                     # TrackDescriptor.ChildTracksOrdering.EXPLICIT
SIBLING_MERGE_BY_KEY = 3                        # TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY
_UNITS = {"bytes": 3, "ns": 1, "count": 2}      # CounterDescriptor.UNIT_SIZE_BYTES, UNIT_TIME_NS, UNIT_COUNT
SEQ_CLEARED = 1                                 # TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
SEQ_NEEDS = 2                                   # TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


# ---------------------------------------------------------------- protobuf wire format
#
# The compiled core's encoding, for the Python encoder of the rows it leaves alone: its varints and
# its one table of field numbers (``_core.encode.FIELDS``, checked against the pb2 descriptors).

_enc = _core.encode
_SMALL = [_enc.varint(i) for i in range(1 << 14)]


def varint(v: int) -> bytes:
    """Unsigned varint (negative int64 values as their 64-bit two's complement)."""
    if 0 <= v < 16384:
        return _SMALL[v]
    return _enc.varint(v)


# (message, field name) -> tag bytes, from the core's table
TAGS: dict[tuple[str, str], bytes] = {k: varint(n << 3 | w) for k, (n, w) in _enc.FIELDS.items()}
_T = TAGS
P_PACKET = _T["Trace", "packet"]
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
# field numbers of the interned-data lists
_I_CATS, _I_NAMES, _I_ANN, _I_STRINGS = (_enc.FIELDS["InternedData", f][0] for f in (
    "event_categories", "event_names", "debug_annotation_names", "debug_annotation_string_values"))
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


def _int_or_double(text: str) -> int | float:
    v = int(text)
    return v if INT64_MIN <= v <= UINT64_MAX else float(text)      # beyond 64 bits: a double, as orjson


def _no_constant(text: str) -> None:
    raise ValueError(text)


def _with_control_characters(raw: bytes) -> dict | None:
    """A row whose strings hold raw control characters (a tab, a newline: not JSON, which wants them
    escaped, but what the encoder before the compiled one took as they were), read by Python's own parser, which allows
    them (``strict=False``); None for any other row, or one that is still not plain JSON."""
    if not any(b < 0x20 for b in raw) or b"\\u" in raw:      # (escapes: argtext.clean's surrogate care)
        return None
    import json
    try:
        v = json.loads(raw.decode("utf-8"), strict=False, parse_int=_int_or_double, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    return v if isinstance(v, dict) else None


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
        v = _with_control_characters(raw)
        if v is None:
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
    """Pass 1 over every args row of the trace: the interned annotation names and string values
    (``parallel``: each step's rows in two halves on two threads)."""

    def __init__(self, trace: Trace, strings: bool = INTERN_STRINGS, parallel: bool = True) -> None:
        self.s_data, self.s_off = trace.slices.args.packed()
        self.i_data, self.i_off = trace.instants.args.packed()
        table = _enc.ArgsTable(strings)
        for col, data, off in ((trace.slices.args, self.s_data, self.s_off),
                               (trace.instants.args, self.i_data, self.i_off)):
            for lo in range(0, len(off) - 1, _STEP):     # a spilled column's pages a step at a time
                table.collect(data, off[lo:lo + _STEP + 1], PARALLEL_ROWS if parallel else _NEVER)
                col.forget()
        self.table = table
        # annotation names: numbered 1, 2, ... by first appearance
        iids, data, off = table.keys()
        self.key_iids = {bytes(data[off[j]:off[j + 1]]): int(iids[j]) for j in range(len(iids))}
        count, ln = table.value_stats()
        if strings and len(count):
            table.set_value_iids(_value_iids(count, ln))
        self.python = PythonArgs(self.key_iids)

    def annotation_names(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.table.keys()

    def string_values(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.table.string_values()


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


def _interned_packets(out: BinaryIO, seq_id: int, field: int, iids: np.ndarray, data: np.ndarray,
                      off: np.ndarray) -> None:
    """Interned entries in packets of at most about _INTERNED_MAX bytes each, on sequence ``seq_id``."""
    if len(iids):
        out.write(_enc.interned_packets(field, iids, data, off, seq_id, SEQ_NEEDS, _INTERNED_MAX))


def _field(message: str, field: str, value: "int | bool | str | bytes") -> bytes:
    """One field of ``message``: a varint, or a length-delimited string / message."""
    tag = TAGS[message, field]
    if isinstance(value, (bool, int)):
        return tag + varint(int(value))
    data = value.encode() if isinstance(value, str) else value
    return tag + varint(len(data)) + data


def _packet(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return P_PACKET + varint(len(body)) + body


def _defaults(default_uuid: int) -> bytes:
    """The sequence's TracePacketDefaults: its clock and (when not 0) its default track."""
    f = _field
    track = (f("TracePacketDefaults", "track_event_defaults", f("TrackEventDefaults", "track_uuid", default_uuid))
             if default_uuid else b"")
    return track + f("TracePacketDefaults", "timestamp_clock_id", SEQ_CLOCK)      # fields 11, 58


def _header_packets(trace: Trace, uuids: list[int]) -> bytes:
    """The file's first packets: the descriptors, then the metadata, on their own sequence (the
    first of them opens it)."""
    return _descriptor_packets(trace, uuids, opens=True) + _metadata_packet(trace, opens=not trace.tracks)


def _sequence_start(seq_id: int, t0: int, default_uuid: int, boot: int) -> bytes:
    """The first packet of sequence ``seq_id``: its clock -- timestamps are deltas on clock 64,
    which reads ``t0`` when BOOTTIME (the default trace clock) reads ``boot`` -- and its defaults."""
    if boot < 0:
        raise ValueError("negative timestamps cannot be written to a Perfetto trace")
    f = _field
    clock = "ClockSnapshot.Clock"
    clocks = (f("ClockSnapshot", "clocks", f(clock, "clock_id", BUILTIN_CLOCK_BOOTTIME) + f(clock, "timestamp", boot))
              + f("ClockSnapshot", "clocks", f(clock, "clock_id", SEQ_CLOCK) + f(clock, "timestamp", t0)
                  + f(clock, "is_incremental", True)))
    return _packet(f("TracePacket", "clock_snapshot", clocks),
                   f("TracePacket", "trusted_packet_sequence_id", seq_id),
                   f("TracePacket", "sequence_flags", SEQ_CLEARED),
                   f("TracePacket", "trace_packet_defaults", _defaults(default_uuid)),
                   f("TracePacket", "first_packet_on_sequence", True))


def _opening(opens: bool) -> tuple[bytes, bytes]:
    """The fields that make a packet the first of its sequence (``opens``), around its payload:
    ``sequence_flags`` (13) before it, ``first_packet_on_sequence`` (87) after it."""
    if not opens:
        return b"", b""
    return _field("TracePacket", "sequence_flags", SEQ_CLEARED), _field("TracePacket", "first_packet_on_sequence", True)


def _descriptor_packets(trace: Trace, uuids: list[int], opens: bool = False) -> bytes:
    """A TrackDescriptor for every track of ``trace`` (track ``k``'s uuid: ``uuids[k]``); ``opens``:
    the first one is the first packet of its sequence."""
    f = _field
    out = []
    proc_uuid = {t.process: uuids[t.id] for t in trace.tracks if t.kind is TrackKind.PROCESS}
    has_lanes = {t.parent for t in trace.tracks if t.kind is TrackKind.LANE and t.parent is not None}
    for t in trace.tracks:
        d = [f("TrackDescriptor", "uuid", uuids[t.id])]           # fields by number: 1 uuid, 2 name,
        name = process = thread = parent = counter = b""            # 3 process, 4 thread, 5 parent,
        lane = b""                                                  # 8 counter, 11.. ordering, lanes
        if t.kind is TrackKind.PROCESS:
            proc = trace.processes[t.process]
            process = f("ProcessDescriptor", "pid", proc.pid)
            if proc.sort_index is not None:
                process += f("ProcessDescriptor", "legacy_sort_index", proc.sort_index)
            if proc.name:
                process += f("ProcessDescriptor", "process_name", proc.name)
            process += b"".join(f("ProcessDescriptor", "process_labels", x) for x in proc.labels)
            process = f("TrackDescriptor", "process", process)
        elif t.kind is TrackKind.THREAD:
            th = trace.threads[t.thread]
            parent = f("TrackDescriptor", "parent_uuid", proc_uuid[th.process])
            thread = (f("ThreadDescriptor", "pid", trace.processes[th.process].pid) + f("ThreadDescriptor", "tid", th.tid)
                      + (f("ThreadDescriptor", "legacy_sort_index", th.sort_index) if th.sort_index is not None else b"")
                      + f("ThreadDescriptor", "thread_name", trace.track_label(t)))
            thread = f("TrackDescriptor", "thread", thread)
        else:
            if t.kind is TrackKind.LANE and t.parent is not None:
                # a lane is a child of its track (for a thread: a track of that thread in
                # trace_processor), merged with the other lanes of that track into one row of the UI,
                # in lane order
                parent = f("TrackDescriptor", "parent_uuid", uuids[t.parent])
                lane = (f("TrackDescriptor", "sibling_order_rank", t.lane)
                        + f("TrackDescriptor", "sibling_merge_behavior", SIBLING_MERGE_BY_KEY)
                        + f("TrackDescriptor", "sibling_merge_key", f"{LANE_MERGE_KEY} {uuids[t.parent]}"))
            elif t.process is not None:
                parent = f("TrackDescriptor", "parent_uuid", proc_uuid[t.process])
            name = f("TrackDescriptor", "name", trace.track_label(t))
            if t.kind is TrackKind.COUNTER:
                unit = _UNITS.get(t.unit or "")
                counter = (f("CounterDescriptor", "unit", unit) if unit is not None
                           else f("CounterDescriptor", "unit_name", t.unit) if t.unit else b"")
                counter = f("TrackDescriptor", "counter", counter)
        ordering = f("TrackDescriptor", "child_ordering", CHILD_ORDERING_EXPLICIT) if t.id in has_lanes else b""
        d += [name, process, thread, parent, counter, ordering, lane]
        before, after = _opening(opens and not out)
        out.append(_packet(f("TracePacket", "trusted_packet_sequence_id", SEQ_ID), before,
                           f("TracePacket", "track_descriptor", b"".join(d)), after))
    return b"".join(out)


def _thread_place(trace: Trace) -> Any:
    """The (pid, tid) of a thread track's descriptor."""
    return lambda t: (trace.processes[trace.threads[t.thread].process].pid, trace.threads[t.thread].tid)


def _metadata_packet(trace: Trace, opens: bool = False) -> bytes:
    """The trace's metadata (traceconv's own, then the source's) as a ChromeEventBundle (``opens``:
    the first packet of its sequence)."""
    f = _field
    meta = {"traceconv": {"version": __version__, **trace.meta.as_dict(), **trace.written_marks(_thread_place(trace))},
            **trace.meta.extra}
    entries = []
    for k, v in meta.items():
        value = (f("ChromeMetadata", "string_value", v) if isinstance(v, str)
                 else f("ChromeMetadata", "json_value", orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS)))
        entries.append(f("ChromeEventBundle", "metadata", f("ChromeMetadata", "name", k) + value))
    before, after = _opening(opens)
    return _packet(f("TracePacket", "chrome_events", b"".join(entries)),
                   f("TracePacket", "trusted_packet_sequence_id", SEQ_ID), before, after)


def _col(a: Any, dtype: Any) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)


def _contiguous(a: Any, dtype: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=dtype)


def _default_uuid(uuids: list[int], s_track: np.ndarray, i_track: np.ndarray, c_track: np.ndarray) -> int:
    """The uuid of the track with the most event packets (a slice is two: its begin and its end), which
    the sequence's TrackEventDefaults names so that its events leave their track_uuid out; 0 when
    there are no events."""
    if not uuids or not (len(s_track) or len(i_track) or len(c_track)):
        return 0
    n = len(uuids)
    count = 2 * np.bincount(s_track, minlength=n) + np.bincount(i_track, minlength=n) + np.bincount(c_track, minlength=n)
    return uuids[int(np.argmax(count))]


def _ahead(first: Any, windows: Any, pool: ThreadPoolExecutor | None) -> Any:
    """The windows of the stream, ``first`` then the rest of ``windows``; with a second core, the next
    one is sorted (on the pool's thread) while the caller encodes this one.  (What sorting and
    encoding a window freed stays in the heap for the next one, :func:`traceconv.memory.writing`:
    a trim after each window, which the next faulted in again page by page, cost the 1M
    conversion ~3 % of its CPU for a peak no lower; docs/design.md, *Thirty-seventh day*.)"""
    window = first
    while window is not None:
        upcoming = pool.submit(next, windows, None) if pool is not None else None
        yield window
        window = upcoming.result() if upcoming is not None else next(windows, None)


def _ranked_iids(s_ids: np.ndarray, i_ids: np.ndarray, n: int, zero_used: bool) -> tuple[np.ndarray, np.ndarray]:
    """Iids for the string ids of the slices' and instants' names (or categories: ``zero_used``
    False, where id 0 means none and stays 0): 1, 2, ... by how often each is used, the most used
    first (ties by string id).  Returns the iid of each string id (int32; 0: not used), and the
    string ids in iid order."""
    count = np.bincount(s_ids, minlength=n) + np.bincount(i_ids, minlength=n)
    if not zero_used:
        count[0] = 0
    order = np.argsort(-count, kind="stable")
    used = order[:int(np.count_nonzero(count))]
    iid = np.zeros(n, np.int32)
    iid[used] = np.arange(1, len(used) + 1, dtype=np.int32)
    return iid, used


def write(trace: Trace, out: BinaryIO, *, threads: bool = True) -> None:
    """``trace`` as a Perfetto trace on ``out``, its slices first laid out on nested tracks
    (:func:`~traceconv.model.layout.nest`, a no-op on a nested trace) while the second thread makes
    pass 1 over the args, which reads no track (1M events: 0.164-0.168 -> 0.140-0.145 s from
    there to the first window sorted).  ``threads`` False: on the calling thread only (the
    recorder's flushes, which must not take a core from the program, and may run at interpreter
    exit, when no thread can start)."""
    with _two_threads(threads) as pool:
        planned = pool.submit(ArgsPlan, trace) if pool is not None else None
        nest(trace)
        uuids = [t.id + 1 for t in trace.tracks]
        events = _Events(trace, uuids, pool, planned)
        out.write(_header_packets(trace, uuids)
                  + _sequence_start(EVENTS_SEQ_ID, events.t0, events.default_uuid, events.t0))
        events.write(out, EVENTS_SEQ_ID)


@contextlib.contextmanager
def _two_threads(wanted: bool = True) -> Iterator[ThreadPoolExecutor | None]:
    """A second thread, when there is a second core: pass 1 over the args beside the sort of the
    stream's first window, then each next window sorted while this one is encoded (the compiled
    core releases the GIL, and splits a step's args rows over two threads of its own)."""
    pool = None
    if wanted and (os.cpu_count() or 1) > 1:
        from concurrent.futures import ThreadPoolExecutor    # (not imported without threads: see io.WriteBehind)
        pool = ThreadPoolExecutor(1)
    try:
        yield pool
    finally:
        if pool is not None:
            pool.shutdown()


@dataclass
class Sequence:
    """The events of a trace encoded as a packet sequence of their own (:func:`encode_sequence`),
    for a file assembled elsewhere (:func:`write_sequences`): its id, the time of its first event
    (where its incremental clock starts), the track its events leave out, and the packets (its
    interned data, then its events), which need a first packet saying all that before them: in
    ``packets``, or, when it was encoded into a file, in the file ``file`` (``size`` bytes)."""
    seq_id: int
    t0: int
    default_uuid: int
    packets: bytes = b""
    file: str | None = None
    size: int = 0


def encode_sequence(trace: Trace, seq_id: int, uuids: list[int], flow_ids: tuple[int, int] = (1, 0), *,
                    threads: bool = True, file: str | None = None) -> Sequence:
    """The events of ``trace`` (nested) as sequence ``seq_id``: its tracks are ``uuids`` (one per
    track, unique in the file) and its flows' ids ``(k + 1) * scale + base`` for ``flow_ids = (scale,
    base)`` (unique in the file when each sequence has its own base below one scale).  ``threads``
    False: on this thread only (where other processes already keep the cores busy).  ``file``: the
    packets are written to that new file instead of memory (a merge's worker on this machine: the
    main process then copies them into the merged file, and they never travel through a pipe)."""
    with _two_threads(threads) as pool:
        events = _Events(trace, uuids, pool)
        if file is None:
            buf = io.BytesIO()
            events.write(buf, seq_id, flow_ids)
            return Sequence(seq_id, events.t0, events.default_uuid, buf.getvalue(), size=buf.tell())
        with open(file, "wb") as f:
            events.write(f, seq_id, flow_ids)
            size = f.tell()
    return Sequence(seq_id, events.t0, events.default_uuid, file=file, size=size)


def write_sequences(trace: Trace, uuids: list[int], sequences: Iterable[Sequence], offsets: Iterable[int],
                    out: BinaryIO) -> None:
    """A file of sequences encoded elsewhere: the descriptors of ``trace``'s tracks (``uuids``, the
    uuids the sequences use) and its metadata, then for each sequence and its offset (ns on the
    trace's clock) the sequence's first packet, its clock moved by the offset, and its packets
    (copied from its file by the kernel where it can: :func:`traceconv.io.write_pieces`)."""
    pieces: list[Piece] = [_header_packets(trace, uuids)]
    for seq, offset in zip(sequences, offsets):
        pieces.append(_sequence_start(seq.seq_id, seq.t0, seq.default_uuid, seq.t0 + offset))
        pieces.append((seq.file, seq.size) if seq.file is not None else seq.packets)
    write_pieces(out, pieces)


class _Events:
    """The event packets of a trace (nested: :func:`traceconv.model.layout.nest`), planned: pass 1
    over the args, the stream's first window sorted, where the sequence's clock starts (``t0``) and
    its default track; :meth:`write` writes the interned data and the events."""

    def __init__(self, trace: Trace, uuids: list[int], pool: ThreadPoolExecutor | None,
                 planned: "Future[ArgsPlan] | None" = None) -> None:
        self.trace, self.uuids, self.pool = trace, uuids, pool
        if planned is None and pool is not None:
            planned = pool.submit(ArgsPlan, trace)
        self.windows = event_windows(trace, _WINDOW)
        self.window = next(self.windows, None)             # the first window of the stream, sorted
        self.plan = planned.result() if planned is not None else ArgsPlan(trace, parallel=False)
        self.t0 = int(self.window[0][0]) if self.window is not None else 0       # the earliest time of all
        if self.t0 < 0:
            raise ValueError("negative timestamps cannot be written to a Perfetto trace")
        s, ins, cnt = trace.slices, trace.instants, trace.counters
        self.tracks = (_col(s.track, np.int32), _col(ins.track, np.int32), _col(cnt.track, np.int32))
        self.default_uuid = _default_uuid(uuids, *self.tracks)

    def write(self, out: BinaryIO, seq_id: int, flow_ids: tuple[int, int] = (1, 0)) -> None:
        trace, plan, pool = self.trace, self.plan, self.pool
        s, ins, cnt, flows = trace.slices, trace.instants, trace.counters, trace.flows
        s_track, i_track, c_track = self.tracks
        total = stream_length(trace)
        report("writing Perfetto protobuf", 0, total)
        strings = trace.strings
        # names and categories: each its own iid space, the most used first (the shortest varints)
        s_name, i_name = _col(s.name, np.int32), _col(ins.name, np.int32)
        s_cat, i_cat = _col(s.cat, np.int32), _col(ins.cat, np.int32)
        name_iids, names = _ranked_iids(s_name, i_name, len(strings), True)
        cat_iids, cats = _ranked_iids(s_cat, i_cat, len(strings), False)
        for field, sids in ((_I_NAMES, names), (_I_CATS, cats)):
            _interned_packets(out, seq_id, field,
                              *_packed(list(range(1, len(sids) + 1)), [_key(strings[i]) for i in sids.tolist()]))
        _interned_packets(out, seq_id, _I_ANN, *plan.annotation_names())
        _interned_packets(out, seq_id, _I_STRINGS, *plan.string_values())

        columns = (s.args, ins.args)

        def fallback(which: int, rows: np.ndarray) -> list[bytes]:
            col = columns[which]
            return [plan.python(col[r]) for r in rows.tolist()]

        enc = _enc.EventEncoder(
            plan.table, (BEGIN, END, INSTANT, COUNTER), seq_id, SEQ_NEEDS, np.asarray(self.uuids, np.int64),
            (name_iids, cat_iids),
            (s_track, s_name, s_cat, _contiguous(plan.s_data, np.uint8), _contiguous(plan.s_off, np.int64)),
            (i_track, i_name, i_cat, _contiguous(plan.i_data, np.uint8), _contiguous(plan.i_off, np.int64)),
            (c_track, _col(cnt.value, np.float64).view(np.uint64)),
            _col(flows.src, np.int64), _col(flows.dst, np.int64),
            self.t0, default_uuid=self.default_uuid, parallel_rows=PARALLEL_ROWS if pool is not None else _NEVER,
            flow_ids=flow_ids, piece_events=PIECE_EVENTS)
        # the stream a window at a time, each in steps: the annotations of a step's rows exist for
        # that step only.  With a second core each step's packets are written (and compressed, for
        # a .gz) by a thread of their own while the next step is encoded (io.WriteBehind).  A
        # file's own writer (and BytesIO) is done with the bytes it is given when write() returns,
        # so there the steps' packets go through two buffers in turn, each filled again once its
        # write is done (made anew for each step, it was ~700 pages the system zeroed per step);
        # any other file object gets a buffer of its own for each step.  On one thread (a merge's
        # worker, which keeps what it frees for the next step anyway) the encoder's bytes are
        # handed over as they are: a buffer beside them would only add to the worker's peak.
        reuse = pool is not None and type(out) in (io.BufferedWriter, io.FileIO, io.BytesIO)
        buffers: list[Any] = [None, None]
        step = 0
        done = 0
        memory.trim()                   # (what pass 1 and sorting the first window freed)
        with WriteBehind(out, threaded=pool is not None) as sink:
            for time, kind, index in _ahead(self.window, self.windows, pool):
                size = len(time)
                for lo in range(0, size, _STEP):
                    report("writing Perfetto protobuf", done + lo, total)
                    hi = min(lo + _STEP, size)
                    turn = step & 1
                    buf, n = enc.run(time[lo:hi], kind[lo:hi], index[lo:hi], fallback, buffers[turn] if reuse else None)
                    buffers[turn] = buf
                    # (a memoryview: a plain buffer to any file object, never an array to add to)
                    sink.write(memoryview(buf)[:n])
                    step += 1
                    s.args.forget()
                    ins.args.forget()
                done += size
        argtext.warn(trace.diagnostics, plan.python.counts)
