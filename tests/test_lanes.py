"""Overlap lanes as Perfetto's trace_processor sees them: the fewest slices moved (no more than
trace_processor itself spills from the raw JSON, stat ``slice_spill_overlapping_complete_event``),
the same depths and durations, both outputs giving one slice table, lanes that belong to their
thread and carry its merge and order fields."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import perfetto_oracle as tp
import traceconv
from traceconv import formats, validate
from traceconv.errors import WarningCode
from traceconv.model.layout import nest
from traceconv.model import TrackKind

FIX = Path(__file__).parent / "fixtures"
WITH_STACK = FIX / "lanes" / "with_stack_overlap.pt.trace.json"
REAL = FIX / "kineto" / "generated_torch213_cpu_single_worker0.pt.trace.json.gz"

SPILLED_SQL = "select value from stats where name = 'slice_spill_overlapping_complete_event'"
# the slices moved off their thread's own track: onto trace_processor's overflow tracks (raw JSON),
# our lanes (.pftrace) or the threads our JSON output makes of them
OFF_THREAD_SQL = """
select s.name, s.ts - (select min(ts) from slice) as ts, s.dur, s.depth
from slice s join track t on t.id = s.track_id
left join thread_track tt on tt.id = t.id left join thread th using (utid)
where t.type = 'thread_overlapping_slice' or t.name like '% (overlap %)' or th.name like '% (overlap %)'
order by ts, depth, s.name
"""
LANE_TRACKS_SQL = """
select t.name, t.type, tt.utid,
  (select utid from thread where name = 'thread 4242 (python)') as thread_utid,
  extract_arg(t.dimension_arg_set_id, 'merge_key_type') as merge_key_type,
  extract_arg(t.dimension_arg_set_id, 'merge_key_value') as merge_key,
  extract_arg(t.source_arg_set_id, 'sibling_order_rank') as rank,
  (select count(*) from slice s where s.track_id = t.id) as slices
from track t left join thread_track tt using (id)
where t.name like '% (overlap %)'
"""


def moved(trace) -> list[str]:
    s = trace.slices
    return sorted(trace.strings[s.name[i]] for i in range(len(s))
                  if trace.tracks[s.track[i]].kind is TrackKind.LANE)


def convert_both(src: Path, tmp_path: Path):
    trace = traceconv.load(src)
    nest(trace)
    traceconv.save(trace, tmp_path / "o.pftrace")
    traceconv.save(trace, tmp_path / "o.json")
    return trace


def test_with_stack_reproduction_moves_only_what_partially_overlaps():
    trace = traceconv.load(WITH_STACK)
    nest(trace)
    # by construction (fixtures/lanes/make_with_stack.py) two slices per step partially overlap
    # python frames; the deep frames and ops that start inside them nest, and stay
    assert moved(trace) == sorted(["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"] + ["## forward ##"] * 3)
    assert sum(w.count for w in trace.diagnostics.warnings if w.code is WarningCode.OVERLAP_LANES) == 6
    lanes = [t for t in trace.tracks if t.kind is TrackKind.LANE]
    assert [trace.track_label(t) for t in lanes] == ["thread 4242 (python) (overlap 1)"]
    assert len(trace.slices) == 71


@tp.requires_trace_processor
def test_with_stack_reproduction_in_trace_processor(tmp_path):
    trace = convert_both(WITH_STACK, tmp_path)
    n_moved = len(moved(trace))
    raw_spilled, raw_off, raw_all = tp.run(WITH_STACK, SPILLED_SQL, OFF_THREAD_SQL, tp.SLICES_SQL)
    assert raw_spilled[0]["value"] == 6 == n_moved
    for out in (tmp_path / "o.pftrace", tmp_path / "o.json"):
        tp.assert_loads(out)
        off, spilled = tp.run(out, OFF_THREAD_SQL, SPILLED_SQL)
        assert not spilled or spilled[0]["value"] == 0
        # the same slices off the thread as trace_processor's own spill, at the same depths
        assert off == raw_off
        assert [r["name"] for r in off] == ["ProfilerStep#0", "## forward ##", "ProfilerStep#1", "## forward ##",
                                            "ProfilerStep#2", "## forward ##"]
        assert [r["depth"] for r in off] == [0, 1, 0, 1, 0, 1]
        assert [r["dur"] for r in off] == [1_192_000, 900_000] * 3
    # both outputs: one slice table; it is the raw file's, the lane named where Perfetto's overflow
    # track has none (the thread's name)
    ours = tp.slices(tmp_path / "o.pftrace")
    assert ours == tp.slices(tmp_path / "o.json")
    as_raw = [(p, t.replace(" (overlap 1)", ""), *rest) for p, t, *rest in ours]
    assert sorted(as_raw) == sorted(tuple(r.values()) for r in raw_all)
    deepest = max(r[-1] for r in ours)
    # <module> > main > train_step > 7 model frames > aten::linear > aten::t > aten::transpose
    assert deepest == 12


@tp.requires_trace_processor
@pytest.mark.parametrize("fmt, name", [("perfetto", "o.pftrace"), ("chrome-json", "o.json")])
def test_each_writer_lays_out_the_trace_it_is_given(tmp_path, fmt, name):
    # the writer given the trace as read, not nested first: it moves what overlaps to lanes itself
    # (the Perfetto writer beside its pass over the args), and counts it
    trace = traceconv.load(WITH_STACK)
    assert trace.slices.depth is None
    with open(tmp_path / name, "wb") as f:
        formats.get(fmt, role="writer").load("writer")(trace, f)
    assert sum(w.count for w in trace.diagnostics.warnings if w.code is WarningCode.OVERLAP_LANES) == 6
    tp.assert_loads(tmp_path / name)
    off, spilled = tp.run(tmp_path / name, OFF_THREAD_SQL, SPILLED_SQL)
    assert not spilled or spilled[0]["value"] == 0
    assert [r["name"] for r in off] == ["ProfilerStep#0", "## forward ##", "ProfilerStep#1", "## forward ##",
                                        "ProfilerStep#2", "## forward ##"]
    assert [r["dur"] for r in off] == [1_192_000, 900_000] * 3


@tp.requires_trace_processor
def test_lane_tracks_belong_to_their_thread_and_merge_in_order(tmp_path):
    convert_both(WITH_STACK, tmp_path)
    rows = tp.query(tmp_path / "o.pftrace", LANE_TRACKS_SQL)
    assert len(rows) == 1
    r = rows[0]
    assert r["type"] == "thread_merged_track_event"            # a track of the thread, under it
    assert r["utid"] == r["thread_utid"] is not None
    assert r["merge_key_type"] == 2                             # SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY
    assert r["merge_key"].startswith("traceconv overlap lanes of ")
    assert (r["rank"], r["slices"]) == (1, 6)
    # in the JSON output the lane is a thread of its own, next to its thread (same sort index)
    rows = tp.query(tmp_path / "o.json", "select name from thread where name like '%overlap%'")
    assert [r["name"] for r in rows] == ["thread 4242 (python) (overlap 1)"]


@tp.requires_trace_processor
def test_real_with_stack_sample_moves_no_more_than_trace_processor_spills(tmp_path):
    trace = traceconv.load(REAL)
    nest(trace)
    n_moved = len(moved(trace))
    assert n_moved == 12                 # 254 when a moved slice took everything inside it along
    spilled, raw_off = tp.run(REAL, SPILLED_SQL, OFF_THREAD_SQL)
    assert n_moved <= spilled[0]["value"] == 12
    traceconv.save(trace, tmp_path / "o.json")
    off = tp.query(tmp_path / "o.json", OFF_THREAD_SQL)
    assert off == raw_off                # the same slices, times, durations and depths
    assert [r["name"] for r in off][:3] == ["ProfilerStep#2", "## forward ##", "## backward ##"]


@pytest.mark.parametrize("lanes", [1, 3])
@tp.requires_trace_processor
def test_several_lanes_and_async_lanes_give_one_slice_table(tmp_path, lanes):
    from traceconv.model import Trace
    t = Trace("test")
    p = t.process(7, "proc")
    th = t.thread(p, 8, "worker")
    for k in range(lanes + 1):           # each overlaps the end of all before it: `lanes` lanes
        t.add_slice(th.track, 10 * k, 100, f"s{k}")
        t.add_slice(th.track, 10 * k + 2, 3, f"s{k}.child")
    a = t.track(TrackKind.ASYNC, "requests", p)
    t.add_slice(a.id, 0, 100, "r0")
    t.add_slice(a.id, 50, 100, "r1")
    nest(t)
    traceconv.save(t, tmp_path / "o.pftrace")
    traceconv.save(t, tmp_path / "o.json")
    for out in ("o.pftrace", "o.json"):
        tp.assert_loads(tmp_path / out)
    assert tp.slices(tmp_path / "o.pftrace") == tp.slices(tmp_path / "o.json")
    rows = tp.query(tmp_path / "o.pftrace", """
        select t.name, extract_arg(t.source_arg_set_id, 'sibling_order_rank') as rank,
               extract_arg(t.dimension_arg_set_id, 'merge_key_value') as merge_key
        from track t where t.name like '% (overlap %)' order by t.name""")
    assert [(r["name"], r["rank"]) for r in rows] == sorted(
        [("requests (overlap 1)", 1)] + [(f"worker (overlap {k})", k) for k in range(1, lanes + 1)])
    keys = {r["name"].split(" (")[0]: r["merge_key"] for r in rows}
    assert len(set(keys.values())) == 2                      # one key per track's lanes
    assert len({r["merge_key"] for r in rows if r["name"].startswith("worker")}) == 1


@tp.requires_trace_processor
def test_zero_duration_slices_at_one_time_nest_as_perfetto_reads_them(tmp_path):
    """trace_processor keeps a zero-duration X event open for what begins at its own time: three at
    one time nest d, d+1, d+2, and one at its parent's end is the parent's sibling.  Both outputs
    give the raw file's table."""
    raw = tmp_path / "zero.json"
    raw.write_bytes(orjson.dumps({"traceEvents": [
        {"ph": "X", "name": "P", "ts": 0, "dur": 20, "pid": 1, "tid": 1},
        {"ph": "X", "name": "A", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "name": "Z0", "ts": 10, "dur": 0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "Z1", "ts": 12, "dur": 0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "Z2", "ts": 12, "dur": 0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "Z3", "ts": 12, "dur": 0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "B", "ts": 15, "dur": 5, "pid": 1, "tid": 1},
        {"ph": "X", "name": "Z4", "ts": 15, "dur": 0, "pid": 1, "tid": 1},
    ]}))
    sql = "select name, ts, dur, depth from slice order by ts, depth"
    expected = [("P", 0, 20000, 0), ("A", 0, 10000, 1), ("Z0", 10000, 0, 1), ("Z1", 12000, 0, 1),
                ("Z2", 12000, 0, 2), ("Z3", 12000, 0, 3), ("B", 15000, 5000, 1), ("Z4", 15000, 0, 2)]
    assert [tuple(r.values()) for r in tp.query(raw, sql)] == expected
    for out in (tmp_path / "z.pftrace", tmp_path / "z.json"):
        traceconv.convert(raw, out)
        tp.assert_loads(out)
        assert [tuple(r.values()) for r in tp.query(out, sql)] == expected, out.name


def test_strict_refuses_a_trace_whose_slices_would_move_to_lanes(tmp_path):
    # the writer lays the trace out; under strict the conversion must know first, and write nothing
    out = tmp_path / "o.pftrace"
    with pytest.raises(traceconv.TraceconvError, match="overlap-lanes"):
        traceconv.convert(WITH_STACK, out, strict=True)
    assert not out.exists()
    assert traceconv.convert(WITH_STACK, out).slices == 71 and out.exists()


DEPTH_SQL = """
select coalesce(t.name, th.name) as track, count(*) as n, min(s.depth) as lo, max(s.depth) as hi,
       min(s.name) as first_name, sum(s.dur) as total
from slice s join track t on t.id = s.track_id left join thread_track tt on tt.id = t.id
left join thread th using (utid) group by s.track_id order by n desc, track
"""


def _deep_json(path: Path, n: int) -> None:
    """``n`` complete events on one thread, each inside the one before: depths 0..n-1."""
    events = [{"ph": "X", "name": f"d{i:04}", "ts": i, "dur": 10 * n - 2 * i, "pid": 1, "tid": 1}
              for i in range(n)]
    events.append({"ph": "X", "name": "beside", "ts": 20 * n, "dur": 5, "pid": 1, "tid": 1})
    path.write_bytes(orjson.dumps({"traceEvents": events}))


@tp.requires_trace_processor
def test_slices_nested_deeper_than_perfetto_keeps_go_to_depth_lanes(tmp_path):
    """trace_processor drops what a track nests 512 levels deep or more (stat
    slice_max_depth_exceeded, an error, from the JSON too): a deep recursion, or begins never ended
    (Composer's markers on a long run).  traceconv moves them to lanes of 512 levels, counted; every
    output loads with no error and keeps every slice and duration."""
    src = tmp_path / "deep.json"
    _deep_json(src, 1100)
    raw = tp.run(src, "select count(*) as n from slice", "select value from stats where name = "
                 "'slice_max_depth_exceeded'")
    assert raw == [[{"n": 512 + 1}], [{"value": 588}]]        # what Perfetto itself keeps of the JSON
    trace = traceconv.load(src)
    nest(trace)
    lanes = [t for t in trace.tracks if t.kind is TrackKind.LANE]
    assert [(t.name, t.deep, t.lane) for t in lanes] == [("thread 1 (depth 512+)", 512, 1),
                                                         ("thread 1 (depth 1024+)", 1024, 2)]
    warned = {w.message: w.count for w in trace.diagnostics.warnings if w.code is WarningCode.OVERLAP_LANES}
    assert list(warned.values()) == [588] and "512 levels deep" in next(iter(warned))
    durations = 1000 * (sum(10 * 1100 - 2 * i for i in range(1100)) + 5)      # ns
    for out in ("o.pftrace", "o.json"):
        traceconv.save(trace, tmp_path / out)
        tp.assert_loads(tmp_path / out)
        rows = tp.run(tmp_path / out, DEPTH_SQL)[0]
        assert [(r["n"], r["lo"], r["hi"], r["first_name"]) for r in rows] == [
            (513, 0, 511, "beside"), (512, 0, 511, "d0512"), (76, 0, 75, "d1024")]
        assert sum(r["total"] for r in rows) == durations
        if out == "o.pftrace":
            assert [r["track"] for r in rows][1:] == ["thread 1 (depth 512+)", "thread 1 (depth 1024+)"]
    # read back, nested again: the same lanes, nothing moved twice
    again = traceconv.load(tmp_path / "o.pftrace")
    nest(again)
    assert [(t.name, t.deep) for t in again.tracks if t.kind is TrackKind.LANE] == [(t.name, t.deep) for t in lanes]
    report = validate.validate(src)
    deep = [f for f in report.problems if f.check == "nesting too deep"]
    assert [(f.count, f.examples[0][:9]) for f in deep] == [(588, "'d0512' a")]
    assert not [f for f in report.findings if f.check == "overlapping slices"]


@pytest.mark.parametrize("n", [513, 1100, 1600])
def test_depth_lanes_numbered_in_one_key_or_by_rows_alike(tmp_path, monkeypatch, n):
    """The depth lanes' (track, lane, level) are numbered in one int64 key (np.unique of rows took
    0.36 s for the 400k deep slices of Composer's x400 copy), or by rows past what a key holds:
    the same lanes, tracks and depths either way, beside an overlap lane."""
    from traceconv.model import layout
    src = tmp_path / "deep.json"
    _deep_json(src, n)
    got = []
    for limit in (layout._KEY_LIMIT, 0):
        monkeypatch.setattr(layout, "_KEY_LIMIT", limit)
        t = traceconv.load(src)
        # (overlaps "beside", after the chain: an overlap lane)
        t.add_slice(t.slices.track[0], (20 * n + 2) * 1000, 10_000, "partial")
        nest(t)
        got.append(([(x.name, x.lane, x.deep) for x in t.tracks], list(t.slices.track), list(t.slices.depth)))
    assert got[0] == got[1]
    assert ("thread 1 (overlap 1)", 1, 0) in got[0][0] and ("thread 1 (depth 512+)", 2, 512) in got[0][0]
