"""traceconv validate: each problem found in small crafted inputs, none in clean files,
the overlaps of the real Kineto samples that have them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from traceconv import validate as v

FIX = Path(__file__).parent / "fixtures"
CLEAN = [Path(__file__).parent.parent / "examples" / "mlagents_timers.json",
         FIX / "multirank" / "gloo_2ranks" / "rank0.pt.trace.json.gz",
         FIX / "multirank" / "hta_trace_filter_2ranks" / "sampled_rank-1.json.gz"]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "traceconv", "validate", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def trace(tmp_path: Path, events: list[dict]) -> Path:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}, *events]}))
    return p


@pytest.mark.parametrize("path", CLEAN, ids=lambda p: p.name)
def test_clean_files_pass(path):
    r = cli(path, "--format", "json")
    assert r.returncode == 0, r.stdout
    d = orjson.loads(r.stdout)
    assert d["clean"] is True and all(f["severity"] == "info" for f in d["findings"])


def test_the_overlaps_of_a_real_kineto_sample_are_flagged():
    r = cli(FIX / "kineto" / "generated_torch213_cpu_single_worker0.pt.trace.json.gz", "--format", "json")
    assert r.returncode == 1
    found = {f["check"]: f for f in orjson.loads(r.stdout)["findings"]}
    assert found["overlapping slices"]["severity"] == "problem"
    # the slices that partially overlap: what trace_processor spills from this file
    # (slice_spill_overlapping_complete_event), not the 254 that moved when a subtree moved along
    assert found["overlapping slices"]["count"] == 12


X = {"ph": "X", "pid": 1, "tid": 1, "cat": "c"}


@pytest.mark.parametrize("events,check", [
    ([{**X, "name": "a", "ts": 0, "dur": 10}, {**X, "name": "b", "ts": 5, "dur": 10}], "overlapping slices"),
    ([{"ph": "B", "pid": 1, "tid": 1, "name": "open", "ts": 0}, {**X, "name": "x", "ts": 1, "dur": 1}],
     "unmatched B/E"),
    ([{"ph": "E", "pid": 1, "tid": 1, "ts": 5}, {**X, "name": "x", "ts": 1, "dur": 1}], "unmatched B/E"),
    ([{**X, "name": "a", "ts": 0, "dur": 10}, {"ph": "s", "id": 7, "pid": 1, "tid": 1, "ts": 1, "name": "f",
                                                "cat": "f"}], "flows with a missing end"),
    ([{**X, "name": "long", "ts": 0, "dur": 8 * 24 * 3600 * 1e6}], "absurd durations"),
    ([{**X, "name": "rel", "ts": 1000, "dur": 1}, {**X, "name": "abs", "ts": 1.7e15, "dur": 1}], "mixed time bases"),
    ([{**X, "name": "x", "ts": 0, "dur": 1, "pid": 2**40}], "pids/tids out of range"),
    ([{**X, "name": "x", "ts": 0, "dur": 1}, {"ph": "?", "pid": 1, "tid": 1, "ts": 1, "name": "odd"}],
     "events a viewer cannot show"),
])
def test_each_problem_is_found(tmp_path, events, check):
    report = v.validate(trace(tmp_path, events))
    assert check in {f.check for f in report.problems}, report.findings
    r = cli(tmp_path / "t.json")
    assert r.returncode == 1 and check in r.stdout


def test_negative_durations(tmp_path):
    report = v.validate(trace(tmp_path, [{**X, "name": "x", "ts": 10, "dur": -5}]))
    assert {f.check for f in report.problems} & {"negative durations", "values out of range"}


def test_viewer_limits(tmp_path, monkeypatch):
    events = [{**X, "name": f"s{i}", "ts": i * 10, "dur": 5} for i in range(50)]
    path = trace(tmp_path, events)
    assert not v.validate(path).problems
    monkeypatch.setattr(v, "CHROME_MAX_EVENTS", 40)
    monkeypatch.setattr(v, "CHROME_MAX_BYTES", 1000)
    monkeypatch.setattr(v, "PERFETTO_TAB_BYTES", 100)
    checks = {f.check for f in v.validate(path).problems}
    assert checks == {"chrome://tracing limit", "chrome://tracing size", "Perfetto UI memory"}


def test_unreadable_input_exits_2(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    r = cli(p)
    assert r.returncode == 2 and r.stderr.startswith("traceconv: error: ")


def test_events_out_of_order_within_a_thread_are_counted(tmp_path):
    events = [{**X, "name": "c", "ts": 30, "dur": 1}, {**X, "name": "a", "ts": 10, "dur": 1},
              {**X, "name": "other thread", "ts": 5, "dur": 1, "tid": 2}, {**X, "name": "b", "ts": 20, "dur": 1}]
    found = {f.check: f for f in v.validate(trace(tmp_path, events)).findings}
    assert found["events out of order"].count == 1 and found["events out of order"].severity == "info"
    in_order = sorted(events, key=lambda e: e["ts"])
    assert "events out of order" not in {f.check for f in v.validate(trace(tmp_path, in_order)).findings}
