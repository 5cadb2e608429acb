"""Every fixture and every real sample converts to a .pftrace and a Chrome JSON that Perfetto's
trace_processor loads with no crash and no error or data-loss stat, and the two outputs give the
same slice table (``perfetto_oracle.SLICES_SQL``).

One test per input (pytest parametrize); per output one trace_processor process runs every query,
the two outputs' processes side by side.  The samples in ``../shared/samples`` are skipped, saying
so, where that folder is absent.  Every input must read, but the fuzz fixtures made to end in one
error line (:data:`ERROR_INPUTS`), which must do so.

What legitimately differs between the formats, normalized before comparing (``_normal``):

* **The process of a track that belongs to none** (global async tracks, global instants): the
  .pftrace has no process for it; the Chrome JSON has no global tracks, so the writer puts them in
  a process named ``Global`` (``chrome_json.GLOBAL_PROCESS_NAME``).  Both become ``None``.
* **The name of a thread of tid 0**: trace_processor calls it ``swapper`` in a .pftrace (Linux's idle
  task), whatever its ThreadDescriptor says; the JSON import keeps the writer's ``thread 0``.  Both
  become ``<tid 0>``.
* **The track of a global instant**: trace_processor puts a JSON ``"s":"g"`` instant on its own
  global legacy track (named ``Global`` ... or none), the .pftrace on the writer's named track.
  Global instants are compared by (name, ts) with the track left out.

* **Times more than 26 days from the JSON's base** (only the fuzz fixtures have them): the JSON
  writer floors them to whole µs (a double holds no more there; counted), so the .pftrace's starts
  and ends are floored the same way; and beyond 2^53 ns both are compared rounded to the
  millisecond.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import perfetto_oracle as tp
import traceconv
from traceconv.errors import TraceconvError
from traceconv.writers.chrome_json import GLOBAL_PROCESS_NAME

FIXTURES = tp.ROOT / "tests" / "fixtures"
SAMPLES = tp.ROOT.parent.parent / "shared" / "samples"
if not SAMPLES.is_dir():
    SAMPLES = tp.ROOT.parent / "shared" / "samples"
SKIP_NAMES = {"README.md", "SOURCES.md"}
SKIP_SUFFIXES = {".svg", ".md", ".py"}
# what under tests/fixtures is not a profile: producers' printed reports the tests compare with
NOT_PROFILES = {"mge1130_static_profile_analyze_by_type_sum.txt", "mge1130_static_profile_analyze_device_top30.txt"}
# inputs made to end in one error line (tests/fixtures/fuzz/README.md): checked to do so
ERROR_INPUTS = {"kineto_huge_base.pt.trace.json": "baseTimeNanoseconds",
                "megengine_static_infinity.json": "not valid JSON",
                "mxnet_stats_huge_totals.json": "Count",
                "mxnet_stats_key_with_newline.json": r"MXNDArrayFree\\nIú\.Count"}

COUNTS_SQL = ("select (select count(*) from slice) as slices, (select count(*) from flow) as flows, "
              "(select count(*) from counter) as counters")
# which slices sit on a track of no thread and no process (a global track)
GLOBAL_SQL = """
select s.name as name, s.ts - (select min(ts) from slice) as ts, s.dur as dur
from slice s
left join thread_track tt on tt.id = s.track_id
left join process_track pt on pt.id = s.track_id
where tt.id is null and pt.id is null
order by ts, name
"""

# trace_processor names a thread of tid 0 "swapper" (Linux's idle task) in a proto trace, whatever
# its ThreadDescriptor says; the JSON importer keeps the thread_name the writer gave it.
_TID0 = {"swapper", "thread 0"}
def _inputs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name not in SKIP_NAMES | NOT_PROFILES
                  and p.suffix not in SKIP_SUFFIXES)


def _param(p: Path, root: Path, kind: str):
    rel = str(p.relative_to(root))
    return pytest.param(p, id=rel, marks=[tp.requires_trace_processor])


FIXTURE_INPUTS = [_param(p, FIXTURES, "fixtures") for p in _inputs(FIXTURES)]
SAMPLE_INPUTS = ([_param(p, SAMPLES, "samples") for p in _inputs(SAMPLES)] or
                 [pytest.param(None, id="no-samples",
                               marks=pytest.mark.skip(reason=f"no real samples at {SAMPLES}"))])


def _normal(rows: list[dict], global_names: Counter) -> Counter:
    """The slice table as a multiset of tuples, with what the formats legitimately disagree on
    taken out (see the module docstring)."""
    out: Counter = Counter()
    for r in rows:
        process, track = r["process"], r["track"]
        if process == GLOBAL_PROCESS_NAME:
            process = None
        if track in _TID0:
            track = "<tid 0>"
        if process is None and r["dur"] == 0 and global_names[(r["name"], r["ts"])]:
            track = None                                  # a global instant: its track differs
        ts, dur = (t if abs(t) < 2**53 else round(t, -6) for t in (r["ts"], r["dur"]))
        out[(process, track, r["name"], r["cat"], ts, dur, r["depth"])] += 1
    return out


def _oracle(path: Path) -> tuple[list[dict], list[dict], dict, Counter]:
    problems, rows, counts, glob = tp.run(path, tp.PROBLEMS_SQL, tp.SLICES_SQL, COUNTS_SQL, GLOBAL_SQL)
    g = Counter((r["name"], r["ts"]) for r in glob if r["dur"] == 0)
    return problems, rows, counts[0], g


def _convert(src: Path, tmp_path: Path) -> tuple[Path, Path, traceconv.Trace]:
    trace = traceconv.load(src)               # every input reads: no error is skipped
    pf, js = tmp_path / "out.pftrace", tmp_path / "out.json"
    traceconv.save(trace, pf)
    traceconv.save(trace, js)
    return pf, js, trace


def _differ(src: Path, a: Counter, b: Counter, what: str) -> str:
    only_p, only_j = a - b, b - a
    return (f"slice tables differ for {src.name}{what}: {sum(only_p.values())} rows only in the .pftrace, "
            f"{sum(only_j.values())} only in the .json; first: {sorted(only_p, key=str)[:3]} / "
            f"{sorted(only_j, key=str)[:3]}")


def check(src: Path, tmp_path: Path) -> None:
    if src.name in ERROR_INPUTS:              # made to end in one error line: it does
        with pytest.raises(TraceconvError, match=ERROR_INPUTS[src.name]):
            traceconv.load(src)
        return
    pf, js, trace = _convert(src, tmp_path)
    with ThreadPoolExecutor(2) as pool:                 # the two trace_processor runs side by side
        f_pf, f_js = pool.submit(_oracle, pf), pool.submit(_oracle, js)
        (p_problems, p_rows, p_counts, p_glob), (j_problems, j_rows, j_counts, j_glob) = f_pf.result(), f_js.result()
    assert not p_problems, f".pftrace of {src.name}: {p_problems}"
    assert not j_problems, f".json of {src.name}: {j_problems}"
    # content, not just "it loaded": a truncated .pftrace loads with no error
    n = len(trace.slices) + len(trace.instants)
    assert p_counts["slices"] == n, (p_counts, n)
    assert j_counts["slices"] == n, (j_counts, n)
    assert p_counts["counters"] == j_counts["counters"] == len(trace.counters)
    glob = p_glob + j_glob
    if any("whole µs" in w.message for w in trace.diagnostics.warnings):
        # the JSON's times were floored to whole µs (their span is past what doubles hold to the
        # ns): the .pftrace's starts and ends are floored the same way to compare
        first = min([*trace.slices.ts, *trace.instants.ts])
        p_rows = _whole_us(p_rows, first)
    a, b = _normal(p_rows, glob), _normal(j_rows, glob)
    assert a == b, _differ(src, a, b, "")


def _whole_us(rows: list[dict], first: int) -> list[dict]:
    """Rows whose ``ts`` counts from ``first`` (SLICES_SQL's), as the JSON writer floors them: each
    absolute start and end to a whole µs, ``ts`` then counted from the floored ``first``."""
    def floor(t: int) -> int:
        return t // 1000 * 1000

    out = []
    for r in rows:
        start, end = floor(first + r["ts"]), floor(first + r["ts"] + r["dur"])
        out.append({**r, "ts": start - floor(first), "dur": end - start})
    return out


@pytest.mark.parametrize("src", FIXTURE_INPUTS)
def test_fixture_outputs_load_and_agree(src, tmp_path):
    check(src, tmp_path)


@pytest.mark.parametrize("src", SAMPLE_INPUTS)
def test_sample_outputs_load_and_agree(src, tmp_path):
    check(src, tmp_path)
