"""ML-Agents timers.json: the real files from the ML-Agents repository (Python and C# writers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import traceconv
from traceconv.model.layout import nest
from traceconv.model import Clock, TrackKind

from timeline import assert_same_timeline, from_model, read_chrome_json, read_perfetto

FIX = Path(__file__).parent / "fixtures" / "mlagents"
FILES = sorted(FIX.glob("*.json"))


def nodes(tree: dict, name: str = "root", parent_parallel: bool = False, path: tuple = ()):
    """(path, name, node, starts a parallel track) for every node of a timer tree, in file order."""
    here = path + (name,)
    yield here, name, tree, bool(tree.get("is_parallel")) and not parent_parallel
    children = tree.get("children") or {}
    items = children.items() if isinstance(children, dict) else [(c["name"], c) for c in children]
    for cname, child in items:
        yield from nodes(child, cname, bool(tree.get("is_parallel")), here)


def ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


@pytest.fixture(params=FILES, ids=lambda p: p.stem)
def sample(request):
    path = request.param
    tree = json.loads(path.read_text())
    trace = traceconv.load(path)
    nest(trace)
    return path, tree, trace


def test_one_slice_per_timer_node_with_its_total_and_count(sample):
    _, tree, trace = sample
    expected = sorted((name, ns(n["total"]), n["count"]) for _, name, n, _ in nodes(tree))
    got = sorted((trace.strings[trace.slices.name[i]], trace.slices.dur[i], trace.slice_args(i)["count"])
                 for i in range(len(trace.slices)))
    assert got == expected
    assert trace.meta.source_format == "mlagents"
    assert trace.meta.synthesized is True


def test_children_laid_end_to_end_inside_parent_on_the_same_track(sample):
    """The layout rule: children one after another from the parent's start, in file order."""
    _, tree, trace = sample
    by_path = {}
    order = [(p, n, par) for p, _, n, par in nodes(tree)]
    # slices are added in depth-first file order, the same order nodes() yields
    assert len(order) == len(trace.slices)
    for (path, node, parallel), i in zip(order, range(len(trace.slices))):
        by_path[path] = (i, node, parallel)
    for path, (i, node, parallel) in by_path.items():
        children = [(p, v) for p, v in by_path.items() if p[:-1] == path]
        cursor = trace.slices.ts[i]
        for cpath, (ci, cnode, cpar) in children:
            if cpar:
                # a merged subtree: its own track, starting where its parent starts
                assert trace.slices.track[ci] != trace.slices.track[i]
                assert trace.slices.ts[ci] == trace.slices.ts[i]
                assert trace.slices.depth[ci] == 0
                continue
            assert trace.slices.track[ci] == trace.slices.track[i], cpath
            assert trace.slices.ts[ci] == cursor, cpath
            assert trace.slices.depth[ci] == trace.slices.depth[i] + 1, cpath
            cursor += trace.slices.dur[ci]
        assert cursor <= trace.slices.ts[i] + trace.slices.dur[i], f"children escape {path}"


def test_args_carry_count_self_and_mean(sample):
    _, tree, trace = sample
    for (_, name, node, _), i in zip(nodes(tree), range(len(trace.slices))):
        args = trace.slice_args(i)
        assert trace.strings[trace.slices.name[i]] == name
        assert args["count"] == node["count"]
        assert args["total_s"] == node["total"]
        assert args["self_s"] == node["self"]
        assert args["mean_s"] == pytest.approx(node["total"] / node["count"])


def test_run_start_and_metadata(sample):
    _, tree, trace = sample
    start = int(tree["metadata"]["start_time_seconds"]) * 10**9
    assert trace.meta.clock is Clock.UNIX
    assert min(trace.slices.ts) == start
    assert trace.meta.extra["mlagents.metadata"] == tree["metadata"]


def test_both_outputs_decode_and_agree_with_the_model(sample, tmp_path):
    path, tree, trace = sample
    traceconv.save(trace, tmp_path / "t.json")
    traceconv.save(trace, tmp_path / "t.pftrace")
    j = read_chrome_json(tmp_path / "t.json")
    p = read_perfetto(tmp_path / "t.pftrace")
    m = from_model(trace)
    assert_same_timeline(j, p)
    assert_same_timeline(m, p)
    assert len(p.slices) == sum(1 for _ in nodes(tree))
    assert p.metadata["mlagents.metadata"] == tree["metadata"]
    assert j.metadata["mlagents.metadata"] == tree["metadata"]
    assert j.metadata["traceconv"]["synthesized"] is True
    assert p.metadata["traceconv"]["source_format"] == "mlagents"


def test_soccer_twos_parallel_worker_subtree_has_its_own_track():
    trace = traceconv.load(FIX / "python_SoccerTwos_run_logs_timers.json")
    nest(trace)
    tl = from_model(trace)
    names = {s.name: s for s in tl.slices if s.name in ("workers", "worker_root", "UnityEnvironment.step",
                                                           "communicator.exchange", "trainer_threads")}
    workers, worker_root = names["workers"], names["worker_root"]
    assert worker_root.track == "worker_root (parallel, in workers)"
    assert worker_root.ts == workers.ts
    assert worker_root.dur == 116_972_415_400   # 116.9724154 s, longer than its parent
    assert workers.dur == 19_126_100
    # the merged subtree's descendants (also marked is_parallel) stay on that one track
    assert names["UnityEnvironment.step"].track == worker_root.track
    assert names["communicator.exchange"].track == worker_root.track
    assert names["communicator.exchange"].depth == 2
    # 7.000000152856956e-07 s in exponent form
    assert names["trainer_threads"].dur == 700
    assert {t.kind for t in trace.tracks} == {TrackKind.PROCESS, TrackKind.THREAD}
    assert trace.processes[0].name == "mlagents-learn [synthesized timeline]"
    root_args = trace.slice_args(0)
    assert root_args["gauges"]["SoccerTwos.Policy.Entropy.mean"]["value"] == 4.384725093841553
    assert not trace.diagnostics.lossy()


def test_csharp_writer_specifics():
    trace = traceconv.load(FIX / "csharp_UR16_agents_timers.json")
    assert trace.strings[trace.slices.name[0]] == "root"   # the C# writer names no root
    assert trace.processes[0].name == "Unity: UR16 agents [synthesized timeline]"
    assert trace.meta.extra["producer"] == "Unity ML-Agents (C#)"
    gauge = trace.slice_args(0)["gauges"]["UR16Behabior.CumulativeReward"]
    assert gauge["runningAverage"] == -0.115975536 and gauge["weightedAverage"] == -0.319515467
    # self (8.5508328) > total (8.5508325) by tick rounding: kept as the file says
    i = [trace.strings[n] for n in trace.slices.name].index("CameraSensor.WriteToTensor")
    assert trace.slice_args(i)["self_s"] == 8.5508328
    assert trace.slices.dur[i] == 8_550_832_500


def test_legacy_list_children_and_no_metadata(tmp_path):
    """ML-Agents <= 0.14: children is a list of named nodes, root total 0, no metadata."""
    legacy = {"name": "root", "total": 0.0, "count": 0, "self": 0.0, "children": [
        {"name": "TrainerController.start_learning", "total": 2.0, "count": 1, "self": 0.5, "children": [
            {"name": "env_step", "total": 1.5, "count": 3, "self": 1.5}]}]}
    f = tmp_path / "old_timers.json"
    f.write_text(json.dumps(legacy))
    trace = traceconv.load(f)
    nest(trace)
    tl = from_model(trace)
    got = {s.name: (s.track, s.ts, s.dur, s.depth) for s in tl.slices}
    assert got == {"root": ("timers", 0, 2_000_000_000, 0),
                   "TrainerController.start_learning": ("timers", 0, 2_000_000_000, 1),
                   "env_step": ("timers", 0, 1_500_000_000, 2)}
    assert trace.meta.clock is Clock.SYNTHETIC
    assert trace.slice_args(0)["total_unknown"] is True
    assert [w.code.value for w in trace.diagnostics.warnings] == ["note"]
    assert not trace.diagnostics.lossy()


def test_children_longer_than_their_parent_are_flagged_and_never_escape_it(tmp_path):
    """A parent whose children add up to more than its total: flagged, counted, no slice escapes it."""
    tree = {"name": "root", "total": 10.0, "count": 1, "self": 0.0, "children": {
        "a": {"total": 6.0, "count": 1, "self": 6.0},
        "b": {"total": 8.0, "count": 1, "self": 5.0, "children": {"b1": {"total": 3.0, "count": 2, "self": 3.0}}}}}
    f = tmp_path / "timers.json"
    f.write_text(json.dumps(tree))
    trace = traceconv.load(f)
    nest(trace)
    got = {s.name: (s.track, s.ts, s.dur, s.depth) for s in from_model(trace).slices}
    assert got == {"root": ("timers", 0, 10 * 10**9, 0),
                   "a": ("timers", 0, 6 * 10**9, 1),
                   # b runs past root's end, so it alone moves to an overlap track; its child b1
                   # nests in root, so it stays (the fewest slices moved)
                   "b": ("timers (overlap 1)", 6 * 10**9, 8 * 10**9, 0),
                   "b1": ("timers", 6 * 10**9, 3 * 10**9, 1)}
    assert trace.slice_args(0)["children_exceed_total"] is True
    counts = {w.code.value: w.count for w in trace.diagnostics.warnings}
    assert counts == {"children-exceed-parent": 1, "overlap-lanes": 1}
