"""The command line, run for real (``python -m traceconv``): results, and every bad input."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import traceconv
from traceconv import formats
from traceconv.errors import TraceconvError

from timeline import assert_same_timeline, read_chrome_json, read_perfetto

FIX = Path(__file__).parent / "fixtures" / "mlagents"
SOCCER = FIX / "python_SoccerTwos_run_logs_timers.json"


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceconv", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def test_convert_to_both_formats_and_they_agree(tmp_path):
    r1 = run("convert", SOCCER, "-o", tmp_path / "run.pftrace")
    r2 = run("convert", SOCCER, "-o", tmp_path / "run.trace.json")
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
    assert "wrote" in r1.stdout and "(perfetto)" in r1.stdout and "25 slices" in r1.stdout
    assert "(mlagents)" in r2.stdout and r1.stderr == ""
    assert_same_timeline(read_chrome_json(tmp_path / "run.trace.json"), read_perfetto(tmp_path / "run.pftrace"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pftrace", "run.trace.json"]


def test_to_overrides_the_name_and_from_overrides_detection(tmp_path):
    r = run("convert", SOCCER, "-o", tmp_path / "out.bin", "--to", "perfetto", "--from", "ml-agents", "-q")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    assert len(read_perfetto(tmp_path / "out.bin").slices) == 25


def test_formats_lists_the_registry():
    r = subprocess.run([sys.executable, "-m", "traceconv", "formats"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "COLUMNS": "250"})
    assert r.returncode == 0
    rows = {line.split("│")[1].strip(): line for line in r.stdout.splitlines() if line.startswith("│")}
    assert set(rows) == {f.name for f in formats.FORMATS}
    for f in formats.FORMATS:
        # (an aggregate format says so in brackets, which rich had read as markup and dropped)
        assert f.title in rows[f.name] and ("[synthesized timeline]" in rows[f.name]) == f.aggregate, rows[f.name]
    narrow = subprocess.run([sys.executable, "-m", "traceconv", "formats"], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert "…" not in narrow.stdout, narrow.stdout         # folded where narrow, never cut
    names = [line.split("│")[1].strip() for line in narrow.stdout.splitlines() if line.startswith("│")]
    assert [n for n in names if n] == [f.name for f in formats.FORMATS]


@pytest.mark.parametrize("value, want", [(None, "1"), ("", "1"), ("  ", "1"), ("3", "3")])
def test_the_command_runs_numpy_with_one_blas_thread_unless_told(value, want):
    """The command's process imports numpy with one OpenBLAS thread (a thread per core otherwise
    spins ~0.1 s of CPU beside its start), unless the user set a number; an empty variable is no
    setting (it kept the default from applying until 2026-11-28).  Checked in a process of its
    own: the setting, and on a machine of two cores or more, the threads numpy's import left."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if value is not None:
        env["OPENBLAS_NUM_THREADS"] = value
    code = ("import os; from traceconv_cli import one_blas_thread; one_blas_thread(); import numpy; "
            "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    setting, tasks = r.stdout.split()
    assert setting == want
    if want == "1" and Path("/proc/self/task").is_dir():
        assert tasks == "1"


def test_help_shows_examples():
    r = run("convert", "--help")
    assert r.returncode == 0 and "traceconv convert" in r.stdout and "--from" in r.stdout


def assert_one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("traceconv: error: ") and "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return p


BAD_TREE = {"name": "root", "total": 1.0, "count": 1, "self": 0.5,
            "children": {"TrainerController.advance": {"total": -2.0, "count": 3, "self": 0.0}}}


@pytest.mark.parametrize("name,content,extra,needles", [
    ("empty.json", "", [], ["empty.json", "the file is empty"]),
    ("blank.json", "  \n\n", [], ["the file is empty"]),
    ("text.json", "hello, not json", [], ["text.json", "cannot tell what format", "--from"]),
    ("text2.json", "hello, not json", ["--from", "mlagents"], ["not valid JSON", "line 1 column 1"]),
    ("broken.json", '{"name": "root", "total": 1.0, "count": 1, "self": 1.0, "children": {',
     [], ["broken.json", "not valid JSON"]),
    ("list.json", "[1, 2]", ["--from", "mlagents"], ["expected a JSON object", "found a list"]),
    ("shape.json", json.dumps({"total": "abc", "count": 1, "self": 0}), [],
     ["shape.json", "at total", "valid number", "'abc'"]),
    ("negative.json", json.dumps(BAD_TREE), [],
     ["at children.TrainerController.advance.total", "greater than or equal to 0", "-2.0"]),
    ("nan.json", '{"total": NaN, "count": 1, "self": 0}', [], ["not valid JSON"]),
    ("count.json", json.dumps({"total": 1.0, "count": "many", "self": 0}), [], ["at count", "valid integer"]),
])
def test_bad_input_one_line_exit_2_no_output(tmp_path, name, content, extra, needles):
    src = write(tmp_path, name, content)
    out = tmp_path / "out.pftrace"
    r = run("convert", src, "-o", out, *extra)
    assert_one_line_error(r, *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "no output file, no temporary file"


def test_unknown_format_names_say_did_you_mean(tmp_path):
    r = run("convert", SOCCER, "-o", tmp_path / "o.pftrace", "--from", "mlagent")
    assert_one_line_error(r, "unknown format 'mlagent'", "did you mean 'mlagents'?")
    r = run("convert", SOCCER, "-o", tmp_path / "o.x", "--to", "perfeto")
    assert_one_line_error(r, "did you mean 'perfetto'?")
    r = run("convert", SOCCER, "-o", tmp_path / "o.pftrace", "--from", "perfetto-archive")
    assert_one_line_error(r, "cannot read the 'perfetto-archive' format")
    r = run("convert", SOCCER, "-o", tmp_path / "o.json", "--from", "perfetto")
    assert_one_line_error(r, "not a Perfetto trace (no packet could be read)")
    assert list(tmp_path.iterdir()) == []


def test_output_paths_that_cannot_work(tmp_path):
    src = tmp_path / "timers.json"
    shutil.copy(SOCCER, src)
    before = src.read_bytes()
    r = run("convert", src, "-o", src, "--to", "chrome-json")
    assert_one_line_error(r, "refusing to overwrite an input file")
    assert src.read_bytes() == before
    r = run("convert", src, "-o", tmp_path / "out.txt")
    assert_one_line_error(r, "out.txt", "cannot tell the output format", "--to")
    r = run("convert", src, "-o", tmp_path / "missing" / "out.json")
    assert_one_line_error(r, "folder does not exist")
    r = run("convert", tmp_path / "nope.json", "-o", tmp_path / "out.json")
    assert_one_line_error(r, "nope.json", "no such file")
    r = run("convert", tmp_path, "-o", tmp_path / "out.json")
    assert_one_line_error(r, "is a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["timers.json"]


def test_strict_refuses_a_lossy_conversion(tmp_path):
    tree = {"name": "root", "total": 1.0, "count": 1, "self": 0.0,
            "children": {"a": {"total": 0.7, "count": 1, "self": 0.7}, "b": {"total": 0.7, "count": 1, "self": 0.7}}}
    src = write(tmp_path, "timers.json", json.dumps(tree))
    r = run("convert", src, "-o", tmp_path / "o.pftrace")
    assert r.returncode == 0
    assert "warning: children-exceed-parent" in r.stderr and "warning: overlap-lanes" in r.stderr
    r = run("convert", src, "-o", tmp_path / "o2.pftrace", "--strict")
    assert_one_line_error(r, "--strict", "children-exceed-parent")
    assert not (tmp_path / "o2.pftrace").exists()


def test_existing_output_is_replaced_whole(tmp_path):
    out = tmp_path / "o.json"
    out.write_text("old content")
    assert run("convert", SOCCER, "-o", out).returncode == 0
    assert len(read_chrome_json(out).slices) == 25


def test_a_perfetto_trace_as_input_says_what_it_is(tmp_path):
    """traceconv converts into Perfetto's format, not out of it (the name is shared with
    Perfetto's own traceconv, which does): a Perfetto trace traceconv did not write is refused
    with one line, by its content, not its name, also when named with --from perfetto."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    T = pb.TracePacket
    event = T(timestamp=5, trusted_packet_sequence_id=1,
              track_event=pb.TrackEvent(type=pb.TrackEvent.TYPE_INSTANT, name="e", track_uuid=1))
    for name, packets in (("system.bin", [T(trace_config=pb.TraceConfig(duration_ms=1)), event]),
                          ("sdk.bin", [T(track_descriptor=pb.TrackDescriptor(uuid=1, name="t")), event])):
        foreign = tmp_path / name
        foreign.write_bytes(pb.Trace(packet=packets).SerializeToString())
        for extra in ([], ["--from", "perfetto"]):
            r = run("convert", foreign, "-o", tmp_path / "x.json", *extra)
            assert_one_line_error(r, "already a Perfetto protobuf trace, not one traceconv wrote", "traceconv open")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sdk.bin", "system.bin"]
    assert "INPUT" in run("convert").stderr


def test_a_pftrace_traceconv_wrote_reads_back(tmp_path):
    """traceconv's own .pftrace (a recording, a conversion) is an input like the others, told by
    its content: converted back to JSON it is the timeline converting the source gave; its summary
    is the source's timeline's."""
    out = tmp_path / "run.pftrace"
    assert run("convert", SOCCER, "-o", out).returncode == 0
    renamed = tmp_path / "trace.bin"
    renamed.write_bytes(out.read_bytes())
    r = run("convert", renamed, "-o", tmp_path / "back.json")
    assert r.returncode == 0 and "(perfetto): 25 slices" in r.stdout, r.stderr
    assert run("convert", SOCCER, "-o", tmp_path / "direct.json").returncode == 0
    assert_same_timeline(read_chrome_json(tmp_path / "back.json"), read_chrome_json(tmp_path / "direct.json"))
    a = json.loads(run("summary", renamed, "--format", "json").stdout)
    b = json.loads(run("summary", tmp_path / "direct.json", "--format", "json").stdout)
    assert a["rows"] == b["rows"] and len(a["rows"]) > 5


def test_the_counts_it_prints_are_singular_for_one(tmp_path):
    """One slice, one instant, one flow and one counter sample were "1 slices, 1 instants, ...", and a
    merge of one file of one slice "1 slices"."""
    events = [{"ph": "X", "name": "a", "ts": 0, "dur": 5, "pid": 1, "tid": 1},
              {"ph": "X", "name": "b", "ts": 10, "dur": 5, "pid": 1, "tid": 1},
              {"ph": "i", "name": "mark", "ts": 2, "s": "t", "pid": 1, "tid": 1},
              {"ph": "C", "name": "mem", "ts": 3, "pid": 1, "args": {"bytes": 7}},
              {"ph": "s", "name": "f", "cat": "c", "id": 1, "ts": 1, "pid": 1, "tid": 1},
              {"ph": "f", "name": "f", "cat": "c", "id": 1, "ts": 11, "pid": 1, "tid": 1, "bp": "e"}]
    src = tmp_path / "one.json"
    src.write_text(json.dumps({"traceEvents": events}))
    r = run("convert", src, "-o", tmp_path / "one.pftrace")
    assert r.returncode == 0 and "(chrome-json): 2 slices, 1 instant, 1 counter sample, 1 flow\n" in r.stdout, \
        r.stdout + r.stderr
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank0.json").write_text(json.dumps({"traceEvents": events[:1]}))
    m = run("merge", tmp_path / "ranks", "-o", tmp_path / "m.pftrace")
    assert m.returncode == 0 and "(perfetto): 1 slice from 1 file in " in " ".join(m.stdout.split()), m.stdout
    v = run("validate", tmp_path / "ranks" / "rank0.json")
    assert v.returncode == 0 and "rank0.json (chrome-json, 1 event): clean" in " ".join(v.stdout.split()), v.stdout
    # validate's verdict too: "1 problem", not "1 problem(s)"
    bad = tmp_path / "unmatched.json"
    bad.write_text(json.dumps({"traceEvents": [{"ph": "B", "name": "never ends", "ts": 0, "pid": 1, "tid": 1},
                                               events[0]]}))
    v = run("validate", bad)
    assert v.returncode == 1 and "unmatched.json (chrome-json, 2 events): 1 problem ┏" in " ".join(v.stdout.split()), \
        v.stdout


def test_a_table_shown_unfolded_keeps_its_title_and_caption():
    """Piped, show() draws a table's title and caption as lines of their own, the table's own taken
    off while it is drawn: they are put back, so that a table shown again still has them."""
    import contextlib
    import io
    from rich.table import Table
    from traceconv_cli.app import show
    t = Table(title="the title", caption="the caption")
    t.add_column("x")
    t.add_row("1")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        show(t)
        show(t)
    lines = out.getvalue().splitlines()
    assert (t.title, t.caption) == ("the title", "the caption")
    assert lines.count("the title") == 2 and lines.count("the caption") == 2, lines
    assert lines[0] == "the title" and lines[-1] == "the caption", lines


def test_merge_to_stdout_is_perfetto_and_its_table_goes_to_stderr(tmp_path):
    ranks = Path(__file__).parent / "fixtures" / "multirank" / "gloo_2ranks"
    r = subprocess.run([sys.executable, "-m", "traceconv", "merge", str(ranks), "-o", "-"], capture_output=True,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert list(tmp_path.iterdir()) == [], "no file named '-'"
    assert b"wrote <stdout> (perfetto): 792 slices" in r.stderr
    (tmp_path / "run.pftrace").write_bytes(r.stdout)
    assert len(read_perfetto(tmp_path / "run.pftrace").slices) == 792


def test_the_merge_archive_is_a_format_of_the_registry_that_only_merge_writes(tmp_path):
    """``perfetto-archive`` (``.tar``) is in the registry, flagged as an archive: ``traceconv merge``
    writes it, by name or by ``--to`` (or an alias); a conversion refuses it in one line and leaves
    no file."""
    f = formats.for_output("run.TAR", merge=True)
    assert (f.name, f.archive) == ("perfetto-archive", True)
    from traceconv.writers.archive import write_archive
    assert f.load("writer") is write_archive
    assert formats.get("tar", role="writer", merge=True) is f
    assert "perfetto-archive" in formats.writer_names(merge=True)
    assert "perfetto-archive" not in formats.writer_names()
    r = run("convert", SOCCER, "-o", tmp_path / "run.tar")
    assert_one_line_error(r, "run.tar", "perfetto-archive", "only a merge writes it")
    r = run("convert", SOCCER, "-o", tmp_path / "run.bin", "--to", "perfetto-archive")
    assert_one_line_error(r, "perfetto-archive", "only a merge writes it", "chrome-json, perfetto")
    assert list(tmp_path.iterdir()) == []
    ranks = Path(__file__).parent / "fixtures" / "multirank" / "gloo_2ranks"
    r = run("merge", ranks, "-o", tmp_path / "run.bin", "--to", "archive", "-q")
    assert r.returncode == 0, r.stderr
    import tarfile
    with tarfile.open(tmp_path / "run.bin") as tar:
        names = tar.getnames()
    assert "perfetto_manifest.json" in names and sum(n.endswith(".pftrace") for n in names) == 2
    assert "perfetto-archive" in run("formats").stdout


def test_exit_codes_of_user_errors_are_2(tmp_path):
    r = run("convert", SOCCER, "-o", tmp_path / "o.pftrace", "--from", "nope")
    assert r.returncode == 2
    r = run("convert", "--no-such-option")
    assert r.returncode == 2


def test_a_closed_stdout_is_exit_141_not_1():
    """Typer turns an EPIPE into exit 1, the code of `validate` finding problems; traceconv says 141."""
    p = subprocess.Popen([sys.executable, "-m", "traceconv", "formats"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.close()                       # before it prints anything (it takes a while to start)
    err = p.stderr.read()
    assert p.wait(timeout=60) == 141 and err == b""


def test_library_errors_name_parameters_and_the_cli_names_its_flags(tmp_path):
    """The library speaks of its own parameters (``from_format``), the command line of its flags."""
    from traceconv.formats import detect, for_output
    with pytest.raises(TraceconvError) as e:
        for_output(tmp_path / "out.txt")
    assert "use to_format (" in str(e.value) and "--" not in str(e.value)
    with pytest.raises(TraceconvError) as e:
        detect(b"hello, world", tmp_path / "x.bin")
    assert "name it with from_format (" in str(e.value) and "--" not in str(e.value)
    src = tmp_path / "x.bin"
    src.write_bytes(b"hello, world")
    r = run("convert", src, "-o", tmp_path / "o.pftrace")
    assert r.returncode == 2 and "name it with --from (one of: mlagents" in r.stderr, r.stderr


def test_the_library_names_no_flag_and_every_parameter_it_names_has_one():
    """Errors, warnings, a merge's counts and a summary's notes name parameters as ``{opt:name}``
    (errors.spell); a flag written into the library's text would reach API users as the CLI's word.
    Every string of the package but docstrings: the flags left are other programs' (MegEngine's
    ``load_and_run --profile``, ML-Agents' ``--run-id`` read from its command line, trace_processor's
    ``--httpd`` for a trace too big for a browser tab) and the recorder's own command line."""
    import ast
    import re
    from traceconv_cli.app import FLAGS
    named, flags = set(), []
    for path in sorted(Path(traceconv.__file__).parent.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                named |= set(re.findall(r"\{opt:(\w+)\}", node.value))
                flags += [(path.name, f) for f in re.findall(r"(?<![\w-])--[a-z][a-z-]*", node.value)]
    assert {"rank_map", "window", "drop_cat", "min_dur", "include_profiler_spans", "align_method"} <= named
    assert named <= set(FLAGS), sorted(named - set(FLAGS))
    assert sorted(flags) == [("__main__.py", "--output"), ("formats.py", "--profile"), ("mlagents.py", "--run"),
                             ("validate.py", "--httpd"), ("viewers.py", "--httpd")]
    from traceconv.errors import ConversionWarning, WarningCode, spell
    w = ConversionWarning(WarningCode.NOTE, "left out by the filters ({opt:drop_cat})", 3)
    assert str(w) == "note: left out by the filters (drop_cat) (3)"
    assert w.one_line(FLAGS) == "note: left out by the filters (--drop-cat) (3)"
    assert spell("{opt:nope} and {opt:window}", {"window": "--window"}) == "nope and --window"


def test_help_imports_no_numpy_and_names_every_grouping():
    """``traceconv --help`` loads neither numpy nor pydantic nor the `open` verb's HTTP server (its
    start-up stays short), and the summary's choices it prints are the library's."""
    code = ("import sys, traceconv_cli.app as a\n"
            "print(sorted(m for m in ('numpy', 'pydantic', 'traceconv.api', 'traceconv._core', 'http.server') "
            "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr)
    from traceconv import hotspots
    from traceconv_cli import app
    assert app.GROUPINGS == hotspots.GROUPINGS and app.SORTS == hotspots.SORTS
    import os
    r = subprocess.run([sys.executable, "-m", "traceconv", "summary", "--help"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "COLUMNS": "200"})
    text = " ".join(r.stdout.replace("│", " ").split())
    assert r.returncode == 0, r.stderr
    assert "Group by: " + ", ".join(hotspots.GROUPINGS) + "." in text
    assert "Sort by: " + ", ".join(hotspots.SORTS) + "." in text


def test_telling_formats_apart_imports_no_pydantic(tmp_path):
    """Sniffing imports every reader module, so none may import pydantic (~0.15 s of a cold start,
    in a process that may need no schema) nor Perfetto's protobuf module (asked first of every
    input, the perfetto format's claim imported it: +0.2 s and +9 MB converting the bundled
    example; and for a JSON text starting with a newline, which looks like a packet's key):
    telling each fixture's format apart and converting a plain Chrome JSON trace import neither.
    Reading a Kineto file does not either (its header is checked by a msgspec Struct: pydantic's
    import held the GIL ~0.1 s beside the scan); reading an ML-Agents file then imports it.  And a
    Kineto conversion with counters imports no ``numpy.ma`` (``np.unique`` and ``np.isin`` import it
    on first use, ~9 ms: the layout's counter-track step counts the tracks used instead)."""
    fixtures = Path(__file__).parent / "fixtures"
    files = [fixtures / d / n for d, n in [
        ("mlagents", "python_SoccerTwos_run_logs_timers.json"), ("sample_factory", "benchmarking.txt"),
        ("mxnet", "generated_mxnet191_dumps_json.json"), ("megengine", "generated_mge1130_static_profile.json"),
        ("megengine_timeline", "generated_mge1130_dynamic.chrome_timeline.json.gz"),
        ("mxnet_trace", "generated_mxnet191_profile_all.json"),
        ("kineto", "generated_torch213_cpu_single_worker0.pt.trace.json.gz"),
        ("chrome_json", "perfetto_flow_events_json_v1.json")]]
    newline_first = tmp_path / "newline_first.pt.trace.json"   # HTA's samples start "\n{"
    newline_first.write_bytes(b"\n" + gzip.decompress(files[6].read_bytes()))
    files.insert(-1, newline_first)
    code = ("import sys, traceconv\n"
            "from traceconv import formats, io\n"
            "found = [formats.detect(io.open_source(p).head, p).name for p in sys.argv[1:]]\n"
            "print(found, 'pydantic' in sys.modules, 'perfetto.protos.perfetto.trace.perfetto_trace_pb2' in sys.modules)\n"
            f"traceconv.convert(sys.argv[-1], {str(tmp_path / 'o.pftrace')!r})\n"
            "print('pydantic' in sys.modules)\n"
            f"traceconv.convert(sys.argv[7], {str(tmp_path / 'k.pftrace')!r})\n"      # (174 counter samples)
            "print('pydantic' in sys.modules, 'numpy.ma' in sys.modules)\n"
            "traceconv.load(sys.argv[-2])\n"
            "print('pydantic' in sys.modules)\n"
            "traceconv.load(sys.argv[1])\n"
            "print('pydantic' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code, *map(str, files)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "['mlagents', 'sample-factory', 'mxnet-stats', 'megengine-static', 'megengine', 'mxnet', 'kineto', "
        "'kineto', 'chrome-json'] False False", "False", "False False", "False", "True"]


def test_a_conversion_imports_no_rich_and_prints_names_as_they_are(tmp_path):
    """convert prints lines, not tables: it imports no rich (0.04 s of a first conversion), and a
    file's name is printed as it is, where rich's print made ``:warning:`` an emoji and a tab
    spaces; summary's table still imports it."""
    name = write(tmp_path, "a:warning:\tb.json", SOCCER.read_bytes())
    code = ("import sys, runpy\n"
            "sys.argv = ['traceconv', *sys.argv[1:]]\n"
            "try:\n"
            "    runpy.run_module('traceconv', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    print('exit', e.code, 'rich' in sys.modules, file=sys.stderr)\n")
    args = [sys.executable, "-c", code]
    r = subprocess.run([*args, "convert", str(name), "-o", str(tmp_path / "o.pftrace")], capture_output=True,
                       text=True, timeout=120)
    assert r.stdout == f"wrote {tmp_path / 'o.pftrace'} (perfetto) from {name} (mlagents): 25 slices\n"
    assert r.stderr == "exit 0 False\n"
    r = subprocess.run([*args, "convert", str(tmp_path / "none:warning:.json"), "-o", str(tmp_path / "n.pftrace")],
                       capture_output=True, text=True, timeout=120)
    assert r.stdout == "" and r.stderr.splitlines() == [
        f"traceconv: error: {tmp_path / 'none:warning:.json'}: no such file", "exit 2 False"]
    r = subprocess.run([*args, "summary", str(name), "--top", "1"], capture_output=True, text=True, timeout=120)
    assert "env_step" in r.stdout and r.stderr == "exit 0 True\n"


def test_names_with_a_newline_stay_on_the_error_line(tmp_path):
    """A key holding a newline (an MXNet stats fuzz case, 2026-11-25) and a file named with one: the
    error names them with the newline escaped, on one line."""
    fixture = Path(__file__).parent / "fixtures" / "fuzz" / "mxnet_stats_key_with_newline.json"
    r = run("convert", fixture, "-o", tmp_path / "o.pftrace")
    assert_one_line_error(r, "at Time.MXNET_C_API.MXNDArrayFree\\nIú.Count", "valid integer")
    odd = write(tmp_path, "two\nlines.json", fixture.read_bytes())
    r = run("convert", odd, "-o", tmp_path / "o.pftrace")
    assert_one_line_error(r, "two\\nlines.json: at Time")


def test_a_warning_naming_a_thread_with_a_newline_stays_one_line(tmp_path):
    doc = {"traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "two\nlines"}},
        {"ph": "X", "name": "a", "ts": 0, "dur": 2, "pid": 1, "tid": 2},
        {"ph": "X", "name": "b", "ts": 1, "dur": 2, "pid": 1, "tid": 2}]}
    src = write(tmp_path, "t.json", json.dumps(doc))
    r = run("convert", src, "-o", tmp_path / "o.pftrace")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines and all(line.startswith("warning: ") for line in lines), r.stderr
    assert any("overlap-lanes" in line and "two\\nlines" in line for line in lines), r.stderr


MARKUP = ["[/]", "foo[bold]bar[/bold]", "[memory]", "k<float[4]>", "[red]", "x\\[y]"]


def test_names_and_file_names_that_look_like_rich_markup_print_as_they_are(tmp_path):
    """The tables (summary, validate, merge) and the progress bars go through rich, which reads
    ``[...]`` as markup: a slice named ``[/]`` crashed summary (2026-11-27), ``[bold]`` and
    ``[memory]`` (a name Kineto uses) vanished from the cells, and a file ``rank0[b].json`` showed as
    ``rank0.json`` in merge's table.  Every such name and path now prints as it is."""
    COLUMNS = {**os.environ, "COLUMNS": "250"}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "traceconv", *map(str, args)], capture_output=True,
                              text=True, timeout=120, env=COLUMNS, cwd=tmp_path)

    folder = Path("run[b]")
    (tmp_path / folder).mkdir()
    for r in range(2):
        doc = {"traceEvents": [{"ph": "X", "name": n, "ts": 10 * i, "dur": 5 + i, "pid": r, "tid": 1}
                               for i, n in enumerate(MARKUP)], "distributedInfo": {"rank": r}}
        write(tmp_path / folder, f"rank{r}[red].json", json.dumps(doc))
    one = folder / "rank0[red].json"
    s = cli("summary", one, "--top", "0")
    assert s.returncode == 0 and "Traceback" not in s.stderr, s.stderr
    cells = [line.split("│")[1].strip() for line in s.stdout.splitlines() if line.startswith("│")]
    assert sorted(cells) == sorted(MARKUP)
    assert f"{one} — by name" in s.stdout
    v = cli("validate", one)
    assert v.returncode == 0 and f"{one} (chrome-json, 6 events)" in v.stdout, v.stdout + v.stderr
    m = cli("merge", folder, "-o", "out[red].pftrace", "--align", "none")
    assert m.returncode == 0, m.stderr
    assert f"wrote out[red].pftrace (perfetto): 12 slices from 2 files in {folder}/" in m.stdout
    assert "rank0[red].json (file name)" in m.stdout and "rank1[red].json (file name)" in m.stdout


def test_each_help_paragraph_is_one_line_that_rich_wraps():
    """rich markup mode keeps a help text's line breaks, so the docstrings' wrapped lines broke
    summary's and validate's sentences short at 80 columns; each paragraph is now one line (rich
    wraps it to the terminal), and a paragraph of example commands a line per command."""
    import typer.main

    from traceconv_cli.app import app
    group = typer.main.get_command(app)
    assert set(group.commands) >= {"convert", "merge", "summary", "validate", "open", "formats"}
    for name, cmd in group.commands.items():
        for p in cmd.help.split("\n\n"):
            assert p == p.strip() and "  " not in p, (name, p)
            assert "\n" not in p or all(line.startswith("traceconv ") for line in p.splitlines()), (name, p)
    summary = group.commands["summary"].help
    assert ("By name, total sums the calls' durations; by category, thread, process or rank it is the time "
            "the group's slices cover, counted once. Each call") in summary
    assert summary.endswith("\n\ntraceconv summary rank0.pt.trace.json.gz rank1.pt.trace.json.gz --by name --top 10")


HELP_RUN = """
import sys
if sys.argv[1] == "ordinary":
    import rich.markdown, rich.traceback        # already imported: the placeholders stand aside
from traceconv_cli.app import main
sys.argv = ["traceconv", *sys.argv[2:]]
try:
    main()
finally:
    print(sorted(m for m in ("rich.markdown", "markdown_it", "pygments", "rich.traceback") if m in sys.modules),
          file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["convert", "--help"], ["summary", "--help"], ["convert", "--bogus"],
                                  []])
def test_help_and_usage_errors_read_the_same_without_the_markdown_parser(args):
    """typer's help module imports rich's Markdown (markdown_it, pygments) and Traceback, which
    traceconv never uses: ~80 ms of ``traceconv --help``.  The command defers them
    (``traceconv_cli.lighthelp``); help and usage errors print the same text as with the real
    modules, and neither is imported."""
    env = {**os.environ, "COLUMNS": "100"}
    light, ordinary = (subprocess.run([sys.executable, "-c", HELP_RUN, how, *args], capture_output=True,
                                      text=True, timeout=120, env=env) for how in ("light", "ordinary"))
    assert light.returncode == ordinary.returncode == (2 if args[-1:] != ["--help"] else 0)
    assert light.stdout == ordinary.stdout and "traceconv" in light.stdout + light.stderr
    *text, loaded = light.stderr.rstrip("\n").split("\n")
    *same, _ = ordinary.stderr.rstrip("\n").split("\n")
    assert text == same and loaded == "[]", light.stderr


def test_the_deferred_markdown_and_traceback_are_the_real_ones_when_used():
    """typer's markdown mode and its exception hook still work: a placeholder imports the real
    class when it is called or asked for an attribute, and ``isinstance`` asks the real class."""
    code = """
import sys
from traceconv_cli import lighthelp
lighthelp.install()
import typer.rich_utils as ru
assert "rich.markdown" not in sys.modules and "markdown_it" not in sys.modules
assert sys.modules["typer.rich_utils"].__spec__.loader.get_source("typer.rich_utils")
md = ru._make_rich_text(text="*a* **b**", markup_mode="markdown")
import rich.markdown, rich.traceback
assert type(md) is rich.markdown.Markdown and isinstance(md, ru.Markdown)
try:
    1 / 0
except ZeroDivisionError as e:
    tb = ru.Traceback.from_exception(type(e), e, e.__traceback__)
assert type(tb) is rich.traceback.Traceback
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


def test_an_output_that_cannot_be_written_is_refused_before_any_input_is_read(tmp_path):
    """A mistyped output folder (or a folder, or an input, as the output) is the error, not what
    reading the inputs would have found: convert and merge check the output first (a merge of a
    thousand ranks from object storage had read every one of them before it said so)."""
    bad = write(tmp_path, "rank0.pt.trace.json", "this is not a trace")
    write(tmp_path, "rank1.pt.trace.json", "nor is this")
    missing = tmp_path / "no such folder" / "run.pftrace"
    assert_one_line_error(run("convert", bad, "-o", missing), "no such folder/run.pftrace",
                          "the output's folder does not exist")
    assert_one_line_error(run("merge", tmp_path / "rank0.pt.trace.json", tmp_path / "rank1.pt.trace.json",
                              "-o", missing), "the output's folder does not exist")
    assert_one_line_error(run("merge", bad, tmp_path / "rank1.pt.trace.json", "-o", bad, "--to", "perfetto"),
                          "refusing to overwrite an input file")
    folder = tmp_path / "out.pftrace"
    folder.mkdir()
    assert_one_line_error(run("convert", bad, "-o", folder), "the output is a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.pftrace", "rank0.pt.trace.json", "rank1.pt.trace.json"]
    # (what the inputs hold is still the error once the output can be written)
    assert_one_line_error(run("convert", bad, "-o", tmp_path / "ok.pftrace"), "rank0.pt.trace.json")


def test_a_url_output_whose_backend_is_missing_is_refused_before_any_input_is_read(tmp_path):
    """``-o gs://...`` without gcsfs is the error, not the inputs (it was said once every rank was
    read and converted)."""
    import importlib.util
    missing = [(proto, pkg) for proto, pkg in (("gs", "gcsfs"), ("az", "adlfs"))
               if importlib.util.find_spec(pkg) is None]
    if not missing:
        pytest.skip("gcsfs and adlfs are both installed: no protocol without its backend to try")
    proto, pkg = missing[0]
    bad = write(tmp_path, "rank0.pt.trace.json", "this is not a trace")
    write(tmp_path, "rank1.pt.trace.json", "nor is this")
    for argv in (["convert", bad], ["merge", tmp_path]):
        assert_one_line_error(run(*argv, "-o", f"{proto}://bucket/run.pftrace"), f"{proto}:// needs the {pkg} package")


def test_a_trace_too_big_for_a_browser_tab_gets_a_note(tmp_path, monkeypatch):
    """convert and merge say when the .pftrace they wrote would pass what a browser tab holds once
    loaded (here the tab made 1 kB), with Perfetto's remedy; a JSON output or a small one, nothing."""
    from typer.testing import CliRunner
    import traceconv.viewers as v
    from traceconv_cli.app import app
    ranks = Path(__file__).parent / "fixtures" / "multirank" / "gloo_2ranks"
    cli = CliRunner()
    small = cli.invoke(app, ["convert", str(SOCCER), "-o", str(tmp_path / "small.pftrace")])
    assert small.exit_code == 0 and "note:" not in small.stderr, small.stderr
    monkeypatch.setattr(v, "PERFETTO_TAB_BYTES", 1000)
    for argv, out in [(["convert", str(SOCCER)], tmp_path / "t.pftrace"),
                      (["merge", str(ranks)], tmp_path / "run.pftrace")]:
        r = cli.invoke(app, [*argv, "-o", str(out)])
        assert r.exit_code == 0, r.output
        size = out.stat().st_size
        assert f"note: {out} takes about {size * v.PFTRACE_LOADED_RATIO / 2**30:,.1f} GB once loaded" in r.stderr
        assert f"run `trace_processor --httpd {out}`" in r.stderr and v.LARGE_TRACES in r.stderr
    r = cli.invoke(app, ["convert", str(SOCCER), "-o", str(tmp_path / "t.json")])
    assert r.exit_code == 0 and "note:" not in r.stderr


def test_the_merge_table_names_each_file_below_the_folder_they_share(tmp_path):
    """A rank's file is named in full below the folder the files share (said once, in the title):
    its tail is what tells two ranks apart, and the table cut it ('gloo_2ranks/rank0.pt.trac…')."""
    from traceconv_cli.app import common_folder
    ranks = Path(__file__).parent / "fixtures" / "multirank" / "gloo_2ranks"
    for columns in ("100", "60"):
        r = subprocess.run([sys.executable, "-m", "traceconv", "merge", str(ranks), "-o", str(tmp_path / "run.pftrace")],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": columns})
        assert r.returncode == 0, r.stderr
        assert f"792 slices from 2 files in {ranks}/" in " ".join(r.stdout.split())
        assert "…" not in r.stdout, r.stdout                     # folded where narrow, never cut
    rows = [line for line in r.stdout.splitlines() if line.startswith("│")]
    cells = "".join(line.split("│")[2].strip() for line in rows)
    assert cells.startswith("rank0.pt.trace.json.gz(distributedInfo.rank)rank1.pt.trace.json.gz"), r.stdout
    assert common_folder(["s3://b/run/r0.json", "s3://b/run/r1.json"]) == ("s3://b/run/", ["r0.json", "r1.json"])
    assert common_folder(["runs/a/r0.json", "runs/b/r1.json"]) == ("runs/", ["a/r0.json", "b/r1.json"])
    for apart in (["a.json", "b.json"], ["/x/a.json", "/y/b.json"], ["s3://b/r0", "s3://c/r1"], []):
        assert common_folder(apart) == ("", apart)


def test_the_merge_table_of_a_big_run_shows_the_first_ranks_and_the_least_certain(tmp_path):
    """Past 16 ranks the table shows the first 8 and the 8 least certain (a fleet's thousand ranks
    were a thousand rows), a gap marked '…', and the caption counts the ranks and the methods;
    the output's metadata keeps every rank."""
    from traceconv_cli.app import merge_rows
    from traceconv.merging.align import Alignment
    al = [Alignment(r, "collectives", 0, None if r == 40 else r * 1000, "") for r in range(50)]
    assert [a and a.rank for a in merge_rows(al)] == [*range(8), None, 40, None, *range(43, 50)]
    assert [a and a.rank for a in merge_rows(al[:30])] == [*range(8), None, *range(22, 30)]
    assert [a and a.rank for a in merge_rows(al[:40])] == [*range(8), None, *range(32, 40)]
    assert merge_rows(al[:16][::-1]) == al[:16]
    al[9] = Alignment(9, "collectives", 0, 10**9, "")                 # the widest: shown, gaps around it
    assert [a and a.rank for a in merge_rows(al[:20])] == [*range(8), None, 9, None, *range(13, 20)]
    narrowing = [Alignment(r, "collectives", 0, (50 - r) * 1000, "") for r in range(20)]
    assert [a and a.rank for a in merge_rows(narrowing)] == [*range(16), None]      # the rest: one gap at the end
    for r in range(20):
        events = [{"ph": "X", "name": f"step{r}", "ts": 1_700_000_000_000_000 + i, "dur": 1, "pid": 1, "tid": 1}
                  for i in range(3)]
        (tmp_path / f"rank{r}.json").write_text(json.dumps({"traceEvents": events}))
    r = subprocess.run([sys.executable, "-m", "traceconv", "merge", *sorted(map(str, tmp_path.glob("rank*.json"))),
                        "-o", str(tmp_path / "run.pftrace")], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "160"})
    assert r.returncode == 0, r.stderr
    ranks = [line.split("│")[1].strip() for line in r.stdout.splitlines() if line.startswith("│")]
    # (every rank but the reference is unbounded here: the least certain are the next in order)
    assert [x for x in ranks if x] == [*map(str, range(16)), "…"], r.stdout
    assert "20 ranks, 16 shown: the first 8 and the least certain; aligned by " in " ".join(r.stdout.split())
    merged = read_perfetto(tmp_path / "run.pftrace")
    assert len(merged.slices) == 60 and [a["rank"] for a in merged.metadata["merge"]["alignment"]] == list(range(20))


PIPED_UNSET = ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")     # (what makes rich draw as on a terminal)


def test_summary_tables_are_whole_lines_when_piped_and_keep_names_readable_at_80_columns(tmp_path):
    """Written to a file or a pipe (COLUMNS unset), rich drew every table 80 columns wide: a CUDA
    kernel's name folded over six lines and `grep` found a sixth of its row.  Such output is now at
    the table's natural width.  On an 80-column terminal a two-rank summary left names 11
    characters; it now leaves out avg (total / count) and says so, names 22 wide (and self %,
    then total, where that is not enough: MegEngine's FLOPS and bandwidth columns)."""
    kernel = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_execute_kernel"
    for r in range(2):
        events = [{"ph": "X", "name": n, "ts": 100 * i, "dur": 40 + 10 * r + i, "pid": r, "tid": 1}
                  for i, n in enumerate([kernel, "aten::mm", kernel, "Runtime Triggered Module Loading"])]
        (tmp_path / f"rank{r}.json").write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": r}}))
    env = {k: v for k, v in os.environ.items() if k not in PIPED_UNSET}

    def summary(columns: str | None) -> list[str]:
        r = subprocess.run([sys.executable, "-m", "traceconv", "summary", tmp_path], capture_output=True, text=True,
                           timeout=120, env=env if columns is None else {**env, "COLUMNS": columns})
        assert r.returncode == 0, r.stderr
        return r.stdout.splitlines()

    piped = summary(None)
    header = next(line for line in piped if "count" in line)
    assert [c.strip() for c in header.strip("┃").split("┃")] == ["name", "count", "total", "self", "avg", "self %",
                                                                 "slowest rank"]
    row = next(line for line in piped if kernel in line)          # the name whole, on its row's line
    # (40 + 42 µs on rank 0, 50 + 52 on rank 1, of 372 µs in all)
    assert [c.strip() for c in row.strip("│").split("│")][:6] == [kernel, "4", "184.0 µs", "184.0 µs", "46.0 µs",
                                                                  "49.5"]
    assert "ranks, slowest first (2 ranks; busy: self time over all rows)" in piped   # one line
    assert max(map(len, piped)) > 120
    # the titles where the lines start, not centred over a table this wide
    assert [line for line in piped if " — by " in line] == [f"{tmp_path} — by name"]
    # nor folded over a table narrower than they are
    ml = subprocess.run([sys.executable, "-m", "traceconv", "summary", Path(__file__).parent.parent / "examples" /
                         "mlagents_timers.json", "--top", "1"], capture_output=True, text=True, timeout=120, env=env)
    assert ml.stdout.splitlines()[0].endswith(" — by name (synthesized timeline: file totals)"), ml.stdout
    assert len(ml.stdout.splitlines()[0]) > len(ml.stdout.splitlines()[1]), ml.stdout

    narrow = summary("80")
    assert max(map(len, narrow)) <= 80
    header = next(line for line in narrow if "count" in line)
    assert "avg" not in header and "self %" in header
    assert any("avg: left out at this width" in line for line in narrow)
    first = narrow[:next(i for i, line in enumerate(narrow) if line.startswith("└"))]
    names = [line.split("│")[1].strip() for line in first if line.startswith("│")]
    assert len(names[0]) >= 20, names                                 # (11 with avg)
    assert "".join(names[:5]) == kernel and names[-1] == "aten::mm"   # folded, never cut

    wide = summary("200")
    assert "avg" in next(line for line in wide if "count" in line)
    assert not any("left out at this width" in line for line in wide)

    mge = Path(__file__).parent / "fixtures" / "megengine" / "generated_mge1130_static_profile.json"
    r = subprocess.run([sys.executable, "-m", "traceconv", "summary", mge, "--top", "3"], capture_output=True,
                       text=True, timeout=120, env={**env, "COLUMNS": "80"})
    header = next(line for line in r.stdout.splitlines() if "count" in line)
    assert [c.strip() for c in header.strip("┃").split("┃")] == ["name", "count", "self", "FLOPS", "bandwidth"]
    assert "avg, self %, total: left out at this width (--format csv has them)" in r.stdout
    assert "│ backward.ConvolutionBackwar │     1 │  1.90 ms │ 77.65 MFLOPS │  20.64 MiB/s │" in r.stdout


def test_validate_table_piped_folds_its_sentences_at_160_columns_and_keeps_each_example_whole():
    """A table of sentences drawn at its natural width was 300 columns of one line each; piped,
    validate's, merge's and formats' tables fold at 160 columns, an example still on one line."""
    fixture = Path(__file__).parent / "fixtures" / "kineto" / "hta_critical_path_simple_add_trace.json.gz"
    env = {k: v for k, v in os.environ.items() if k not in PIPED_UNSET}
    r = subprocess.run([sys.executable, "-m", "traceconv", "validate", fixture], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert 120 < max(map(len, lines)) <= 160
    examples = [line.split("│")[4].strip() for line in lines if "e.g." in line]
    assert "e.g. tid -1: 'Context Sync' (X) at +25234.755 ms on pid 0 tid -1 'Device 0'" in examples
    assert "e.g. 'Stream Sync' at +25144.692 ms on 'stream 7 ' (0.080 ms)" in examples
    assert len(examples) == 7
    assert not [line for line in lines if line.endswith(" ")]     # (rich pads its title to the width)
