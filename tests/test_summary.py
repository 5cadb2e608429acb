"""traceconv summary: hotspot numbers against independent computations."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

import traceconv
from traceconv.model import Trace
from traceconv.hotspots import summarize

FIX = Path(__file__).parent / "fixtures" / "mlagents"


def file_totals(path: Path) -> dict[str, tuple[int, int, int]]:
    """name -> (calls, total ns, self ns) summed over the timer tree's nodes, from the JSON itself."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])

    def walk(node: dict, name: str) -> None:
        a = acc[name]
        a[0] += node["count"]
        a[1] += round(node["total"] * 1e9)
        a[2] += round(node["self"] * 1e9)
        for cname, child in (node.get("children") or {}).items():
            walk(child, cname)

    walk(json.loads(path.read_text()), "root")
    return {k: tuple(v) for k, v in acc.items()}


@pytest.mark.parametrize("path", sorted(FIX.glob("*.json")), ids=lambda p: p.stem)
def test_aggregate_numbers_equal_the_files_own(path):
    expected = file_totals(path)
    s = summarize(traceconv.load(path), by="name")
    got = {r.key: (r.count, r.total_ns, r.self_ns) for r in s.rows}
    assert got == expected
    assert abs(sum(r.share for r in s.rows) - 1.0) < 1e-9


def test_self_time_is_total_minus_nested_children_on_the_same_track():
    t = Trace("test")
    th = t.thread(t.process(1, "p"), 1, "main")
    other = t.thread(t.process(1), 2, "other")
    t.add_slice(th.track, 0, 100, "step")
    t.add_slice(th.track, 10, 30, "op")         # child of step
    t.add_slice(th.track, 15, 10, "inner")      # child of op
    t.add_slice(th.track, 50, 20, "op")         # child of step
    t.add_slice(th.track, 90, 20, "late")       # overlaps step's end: on a lane, not a child
    t.add_slice(other.track, 0, 500, "idle")    # another thread: not a child
    rows = {r.key: r for r in summarize(t).rows}
    assert (rows["step"].total_ns, rows["step"].self_ns, rows["step"].count) == (100, 50, 1)
    assert (rows["op"].total_ns, rows["op"].self_ns, rows["op"].count) == (50, 40, 2)
    assert rows["op"].avg_ns == 25
    assert (rows["inner"].self_ns, rows["late"].self_ns, rows["idle"].self_ns) == (10, 20, 500)
    by_thread = {r.key: r.total_ns for r in summarize(t, by="thread").rows}
    # the lane counts with its thread; nested time once: step [0, 100) and late [90, 110) cover 110
    assert by_thread == {"p / main": 110, "p / other": 500}
    assert [r.key for r in summarize(t, sort="total").rows][:2] == ["idle", "step"]
    assert [r.key for r in summarize(t, sort="count", top=1).rows] == ["op"]


def test_ranks_are_summed_and_the_straggler_named():
    traces = []
    for rank, d in ((0, 100), (1, 300), (2, 150)):
        t = Trace("test")
        t.meta.rank = rank
        t.add_slice(t.thread(t.process(7, "python"), 7).track, 0, d, "allreduce")
        traces.append(t)
    (row,) = summarize(traces).rows
    assert row.total_ns == 550 and row.count == 3
    assert row.per_rank_total_ns == {0: 100, 1: 300, 2: 150}
    assert row.straggler() == (1, 3.0)
    assert {r.key for r in summarize(traces, by="rank").rows} == {"rank 0", "rank 1", "rank 2"}


def run(*args):
    return subprocess.run([sys.executable, "-m", "traceconv", "summary", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_cli_formats():
    path = FIX / "python_SoccerTwos_run_logs_timers.json"
    expected = file_totals(path)
    r = run(path, "--format", "json", "--top", "0")
    assert r.returncode == 0, r.stderr
    rows = {x["key"]: (x["count"], x["total_ns"], x["self_ns"]) for x in orjson.loads(r.stdout)["rows"]}
    assert rows == expected
    r = run(path, "--format", "csv", "--by", "thread")
    got = list(csv.DictReader(io.StringIO(r.stdout)))
    assert {g["thread"] for g in got} == {"mlagents-learn [synthesized timeline] / timers",
                                         "mlagents-learn [synthesized timeline] / worker_root (parallel, in workers)"}
    r = run(path, "--top", "3")
    assert r.returncode == 0 and "env_step" in r.stdout and "84.846 s" in r.stdout
    r = run(path, "--by", "colour")
    assert r.returncode == 2 and "cannot group by 'colour'" in r.stderr


def test_a_folder_of_ranks_is_summarised_as_merge_takes_it(tmp_path):
    """``traceconv summary traces/`` reads the folder's trace files, as ``merge traces/`` does (it
    said "is a directory, not a file", while a remote folder was already expanded)."""
    gloo = Path(__file__).parent / "fixtures" / "multirank" / "gloo_2ranks"
    files = sorted(gloo.glob("*.json.gz"))
    assert len(files) == 2
    by_folder = run(gloo, "--format", "json", "--top", "0")
    by_files = run(*files, "--format", "json", "--top", "0")
    assert by_folder.returncode == 0, by_folder.stderr
    folder_doc, files_doc = orjson.loads(by_folder.stdout), orjson.loads(by_files.stdout)
    assert folder_doc["rows"] == files_doc["rows"] and len(folder_doc["rows"]) > 5
    assert folder_doc["ranks"] == [0, 1] and folder_doc["per_rank_self_ns"] == files_doc["per_rank_self_ns"]
    # (by rank, a row is one rank: the table has no "slowest rank" column; by name it has)
    wide = {**os.environ, "COLUMNS": "200"}
    tables = [subprocess.run([sys.executable, "-m", "traceconv", "summary", str(gloo), *by], capture_output=True,
                             text=True, timeout=120, env=wide).stdout for by in (["--by", "rank"], [])]
    assert "rank 0" in tables[0] and "slowest rank" not in tables[0] and "slowest rank" in tables[1]
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run(empty)
    assert r.returncode == 2 and "no .json or .json.gz trace files in this folder" in r.stderr


from hypothesis import given, strategies as st   # noqa: E402
import numpy as np                                  # noqa: E402

from traceconv import hotspots                      # noqa: E402


@given(labels=st.lists(st.sampled_from(["", "a", "b", "(none)", "aten::mm", "é"]), min_size=1, max_size=8),
       data=st.data())
def test_groups_from_codes_are_np_unique_of_the_labels(labels, data):
    """The rows are grouped from each slice's stored code (a name id, a track) and its label,
    several codes sharing one label (a process's threads); as np.unique over a label per slice,
    which it replaced."""
    codes = np.array(data.draw(st.lists(st.integers(0, len(labels) - 1), min_size=1, max_size=50)), np.int32)
    uniq, inv = hotspots._groups(codes, labels)
    want, want_inv = np.unique(np.array([labels[c] for c in codes], dtype=object), return_inverse=True)
    assert uniq == want.tolist() and inv.tolist() == want_inv.reshape(-1).tolist()
