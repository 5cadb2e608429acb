"""traceconv summary against the numbers the producers print themselves.

* MXNet: ``profiler.dumps()`` (table and JSON) of the same run as ``profiler.dump()``'s trace.
* Sample Factory: the ``profile tree view`` blocks of the log.
* ML-Agents: ``timers.json``'s count / total / self (see also test_summary.py).
* MegEngine static graph: ``python -m megengine.tools.profile_analyze`` (MegEngine 1.13.0 on
  Python 3.10, run on the fixture; its output is in fixtures/summary, see the README there).
* PyTorch: the profiler's own window span is left out, and counted.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import traceconv
from traceconv import formats
from traceconv.hotspots import LEFT_OUT_MIRROR, LEFT_OUT_PROFILER, LEFT_OUT_RANKS, covered_ns, fmt_rate, summarize
from traceconv.model import TrackKind, enforce_time_domain
from traceconv.model.layout import nest

FIX = Path(__file__).parent / "fixtures"
MX_TRACE = FIX / "mxnet_trace" / "generated_mxnet191_profile_all.json"
MX_TABLE = FIX / "mxnet" / "generated_mxnet191_dumps_table.txt"
MX_JSON = FIX / "mxnet" / "generated_mxnet191_dumps_json.json"
MGE = FIX / "megengine" / "generated_mge1130_static_profile.json"
PA_OPS = FIX / "summary" / "mge1130_static_profile_analyze_device_top30.txt"
PA_TYPES = FIX / "summary" / "mge1130_static_profile_analyze_by_type_sum.txt"
SF = FIX / "sample_factory"
SF_LOGS = [SF / "docs_profiling_vizdoom_tree_view.log", SF / "generated_sf211_cartpole_async_sf_log.txt",
           SF / "generated_sf211_cartpole_serial_sf_log.txt"]
MLA = sorted((FIX / "mlagents").glob("*.json"))
KINETO = sorted((FIX / "kineto").glob("*.json*"))
TORCH_CPU = FIX / "kineto" / "generated_torch213_cpu_single_worker0.pt.trace.json.gz"
GLOO = FIX / "multirank" / "gloo_2ranks"


# ------------------------------------------------------------------------------- MXNet

def mxnet_table(path: Path) -> dict[str, dict[str, tuple[int, float]]]:
    """profiler.dumps(format='table'): {category: {name: (Total Count, Time (ms))}} (time sections)."""
    out: dict[str, dict[str, tuple[int, float]]] = {}
    cat = None
    lines = path.read_text().splitlines()
    for k, line in enumerate(lines):
        if line.startswith("====="):
            cat = lines[k - 1].strip()
            out[cat] = {}
            continue
        m = re.match(r"^(\S.*?)\s+(\d+)\s+(-?\d+\.\d+)\s+(-?\d+\.\d+)\s+(-?\d+\.\d+)\s+(-?\d+\.\d+)\s*$", line)
        if m and cat is not None and cat != "Device Storage":
            out[cat][m.group(1)] = (int(m.group(2)), float(m.group(3)))
    return out


def mxnet_counter_names(path: Path) -> set[str]:
    return {e["name"] for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "C"}


def test_mxnet_each_call_counted_once_as_mxnets_aggregate_table():
    table = mxnet_table(MX_TABLE)
    counters = mxnet_counter_names(MX_TRACE)
    expected = {name: v for cat in table.values() for name, v in cat.items() if name not in counters}
    assert len(expected) == 40 and expected["FullyConnected"] == (2, 3.883)
    s = summarize(traceconv.load(MX_TRACE), by="name")
    got = {r.key: (r.count, round(r.total_ns / 1e6, 4)) for r in s.rows}
    assert got == expected
    # the operators are the same calls drawn twice: B/E on cpu/0 and b/e on the operator track
    assert s.left_out == {LEFT_OUT_MIRROR: 46}
    assert s.rows[0].key in ("my_frame", "my_task", "my_event")   # not _backward_FullyConnected x2


def test_mxnet_totals_within_the_json_aggregates_printed_precision():
    agg = json.loads(MX_JSON.read_text())["Time"]
    counters = mxnet_counter_names(MX_TRACE)
    rows = {r.key: r for r in summarize(traceconv.load(MX_TRACE), by="name").rows}
    checked = 0
    for cat, entries in agg.items():
        for name, stat in entries.items():
            if name in counters:
                continue
            r = rows[name]
            assert r.count == stat["Count"], name
            ms = r.total_ns / 1e6
            # 4 significant digits (MXNet's %g-like output)
            tol = 0.5 * 10 ** (math.floor(math.log10(stat["Total"])) - 3) if stat["Total"] else 5e-4
            assert abs(ms - stat["Total"]) <= tol + 1e-12, (name, ms, stat["Total"])
            checked += 1
    assert checked == 40


def test_mxnet_both_views_stay_on_the_timeline():
    t = traceconv.load(MX_TRACE)
    names = [t.strings[i] for i in t.slices.name]
    assert Counter(names)["FullyConnected"] == 4          # drawn twice, counted once
    mirrored = [tr for tr in t.tracks if tr.summary == "mirror"]
    assert mirrored and {t.processes[tr.process].name for tr in mirrored} == {"operator"}


# ------------------------------------------------------------------------------- Sample Factory

_TREE_LINE = re.compile(r"^( *)([A-Za-z_][\w.\-]*: [^\s,]+(?:, [A-Za-z_][\w.\-]*: [^\s,]+)*)\s*$")


def sf_tree_nodes(path: Path) -> list[tuple[str, float]]:
    """Every (timer name, printed seconds) of the log's tree views, read from the text."""
    out = []
    inside = False
    for line in path.read_text().splitlines():
        if re.search(r"tree view:\s*$", line):
            inside = True
            continue
        m = _TREE_LINE.match(line) if inside else None
        if not m:
            inside = False
            continue
        for item in m.group(2).split(", "):
            k, _, v = item.partition(": ")
            out.append((k, float(v)))
    return out


@pytest.mark.parametrize("path", SF_LOGS, ids=lambda p: p.stem)
def test_sample_factory_totals_and_counts_are_the_printed_values(path):
    expected: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name, v in sf_tree_nodes(path):
        expected[name][0] += 1
        expected[name][1] += round(v * 1e9)
    assert len(expected) >= 10
    rows = {r.key: r for r in summarize(traceconv.load(path), by="name").rows}
    for name, (count, total) in expected.items():
        assert (rows[name].count, rows[name].total_ns) == (count, total), name


def test_sample_factory_nodes_drawn_longer_show_the_printed_value():
    path = SF / "generated_sf211_cartpole_async_sf_log.txt"
    t = traceconv.load(path)
    drawn = {t.strings[n]: d for n, d in zip(t.slices.name, t.slices.dur)}
    # SF's timeit keeps only the last duration: 'wait_policy: 0.0000' holds 'wait_policy_total: 9.1478'
    assert drawn["wait_policy"] == 9_147_800_000 and drawn["one_step"] == 18_471_000_000
    rows = {r.key: r for r in summarize(t, by="name").rows}
    assert (rows["wait_policy"].total_ns, rows["wait_policy"].self_ns) == (0, 0)
    assert (rows["one_step"].total_ns, rows["one_step"].self_ns) == (1_700_000, 0)
    # self: the printed total less its children (18.4710 - 0.4414 - 0.1290 - 2.3059 - 10.4900 - 2.8498 - 1.3882)
    assert (rows["handle_policy_step"].total_ns, rows["handle_policy_step"].self_ns) == (18_471_000_000, 866_700_000)
    assert (rows["train"].total_ns, rows["train"].self_ns) == (17_197_000_000, 104_400_000)
    for leaf in ("forward", "wait_policy_total", "bptt_forward_core", "batching"):
        assert rows[leaf].self_ns == rows[leaf].total_ns > 0
    assert (rows["main_loop"].count, rows["main_loop"].total_ns) == (1, 39_726_000_000)


def test_sample_factory_runner_by_thread_is_main_loop_once():
    s = summarize(traceconv.load(SF / "generated_sf211_cartpole_async_sf_log.txt"), by="thread")
    rows = {r.key: r for r in s.rows}
    assert rows["Runner / profile tree"].total_ns == 39_726_000_000      # was 2 x main_loop
    # Learner: the sum of its top-level timers (misc, prepare_batch, train), once
    assert rows["Learner 0 / profile tree"].total_ns == 400_000 + 478_600_000 + 17_197_000_000


# ------------------------------------------------------------------------------- ML-Agents

def mla_nodes(path: Path) -> list[tuple[str, dict]]:
    out = []

    def walk(node: dict, name: str) -> None:
        out.append((name, node))
        for cname, child in (node.get("children") or {}).items():
            walk(child, cname)

    walk(json.loads(path.read_text()), "root")
    return out


@pytest.mark.parametrize("path", MLA, ids=lambda p: p.stem)
def test_mlagents_rows_equal_timers_json(path):
    nodes = mla_nodes(path)
    rows = {r.key: r for r in summarize(traceconv.load(path), by="name").rows}
    for name, node in nodes:
        if sum(1 for n, _ in nodes if n == name) > 1:
            continue
        r = rows[name]
        assert (r.count, r.total_ns, r.self_ns) == (node["count"], round(node["total"] * 1e9),
                                                    round(node["self"] * 1e9)), name
    # by thread: the root's total once, not the sum of the nested timers
    root = json.loads(path.read_text())
    by_thread = summarize(traceconv.load(path), by="thread").rows
    main = next(r for r in by_thread if r.key.endswith("/ timers"))
    assert main.total_ns == round(root["total"] * 1e9)


# ------------------------------------------------------------------------------- MegEngine

def parse_grid(text: str) -> list[list[list[str]]]:
    """profile_analyze's fancy_grid table -> rows of cells, a cell being its lines."""
    rows, cur = [], None
    for line in text.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            cur = cur or [[] for _ in cells]
            for k, c in enumerate(cells):
                if c:
                    cur[k].append(c)
        elif line.startswith(("├", "╞", "╘")):
            if cur is not None:
                rows.append(cur)
            cur = None
    return rows[1:]          # the first is the header


def _rate(cell: list[str]) -> str:
    text = "".join(cell)
    return "N/A" if text.startswith("N/A") else text


def _mine(x: float | None, unit: str, base: int) -> str:
    return fmt_rate(x, unit, base).replace(" ", "")


def test_megengine_device_self_time_flops_bandwidth_equal_profile_analyze():
    prof = json.loads(MGE.read_text())
    ops = prof["graph_exec"]["operator"]
    names = Counter(ops[o]["name"] for o in prof["profiler"]["device"])
    s = summarize(traceconv.load(MGE), by="name")
    rows = {r.key: r for r in s.rows}
    pa = parse_grid(PA_OPS.read_text())
    assert len(pa) == 30
    checked = 0
    for cell in pa:
        op = cell[2][-1]                                 # operator info: name, type, id
        name = ops[op]["name"]
        if names[name] > 1:                              # summary rows are by name
            continue
        r = rows[name]
        # "device self time" is printed with 3 significant digits
        assert (r.count, f"{r.total_ns / 1e9:.3}", f"{r.self_ns / 1e9:.3}") == (1, cell[0][1], cell[0][1]), name
        assert _mine(r.flops, "FLOPS", 1000) == _rate(cell[4]), name
        assert _mine(r.bandwidth, "iB/s", 1024) == _rate(cell[6]), name
        checked += 1
    assert checked == 18
    top = rows["backward.ConvolutionBackwardFilterV2"]
    assert (_mine(top.flops, "FLOPS", 1000), _mine(top.bandwidth, "iB/s", 1024)) == ("77.65MFLOPS", "20.64MiB/s")
    # the host times are the same calls: left out, counted
    assert s.left_out == {LEFT_OUT_MIRROR: 177}
    assert sum(r.count for r in s.rows) == 177


def test_megengine_by_type_equals_profile_analyze_aggregate_sum():
    s = summarize(traceconv.load(MGE), by="category")
    rows = {r.key: r for r in s.rows}
    pa = parse_grid(PA_TYPES.read_text())
    assert len(pa) == len(rows) == 22
    for cell in pa:
        typ, count = cell[2][0], int(cell[2][1])
        r = rows[typ]
        assert (r.count, f"{r.total_ns / 1e9:.3}") == (count, cell[0][1]), typ
        assert _mine(r.flops, "FLOPS", 1000) == _rate(cell[4]), typ
        assert _mine(r.bandwidth, "iB/s", 1024) == _rate(cell[6]), typ


def test_megengine_total_device_time_equals_profile_analyze():
    # profile_analyze's summary: "total device time 0.005364"
    s = summarize(traceconv.load(MGE), by="thread")
    assert [r.key for r in s.rows] == ['MegEngine static graph / device cpu0:0 (xpux:0)']
    assert s.rows[0].self_ns == 5_364_000


# ------------------------------------------------------------------------------- PyTorch

def test_pytorch_profiler_window_left_out_and_counted():
    t = traceconv.load(TORCH_CPU)
    span = [i for i, n in enumerate(t.slices.name) if t.strings[n] == "PyTorch Profiler (0)"]
    assert len(span) == 1                                  # still on the timeline
    s = summarize(t)
    assert "PyTorch Profiler (0)" not in {r.key for r in s.rows}
    assert s.left_out == {LEFT_OUT_PROFILER: 1}
    # with the window left out, the top row is real work: the CPU matmuls (the step annotations'
    # own time is small once what runs inside them, on any lane, counts as their children)
    assert (s.rows[0].key, s.rows[0].count, s.rows[0].total_ns) == ("aten::mm", 6, 117_583_637)
    assert s.rows[0].share > 0.6
    w = summarize(traceconv.load(TORCH_CPU), include_profiler_spans=True)
    assert w.rows[0].key == "PyTorch Profiler (0)" and w.rows[0].total_ns == t.slices.dur[span[0]]
    assert w.left_out == {}
    assert w.total_self_ns == s.total_self_ns + t.slices.dur[span[0]]


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name.split(".")[0])
def test_no_profiler_span_ranks_in_any_kineto_summary(path):
    t = traceconv.load(path)
    spans = sum(1 for tr in t.tracks if tr.summary == "profiler")
    for by in ("name", "category", "thread", "process"):
        keys = {r.key for r in summarize(t, by=by).rows}
        assert not any(k.startswith("PyTorch Profiler") or k == "Spans" or k.startswith("Spans /")
                       or k == "Trace" for k in keys), (by, keys)
    assert spans == (0 if "rank_non_gpu" in path.name else 1)


# ------------------------------------------------------------------------------- by a group: covered time once

def thread_windows(t: traceconv.Trace) -> dict[str, tuple[int, int, list[tuple[int, int]]]]:
    """'<process> / <thread>' -> (first start, last end, intervals) of its counted slices."""
    out: dict[str, list] = {}
    for i in range(len(t.slices)):
        tr = t.tracks[t.slices.track[i]]
        while tr.kind is TrackKind.LANE:
            tr = t.tracks[tr.parent]
        if tr.summary is not None:
            continue
        key = f"{t.processes[tr.process].name if tr.process is not None else '(global)'} / {t.track_label(tr)}"
        a, d = t.slices.ts[i], t.slices.dur[i]
        w = out.setdefault(key, [a, a + d, []])
        w[0], w[1] = min(w[0], a), max(w[1], a + d)
        w[2].append((a, a + d))
    return {k: tuple(v) for k, v in out.items()}


def union(iv: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(iv):
        if end is None or a >= end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


@pytest.mark.parametrize("path", [TORCH_CPU, MX_TRACE, MGE, SF_LOGS[1], MLA[-1],
                                  FIX / "kineto" / "hta_critical_path_simple_add_trace.json.gz"],
                         ids=lambda p: p.stem)
def test_by_thread_total_is_covered_time_never_past_the_window(path):
    t = traceconv.load(path)
    s = summarize(t, by="thread")
    wins = thread_windows(t)
    assert {r.key for r in s.rows} == set(wins)
    for r in s.rows:
        lo, hi, iv = wins[r.key]
        assert r.total_ns <= hi - lo, r.key
        assert r.total_ns == union(iv), r.key
    by_proc = {r.key: r.total_ns for r in summarize(t, by="process").rows}
    by_rank = summarize(t, by="rank").rows
    assert len(by_rank) == 1 and by_rank[0].total_ns <= sum(by_proc.values())


def test_issue_example_thread_total_within_its_window():
    # the issue: 20.39 ms for a thread whose whole window is 4.98 ms (nested slices added up)
    t = traceconv.load(FIX / "kineto" / "hta_critical_path_simple_add_trace.json.gz")
    s = summarize(t, by="thread")
    wins = thread_windows(t)
    sums = defaultdict(int)
    for k, (_, _, iv) in wins.items():
        sums[k] = sum(b - a for a, b in iv)
    nested = [r for r in s.rows if sums[r.key] > wins[r.key][1] - wins[r.key][0]]
    assert nested                                # threads whose slices nest: the sum would exceed the window
    for r in nested:
        assert r.total_ns <= wins[r.key][1] - wins[r.key][0] < sums[r.key]


def test_covered_ns():
    a = np.array([0, 10, 15, 50, 50], dtype=np.int64)
    b = np.array([100, 30, 20, 60, 50], dtype=np.int64)
    assert covered_ns(a, b) == 100
    assert covered_ns(np.array([5, 0]), np.array([7, 3])) == 5
    assert covered_ns(np.zeros(0, np.int64), np.zeros(0, np.int64)) == 0


# ------------------------------------------------------------------------------- filters, as merge's

def test_filters_as_merge_and_what_they_leave_out_is_counted():
    t = traceconv.load(TORCH_CPU)
    cats = Counter(t.strings[c] for c in t.slices.cat)
    s = summarize(traceconv.load(TORCH_CPU), by="category", drop_cat=["python_function"])
    assert "python_function" not in {r.key for r in s.rows}
    assert s.left_out["left out by {opt:drop_cat}"] == cats["python_function"]
    short = sum(1 for d in t.slices.dur if d < 1_000_000)
    s = summarize(traceconv.load(TORCH_CPU), min_dur="1ms", include_profiler_spans=True)
    assert s.left_out == {"left out by {opt:min_dur}": short}
    assert sum(r.count for r in s.rows) == len(t.slices) - short
    # a named window: slices overlapping ProfilerStep#2 only
    i = next(i for i, n in enumerate(t.slices.name) if t.strings[n] == "ProfilerStep#2")
    a, b = t.slices.ts[i], t.slices.ts[i] + t.slices.dur[i]
    inside = sum(1 for x, d in zip(t.slices.ts, t.slices.dur) if x < b and (x + d > a or (d == 0 and x >= a)))
    s = summarize(traceconv.load(TORCH_CPU), window="ProfilerStep#2", include_profiler_spans=True)
    assert sum(r.count for r in s.rows) == inside < len(t.slices)
    assert s.left_out == {"left out by {opt:window}": len(t.slices) - inside}
    assert s.left_out_text() == f"{len(t.slices) - inside:,} left out by window"
    s = summarize(traceconv.load(TORCH_CPU), window="0ms:1ms", include_profiler_spans=True)
    assert 0 < sum(r.count for r in s.rows) < len(t.slices)
    with pytest.raises(traceconv.TraceconvError, match="not a duration"):
        summarize(traceconv.load(TORCH_CPU), min_dur="5 parsecs")


def test_ranks_filter():
    traces = [traceconv.load(p) for p in sorted(GLOO.glob("*.json.gz"))]
    assert [t.meta.rank for t in traces] == [0, 1]
    s = summarize(traces, by="rank", ranks="1")
    assert s.ranks == [1] and [r.key for r in s.rows] == ["rank 1"]
    assert s.left_out[LEFT_OUT_RANKS] == 1
    with pytest.raises(traceconv.TraceconvError, match="none of the inputs"):
        summarize([traceconv.load(p) for p in sorted(GLOO.glob("*.json.gz"))], ranks="5-7")


# ------------------------------------------------------------------------------- the command

def cli(*args) -> "object":
    from traceconv_cli.app import app
    return CliRunner().invoke(app, ["summary", *map(str, args)])


def test_cli_mxnet_counts_each_call_once_and_says_what_it_left_out():
    r = cli(MX_TRACE, "--format", "json", "--top", "0")
    assert r.exit_code == 0, r.output
    doc = orjson.loads(r.stdout)
    rows = {x["key"]: x for x in doc["rows"]}
    assert (rows["FullyConnected"]["count"], rows["FullyConnected"]["total_ns"]) == (2, 3_883_000)
    assert doc["left_out"] == {LEFT_OUT_MIRROR: 46} and doc["total"] == "sum of durations"
    r = cli(MX_TRACE, "--top", "3")
    assert r.exit_code == 0 and "not counted: 46 slices that repeat calls" in r.stdout


def test_cli_profiler_spans_option_and_filters():
    r = cli(TORCH_CPU, "--top", "1", "--format", "csv")
    assert r.exit_code == 0
    assert r.stdout.splitlines()[1].startswith("aten::mm,6,117583637,")
    r = cli(TORCH_CPU, "--top", "1", "--format", "csv", "--include-profiler-spans")
    assert r.stdout.splitlines()[1].startswith("PyTorch Profiler (0),")
    r = cli(TORCH_CPU, "--top", "0")
    assert "not counted: 1 profiler window spans (--include-profiler-spans counts them)" in r.stdout
    r = cli(TORCH_CPU, "--format", "json", "--top", "0", "--by", "category", "--drop-cat", "python_function",
            "--min-dur", "5us", "--window", "ProfilerStep#2")
    assert r.exit_code == 0, r.output
    doc = orjson.loads(r.stdout)
    assert "python_function" not in {x["key"] for x in doc["rows"]} and doc["total"] == "covered time (union)"
    assert set(doc["left_out"]) == {"left out by --drop-cat", "left out by --min-dur", "left out by --window",
                                    "profiler window spans (--include-profiler-spans counts them)"}
    r = cli(*sorted(GLOO.glob("*.json.gz")), "--ranks", "0", "--by", "rank", "--format", "json")
    assert [x["key"] for x in orjson.loads(r.stdout)["rows"]] == ["rank 0"]
    r = cli(TORCH_CPU, "--min-dur", "fast")
    assert r.exit_code == 2 and "is not a duration" in r.output


def test_cli_megengine_flops_and_bandwidth_columns(monkeypatch):
    import traceconv_cli.app as app
    monkeypatch.setattr(app.console(), "width", 200)
    r = cli(MGE, "--top", "1")
    assert r.exit_code == 0, r.output
    assert "FLOPS" in r.stdout and "77.65 MFLOPS" in r.stdout and "20.64 MiB/s" in r.stdout
    r = cli(MGE, "--top", "1", "--format", "csv")
    head, first = r.stdout.splitlines()[:2]
    assert head == "name,count,total_ns,self_ns,avg_ns,share,computation,memory,flops,bandwidth"
    assert first.startswith("backward.ConvolutionBackwardFilterV2,1,1899000,1899000,")


def test_out_of_range_numbers_in_aggregate_args_do_not_overflow():
    t = traceconv.Trace("test")
    t.meta.synthesized = True
    th = t.thread(t.process(1, "p"), 1, "main")
    t.add_slice(th.track, 0, 100, "huge", args=b'{"value_s":1e26,"count":18446744073709551615,"self_s":1e300}')
    t.add_slice(th.track, 0, 50, "inner", args={"value_s": 4e-8})
    rows = {r.key: r for r in summarize(t).rows}
    assert (rows["huge"].count, rows["huge"].total_ns, rows["huge"].self_ns) == (2**62, 2**62, 2**62)
    assert (rows["inner"].total_ns, rows["inner"].self_ns) == (40, 40)


@pytest.mark.parametrize("chunk", [7, 100, 4096])
def test_megengine_footprints_read_a_chunk_at_a_time_are_the_same(monkeypatch, chunk):
    """The footprint args are looked for a chunk of the args text at a time (the whole text mapped
    at once held 100 MB more in a 1M summary): keys cut by a chunk's end are found once."""
    from traceconv.model import args
    def rates() -> dict[str, str]:                       # (repr: a NaN equals itself there)
        return {r.key: repr((r.flops, r.bandwidth)) for r in summarize(traceconv.load(MGE), by="name").rows}
    whole = rates()
    monkeypatch.setattr(args, "COUNT_CHUNK", chunk)
    assert rates() == whole and sum(not v.startswith("(None") for v in whole.values()) >= 18


# ------------------------------------------------------------------------------- traceconv's own outputs

def _table(s) -> tuple:
    """A summary's numbers: its rows, ranks, each rank's busy time and what it left out."""
    return ([(r.key, r.count, r.total_ns, r.self_ns, sorted(r.per_rank_total_ns.items())) for r in s.rows],
            s.ranks, sorted(s.per_rank_self_ns.items()), s.left_out)


OWN_SOURCES = [MX_TRACE, MGE, TORCH_CPU, GLOO / "rank0.pt.trace.json.gz", MLA[0],
               FIX / "megengine_timeline" / "generated_mge1130_dynamic.chrome_timeline.json.gz",
               # slices of the same start and duration, one holding the other: read back from a
               # .pftrace they must nest as they did (its rows in the order of their begins)
               SF / "docs_profiling_vizdoom_tree_view.log", MX_JSON,
               FIX / "kineto" / "hta_trace_diff_control_legacy_async_cpu_to_gpu_EXCERPT.json.gz",
               # a .pftrace holding a log's "profile tree view" headers in its strings: its own
               SF / "benchmarking_isaacgym_ant.txt"]


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
@pytest.mark.parametrize("src", OWN_SOURCES, ids=lambda p: p.name)
def test_a_conversion_summarises_as_its_source(tmp_path, src, ext):
    """What summary leaves out (a profiler's window, MXNet's and MegEngine's second drawing of one
    call) is kept in traceconv's metadata: a converted file's table is its source's, not one where
    PyTorch's profiler window is the top row with 46 % of the self time."""
    out = tmp_path / f"out{ext}"
    traceconv.convert(src, out)
    assert formats.detect(out.read_bytes()[:65536], out).name == ("perfetto" if ext == ".pftrace" else "chrome-json")
    for by in ("name", "category", "rank", "thread", "process"):
        want = _table(summarize(traceconv.load(src), by=by))
        assert _table(summarize(traceconv.load(out), by=by)) == want, by
    roles = {t.summary for t in traceconv.load(src).tracks} - {None}
    assert bool(roles) == (src in (MX_TRACE, MGE, TORCH_CPU, GLOO / "rank0.pt.trace.json.gz", OWN_SOURCES[8]))
    back = traceconv.load(out)
    nest(back)
    lanes = [traceconv.load(out).track_label(t) for t in back.tracks if t.kind is TrackKind.LANE]
    # (PyTorch's "## forward ##" overlaps its ProfilerStep: a lane, which Chrome JSON writes as a
    # thread of its own; read back it is a lane of its thread again, not a thread beside it)
    assert lanes == (["thread 18269 (python) (overlap 1)"] if src == TORCH_CPU else []), lanes
    assert not back.diagnostics.warnings or all("metadata" not in w.message for w in back.diagnostics.warnings)


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_a_merged_file_summarises_as_its_ranks(tmp_path, ext):
    """A merged trace holds every rank: summary gives each its row, its totals, its busy time, and
    --ranks picks among them, as for the ranks' own files."""
    ranks = sorted(GLOO.glob("*.json.gz"))
    out = tmp_path / f"run{ext}"
    traceconv.merge(ranks, out)
    merged = traceconv.load(out)
    assert merged.meta.rank is None and {p.args.get("rank") for p in merged.processes} - {None} == {0, 1}
    for by in ("name", "rank", "category"):
        want = summarize([traceconv.load(p) for p in ranks], by=by)
        got = summarize(traceconv.load(out), by=by)
        assert _table(got) == _table(want), by
    assert [r.key for r in summarize(traceconv.load(out), by="rank").rows] == ["rank 0", "rank 1"]
    want = summarize([traceconv.load(p) for p in ranks], by="name", ranks="1")
    got = summarize(traceconv.load(out), by="name", ranks="1")
    assert _table(got) == _table(want) and got.ranks == [1] and got.left_out[LEFT_OUT_RANKS] == 1
    assert got.left_out[LEFT_OUT_PROFILER] == 1                      # (rank 0's window not counted as left out)
    with pytest.raises(traceconv.TraceconvError, match=r"found: 0, 1"):
        summarize(traceconv.load(out), ranks="5")


def test_lanes_that_name_nothing_are_counted_not_applied(tmp_path):
    out = tmp_path / "out.json"
    traceconv.convert(TORCH_CPU, out)
    doc = orjson.loads(out.read_bytes())
    want = doc["metadata"]["traceconv"]["lanes"]
    assert len(want) == 1 and want[0][1] >= 2_000_000_000
    pid, tid, base = want[0]
    doc["metadata"]["traceconv"]["lanes"] = [[pid, base, base], [pid, tid, 77], [pid, tid], "x", [pid, tid, base]]
    out.write_bytes(orjson.dumps(doc))
    t = traceconv.load(out)
    notes = [w for w in t.diagnostics.warnings if "overlap lanes" in w.message]
    assert len(notes) == 1 and notes[0].count == 4
    assert _table(summarize(t)) == _table(summarize(traceconv.load(TORCH_CPU)))     # (the good one used)
    doc["metadata"]["traceconv"]["lanes"] = {"a": 1}
    out.write_bytes(orjson.dumps(doc))
    t = traceconv.load(out)
    assert any(t.kind is TrackKind.ASYNC and "overlap" in t.name for t in t.tracks)   # (kept as a track)


def test_marks_that_name_nothing_are_counted_not_applied():
    t = traceconv.Trace("test")
    th = t.thread(t.process(7, "p"), 3, "main")
    t.add_slice(th.track, 0, 10, "a")
    bad = t.restore_marks({"summary_roles": [[7, 3, "profiler"], [7, None, "nonsense"], [8, None, "mirror"],
                                             "x", [7, 4, "mirror"], [7, "3", "mirror"], [True, None, "mirror"]],
                           "process_ranks": [[7, 2], [7, -1], [9, 1], [7], {"a": 1}]})
    assert bad == 10
    assert t.tracks[th.track].summary == "profiler" and t.processes[0].args == {"rank": 2}
    assert t.restore_marks({"summary_roles": {"7": "mirror"}, "process_ranks": 3}) == 2
    assert sum(w.count for w in t.diagnostics.warnings if "traceconv's metadata" in w.message) == 12


@st.composite
def _timelines(draw):
    from fuzz.strategies import _drawn_timeline
    return _drawn_timeline(draw)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(_timelines(), st.sampled_from([".pftrace", ".json"]), st.sampled_from(["name", "rank", "thread"]))
def test_any_timeline_summarises_the_same_read_back(tmp_path_factory, trace, ext, by):
    """Drawn timelines (slices that nest, overlap and tie in start and duration, roles, ranks, args
    of every JSON kind) written by traceconv and read back summarise as the timeline itself."""
    out = tmp_path_factory.mktemp("own") / f"t{ext}"
    enforce_time_domain(trace)                      # (what a reader does to what it read)
    want = _table(summarize(trace, by=by))          # (lays the trace out: the writers take it nested)
    traceconv.save(trace, out)
    # (a .json of events more than 26 days apart holds whole µs, as counted: not the same times)
    assume(not any("whole µs" in w.message for w in trace.diagnostics.warnings))
    assert _table(summarize(traceconv.load(out), by=by)) == want


@st.composite
def _rank_timelines(draw):
    from fuzz.strategies import _drawn_timeline
    traces = []
    for r in range(draw(st.integers(1, 3))):
        t = _drawn_timeline(draw)
        for p in t.processes:
            p.args.pop("rank", None)
        t.meta.rank = r
        traces.append(t)
    return traces


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(_rank_timelines(), st.sampled_from([".pftrace", ".json"]), st.sampled_from(["name", "rank"]))
def test_any_merge_summarises_as_its_ranks(tmp_path_factory, traces, ext, by):
    """Drawn rank files merged to .pftrace or .json: the merged file's summary (rows, per-rank
    totals, busy times, what was left out) is the ranks' files' summary."""
    d = tmp_path_factory.mktemp("merge")
    files = []
    for k, t in enumerate(traces):
        traceconv.save(t, d / f"rank{k}.pftrace")
        files.append(d / f"rank{k}.pftrace")
    ranks = [traceconv.load(f) for f in files]
    assume(all(len(t.slices) for t in ranks))        # (a merged file's ranks are those with slices)
    want = _table(summarize(ranks, by=by))
    res = traceconv.merge(files, d / f"run{ext}")
    # (a .json of events more than 26 days apart holds whole µs, as counted: not the same times)
    assume(not any("whole µs" in str(getattr(w, "message", w)) for w in res.warnings))
    assert _table(summarize(traceconv.load(d / f"run{ext}"), by=by)) == want
