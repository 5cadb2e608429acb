"""Sample Factory logs: the real files (SF docs, SF benchmarking notes, generated SF 2.1.1 runs)."""

from __future__ import annotations

import calendar
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

import traceconv
from traceconv import formats
from traceconv.errors import TraceconvError, WarningCode
from traceconv.io import open_source
from traceconv.model.layout import nest
from traceconv.model import Clock

from timeline import assert_same_timeline, from_model, read_chrome_json, read_perfetto

FIX = Path(__file__).parent / "fixtures" / "sample_factory"
FILES = sorted(FIX.iterdir())
ASYNC = FIX / "generated_sf211_cartpole_async_sf_log.txt"
CONSOLE = FIX / "generated_sf211_cartpole_async_console_with_ansi.log"
DOCS = FIX / "docs_profiling_vizdoom_tree_view.log"

# (runs, profile reports) per file, counted by hand from the logs
COUNTS = {
    "benchmarking.txt": (52, 306),             # 51 'Collected' runs + the 'WITHOUT TRAINING' group
    "benchmarking_isaacgym_ant.txt": (10, 26),
    "benchmarking_xeon_36core.txt": (2, 18),
    "docs_profiling_vizdoom_tree_view.log": (1, 6),
    "generated_sf211_cartpole_async_console_with_ansi.log": (1, 6),
    "generated_sf211_cartpole_async_sf_log.txt": (1, 6),
    "generated_sf211_cartpole_serial_sf_log.txt": (1, 5),
}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\](?:\[\d+\])? ")


def ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def utc_ns(stamp: str) -> int:
    date, ms = stamp.split(",")
    return (calendar.timegm(datetime.strptime(date, "%Y-%m-%d %H:%M:%S").timetuple()) * 10**9
            + int(ms) * 10**6)


def expected_trees(path: Path) -> list[tuple[str, list]]:
    """An independent reading of every tree view block: (header name, [(name, value text, children)])."""
    lines = [ANSI.sub("", ln) for ln in path.read_text().splitlines()]
    out = []
    i = 0
    while i < len(lines):
        msg = PREFIX.sub("", lines[i])
        if msg.endswith("tree view:"):
            name = msg[: -len(" tree view:")]
            roots: list = []
            stack = [(-1, roots)]
            i += 1
            while i < len(lines) and re.fullmatch(r"( *)(\w+: \S+)(, \w+: \S+)*", lines[i]):
                depth = (len(lines[i]) - len(lines[i].lstrip())) // 2
                while stack[-1][0] >= depth:
                    stack.pop()
                items = lines[i].strip().split(", ")
                for it in items:
                    k, v = it.split(": ")
                    stack[-1][1].append((k, v, []))
                if len(items) == 1:
                    stack.append((depth, stack[-1][1][-1][2]))
                i += 1
            out.append((name.removesuffix(" profile"), roots))
        else:
            i += 1
    return out


def without_log_lines(tl):
    """The timeline with the ``log_line`` arg removed (it differs between copies of one log)."""
    import orjson
    from timeline import Slice, canon
    out = type(tl)(instants=tl.instants, counters=tl.counters, flows=tl.flows, metadata=tl.metadata)
    for s in tl.slices:
        args = orjson.loads(s.args)
        args.pop("log_line", None)
        out.slices.append(Slice(**{**s.__dict__, "args": canon(args)}))
    return out


def tree_from_output(tl, process: str) -> list:
    """The component's tree as the decoded output shows it, below the component's root slice."""
    slices = sorted((s for s in tl.slices if s.process == process),
                    key=lambda s: (s.ts, -s.dur, s.depth))
    roots: list = []
    stack: list = [(-1, roots)]
    import orjson
    for s in slices:
        while stack[-1][0] >= s.depth:
            stack.pop()
        args = orjson.loads(s.args)
        node = (s.name, args, s, [])
        stack[-1][1].append(node)
        stack.append((s.depth, node[3]))
    assert len(roots) == 1, f"{process}: one root slice"
    return roots[0][3]


def same_tree(got: list, want: list, where: str) -> None:
    """Names, nesting, values to the 4 printed decimals; durations in ns equal to the printed value
    unless the node is flagged as drawn as long as its children."""
    assert [g[0] for g in got] == [w[0] for w in want], where
    for (name, args, s, kids), (wname, wtext, wkids) in zip(got, want):
        assert f"{args['value_s']:.4f}" == wtext, f"{where} > {name}"
        if args.get("children_exceed_total"):
            assert s.dur == sum(k[2].dur for k in kids) > ns(float(wtext))
        else:
            assert s.dur == ns(float(wtext)), f"{where} > {name}"
        same_tree(kids, wkids, f"{where} > {name}")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Each fixture converted to both outputs and decoded: {name: (trace, json timeline, proto timeline)}."""
    d = tmp_path_factory.mktemp("sf")
    got = {}
    for path in FILES:
        j, p = d / f"{path.name}.json", d / f"{path.name}.pftrace"
        rj = traceconv.convert(path, j)
        rp = traceconv.convert(path, p)
        assert rj.input_format == rp.input_format == "sample-factory"
        trace = traceconv.load(path)
        nest(trace)
        got[path.name] = (trace, read_chrome_json(j), read_perfetto(p))
    return got


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_detected_and_both_outputs_agree_with_the_model(path, outputs):
    assert formats.detect(open_source(path).head, path).name == "sample-factory"
    trace, tj, tp = outputs[path.name]
    assert_same_timeline(tj, tp)
    assert_same_timeline(tj, from_model(trace))
    assert tj.metadata == tp.metadata
    assert tj.metadata["traceconv"]["synthesized"] is True
    # no slice escapes its parent: no overlap lanes were needed
    assert not any(w.code is WarningCode.OVERLAP_LANES for w in trace.diagnostics.warnings)
    assert not any("overlap" in s.track for s in tj.slices)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_runs_and_components_counted(path, outputs):
    trace, tj, _ = outputs[path.name]
    runs, reports = COUNTS[path.name]
    meta = tj.metadata["sample_factory"]["runs"]
    assert len(meta) == runs
    assert sum(len(r["components"]) for r in meta) == reports
    assert len(tj.metadata["summary_tables"]) == reports
    roots = {s.process for s in tj.slices if s.depth == 0}
    assert len(roots) == reports                      # one process per component
    if runs > 1:
        assert all(re.match(r"run \d+ · ", p) for p in roots)
        assert {int(re.match(r"run (\d+) · ", p).group(1)) for p in roots} <= set(range(1, runs + 1))
    collected = len(re.findall(r"Collected ", path.read_text()))
    assert sum(1 for r in meta if "collected_env_steps" in r) == collected


@pytest.mark.parametrize("path", [p for p in FILES if "tree view:" in p.read_text()], ids=lambda p: p.name)
def test_every_tree_equals_what_the_log_prints(path, outputs):
    trace, tj, _ = outputs[path.name]
    want = expected_trees(path)
    tables = tj.metadata["summary_tables"]
    assert sum(1 for t in tables if t["rows"] and "flat" not in t["name"]) >= len(want)
    k = 0
    for comp, wtree in want:       # the tree views, in log order, among all reports
        while tables[k]["component"] != comp:
            k += 1
        pname = tables[k]["name"]
        same_tree(tree_from_output(tj, pname), wtree, pname)
        # the summary table holds the same values, pre-order with depths
        flat = []

        def walk(nodes, depth):
            for n, v, kids in nodes:
                flat.append([depth, n, float(v)])
                walk(kids, depth + 1)
        walk(wtree, 0)
        assert tables[k]["rows"] == flat
        k += 1


def test_docs_log_learner_tree_literal(outputs):
    """The SF documentation's Learner 0 report, node by node."""
    trace, tj, _ = outputs[DOCS.name]
    tree = tree_from_output(tj, "Learner 0")

    def shape(nodes):
        return [(n[0], n[1]["value_s"], shape(n[3])) for n in nodes]

    assert shape(tree) == [
        ("misc", 0.0024, []), ("prepare_batch", 8.0517, []),
        ("train", 28.5942, [
            ("epoch_init", 0.0037, []), ("minibatch_init", 0.0038, []), ("losses_postprocess", 0.1654, []),
            ("kl_divergence", 0.2093, []), ("after_optimizer", 12.5617, []),
            ("calculate_losses", 10.2242, [
                ("losses_init", 0.0021, []), ("forward_head", 0.4746, []), ("bptt_initial", 7.5225, []),
                ("tail", 0.3432, []), ("advantages_returns", 0.0976, []), ("losses", 0.7113, []),
                ("bptt", 0.9616, [("bptt_forward_core", 0.9263, [])])]),
            ("update", 5.0903, [("clip", 0.8172, [])])]),
    ]
    # children end to end from the parent's start, in the printed order
    train = tree[2]
    cursor = train[2].ts
    for child in train[3]:
        assert child[2].ts == cursor
        cursor += child[2].dur
    assert cursor <= train[2].ts + train[2].dur


def test_timeit_node_smaller_than_children_is_flagged_and_contains_them(outputs):
    trace, tj, _ = outputs[DOCS.name]
    tree = tree_from_output(tj, "InferenceWorker_p0-w0")
    one_step = next(n for n in tree if n[0] == "one_step")
    assert one_step[1]["value_s"] == 0.0034
    assert one_step[1]["children_exceed_total"] is True
    (hps,) = one_step[3]
    assert hps[0] == "handle_policy_step" and hps[2].dur == ns(105.2299)
    assert one_step[2].dur == hps[2].dur and one_step[2].ts == hps[2].ts
    assert hps[2].depth == one_step[2].depth + 1 and hps[2].track == one_step[2].track
    w = [w for w in trace.diagnostics.warnings if w.code is WarningCode.CHILDREN_EXCEED_PARENT]
    assert w and w[0].count == 2   # wait_policy and one_step


def test_times_real_utc_and_run_aligned_to_collected(outputs):
    trace, tj, _ = outputs[ASYNC.name]
    assert trace.meta.clock is Clock.UNIX
    assert tj.metadata["sample_factory"]["log_time_zone"].startswith("none")
    end = utc_ns("2026-11-21 04:35:54,901")      # the Collected line
    main_loop = next(s for s in tj.slices if s.process == "Runner" and s.name == "main_loop")
    assert main_loop.dur == ns(39.7260) and main_loop.ts + main_loop.dur == end
    roots = [s for s in tj.slices if s.depth == 0]
    assert len(roots) == 6 and {s.ts for s in roots} == {end - ns(39.7260)}
    run = tj.metadata["sample_factory"]["runs"][0]
    assert run["collected_env_steps"] == {"0": 30464} and run["fps"] == 766.9
    assert run["components"] == ["Batcher 0", "InferenceWorker_p0-w0", "Learner 0", "RolloutWorker_w0",
                                 "RolloutWorker_w1", "Runner"]
    assert [tp for tp in sorted(trace.processes, key=lambda p: p.sort_index)][0].name == "Batcher 0"


def test_fps_lines_become_counters(outputs):
    trace, tj, _ = outputs[ASYNC.name]
    text = ASYNC.read_text()
    fps_lines = re.findall(r"^\[([^\]]+)\]\[\d+\] Fps is \(10 sec: ([^,]+),", text, re.M)
    want = [(utc_ns(t), float(v)) for t, v in fps_lines if v != "nan"]
    got = sorted((ts, v) for p, track, ts, v in tj.counters if track == "Fps (10 sec)")
    assert got == want and len(want) == 5
    assert ("Runner", "Fps (10 sec)", utc_ns("2026-11-21 04:35:28,341"), 1175.8) in tj.counters
    assert ("Runner", "Total num frames", utc_ns("2026-11-21 04:35:48,339"), 26368.0) in tj.counters
    assert ("Runner", "Policy #0 lag (max)", utc_ns("2026-11-21 04:35:28,341"), 2.0) in tj.counters
    assert ("Runner", "Avg episode reward (policy 0)", utc_ns("2026-11-21 04:35:48,339"), 174.29) in tj.counters
    assert ("Runner", "Collected env steps (policy 0)", utc_ns("2026-11-21 04:35:54,901"), 30464.0) in tj.counters
    assert ("Runner", "FPS (Collected)", utc_ns("2026-11-21 04:35:54,901"), 766.9) in tj.counters
    # the first Fps line is all nan: 3 windows + throughput, counted, not plotted
    nan = [w for w in trace.diagnostics.warnings if "nan" in w.message]
    assert nan and nan[0].count == 4


def test_console_capture_with_ansi_and_warnings_gives_the_same_timeline(outputs):
    _, a, _ = outputs[ASYNC.name]
    _, b, _ = outputs[CONSOLE.name]
    assert_same_timeline(without_log_lines(a), without_log_lines(b))


def test_sf1_flat_timing_lines(outputs):
    trace, tj, _ = outputs["benchmarking_xeon_36core.txt"]
    name = "run 1 · Policy worker (pid 13035)"
    root = next(s for s in tj.slices if s.process == name and s.depth == 0)
    import orjson
    args = orjson.loads(root.args)
    assert args["details"] == "avg. requests 7.76" and args["flat"] is True and args["pid"] == 13035
    kids = [s for s in tj.slices if s.process == name and s.depth == 1]
    assert [k.name for k in sorted(kids, key=lambda s: s.ts)][:4] == ["init", "wait_policy_total", "wait_policy",
                                                                      "handle_policy_step"]
    timing = next(s for s in tj.slices if s.process == "run 1 · Timing" and s.name == "experience")
    assert timing.dur == ns(115.0724)
    assert tj.metadata["sample_factory"]["runs"][0]["collected_env_steps"] == {"0": 15022080}
    env0 = next(s for s in tj.slices if s.process == "run 1 · Env runner 0" and s.depth == 0)
    assert orjson.loads(env0.args)["details"] == "CPU aff. [0], rollouts 1644"


def test_early_sf2_profiling_tree_after_collected(outputs):
    trace, tj, _ = outputs["benchmarking_isaacgym_ant.txt"]
    runs = tj.metadata["sample_factory"]["runs"]
    assert runs[0]["components"] == ["Profiling"] and runs[0]["fps"] == 217925.6
    tree = tree_from_output(tj, "run 1 · Profiling")
    assert [n[0] for n in tree] == ["main_loop"]
    assert [n[0] for n in tree[0][3]] == ["prepare_batch", "sampling", "train"]
    assert tree[0][2].dur == ns(45.7104)
    # V35: a stray 'main_loop' line after the Learner tree is kept where it appears, with a note
    assert runs[6]["components"] == ["Sampler 0", "Learner 0"]
    learner = tree_from_output(tj, "run 7 · Learner 0")
    assert [n[0] for n in learner] == ["prepare_batch", "train", "main_loop"]
    assert any("tree_str() order" in w.message for w in trace.diagnostics.warnings)


# ------------------------------------------------------------------ variants and bad input

def load_text(tmp_path, text: str | bytes, name="sf_log.txt", fmt=None):
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    t = traceconv.load(p, fmt)
    nest(t)
    return t


def test_crlf_endings_same_timeline(tmp_path):
    lf = DOCS.read_bytes()
    a = load_text(tmp_path, lf, "lf.log")
    b = load_text(tmp_path, lf.replace(b"\n", b"\r\n"), "crlf.log")
    assert_same_timeline(without_log_lines(from_model(a)), without_log_lines(from_model(b)))


def test_restart_in_one_log_keeps_runs_apart(tmp_path):
    text = ASYNC.read_text() + (FIX / "generated_sf211_cartpole_serial_sf_log.txt").read_text()
    t = load_text(tmp_path, text)
    runs = t.meta.extra["sample_factory"]["runs"]
    assert len(runs) == 2
    assert runs[0]["collected_env_steps"] == {"0": 30464} and runs[1]["collected_env_steps"] == {"0": 20480}
    names = {p.name for p in t.processes}
    assert {"run 1 · Learner 0", "run 2 · Learner 0", "run 1 · RolloutWorker_w1"} <= names
    assert "run 2 · RolloutWorker_w1" not in names


def test_python_warning_inside_a_tree_block(tmp_path):
    text = DOCS.read_text().replace(
        "  update: 5.0903\n",
        "/venv/lib/python3.11/site-packages/x.py:311: UserWarning: careful\n  warnings.warn(\n  update: 5.0903\n")
    assert "UserWarning" in text
    a = load_text(tmp_path, text)
    b = load_text(tmp_path, DOCS.read_text(), "plain.log")
    assert_same_timeline(without_log_lines(from_model(a)), without_log_lines(from_model(b)))


def test_bad_number_is_counted_and_kept(tmp_path):
    text = DOCS.read_text().replace("clip: 0.8172", "clip: 0.81x2")
    t = load_text(tmp_path, text)
    i = next(i for i in range(len(t.slices)) if t.strings[t.slices.name[i]] == "clip")
    assert t.slice_args(i)["value_text"] == "0.81x2" and t.slices.dur[i] == 0
    w = [w for w in t.diagnostics.warnings if w.code is WarningCode.DROPPED_EVENT]
    assert w and w[0].count == 1 and "not numbers" in w[0].message


def test_truncated_tree_at_end_of_file(tmp_path):
    text = DOCS.read_text()
    cut = text[: text.index("Runner profile tree view:") + len("Runner profile tree view:\nmain_lo")]
    t = load_text(tmp_path, cut)   # 'main_lo' without a value: not a tree line
    runner = next(i for i in range(len(t.slices)) if t.strings[t.slices.name[i]] == "Runner")
    assert t.slice_args(runner)["empty_tree"] is True
    assert any(w.code is WarningCode.TRUNCATED_INPUT for w in t.diagnostics.warnings)
    assert any("no 'Collected" in w.message for w in t.diagnostics.warnings)
    header_only = text[: text.index("Runner profile tree view:") + len("Runner profile tree view:\n")]
    t = load_text(tmp_path, header_only, "h.log")
    assert len(t.slices) == 55 - 2 + 1      # the docs log minus main_loop and Runner, plus an empty Runner
    runner = next(i for i in range(len(t.slices)) if t.strings[t.slices.name[i]] == "Runner")
    assert t.slice_args(runner)["empty_tree"] is True and t.slices.dur[runner] == 0
    assert any(w.code is WarningCode.TRUNCATED_INPUT and w.count == 1 for w in t.diagnostics.warnings)


def test_log_cut_inside_a_tree_line(tmp_path):
    text = DOCS.read_text()
    cut = text[: text.index("  split_output_tensors: 3.1037") + len("  split_output_tensors: 3.10")]
    t = load_text(tmp_path, cut)
    assert any(w.code is WarningCode.TRUNCATED_INPUT and "cut short" in w.message
               for w in t.diagnostics.warnings)
    i = [i for i in range(len(t.slices)) if t.strings[t.slices.name[i]] == "split_output_tensors"][-1]
    assert t.slice_args(i)["value_s"] == 3.10


def test_log_without_report_says_so(tmp_path):
    text = "".join(ln + "\n" for ln in ASYNC.read_text().splitlines()[:10])
    p = tmp_path / "start_only.txt"
    p.write_text(text)
    with pytest.raises(TraceconvError, match="no profile report in this Sample Factory log"):
        traceconv.load(p, "sample-factory")
    # SF's own start-up lines are enough to recognise the log
    assert formats.detect(open_source(p).head, p).name == "sample-factory"
    with pytest.raises(TraceconvError, match="no profile report in this Sample Factory log"):
        traceconv.load(p)
    # the CLI: one line, exit code 2, no traceback
    r = subprocess.run([sys.executable, "-m", "traceconv", "convert", str(p), "-o", str(tmp_path / "o.json"),
                        "--from", "sample-factory"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "no profile report" in r.stderr


def test_log_with_fps_lines_only_converts_counters_and_says_so(tmp_path):
    lines = ASYNC.read_text().splitlines()
    text = "\n".join(ln for ln in lines if "tree view" not in ln and "Collected" not in ln
                     and PREFIX.match(ln)) + "\n"
    t = load_text(tmp_path, text)
    assert len(t.slices) == 0 and len(t.counters) > 0
    assert any("no profile report" in w.message for w in t.diagnostics.warnings)


def test_unprefixed_report_has_synthetic_clock(tmp_path):
    text = "Learner 0 profile tree view:\ntrain: 2.0000\n  update: 1.5000\n"
    t = load_text(tmp_path, text)
    assert t.meta.clock is Clock.SYNTHETIC
    assert [(t.strings[t.slices.name[i]], t.slices.ts[i], t.slices.dur[i]) for i in range(len(t.slices))] == [
        ("Learner 0", 0, ns(2.0)), ("train", 0, ns(2.0)), ("update", 0, ns(1.5))]


def test_sniffer_claims_no_other_sample():
    shared = Path(__file__).parent.parent.parent / "shared" / "samples"
    others = [p for p in (Path(__file__).parent / "fixtures").rglob("*")
              if p.is_file() and "sample_factory" not in p.parts and "fuzz" not in p.parts]
    if shared.is_dir():
        others += [p for p in shared.rglob("*") if p.is_file() and "sample_factory" not in p.parts]
    from traceconv.readers.aggregate.samplefactory import sniff
    for p in others:
        assert not sniff(open_source(p).head), p


def test_a_log_of_many_timing_lines_lays_each_report_out_in_a_process_of_its_own(tmp_path):
    """300 timing lines of one component: 300 reports, each a process ("Env runner 0 #k") with its
    tree on a thread "timing", as trace_processor shows them.  (Each tree's thread name was made
    unique against a set of every thread of the trace, built again for each tree: a log of 20k
    such lines took 149 s; 16 s now, each process's names kept as they grow.)"""
    from perfetto_oracle import assert_loads, query
    line = ("[2019-11-27 22:06:{s:02d},056] Env runner 0: timing waiting: 0.8708, reset: 27.0515, "
            "env_step: 26.0700, work: 36.5773\n")
    log = tmp_path / "sf.log"
    log.write_text("".join(line.format(s=i % 60) for i in range(300)))
    out = tmp_path / "sf.pftrace"
    traceconv.convert(log, out, from_format="sample-factory")
    assert_loads(out)
    rows = query(out, "select p.name as process, t.name as thread, count(s.id) as n from thread t "
                      "join process p using (upid) join thread_track tt using (utid) "
                      "join slice s on s.track_id = tt.id group by t.utid order by t.utid")
    assert [(r["process"], r["thread"], r["n"]) for r in rows] == [
        (f"Env runner 0 #{k}", "timing", 5) for k in range(1, 301)]     # the report and its 4 timers


def test_a_tree_s_thread_takes_the_first_free_suffix_among_its_process_s_threads():
    """lay_out names a tree's thread after the first free "#k" among the threads of its process
    only (a thread "b" of another process does not count)."""
    from traceconv.model import Trace
    from traceconv.readers.aggregate.synth import AggNode, lay_out
    t = Trace("test")
    p, other = t.process(1, "p"), t.process(2, "q")
    for name in ("a", "a #2", "a #4"):
        t.thread(p, name, name)
    t.thread(other, "b", "b")
    lay_out(t, AggNode("root", 10), p, "a", 0)
    lay_out(t, AggNode("root", 10), p, "b", 0)
    assert [(th.process, th.name) for th in t.threads[4:]] == [(p.id, "a #3"), (p.id, "b")]
