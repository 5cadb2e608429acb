"""MXNet profiler.dumps() aggregate stats: the docs table and a generated MXNet 1.9.1 run (table + JSON)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson
import pytest

import traceconv
from traceconv import formats
from traceconv.errors import TraceconvError, WarningCode
from traceconv.io import open_source
from traceconv.model.layout import nest
from traceconv.model import Clock

from timeline import assert_same_timeline, from_model, read_chrome_json, read_perfetto

FIX = Path(__file__).parent / "fixtures" / "mxnet"
TABLES = [FIX / "docs_devguide_dumps_table.txt", FIX / "generated_mxnet191_dumps_table.txt"]
JSON = FIX / "generated_mxnet191_dumps_json.json"
FILES = TABLES + [JSON]
PROC = "MXNet aggregate stats [synthesized timeline]"
COUNTERS = {"MXNet C API Calls", "MXNet C API Concurrency", "my_counter"}


def track_name(t) -> str:
    """An instant's track as the decoders give it: a name, or (name, tid)."""
    return t[0] if isinstance(t, tuple) else t


def table_of(path: Path) -> dict[str, tuple[bool, list[tuple]]]:
    """An independent reading of a dumps() table: {category: (memory?, [(name, count, numbers...)])}."""
    lines = path.read_text().splitlines()
    out: dict = {}
    for i, ln in enumerate(lines):
        if i + 1 < len(lines) and lines[i + 1].startswith("=====") and ln.strip():
            memory = "Use" in lines[i + 2]
            rows = []
            j = i + 4
            while j < len(lines) and lines[j].strip():
                parts = re.split(r"\s{2,}", lines[j].strip())
                name, nums = parts[0], parts[1:]
                if len(nums) < (4 if memory else 5):      # a long name pushes the count column
                    name, first = name.rsplit(" ", 1)
                    nums = [first] + nums
                rows.append((name, int(nums[0]), *map(float, nums[1:])))
                j += 1
            out[ln.strip()] = (memory, rows)
    return out


def json_of(path: Path) -> dict[str, tuple[bool, list[tuple]]]:
    doc = json.loads(path.read_text())
    out = {c: (False, [(n, s["Count"], s["Total"], s["Min"], s["Max"], s["Avg"]) for n, s in rows.items()])
           for c, rows in doc["Time"].items()}
    out.update({c: (True, [(n, s["Count"], s["Min"], s["Max"], s["Avg"]) for n, s in rows.items()])
                for c, rows in doc["Memory"].items()})
    return out


def expected(path: Path):
    return json_of(path) if path.suffix == ".json" else table_of(path)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("mx")
    got = {}
    for path in FILES:
        j, p = d / f"{path.name}.json", d / f"{path.name}.pftrace"
        assert traceconv.convert(path, j).input_format == "mxnet-stats"
        traceconv.convert(path, p)
        trace = traceconv.load(path)
        nest(trace)
        got[path.name] = (trace, read_chrome_json(j), read_perfetto(p))
    return got


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_detected_and_outputs_agree(path, outputs):
    assert formats.detect(open_source(path).head, path).name == "mxnet-stats"
    trace, tj, tp = outputs[path.name]
    assert_same_timeline(tj, tp)
    assert_same_timeline(tj, from_model(trace))
    assert tj.metadata == tp.metadata
    assert trace.meta.clock is Clock.SYNTHETIC and trace.meta.synthesized is True
    assert tj.metadata["traceconv"]["synthesized"] is True


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_row_is_a_slice_or_instant_with_the_files_numbers(path, outputs):
    trace, tj, _ = outputs[path.name]
    want = expected(path)
    assert want, "the test read some categories"
    for cat, (memory, rows) in want.items():
        on_track = [s for s in tj.slices if s.process == PROC and s.track == cat]
        inst = [i for i in tj.instants if i[0] == PROC and track_name(i[1]) == cat]
        if memory:
            assert not on_track
            assert sorted(i[2] for i in inst) == sorted(r[0] for r in rows)
            continue
        root = [s for s in on_track if s.depth == 0]
        assert [s.name for s in root] == [cat]
        durations = [r for r in rows if r[0] not in COUNTERS]
        total = sum(int(round(r[2] * 1e6)) for r in durations)
        # 1 ns more when the last rows have zero length, so that they nest inside the category
        pad = 1 if durations and total and int(round(durations[-1][2] * 1e6)) == 0 else 0
        assert root[0].dur == total + pad
        # (zero-length rows at one time nest one in the other, as Perfetto reads such slices)
        kids = sorted((s for s in on_track if s.depth >= 1), key=lambda s: (s.ts, s.depth))
        assert [s.name for s in kids] == [r[0] for r in durations]      # the file's (sort) order
        cursor = root[0].ts
        for s, r in zip(kids, durations):
            assert s.ts == cursor and s.dur == int(round(r[2] * 1e6))
            cursor += s.dur
            assert orjson.loads(s.args) == {"count": r[1], "total_ms": r[2], "min_ms": r[3], "max_ms": r[4],
                                            "avg_ms": r[5]}
        assert sorted(i[2] for i in inst) == sorted(r[0] for r in rows if r[0] in COUNTERS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_summary_tables_hold_the_files_numbers(path, outputs):
    trace, tj, _ = outputs[path.name]
    want = expected(path)
    tables = {t["name"]: t for t in tj.metadata["summary_tables"]}
    assert set(tables) == set(want)
    for cat, (memory, rows) in want.items():
        t = tables[cat]
        assert t["unit"] == ("kB" if memory else "ms")
        got = [tuple(r[:5 if memory else 6]) for r in t["rows"]]
        assert got == [tuple(r) for r in rows]
        if not memory:
            kinds = {r[0]: r[6] for r in t["rows"]}
            assert {n for n, k in kinds.items() if k == "counter"} == COUNTERS & set(kinds)


def test_memory_and_counter_rows(outputs):
    trace, tj, _ = outputs["generated_mxnet191_dumps_table.txt"]
    i = next(i for i in range(len(trace.instants)) if trace.strings[trace.instants.name[i]] == "Memory: cpu/0")
    assert orjson.loads(trace.instants.args[i]) == {"count": 41, "min_kB": 0.036, "max_kB": 4.144, "avg_kB": 2.054,
                                                     "category": "Device Storage", "kind": "memory"}
    c = next(i for i in range(len(trace.instants)) if trace.strings[trace.instants.name[i]] == "my_counter")
    assert orjson.loads(trace.instants.args[c])["kind"] == "counter"
    assert any(w.code is WarningCode.NOTE and w.count == 3 for w in trace.diagnostics.warnings)
    # the category with no printable rows is still there
    empty = [s for s in tj.slices if s.track == "MyDomain,instant_marker"]
    assert [(s.name, s.dur) for s in empty] == [("MyDomain,instant_marker", 0)]


def test_table_and_json_of_one_run_agree_to_four_significant_digits():
    a, b = table_of(TABLES[1]), json_of(JSON)
    assert set(a) == set(b)
    ta = traceconv.load(TABLES[1])
    tb = traceconv.load(JSON)
    da = {(ta.strings[ta.slices.name[i]]): ta.slices.dur[i] for i in range(len(ta.slices))}
    db = {(tb.strings[tb.slices.name[i]]): tb.slices.dur[i] for i in range(len(tb.slices))}
    assert set(da) == set(db)
    for k in da:
        assert da[k] == pytest.approx(db[k], rel=5e-4, abs=1000), k


def test_bad_rows_and_bad_files(tmp_path):
    text = TABLES[0].read_text().replace("0.0520           0.0520", "0.05x0           0.0520")
    p = tmp_path / "bad.txt"
    p.write_text(text)
    t = traceconv.load(p)
    assert "sum" not in {t.strings[t.slices.name[i]] for i in range(len(t.slices))}
    assert any(w.code is WarningCode.DROPPED_EVENT and w.count == 1 for w in t.diagnostics.warnings)

    cut = TABLES[0].read_text()
    cut = cut[: cut.index("operator\n=================\n") + len("operator\n=================\n")]
    p.write_text(cut)
    t = traceconv.load(p)
    assert any(w.code is WarningCode.TRUNCATED_INPUT for w in t.diagnostics.warnings)

    p.write_text("hello\n")
    with pytest.raises(TraceconvError, match="no 'Profile Statistics:' header"):
        traceconv.load(p, "mxnet-stats")

    data = JSON.read_text()
    p.write_text(data[: len(data) // 2])
    with pytest.raises(TraceconvError, match="not valid JSON.*line"):
        traceconv.load(p)
    p.write_text(data.replace('"Count": 2,', '"Count": "two",', 1))
    with pytest.raises(TraceconvError) as e:
        traceconv.load(p)
    assert "at Time.MXNET_C_API.MXNDArrayWaitAll.Count" in str(e.value) and "\n" not in str(e.value)


def test_sniffer_claims_no_other_sample():
    from traceconv.readers.aggregate.mxnet_stats import sniff
    from timeline import sample_files
    for p in sample_files():
        if p.name in {f.name for f in FILES}:
            assert sniff(open_source(p).head), p
        else:
            assert not sniff(open_source(p).head), p


def test_two_reports_in_one_file_and_crlf(tmp_path):
    """dumps() printed twice (reset=False) into one captured output, with Windows line endings."""
    one = TABLES[1].read_text()
    p = tmp_path / "twice.txt"
    p.write_bytes(("some program output\n" + one + "\nmore output\n" + one).replace("\n", "\r\n").encode())
    t = traceconv.load(p)
    nest(t)
    names = sorted(pr.name for pr in t.processes)
    assert names == ["MXNet aggregate stats (dumps #1) [synthesized timeline]",
                     "MXNet aggregate stats (dumps #2) [synthesized timeline]"]
    single = traceconv.load(TABLES[1])
    assert len(t.slices) == 2 * len(single.slices) and len(t.instants) == 2 * len(single.instants)
    reports = {tb["report"] for tb in t.meta.extra["summary_tables"]}
    assert reports == {1, 2}
