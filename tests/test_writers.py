"""Both writers on one model that holds every kind of event, decoded back and compared."""

from __future__ import annotations

from collections import Counter
import functools
import gzip

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceconv
from traceconv.model.layout import nest
from traceconv.model import Clock, Trace, TrackKind
from traceconv.writers.chrome_json import us

import perfetto_oracle as tp
from timeline import assert_same_timeline, from_model, read_chrome_json, read_perfetto

T0 = 1_763_700_000_123_456_789          # an epoch time in ns: µs doubles would lose its last digits
WEIRD = 'quote " backslash \\ newline \n tab \t ünïcødé 中文 🚀'


def build() -> Trace:
    t = Trace("test")
    t.meta.clock = Clock.UNIX
    t.meta.rank, t.meta.world_size = 3, 8
    t.meta.extra = {"note": "kitchen sink"}
    host = t.process(4242, "python3")
    host.sort_index = 1
    host.labels = ["CPU"]
    main = t.thread(host, 4242, "pt_main_thread")
    other = t.thread(host, 99, "")                       # unnamed: written as "thread 99"
    mx = t.process(17510480809887784029, "operator")      # a 64-bit MXNet category hash
    mx_thread = t.thread(mx, 2**64 - 5)
    spans = t.process("Spans")
    span_thread = t.thread(spans, "PyTorch Profiler")

    # nested, with a parent and child starting together, and a zero-length slice inside
    step = t.add_slice(main.track, T0, 10_000, "ProfilerStep#1", "user_annotation", {"step": 1})
    op = t.add_slice(main.track, T0, 4_000, "aten::mm", "cpu_op",
                     {"Input Dims": [[2, 3], [3, 4]], "nested": {"a": None, "b": True, "c": 1.5},
                      "huge": 2**64 - 1, "neg": -(2**63), "empty": {}, "none": None})
    t.add_slice(main.track, T0 + 1_000, 0, "zero", "cpu_op")
    # overlaps aten::mm without nesting: the naive BEGIN/END writer swaps their ends
    launch = t.add_slice(main.track, T0 + 3_000, 2_500, "cudaLaunchKernel", "cuda_runtime", {"correlation": 7})
    t.add_slice(main.track, T0 + 3_500, 1_000, "inside the overlap", "cpu_op")
    # a slice with several flows (v1 fallback) and a plain one (v2)
    a = t.add_slice(other.track, T0 + 20_000, 5_000, WEIRD, "cat,with,commas")
    b = t.add_slice(other.track, T0 + 30_000, 1_001, "b", None)
    c = t.add_slice(mx_thread.track, T0 + 31_000, 1, "c", "operator")
    t.add_flow(launch, c, "ac2g")
    t.add_flow(op, a, "fwdbwd")
    t.add_flow(a, b, "fwdbwd")
    t.add_slice(span_thread.track, T0, 40_000, "PyTorch Profiler (0)", "Trace")
    # async tracks, one per process and one global, with overlapping same-named work
    q = t.track(TrackKind.ASYNC, "queue", host)
    t.add_slice(q.id, T0 + 100, 5_000, "req 1", "async")
    t.add_slice(q.id, T0 + 200, 6_000, "req 2", "async")
    g = t.track(TrackKind.ASYNC, "global work")
    t.add_slice(g.id, T0 + 50, 70, "g", None)
    # instants: thread, process, global scope
    t.add_instant(main.track, T0 + 5, "[memory]", "cpu_instant_event", {"Bytes": -512})
    t.add_instant(t.process_track(host).id, T0 + 6, "Iteration Start", None)
    t.add_instant(g.id, T0 + 7, "Record Window End", None)
    # counters: a plain one with a unit, and one series of a Chrome "C" event
    mem = t.track(TrackKind.COUNTER, "GPU 0 allocated", host, unit="bytes")
    for k, v in enumerate([0.0, 1024.0, 512.5, 0.0]):
        t.add_counter(mem.id, T0 + k * 1_000, v)
    cpu = t.track(TrackKind.COUNTER, "cpu", host, series="cpu_percent")
    t.add_counter(cpu.id, T0 + 10, 12.5)
    assert step == 0
    return t


@pytest.fixture
def outputs(tmp_path):
    trace = build()
    traceconv.save(trace, tmp_path / "k.json")
    traceconv.save(trace, tmp_path / "k.json.gz")
    traceconv.save(trace, tmp_path / "k.pftrace")
    traceconv.save(trace, tmp_path / "k.pftrace.gz")
    return trace, tmp_path


def test_json_and_protobuf_describe_the_model(outputs):
    trace, d = outputs
    m = from_model(trace)
    j = read_chrome_json(d / "k.json")
    p = read_perfetto(d / "k.pftrace")
    assert_same_timeline(m, p)
    assert_same_timeline(j, p)
    assert_same_timeline(read_chrome_json(d / "k.json.gz"), read_perfetto(d / "k.pftrace.gz"))
    assert len(p.slices) == len(trace.slices) == 12
    assert len(p.flows) == 3 and len(p.counters) == 5 and len(p.instants) == 3


def test_overlapping_slices_keep_their_own_durations(outputs):
    """The naive-writer bug: overlapping slices on one thread take each other's ends."""
    trace, d = outputs
    for tl in (read_perfetto(d / "k.pftrace"), read_chrome_json(d / "k.json")):
        got = {s.name: (s.track, s.ts - T0, s.dur, s.depth) for s in tl.slices}
        assert got["aten::mm"] == ("pt_main_thread", 0, 4_000, 1)
        assert got["cudaLaunchKernel"] == ("pt_main_thread (overlap 1)", 3_000, 2_500, 0)
        assert got["inside the overlap"] == ("pt_main_thread (overlap 1)", 3_500, 1_000, 1)
        assert got["zero"] == ("pt_main_thread", 1_000, 0, 2)
        assert got["ProfilerStep#1"] == ("pt_main_thread", 0, 10_000, 0)
        assert got["req 1"][2] == 5_000 and got["req 2"][2] == 6_000
        assert {got["req 1"][0], got["req 2"][0]} == {"queue", "queue (overlap 1)"}
    warn = {w.code.value: w.count for w in trace.diagnostics.warnings}
    assert warn == {"overlap-lanes": 3}


def test_names_args_and_ids_survive(outputs):
    trace, d = outputs
    j = read_chrome_json(d / "k.json")
    for tl in (read_perfetto(d / "k.pftrace"), j):
        by_name = {s.name: s for s in tl.slices}
        assert WEIRD in by_name and by_name[WEIRD].cat == "cat,with,commas"
        args = orjson.loads(by_name["aten::mm"].args)
        # {} in a .pftrace: an annotation with no value, as null (the one form trace_processor loads)
        assert args == {"Input Dims": [[2, 3], [3, 4]], "nested": {"a": None, "b": True, "c": 1.5},
                        "huge": 2**64 - 1, "neg": -(2**63), "empty": {} if tl is j else None, "none": None}
        assert by_name["c"].process == "operator"
        assert by_name["PyTorch Profiler (0)"].process == "Spans"
        assert by_name["b"].track == "thread 99"
        assert by_name["g"].process == ""                      # a global track
        assert by_name["ProfilerStep#1"].tid == 4242


def test_pids_and_tids_fit_the_viewers(outputs):
    """Perfetto's JSON importer turns pids/tids outside 0..2^32-1 into 0, merging processes."""
    trace, d = outputs
    doc = orjson.loads((d / "k.json").read_bytes())
    pids = {e["pid"] for e in doc["traceEvents"]}
    tids = {e["tid"] for e in doc["traceEvents"] if "tid" in e}
    assert all(0 <= v < 2**31 for v in pids | tids)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {"python3", "operator", "Spans", "Global"}
    assert len(pids) == 4
    proc = [p for p in trace.processes if p.name == "operator"][0]
    assert proc.raw_pid == 17510480809887784029 and proc.pid != proc.raw_pid
    assert {p.raw_pid for p in trace.processes} >= {4242, "Spans"}


def test_timestamps_keep_nanoseconds_at_epoch_scale(outputs):
    trace, d = outputs
    doc = orjson.loads((d / "k.json").read_bytes())
    assert doc["baseTimeNanoseconds"] == T0 - T0 % 10**9
    step = [e for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#1"][0]
    assert step["ts"] == 0.123456789 * 1e6 or abs(step["ts"] - 123456.789) < 1e-6
    assert b'"ts":123456.789,' in (d / "k.json").read_bytes()
    p = read_perfetto(d / "k.pftrace")
    assert min(s.ts for s in p.slices) == T0
    assert us(T0) == "1763700000123456.789" and us(-1500) == "-1.500" and us(2000) == "2"


def test_metadata_in_both(outputs):
    trace, d = outputs
    j = read_chrome_json(d / "k.json").metadata
    p = read_perfetto(d / "k.pftrace").metadata
    for m in (j, p):
        assert m["traceconv"]["rank"] == 3 and m["traceconv"]["world_size"] == 8
        assert m["traceconv"]["clock"] == "unix" and m["note"] == "kitchen sink"


def test_gzip_outputs_are_gzip(outputs):
    """Each .gz is one gzip member of the plain output, deflated (method 8), its header naming no
    file and no time (flags 0, mtime 0): the same trace gives the same bytes, which a second save
    checks."""
    trace, d = outputs
    for name in ("k.json.gz", "k.pftrace.gz"):
        raw = (d / name).read_bytes()
        assert raw[:4] == b"\x1f\x8b\x08\x00" and raw[4:8] == b"\0\0\0\0", raw[:10]
        assert gzip.decompress(raw) == (d / name[:-3]).read_bytes()
        traceconv.save(trace, d / ("again." + name))
        assert (d / ("again." + name)).read_bytes() == raw


def test_protobuf_sequence_and_interning_rules(outputs):
    """Each sequence's first packet clears incremental state; interned ids are defined once, before
    use.  The descriptors and the metadata are a sequence of their own (1), before the events' (2):
    a thread descriptor on the events' sequence would make trace_processor give every instant on a
    global or process track a ``legacy_event.passthrough_utid`` arg naming that thread."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    _, d = outputs
    tr = pb.Trace()
    tr.ParseFromString((d / "k.pftrace").read_bytes())
    seqs = [p.trusted_packet_sequence_id for p in tr.packet]
    assert seqs == sorted(seqs) and set(seqs) == {1, 2}
    assert all(p.HasField("track_descriptor") or p.HasField("chrome_events") for p in tr.packet if p.trusted_packet_sequence_id == 1)
    assert not any(p.HasField("track_descriptor") for p in tr.packet if p.trusted_packet_sequence_id == 2)
    assert [p.first_packet_on_sequence for p in tr.packet].count(True) == 2
    for sid in (1, 2):
        opening = next(p for p in tr.packet if p.trusted_packet_sequence_id == sid)
        assert opening.first_packet_on_sequence and opening.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    first = next(p for p in tr.packet if p.trusted_packet_sequence_id == 2)
    defined: set[int] = set()
    descriptors = set()
    default = first.trace_packet_defaults.track_event_defaults.track_uuid
    assert default, "the busiest track is the sequence's default track"
    on_default = 0
    for p in tr.packet:
        if p.HasField("track_descriptor"):
            descriptors.add(p.track_descriptor.uuid)
        for e in p.interned_data.event_names:
            assert e.iid not in defined, "an event name interned twice"
            defined.add(e.iid)
        if p.HasField("track_event"):
            if p.track_event.HasField("track_uuid"):
                assert p.track_event.track_uuid in descriptors and p.track_event.track_uuid != default
            else:
                assert default in descriptors
                on_default += 1
            if p.track_event.name_iid:
                assert p.track_event.name_iid in defined
    per_track = Counter(p.track_event.track_uuid or default for p in tr.packet if p.HasField("track_event"))
    assert on_default == max(per_track.values()) == per_track[default]
    kinds = [p.track_descriptor for p in tr.packet if p.HasField("track_descriptor")]
    assert sum(k.HasField("process") for k in kinds) == 3        # "Global" is JSON-only: no process in proto
    assert sum(k.HasField("thread") for k in kinds) == 4
    assert sum(k.HasField("counter") for k in kinds) == 2
    unit = [k.counter.unit for k in kinds if k.HasField("counter") and k.name == "GPU 0 allocated"]
    assert unit == [pb.CounterDescriptor.UNIT_SIZE_BYTES]


def test_layout_is_idempotent_and_counted_once():
    trace = build()
    nest(trace)
    tracks = list(trace.slices.track)
    nest(trace)
    assert list(trace.slices.track) == tracks
    assert [w.count for w in trace.diagnostics.warnings] == [3]


def test_many_chunks_of_packets_lose_nothing(tmp_path, monkeypatch):
    """More packets than one step of the encoder holds (regression: every 4096th packet was written
    empty)."""
    from traceconv.writers import perfetto as pw
    monkeypatch.setattr(pw, "_STEP", 997)
    t = Trace("test")
    th = t.thread(t.process(1, "p"), 1, "t")
    n = 4096 * 2 + 7
    for i in range(n):
        t.add_slice(th.track, i * 10, 5 + i % 3, f"s{i % 5}", None, {"i": i} if i % 2 else None)
    traceconv.save(t, tmp_path / "big.pftrace")
    traceconv.save(t, tmp_path / "big.json")
    p = read_perfetto(tmp_path / "big.pftrace")
    assert len(p.slices) == n
    assert sorted((s.ts, s.dur) for s in p.slices) == [(i * 10, 5 + i % 3) for i in range(n)]
    assert_same_timeline(read_chrome_json(tmp_path / "big.json"), p)


def test_hand_encoded_tags_match_the_perfetto_protos():
    """The one tag table (``_core.encode.FIELDS``, which the compiled encoder writes by and the Python
    writer takes its tags from): every field number and wire type must be the protos' own, and every
    enum value and constant written the protos' own."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    from traceconv import _core
    from traceconv.writers import perfetto as pw
    from traceconv.writers.perfetto import TAGS, varint
    enc = _core.encode
    wire = {1: 1, 6: 1, 9: 2, 11: 2, 12: 2}     # double, fixed64: I64; string, message, bytes: LEN; else VARINT
    assert len(enc.FIELDS) >= 30
    for (message, field), (number, w) in enc.FIELDS.items():
        f = functools.reduce(getattr, message.split("."), pb).DESCRIPTOR.fields_by_name[field]
        assert (number, w) == (f.number, wire.get(f.type, 0)), (message, field)
        assert TAGS[message, field] == varint(number << 3 | w)
    assert set(TAGS) == set(enc.FIELDS)
    for message in ("EventCategory", "DebugAnnotationName", "InternedString"):   # laid out as EventName
        for field, same in (("iid", "iid"), ("name", "name"), ("str", "name")):
            if field in getattr(pb, message).DESCRIPTOR.fields_by_name:
                assert getattr(pb, message).DESCRIPTOR.fields_by_name[field].number == \
                    pb.EventName.DESCRIPTOR.fields_by_name[same].number
    assert (enc.TYPE_SLICE_BEGIN, enc.TYPE_SLICE_END, enc.TYPE_INSTANT, enc.TYPE_COUNTER) == \
        (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END, pb.TrackEvent.TYPE_INSTANT,
         pb.TrackEvent.TYPE_COUNTER)
    fields = pb.InternedData.DESCRIPTOR.fields_by_name
    for got, field in ((pw._I_CATS, "event_categories"), (pw._I_NAMES, "event_names"),
                       (pw._I_ANN, "debug_annotation_names"), (pw._I_STRINGS, "debug_annotation_string_values")):
        assert fields[field].number == got
    assert 64 <= pw.SEQ_CLOCK <= 127                          # a sequence-scoped clock id
    # the enum values the header packets write
    assert pw.BUILTIN_CLOCK_BOOTTIME == pb.BuiltinClock.BUILTIN_CLOCK_BOOTTIME
    assert pw.CHILD_ORDERING_EXPLICIT == pb.TrackDescriptor.EXPLICIT
    assert pw.SIBLING_MERGE_BY_KEY == pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY
    assert pw._UNITS == {"bytes": pb.CounterDescriptor.UNIT_SIZE_BYTES, "ns": pb.CounterDescriptor.UNIT_TIME_NS,
                         "count": pb.CounterDescriptor.UNIT_COUNT}
    assert (pw.SEQ_CLEARED, pw.SEQ_NEEDS) == (pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED,
                                              pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 200).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=80))))
def test_every_begin_carries_the_ids_of_its_slices_flows(case):
    # the encoder finds a slice's flows by a bit per slice and a count per 64
    # (rust/src/encode/packets.rs `Flows`): slices on both sides of a word's edge, several flows from or to one slice, a slice
    # flowing to itself; flow k is id k + 1, each slice's ids ascending
    import io
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    from traceconv.writers import perfetto
    n, flows = case
    t = Trace("test")
    th = t.thread(t.process(1, "p"), 1, "t")
    for i in range(n):
        t.add_slice(th.track, 10 * i + 10, 5, "s", None, None)     # begins in slice order
    for a, b in flows:
        t.add_flow(a, b)
    nest(t)
    buf = io.BytesIO()
    perfetto.write(t, buf)
    te = [q.track_event for q in pb.Trace.FromString(buf.getvalue()).packet if q.HasField("track_event")]
    begins = [e for e in te if e.type == 1]
    assert len(begins) == n
    assert [list(e.flow_ids) for e in begins] == [[k + 1 for k, (a, _) in enumerate(flows) if a == i] for i in range(n)]
    assert [list(e.terminating_flow_ids) for e in begins] == \
        [[k + 1 for k, (_, b) in enumerate(flows) if b == i] for i in range(n)]
    assert not any(e.flow_ids or e.terminating_flow_ids for e in te if e.type != 1)


def test_every_hand_written_field_decodes_as_the_protos_say(tmp_path):
    """Every field of the tag table, written by the compiled encoder into a whole trace, read back by
    perfetto_trace_pb2 as the field it was meant to be (a wrong number or wire type would fail to
    parse or land in another field)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    t = Trace("test")
    p = t.process(1, "p")
    th = t.thread(p, 1, "t")
    c = t.track(TrackKind.COUNTER, "c", p)
    a = t.add_slice(th.track, 10, 5, "s", "cat", {"i": -3, "u": 2**64 - 1, "b": True, "d": 0.5, "s": "v" * 30,
                                                   "n": {"k": [1, "v" * 30]}})
    t.add_slice(th.track, 30, 5, "s2", None, {"s": "v" * 30})
    b = t.add_slice(th.track, 40, 5, "s3", None, {"s": "v" * 30})
    t.add_flow(a, b)
    t.add_instant(th.track, 12, "i", None, {"s": "v" * 30})
    t.add_counter(c.id, 11, 2.5)
    traceconv.save(t, tmp_path / "f.pftrace")
    tr = pb.Trace.FromString((tmp_path / "f.pftrace").read_bytes())
    te = [q.track_event for q in tr.packet if q.HasField("track_event")]
    assert sorted(e.type for e in te) == [1, 1, 1, 2, 2, 2, 3, 4]
    assert [e.double_counter_value for e in te if e.type == 4] == [2.5]
    begin = next(e for e in te if e.type == 1 and e.category_iids)
    vals = {x.name_iid: x for x in begin.debug_annotations}
    assert sorted(x.WhichOneof("value") or "dict" for x in vals.values()) == \
        ["bool_value", "dict", "double_value", "int_value", "string_value_iid", "uint_value"]
    assert begin.flow_ids and any(e.terminating_flow_ids for e in te)
    interned = [q.interned_data for q in tr.packet if q.HasField("interned_data")]
    assert any(d.event_names for d in interned) and any(d.event_categories for d in interned)
    assert any(d.debug_annotation_names for d in interned) and any(d.debug_annotation_string_values for d in interned)
    assert all(q.trusted_packet_sequence_id == 2 for q in tr.packet if q.HasField("track_event"))


def test_annotation_values_decode_to_what_was_encoded():
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    from traceconv.writers.perfetto import value_fields
    from timeline import _ann_value
    for v in (0, 1, -1, -(2**63), 2**63 - 1, 2**63, 2**64 - 1, 2**70, -(2**63) - 1, 1.5, -0.0, 1e300, "",
              "ü \" \n", True, False, None, [], {}, [1, [2, "x"]], {"a": {"b": [None, 1.25]}}):
        a = pb.DebugAnnotation()
        a.ParseFromString(value_fields(v))
        want = str(v) if isinstance(v, int) and not -(2**63) <= v <= 2**64 - 1 else v
        want = None if want in ([], {}) else want        # no value field, as null
        assert _ann_value(a, {}) == want, v


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=50))
def test_varints_are_what_protobuf_encodes(values):
    """The writer's varints (prost's, through the compiled core) against protobuf's own encoding."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    from traceconv.writers.perfetto import varint
    for v in values:
        assert b"\x40" + varint(v) == pb.TracePacket(timestamp=v).SerializeToString()
    for v in (-1, -(2**63)):
        assert pb.DebugAnnotation.FromString(b"\x20" + varint(v)).int_value == v


def reference_stream(trace: Trace) -> list[tuple[int, int, int]]:
    """The writer's event order, spelled out: by time; at one time, ends of slices with a duration
    (deepest first), then begins in nesting order (track, start, longer first; a same-time flow's
    source first) with a zero-length slice's end right after its begin -- zero-length slices of
    one track and time nest in one another, so theirs come after the group's last begin, deepest
    first --, then instants, then counters; input order last."""
    from traceconv.model.layout import BEGIN, COUNTER, END, INSTANT
    s = trace.slices
    # nesting order: by track, start, longer first, input order (spelled out, not layout.slice_order)
    nesting = sorted(range(len(s)), key=lambda i: (s.track[i], s.ts[i], -s.dur[i], i))
    # at one time, a flow's source begins before its destination on another track: a level per
    # slice (a destination's is above its same-time source's; a slice's at least that of the ones
    # begun before it at that time on its track), begins by level, then nesting order
    level = dict.fromkeys(range(len(s)), 0)
    f = trace.flows
    same = [(f.src[k], f.dst[k]) for k in range(len(f))
            if s.ts[f.src[k]] == s.ts[f.dst[k]] and s.track[f.src[k]] != s.track[f.dst[k]]]
    for _ in range(64 if same else 0):
        before = dict(level)
        for a, b in same:
            level[b] = max(level[b], level[a] + 1)
        for prev, i in zip(nesting, nesting[1:]):
            if (s.track[prev], s.ts[prev]) == (s.track[i], s.ts[i]):
                level[i] = max(level[i], level[prev])
        if level == before:
            break
    nesting.sort(key=lambda i: level[i])          # (stable: nesting order within a level)
    pos = {i: k for k, i in enumerate(nesting)}
    group_last: dict[tuple[int, int], int] = {}       # (track, time) of zero-length slices -> last pos
    for i in range(len(s)):
        if s.dur[i] == 0:
            key = (s.track[i], s.ts[i])
            group_last[key] = max(group_last.get(key, -1), pos[i])
    keys = []
    for i in range(len(s)):
        ts, dur, depth = s.ts[i], s.dur[i], s.depth[i]
        keys.append((ts, 1, 2 * pos[i], 0, i, BEGIN))
        keys.append((ts, 1, 2 * group_last[(s.track[i], ts)] + 1, -pos[i], i, END) if dur == 0
                    else (ts + dur, 0, -depth, 1, i, END))
    for i in range(len(trace.instants)):
        keys.append((trace.instants.ts[i], 1, 1 << 40, 2, i, INSTANT))
    for i in range(len(trace.counters)):
        keys.append((trace.counters.ts[i], 1, 1 << 41, 3, i, COUNTER))
    return [(k[0], k[5], k[4]) for k in sorted(keys)]


def windows_concatenated(trace: Trace, size: int) -> list[tuple[int, int, int]]:
    from traceconv.model.layout import event_windows
    out = []
    for time, kind, index in event_windows(trace, size):
        out += zip(time.tolist(), kind.tolist(), index.tolist())
    return out


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 6), st.integers(0, 4)), min_size=1, max_size=40),
       st.integers(1, 9))
@settings(max_examples=40, deadline=None)
def test_the_windows_sorted_by_numpy_are_those_the_compiled_core_sorts(spec, size):
    # the NumPy way serves a stream past the compiled sort's keys (2^31 events, 2^16 - 1 edges)
    from traceconv.model import layout
    trace = tied_trace(spec)
    nest(trace)
    order = trace.slices.order
    compiled = windows_concatenated(trace, size)
    trace.slices.order = order
    saved = layout._KERNEL_EDGES
    layout._KERNEL_EDGES = 0
    try:
        assert windows_concatenated(trace, size) == compiled
    finally:
        layout._KERNEL_EDGES = saved


def tied_trace(spec: list[tuple[int, int, int]]) -> Trace:
    """Slices on 3 threads from (thread, start, duration), plus an instant and a counter at every
    fifth start: many events at one time, on several tracks and depths."""
    t = Trace("ties")
    p = t.process(1, "p")
    threads = [t.thread(p, k, f"t{k}") for k in range(3)]
    mem = t.track(TrackKind.COUNTER, "c", p)
    for k, (th, start, dur) in enumerate(spec):
        t.add_slice(threads[th].track, start, dur, f"s{k}", None)
        if k % 5 == 0:
            t.add_instant(threads[th].track, start, "i", None)
            t.add_counter(mem.id, start, float(k))
    return t


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 6), st.integers(0, 4)), max_size=40),
       st.integers(1, 9))
@settings(max_examples=60, deadline=None)
def test_the_stream_in_windows_is_the_whole_stream(spec, size):
    trace = tied_trace(spec)
    nest(trace)
    want = reference_stream(trace)
    assert windows_concatenated(trace, size) == want
    assert windows_concatenated(trace, 1 << 40) == want


@pytest.mark.parametrize("name", ["hta_critical_path_simple_add_trace.json.gz", "kineto_docs_after_fix_trace.json"])
def test_real_traces_stream_the_same_in_windows(name, tmp_path, monkeypatch):
    from pathlib import Path
    from traceconv.writers import perfetto as pw
    trace = traceconv.load(Path(__file__).parent / "fixtures" / "kineto" / name)
    nest(trace)
    want = reference_stream(trace)
    for size in (1, 7, 1000, 1 << 40):
        assert windows_concatenated(trace, size) == want
    traceconv.save(trace, tmp_path / "one.pftrace")
    monkeypatch.setattr(pw, "_WINDOW", 5)        # many windows, each in steps of 3 events
    monkeypatch.setattr(pw, "_STEP", 3)
    traceconv.save(trace, tmp_path / "many.pftrace")
    assert (tmp_path / "many.pftrace").read_bytes() == (tmp_path / "one.pftrace").read_bytes()


# ---------------------------------------------------------------- any valid JSON args, both writers

def _args_trace(texts: list[bytes]) -> Trace:
    t = Trace("args")
    th = t.thread(t.process(1, "p"), 1, "t")
    for k, text in enumerate(texts):
        t.add_slice(th.track, 1_000 * k, 500, f"s{k}", "args", text)
        t.add_instant(th.track, 1_000 * k + 600, f"i{k}", "args", text)
    return t


def _weird_rows():
    from test_pbwrite import dump, rows, styles, _has_surrogate, _strings_of

    @st.composite
    def row(draw):
        obj, style = draw(rows), draw(styles())
        if any(_has_surrogate(s) for s in _strings_of(obj)):
            style = {**style, "ascii": True}
        return dump(obj, style).encode("utf-8")
    deep = st.integers(1, 3000).map(lambda d: b'{"d":' + b'[{"k":' * d + b"null" + b"}]" * d + b"}")
    fixed = st.sampled_from([b'{"a":1e400,"b":-0,"c":1e308,"d":123456789012345678901234567890}',
                             b'{"":1,"":2,"a":"\\ud800","\\udfff":[{}],"n":null}', b'{"a":NaN}',
                             b'{"a":"\xff\xc3","\xed\xa0\x80":0.00026199999999998447}'])
    return st.one_of(row(), deep, fixed)


@settings(max_examples=60, deadline=None)
@given(st.lists(_weird_rows(), min_size=1, max_size=8))
def test_any_args_write_to_both_formats(tmp_path_factory, texts):
    """Whatever the args text (lone surrogates, huge numbers, -0, 1e308, empty and repeated keys,
    nesting thousands deep, NaN), both writers write it: the JSON output parses with orjson, the
    .pftrace decodes with perfetto_trace_pb2 (which stops at 100 nested messages)."""
    d = tmp_path_factory.mktemp("any")
    t = _args_trace(texts)
    traceconv.save(t, d / "a.json")
    traceconv.save(t, d / "a.pftrace")
    doc = orjson.loads((d / "a.json").read_bytes())
    assert sum(e.get("cat") == "args" for e in doc["traceEvents"]) == 2 * len(texts)
    tl = read_perfetto(d / "a.pftrace")
    assert len(tl.slices) == len(texts) and len(tl.instants) == len(texts)


def test_deep_args_do_not_recurse(tmp_path):
    """100,000 levels: no RecursionError in either writer; counted."""
    from traceconv.writers import argtext
    deep = b'{"d":' + b"[" * 100_000 + b"1" + b"]" * 100_000 + b"}"
    t = _args_trace([deep])
    traceconv.save(t, tmp_path / "a.json")
    traceconv.save(t, tmp_path / "a.pftrace")
    got = orjson.loads((tmp_path / "a.json").read_bytes())
    args = [e["args"] for e in got["traceEvents"] if e.get("cat") == "args"]
    inner = args[0]["d"]
    for _ in range(argtext.MAX_DEPTH - 1):
        inner = inner[0]
    assert inner == ["[" * (100_000 - argtext.MAX_DEPTH) + "1" + "]" * (100_000 - argtext.MAX_DEPTH)]
    assert {w.message: w.count for w in t.diagnostics.warnings}[argtext.DEEP] == 4     # 2 rows x 2 writers
    read_perfetto(tmp_path / "a.pftrace")


@tp.requires_trace_processor
def test_compact_encoding_keeps_every_value(tmp_path):
    """The writer's size choices, on the wire and as trace_processor reads them back: the busiest
    track is the sequence's default track (its events leave track_uuid out); names and categories
    each have their own iids, the most used first; a whole, non-negative counter value below 2^56
    is an int64 ``counter_value`` and every other one (-0.0, a fraction, 2^60, a negative) stays a
    ``double_counter_value``."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    t = Trace("compact")
    host = t.process(1, "host")
    busy, quiet = t.thread(host, 1, "busy"), t.thread(host, 2, "quiet")
    t.add_slice(quiet.track, T0, 10, "rare", "c1")
    for k in range(5):
        t.add_slice(busy.track, T0 + 100 * k, 50, "common", "c2", {"k": k})
    values = [3.0, 2.5, -0.0, 2.0**60, -7.0, 0.0, 2.0**55]
    mem = t.track(TrackKind.COUNTER, "mem", host)
    for k, v in enumerate(values):
        t.add_counter(mem.id, T0 + 1_000 + k, v)
    out = tmp_path / "c.pftrace"
    traceconv.save(t, out)
    tr = pb.Trace.FromString(out.read_bytes())
    default = next(p for p in tr.packet if p.HasField("trace_packet_defaults")).trace_packet_defaults.track_event_defaults.track_uuid
    uuid = {p.track_descriptor.thread.thread_name: p.track_descriptor.uuid
            for p in tr.packet if p.track_descriptor.HasField("thread")}
    assert default == uuid["busy"]
    events = [p.track_event for p in tr.packet if p.HasField("track_event")]
    assert sum(not e.HasField("track_uuid") for e in events) == 10          # 5 begins, 5 ends
    names = {e.name: e.iid for p in tr.packet for e in p.interned_data.event_names}
    cats = {e.name: e.iid for p in tr.packet for e in p.interned_data.event_categories}
    assert names == {"common": 1, "rare": 2}
    assert cats == {"c2": 1, "c1": 2}
    counters = [e for e in events if e.type == pb.TrackEvent.TYPE_COUNTER]
    assert [e.HasField("counter_value") for e in counters] == [True, False, False, False, False, True, True]
    assert [e.counter_value for e in counters if e.HasField("counter_value")] == [3, 0, 2**55]
    got = tp.query(out, "select c.value from counter c join counter_track t on c.track_id = t.id "
                        "where t.name = 'mem' order by c.ts")
    assert [r["value"] for r in got] == values
    assert tp.query(out, "select t.name as thread, s.name, s.category, s.dur from slice s "
                         "join thread_track tt on s.track_id = tt.id join thread t using (utid) "
                         "order by s.ts, t.name") == (
        [{"thread": "busy", "name": "common", "category": "c2", "dur": 50},
         {"thread": "quiet", "name": "rare", "category": "c1", "dur": 10}]
        + [{"thread": "busy", "name": "common", "category": "c2", "dur": 50}] * 4)
    assert tp.problems(out) == []


def _wire_fields(data: bytes) -> list[tuple[int, bytes]]:
    """The top-level fields of a protobuf message, in the order they are on the wire: (number, raw
    value: a varint's bytes, 8 or 4 bytes, or a length-delimited body)."""
    def varint(i: int) -> tuple[int, int]:
        v = shift = 0
        while True:
            b = data[i]
            v, shift, i = v | (b & 0x7F) << shift, shift + 7, i + 1
            if b < 0x80:
                return v, i
    out, i = [], 0
    while i < len(data):
        key, i = varint(i)
        wire = key & 7
        if wire == 0:
            _, j = varint(i)
        elif wire == 1:
            j = i + 8
        elif wire == 5:
            j = i + 4
        else:
            n, i = varint(i)
            j = i + n
        out.append((key >> 3, data[i:j]))
        i = j
    return out


def test_event_packets_end_with_their_timestamp(tmp_path):
    """An event packet's fields are its sequence id, its flags, its track event and last its
    timestamp: readers take fields in any order, and the one field that differs in every packet after
    the event makes the gzipped file smaller (test_compact_encoding_keeps_every_value loads such a
    file in trace_processor)."""
    out = tmp_path / "k.pftrace"
    traceconv.save(build(), out)
    packets = [body for number, body in _wire_fields(out.read_bytes()) if number == 1]
    events = [[n for n, _ in _wire_fields(p)] for p in packets if 11 in [n for n, _ in _wire_fields(p)]]
    assert len(events) > 20
    assert all(fields == [10, 13, 11, 8] for fields in events), events[:3]


@tp.requires_trace_processor
def test_a_counter_track_can_be_the_default_track(tmp_path):
    """When a counter track has the most events it is the sequence's default track, and its values
    (packets with no track_uuid) still land on it in trace_processor."""
    t = Trace("counters")
    host = t.process(1, "host")
    main = t.thread(host, 1, "main")
    t.add_slice(main.track, T0, 10, "s", "c")
    mem = t.track(TrackKind.COUNTER, "mem", host)
    for k in range(10):
        t.add_counter(mem.id, T0 + 10 * k, float(k))
    out = tmp_path / "c.pftrace"
    traceconv.save(t, out)
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    tr = pb.Trace.FromString(out.read_bytes())
    default = next(p for p in tr.packet if p.HasField("trace_packet_defaults")).trace_packet_defaults.track_event_defaults.track_uuid
    named = {p.track_descriptor.name: p.track_descriptor.uuid for p in tr.packet if p.HasField("track_descriptor")}
    assert default == named["mem"]
    assert tp.query(out, "select t.name, count(*) as n, sum(c.value) as s from counter c "
                         "join counter_track t on c.track_id = t.id group by t.name") == [{"name": "mem", "n": 10, "s": 45.0}]
    assert tp.query(out, "select name, dur from slice") == [{"name": "s", "dur": 10}]
    assert tp.problems(out) == []


@tp.requires_trace_processor
def test_slices_on_a_process_track_stay_off_its_main_thread(tmp_path):
    """A process track's slices (a recorded or merged trace's) are X events in JSON, which JSON puts
    on threads only: written with a pid alone, trace_processor put them on the main thread (tid =
    pid), where one that partly overlaps a main-thread slice spilled (error stat).  They go on a
    thread of their own, named after the track, with their flow; the process's instants stay
    process-scoped."""
    t = Trace("test")
    p = t.process(5, "worker")
    main = t.thread(p, 5, "main")
    pt = t.process_track(p)
    t.add_slice(main.track, 0, 1000, "a")
    t.add_slice(pt.id, 500, 4000, "on process")
    t.add_flow(0, 1)
    t.add_instant(pt.id, 700, "mark")
    out = tmp_path / "o.json"
    traceconv.save(t, out)
    tp.assert_loads(out)
    sql = ("select s.name, s.dur, t.type, thread.tid, thread.name as thread from slice s "
           "join track t on s.track_id = t.id left join thread_track tt on s.track_id = tt.id "
           "left join thread using(utid) order by s.ts")
    rows = [(r["name"], r["dur"], r["type"], r["tid"], r["thread"]) for r in tp.query(out, sql)]
    assert rows == [("a", 1000, "thread_execution", 5, "main"),
                    ("on process", 4000, "thread_execution", 2_000_000_001, "worker"),
                    ("mark", 0, "chrome_process_instant", None, None)]
    flows = tp.query(out, "select a.name as src, b.name as dst from flow f join slice a on f.slice_out = a.id "
                          "join slice b on f.slice_in = b.id")
    assert [(r["src"], r["dst"]) for r in flows] == [("a", "on process")]


def test_a_json_written_in_whole_us_does_not_reuse_the_order_of_the_times_before():
    # past 2^51 ns from its base the JSON writer floors times to whole µs on a copy of the trace:
    # ties can then break otherwise, so the order nest left (of the times before) is not the copy's
    import numpy as np
    from traceconv.model import Trace
    from traceconv.model.layout import slice_order, taken_order
    from traceconv.writers import chrome_json

    t = Trace("test")
    th = t.thread(t.process(1, "p"), 1, "main")
    t0 = 10**12
    t.add_slice(th.track, t0 + 100, 200, "short")        # before the long one, to the ns
    t.add_slice(th.track, t0 + 400, 5000, "long")        # at the same µs: first once floored
    t.add_slice(th.track, t0 + 2**52, 1000, "far")
    nest(t)
    assert t.slices.order.tolist() == [0, 1, 2]
    rng = t.time_range()
    out = chrome_json._whole_us(t, chrome_json.time_base(t, rng), rng)
    assert out is not t and out.slices.order is None
    assert taken_order(out).tolist() == slice_order(out).tolist() == [1, 0, 2]
    assert np.array_equal(taken_order(t), [0, 1, 2]) and t.slices.order is None     # (taken)


@tp.requires_trace_processor
def test_an_instant_off_the_threads_has_the_args_of_its_json(tmp_path):
    """Global and process instants carry in trace_processor the args they carry from the JSON: the
    descriptors sit on a sequence of their own, so the events' sequence names no thread, which
    trace_processor would give such an instant as a ``legacy_event.passthrough_utid`` arg."""
    src = tmp_path / "in.json"
    src.write_bytes(orjson.dumps({"traceEvents": [
        {"ph": "X", "name": "work", "pid": 1, "tid": 2, "ts": 0, "dur": 10, "args": {"k": 1}},
        {"ph": "i", "s": "g", "name": "global", "pid": 1, "tid": 2, "ts": 3, "args": {"g": "x"}},
        {"ph": "i", "s": "p", "name": "process", "pid": 1, "tid": 2, "ts": 4},
        {"ph": "i", "s": "t", "name": "thread", "pid": 1, "tid": 2, "ts": 5},
    ]}))
    traceconv.convert(src, tmp_path / "out.pftrace")
    sql = ("select s.name, a.key, a.display_value from slice s left join args a using(arg_set_id) "
           "where s.name != 'work' order by s.name, a.key")
    got = tp.query(tmp_path / "out.pftrace", sql)
    assert not any(r["key"] == "legacy_event.passthrough_utid" for r in got), got
    assert [(r["name"], r["display_value"]) for r in got if r["key"] and r["key"].startswith(("args.", "debug."))] == \
        [("global", "x")]
    assert tp.problems(tmp_path / "out.pftrace") == []


@tp.requires_trace_processor
def test_perfetto_shows_dots_and_brackets_of_arg_names_as_underscores_from_a_pftrace(tmp_path):
    """What the README says of arg names: trace_processor reads a debug annotation's name with its
    '.', '[' and ']' made '_' (and the JSON's as they are), while the .pftrace keeps the name."""
    src = tmp_path / "in.json"
    src.write_bytes(orjson.dumps({"traceEvents": [
        {"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": 0, "dur": 5, "args": {"est. occupancy %": 7, "a[0]": "x"}}]}))
    traceconv.convert(src, tmp_path / "out.pftrace")
    sql = "select a.key, a.display_value from slice s join args a using(arg_set_id) order by a.key"
    assert tp.query(tmp_path / "out.pftrace", sql) == [{"key": "debug.a_0_", "display_value": "x"},
                                                       {"key": "debug.est_ occupancy %", "display_value": "7"}]
    assert tp.query(src, sql) == [{"key": "args.a[0]", "display_value": "x"},
                                  {"key": "args.est. occupancy %", "display_value": "7"}]
    back = traceconv.load(tmp_path / "out.pftrace")
    assert back.slice_args(0) == {"est. occupancy %": 7, "a[0]": "x"}
