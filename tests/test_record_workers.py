"""Many processes: workers record shards on the parent's clock; the parent's stop (or
``python -m traceconv.record merge``, or ``traceconv merge`` for Chrome JSON shards) puts them on one
timeline, one process per worker, flows between processes linked."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import perfetto_oracle as tp
import traceconv
import traceconv.record as rec

pytestmark = tp.requires_trace_processor
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _clean():
    rec.stop()
    yield
    rec.stop()


def _task(k, fid):
    with rec.span("task", k=k, flow_in=fid):
        time.sleep(0.005)
    return os.getpid()


SQL = """select p.name process, p.pid, s.name, s.ts, s.dur, s.depth from slice s
         join thread_track tt on tt.id = s.track_id join thread using (utid) join process p using (upid)
         where s.name not like 'traceconv.record%' order by s.ts"""


def _run_pool(out: Path, method: str) -> list[int]:
    ctx = mp.get_context(method)
    rec.start(out)
    fids = [rec.new_flow() for _ in range(4)]
    with rec.span("submit"):
        for f in fids:
            with rec.span("send", flow_out=f):
                pass
    with ctx.Pool(2) as pool:
        pids = pool.starmap(_task, list(enumerate(fids)))
    rec.stop()
    return pids


def test_pool_workers_merge_onto_one_timeline(tmp_path):
    out = tmp_path / "run.pftrace"
    pids = _run_pool(out, "fork")
    assert tp.problems(out) == []
    rows = tp.query(out, SQL)
    tasks = [r for r in rows if r["name"] == "task"]
    assert len(tasks) == 4
    # one process per worker, named after it, with its real pid; the parent's own process
    workers = {r["process"] for r in tasks}
    assert len(workers) == len(set(pids)) and all("ForkPoolWorker-" in w for w in workers)
    assert all(f"(pid {p})" in " ".join(workers) for p in set(pids))
    parent = {r["process"] for r in rows if r["name"] in ("submit", "send")}
    assert len(parent) == 1 and next(iter(parent)).startswith("rank 0 · ") \
        and next(iter(parent)).endswith(f"(pid {os.getpid()})")
    # one clock: each task starts after the send that produced its work ended
    flows = tp.query(out, """select so.name src, so.ts + so.dur src_end, si.name dst, si.ts dst_ts from flow f
                             join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in""")
    assert len(flows) == 4 and all(f["src"] == "send" and f["dst"] == "task" for f in flows)
    assert all(f["dst_ts"] > f["src_end"] for f in flows)
    assert all(r["dur"] >= 5_000_000 for r in tasks)
    shards = sorted(p.name for p in (tmp_path / "run.shards").iterdir() if not p.name.startswith("."))
    assert shards[0] == f"rank0-pid{os.getpid()}.pftrace" and len(shards) == 1 + len(set(pids))


@pytest.mark.parametrize("name", ["run.pftrace", "run.pftrace.gz", "run.json", "run.json.gz"])
def test_workers_shards_are_merged_when_the_recording_ends_at_interpreter_exit(tmp_path, name):
    """A program that never calls stop (as under $TRACECONV_RECORD): its stop runs at interpreter
    exit, where no thread can start and concurrent.futures cannot be imported; the workers' shards
    are merged all the same (by a child interpreter), into each kind of output, with nothing on
    stderr.  Before, the merge failed there and the output held the parent's spans only."""
    out = tmp_path / name
    script = ("import os, sys, time, multiprocessing as mp\nimport traceconv.record as rec\n"
              "def task(k):\n    with rec.span('task', k=k):\n        time.sleep(0.005)\n"
              f"if __name__ == '__main__':\n    rec.start({str(out)!r})\n"
              "    with rec.span('submit'):\n        pass\n"
              "    with mp.get_context('fork').Pool(2) as pool:\n        pool.map(task, range(4))\n")
    (tmp_path / "prog.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACECONV_RECORD")}
    r = subprocess.run([sys.executable, str(tmp_path / "prog.py")], cwd=ROOT, env=env, capture_output=True,
                       timeout=120)
    assert r.returncode == 0 and r.stderr == b"", r.stderr.decode()
    rows = tp.query(out, SQL)
    assert sorted(x["name"] for x in rows) == ["submit", "task", "task", "task", "task"]
    assert len({x["pid"] for x in rows}) >= 2, "the workers' processes, beside the parent's"


def test_merge_command_on_the_shard_folder(tmp_path):
    out = tmp_path / "run.pftrace"
    _run_pool(out, "fork")
    again = tmp_path / "again.pftrace"
    proc = subprocess.run([sys.executable, "-m", "traceconv.record", "merge", str(tmp_path / "run.shards"),
                           "-o", str(again)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # (the shards that hold events: a worker that never ran a task leaves an empty one)
    shards = len([p for p in (tmp_path / "run.shards").iterdir() if not p.name.startswith(".") and p.stat().st_size])
    assert shards >= 2
    slices = tp.query(again, "select count(*) n from slice")[0]["n"]
    assert proc.stdout == f"{again}: {shards} shards, {slices} slices, 4 flows\n"
    assert tp.query(again, SQL) == tp.query(out, SQL)
    assert tp.query(again, "select count(*) n from flow")[0]["n"] == 4


def test_merge_command_never_writes_over_a_shard(tmp_path):
    """``-o`` naming one of the shards (or the shard given): one error line, exit 2, the shard as it was."""
    out = tmp_path / "run.pftrace"
    _run_pool(out, "fork")
    shard = next((tmp_path / "run.shards").glob("rank1-*.pftrace"))
    before = shard.read_bytes()
    for inputs in ([str(tmp_path / "run.shards")], [str(shard)]):
        proc = subprocess.run([sys.executable, "-m", "traceconv.record", "merge", *inputs, "-o", str(shard)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == f"traceconv: error: {shard}: refusing to overwrite an input file; choose another " \
                              "output name\n"
        assert shard.read_bytes() == before


def test_json_shards_merge_with_traceconv_merge(tmp_path):
    out = tmp_path / "run.json"
    pids = _run_pool(out, "fork")
    shards = tmp_path / "run.shards"
    merged = tmp_path / "cli.pftrace"
    res = traceconv.merge([shards], merged)
    assert [a.method for a in res.alignments] == ["wallclock"] * (1 + len(set(pids)))
    rows = tp.query(merged, SQL)
    assert sum(r["name"] == "task" for r in rows) == 4
    assert len({r["process"] for r in rows if r["name"] == "task"}) == len(set(pids))
    # the parent's own merged output holds the same slices
    # (times from the first slice: the JSON's are relative to its baseTimeNanoseconds)
    def rel(rs):
        t0 = min(r["ts"] for r in rs)
        return sorted((r["name"], r["ts"] - t0, r["dur"]) for r in rs)
    assert rel(tp.query(out, SQL)) == rel(rows)


def test_subprocess_worker_records_a_shard(tmp_path):
    out = tmp_path / "run.pftrace"
    rec.start(out)
    with rec.span("launch"):
        subprocess.run([sys.executable, "-c", "import traceconv.record as rec, time\n"
                        "rec.name_process('env worker')\n"
                        "with rec.span('child_step'):\n    time.sleep(0.002)\n"],
                       cwd=ROOT, check=True, timeout=120)
    rec.stop()
    rows = tp.query(out, SQL)
    launch = next(r for r in rows if r["name"] == "launch")
    child = next(r for r in rows if r["name"] == "child_step")
    assert "env worker" in child["process"] and child["pid"] != os.getpid()
    assert launch["ts"] < child["ts"] and child["ts"] + child["dur"] < launch["ts"] + launch["dur"]


def test_a_new_recording_to_the_same_path_leaves_out_the_last_ones_shards(tmp_path):
    """Running the same script again (the same output) must not bring the first run's workers into
    the second run's timeline: a new recording replaces the last one's shards as it replaces its
    file.  Files of other names in the folder stay."""
    out = tmp_path / "run.pftrace"
    first = set(_run_pool(out, "fork"))
    kept = tmp_path / "run.shards" / "notes.txt"
    kept.write_text("mine")
    second = set(_run_pool(out, "fork"))
    assert not first & second
    rows = tp.query(out, SQL)
    # (the merged pids are the ranks' namespaces; the real pid is in the process's name)
    tasks = {int(r["process"].rsplit("(pid ", 1)[1].rstrip(")")) for r in rows if r["name"] == "task"}
    assert tasks == second and len(rows) == 4 + 1 + 4          # 4 tasks, 1 submit, 4 sends
    shards = sorted(p.name for p in (tmp_path / "run.shards").iterdir() if p.name.startswith("rank"))
    assert shards[0] == f"rank0-pid{os.getpid()}.pftrace" and len(shards) == 1 + len(second)
    assert {int(n[4:n.index("-")]) for n in shards} == set(range(1 + len(second)))   # ranks from 1 again
    assert kept.read_text() == "mine"


def test_traceconv_merge_takes_pftrace_shards_when_named(tmp_path):
    """``traceconv merge`` reads .pftrace shards (traceconv's own .pftrace is an input) when they are
    named, one by one or by a pattern; a folder of them alone says so in its one error line (a
    folder's .pftrace files are not taken: a merged output written beside the ranks would become a
    rank of the next merge)."""
    import glob
    out = tmp_path / "run.pftrace"
    pids = _run_pool(out, "fork")
    shards = tmp_path / "run.shards"
    r = subprocess.run([sys.executable, "-m", "traceconv", "merge", str(shards), "-o", str(tmp_path / "m.pftrace")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "its .pftrace files are taken when named: 'rank0-pid" in r.stderr and "*.pftrace" in r.stderr
    merged = tmp_path / "m.pftrace"
    r = subprocess.run([sys.executable, "-m", "traceconv", "merge", *sorted(glob.glob(str(shards / "*.pftrace"))),
                        "-o", str(merged)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = tp.query(merged, SQL)
    assert sum(row["name"] == "task" for row in rows) == 4
    assert len({row["process"] for row in rows if row["name"] == "task"}) == len(set(pids))
    assert tp.problems(merged) == []
