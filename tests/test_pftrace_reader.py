"""traceconv's own .pftrace read back into the model (``traceconv.readers.pftrace``): what the
recorder's stop merges and relinks.  Each slice comes back as it was written: name, start,
duration, category and args, also where slices overlap on a thread (its overlap lanes)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traceconv
from fuzz.readback import compare, damaged, same_trace
from traceconv import _core
from traceconv.errors import TraceconvError, WarningCode
from traceconv.model import Trace, TrackKind
from traceconv.model.args import decode_args
from traceconv.readers import pftrace as reader
from traceconv.readers.pftrace import read_pftrace

FIX = Path(__file__).parent / "fixtures"


def both(path: Path) -> Trace:
    """The compiled reading of ``path``, checked against the reference's; it must not decline."""
    assert reader._read_compiled(path.read_bytes()) is not None
    t = read_pftrace(path)
    same_trace(t, read_pftrace(path, compiled=False))
    return t


def slices(t: Trace) -> Counter:
    s = t.slices
    return Counter((t.strings[n], t.strings[c], ts, d, repr(t.slice_args(i)))
                   for i, (n, c, ts, d) in enumerate(zip(s.name, s.cat, s.ts, s.dur)))


def test_overlapping_slices_on_one_thread_come_back_whole(tmp_path):
    """Slices that overlap without nesting are written on overlap lanes of their thread; each
    lane's begins and ends pair on that lane (paired on the thread, A [0, 10] and B [5, 15] came
    back as B [5, 10] and A [0, 15])."""
    t = Trace("x")
    th = t.thread(t.process(1, "p", pid=1), 1, "t")
    t.add_slice(th.track, 0, 10_000, "A", "c", {"k": 1})
    t.add_slice(th.track, 5_000, 10_000, "B")
    t.add_slice(th.track, 6_000, 1_000, "B.inner")
    t.add_slice(th.track, 12_000, 1_000, "C")
    out = tmp_path / "ov.pftrace"
    traceconv.save(t, out)
    assert slices(both(out)) == slices(t)


@pytest.mark.parametrize("fixture", [
    "lanes/with_stack_overlap.pt.trace.json",
    "kineto/generated_torch213_cpu_single_worker0.pt.trace.json.gz",
    "mlagents/python_SoccerTwos_run_logs_timers.json",
])
def test_a_conversion_reads_back_slice_for_slice(tmp_path, fixture):
    t = traceconv.load(FIX / fixture)
    out = tmp_path / "t.pftrace"
    traceconv.save(t, out)
    back = both(out)
    assert slices(back) == slices(t) and len(back.slices) == len(t.slices) > 0


ARG = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
                   | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
                   lambda inner: st.lists(inner, min_size=1, max_size=3)
                   | st.dictionaries(st.text(min_size=1, max_size=4), inner, min_size=1, max_size=3),
                   max_leaves=6)


@st.composite
def traces(draw):
    """Slices that nest, overlap and repeat on a few threads of two processes, instants, counters
    and args of every JSON kind (a null or an empty container at the top of the args reads back
    as ``None``: the writer gives it no value field)."""
    t = Trace("drawn")
    threads = [t.thread(t.process(p, f"p{p}", pid=p), tid, f"t{tid}") for p, tid in ((1, 1), (1, 2), (2, 3))]
    for _ in range(draw(st.integers(1, 30))):
        th = draw(st.sampled_from(threads))
        ts, dur = draw(st.integers(0, 10_000)), draw(st.integers(0, 3_000))
        args = draw(st.none() | st.dictionaries(st.sampled_from(["a", "b", "flow_out", "x y"]), ARG, max_size=3))
        name, cat = draw(st.sampled_from(["step", "fwd", "bwd", "é"])), draw(st.sampled_from([None, "c", "d"]))
        if draw(st.booleans()):
            t.add_slice(th.track, ts, dur, name, cat, args)
        else:
            t.add_instant(th.track, ts, name, cat, args)
    mem = t.track(TrackKind.COUNTER, "mem", t.processes[0])
    for k in range(draw(st.integers(0, 4))):
        t.add_counter(mem.id, 100 * k, draw(st.floats(-1e9, 1e9)))
    if len(t.slices):
        for _ in range(draw(st.integers(0, 6))):           # flows, also backwards in time and to itself
            t.add_flow(*draw(st.tuples(*[st.integers(0, len(t.slices) - 1)] * 2)))
    return t


def flows(t: Trace) -> Counter:
    def end(i):
        return t.strings[t.slices.name[i]], t.slices.ts[i], t.slices.dur[i]
    return Counter((end(s), end(d)) for s, d in zip(t.flows.src, t.flows.dst))


def instants(t: Trace) -> Counter:
    i = t.instants
    label = {tr.id: t.track_label(tr) for tr in t.tracks}
    return Counter((label[tr], t.strings[n], t.strings[c], ts, repr(decode_args(i.args[k])))
                   for k, (tr, n, c, ts) in enumerate(zip(i.track, i.name, i.cat, i.ts)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(traces())
def test_any_trace_reads_back_as_it_was_written(tmp_path, t):
    out = tmp_path / "d.pftrace"
    traceconv.save(t, out)
    back = both(out)
    assert slices(back) == slices(t) and instants(back) == instants(t) and flows(back) == flows(t)
    assert Counter(zip(back.counters.ts, back.counters.value)) == Counter(zip(t.counters.ts, t.counters.value))


def test_a_chunked_recording_reads_the_same_both_ways(tmp_path):
    """A recording in chunks of 16 events (each clears its sequence's state and describes its tracks
    again), threads named after their first chunk, counters, instants, args and overlapping spans of
    two threads: the compiled reader's trace is the reference's."""
    import threading

    import traceconv.record as rec
    out = tmp_path / "rec.pftrace"
    rec.start(out, buffer=16, workers=False)

    def work(k):
        for i in range(60):
            with rec.span("step", i=i, lr=0.5 ** i, tag=f"t{k}", shape=[i, [k], {}]):
                rec.instant("tick", n=i)
                rec.counter("queue", i * k + 0.25)
            if i == 20:
                rec.name_thread(f"worker {k}")
    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outer = rec.span("outer")
    outer.__enter__()
    with rec.span("inner"):
        pass
    rec.stop()
    t = both(out)
    queue = {tr.id for tr in t.tracks if tr.name == "queue"}
    assert sum(t.strings[n] == "step" for n in t.slices.name) == 120
    assert sum(k in queue for k in t.counters.track) == 120
    assert {th.name for th in t.threads} >= {"worker 0", "worker 1"}


def _packet(**fields) -> bytes:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    tr = pb.Trace()
    tr.packet.add(**fields)
    return tr.SerializeToString()


def _event(annotations: list, interned=None) -> bytes:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    te = pb.TrackEvent(type=pb.TrackEvent.TYPE_INSTANT, name="e", track_uuid=7, debug_annotations=annotations)
    d = pb.TracePacket(track_descriptor=pb.TrackDescriptor(uuid=7, name="t")).SerializeToString()
    p = pb.TracePacket(timestamp=5, trusted_packet_sequence_id=1, track_event=te, interned_data=interned,
                       sequence_flags=1)
    return b"\x0a" + bytes([len(d)]) + d + pb.Trace(packet=[p]).SerializeToString()


def _declined(tmp_path, data: bytes, why: str) -> Trace:
    f = tmp_path / "x.pftrace"
    f.write_bytes(data)
    assert _core.readback.read(data) == why
    t = read_pftrace(f)
    same_trace(t, read_pftrace(f, compiled=False)) if (t.fixed_args, t.saturated) == (0, 0) else None
    return t


def test_what_the_compiled_reader_declines_the_reference_reads(tmp_path):
    """Annotations traceconv never writes, a key twice, text that is not UTF-8, a double that is
    not finite: the compiled reader says why, and the reference reads the file (its args as the
    model makes them strict JSON)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    A = pb.DebugAnnotation
    t = _declined(tmp_path, _event([A(name="k", int_value=1), A(name="k", int_value=2)]), "a key twice in one object")
    assert decode_args(t.instants.args[0]) == {"k": 2}
    t = _declined(tmp_path, _event([A(name="n", nested_value=A.NestedValue(int_value=3))]),
                  "an annotation value traceconv does not write")
    assert list(decode_args(t.instants.args[0])) == ["n"] and t.fixed_args == 1
    t = _declined(tmp_path, _event([A(name="x", double_value=float("nan"))]), "a double that is not finite")
    assert t.fixed_args == 1 and len(t.instants) == 1
    bad = pb.InternedData(debug_annotation_string_values=[pb.InternedString(iid=1, str=b"\xff")])
    t = _declined(tmp_path, _event([A(name="s", string_value_iid=1)], bad), "text that is not UTF-8")
    assert decode_args(t.instants.args[0]) == {"s": "?"} and t.fixed_args == 1      # (a lone surrogate replaced)
    t = _declined(tmp_path, _packet(trusted_packet_sequence_id=1, timestamp=3, trace_config={}),
                  "a packet field traceconv does not write")
    assert len(t.slices) == len(t.instants) == 0


def test_a_file_cut_inside_a_packet_is_read_up_to_it_both_ways(tmp_path):
    t = Trace("x")
    th = t.thread(t.process(1, "p", pid=1), 1, "t")
    for k in range(50):
        t.add_slice(th.track, 1_000 * k, 500, f"s{k % 3}", None, {"k": k})
    whole = tmp_path / "whole.pftrace"
    traceconv.save(t, whole)
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(whole.read_bytes()[:-7])
    back = both(cut)
    assert 0 < len(back.slices) < 50
    assert not isinstance(_core.readback.read(b"\x0a\x80"), dict)          # a length cut short: the reference
    with pytest.raises(TraceconvError, match="not a Perfetto trace"):
        (tmp_path / "no.pftrace").write_bytes(b"{}")
        read_pftrace(tmp_path / "no.pftrace")


def test_the_packet_framing_stops_at_a_cut_length_and_tells_a_framed_head():
    """``packets`` yields whole packets only: a length cut by the end (once read as an empty packet)
    or past 10 bytes ends it.  A head is taken for packets (and Perfetto's protobuf module
    imported) only if it is packets to its end or to a packet the head cuts: a JSON text that
    starts with a newline, as most real Kineto files do, is not."""
    from traceconv.readers.pftrace_head import _packet_at, packets
    assert list(packets(b"\n\x02ab\n")) == list(packets(b"\n\x02ab\n\x80")) == [(b"ab", 4)]
    assert list(packets(b"\n" + b"\xff" * 10 + b"\x01" + b"x" * 64)) == []
    assert _packet_at(b"\n\x02ab", 0) == (2, 4) and _packet_at(b"xx\n\x01ab", 2) == (4, 5)
    assert all(_packet_at(cut, 0) is True for cut in (b"\n", b"\n\x80", b"\n\x05abc"))
    assert all(_packet_at(other, 0) is False for other in (b"", b"{", b"\n" + b"\xff" * 12))
    events = ",\n".join(f'  {{"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": {k}, "dur": 1}}'
                        for k in range(40))
    kineto = f'\n{{\n  "schemaVersion": 1,\n  "traceEvents": [\n{events}\n]}}\n'.encode()
    whole = list(packets(kineto))
    assert whole and _packet_at(kineto, whole[-1][1]) is False
    from traceconv.readers.pftrace_head import claims, sniff
    assert not claims(kineto) and not sniff(kineto)


def test_a_track_described_again_differently_after_its_first_use_goes_to_the_reference(tmp_path):
    """A counter track renamed between two of its values: the reference makes a second track for
    the later value; the compiled reader keeps one track per uuid, so it declines such a file."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    T = pb.TracePacket

    def desc(name):
        return T(track_descriptor=pb.TrackDescriptor(uuid=9, name=name, counter=pb.CounterDescriptor()))

    def value(v):
        return T(timestamp=10 * v, trusted_packet_sequence_id=1,
                 track_event=pb.TrackEvent(type=pb.TrackEvent.TYPE_COUNTER, track_uuid=9, counter_value=v))
    f = tmp_path / "renamed.pftrace"
    f.write_bytes(pb.Trace(packet=[desc("a"), value(1), desc("b"), value(2)]).SerializeToString())
    assert isinstance(_core.readback.read(f.read_bytes()), dict) and reader._read_compiled(f.read_bytes()) is None
    t = read_pftrace(f)
    assert [t.tracks[k].name for k in t.counters.track] == ["a", "b"]
    f.write_bytes(pb.Trace(packet=[desc("a"), value(1), desc("a"), value(2)]).SerializeToString())
    assert [t.tracks[k].name for k in both(f).counters.track] == ["a", "a"]      # the same again: kept
    assert len(_core.readback.read(f.read_bytes())["others"]) == 1               # (and not handed over)


def test_a_parent_described_again_differently_goes_to_the_reference(tmp_path):
    """A counter's place is its parent's process.  Its parent described again with another pid,
    and the counter described again as it was (as each chunk of a recording describes every
    track): the reference puts the later value on the other process's counter, so the compiled
    reader declines.  It checked only a track whose own descriptor changed, and read both values
    onto one track (found by damaging a chunked recording's bytes)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    T = pb.TracePacket

    def proc(pid):
        return T(track_descriptor=pb.TrackDescriptor(uuid=3, process=pb.ProcessDescriptor(pid=pid)))

    def value(v):
        return T(timestamp=10 * v, trusted_packet_sequence_id=1,
                 track_event=pb.TrackEvent(type=pb.TrackEvent.TYPE_COUNTER, track_uuid=9, counter_value=v))
    counter = T(track_descriptor=pb.TrackDescriptor(uuid=9, parent_uuid=3, name="mem", counter=pb.CounterDescriptor()))
    f = tmp_path / "moved.pftrace"
    f.write_bytes(pb.Trace(packet=[proc(1), counter, value(1), proc(2), counter, value(2)]).SerializeToString())
    assert reader._read_compiled(f.read_bytes()) is None
    t = read_pftrace(f)
    assert [t.processes[t.tracks[k].process].pid for k in t.counters.track] == [1, 2]
    f.write_bytes(pb.Trace(packet=[proc(1), counter, value(1), proc(1), counter, value(2)]).SerializeToString())
    assert [t.processes[t.tracks[k].process].pid for k in both(f).counters.track] == [1, 1]


def _sample() -> bytes:
    t = Trace("x")
    th = t.thread(t.process(1, "p", pid=1), 1, "t")
    mem = t.track(TrackKind.COUNTER, "mem", t.processes[0])
    for k in range(6):
        t.add_slice(th.track, 1_000 * k, 700 + 100 * (k % 2) * 1_000, f"s{k % 3}", "c", {"k": k, "v": [1.5, "x", {"y": None}]})
        t.add_instant(th.track, 1_000 * k + 5, "i", None, {"s": "é"})
        t.add_counter(mem.id, 1_000 * k, k / 3)
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        traceconv.save(t, Path(d) / "s.pftrace")
        return (Path(d) / "s.pftrace").read_bytes()


def _recording() -> bytes:
    """A recording in chunks of 16 events: three threads, one renamed, counters, args."""
    import tempfile
    import threading

    import traceconv.record as rec
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.pftrace"
        rec.start(out, buffer=16, workers=False)

        def work(k):
            for i in range(30):
                with rec.span("s", i=i, k=k):
                    rec.counter("c", i)
                if i == 10:
                    rec.name_thread(f"w{k}")
        threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rec.stop()
        return out.read_bytes()


SAMPLES: dict = {}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["conversion", "recording"]), st.randoms(use_true_random=False))
def test_damaged_files_read_the_same_or_go_to_the_reference(which, rng):
    """Bytes flipped, cut or spliced anywhere in a small .pftrace (a conversion, or a recording
    whose chunks describe their tracks again): the compiled reader never fails; where it reads the
    file, its trace is the reference's (tests/fuzz/readback.py, which the fuzz campaign runs on
    every .pftrace it writes)."""
    if which not in SAMPLES:
        SAMPLES[which] = _sample() if which == "conversion" else _recording()
        assert reader._read_compiled(SAMPLES[which]) is not None       # (read whole, not declined)
    assert compare(damaged(SAMPLES[which], rng)) is None


def test_the_compiled_readers_constants_are_the_protos():
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    rb = _core.readback
    assert rb.SEQ_CLEARED == pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    assert rb.CLOCK_BOOTTIME == pb.BuiltinClock.BUILTIN_CLOCK_BOOTTIME
    assert rb.TYPE_MAX == max(v for _, v in pb.TrackEvent.Type.items())


def test_a_track_event_type_the_protos_do_not_know_goes_to_the_reference(tmp_path):
    """TrackEvent.type is a closed proto2 enum: a value past the known ones after an END leaves the
    event an END in the reference (protobuf keeps the value before it), which the compiled reader,
    taking the last value, read as no END at all (found by damaging a recording's bytes)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    te = pb.TrackEvent(type=pb.TrackEvent.TYPE_SLICE_END, track_uuid=5).SerializeToString() + b"\x48\x06"
    packet = b"\x5a" + bytes([len(te)]) + te + pb.TracePacket(timestamp=7, trusted_packet_sequence_id=1).SerializeToString()
    f = tmp_path / "enum.pftrace"
    f.write_bytes(b"\x0a" + bytes([len(packet)]) + packet)
    assert _core.readback.read(f.read_bytes()) == "a track event type Perfetto's protos do not know"
    t = read_pftrace(f)
    assert [(w.code, w.count) for w in t.diagnostics.warnings] == [(WarningCode.UNMATCHED_END, 1)]
