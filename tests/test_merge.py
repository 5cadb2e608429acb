"""traceconv merge: real multi-rank samples, alignment accuracy, id hygiene, filters, archive."""

from __future__ import annotations

import gzip
import json
import random
import re
import shutil
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceconv
from traceconv.errors import TraceconvError
from traceconv.merging import parse_duration, parse_ranks

import perfetto_oracle as tp
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from timeline import assert_same_timeline, read_chrome_json, read_perfetto

M = Path(__file__).parent / "fixtures" / "multirank"
GLOO = sorted((M / "gloo_2ranks").glob("*.gz"))
HTA = sorted((M / "hta_trace_filter_2ranks").glob("*.gz"))
COMPOSER = sorted((M / "composer_2ranks").glob("ep0-ba3-rank*.json.gz"))
QUARTER_NS = 7_889_238 * 10**9          # Kineto floors baseTimeNanoseconds to 3-month buckets
RANK = re.compile(r"^rank (\d+) · ")


def rank_of(process: str) -> int:
    m = RANK.match(process)
    assert m, f"process {process!r} is not in a rank's namespace"
    return int(m.group(1))


@pytest.mark.parametrize("files", [GLOO, HTA, COMPOSER], ids=["gloo", "hta", "composer"])
def test_real_samples_merge_into_rank_namespaces(files, tmp_path):
    singles = {i: traceconv.load(f) for i, f in enumerate(files)}
    res = traceconv.merge(files, tmp_path / "run.pftrace")
    traceconv.merge(files, tmp_path / "run.json")
    assert sorted(r for _, r, _ in res.files) == [0, 1]
    assert {how for _, _, how in res.files} <= {"distributedInfo.rank", "Composer global_rank"}
    p = read_perfetto(tmp_path / "run.pftrace")
    j = read_chrome_json(tmp_path / "run.json")
    assert_same_timeline(j, p)
    # every slice sits in exactly one rank's processes, and no event was lost
    per_rank = Counter(rank_of(s.process) for s in p.slices)
    expected = Counter()
    for i, t in singles.items():
        expected[t.meta.rank] += len(t.slices)
    assert per_rank == expected
    assert len(p.flows) == sum(len(t.flows) for t in singles.values())
    for src, dst in p.flows:
        assert rank_of(src[0]) == rank_of(dst[0]), "a flow joins two ranks"
    assert all(name == "" or rank_of(name) in (0, 1) for name in p.processes.values())
    # ranks in order: every rank-0 process sorts before every rank-1 process
    doc = orjson.loads((tmp_path / "run.json").read_bytes())
    sort = {e["pid"]: e["args"]["sort_index"] for e in doc["traceEvents"] if e["name"] == "process_sort_index"}
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    by_rank = {r: [sort[pid] for pid, n in names.items() if n.startswith(f"rank {r} ")] for r in (0, 1)}
    assert max(by_rank[0]) < min(by_rank[1])
    rows = p.metadata["merge"]["alignment"]
    assert [r["rank"] for r in rows] == [0, 1] and rows[0]["offset_ns"] == 0


def test_gpu_processes_of_each_rank_stay_apart(tmp_path):
    """HTA's ranks both use pids 0..7 for their GPUs: each rank keeps its own 'GPU n' processes."""
    traceconv.merge(HTA, tmp_path / "run.pftrace")
    procs = set(read_perfetto(tmp_path / "run.pftrace").processes.values())
    gpus = sorted(p for p in procs if " · GPU " in p)
    assert gpus and {rank_of(p) for p in gpus} == {0, 1}
    assert len(gpus) == len(set(gpus))
    host = [p for p in procs if "(pid " in p]
    assert {rank_of(p) for p in host} == {0, 1}


def test_composer_barrier_offsets_match_composers_own_merger(tmp_path):
    res = traceconv.merge(COMPOSER, tmp_path / "run.json", align_method="barrier")
    off = {a.rank: a for a in res.alignments}
    assert off[0].offset_ns == 0 and off[1].offset_ns == 101_000          # 101 µs in this run
    assert off[1].method == "barrier" and off[1].uncertainty_ns > 0
    # Composer's merged_trace.json: rank 1's own markers shifted by the same clock-sync difference
    theirs = json.loads(gzip.decompress((M / "composer_2ranks" / "merged_trace.json.gz").read_bytes()))
    want = Counter((e["name"], e["ts"] * 1000) for e in theirs
                   if e.get("pid") == 1 and e.get("ph") == "B" and e["name"].startswith("event/"))
    ours = read_chrome_json(tmp_path / "run.json")
    got = Counter((s.name, s.ts) for s in ours.slices
                  if s.name.startswith("event/") and rank_of(s.process) == 1)
    assert want and got == want


def shifted_copy(src: Path, dst: Path, rank: int, offset_us: int, jitter_us: int, rng: random.Random) -> None:
    """A copy of a real trace as another rank whose clock is ``offset_us`` ahead, NCCL ends jittered."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["distributedInfo"]["rank"] = rank
    for e in doc["traceEvents"]:
        if "ts" in e and isinstance(e["ts"], (int, float)):
            e["ts"] += offset_us
        if e.get("ph") == "X" and e.get("name", "").startswith("nccl"):
            e["dur"] += rng.randint(-jitter_us, jitter_us)
    dst.write_bytes(json.dumps(doc).encode())


def shifted_copies(folder: Path, offsets_us: dict[int, int], jitter_us: int, rng: random.Random) -> list[Path]:
    """One shifted copy of the HTA sample per rank (``copy{rank}.json``), its clock ``offsets_us[rank]`` ahead."""
    files = []
    for r, off in offsets_us.items():
        f = folder / f"copy{r}.json"
        shifted_copy(HTA[0], f, r, off, jitter_us, rng)
        files.append(f)
    return files


def test_collectives_recover_injected_offsets_within_the_stated_uncertainty(tmp_path):
    offsets_us = {0: 0, 1: 2_500, 2: -7_000, 3: 40_000}
    files = shifted_copies(tmp_path, offsets_us, 3, random.Random(7))
    res = traceconv.merge(files, tmp_path / "run.pftrace", align_method="collectives")
    for a in res.alignments:
        true = -offsets_us[a.rank] * 1000
        assert abs(a.offset_ns - true) <= a.uncertainty_ns, (a, true)
        assert a.uncertainty_ns <= 10_000
        if a.rank:
            assert "collectives matched" in a.detail
    # auto picks collectives too, since they agree to within microseconds
    res = traceconv.merge(files, tmp_path / "auto.pftrace")
    assert {a.method for a in res.alignments} == {"collectives"}


@tp.requires_trace_processor
@pytest.mark.parametrize("window", [None, "ProfilerStep#552", "1000ms:2000ms"])
def test_each_rank_is_a_sequence_of_its_own_with_its_clock_moved_by_its_offset(tmp_path, window):
    """A merged .pftrace is assembled from each rank's events encoded where the rank was read:
    one packet sequence per rank, whose first packet moves the rank's clock by its offset (with a
    window, the rank cut to it there too, once every offset is known).  The same merge written as
    Chrome JSON goes through the merged model instead: both must hold the same timeline, in
    traceconv's reading and in trace_processor's."""
    files = shifted_copies(tmp_path, {0: 0, 1: 2_500, 2: -7_000}, 0, random.Random(3))
    kw = {"align_method": "collectives", "window": window}
    res = traceconv.merge(files, tmp_path / "run.pftrace", **kw)
    as_json = traceconv.merge(files, tmp_path / "run.json", **kw)
    assert (res.slices, res.dropped) == (as_json.slices, as_json.dropped)
    if window:
        assert 100 < res.slices < sum(len(traceconv.load(f).slices) for f in files) - 100
    assert sorted(a.offset_ns for a in res.alignments) == [-2_500_000, 0, 7_000_000]
    assert_same_timeline(read_chrome_json(tmp_path / "run.json"), read_perfetto(tmp_path / "run.pftrace"))
    assert tp.problems(tmp_path / "run.pftrace") == []
    assert sorted(map(str, tp.slices(tmp_path / "run.pftrace"))) == sorted(map(str, tp.slices(tmp_path / "run.json")))
    # the ranks' slices line up after the offsets: each copy's first slice at the same time
    first = tp.query(tmp_path / "run.pftrace", "select p.name as process, min(s.ts) as ts from slice s "
                     "join thread_track tt on s.track_id = tt.id join thread using(utid) join process p using(upid) "
                     "group by p.upid")
    by_rank = {}
    for row in first:
        r = rank_of(row["process"])
        by_rank[r] = min(by_rank.get(r, row["ts"]), row["ts"])
    assert len(by_rank) == 3 and len(set(by_rank.values())) == 1, by_rank
    # one sequence for the descriptors, then one per rank, each opened by its own first packet
    trace = pb.Trace()
    trace.ParseFromString((tmp_path / "run.pftrace").read_bytes())
    firsts = [p.trusted_packet_sequence_id for p in trace.packet if p.first_packet_on_sequence]
    assert len(firsts) == len(set(firsts)) == 4
    boot = {p.trusted_packet_sequence_id: p.clock_snapshot.clocks[0].timestamp
            for p in trace.packet if p.HasField("clock_snapshot")}
    seq = {p.trusted_packet_sequence_id: p.clock_snapshot.clocks[1].timestamp
           for p in trace.packet if p.HasField("clock_snapshot")}
    assert sorted(boot[k] - seq[k] for k in boot) == sorted(a.offset_ns for a in res.alignments)


def test_wallclock_handles_ranks_on_either_side_of_a_quarter_boundary(tmp_path):
    """Rank 1 started before the quarter boundary that rank 0 started after: its base is a quarter
    older and its relative ts a quarter larger (written as exact decimals, as Kineto does)."""
    text = gzip.decompress(GLOO[0].read_bytes()).decode()
    base = int(re.search(r'"baseTimeNanoseconds": (\d+)', text).group(1))

    def shift(m: re.Match) -> str:
        whole, _, frac = m.group(2).partition(".")
        ns = int(whole) * 1000 + int((frac + "000")[:3]) + QUARTER_NS
        return f'{m.group(1)}{ns // 1000}.{ns % 1000:03d}'

    other = re.sub(r'("ts": )(\d+(?:\.\d+)?)', shift, text)
    other = other.replace(f'"baseTimeNanoseconds": {base}', f'"baseTimeNanoseconds": {base - QUARTER_NS}')
    other = re.sub(r'"rank": 0', '"rank": 1', other, count=1)
    assert len(re.findall(r'"ts": \d{14}\.\d{3}', other)) > 100     # relative ts of ~1.2e13 µs, to the ns
    (tmp_path / "a.json").write_text(text)
    (tmp_path / "b.json").write_text(other)
    res = traceconv.merge([tmp_path / "a.json", tmp_path / "b.json"], tmp_path / "run.pftrace", align_method="wallclock")
    assert [a.offset_ns for a in res.alignments] == [0, 0]
    tl = read_perfetto(tmp_path / "run.pftrace")
    r0 = Counter((s.name, s.ts, s.dur) for s in tl.slices if rank_of(s.process) == 0)
    r1 = Counter((s.name, s.ts, s.dur) for s in tl.slices if rank_of(s.process) == 1)
    assert r0 == r1 and len(r0) > 100


def test_generated_ranks_with_skew_align_by_collectives(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    from generate import generate
    files = []
    for r in range(3):
        f = tmp_path / f"rank{r}.pt.trace.json"
        f.write_bytes(generate(4_000, seed=3, rank=r, world=3, offset_ns=r * 1_500_000))
        files.append(f)
    res = traceconv.merge(files, tmp_path / "run.pftrace")
    for a in res.alignments:
        assert a.method == "collectives"
        assert abs(a.offset_ns + a.rank * 1_500_000) <= a.uncertainty_ns <= 5_000
    # filters: one rank, a named step, a minimum duration, a dropped category
    res = traceconv.merge(files, tmp_path / "f.pftrace", ranks="1-2", window="ProfilerStep#3",
                          min_dur="2us", drop_cat=["python_function"])
    tl = read_perfetto(tmp_path / "f.pftrace")
    steps = [s for s in tl.slices if s.name == "ProfilerStep#3"]
    assert {rank_of(s.process) for s in tl.slices} == {1, 2} and len(steps) == 2
    lo, hi = min(s.ts for s in steps), max(s.ts + s.dur for s in steps)
    assert all(s.ts < hi and s.ts + s.dur > lo for s in tl.slices)
    assert all(s.dur >= 2_000 for s in tl.slices) and not any(s.cat == "python_function" for s in tl.slices)
    # what each filter left out, counted; the library names its parameters, not the CLI's flags
    assert set(res.dropped) >= {"{opt:window}", "{opt:min_dur}", "{opt:drop_cat}"}
    notes = [str(w) for w in res.warnings if w.code.value == "note"]
    for name in ("window", "min_dur", "drop_cat"):
        assert f"note: left out by the filters ({name}) ({res.dropped['{opt:' + name + '}']})" in notes
    assert not any("--" in m for m in notes)


@pytest.mark.parametrize("out", ["run.pftrace", "run.json"])
def test_ranks_whose_clocks_start_at_zero_are_moved_later_as_one_when_one_would_start_before_it(tmp_path, out):
    """Rank 1's collectives come 3 us later on its clock than rank 0's, so its offset is -3 us and
    its first event would fall at -3 us: the .pftrace's writer raised an internal error, and the
    JSON's negative time was an event trace_processor drops (an error stat).  Every rank's offset
    now grows by 3 us, with a note: the times start at 0, the ranks' kernels line up, both
    outputs load with no error."""
    from fuzz.scaling import collectives       # (two such ranks, 20 all-reduces each)
    files = []
    for name, text in collectives(80).items():
        files.append(tmp_path / name)
        files[-1].write_text(text)
    res = traceconv.merge(files, tmp_path / out)
    assert [(a.rank, a.offset_ns) for a in res.alignments] == [(0, 3_000), (1, 0)]
    assert [str(w) for w in res.warnings if "moved" in str(w)] == [
        "note: times were moved 3000 ns later so that none is negative (a rank's clock offset put its "
        "first event before 0) (1)"]
    tp.assert_loads(tmp_path / out)
    rows = tp.query(tmp_path / out, "select min(s.ts) as first, max(s.ts) as last, count(*) as n from slice s "
                                    "where s.name like 'ncclKernel%' group by s.track_id order by first")
    assert [(r["first"], r["last"], r["n"]) for r in rows] == [(13_000, 1_913_000, 20)] * 2
    assert tp.query(tmp_path / out, "select min(ts) as t from slice")[0]["t"] == 0


def test_a_window_named_after_slices_none_of_which_is_kept_is_one_error_line(tmp_path):
    # (found by the fuzz campaign of 2026-11-26, seed 20261141: "a" was a slice of 1 us that
    # --min-dur 5us dropped, its name still a string of the merged trace: a traceback, exit 70)
    a, b = tmp_path / "rank0.json", tmp_path / "rank1.json"
    a.write_text(json.dumps([{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 1, "tid": 1},
                             {"ph": "X", "name": "b", "ts": 10, "dur": 20, "pid": 1, "tid": 1}]))
    b.write_text(json.dumps([{"ph": "i", "name": "c", "ts": 5, "pid": 2, "tid": 2, "s": "t"},
                             {"ph": "X", "name": "b", "ts": 12, "dur": 20, "pid": 2, "tid": 2}]))
    for window, kw in (("a", {"min_dur": "5us"}), ("c", {})):     # dropped; an instant's name only
        with pytest.raises(TraceconvError, match=f"window: no slice named '{window}' in any rank"):
            traceconv.merge([a, b], tmp_path / "o.pftrace", window=window, align_method="none", **kw)
    res = traceconv.merge([a, b], tmp_path / "o.pftrace", window="a", align_method="none")  # kept: its span
    assert [(s.name, s.ts) for s in read_perfetto(tmp_path / "o.pftrace").slices] == [("a", 0)]
    r = subprocess.run([sys.executable, "-m", "traceconv", "merge", str(a), str(b), "--align", "none",
                        "--window", "a", "--min-dur", "5us", "-o", str(tmp_path / "c.pftrace")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no slice named 'a'" in r.stderr
    assert res.output_format == "perfetto" and not (tmp_path / "c.pftrace").exists()


def test_archive_holds_one_file_per_rank_and_the_offsets(tmp_path):
    res = traceconv.merge(COMPOSER, tmp_path / "run.tar")
    assert res.output_format == "perfetto-archive"
    with tarfile.open(tmp_path / "run.tar") as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("perfetto_manifest.json"))["perfetto_manifest"]
        tar.extractall(tmp_path / "x", filter="data")
    assert sorted(names) == ["perfetto_manifest.json", "rank0_0_ep0-ba3-rank0.pftrace", "rank1_0_ep0-ba3-rank1.pftrace"]
    assert manifest["version"] == 1
    files = {f["path"]: f for f in manifest["files"]}
    r1 = files["rank1_0_ep0-ba3-rank1.pftrace"]
    assert r1["machine"] == {"name": "rank 1"}
    assert r1["clocks"] == {"clock": "BOOTTIME", "sync_to": {"file": "rank0_0_ep0-ba3-rank0.pftrace", "clock": "BOOTTIME"},
                            "offset_ns": 101_000}
    assert manifest["trace_time"] == {"clock": "BOOTTIME", "file": "rank0_0_ep0-ba3-rank0.pftrace"}
    assert "clocks" not in files["rank0_0_ep0-ba3-rank0.pftrace"]
    for f, path in zip(COMPOSER, ["rank0_0_ep0-ba3-rank0.pftrace", "rank1_0_ep0-ba3-rank1.pftrace"]):
        assert len(read_perfetto(tmp_path / "x" / path).slices) == len(traceconv.load(f).slices)


def overlapping_ranks(d: Path) -> list[Path]:
    """Two ranks whose one thread holds two slices that partly overlap (moved to a lane when nested)."""
    files = []
    for r in (0, 1):
        ev = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "cat": "cpu_op"},
              {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 10, "cat": "cpu_op"}]
        f = d / f"rank{r}.pt.trace.json"
        f.write_bytes(orjson.dumps({"distributedInfo": {"rank": r, "world_size": 2}, "traceEvents": ev}))
        files.append(f)
    return files


def test_an_archive_counts_what_writing_its_files_changed(tmp_path):
    """The overlap lanes made when a rank's file of an archive is written are counted in the merge's
    warnings, as a merged .pftrace counts them: with a window or without (an archive counted none)."""
    files = overlapping_ranks(tmp_path)
    one = traceconv.merge(files, tmp_path / "run.pftrace", align_method="none")
    lanes = [str(w) for w in one.warnings if w.code.value == "overlap-lanes"]
    assert len(lanes) == 1 and lanes[0].endswith("(2)")
    for name, kw in (("run.tar", {}), ("window.tar", {"window": "0us:100us"})):
        res = traceconv.merge(files, tmp_path / name, align_method="none", **kw)
        assert [str(w) for w in res.warnings if w.code.value == "overlap-lanes"] == lanes, name
        assert res.slices == 4
        with tarfile.open(tmp_path / name) as tar:
            tar.extractall(tmp_path / name.replace(".", "_"), filter="data")
        for entry in sorted((tmp_path / name.replace(".", "_")).glob("*.pftrace")):
            tp.assert_loads(entry)
            rows = tp.query(entry, "select s.name, s.ts, s.dur, t.name as track from slice s "
                                   "join track t on s.track_id = t.id order by s.ts")
            assert [(r["name"], r["ts"], r["dur"]) for r in rows] == [("a", 0, 10_000), ("b", 5_000, 10_000)]
            assert rows[0]["track"] != rows[1]["track"], "b on a lane of its own"


def test_an_archive_gathers_no_rank_in_the_main_process(tmp_path, monkeypatch):
    """Each rank's file of an archive is written where the rank was read (with a window, encoded
    there once every offset is known): the main process gathers no rank's events (it held every
    rank at once, and wrote their files one by one)."""
    from traceconv.merging import driver

    def gathered(*a, **k):
        raise AssertionError("a rank's events came to the main process")

    monkeypatch.setattr(driver, "append_rank", gathered)
    res = traceconv.merge(COMPOSER, tmp_path / "run.tar")
    assert res.slices == sum(len(traceconv.load(f).slices) for f in COMPOSER)
    win = traceconv.merge(COMPOSER, tmp_path / "window.tar", window="ProfilerStep#2")
    assert 0 < win.slices < res.slices and win.dropped["{opt:window}"] > 0
    monkeypatch.undo()                # (a merged .pftrace with a window gathers the kept events)
    one = traceconv.merge(COMPOSER, tmp_path / "window.pftrace", window="ProfilerStep#2")
    assert (one.slices, one.dropped) == (win.slices, win.dropped)
    # the archive's files hold what the window keeps (they held the ranks whole, while the result
    # counted what the window had left out): the same slices as the merged .pftrace
    with tarfile.open(tmp_path / "window.tar") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    sql = "select s.name, s.dur from slice s order by s.name, s.dur"
    got = sorted(row for entry in (tmp_path / "x").glob("*.pftrace") for row in map(str, tp.query(entry, sql)))
    assert len(got) > 100 and got == sorted(map(str, tp.query(tmp_path / "window.pftrace", sql)))
    tp.assert_loads(tmp_path / "window.tar")
    # (the same slices at the same times and depths; the merged trace's process and global track
    # names say the rank)
    assert sorted(str(t[2:]) for t in tp.slices(tmp_path / "window.tar")) == \
        sorted(str(t[2:]) for t in tp.slices(tmp_path / "window.pftrace"))


def test_rank_errors_name_the_files(tmp_path):
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    shutil.copy(GLOO[0], a)
    shutil.copy(GLOO[0], b)
    with pytest.raises(TraceconvError, match=r"rank 0 is claimed by 2 kineto files: .*a\.json\.gz.*b\.json\.gz"):
        traceconv.merge([a, b], tmp_path / "o.pftrace")
    res = traceconv.merge([a, b], tmp_path / "o.pftrace", rank_map=[f"{b}=5"])
    assert sorted(r for _, r, _ in res.files) == [0, 5]
    timers = Path(__file__).parent / "fixtures" / "mlagents" / "csharp_3DBall_timers.json"
    res = traceconv.merge([GLOO[0], timers], tmp_path / "o.pftrace")      # no rank anywhere: the file order
    assert [(r, how) for _, r, how in res.files] == [(0, "distributedInfo.rank"), (1, "file order")]
    assert any("csharp_3DBall_timers.json: no rank" in w.message for w in res.warnings)
    with pytest.raises(TraceconvError, match="rank 0 is claimed by 2 kineto files"):
        traceconv.merge([GLOO[0], timers, a], tmp_path / "o.pftrace")
    with pytest.raises(TraceconvError, match="align_method barrier needs Composer's clock_sync_timestamp_us"):
        traceconv.merge(GLOO, tmp_path / "o.pftrace", align_method="barrier")
    with pytest.raises(TraceconvError, match="none of the inputs is one of those ranks"):
        traceconv.merge(GLOO, tmp_path / "o.pftrace", ranks="4-5")
    assert not (tmp_path / "o2.pftrace").exists()


def test_a_rank_refused_midway_stops_the_workers_before_their_folder_goes(tmp_path, monkeypatch):
    """The workers write each rank's packets into the spool's folder.  A rank refused while they
    run (claimed twice, found by the fuzz campaign's merges, 2026-11-25) removed that folder while
    a worker still wrote into it ('Directory not empty', exit 70): the pool is now closed first."""
    from traceconv.merging import driver
    from traceconv.merging.engine import LocalEngine
    files = []
    for name in ("a", "b", "c", "d"):                      # a and b claim rank 0: refused at b
        files.append(tmp_path / f"{name}.json.gz")
        shutil.copy(GLOO[0] if name in "ab" else GLOO[1], files[-1])
    maps, closed_at_exit = [], []
    real_map, real_exit = LocalEngine.map, driver._Spool.__exit__

    def map_(self, *a, **k):
        maps.append(real_map(self, *a, **k))
        return maps[-1]

    def exit_(self, *exc):
        closed_at_exit.append([g.gi_frame is None for g in maps])
        return real_exit(self, *exc)

    monkeypatch.setattr(LocalEngine, "map", map_)
    monkeypatch.setattr(driver._Spool, "__exit__", exit_)
    with pytest.raises(TraceconvError, match="rank 0 is claimed by 2 kineto files"):
        traceconv.merge(files, tmp_path / "o.pftrace", workers=2)
    assert closed_at_exit == [[True]], "the pool's generator was closed before the spool's folder went"
    assert not (tmp_path / "o.pftrace").exists()


def test_a_window_merge_gathers_only_what_the_window_keeps(tmp_path, monkeypatch):
    """With a window, each rank is cut where it was read once every offset is known: for Chrome
    JSON the main process receives the kept events only (it gathered every rank whole, then cut the
    merged trace); for a .pftrace, none (each rank's cut is encoded there as its sequence)."""
    from traceconv.merging import driver
    got, real = [], driver.append_rank

    def append_rank(dst, src, *a):
        got.append(len(src.slices))
        return real(dst, src, *a)

    monkeypatch.setattr(driver, "append_rank", append_rank)
    res = traceconv.merge(COMPOSER, tmp_path / "w.json", window="ProfilerStep#2")
    whole = [len(traceconv.load(f).slices) for f in COMPOSER]
    assert len(got) == 2 and sum(got) == res.slices and all(g < w for g, w in zip(got, whole)), (got, whole)
    got.clear()
    one = traceconv.merge(COMPOSER, tmp_path / "w.pftrace", window="ProfilerStep#2")
    assert got == [] and (one.slices, one.dropped) == (res.slices, res.dropped)
    rows = tp.query(tmp_path / "w.pftrace", "select count(*) as n, sum(name = 'ProfilerStep#2') as step from slice")
    # (+ 1: of the two ranks' 4 instants the window keeps 1, which trace_processor holds as a slice)
    assert res.dropped["instants"] == 3 and rows == [{"n": res.slices + 1, "step": 2}]
    # (the same slices; a global instant's track is named in a .pftrace, not from JSON)
    assert sorted(str(t[2:]) for t in tp.slices(tmp_path / "w.pftrace")) == \
        sorted(str(t[2:]) for t in tp.slices(tmp_path / "w.json"))


@pytest.mark.parametrize("out", ["w.pftrace", "w.json", "w.tar"])
def test_a_window_merge_reports_its_second_pass_too(tmp_path, out):
    """A window's merge reads every rank, then cuts each one (and encodes it): both passes are
    reported, the second with what it does (a run of many ranks showed nothing while it ran)."""
    calls = []
    traceconv.merge(COMPOSER, tmp_path / out, window="ProfilerStep#2",
                    progress=lambda done, total, what: calls.append((done, total, what)))
    names = [f.name for f in COMPOSER]
    assert [(d, t) for d, t, _ in calls] == [(1, 2), (2, 2), (1, 2), (2, 2)]
    assert all(w.startswith(n) and "events so far" in w for (_, _, w), n in zip(calls[:2], names))
    assert [w for _, _, w in calls[2:]] == [f"{n} (cut to the window)" for n in names]


def test_a_window_merge_refused_midway_leaves_no_kept_rank(tmp_path, monkeypatch):
    """The ranks kept on disk between a window merge's two passes are removed when it ends, also
    when a rank is refused midway, and only once the workers writing them stopped."""
    from traceconv.merging import engine
    files = []
    for name in ("a", "b", "c", "d"):                      # a and b claim rank 0: refused at b
        files.append(tmp_path / f"{name}.json.gz")
        shutil.copy(GLOO[0] if name in "ab" else GLOO[1], files[-1])
    folders, closed = [], []
    real_keep, real_rmtree = engine.LocalEngine.keep, engine.shutil.rmtree

    def keep(self, *a, **k):
        out = real_keep(self, *a, **k)
        folders.extend(self._kept)
        engines.append(self)
        return out

    def rmtree(path, *a, **k):
        closed.append([g.gi_frame is None for e in engines for g in e._runs])
        return real_rmtree(path, *a, **k)

    engines: list = []
    monkeypatch.setattr(engine.LocalEngine, "keep", keep)
    monkeypatch.setattr(engine.shutil, "rmtree", rmtree)
    with pytest.raises(TraceconvError, match="rank 0 is claimed by 2 kineto files"):
        traceconv.merge(files, tmp_path / "o.pftrace", workers=2, window="0ms:1ms")
    res = traceconv.merge(files[1:3], tmp_path / "o.pftrace", workers=2, window="0ms:1ms")
    assert res.slices > 0 and len(folders) == 2
    # (every folder removed -- the kept ranks', the spool's -- after the pools writing there closed)
    assert len(closed) >= 2 and all(all(c) for c in closed), "the pools were closed before the folders went"
    assert not any(Path(f).exists() for f in folders)


def test_argument_parsers():
    assert parse_ranks("0-3,7") == {0, 1, 2, 3, 7}
    assert [parse_duration(x) for x in ("5us", "1.5ms", "2s", "300ns", "5µs")] == [5000, 1_500_000, 2 * 10**9, 300, 5000]
    for bad in ("5", "5 minutes", "-1us"):
        with pytest.raises(TraceconvError):
            parse_duration(bad)
    with pytest.raises(TraceconvError):
        parse_ranks("3-1")


def test_cli_prints_one_line_per_rank(tmp_path):
    r = subprocess.run([sys.executable, "-m", "traceconv", "merge", str(M / "gloo_2ranks"), "-o",
                        str(tmp_path / "run.pftrace")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if re.match(r"^│\s+[01]\s+│", line)]
    assert len(rows) == 2 and all("wallclock" in row for row in rows)
    r = subprocess.run([sys.executable, "-m", "traceconv", "merge", str(M / "gloo_2ranks"), "-o",
                        str(tmp_path / "x.pftrace"), "--align", "sideways"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown --align 'sideways'" in r.stderr


def test_the_ranks_files_are_copied_whole_into_a_plain_or_a_gzipped_merge(tmp_path, monkeypatch):
    """Each rank's packets travel from its worker as a file, which the main process copies into the
    merged file: by the kernel into a plain file, piece by piece into a gzipped one (here in pieces
    of 4 KiB, so a rank spans many).  Both hold the same bytes, the ranks' sequences whole."""
    import traceconv.io
    monkeypatch.setattr(traceconv.io, "COPY_BYTES", 4096)
    traceconv.merge(HTA, tmp_path / "run.pftrace")
    traceconv.merge(HTA, tmp_path / "run.pftrace.gz")
    plain = (tmp_path / "run.pftrace").read_bytes()
    assert gzip.decompress((tmp_path / "run.pftrace.gz").read_bytes()) == plain
    trace = pb.Trace.FromString(plain)
    per_seq = Counter(p.trusted_packet_sequence_id for p in trace.packet if p.HasField("track_event"))
    assert sorted(per_seq) == [2, 3]                  # one sequence per rank, after the header's
    assert sum(per_seq.values()) == sum(2 * len(t.slices) + len(t.instants) + len(t.counters)
                                        for t in map(traceconv.load, HTA))
    tp.assert_loads(tmp_path / "run.pftrace")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(st.integers(-2**62, 2**62), max_size=40),
                 st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), max_size=40)))
def test_alignment_median_is_numpys(values):
    # align._median stands in for np.median (which imports numpy.ma in the merge's serial tail):
    # the same double, bit for bit, for the ints and floats alignment takes medians of
    import math

    import numpy as np

    from traceconv.merging.align import _median
    a = np.array(values, dtype=np.int64 if values and isinstance(values[0], int) else np.float64)
    got = _median(a)
    if not len(a):
        assert math.isnan(got)
        return
    with np.errstate(over="ignore"):           # (two doubles near the largest add up to inf, in both)
        want = float(np.median(a))
    assert got == want or (math.isnan(got) and math.isnan(want)), (got, want)
    assert math.copysign(1, got) == math.copysign(1, want) or got != 0
    assert _median(values) == got
