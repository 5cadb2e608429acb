"""The Dask engine gives what the local engine gives: the same bytes for merge (one trace, an
archive) and convert, the same table for summary; a rank's events stay on the worker that read
it and only its features come back first.  One LocalCluster of 2 workers for the module (threads:
fast), and one run on the engine's own cluster of real worker processes."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

import traceconv
from traceconv.errors import TraceconvError
from traceconv.hotspots import summarize_files
from traceconv.merging.engine import DaskEngine
from traceconv.merging.ranks import features, load_rank

distributed = pytest.importorskip("dask.distributed", reason="dask[distributed] is not installed (pip install '.[test]')")

FIX = Path(__file__).parent / "fixtures"
M = FIX / "multirank"
GLOO = sorted((M / "gloo_2ranks").glob("*.gz"))
COMPOSER = sorted((M / "composer_2ranks").glob("ep0-ba3-rank*.json.gz"))
MLAGENTS = [FIX / "mlagents" / "csharp_3DBall_timers.json", FIX / "mlagents" / "python_SoccerTwos_run_logs_timers.json"]


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0")
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    """3 generated ranks whose clocks are 1.5 ms apart: alignment by collectives moves them."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    from generate import generate
    d = tmp_path_factory.mktemp("skewed")
    files = []
    for r in range(3):
        f = d / f"rank{r}.pt.trace.json"
        f.write_bytes(generate(3_000, seed=3, rank=r, world=3, offset_ns=r * 1_500_000))
        files.append(f)
    return files




@pytest.mark.parametrize("hold", [True, False], ids=["held", "read-twice"])
@pytest.mark.parametrize("case", ["skewed-window", "skewed-filters", "gloo", "composer-archive", "skewed-archive",
                                  "unranked", "time-window", "lanes-archive"])
def test_merge_on_dask_is_the_same_bytes(client, skewed, tmp_path, case, hold):
    kw: dict = {}
    files, name = skewed, "run.pftrace"
    if case == "skewed-window":
        kw = {"window": "ProfilerStep#3"}
    elif case == "skewed-filters":
        kw = {"window": "ProfilerStep#2", "ranks": "1-2", "min_dur": "2us", "drop_cat": ["python_function"]}
    elif case == "gloo":
        files, name = GLOO, "run.json"
    elif case == "composer-archive":
        files, name = COMPOSER, "run.tar"
    elif case == "skewed-archive":
        name, kw = "run.tar", {"window": "ProfilerStep#3"}
    elif case == "unranked":
        files = MLAGENTS
    elif case == "time-window":
        kw = {"window": "2ms:6ms"}
    elif case == "lanes-archive":         # writing the ranks' files moves slices to lanes: counted
        from test_merge import overlapping_ranks
        files, name, kw = overlapping_ranks(tmp_path), "run.tar", {"align_method": "none"}
    local = traceconv.merge(files, tmp_path / f"local-{name}", **kw)
    dask = traceconv.merge(files, tmp_path / f"dask-{name}", engine=client, hold=hold, **kw)
    assert (tmp_path / f"dask-{name}").read_bytes() == (tmp_path / f"local-{name}").read_bytes()
    assert dask.slices == local.slices and dask.dropped == local.dropped
    assert [str(w) for w in dask.warnings] == [str(w) for w in local.warnings]
    assert [a.as_dict() for a in dask.alignments] == [a.as_dict() for a in local.alignments]
    if case.startswith("skewed"):
        assert any(a.offset_ns for a in dask.alignments), "the ranks were moved"
    if "window" in kw:
        assert dask.dropped.get("{opt:window}", 0) > 0, "the window left something out"
    if case == "unranked":
        assert [how for _, _, how in dask.files] == ["file order", "file order"]
    if case == "lanes-archive":
        assert [w.count for w in dask.warnings if w.code.value == "overlap-lanes"] == [2]


def test_only_features_come_back_from_the_first_pass(client, skewed):
    eng = DaskEngine(client=client)
    got = list(eng.keep(load_rank, features, [(f, None, frozenset(), 0, "ProfilerStep#3") for f in skewed]))
    for (item, handle), f in zip(got, skewed):
        full = traceconv.load(f)
        assert len(full.slices) > 1_000
        assert len(item.trace.slices) == 0 and item.trace.meta.rank == full.meta.rank
        assert item.collectives and item.steps and item.events == full.event_count()
        assert "ProfilerStep#3" in item.named
        assert handle.status == "finished"           # the whole trace is on a worker


@pytest.mark.parametrize("kw", [{"by": "name"}, {"by": "category", "window": "ProfilerStep#2"},
                                {"by": "rank", "ranks": "0,2"}, {"by": "thread", "min_dur": "5us"}])
def test_summary_on_dask_is_the_same_table(client, skewed, kw):
    local = summarize_files(skewed, top=None, **kw)
    dask = summarize_files(skewed, top=None, engine=client, **kw)
    assert dask.to_json() == local.to_json()
    assert dask.to_csv() == local.to_csv()
    assert len(dask.rows) > 1


def test_summary_straggler_view(client, skewed):
    s = summarize_files(skewed, engine=client)
    assert sorted(s.per_rank_self_ns) == [0, 1, 2]
    skew = s.skew()
    assert [r for r, _, _ in skew] == sorted(s.per_rank_self_ns, key=lambda r: (-s.per_rank_self_ns[r], r))
    assert sorted(x for _, _, x in skew)[1] == 1.0          # the median rank is the unit
    row = s.rows[0]
    slowest, ratio = row.straggler()
    assert row.per_rank_total_ns[slowest] == max(row.per_rank_total_ns.values()) and ratio >= 1.0
    # the local engine's table over in-memory traces is the same
    assert traceconv.summary([traceconv.load(f) for f in skewed]).to_json() == s.to_json()


def test_convert_on_dask_is_the_same_bytes(client, tmp_path):
    traceconv.convert(GLOO[0], tmp_path / "local.pftrace")
    res = traceconv.convert(GLOO[0], tmp_path / "dask.pftrace", engine=client)
    assert res.input_format == "kineto"
    assert (tmp_path / "dask.pftrace").read_bytes() == (tmp_path / "local.pftrace").read_bytes()


def test_errors_on_workers_are_one_line_naming_the_file(client, tmp_path):
    bad = tmp_path / "rank1.json"
    bad.write_text("this is no profile")
    shutil.copy(GLOO[0], tmp_path / "rank0.pt.trace.json.gz")
    with pytest.raises(TraceconvError) as e:
        traceconv.merge([tmp_path / "rank0.pt.trace.json.gz", bad], tmp_path / "o.pftrace", engine=client)
    assert str(bad) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(TraceconvError, match="unknown engine 'spark'"):
        traceconv.merge(GLOO, tmp_path / "o.pftrace", engine="spark")


def test_real_worker_processes(tmp_path):
    """The engine's own LocalCluster, 2 worker processes (what --engine dask starts)."""
    local = traceconv.merge(GLOO, tmp_path / "local.pftrace", window="20ms:120ms")
    dask = traceconv.merge(GLOO, tmp_path / "dask.pftrace", window="20ms:120ms", engine="dask", workers=2)
    assert (tmp_path / "dask.pftrace").read_bytes() == (tmp_path / "local.pftrace").read_bytes()
    assert dask.slices == local.slices and dask.dropped["{opt:window}"] > 0

