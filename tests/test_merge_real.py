"""traceconv merge on real runs (issue 12, point 4): PyTorch's default file names, the .tar archive in
trace_processor, collectives alignment on gloo runs, command-line values out of range.

The 4-rank runs are built from real 2-rank gloo runs (a DDP run and a Composer run, both with true
offset 0 between their ranks: one host, one clock) by copying ranks under new rank numbers and host
names, with a known shift added to every timestamp of a copy: its true offset is minus that shift.
"""

from __future__ import annotations

import gzip
import json
import re
import resource
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import perfetto_oracle as tp
from timeline import read_perfetto
import traceconv
from traceconv.errors import TraceconvError
from traceconv.merging import handler_name, parse_rank_map, parse_ranks, rank_from_name

M = Path(__file__).parent / "fixtures" / "multirank"
GLOO = sorted((M / "gloo_2ranks").glob("rank*.pt.trace.json.gz"))            # torch 2.13 DDP, gloo, host "vm"
COMPOSER_TORCH = sorted((M / "composer_2ranks").glob("rank*.3.pt.trace.json.gz"))  # Composer, gloo, host "vm"
COMPOSER = sorted((M / "composer_2ranks").glob("ep0-ba3-rank*.json.gz"))
RANK = re.compile(r"^rank (\d+) · (.*?)(?: \(pid \d+\))?$")


def merge(*args, **kw):
    """traceconv.merge in this process (no worker pool: these inputs are small)."""
    return traceconv.merge(*args, workers=1, **kw)


def doc_of(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def write_copy(src: Path, dst: Path, *, rank: int | None, shift_us: float = 0.0, host: str | None = "keep",
               cut_us: float | None = None) -> None:
    """``src`` as rank ``rank`` (None: no rank in the file) recorded on ``host`` (None: no host_name
    key), every timestamp moved by ``shift_us`` (its true offset is then ``-shift_us``), the events
    before ``cut_us`` (in ``src``'s time) left out: a window that starts later."""
    doc = doc_of(src)
    if cut_us is not None:
        doc["traceEvents"] = [e for e in doc["traceEvents"]
                              if not isinstance(e.get("ts"), (int, float)) or e["ts"] >= cut_us]
    if rank is None:
        doc.pop("distributedInfo", None)
        doc.pop("global_rank", None)
    else:
        doc["distributedInfo"]["rank"] = rank
        if "global_rank" in doc:
            doc["global_rank"] = rank
    if host is None:
        doc.pop("host_name", None)
    elif host != "keep":
        doc["host_name"] = host
    if shift_us:
        for e in doc["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += shift_us
    dst.write_bytes(gzip.compress(json.dumps(doc).encode(), 1))


def build(tmp: Path, src: list[Path], plan: list[tuple], cuts: tuple[float, float] | None = None) -> list[Path]:
    """plan: (rank, which source rank to copy, shift in µs, host[, "cut"]) -> the files; "cut": the
    copy's window starts at ``cuts[which]``."""
    files = []
    for rank, which, shift, host, *cut in plan:
        f = tmp / f"r{rank}.pt.trace.json.gz"
        write_copy(src[which], f, rank=rank, shift_us=shift, host=host, cut_us=cuts[which] if cut else None)
        files.append(f)
    return files


def covers(a, true_ns: int) -> bool:
    return a.uncertainty_ns is not None and abs(a.offset_ns - true_ns) <= a.uncertainty_ns


# ---------------------------------------------------------------- ranks from PyTorch's default names

HANDLER = ["vm_18583.1795235061706056575.pt.trace.json.gz", "vm_18584.1795235061706059011.pt.trace.json.gz"]


def test_handler_names_never_give_the_pid_or_the_timestamp_as_rank():
    for name, host, pid in (("vm_18583.1795235061706056575.pt.trace.json.gz", "vm", 18583),
                            ("gpu-node-7_4242.1795235061706056575.pt.trace.json", "gpu-node-7", 4242)):
        assert handler_name(Path(name)) == (host, pid, 1795235061706056575)
        assert rank_from_name(Path(name)) is None
    # a rank the host part spells is still one; the other patterns as before
    assert rank_from_name(Path("job-rank3_4242.1795235061706056575.pt.trace.json")) == 3
    assert [rank_from_name(Path(n)) for n in ("rank3.json", "rank-3.json", "x_rank_3.json.gz", "w.3.pt.trace.json",
                                               "cranky7.json", "w.1795235061706056575.pt.trace.json")] \
        == [3, 3, 3, 3, None, None]


def test_handler_named_folder_takes_ranks_from_distributed_info(tmp_path):
    for src, name in zip(GLOO, HANDLER):
        (tmp_path / name).write_bytes(src.read_bytes())
    res = merge([tmp_path], tmp_path.parent / f"{tmp_path.name}.pftrace")
    assert [(p.name, r, how) for p, r, how in res.files] == [(HANDLER[0], 0, "distributedInfo.rank"),
                                                             (HANDLER[1], 1, "distributedInfo.rank")]


def test_handler_named_files_without_a_rank_take_the_file_order(tmp_path):
    """No distributedInfo (a run without torch.distributed): before, the timestamp was the rank
    (a traceback for .pftrace, rank 1795235061706056575 in a .tar)."""
    d = tmp_path / "traces"
    d.mkdir()
    for src, name in zip(GLOO, HANDLER):
        write_copy(src, d / name, rank=None)
    for out in ("run.pftrace", "run.tar"):
        res = merge([d], tmp_path / out)
        assert [(p.name, r, how) for p, r, how in res.files] == [(HANDLER[0], 0, "file order"),
                                                                 (HANDLER[1], 1, "file order")]
        notes = [str(w) for w in res.warnings if "by the order of the files" in w.message]
        assert len(notes) == 2 and HANDLER[1] in notes[1] and "rank 1" in notes[1]
        assert notes[1].endswith("give it with rank_map FILE=N (1)")
    # explicit --rank first, then the file order for the rest
    res = merge([d], tmp_path / "x.pftrace", rank_map=[f"{d / HANDLER[0]}=1"])
    assert [(r, how) for _, r, how in res.files] == [(1, "{opt:rank_map}"), (0, "file order")]
    # the CLI: exit 0, the rank source shown
    r = subprocess.run([sys.executable, "-m", "traceconv", "merge", str(d), "-o", str(tmp_path / "c.tar")],
                       capture_output=True, text=True, timeout=120, env={"COLUMNS": "250", "PATH": ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("(file order)") == 2 and "by the order of the files" in r.stderr
    assert r.stderr.count("give it with --rank FILE=N") == 2          # the parameter, as the CLI spells it
    import tarfile
    with tarfile.open(tmp_path / "c.tar") as tar:
        assert sorted(n.split("_")[0] for n in tar.getnames()) == ["perfetto", "rank0", "rank1"]


# ---------------------------------------------------------------- the archive in trace_processor

ARCHIVE_SQL = """
select m.name as machine, coalesce(p1.name, p2.name) as process, coalesce(th.name, tr.name) as track,
       s.name as name, s.category as cat, s.ts as ts, s.dur as dur, s.depth as depth
from slice s
join track tr on tr.id = s.track_id
left join thread_track tt on tt.id = s.track_id
left join thread th using (utid)
left join process p1 on p1.upid = th.upid
left join process_track pt on pt.id = s.track_id
left join process p2 on p2.upid = pt.upid
left join machine m on m.id = coalesce(p1.machine_id, p2.machine_id, tr.machine_id)
"""


def archive_vs_merged(tar: Path, pftrace: Path) -> tuple[Counter, Counter]:
    """Each trace's slices as (rank, process, track, name, cat, ts, dur, depth): the rank from the
    archive's machine ``rank N``, or the merged trace's ``rank N · `` process prefix."""
    tp.assert_loads(tar)
    tp.assert_loads(pftrace)
    got = Counter()
    for row in tp.query(tar, ARCHIVE_SQL):
        m = re.fullmatch(r"rank (\d+)(?: · \d+)?", row["machine"] or "")
        assert m, row
        got[(int(m.group(1)), row["process"], row["track"], row["name"], row["cat"], row["ts"],
             row["dur"], row["depth"])] += 1
    want = Counter()
    for row in tp.query(pftrace, ARCHIVE_SQL):
        m = RANK.match(row["process"] or row["track"])       # a global track: "rank N · Global instants"
        assert m, row
        process, track = (m.group(2), row["track"]) if row["process"] else (None, m.group(2))
        want[(int(m.group(1)), process, track, row["name"], row["cat"], row["ts"], row["dur"], row["depth"])] += 1
    return got, want


@tp.requires_trace_processor
def test_archive_opens_in_trace_processor_with_every_rank_where_the_merged_trace_has_it(tmp_path):
    """Composer's two ranks, 101 µs apart by its clock sync: the archive applies the offset itself."""
    res = merge(COMPOSER, tmp_path / "run.tar")
    merge(COMPOSER, tmp_path / "run.pftrace")
    assert [a.offset_ns for a in res.alignments] == [0, 101_000]
    got, want = archive_vs_merged(tmp_path / "run.tar", tmp_path / "run.pftrace")
    assert got == want
    assert {k[0] for k in got} == {0, 1} and sum(got.values()) == sum(len(t.slices) + len(t.instants) for t in map(traceconv.load, COMPOSER))


@tp.requires_trace_processor
def test_archive_of_skewed_ranks_applies_the_collective_offsets(tmp_path):
    files = build(tmp_path, GLOO, [(0, 0, 0, "h0"), (1, 1, 3_000, "h1"), (2, 1, -7_000, "h2"), (3, 0, 40_000, "h3")])
    res = merge(files, tmp_path / "run.tar", align_method="collectives")
    merge(files, tmp_path / "run.pftrace", align_method="collectives")
    assert [a.offset_ns != 0 for a in res.alignments] == [False, True, True, True]
    got, want = archive_vs_merged(tmp_path / "run.tar", tmp_path / "run.pftrace")
    assert got == want and {k[0] for k in got} == {0, 1, 2, 3}


@tp.requires_trace_processor
def test_archive_with_two_files_for_one_rank(tmp_path):
    """A rank's second file (here ML-Agents timers given --rank) is a machine of its own: on one
    machine the two files' processes, which share a pid, would merge."""
    timers = Path(__file__).parent / "fixtures" / "mlagents" / "csharp_3DBall_timers.json"
    for r in (0, 1):
        args = dict(rank_map=[f"{timers}={r}"], align_method="collectives")
        res = merge([*GLOO, timers], tmp_path / f"run{r}.tar", **args)
        merge([*GLOO, timers], tmp_path / f"run{r}.pftrace", **args)
        assert res.alignments[1].offset_ns != 0
        got, want = archive_vs_merged(tmp_path / f"run{r}.tar", tmp_path / f"run{r}.pftrace")
        assert got == want
        machines = {row["name"]: row["n"] for row in tp.query(
            tmp_path / f"run{r}.tar", "select m.name, count(*) n from process p join machine m on m.id = p.machine_id "
                                      "where p.name like 'Unity%' group by 1")}
        assert machines == {f"rank {r} · 1": 1}


# ---------------------------------------------------------------- collectives on gloo

def test_gloo_collectives_are_gloos_own_spans():
    from traceconv.merging.align import _collectives
    coll = _collectives(traceconv.load(GLOO[0]))
    assert {k: len(v) for k, v in coll.items()} == {"gloo:allreduce[676]": 2, "gloo:allreduce[4]": 2,
                                                     "gloo:barrier": 2, "gloo:broadcast[5]": 1, "gloo:broadcast[1]": 1}


@pytest.mark.parametrize("src", [GLOO, COMPOSER_TORCH], ids=["ddp", "composer"])
def test_one_host_four_ranks(src, tmp_path):
    """4 ranks on one host (true offsets 0): auto keeps the host's one clock; collectives match on
    every rank, say how many, and their uncertainty covers 0."""
    files = build(tmp_path, src, [(0, 0, 0, "keep"), (1, 1, 0, "keep"), (2, 1, 0, "keep"), (3, 0, 0, "keep")])
    res = merge(files, tmp_path / "auto.pftrace")
    assert [(a.method, a.offset_ns, a.uncertainty_ns) for a in res.alignments] == [("wallclock", 0, 0)] * 4
    assert all(a.matched >= 5 for a in res.alignments)
    res = merge(files, tmp_path / "coll.pftrace", align_method="collectives")
    for a in res.alignments:
        assert a.method == "collectives" and a.matched >= 5 and covers(a, 0), a
        assert a.uncertainty_ns <= 1_000_000
    rows = read_perfetto(tmp_path / "coll.pftrace").metadata["merge"]["alignment"]
    assert [(r["rank"], r["matched"], r["offset_ns"]) for r in rows] == \
        [(a.rank, a.matched, a.offset_ns) for a in res.alignments]


@pytest.mark.parametrize("src", [GLOO, COMPOSER_TORCH], ids=["ddp", "composer"])
def test_four_hosts_with_skewed_clocks(src, tmp_path):
    shifts = {0: 0, 1: 3_000, 2: -7_000, 3: 40_000}
    files = build(tmp_path, src, [(r, r % 2 if r < 2 else 1 - r % 2, s, f"host{r}") for r, s in shifts.items()])
    for method in ("collectives", "auto"):
        res = merge(files, tmp_path / f"{method}.pftrace", align_method=method)
        for a in res.alignments:
            assert a.method == "collectives" and covers(a, -shifts[a.rank] * 1000), (method, a)
            assert a.matched >= 5


@pytest.mark.parametrize("src", [GLOO, COMPOSER_TORCH], ids=["ddp", "composer"])
def test_two_hosts_two_ranks_each(src, tmp_path):
    """Host B's clock 5 ms ahead: its two ranks move together by what the collectives of both say;
    host A's second rank stays on host A's clock."""
    files = build(tmp_path, src, [(0, 0, 0, "a"), (1, 1, 0, "a"), (2, 0, 5_000, "b"), (3, 1, 5_000, "b")])
    res = merge(files, tmp_path / "run.pftrace")
    a0, a1, b2, b3 = res.alignments
    assert (a0.offset_ns, a0.uncertainty_ns, a1.method, a1.offset_ns, a1.uncertainty_ns) == (0, 0, "wallclock", 0, 0)
    assert "same host as rank 0 (a)" in a1.detail
    assert b2.method == b3.method == "collectives"
    assert b2.offset_ns == b3.offset_ns and b2.uncertainty_ns == b3.uncertainty_ns
    assert covers(b2, -5_000_000) and b2.uncertainty_ns <= 1_000_000, b2
    assert "host b" in b2.detail


@pytest.mark.parametrize("src", [GLOO, COMPOSER_TORCH], ids=["ddp", "composer"])
def test_a_shared_host_name_is_checked_against_causality(src, tmp_path):
    """Rank 1 says host 'vm' like rank 0 but its clock is 5 ms ahead (a container's hostname
    reused on another machine): its all-to-all collectives would end before they began on rank 0,
    so it is placed by them instead of trusted to share rank 0's clock."""
    files = build(tmp_path, src, [(0, 0, 0, "keep"), (1, 1, 5_000, "keep"), (2, 1, 0, "keep"), (3, 0, 0, "keep")])
    res = merge(files, tmp_path / "run.pftrace")
    a0, a1, a2, a3 = res.alignments
    assert [(a.method, a.offset_ns) for a in (a2, a3)] == [("wallclock", 0), ("wallclock", 0)]
    assert a1.method == "collectives" and covers(a1, -5_000_000) and "rule out one clock" in a1.detail, a1


@pytest.mark.parametrize("src", [GLOO, COMPOSER_TORCH], ids=["ddp", "composer"])
def test_one_host_name_two_clocks_elsewhere(src, tmp_path):
    """Ranks 2 and 3 both say host 'b' but their clocks differ by 10 ms: pooled, their bounds
    cannot meet, so each is placed on its own."""
    files = build(tmp_path, src, [(0, 0, 0, "a"), (1, 1, 0, "a"), (2, 0, 5_000, "b"), (3, 1, -5_000, "b")])
    res = merge(files, tmp_path / "run.pftrace")
    a2, a3 = res.alignments[2:]
    assert a2.method == a3.method == "collectives" and "host b" not in a2.detail
    assert covers(a2, -5_000_000) and covers(a3, 5_000_000), (a2, a3)


# where each source's window is cut: DDP just before rank 0's / rank 1's second all-reduce, so that
# the first one (and everything before) is missing; Composer at each rank's ProfilerStep#2
CUTS = {"ddp": (4378372492000.0, 4378372494000.0), "composer": (4378629787215.0, 4378629788515.0)}


@pytest.mark.parametrize("src,cuts", [(GLOO, CUTS["ddp"]), (COMPOSER_TORCH, CUTS["composer"])], ids=["ddp", "composer"])
def test_windows_that_start_collectives_apart(src, cuts, tmp_path):
    """Ranks 1-3 start their window one or more collectives after rank 0 (before: -91 ms +- 59 and
    -72.6 ms +- 1.4 on rank 1, true offset 0)."""
    shifts = {0: 0, 1: 0, 2: 2_000, 3: -3_000}
    files = build(tmp_path, src, [(0, 0, 0, "h0"), (1, 1, 0, "h1", "cut"), (2, 1, 2_000, "h2", "cut"),
                                  (3, 0, -3_000, "h3", "cut")], cuts)
    for method in ("collectives", "auto"):
        res = merge(files, tmp_path / f"{method}.pftrace", align_method=method)
        for a in res.alignments:
            assert a.method == "collectives" and covers(a, -shifts[a.rank] * 1000), (method, a)
            assert a.uncertainty_ns <= 300_000 and a.matched >= 5


def test_host_from_the_handlers_file_name(tmp_path):
    """No host_name key, but the handler's default names say both ranks ran on 'vm'."""
    for src, name, r in zip(GLOO, HANDLER, (0, 1)):
        write_copy(src, tmp_path / name, rank=r, host=None)
    res = merge(sorted(tmp_path.glob("*.gz")), tmp_path / "run.pftrace")
    assert [(a.method, a.host, a.offset_ns) for a in res.alignments] == [("wallclock", "vm", 0)] * 2


def test_cli_table_shows_matched_collectives(tmp_path):
    r = subprocess.run([sys.executable, "-m", "traceconv", "merge", *map(str, GLOO), "-o", str(tmp_path / "run.pftrace"),
                        "--align", "collectives"], capture_output=True, text=True, timeout=120,
                       env={"COLUMNS": "250", "PATH": ""})
    assert r.returncode == 0, r.stderr
    assert any("matched" in line for line in r.stdout.splitlines()[:4])
    rows = [line.split("│") for line in r.stdout.splitlines() if re.match(r"^│\s+[01]\s+│", line)]
    assert [int(row[4]) for row in rows] == [6, 6]


# ---------------------------------------------------------------- command-line values out of range

def test_rank_values_out_of_range_are_one_line_errors(tmp_path):
    for args, msg in ((["--ranks", "0-99999999999999999999"], "rank 99999999999999999999 is out of range"),
                      (["--rank", f"{GLOO[0]}=2147483648"], "rank 2147483648 is out of range")):
        r = subprocess.run([sys.executable, "-m", "traceconv", "merge", *map(str, GLOO), "-o",
                            str(tmp_path / "o.pftrace"), *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    with pytest.raises(TraceconvError, match=r"rank_map x: rank 2147483648 is out of range \(ranks are 0\.\.2147483647\)"):
        parse_rank_map(["x=2147483648"])
    for bad in ("5-3", "1-", "-1", "0x3", "٣"):
        with pytest.raises(TraceconvError, match="^ranks: "):
            parse_ranks(bad)
    with pytest.raises(TraceconvError, match="out of range"):
        parse_ranks("0" * 5000 + "2147483648")          # no 5000-digit int is ever built


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_the_widest_rank_range_is_never_materialized():
    code = ("from traceconv.merging import parse_ranks\n"
            "s = parse_ranks('0-2147483647,5')\n"
            "assert len(s) == 2**31 and 2147483647 in s and 2147483648 not in s and -1 not in s\n"
            "assert parse_ranks('7,0-3') == {0, 1, 2, 3, 7} and sorted(parse_ranks('3,1-2')) == [1, 2, 3]\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       preexec_fn=_cap_memory)
    assert r.returncode == 0, r.stderr[-2000:]
    assert parse_ranks("0-3,7") == {0, 1, 2, 3, 7}
