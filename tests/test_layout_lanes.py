"""layout.nest: only the slices that cannot nest on their track move to an overlap lane, one by one.

The compiled loop (traceconv._core.nest.nest, rust/src/nest.rs) against its plain-Python statement
(traceconv.model.layout.nest_reference) on random inputs, the rule on small hand-made cases, and what the
writers make of the lanes."""

from __future__ import annotations

import multiprocessing
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traceconv
from traceconv import _core
from traceconv.errors import WarningCode
from traceconv.model.layout import nest, nest_reference, slice_order
from traceconv.model import Trace, TrackKind

from timeline import assert_outputs_agree, read_perfetto


def _order(ts, dur, track):
    return np.lexsort((-np.asarray(dur, np.int64), np.asarray(ts, np.int64), np.asarray(track, np.int32)))


slices_st = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(0, 40)), max_size=120)


# the lanes from which a track is placed with the kernel's trees instead of its loop over the
# lanes (rust/src/nest.rs, WIDE_FROM): 0, from its first slice on; a few, switching midway; the default
wide_from_st = st.sampled_from([0, 1, 2, 3, 32])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slices_st, wide_from_st)
def test_kernel_equals_the_python_reference(rows, wide_from):
    track = [r[0] for r in rows]
    ts = [r[1] for r in rows]
    dur = [r[2] for r in rows]
    order = _order(ts, dur, track)
    d, p, lane = _core.nest.nest(np.asarray(ts, np.int64), np.asarray(dur, np.int64), np.asarray(track, np.int32),
                              order, wide_from)
    rd, rp, rl = nest_reference(ts, dur, track, order.tolist())
    assert d.tolist() == rd and p.tolist() == rp and lane.tolist() == rl
    assert (d.dtype, p.dtype, lane.dtype) == (np.int32, np.int64, np.int32)


# wide values: negative tracks and times, zero durations, many slices at one time, many lanes
wide_st = st.lists(st.tuples(st.integers(-2, 2), st.integers(-2**40, 2**40) | st.integers(-5, 5),
                             st.integers(0, 2**40) | st.integers(0, 3)), max_size=200)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wide_st, wide_from_st)
def test_kernel_equals_the_python_reference_on_wide_values(rows, wide_from):
    track = [r[0] for r in rows]
    ts = [r[1] for r in rows]
    dur = [r[2] for r in rows]
    order = _order(ts, dur, track)
    got = _core.nest.nest(np.asarray(ts, np.int64), np.asarray(dur, np.int64), np.asarray(track, np.int32), order,
                          wide_from)
    assert tuple(a.tolist() for a in got) == nest_reference(ts, dur, track, order.tolist())


@pytest.mark.parametrize("shape", ["stairs", "stairs_and_children", "random"])
def test_a_track_of_hundreds_of_lanes_is_placed_as_the_loop_places_it(shape):
    """Slices that each partly overlap the ones before (a lane each: 800 lanes, past the trees'
    first growths), with slices nested inside them, or at random: the trees of a track
    with many lanes place every slice as the loop over the lanes does (which took 9.4 s for 80k
    such slices against 0.1 s; not timed here), and as the Python statement of the rule."""
    rng = np.random.default_rng(7)
    n = 800
    if shape == "random":
        ts = rng.integers(0, 20_000, 4 * n)
        dur = rng.integers(0, 5_000, 4 * n)
    else:
        ts = np.arange(n) * 10
        dur = np.full(n, 10 * n)
        if shape == "stairs_and_children":
            ts = np.concatenate([ts, ts + 1, ts + 3])
            dur = np.concatenate([dur, np.full(n, 5), np.full(n, 1)])
    ts, dur = ts.astype(np.int64), dur.astype(np.int64)
    track = (np.arange(len(ts)) % 2 if shape == "random" else np.zeros(len(ts))).astype(np.int32)
    order = _order(ts, dur, track)
    trees = tuple(a.tolist() for a in _core.nest.nest(ts, dur, track, order))
    loop = tuple(a.tolist() for a in _core.nest.nest(ts, dur, track, order, 1 << 40))
    assert trees == loop == nest_reference(ts.tolist(), dur.tolist(), track.tolist(), order.tolist())
    if shape != "random":
        assert max(trees[2]) == n - 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wide_st)
def test_slice_order_is_numpys_stable_lexsort(rows):
    track = np.asarray([r[0] for r in rows], np.int32)
    ts = np.asarray([r[1] for r in rows], np.int64)
    dur = np.asarray([r[2] for r in rows], np.int64)
    got = _core.nest.slice_order(ts, dur, track)
    assert got.dtype == np.int64
    assert got.tolist() == np.lexsort((-dur, ts, track)).tolist()


@pytest.mark.parametrize("seed", [1, 2])
def test_slice_order_of_many_slices_is_numpys_stable_lexsort(seed):
    # enough slices for the key sort to run in two halves on two threads, then merged: many ties
    # of (track, start), and runs already in order, as a real trace's
    rng = np.random.default_rng(seed)
    n = 200_000
    track = rng.integers(0, 40, n).astype(np.int32)
    ts = np.sort(rng.integers(0, n // 3, n)).astype(np.int64)
    ts[rng.random(n) < 0.2] = 7                    # one start shared by many
    dur = rng.integers(-1, 50, n).astype(np.int64)
    got = _core.nest.slice_order(ts, dur, track)
    assert got.tolist() == np.lexsort((-dur, ts, track)).tolist()


_CODES = (0, 1, 2, 3)        # layout's BEGIN, END, INSTANT, COUNTER


def _windows_both_ways(ts, dur, depth, pos, zend, its, cts, edges):
    """Each window of the stream by the compiled kernel and by the NumPy reference."""
    from traceconv.model import layout
    cols = (np.asarray(ts, np.int64), np.asarray(dur, np.int64), np.asarray(depth, np.int32),
            np.asarray(pos, np.int32), np.asarray(zend, np.int32), np.asarray(its, np.int64),
            np.asarray(cts, np.int64))
    at = np.asarray(edges, np.int64)
    ids = [layout._window_ids(t, d, at) for t, d in ((cols[0], None), (cols[0], cols[1]), (cols[5], None),
                                                      (cols[6], None))]
    for k, (lo, hi) in enumerate(zip([None, *edges], [*edges, None])):
        got = _core.nest.window(*cols, *ids, k, _CODES)
        want = layout._window_reference(*cols, lo, hi, np.int32)
        yield [a.tolist() for a in got], [a.tolist() for a in want]


# times bunched (many ties: ends and begins at one time, zero-length slices, instants and counters
# beside them) or anywhere in int64 (a sum that wraps, as NumPy's does)
_time = st.one_of(st.integers(0, 6), st.integers(-2**63, 2**63 - 1))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_window_kernel_equals_the_numpy_reference(data):
    n = data.draw(st.integers(0, 25))
    ts = data.draw(st.lists(_time, min_size=n, max_size=n))
    dur = data.draw(st.lists(st.one_of(st.just(0), st.integers(0, 5), st.integers(0, 2**62)), min_size=n, max_size=n))
    depth = data.draw(st.lists(st.integers(0, 2**31 - 2), min_size=n, max_size=n))
    pos = data.draw(st.permutations(range(n)))
    zend = data.draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=n, max_size=n))
    its = data.draw(st.lists(_time, max_size=8))
    cts = data.draw(st.lists(_time, max_size=8))
    edges = sorted(set(data.draw(st.lists(_time, max_size=5))))
    for got, want in _windows_both_ways(ts, dur, depth, pos, zend, its, cts, edges):
        assert got == want


@pytest.mark.parametrize("in_order", [False, True])
def test_window_kernel_on_a_window_of_many_events_equals_the_numpy_reference(in_order):
    # windows of tens of thousands of events, as the writer's (65,536 a window): many at one time;
    # the rows in time order too, as a trace's mostly are, where each window's rows lie together
    # and the kernel passes over the blocks of rows that have none of its own
    rng = np.random.default_rng(7)
    n = 60_000
    ts = rng.integers(0, 5_000, n)
    dur = np.where(rng.random(n) < 0.1, 0, rng.integers(1, 300, n))
    depth = rng.integers(0, 12, n)
    pos = rng.permutation(n)
    zend = np.maximum(pos, rng.integers(0, n, n))
    its, cts = rng.integers(0, 5_000, 9_000), rng.integers(0, 5_000, 4_000)
    if in_order:
        ts, its, cts = np.sort(ts), np.sort(its), np.sort(cts)
    seen = 0
    for got, want in _windows_both_ways(ts, dur, depth, pos, zend, its, cts, [1_000, 2_500, 2_501]):
        assert got == want
        seen += len(got[0])
    assert seen == 2 * n + len(its) + len(cts)


def _order_in_child(q, ts, dur, track):
    q.put(_core.nest.slice_order(ts, dur, track).tolist())


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_forked_child_sorts_many_slices_after_its_parent_did():
    # a merge's workers are forked from a process that may already have sorted (and so started
    # whatever threads its sort uses): the child must sort on threads of its own, not wait forever
    rng = np.random.default_rng(3)
    n = 150_000
    track = rng.integers(0, 9, n).astype(np.int32)
    ts, dur = rng.integers(0, 1000, n).astype(np.int64), rng.integers(0, 9, n).astype(np.int64)
    want = _core.nest.slice_order(ts, dur, track).tolist()
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_order_in_child, args=(q, ts, dur, track))
    p.start()
    try:
        assert q.get(timeout=30) == want
    finally:
        p.join(5)
        if p.is_alive():
            p.kill()


def test_kernel_takes_lists_and_refuses_an_order_that_is_not_a_permutation():
    d, p, lane = _core.nest.nest([0, 5, 10], [20, 10, 20], [0, 0, 0], [0, 1, 2])
    assert (d.tolist(), p.tolist(), lane.tolist()) == ([0, 1, 0], [-1, 0, -1], [0, 0, 1])
    for bad in ([0, 1, 1], [0, 1, 3], [0, -1, 2]):
        with pytest.raises(ValueError, match="not a permutation"):
            _core.nest.nest([0, 5, 10], [20, 10, 20], [0, 0, 0], bad)
    with pytest.raises(ValueError, match="different lengths"):
        _core.nest.nest([0, 5, 10], [20, 10, 20], [0, 0, 0], [0, 1])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slices_st)
def test_the_rule_holds_on_random_inputs(rows):
    """Every lane nests; a slice is off its track only if it partially overlaps what is open on its
    track when it starts; depth is the count of enclosing slices on its lane."""
    track = [r[0] for r in rows]
    ts = [r[1] for r in rows]
    dur = [r[2] for r in rows]
    order = _order(ts, dur, track).tolist()
    d, p, lane = (a.tolist() for a in _core.nest.nest(np.asarray(ts, np.int64), np.asarray(dur, np.int64),
                                                     np.asarray(track, np.int32), np.asarray(order)))
    pos = {i: q for q, i in enumerate(order)}
    n = len(rows)
    inside = lambda a, b: ts[b] <= ts[a] and ts[a] + dur[a] <= ts[b] + dur[b]    # noqa: E731  a in b
    for i in range(n):
        same = [j for j in range(n) if j != i and track[j] == track[i] and lane[j] == lane[i]]
        for j in same:      # a lane never holds two slices that overlap without nesting
            if ts[i] < ts[j] + dur[j] and ts[j] < ts[i] + dur[i]:
                assert inside(i, j) or inside(j, i)
        before = [j for j in same if pos[j] < pos[i] and ts[j] + dur[j] > ts[i]]
        assert d[i] == len(before)
        # lane 0's slices open when i starts: i moved iff one of them does not enclose it
        open0 = [j for j in range(n) if j != i and track[j] == track[i] and lane[j] == 0
                 and pos[j] < pos[i] and ts[j] + dur[j] > ts[i]]
        assert (lane[i] > 0) == any(not inside(i, j) for j in open0)
        # the parent: the innermost slice open on any lane of its track that encloses it
        enclosing = [j for j in range(n) if j != i and track[j] == track[i] and pos[j] < pos[i]
                     and ts[j] + dur[j] > ts[i] and inside(i, j)]
        if enclosing:
            assert p[i] in enclosing and ts[p[i]] == max(ts[j] for j in enclosing)
        else:
            assert p[i] == -1


def _trace(rows):
    t = Trace("test")
    th = t.thread(t.process(1, "p"), 1, "main")
    for ts, dur, name in rows:
        t.add_slice(th.track, ts, dur, name)
    return t


def _placed(t):
    s = t.slices
    return {t.strings[s.name[i]]: (t.tracks[s.track[i]].lane, s.depth[i], s.ts[i], s.dur[i]) for i in range(len(s))}


def test_only_the_partial_overlap_moves_and_what_starts_inside_it_stays_where_it_nests():
    t = _trace([
        (0, 1000, "frame"),            # python frame, whole step
        (10, 100, "step"),             # profiler.step() frame
        (20, 80, "enter"),
        (50, 400, "annotation"),       # begins inside step/enter, ends after: partial overlap
        (200, 100, "forward"),         # inside annotation in time, nests in frame: stays
        (210, 50, "linear"),
        (220, 10, "addmm"),
        (380, 200, "exit"),            # begins inside annotation, ends after it: nests in frame
    ])
    nest(t)
    assert _placed(t) == {
        "frame": (0, 0, 0, 1000), "step": (0, 1, 10, 100), "enter": (0, 2, 20, 80),
        "annotation": (1, 0, 50, 400),
        "forward": (0, 1, 200, 100), "linear": (0, 2, 210, 50), "addmm": (0, 3, 220, 10),
        "exit": (0, 1, 380, 200)}
    assert [(w.code, w.count) for w in t.diagnostics.warnings] == [(WarningCode.OVERLAP_LANES, 1)]
    # self times: what starts inside the moved annotation still counts as its child
    s = t.slices
    names = [t.strings[n] for n in s.name]
    parent = {names[i]: (names[s.parent[i]] if s.parent[i] >= 0 else None) for i in range(len(s))}
    # (the moved annotation's parent is the frame under lane 0's top, which it outlives)
    assert parent == {"frame": None, "step": "frame", "enter": "step", "annotation": "frame",
                      "forward": "annotation", "linear": "forward", "addmm": "linear", "exit": "frame"}


def test_lanes_fill_first_fit_and_nest_among_themselves():
    t = _trace([(0, 100, "a"), (50, 100, "b"), (60, 20, "b_child"), (70, 100, "c"), (120, 100, "d")])
    nest(t)
    got = _placed(t)
    # b and c overlap a's end; b_child nests in a; c also overlaps b's end: a second lane; d nests
    # nowhere on lane 0 (a closed, then empty): lane 0
    assert {k: v[:2] for k, v in got.items()} == {"a": (0, 0), "b": (1, 0), "b_child": (0, 1), "c": (2, 0),
                                                  "d": (0, 0)}
    labels = sorted(t.track_label(x) for x in t.tracks if x.kind is TrackKind.LANE)
    assert labels == ["main (overlap 1)", "main (overlap 2)"]


def test_a_lane_and_the_warning_drop_the_spaces_that_end_a_thread_name():
    """Kineto names a CUDA stream's thread "stream 7 ": its lanes were "stream 7  (overlap 1)" and
    the warning listed "stream 13 , stream 7 "."""
    t = Trace("test")
    p = t.process(1, "p")
    for tid in (7, 13):
        th = t.thread(p, tid, f"stream {tid} ")
        for ts, dur, name in [(0, 100, "a"), (50, 100, "b")]:
            t.add_slice(th.track, ts, dur, f"{name}{tid}")
    nest(t)
    assert sorted(t.track_label(x) for x in t.tracks if x.kind is TrackKind.LANE) == [
        "stream 13 (overlap 1)", "stream 7 (overlap 1)"]
    assert [w.message for w in t.diagnostics.warnings][0].endswith("(stream 13, stream 7)")
    assert {t.track_label(th) for th in t.tracks if th.kind is TrackKind.THREAD} == {"stream 7 ", "stream 13 "}
    # a thread "stream 7" beside "stream 7 " in one process: their lanes say which tid each is
    t = Trace("test")
    p = t.process(1, "p")
    for tid, name in ((7, "stream 7 "), (8, "stream 7")):
        th = t.thread(p, tid, name)
        for ts, dur in [(0, 100), (50, 100)]:
            t.add_slice(th.track, ts, dur, f"s{tid}")
    nest(t)
    assert sorted(t.track_label(x) for x in t.tracks if x.kind is TrackKind.LANE) == [
        "stream 7 [tid 7] (overlap 1)", "stream 7 [tid 8] (overlap 1)"]


def test_nest_is_deterministic_and_keeps_every_duration():
    rng = np.random.default_rng(7)
    rows = [(int(a), int(b), f"s{i}") for i, (a, b) in enumerate(zip(rng.integers(0, 10_000, 3000),
                                                                     rng.integers(1, 800, 3000)))]
    placements = []
    for _ in range(2):
        t = _trace(rows)
        nest(t)
        placements.append(_placed(t))
        assert [(s[2], s[3]) for s in _placed(t).values()] == [(r[0], r[1]) for r in rows]
    assert placements[0] == placements[1]


def test_lanes_in_the_perfetto_descriptors(tmp_path):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    t = _trace([(0, 100, "a"), (50, 100, "b"), (70, 100, "c"), (10, 20, "a1")])
    nest(t)
    assert_outputs_agree(t, tmp_path)
    tr = pb.Trace()
    tr.ParseFromString((tmp_path / "o.pftrace").read_bytes())
    d = {p.track_descriptor.uuid: p.track_descriptor for p in tr.packet if p.HasField("track_descriptor")}
    thread = next(x for x in d.values() if x.HasField("thread"))
    lanes = sorted((x for x in d.values() if x.name.endswith(")")), key=lambda x: x.sibling_order_rank)
    assert [(x.name, x.parent_uuid, x.sibling_order_rank) for x in lanes] == [
        ("main (overlap 1)", thread.uuid, 1), ("main (overlap 2)", thread.uuid, 2)]
    assert {x.sibling_merge_behavior for x in lanes} == {pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY}
    assert len({x.sibling_merge_key for x in lanes}) == 1 and lanes[0].sibling_merge_key
    assert thread.child_ordering == pb.TrackDescriptor.EXPLICIT
    tl = read_perfetto(tmp_path / "o.pftrace")
    assert sorted((s.track, s.name, s.depth) for s in tl.slices) == [
        ("main", "a", 0), ("main", "a1", 1), ("main (overlap 1)", "b", 0), ("main (overlap 2)", "c", 0)]


def test_a_lane_names_its_tid_when_its_process_has_another_thread_of_that_name(tmp_path, monkeypatch):
    """Two threads "worker" of one process and one of another, a thread "main", 150 threads "w<k>"
    (each with slices that partly overlap: lanes): the lanes of the two workers of process 1 say
    their tid, the others do not; trace_processor shows those names.  The threads' labels are
    counted once for all the lanes, not once for each (the 150 threads' 300 lanes asked for
    every thread's label again: 45k labels, 29 s for 1,000 threads with 40 lanes each)."""
    from perfetto_oracle import assert_loads, query
    from traceconv.model import trace as trace_module

    t = Trace("test")
    p1, p2 = t.process(1, "p1"), t.process(2, "p2")
    threads = [t.thread(p1, 11, "worker"), t.thread(p1, 12, "worker"), t.thread(p2, 21, "worker"),
               t.thread(p1, 13, "main")] + [t.thread(p2, 100 + k, f"w{k}") for k in range(150)]
    for th in threads:
        for k in range(3):                     # each starts inside the one before and ends after it
            t.add_slice(th.track, 10 * k, 25, f"s{k}")
    asked = [0]
    real = trace_module.Trace.track_label

    def counted(self, track):
        asked[0] += 1
        return real(self, track)

    monkeypatch.setattr(trace_module.Trace, "track_label", counted)
    nest(t)
    assert asked[0] < 3 * (len(threads) + 2 * len(threads))   # (threads + lanes, a few times over)
    lanes = sorted(x.name for x in t.tracks if x.kind is TrackKind.LANE)
    assert lanes[:8] == ["main (overlap 1)", "main (overlap 2)", "w0 (overlap 1)", "w0 (overlap 2)",
                         "w1 (overlap 1)", "w1 (overlap 2)", "w10 (overlap 1)", "w10 (overlap 2)"]
    assert [x for x in lanes if x.startswith("worker")] == [
        "worker (overlap 1)", "worker (overlap 2)",                      # process 2's only worker
        "worker [tid 11] (overlap 1)", "worker [tid 11] (overlap 2)",
        "worker [tid 12] (overlap 1)", "worker [tid 12] (overlap 2)"]
    monkeypatch.undo()
    out = tmp_path / "o.pftrace"
    traceconv.save(t, out)
    assert_loads(out)
    rows = query(out, "select t.name as track, count(*) as n from slice s join track t on s.track_id = t.id "
                      "where t.name like 'worker%' group by t.name order by t.name")
    assert [(r["track"], r["n"]) for r in rows] == [
        ("worker (overlap 1)", 1), ("worker (overlap 2)", 1),
        ("worker [tid 11] (overlap 1)", 1), ("worker [tid 11] (overlap 2)", 1),
        ("worker [tid 12] (overlap 1)", 1), ("worker [tid 12] (overlap 2)", 1)]


def test_slice_order_is_track_then_start_then_longer_first():
    t = _trace([(5, 1, "x"), (0, 2, "y"), (0, 9, "z")])
    assert slice_order(t).tolist() == [2, 1, 0]


def _threads_trace(rows):
    t = Trace("test")
    p = t.process(1, "p")
    tracks = [t.thread(p, k + 1, f"t{k}").track for k in range(4)]
    for k, ts, dur in rows:
        t.add_slice(tracks[k], ts, dur, f"s{ts}")
    return t


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slices_st, slices_st)
def test_the_order_nest_leaves_is_slice_order_after_its_moves(rows, more):
    # the writer's event order starts from it instead of sorting every slice again
    t = _threads_trace(rows)
    nest(t)
    assert t.slices.order is not None
    assert np.array_equal(t.slices.order, slice_order(t))
    # slices added after a first nest, some on its lanes: nested again, more lanes made
    for k, ts, dur in more:
        t.add_slice(t.tracks[k % len(t.tracks)].id, ts, dur, "late")
    nest(t)
    assert np.array_equal(t.slices.order, slice_order(t))
