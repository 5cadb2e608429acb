"""The fuzz harness's short deterministic run, and every failure class it found kept as a fixture.

Each input in tests/fixtures/fuzz/ once crashed a reader (a traceback, exit 1), grew memory
without bound, or wrote an output that is not strict JSON.  Each is run through the real CLI
(tests/fuzz/runner.py: a capped forked process, both outputs loaded by trace_processor) and read
in process to check what the model made of it.  The long campaign: ``python -m tests.fuzz``.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import perfetto_oracle as tp
import traceconv
from traceconv import _core, validate
from fuzz.merges import merge_options, merge_ranks
from fuzz.mutate import mutated
from fuzz import scaling, scanner
from fuzz.runner import _WROTE, Runner, merge_case, unpack_merge
from fuzz.strategies import IMPORTERS, Case
from traceconv.errors import WarningCode
from traceconv.readers.chrome import paths
from traceconv.model import (MAX_ARGS_DEPTH, MAX_DUR_NS, MAX_TIME_NS, Clock, Trace, enforce_time_domain,
                             encode_args_counted)

FUZZ = Path(__file__).parent / "fixtures" / "fuzz"

FIXTURES = sorted(p.name for p in FUZZ.iterdir() if p.suffix != ".md")


def _suffix(name: str) -> str:
    for s in (".pt.trace.json", ".chrome_timeline.json", ".json.gz", ".txt.gz", ".json", ".txt"):
        if name.endswith(s):
            return s
    return Path(name).suffix


@pytest.fixture(scope="module")
def runner():
    if not (tp.TP_PATH.is_file()):
        pytest.skip(f"Perfetto's trace_processor_shell is not at {tp.TP_PATH}")
    with Runner(timeout=120) as r:
        yield r


def _case(name: str) -> Case:
    return Case(name, _suffix(name), (FUZZ / name).read_bytes())


# ---------------------------------------------------------------- the contract, per fixture

@tp.requires_trace_processor
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_keeps_the_contract(runner, name):
    """Exit 0 with outputs trace_processor loads (JSON strict), or one error line and exit 2; and
    ``summary`` and ``validate`` print JSON, and their tables, exactly when the input converts."""
    outcome = runner.run(_case(name), inspect="both")
    assert [(r.failure, r.detail[-600:]) for r in outcome.failures] == []
    assert [r.output for r in outcome.results] == [".pftrace", ".json", "summary", "validate",
                                                   "summary table", "validate table"]


@tp.requires_trace_processor
def test_table_mode_finds_a_header_padded_to_its_column(runner):
    """A count of 10,000 widens summary's count column, so its header is drawn "┃  count ┃" (the
    campaign of 2026-11-27, seed 20261166, took an ML-Agents mutation's table for a missing one)."""
    events = [{"ph": "X", "name": "step", "ts": i, "dur": 1, "pid": 1, "tid": 1} for i in range(10_000)]
    outcome = runner.run(Case("ten_thousand.json", ".json", orjson.dumps({"traceEvents": events})), inspect="both")
    assert [(r.failure, r.detail[-600:]) for r in outcome.failures] == []
    assert [r.output for r in outcome.results][-2:] == ["summary table", "validate table"]


# ---------------------------------------------------------------- what the model made of them

def _names(t: Trace) -> list[str]:
    return [t.strings[i] for i in t.slices.name]


def _warned(t: Trace, code: WarningCode, words: str) -> int:
    return sum(w.count for w in t.diagnostics.warnings if w.code is code and words in w.message)


def test_deep_args_become_strings():
    t = traceconv.load(FUZZ / "deep_args.json")
    assert _names(t) == ["step", "b"]
    a = t.slice_args(0)
    assert a["y"] == 2
    x, kept = a["x"], 0
    while isinstance(x, list):
        x, kept = x[0], kept + 1
    # the args object sits 3 levels down in the document: 66 - 4 levels of lists kept as they are,
    # the rest as the text of a string, whole (all 2,000 levels and the 1)
    assert kept == MAX_ARGS_DEPTH + 2 - 4 and isinstance(x, str)
    assert kept + x.count("[") == 2000 and x.endswith("[1" + "]" * (2000 - kept))
    assert _warned(t, WarningCode.CLAMPED_VALUE, "nested deeper") == 1


def test_deep_args_on_the_repairing_path():
    t = traceconv.load(FUZZ / "deep_args_trailing_comma.json")
    assert _names(t) == ["step", "b"]
    assert isinstance(t.slice_args(0)["x"], dict)        # kept as objects down to the limit
    assert _warned(t, WarningCode.CLAMPED_VALUE, "nested deeper") == 1


@pytest.mark.parametrize("name, check", [
    ("bad_utf8_name.json", lambda t: _names(t) == ["fo?o", "b"]),
    ("bad_utf8_args_key.json", lambda t: t.slice_args(0) == {"k?": 1, "ok": 2}),
    ("bad_utf8_args_value.json", lambda t: t.slice_args(0) == {"v": "??"}),
    ("bad_utf8_top_key.json", lambda t: t.meta.extra.get("???") == 1 and _names(t) == ["a"]),
    ("bad_utf8_after_array.json", lambda t: _names(t) == ["a"]),
    ("pftrace_bad_utf8_strings.pftrace", lambda t: _names(t) == ["ev?NAM?(", "plain"]
     and t.slice_args(0) == {"key?NAM?(": "val?NAM?("} and [th.name for th in t.threads] == ["thr?NAM?("]),
])
def test_invalid_utf8_is_read_as_question_marks(name, check):
    t = traceconv.load(FUZZ / name)
    assert check(t)
    assert _warned(t, WarningCode.CLAMPED_VALUE, "not valid UTF-8") >= 1


def test_invalid_utf8_never_reaches_a_json_output(tmp_path):
    out = tmp_path / "o.json"
    traceconv.convert(FUZZ / "bad_utf8_args_value.json", out)
    doc = orjson.loads(out.read_bytes())           # strict UTF-8
    assert [e.get("args") for e in doc["traceEvents"] if e.get("ph") == "X"] == [{"v": "??"}, None]


def test_non_finite_args_are_strings(tmp_path):
    t = traceconv.load(FUZZ / "nan_args.json")
    assert t.slice_args(0) == {"n": "NaN", "i": "Infinity", "m": "-Infinity", "big": "1E+400", "ok": 1}
    out = tmp_path / "o.json"
    traceconv.save(t, out)
    assert orjson.loads(out.read_bytes())["traceEvents"][1]["args"]["n"] == "NaN"


def test_negative_ts_on_a_relative_clock_moves_the_trace():
    t = traceconv.load(FUZZ / "negative_ts.json")
    assert t.meta.clock is Clock.RELATIVE
    assert list(t.slices.ts) == [0, 15_000] and list(t.slices.dur) == [3_000, 2_000]
    assert any("moved 5000 ns later" in w.message for w in t.diagnostics.warnings)


def test_times_out_of_range_are_dropped():
    t = traceconv.load(FUZZ / "huge_ts_dur.json")
    assert _names(t) == ["ok", "ok2"]
    assert _warned(t, WarningCode.DROPPED_EVENT, "'ts'") == 1
    assert _warned(t, WarningCode.DROPPED_EVENT, "'dur'") == 1


def test_a_time_base_out_of_range_is_not_used():
    t = traceconv.load(FUZZ / "megengine_huge_localtime.chrome_timeline.json")
    assert t.meta.clock is Clock.RELATIVE and list(t.slices.ts) == [3_000]
    assert _warned(t, WarningCode.CLAMPED_VALUE, "time base") == 1


def test_mlagents_totals_beyond_the_domain():
    t = traceconv.load(FUZZ / "mlagents_huge_totals.json")
    assert _names(t) == ["root", "a"]                   # "b" starts after 2^62 ns: dropped
    assert list(t.slices.dur) == [MAX_DUR_NS, MAX_DUR_NS]  # no slice lasts longer
    assert _warned(t, WarningCode.CLAMPED_VALUE, "were cut to that") == 2
    assert _warned(t, WarningCode.DROPPED_EVENT, "slices starting outside") == 1
    assert t.meta.clock is Clock.SYNTHETIC              # start_time_seconds 1e400 is not a start


def test_mxnet_table_rows_out_of_range():
    t = traceconv.load(FUZZ / "mxnet_stats_huge_totals.txt")
    i = _names(t).index("FullyConnected")
    assert t.slices.dur[i] == 24_352_000 and t.slice_args(i)["count"] == 12
    assert "Convolution" not in _names(t) and "Activation" not in _names(t)
    assert _warned(t, WarningCode.DROPPED_EVENT, "table rows") == 2


def test_sample_factory_timing_1e26_is_not_a_number():
    t = traceconv.load(FUZZ / "sf_timing_1e26.txt")
    assert _names(t) == ["Gpu learner", "init", "work", "Gpu worker", "init", "forward"]
    assert t.slice_args(2) == {"value_text": "1e26"} and t.slices.dur[2] == 0
    assert t.slices.dur[1] == 3_105_800_000
    assert _warned(t, WarningCode.DROPPED_EVENT, "not numbers") == 1


def test_sample_factory_unparsable_date():
    t = traceconv.load(FUZZ / "sf_bad_date.txt")
    assert {"train", "update", "batching"} <= set(_names(t))
    assert _warned(t, WarningCode.DROPPED_EVENT, "not a date") == 1


def test_sample_factory_tree_nested_1200_deep():
    t = traceconv.load(FUZZ / "sf_deep_tree.txt.gz")
    assert len(t.slices) == 1 + 1200
    assert _warned(t, WarningCode.CLAMPED_VALUE, "indented more than") == 1200 - 101


@pytest.mark.parametrize("name", ["long_name.json.gz", "long_cat.json.gz"])
def test_names_longer_than_64_kib(name):
    t = traceconv.load(FUZZ / name)
    assert len(t.slices) == 2
    longest = max(len(s) for s in t.strings.strings)
    assert longest in (70_000, 40_000)


def test_string_table_grows_by_what_it_holds():
    """A 70 KB name once doubled the (numba) table's slots until memory ran out (a 66 KB file,
    24 GB).  The compiled scanner's table holds each distinct string once, at its own length."""
    text = gzip.decompress((FUZZ / "long_name.json.gz").read_bytes())
    i = text.index(b"[") + 1
    strings = _core.scan.Strings()
    cols, _, status, new = _core.scan.scan(text, i, 16, strings)
    assert status == _core.scan.END and len(cols["flags"]) == 2
    assert strings.nbytes() == sum(len(s.encode()) for s in new) and max(map(len, new)) == 70_000


# ---------------------------------------------------------------- the model's domain, directly

def _trace(clock: Clock) -> Trace:
    t = Trace("test")
    t.meta.clock = clock
    p = t.process(1, "p")
    t.thread(p, 1, "t")
    return t


def test_domain_on_a_unix_clock_drops_and_clamps():
    t = _trace(Clock.UNIX)
    tr = t.threads[0].track
    a = t.add_slice(tr, 10, 5, "ok")
    b = t.add_slice(tr, -1, 5, "negative")
    c = t.add_slice(tr, 2**70, 5, "beyond int64")
    d = t.add_slice(tr, 20, -3, "negative dur")
    e = t.add_slice(tr, MAX_TIME_NS - 10, 100, "past the end")
    t.add_flow(a, d)
    t.add_flow(b, a)
    t.add_instant(tr, -5, "i")
    ctr = t.track(traceconv.model.TrackKind.COUNTER, "c", t.processes[0]).id
    t.add_counter(ctr, 1, float("nan"))
    t.add_counter(ctr, 2, 1.5)
    t.add_counter(ctr, 3, 10**400)
    enforce_time_domain(t)
    assert _names(t) == ["ok", "negative dur", "past the end"]
    assert list(t.slices.dur) == [5, 0, 10]
    assert list(zip(t.flows.src, t.flows.dst)) == [(0, 1)]
    assert len(t.instants) == 0 and list(t.counters.value) == [1.5]
    assert t.saturated == 1 and c == 2 and e == 4
    assert _warned(t, WarningCode.DROPPED_EVENT, "slices starting outside") == 2
    assert _warned(t, WarningCode.DROPPED_EVENT, "flows") == 1
    assert _warned(t, WarningCode.DROPPED_EVENT, "not a finite number") == 2
    assert _warned(t, WarningCode.CLAMPED_VALUE, "negative duration") == 1
    assert _warned(t, WarningCode.CLAMPED_VALUE, "cut there") == 1


def test_domain_leaves_a_trace_within_it_alone():
    t = _trace(Clock.UNIX)
    t.add_slice(t.threads[0].track, 1_700_000_000_000_000_000, 5, "now")
    enforce_time_domain(t)
    assert list(t.slices.ts) == [1_700_000_000_000_000_000] and not t.diagnostics


_edge = st.sampled_from([-1, 0, 1, MAX_DUR_NS, MAX_DUR_NS + 1, MAX_TIME_NS - 1, MAX_TIME_NS, MAX_TIME_NS + 1,
                         -(2**63), 2**63 - 1])
_time_or_dur = st.one_of(st.integers(0, 10**6), _edge, st.integers(-(2**63), 2**63 - 1))


@settings(max_examples=300, deadline=None)
@given(slices=st.lists(st.tuples(_time_or_dur, _time_or_dur), max_size=6),
       instants=st.lists(_time_or_dur, max_size=3),
       counters=st.lists(st.tuples(_time_or_dur, st.sampled_from([1.5, math.nan, math.inf])), max_size=3))
def test_domain_checked_at_once_changes_what_the_masks_change(slices, instants, counters):
    """enforce_time_domain first asks, by a few reductions per table, whether every time, duration
    and end is in the domain, and skips the masks when so: the same trace and warnings as the masks
    alone, whatever the times (in, at and past each bound)."""
    from unittest import mock

    import traceconv.model.trace as model_trace

    def make() -> Trace:
        t = _trace(Clock.UNIX)
        tr = t.threads[0].track
        for ts, dur in slices:
            t.add_slice(tr, ts, dur, "s")
        for ts in instants:
            t.add_instant(tr, ts, "i")
        ctr = t.track(traceconv.model.TrackKind.COUNTER, "c", t.processes[0]).id
        for ts, v in counters:
            t.add_counter(ctr, ts, v)
        return t

    def state(t: Trace) -> tuple:
        return (list(t.slices.ts), list(t.slices.dur), list(t.instants.ts), list(t.counters.ts),
                [v if v == v else "nan" for v in t.counters.value],
                sorted((w.code.value, w.message, w.count) for w in t.diagnostics.warnings))

    checked, masked = make(), make()
    enforce_time_domain(checked)
    with mock.patch.object(model_trace, "_in_domain", lambda *a: False):
        enforce_time_domain(masked)
    assert state(checked) == state(masked)


def test_strict_args():
    raw, changed = encode_args_counted({"nan": math.nan, "big": 2**70, "l": [math.inf, {"x": -math.inf}],
                                        "deep": orjson.loads(b"[" * 100 + b"]" * 100), 7: "int key"})
    d = orjson.loads(raw)
    assert d["nan"] == "NaN" and d["big"] == str(2**70) and d["l"] == ["Infinity", {"x": "-Infinity"}]
    assert d["7"] == "int key"
    x, kept = d["deep"], 0
    while isinstance(x, list):
        x, kept = x[0], kept + 1
    assert isinstance(x, str) and kept == MAX_ARGS_DEPTH - 1       # the args object is level 1
    assert kept + x.count("[") == 100 and isinstance(orjson.loads(x), list)   # the rest, as its text
    assert changed == 5


# ---------------------------------------------------------------- the short campaign

SHORT_EXAMPLES = 2       # structure-aware cases per importer
SHORT_MUTATIONS = 8      # mutated fixtures
SHORT_MERGES = 4         # merges of generated ranks


@tp.requires_trace_processor
def test_short_campaign(runner):
    """A deterministic slice of ``python -m tests.fuzz``: every importer's strategy and some fixture
    mutations, each through the CLI to both outputs and through summary and validate, and some
    merges of generated ranks."""
    failures: list[tuple[str, str, str]] = []
    ran = [0]

    def check(case: Case, note: str) -> None:
        ran[0] += 1
        for r in runner.run(case, inspect=True).failures:          # (merges: not inspected)
            failures.append((r.failure, note, r.detail[-300:]))
        broke = scanner.check(case.data, random.Random(ran[0]))     # the bytes straight into the scanner
        if broke is not None:
            failures.append((broke[0], note, broke[1][-300:]))

    for kind, strategy in IMPORTERS.items():
        @settings(max_examples=SHORT_EXAMPLES, derandomize=True, database=None, deadline=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(strategy)
        def one(case: Case) -> None:
            check(case, kind)
        one()
    rng = random.Random(0)
    for _ in range(SHORT_MUTATIONS):
        case, note = mutated(rng)
        check(case, note)
    rng = random.Random(1)

    @settings(max_examples=SHORT_MERGES, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(merge_ranks(rng))
    def merge(ranks: list[Case]) -> None:
        opts = merge_options(rng)
        check(merge_case(ranks, opts), f"merge {' '.join(opts)}")
    merge()
    assert ran[0] >= len(IMPORTERS) + SHORT_MUTATIONS + SHORT_MERGES
    assert failures == []


def test_the_separator_mutation_breaks_an_event_array_where_it_says():
    """Each kind of separator mutation makes text that decoding refuses, and that the scanner,
    fed in blocks of every size, refuses too (``scanner.check`` holds ``validate``'s column pass to
    the decoding): a comma dropped or doubled between two events, one before the first event, one
    after the last."""
    from fuzz.mutate import separator
    events = ",\n".join(f'{{"ph":"X","name":"e{k}","ts":{k},"dur":1,"pid":1,"tid":1}}' for k in range(40))
    text = ('{"traceEvents": [\n' + events + "\n]}").encode()
    json.loads(text)
    seen = set()
    for seed in range(40):
        d = bytearray(text)
        kind = separator(random.Random(seed), d, random.Random(seed).randrange(len(d)))
        seen.add(kind)
        with pytest.raises(json.JSONDecodeError):
            json.loads(bytes(d))
        for k in range(4):
            assert scanner.check(bytes(d), random.Random(k)) is None, kind
    assert seen == {"no-comma", "two-commas", "leading-comma", "trailing-comma"}


GLOO = Path(__file__).parent / "fixtures" / "multirank" / "gloo_2ranks"


@tp.requires_trace_processor
def test_a_merge_case_runs_traceconv_merge_with_its_options(runner):
    """The harness's merge cases merge: two real ranks keep the contract with exit 0 (the three
    outputs, the merge archive too, loaded by trace_processor), and the same ranks with an empty
    window are one error line."""
    ranks = [Case("kineto", ".pt.trace.json.gz", (GLOO / f"rank{i}.pt.trace.json.gz").read_bytes()) for i in (0, 1)]
    case = merge_case(ranks, ["--align", "none"])
    files, opts = unpack_merge(case.data)
    assert [n for n, _ in files] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"] and opts == ["--align", "none"]
    assert [(r.output, r.rc, r.failure) for r in runner.run(case).results] == \
        [(".pftrace", 0, None), (".json", 0, None), (".tar", 0, None)]
    empty = runner.run(merge_case(ranks, ["--window", "1s:0s"]))
    assert [(r.rc, r.failure) for r in empty.results] == [(2, None)] * 3


def test_megengine_static_numbers_out_of_range():
    t = traceconv.load(FUZZ / "megengine_static_huge.json")
    assert _names(t) == ["conv1", "relu1"]                  # pool1 starts at -1e300 s: dropped
    assert list(t.slices.dur) == [1_000_000, MAX_DUR_NS]   # 1e300 s: the longest a slice lasts
    assert t.slice_args(0)["computation"] == str(2**70)   # beyond 64 bits: its decimal text
    assert _warned(t, WarningCode.DROPPED_EVENT, "slices starting outside") == 1
    assert _warned(t, WarningCode.CLAMPED_VALUE, "were cut to that") == 1


def test_megengine_static_infinity_is_one_error_line():
    with pytest.raises(traceconv.TraceconvError, match="not valid JSON"):
        traceconv.load(FUZZ / "megengine_static_infinity.json")


@tp.requires_trace_processor
def test_plain_cli_subprocess_agrees():
    """The runner's --plain mode: a fresh ``python -m traceconv convert`` per run, as a user runs it."""
    with Runner(timeout=120, plain=True) as plain:
        ok = plain.run(_case("deep_args.json"))
        bad = plain.run(Case("garbage", ".json", b"{\"traceEvents\": 5}"))
    assert [r.failure for r in ok.results] == [None, None] and [r.rc for r in ok.results] == [0, 0]
    assert [r.failure for r in bad.results] == [None, None] and [r.rc for r in bad.results] == [2, 2]


def test_mxnet_table_with_long_lines_reads_in_linear_time():
    """A table with 1,000 lines of up to 3,000 spaces (a fuzz mutation) took minutes in the row regex."""
    import time
    t0 = time.process_time()
    t = traceconv.load(FUZZ / "mxnet_stats_long_lines.txt.gz")
    assert time.process_time() - t0 < 20          # was 100 s of CPU
    assert {"MXNET_C_API", "MXNDArrayWaitAll", "MXImperativeInvoke", "operator", "diag"} <= set(_names(t))
    assert _warned(t, WarningCode.DROPPED_EVENT, "table rows") == 1001


def test_deep_value_the_repairing_reader_meets_after_a_broken_event():
    """The repairing reader resyncs at a '}, {' inside a string, where the depth pre-pass (which reads
    strings as JSON does) saw no brackets: a 3,000-deep array met by Python's json decoder."""
    t = traceconv.load(FUZZ / "deep_behind_a_broken_event.json")
    assert _names(t) == ["b"]
    assert _warned(t, WarningCode.DROPPED_EVENT, "not valid JSON") == 2


def test_a_rank_beyond_64_bits_is_not_kept():
    """Composer's global_rank of -2^63-1 (read by the repairing path, a fuzz case) reached the writers'
    metadata: TypeError in orjson."""
    t = traceconv.load(FUZZ / "composer_rank_beyond_int64.json")
    assert t.meta.source_format == "composer" and t.meta.rank is None
    assert "callback/x/event/epoch" in _names(t)
    assert _warned(t, WarningCode.CLAMPED_VALUE, "rank") == 1


def test_a_metadata_integer_beyond_64_bits_is_its_text_on_the_stream_too(tmp_path, monkeypatch):
    """The same rank in a file the stream reads (Composer's are streamed since 2026-11-28): orjson
    read the metadata event's args, and made the integer a double (-9.2e18): the rank check then
    refused the file (exit 2).  The stream reads it as the whole-document path does."""
    src = tmp_path / "ep0-ba1-rank0.json"
    src.write_bytes(b'[{"name":"global_rank","cat":"","ph":"M","pid":0,"tid":1,"ts":1,'
                    b'"args":{"value":-9223372036854775809}},\n'
                    b'{"name":"event/epoch","cat":"","ph":"B","pid":0,"tid":1,"ts":1795235654049672},\n'
                    b'{"name":"event/epoch","cat":"","ph":"E","pid":0,"tid":1,"ts":1795235654049700}]')
    got = []
    for fast in (True, False):
        monkeypatch.setattr(paths, "FAST", fast)
        t = traceconv.load(src)
        assert t.meta.source_format == "composer" and t.meta.rank is None and _names(t) == ["event/epoch"]
        got.append(sorted((w.code, w.message, w.count) for w in t.diagnostics.warnings))
    assert got[0] == got[1]
    assert (WarningCode.CLAMPED_VALUE, "a rank that is not an integer in 0..2147483647 was not kept "
            "(-9223372036854775809)", 1) in got[0]


def test_exponents_beyond_a_decimal_on_the_repairing_path():
    """``1e99900000000000000000`` (a scanner fuzz case, 2026-11-25): the repairing reader reads floats
    as Decimals, and a Decimal cannot hold that exponent (decimal.InvalidOperation, exit 70).  Such
    a number is the double it rounds to: infinity in args is kept as text (and counted), a time of
    infinity drops its event, a vanishing one is zero."""
    t = traceconv.load(FUZZ / "kineto_exponent_beyond_decimal.pt.trace.json")
    assert _names(t) == ["aten::mm", "aten::relu"]
    assert t.slice_args(0) == {"big": "Infinity", "tiny": -0.0, "ok": 1.5}
    assert _warned(t, WarningCode.DROPPED_EVENT, "'ts'") == 1
    assert _warned(t, WarningCode.CLAMPED_VALUE, "kept as text") == 1
    assert _warned(t, WarningCode.NOTE, "repairing reader") == 1


@tp.requires_trace_processor
@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
def test_counters_on_a_thread_or_process_track_go_to_counter_tracks(tmp_path, suffix):
    """A .pftrace whose counter values lie on a process's and a thread's track (a ``perfetto`` case
    of the campaign of 2026-11-28, seed 20261205, reduced: ``TYPE_COUNTER`` events on tracks that
    are not counter tracks): trace_processor counts each as an error
    (``track_event_counter_invalid_track_uuid``) and drops it, and the .pftrace output had written
    them there again.  Now the layout puts them on counter tracks of their own, named after theirs,
    in their process (a note, counted): the outputs load with no error, every value kept."""
    src = FUZZ / "pftrace_counters_on_thread_and_process_tracks.pftrace"
    assert [r["name"] for r in tp.query(src, "select name from stats where severity = 'error' and value > 0")] == \
        ["track_event_counter_invalid_track_uuid"]
    t = traceconv.load(src)
    out = tmp_path / f"o{suffix}"
    traceconv.save(t, out)
    assert _warned(t, WarningCode.NOTE, "not a counter track") == 3
    tp.assert_loads(out)
    sql = ("select t.name, p.pid, c.ts, c.value from counter c join process_counter_track t on c.track_id = t.id "
           "join process p using(upid) order by c.ts")
    series = "" if suffix == ".pftrace" else " value"       # (a JSON "C" event's series: its arg key)
    assert [(r["name"], r["pid"], r["ts"], r["value"]) for r in tp.query(out, sql)] == \
        [("worker" + series, 7, 1200, 3.5), ("main" + series, 7, 1300, 4.5), ("main" + series, 7, 1400, -1.0)]
    assert [(r["name"], r["dur"]) for r in tp.query(out, "select name, dur from slice")] == [("step", 500)]


@tp.requires_trace_processor
def test_thread_0_beside_the_main_thread_stays_a_thread_of_its_own(tmp_path):
    """Process 5 with threads 5 and 0 (a chrome-json fuzz case, 2026-11-25): trace_processor's JSON
    importer reads tid 0 as the process's main thread, so the JSON output put both threads' slices
    on one track, and the one that partially overlaps the other spilled (error stat
    slice_spill_overlapping_complete_event).  The JSON output writes thread 0 with the first free
    tid (counted); the .pftrace keeps tid 0 (its track descriptors are not read that way)."""
    t = traceconv.load(FUZZ / "tid0_beside_main_thread.json")
    out = tmp_path / "o.json"
    traceconv.save(t, out)
    assert _warned(t, WarningCode.REMAPPED_ID, "tid 0") == 1
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in orjson.loads(out.read_bytes())["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {(5, 5): "thread 5", (5, 1): "thread 0"}
    sql = ("select s.name, thread.tid from slice s join thread_track tt on s.track_id = tt.id "
           "join thread using(utid) order by s.ts")
    assert [(r["name"], r["tid"]) for r in tp.query(out, sql)] == [("main", 5), ("zero", 1)]
    tp.assert_loads(out)
    pf = tmp_path / "o.pftrace"
    traceconv.save(traceconv.load(FUZZ / "tid0_beside_main_thread.json"), pf)
    assert [(r["name"], r["tid"]) for r in tp.query(pf, sql)] == [("main", 5), ("zero", 0)]
    tp.assert_loads(pf)


@tp.requires_trace_processor
def test_a_span_past_26_days_is_written_in_whole_microseconds(tmp_path):
    """Events at 0 and in 2022 (a Sample Factory fuzz case, 2026-11-25): trace_processor reads JSON
    times as doubles of µs, so at 1.67e15 µs a child's end came back past its parent's and spilled
    (error stat).  The JSON output floors every start and end to a whole µs (counted), so what
    nested still nests; the .pftrace keeps every ns."""
    t = traceconv.load(FUZZ / "span_past_26_days.json")
    out = tmp_path / "o.json"
    traceconv.save(t, out)
    tp.assert_loads(out)
    assert _warned(t, WarningCode.CLAMPED_VALUE, "whole µs") == 4
    base = 1669337214821 * 1_000_000
    sql = "select name, ts, dur, depth from slice order by ts, depth"
    got = [(r["name"], r["ts"], r["dur"], r["depth"]) for r in tp.query(out, sql)]
    assert got == [("early", 0, 1000, 0), ("parent", base + 499_000, 3000, 0), ("child", base + 500_000, 2000, 1),
                   ("mark", base + 500_000, 0, 2), ("grandchild", base + 501_000, 1000, 2)]
    pf = tmp_path / "o.pftrace"
    traceconv.save(traceconv.load(FUZZ / "span_past_26_days.json"), pf)
    tp.assert_loads(pf)
    exact = [(r["name"], r["ts"], r["dur"]) for r in tp.query(pf, "select name, ts, dur from slice order by ts")]
    assert exact == [("early", 0, 1000), ("parent", base + 499_999, 3000), ("child", base + 500_501, 2498),
                     ("mark", base + 500_700, 0), ("grandchild", base + 501_001, 1998)]


def test_an_id_of_ten_million_digits_is_kept_as_text():
    """A tid of 1e9992319 on the repairing path (a scanner fuzz case, 2026-11-25): Python's json reads
    it as a Decimal, and making it an int built ten million digits for minutes (a timeout).  An id
    past 64 bits is its text, as such ints already became; the thread gets a number of its own."""
    t = traceconv.load(FUZZ / "tid_exponent_ten_million.pt.trace.json")
    assert [(th.raw_tid, th.name) for th in t.threads] == [("1E+9992319", "big"), (1, "")]
    assert _names(t) == ["aten::mm", "aten::add"]


def test_validate_reads_invalid_utf8_as_the_reader_does():
    """Invalid UTF-8 in a thread's name and a slice's (found when the campaign began running
    ``validate``, 2026-11-25): the examples' decoder raised UnicodeDecodeError (exit 70).  The text
    is repaired as the reader repairs it, so the example names the thread as the conversion does."""
    from traceconv.validate import validate
    r = validate(FUZZ / "validate_bad_utf8_thread_name.json")
    got = {f.check: (f.severity, f.count, f.examples) for f in r.findings}
    assert got["values out of range"][:2] == ("problem", 2)
    assert got["unmatched B/E"] == ("problem", 1, ["a begin without an end: 'open' (B) at +0.002 ms on pid 1 "
                                                   "tid 1 'loader ?'"])
    assert [th.name for th in traceconv.load(FUZZ / "validate_bad_utf8_thread_name.json").threads] == ["loader ?"]


def test_validate_of_a_value_nested_3000_deep_reports_without_examples():
    """An ``id`` nested 3,000 deep: the examples' decoder hit Python's recursion limit (exit 70).
    The reader's findings stand; only their examples are left out."""
    from traceconv.validate import validate
    r = validate(FUZZ / "validate_deep_id.json")
    got = {f.check: (f.severity, f.count, f.examples) for f in r.findings}
    assert got["unmatched B/E"] == ("problem", 1, [])
    assert got["values out of range"][:2] == ("problem", 1)


def test_validate_of_a_ts_past_a_double():
    """A ts of 10^400 written as an integer (a Chrome JSON fuzz case, 2026-11-25): ``float()`` of
    it raised OverflowError in validate's examples (exit 70).  It is no time, as in the reader,
    which drops its event; the others are still checked for order."""
    from traceconv.validate import validate
    r = validate(FUZZ / "validate_ts_int_past_a_double.json")
    got = {f.check: (f.severity, f.count, f.examples) for f in r.findings}
    assert got["events a viewer cannot show"][1] == 1
    assert got["events out of order"][1] == 1                       # open (2 µs) after a (100 µs)
    assert got["unmatched B/E"] == ("problem", 1, ["a begin without an end: 'open' (B) at +0.000 ms on pid 1 tid 1"])


def test_validate_of_an_end_at_negative_zero():
    """A Composer array whose E event is at ``-0.0`` µs (a campaign of 2026-11-27, seed 20261181):
    the column pass reads it as 0 ns, so its clock starts at 0.0, and the example read "+-0.000 ms"
    where decoding every event (whose clock starts at -0.0) read "+0.000 ms".  Both read +0.000."""
    from traceconv.validate import validate
    path = FUZZ / "validate_ts_negative_zero.json"
    assert scanner.column_pass(path.read_bytes(), random.Random(0)) is None
    got = {f.check: f.examples for f in validate(path).findings}
    assert got["unmatched B/E"] == ["an end without a begin: 'callback/x/event/epoch' (E) at +0.000 ms on pid 0 tid 0",
                                    "a begin without an end: 'callback/x/event/epoch' (B) at +9999.376 ms on pid 0 "
                                    "tid 0"]


def test_validate_of_events_with_no_comma_between_them():
    """An empty event and the next one with no comma between them (a Kineto mutation of the
    campaign of 2026-11-28, seed 20261200): the scanner took the comma as optional, so
    ``validate``'s column pass read an array that decoding every event refuses.  Now both take the
    repairing path: the conversion keeps the four events, and ``validate`` counts them and reports the
    empty one, which has no time, as an event a viewer cannot show."""
    from traceconv.validate import validate
    path = FUZZ / "validate_missing_comma_between_events.pt.trace.json"
    assert all(scanner.column_pass(path.read_bytes(), random.Random(k)) is None for k in range(8))
    t = traceconv.load(path)
    assert [t.strings[n] for n in t.slices.name] == ["op1", "op2", "op3", "op4"]
    assert {w.code.value: w.count for w in t.diagnostics.warnings} == {"note": 1, "dropped-event": 1}
    r = validate(path)
    assert (r.format, r.events) == ("kineto", 4)
    assert [(f.check, f.count) for f in r.problems] == [("events a viewer cannot show", 1)]


def test_the_runner_flags_what_breaks_the_contract(tmp_path, monkeypatch):
    """The contract's checks themselves (the CLI stubbed): a traceback, an exit 2 of two lines, and
    a summary printed for an input the conversion refused each fail their run; one error line
    and exit 2 everywhere keeps it."""
    runner = Runner(workdir=tmp_path, plain=True)
    said: dict[str, tuple[int, str, str]] = {}

    def cli(argv, out, err, cap, tmpdir, timeout):          # noqa: ANN001
        rc, stdout, stderr = said["summary" if argv[0] == "summary" else "validate" if argv[0] == "validate"
                                  else "convert"]
        Path(out).write_text(stdout)
        Path(err).write_text(stderr)
        return {"rc": rc, "timeout": False, "maxrss_kb": 0, "secs": 0.0}

    monkeypatch.setattr(runner, "_cli", cli)
    case = Case("chrome-json", ".json", b"{}")
    crash = ('Traceback (most recent call last):\n  File "/x/traceconv/validate.py", line 9, in _num\n'
             'OverflowError: int too large\n')
    refused = (2, "", "traceconv: error: in.json: not a trace\n")
    said.update(convert=refused, summary=refused, validate=(70, "", crash))
    assert [r.failure for r in runner.run(case, inspect=True).results] == [
        None, None, None, "validate traceback OverflowError in traceconv/validate.py:_num"]
    said.update(convert=(2, "", "traceconv: error: a\ntraceconv: error: b\n"), summary=(0, "{}", ""),
                validate=refused)
    assert [r.failure for r in runner.run(case, inspect=True).results] == [
        ".pftrace exit 2 without one 'traceconv: error:' line", ".json exit 2 without one 'traceconv: error:' line",
        "summary exit 0 where convert exited 2/2", None]


def test_a_long_phase_of_backslashes_is_quoted_short_and_its_table_prints_at_once():
    """A Kineto mutation whose phase was 70,000 backslashes (the campaign of 2026-11-27, seed
    20261163, the first to print validate's table): rich's markup escape is quadratic in a run of
    backslashes, so the table took 3 minutes (a timeout); the warning quoted the phase whole (a
    140,000-character line) and validate's table ran to 8,000 lines.  The tables are now built
    from text that is never read as markup, and a value from the input is quoted by its first 60
    characters and its length (summary's table: a name by its first 500)."""
    from traceconv.errors import clip
    path = FUZZ / "validate_long_backslash_phase.json.gz"
    assert clip("x" * 60) == "x" * 60 and clip("x" * 61) == "x" * 60 + "... (61 characters)"
    r = subprocess.run([sys.executable, "-m", "traceconv", "convert", str(path), "-o", os.devnull, "--to", "perfetto"],
                       capture_output=True, text=True, timeout=60)
    warned = [line for line in r.stderr.splitlines() if line.startswith("warning: unknown-phase")]
    assert r.returncode == 0 and len(warned) == 1, r.stderr[-500:]
    assert warned[0].endswith("... (70,000 characters)') (1)") and len(warned[0]) < 250
    v = subprocess.run([sys.executable, "-m", "traceconv", "validate", str(path)], capture_output=True,
                       text=True, timeout=60)
    assert v.returncode == 1 and "(70,000 characters)" in v.stdout and len(v.stdout.splitlines()) < 60, v.stdout[-800:]
    s = subprocess.run([sys.executable, "-m", "traceconv", "summary", str(path)], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "COLUMNS": "100"})
    assert s.returncode == 0 and "(30,000 characters)" in s.stdout and len(s.stdout.splitlines()) < 30, s.stdout[-800:]
    j = subprocess.run([sys.executable, "-m", "traceconv", "summary", str(path), "--format", "json"],
                       capture_output=True, text=True, timeout=60)
    assert "\\" * 30000 in {row["key"] for row in orjson.loads(j.stdout)["rows"]}


def test_the_scanner_check_holds_validates_column_pass_to_decoding_every_event(monkeypatch):
    """The harness's scanner target also runs validate's column pass and compares it with the
    whole-document decoding: the same bytes pass, a pass that miscounts is a failure class."""
    data = orjson.dumps({"traceEvents": [
        {"ph": "X", "name": "a", "ts": 5, "dur": 1, "pid": 1, "tid": 1},
        {"ph": "X", "name": "b", "ts": 3, "dur": 1, "pid": 1, "tid": 1},          # out of order
        {"ph": "E", "name": "c", "ts": 9, "pid": 1, "tid": 2}]})               # an end without a begin
    assert scanner.column_pass(data, random.Random(0)) is None
    assert scanner.check(data, random.Random(0)) is None
    real = validate._scan_columns

    def miscounted(*args, **kw):
        got = real(*args, **kw)
        got.late += 1
        return got
    monkeypatch.setattr(validate, "_scan_columns", miscounted)
    broke = scanner.check(data, random.Random(0))
    assert broke == ("validate column pass: differs from decoding every event", "2 events out of order against 1")


# what each scaling shape holds at size 60: (slices, tracks with slices, flows)
SCALING_AT_60 = {
    "stairs": (60, 60, 0),                      # a lane each
    "lanes_of_many_threads": (40, 40, 0),       # one thread's 40 slices, 39 of them on lanes
    "long_event": (3001, 1, 0),
    "keys_after_the_array": (3000, 1, 0),
    "unique_tids": (60, 60, 0),
    "async_ids": (60, 5, 0),                    # 60 async slices, each overlapping the next 4
    "be_stack": (60, 1, 0),
    "sample_factory_reports": (30, 6, 0),       # 6 reports: the component and its 4 timers
    "mlagents_wide": (61, 1, 0),
    "merge_collectives": (32, 4, 0),            # 2 ranks: a step and 15 kernels each
    "record_flows": (60, 1, 30),
}


@pytest.mark.parametrize("name", sorted(scaling.SHAPES))
def test_every_scaling_shape_makes_the_input_it_says(name, tmp_path):
    """``python -m tests.fuzz.scaling`` times these shapes at two sizes (never here: timing); here
    each, small, is read and written, loads in trace_processor with no error, and holds the slices,
    tracks and flows its generator made."""
    assert set(SCALING_AT_60) == set(scaling.SHAPES)
    scaling.run(name, 60, tmp_path)
    out = tmp_path / "out.pftrace"
    tp.assert_loads(out)
    got = tp.query(out, "select (select count(*) from slice) as n, (select count(distinct track_id) from slice) as t, "
                        "(select count(*) from flow) as f")[0]
    assert (got["n"], got["t"], got["f"]) == SCALING_AT_60[name]


@pytest.mark.parametrize("slices, instants", [(1, 1), (2, 0), (3, 2)])
def test_the_runner_reads_the_counts_the_command_prints(tmp_path, slices, instants):
    """The campaign holds trace_processor's slices to the count the command printed, which it reads
    from the "wrote" line: "1 slice, 1 instant" (singular since 9e68eec) must read as "3 slices, 2
    instants" does, or the check is skipped for such outputs."""
    events = [{"ph": "X", "name": f"s{i}", "ts": 10 * i, "dur": 5, "pid": 1, "tid": 1} for i in range(slices)]
    events += [{"ph": "i", "name": f"i{i}", "ts": 10 * i + 7, "s": "t", "pid": 1, "tid": 1} for i in range(instants)]
    src = tmp_path / "in.json"
    src.write_text(json.dumps({"traceEvents": events}))
    r = subprocess.run([sys.executable, "-m", "traceconv", "convert", str(src), "-o", str(tmp_path / "o.pftrace")],
                       capture_output=True, text=True, timeout=120)
    m = _WROTE.search(r.stdout)
    assert m is not None, r.stdout
    assert (int(m.group(1)), int(m.group(2) or 0)) == (slices, instants), r.stdout
