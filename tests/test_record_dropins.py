"""The drop-in faces against the real packages: the same calls through ML-Agents' / Sample Factory's
timers and through traceconv's give the same tree / the same printed text; and with a recorder
running, the .pftrace holds the calls that happened, in order, nested, with their durations.

The real modules are ``mlagents_envs.timers`` (plain Python) and ``sample_factory.utils.timing``,
which imports ``psutil``, ``sample_factory.algo.utils.misc`` (for ``EPS``; it imports torch) and
``sample_factory.utils.utils`` (for ``log``; colorlog, signal_slot...): those three are stubbed
here with what ``timing.py`` uses from them (``EPS = 1e-8`` as in misc.py, a logger), and only
``timing.py`` itself is loaded from the installed package.  The tests skip, saying so, when the
packages are not installed (``pip install --no-deps mlagents-envs sample-factory``).
"""

from __future__ import annotations

import json
import threading
import time
import types

import pytest

import originals
import perfetto_oracle as tp
import traceconv
import traceconv.record as rec
from traceconv.record import mlagents as ours_ml
from traceconv.record import samplefactory as ours_sf


@pytest.fixture(autouse=True)
def _clean():
    rec.stop()
    yield
    rec.stop()


# ---------------------------------------------------------------- the real modules

def _theirs_ml():
    mod = originals.mlagents_timers()
    if mod is None:
        pytest.skip("mlagents-envs is not installed (pip install --no-deps mlagents-envs)")
    return mod


def _theirs_sf():
    mod = originals.samplefactory_timing("_sf_timing_under_test")
    if mod is None:
        pytest.skip("sample-factory is not installed (pip install --no-deps sample-factory)")
    return mod


class FakeClock:
    """Every read is 1/8 s later: both implementations see the same sequence of times (exact in
    binary, so their float sums agree bit for bit)."""

    def __init__(self) -> None:
        self.n = 0

    def seconds(self) -> float:
        self.n += 1
        return self.n * 0.125

    def ns(self) -> int:
        self.n += 1
        return self.n * 125_000_000


def _fake_time_module(clock: FakeClock, *, perf: bool) -> types.SimpleNamespace:
    return types.SimpleNamespace(perf_counter=clock.seconds if perf else time.perf_counter,
                                 time=clock.seconds if not perf else (lambda: 1_700_000_000.0))


# ---------------------------------------------------------------- ML-Agents

def _ml_script(m):
    """What ML-Agents' trainer does with its timers: nested blocks, @timed, repeated paths, gauges
    (one NaN, ignored), metadata, a merge of a worker's root as ML-Agents' env manager does."""
    @m.timed
    def advance():
        with m.hierarchical_timer("env_step"):
            with m.hierarchical_timer("worker_step"):
                pass
        with m.hierarchical_timer("process_trajectory"):
            pass

    for i in range(3):
        advance()
        m.set_gauge("Environment.CumulativeReward.mean", float(i))
    m.set_gauge("Environment.CumulativeReward.mean", float("nan"))
    with m.hierarchical_timer("TrainerController.start_learning"):
        with m.hierarchical_timer("update_policy"):
            pass
    worker = m.TimerStack()
    with m.hierarchical_timer("worker_only", worker):
        pass
    with m.hierarchical_timer("workers") as node:
        node.merge(worker.get_root(), root_name="worker_root", is_parallel=True)
    m.add_metadata("mlagents_version", "0.28.0")
    return m.get_timer_tree()


def _ml_run(m, clock):
    saved = m.time
    m.time = _fake_time_module(clock, perf=True)
    saved_clock = getattr(m, "_clock", None)
    if saved_clock is not None:
        m._clock = clock.ns
    try:
        m.reset_timers()
        return _ml_script(m)
    finally:
        m.time = saved
        if saved_clock is not None:
            m._clock = saved_clock


def _strip_run_metadata(tree):
    tree = json.loads(json.dumps(tree))
    for k in ("python_version", "command_line_arguments"):
        assert k in tree["metadata"]
    return tree


def test_mlagents_same_tree_as_the_real_module():
    theirs = _theirs_ml()
    a = _ml_run(theirs, FakeClock())
    b = _ml_run(ours_ml, FakeClock())
    assert json.dumps(_strip_run_metadata(a)) == json.dumps(_strip_run_metadata(b))   # keys in the same order too
    adv = b["children"]["_ml_script.<locals>.advance"]
    assert adv["count"] == 3 and set(adv["children"]) == {"env_step", "process_trajectory"}
    assert b["gauges"]["Environment.CumulativeReward.mean"] == {"value": 2.0, "min": 0.0, "max": 2.0, "count": 3}
    assert b["children"]["workers"]["children"]["worker_root"]["is_parallel"] is True


def test_mlagents_records_the_real_calls(tmp_path):
    out = tmp_path / "ml.pftrace"
    r = rec.start(out)
    ours_ml.reset_timers()
    seen = []

    @ours_ml.timed
    def advance(k):
        with ours_ml.hierarchical_timer("env_step"):
            time.sleep(0.002 * (k + 1))
        with ours_ml.hierarchical_timer("update"):
            time.sleep(0.001)
        seen.append(k)

    before = []
    for k in range(3):
        before.append(time.perf_counter_ns() + r.offset)       # Unix ns, as the recorder writes
        advance(k)
        ours_ml.set_gauge("reward", float(k))
    tree = ours_ml.get_timer_tree()
    timers = tmp_path / "timers.json"
    ours_ml.write_timing_tree(str(timers))
    rec.stop()
    assert tp.problems(out) == []
    rows = tp.query(out, """select s.name, s.ts, s.dur, s.depth from slice s
                            where s.name not like 'traceconv.record%' order by s.ts, s.depth""")
    name = "test_mlagents_records_the_real_calls.<locals>.advance"
    assert [(r["name"], r["depth"]) for r in rows] == [(name, 0), ("env_step", 1), ("update", 1)] * 3
    # the calls as they happened: each started just after the test's own clock read before it
    starts = [x["ts"] for x in rows if x["name"] == name]
    assert all(0 <= s - b < 5_000_000 for s, b in zip(starts, before)), (starts, before)
    env = [x["dur"] for x in rows if x["name"] == "env_step"]
    assert all(d >= 2_000_000 * (k + 1) for k, d in enumerate(env))
    node = tree["children"][name]
    # the tree's totals are the sums of the recorded slices (same clock reads; ns -> s)
    for key, want in ((name, node["total"]), ("env_step", node["children"]["env_step"]["total"]),
                      ("update", node["children"]["update"]["total"])):
        got = sum(r["dur"] for r in rows if r["name"] == key) / 1e9
        assert got == pytest.approx(want, abs=3e-9)
    assert node["count"] == 3
    vals = tp.query(out, "select c.value from counter c join counter_track t on t.id = c.track_id "
                         "where t.name = 'reward' order by c.ts")
    assert [r["value"] for r in vals] == [0.0, 1.0, 2.0]
    # the timers.json still converts as before
    t = traceconv.load(timers)
    assert t.meta.source_format == "mlagents" and len(t.slices) == 4


def test_mlagents_without_a_recorder_records_nothing():
    assert not rec.recording()
    with ours_ml.hierarchical_timer("x") as node:
        pass
    assert node.count == 1
    assert not hasattr(rec._core._tls, "ev")


def test_mlagents_per_thread_stacks():
    ours_ml.reset_timers()

    def work():
        with ours_ml.hierarchical_timer("in_thread"):
            pass
        stacks.append(ours_ml.get_timer_stack_for_thread(threading.current_thread()))

    stacks = []
    th = threading.Thread(target=work)
    th.start()
    th.join()
    assert "in_thread" not in ours_ml.get_timer_tree().get("children", {})
    assert "in_thread" in stacks[0].root.children


# ---------------------------------------------------------------- Sample Factory

def _sf_script(T):
    """A learner's loop as Sample Factory writes it: additive, last-value and averaged timers,
    nested, one key under two parents, two contexts in one with statement."""
    timing = T("Learner 0 profile")
    with timing.timeit("main_loop"):
        for step in range(4):
            with timing.add_time("prepare_batch"):
                pass
            with timing.add_time("train"):
                with timing.add_time("epoch_init"):
                    pass
                with timing.add_time("update"):
                    with timing.time_avg("clip", average=3):
                        pass
                with timing.timeit("misc"):
                    pass
            with timing.add_time("wait_policy"), timing.add_time("wait_policy_total"):
                pass
            with timing.add_time("misc"):
                pass
    return timing


def _sf_run(m, clock, theirs: bool):
    if theirs:
        saved = m.time
        m.time = types.SimpleNamespace(time=clock.seconds)
        try:
            return _sf_script(m.Timing)
        finally:
            m.time = saved
    saved = m._clock
    m._clock = clock.ns
    try:
        return _sf_script(m.Timing)
    finally:
        m._clock = saved


def test_samplefactory_same_text_as_the_real_module():
    theirs = _theirs_sf()
    a = _sf_run(theirs, FakeClock(), True)
    b = _sf_run(ours_sf, FakeClock(), False)
    assert str(b) == str(a)
    assert b.flat_str() == a.flat_str()
    assert b.main_loop == a.main_loop and b.train == a.train
    text = str(b).splitlines()
    assert text[0] == "Learner 0 profile tree view:" and text[1] == "main_loop: 9.1250"  # 73 reads of 1/8 s
    assert text[2].startswith("  prepare_batch: ") and "wait_policy" in text[-1]


def test_samplefactory_records_the_real_calls(tmp_path):
    out = tmp_path / "sf.pftrace"
    rec.start(out)
    timing = ours_sf.Timing("Runner profile")
    with timing.timeit("main_loop"):
        for k in range(3):
            with timing.add_time("collect"):
                time.sleep(0.001 * (k + 1))
                with timing.add_time("env_step"):
                    time.sleep(0.001)
    rec.stop()
    assert tp.problems(out) == []
    rows = tp.query(out, """select s.name, s.category cat, s.ts, s.dur, s.depth from slice s
                            where s.name not like 'traceconv.record%' order by s.ts, s.depth""")
    assert [(r["name"], r["depth"]) for r in rows] == [("main_loop", 0)] + [("collect", 1), ("env_step", 2)] * 3
    assert {r["cat"] for r in rows} == {"Runner profile"}
    collect = [r["dur"] for r in rows if r["name"] == "collect"]
    assert all(d >= 1_000_000 * (k + 2) for k, d in enumerate(collect))
    assert sum(collect) / 1e9 == pytest.approx(timing.collect, abs=3e-9)
    assert rows[0]["dur"] / 1e9 == pytest.approx(timing.main_loop, abs=2e-9)
    # the printed tree is what traceconv's Sample Factory reader reads
    log = tmp_path / "sf_log.txt"
    log.write_text(f"[2024-01-01 00:00:10,001][01234] {timing}\n")
    t = traceconv.load(log, "sample-factory")
    names = {t.strings[i] for i in t.slices.name}
    assert {"collect", "env_step", "main_loop"} <= names
