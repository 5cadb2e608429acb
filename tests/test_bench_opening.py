"""benchmarks/opening.py's bound, one packet a slice: the rewrite of a traceconv .pftrace must give
trace_processor the same slices (times, durations, nesting, names, args) as the file it came from
when every duration is whole microseconds, else the bound it prints measures something else."""

import sys
from pathlib import Path

import orjson

import traceconv
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent
from perfetto_oracle import assert_loads, query, requires_trace_processor, slices

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
from opening import one_packet_per_slice  # noqa: E402

SLICE_ARGS = ("select s.name, s.ts, s.dur, s.depth, a.key, a.int_value, a.string_value "
              "from slice s join args a using (arg_set_id) where a.key like 'debug.%' "
              "order by s.ts, s.depth, a.key")


@requires_trace_processor
def test_one_packet_a_slice_keeps_whole_microsecond_slices(tmp_path):
    x = {"ph": "X", "pid": 1, "tid": 2, "cat": "cpu_op"}
    events = [
        {**x, "name": "step", "ts": 10, "dur": 100, "args": {"n": 1}},
        {**x, "name": "mm", "ts": 20, "dur": 30, "args": {"Input Dims": [[2, 3], [3]], "s": "a"}},
        {**x, "name": "relu", "ts": 50, "dur": 0},
        {**x, "name": "add", "ts": 60, "dur": 50},                     # ends with its parent
        {**x, "name": "other thread", "ts": 15, "dur": 5, "tid": 3},
        {**x, "name": "overlap", "ts": 90, "dur": 40},                  # partly over "step": a lane's
        {"ph": "i", "s": "t", "pid": 1, "tid": 2, "name": "mark", "ts": 70, "args": {"k": "v"}},
    ]
    src = tmp_path / "t.json"
    src.write_bytes(orjson.dumps({"traceEvents": events}))
    pftrace, rewritten = tmp_path / "t.pftrace", tmp_path / "t.one.pftrace"
    traceconv.convert(src, pftrace)
    assert one_packet_per_slice(pftrace, rewritten) == rewritten
    assert_loads(rewritten)
    got = slices(rewritten)
    assert got == slices(pftrace)
    # (times from the trace's first event, as the reader puts them)
    assert {(name, ts, dur, depth) for _, _, name, _, ts, dur, depth in got} == {
        ("step", 0, 100_000, 0), ("mm", 10_000, 30_000, 1), ("relu", 40_000, 0, 1), ("add", 50_000, 50_000, 1),
        ("mark", 60_000, 0, 2), ("other thread", 5_000, 5_000, 0), ("overlap", 80_000, 40_000, 0)}
    assert query(rewritten, SLICE_ARGS) == query(pftrace, SLICE_ARGS)
    # one packet a slice on the threads' tracks: their ends are gone, their slices are phase X; the
    # lane's slice (trace_processor takes phase X on a thread's track only) and the instant stay
    events = [p.track_event for p in Trace.FromString(rewritten.read_bytes()).packet if p.HasField("track_event")]
    assert sorted((e.type, e.legacy_event.phase, e.legacy_event.duration_us) for e in events) == sorted(
        [(0, ord("X"), d) for d in (100, 30, 0, 50, 5)]
        + [(TrackEvent.TYPE_SLICE_BEGIN, 0, 0), (TrackEvent.TYPE_SLICE_END, 0, 0), (TrackEvent.TYPE_INSTANT, 0, 0)])
