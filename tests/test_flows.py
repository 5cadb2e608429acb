"""Flows as Perfetto's trace_processor draws them: every link it makes of the raw file, fan-out
(one ``s``, several ``f`` with the same id: a ``cudaGraphLaunch`` and its kernels) included, in
the model and in trace_processor's ``flow`` table for both outputs."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfetto_oracle as tp
import traceconv
from traceconv import _core
from traceconv.model.layout import nest
from traceconv.writers.chrome_json import V2_BIND_BASE

FIX = Path(__file__).parent / "fixtures"
CUDA_GRAPH = FIX / "flows" / "cuda_graph_replays.pt.trace.json.gz"
FANOUT = FIX / "flows" / "fanout_v1.json"
PERFETTO_SAMPLES = [FIX / "chrome_json" / n for n in ("perfetto_flow_events_json_v1.json",
                                                      "perfetto_flow_events_json_v2.json",
                                                      "perfetto_connected_flow_data.json")]

# every link: its two slices by name and time (relative to the first slice)
FLOWS_SQL = """
select so.name as src, so.ts - (select min(ts) from slice) as src_ts,
       si.name as dst, si.ts - (select min(ts) from slice) as dst_ts
from flow f join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in
order by src_ts, dst_ts, src, dst
"""


def links(trace) -> list[tuple[str, str]]:
    st_, s, f = trace.strings, trace.slices, trace.flows
    return sorted((st_[s.name[f.src[i]]], st_[s.name[f.dst[i]]]) for i in range(len(f)))


def outputs(src: Path, tmp_path: Path):
    trace = traceconv.load(src)
    nest(trace)
    traceconv.save(trace, tmp_path / "o.pftrace")
    traceconv.save(trace, tmp_path / "o.json")
    return trace, (tmp_path / "o.pftrace", tmp_path / "o.json")


# ---------------------------------------------------------------- the rule

def link_reference(group: list[int], ph: list[int], bound: list[int]) -> list[tuple[int, int, int]]:
    """The links ``(src, dst, group)`` of ``traceconv._core.flows.link`` (Perfetto's v1 rule), in plain
    Python, for points sorted by flow (``group``) and time.  A flow has one slot, the slice it
    leaves from: an ``s`` fills the empty slot (a second ``s`` is ignored); a ``t`` links the slot's
    slice to its own and takes the slot; an ``f`` links the slot's slice to its own and leaves the
    slot (a fan-out); a ``t`` or ``f`` with the slot empty links nothing; a point bound to no slice
    is skipped."""
    links: list[tuple[int, int, int]] = []
    slot: dict[int, int] = {}
    for g, p, sl in zip(group, ph, bound):
        if sl < 0:
            continue                      # bound to no slice: skipped
        if p == ord("s"):
            slot.setdefault(g, sl)        # a second s while the flow is started: ignored
        elif g in slot:
            links.append((slot[g], sl, g))
            if p == ord("t"):
                slot[g] = sl              # a step: the next hop leaves from here
    return links


def bind_reference(s_ts, s_dur, s_track, bseq, eseq, q_track, q_ts, q_seq, q_enc) -> list[int]:
    """The slice each flow point binds to (-1: none), as ``traceconv._core.flows.bind`` finds it, by
    brute force.  Slices of one track are ordered by (start, longer first, begin's file position,
    index): Perfetto's order after its stable sort.  A point that binds to the enclosing slice
    takes the last slice in that order open at its time and file position (begun before it, or at
    its time earlier in the file; not ended before it: an ``X`` (``eseq`` < 0) stays open through its
    end time, an ``E`` at the point's time closes it only if earlier in the file); any other point
    takes the first slice to begin after it (later, or at its time and not earlier in the file)."""
    key = lambda i: (s_ts[i], -s_dur[i], bseq[i], i)     # noqa: E731
    out = []
    for track, ts, seq, enc in zip(q_track, q_ts, q_seq, q_enc):
        on = [i for i in range(len(s_ts)) if s_track[i] == track]
        if enc:
            found = [i for i in on
                     if (s_ts[i] < ts or (s_ts[i] == ts and bseq[i] <= seq))
                     and (s_ts[i] + s_dur[i] > ts
                          or (s_ts[i] + s_dur[i] == ts and (eseq[i] < 0 or eseq[i] > seq)))]
            out.append(max(found, key=key, default=-1))
        else:
            found = [i for i in on if s_ts[i] > ts or (s_ts[i] == ts and bseq[i] >= seq)]
            out.append(min(found, key=key, default=-1))
    return out


# slices: (track, start, duration, begin's file position, end's file position or -1 for an X);
# points: (track, time, file position, binds to the enclosing slice)
bind_slices_st = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(0, 15), st.integers(0, 80),
                                    st.integers(-1, 80)), max_size=40)
bind_points_st = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 80), st.booleans()),
                          max_size=40)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bind_slices_st, bind_points_st)
def test_bind_kernel_equals_the_python_reference(slices, points):
    s_track, s_ts, s_dur, bseq, eseq = (list(c) for c in zip(*slices)) if slices else ([],) * 5
    q_track, q_ts, q_seq, q_enc = (list(c) for c in zip(*points)) if points else ([],) * 4
    got = _core.flows.bind(np.asarray(s_ts, np.int64), np.asarray(s_dur, np.int64), np.asarray(s_track, np.int32),
                           np.asarray(bseq, np.int32), np.asarray(eseq, np.int32), np.asarray(q_track, np.int32),
                           np.asarray(q_ts, np.int64), np.asarray(q_seq, np.int64), np.asarray(q_enc, np.bool_))
    assert got.dtype == np.int64
    assert got.tolist() == bind_reference(s_ts, s_dur, s_track, bseq, eseq, q_track, q_ts, q_seq, q_enc)


def test_bind_on_a_hand_made_thread():
    # an X A [0, 100) holds B [10, 20) and C [20, 30) (B's E at file position 5, C's B at 7); an X D
    # starts at 100 (its position: 9)
    s = dict(s_ts=[0, 10, 20, 100], s_dur=[100, 10, 10, 5], s_track=[0, 0, 0, 0], bseq=[1, 2, 7, 9],
             eseq=[-1, 5, 8, -1])
    pts = [(15, 3, True), (20, 4, True), (20, 6, True), (20, 8, True), (100, 8, True), (100, 10, True),
           (50, 8, False), (100, 8, False), (100, 10, False), (5, 0, True)]
    q_ts, q_seq, q_enc = (list(c) for c in zip(*pts))
    got = _core.flows.bind(*s.values(), [0] * len(pts), q_ts, q_seq, q_enc).tolist()
    # in B; at B's end before its E (still open); at C's begin after B's E and before C's B (A);
    # after C's B (C); at A's end (an X: open through it); at D's begin after it (D); the next
    # slices to begin: D, D, none after D's B; at 5 in A
    assert got == [1, 1, 0, 2, 0, 3, 3, 3, -1, 0]
    assert got == bind_reference(*s.values(), [0] * len(pts), q_ts, q_seq, q_enc)


points_st = st.lists(st.tuples(st.integers(0, 3), st.sampled_from("stf"), st.integers(-1, 6)), max_size=60)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(points_st)
def test_link_kernel_equals_the_python_reference(points):
    points.sort(key=lambda p: p[0])                 # by flow; in each, the list's order is time order
    group = [p[0] for p in points]
    ph = [ord(p[1]) for p in points]
    bound = [p[2] for p in points]
    src, dst, grp, unresolved, dropped, used = _core.flows.link(np.asarray(group, np.int64),
                                                                np.asarray(ph, np.uint8), np.asarray(bound, np.int64))
    assert list(zip(src.tolist(), dst.tolist(), grp.tolist())) == link_reference(group, ph, bound)
    assert dropped + used == len(points)            # every event is either in a link or counted as left out


def link_v2_reference(binds: list[tuple]) -> tuple[list[tuple[int, int]], int]:
    """Perfetto's v2 rule over (bind_id, slice, flow_in, flow_out, ts) points, as the reader
    stated it in Python before ``_core.flows.link_v2``: the flows in order, and how many points
    found no other end."""
    by_id: dict = {}
    for bid, i, fin, fout, ts in binds:
        by_id.setdefault(bid, []).append((ts, i, fin, fout))
    flows, unresolved = [], 0
    for items in by_id.values():
        if len(items) == 2 and items[0][2] != items[0][3] and items[1][2] != items[1][3] \
                and items[0][3] != items[1][3]:
            src, dst = (items[0], items[1]) if items[0][3] else (items[1], items[0])
            flows.append((src[1], dst[1]))
            continue
        items.sort(key=lambda x: (x[0], not x[3], x[1]))
        pending, linked = None, False
        for _, i, fin, fout in items:
            if fin:
                if pending is not None:
                    flows.append((pending, i))
                    linked = True
                else:
                    unresolved += 1
            if fout:
                if pending is not None and not linked:
                    unresolved += 1
                pending, linked = i, False
        if pending is not None and not linked:
            unresolved += 1
    return flows, unresolved


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 30), st.booleans(), st.booleans(), st.integers(0, 6)),
                max_size=30))
def test_link_v2_kernel_equals_the_python_reference(points):
    """v2 flows: fan-outs, pure source/destination pairs in either time order, ties in time (a
    source before its ends), points with neither flag, ids with a single point."""
    src, dst, unresolved = _core.flows.link_v2(*(np.array(c, t) for c, t in zip(zip(*points), (
        np.int64, np.int64, bool, bool, np.int64)))) if points else _core.flows.link_v2(
        *(np.zeros(0, t) for t in (np.int64, np.int64, bool, bool, np.int64)))
    flows, lost = link_v2_reference(points)
    assert list(zip(src.tolist(), dst.tolist())) == flows and unresolved == lost


def test_fan_out_follows_trace_processor_v1_rule():
    trace = traceconv.load(FANOUT)
    assert links(trace) == sorted([
        ("launch", "k1"), ("launch", "k2"), ("launch", "k3"),    # an f does not close the flow
        ("launch", "relay"), ("relay", "k4"), ("relay", "k5"),   # a t moves it on
        ("relay", "k6"),                                         # a second s of a started id: ignored
        ("solo", "k7"), ("solo", "k8")])                          # (id 9: an f with no s: nothing)
    warned = {w.code.value: w.count for w in trace.diagnostics.warnings}
    assert warned["unresolved-flow"] == 2                        # the repeated s and the lone f


@tp.requires_trace_processor
def test_fan_out_links_equal_trace_processor_on_the_raw_file(tmp_path):
    raw = tp.query(FANOUT, FLOWS_SQL)
    assert len(raw) == 9
    trace, outs = outputs(FANOUT, tmp_path)
    for out in outs:
        tp.assert_loads(out)
        assert tp.query(out, FLOWS_SQL) == raw, out.name


# ---------------------------------------------------------------- real files

@tp.requires_trace_processor
def test_cuda_graph_launch_points_at_every_kernel_it_started(tmp_path):
    trace, outs = outputs(CUDA_GRAPH, tmp_path)
    raw = tp.query(CUDA_GRAPH, FLOWS_SQL)
    assert len(raw) == 80                 # Perfetto's count from the raw JSON (traceconv's was 40)
    assert len(trace.flows) == 80
    # each of the 8 replays: one cudaGraphLaunch, one s, six kernels each with an f of its id
    fan = Counter(r["src_ts"] for r in raw if r["src"] == "cudaGraphLaunch")
    assert sorted(fan.values()) == [6] * 8
    events = orjson.loads(gzip.decompress(CUDA_GRAPH.read_bytes()))["traceEvents"]
    s_ids = {e["id"] for e in events if e.get("ph") == "s"}
    expect = Counter(e["id"] for e in events if e.get("ph") == "f" and e["id"] in s_ids)
    assert sum(expect.values()) == 80
    for out in outs:
        tp.assert_loads(out)
        assert tp.query(out, FLOWS_SQL) == raw, out.name


@tp.requires_trace_processor
def test_perfetto_flow_samples_give_the_flows_trace_processor_makes_of_them(tmp_path):
    for src in PERFETTO_SAMPLES:
        raw = tp.query(src, FLOWS_SQL)
        assert raw, src.name
        _, outs = outputs(src, tmp_path)
        for out in outs:
            tp.assert_loads(out)
            assert tp.query(out, FLOWS_SQL) == raw, (src.name, out.name)


def test_json_bind_ids_leave_room_for_the_v1_flows(tmp_path):
    """trace_processor gives the v1 flows of a file small ids in the space of the v2 bind_ids, so a
    small bind_id joins an unrelated v1 flow (perfetto_connected_flow_data.json drew
    Flow1_Slice0 -> Flow0_Slice1): bind_ids start at V2_BIND_BASE."""
    _, (_, js) = outputs(PERFETTO_SAMPLES[2], tmp_path)
    events = orjson.loads(js.read_bytes())["traceEvents"]
    binds = [e["bind_id"] for e in events if "bind_id" in e]
    v1 = [e for e in events if e.get("ph") in ("s", "f")]
    assert binds and v1
    assert min(binds) >= V2_BIND_BASE > len(v1)


@tp.requires_trace_processor
def test_merge_keeps_every_fan_out_link_of_every_rank(tmp_path):
    for r in (0, 1):
        (tmp_path / f"rank{r}.pt.trace.json.gz").write_bytes(CUDA_GRAPH.read_bytes())
    res = traceconv.merge([tmp_path / "rank0.pt.trace.json.gz", tmp_path / "rank1.pt.trace.json.gz"],
                          tmp_path / "run.pftrace")
    assert sorted(f[1] for f in res.files) == [0, 1]
    tp.assert_loads(tmp_path / "run.pftrace")
    assert tp.query(tmp_path / "run.pftrace", "select count(*) as n from flow")[0]["n"] == 160
    names = tp.query(tmp_path / "run.pftrace", """
        select so.name as src, si.name as dst, count(*) as n from flow f
        join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in group by 1, 2 order by 1, 2""")
    raw = tp.query(CUDA_GRAPH, """
        select so.name as src, si.name as dst, count(*) as n from flow f
        join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in group by 1, 2 order by 1, 2""")
    assert names == [{**r, "n": 2 * r["n"]} for r in raw]


# ---------------------------------------------------------------- the .pftrace's event order

@tp.requires_trace_processor
def test_a_flow_between_slices_that_begin_at_one_time_is_kept(tmp_path):
    """A TrackEvent flow goes from the event read first: at one time the source's begin must come
    before the destination's, whatever their tracks' order, and each track keeps its nesting."""
    from traceconv.model import Trace
    t = Trace("test")
    p = t.process(1, "p")
    a = t.thread(p, 1, "device")            # the destination's track comes first
    b = t.thread(p, 2, "host")
    q = t.add_slice(a.track, 100, 20, "Q")
    d = t.add_slice(a.track, 100, 5, "D")    # inside Q, same start
    t.add_slice(b.track, 100, 50, "P")
    s = t.add_slice(b.track, 100, 10, "S")   # inside P, same start
    c = t.thread(p, 3, "other")
    r = t.add_slice(c.track, 100, 30, "R")
    t.add_flow(s, d, "sync")
    t.add_flow(r, s, "into")                 # S is a source and a destination at one time
    nest(t)
    traceconv.save(t, tmp_path / "o.pftrace")
    traceconv.save(t, tmp_path / "o.json")
    for out in (tmp_path / "o.pftrace", tmp_path / "o.json"):
        tp.assert_loads(out)
        assert [(r["src"], r["dst"]) for r in tp.query(out, FLOWS_SQL)] == [("R", "S"), ("S", "D")], out.name
    depth = {r["name"]: r["depth"] for r in tp.query(tmp_path / "o.pftrace", "select name, depth from slice")}
    assert depth == {"Q": 0, "D": 1, "P": 0, "S": 1, "R": 0}
    assert q is not None


@tp.requires_trace_processor
def test_both_outputs_draw_every_link_of_the_model(tmp_path):
    """HTA's critical-path sample: 15 of its syncs begin on the host and the device at the same
    microsecond (the .pftrace drew 124 of the 139 links)."""
    trace, outs = outputs(FIX / "kineto" / "hta_critical_path_simple_add_trace.json.gz", tmp_path)
    assert len(trace.flows) == 139
    pf, js = (tp.query(o, FLOWS_SQL) for o in outs)
    assert len(pf) == 139 and pf == js



def test_points_bound_on_a_thread_of_their_own_make_the_same_flows(monkeypatch, tmp_path):
    """The scanner's flow points are bound to slices on a thread of their own while the reader groups
    and orders them (from ``EARLY_BIND`` points on), and the slices they bound to follow the points'
    moves, the swaps of skewed flows included: the same links, names and warnings as binding the
    ordered points (the fixtures' Kineto flows and fan-outs, MegEngine's 273 skewed flows, read by
    the general decoder, and a Kineto trace whose flows end before they start, read by the
    scanner: each still drawn from its start's slice to its end's)."""
    from traceconv.readers.chrome import flows

    ev = [{"ph": "X", "cat": "cpu_op", "name": f"launch{k}", "pid": 1, "tid": 1, "ts": 100 * k + 90, "dur": 20}
          for k in range(3)]
    ev += [{"ph": "X", "cat": "kernel", "name": f"kernel{k}", "pid": 1, "tid": 7, "ts": 100 * k + 40, "dur": 20}
           for k in range(3)]
    for k in range(3):       # each flow's end (at 100k + 50) before its start (at 100k + 100)
        ev += [{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": k, "pid": 1, "tid": 1, "ts": 100 * k + 100},
               {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": k, "pid": 1, "tid": 7, "ts": 100 * k + 50,
                "bp": "e"}]
    skew = tmp_path / "skewed.pt.trace.json"
    skew.write_bytes(orjson.dumps({"schemaVersion": 1, "traceEvents": ev}))
    files = [CUDA_GRAPH, FANOUT, *PERFETTO_SAMPLES, skew,
             FIX / "megengine_timeline" / "generated_mge1130_dynamic.chrome_timeline.json.gz",
             FIX / "kineto" / "hta_trace_diff_control_legacy_async_cpu_to_gpu_EXCERPT.json.gz"]
    skewed = 0
    for f in files:
        got = []
        for early in (1 << 62, 1):
            monkeypatch.setattr(flows, "EARLY_BIND", early)
            t = traceconv.load(f)
            got.append((list(t.flows.src), list(t.flows.dst), list(t.flows.name),
                        sorted((w.code.value, w.count, w.message) for w in t.diagnostics.warnings)))
        assert got[0] == got[1], f
        assert got[0][0], f                                     # (every file has flows)
        skewed += sum(c for _, c, m in got[0][3] if "earlier than their start" in m)
        if f == skew:                                           # (t: the early binding's trace)
            assert [(t.strings[t.slices.name[a]], t.strings[t.slices.name[b]]) for a, b in zip(*got[1][:2])] == \
                [(f"launch{k}", f"kernel{k}") for k in range(3)]
    assert skewed == 273 + 3
