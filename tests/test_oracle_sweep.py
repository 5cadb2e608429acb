"""Every fixture and every real sample converts to a .pftrace and a Chrome JSON that Perfetto's
trace_processor loads with no crash and no error or data-loss stat, and the two outputs give the
same slice table (``perfetto_oracle.SLICES_SQL``).

One test per input (pytest parametrize); per output one trace_processor process runs every query,
the two outputs' processes side by side.  The samples in ``../shared/samples`` are skipped, saying
so, where that folder is absent; an input traceconv cannot read (a TraceconvError) is skipped with
its message.

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

What the lanes branch (wt-lanes) changes is compared apart: first the tables with lanes aside
(``_lanes_aside``: a lane's ``(overlap N)`` track suffix and the depth of zero-duration slices), strictly
for every input; then the whole tables, where the inputs in :data:`LANES_XFAIL` xfail (not strict)
with "lanes: fixed on branch wt-lanes" -- the tables differ there in lanes (the .pftrace shows a lane
under its thread's name, the .json as a thread of its own), in zero-duration slices at their
parent's end (trace_processor nests them when it reads the raw JSON and the .json output; the
model, and so the .pftrace, makes them siblings), or their .json has ``flow_duplicate_id`` errors
(flows: one slice with several flow ends).
"""

from __future__ import annotations

import re
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
SKIP_SUFFIXES = {".svg", ".md"}

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
# Inputs the readers cannot read yet (their part of issue #12 is another branch's): xfail, not strict,
# and only for that failure.
READER_XFAIL = {
    "fixtures/args/special_args.json": "reader: RecursionError on args nested 1,000+ deep (the readers' part "
                                       "of issue #12; the writers' side is tests/test_oracle_args.py)",
}
_LANE = re.compile(r" \(overlap \d+\)$")
# Inputs whose tables differ only in what the overlap lanes, the nesting of zero-duration slices or
# flow fan-out change (all on branch wt-lanes): xfail, not strict -- and only for that part: the
# rest of the check (loads, no .pftrace problem, counts, tables with lanes aside) stays strict.
LANES_XFAIL: set[str] = {
    "fixtures/chrome_json/perfetto_connected_flow_data.json",
    "fixtures/composer/composer_profiler/ep0-ba3-rank0.json.gz",
    "fixtures/composer/composer_profiler/merged_trace.json.gz",
    "fixtures/kineto/generated_torch213_cpu_single_worker0.pt.trace.json.gz",
    "fixtures/kineto/hta_critical_path_simple_add_trace.json.gz",
    "fixtures/kineto/hta_df_index_resolver_gpu_memory_events_EXCERPT.json.gz",
    "fixtures/kineto/hta_trace_diff_control_legacy_async_cpu_to_gpu_EXCERPT.json.gz",
    "fixtures/megengine/generated_mge1130_static_profile.json",
    "fixtures/multirank/composer_2ranks/ep0-ba3-rank0.json.gz",
    "fixtures/multirank/composer_2ranks/ep0-ba3-rank1.json.gz",
    "fixtures/multirank/composer_2ranks/merged_trace.json.gz",
    "fixtures/mxnet/generated_mxnet191_dumps_json.json",
    "fixtures/mxnet/generated_mxnet191_dumps_table.txt",
    "samples/chrome_trace_perfetto/perfetto_connected_flow_data.json",
    "samples/composer/generated_composer0321_cpu_gloo_2ranks/composer_profiler/ep0-ba3-rank0.json",
    "samples/composer/generated_composer0321_cpu_gloo_2ranks/composer_profiler/ep0-ba3-rank1.json",
    "samples/composer/generated_composer0321_cpu_gloo_2ranks/composer_profiler/merged_trace.json",
    "samples/kineto/generated_torch213_cpu_single_worker0.pt.trace.json.gz",
    "samples/kineto/hta_critical_path_simple_add_trace.json.gz",
    "samples/kineto/hta_cuda_event_sync_multi_stream.json.gz",
    "samples/kineto/hta_cupti_profiler_range_trace.json.gz",
    "samples/kineto/hta_df_index_resolver_gpu_memory_events.json.gz",
    "samples/kineto/hta_rank_non_gpu_no_schema.json.gz",
    "samples/kineto/hta_trace_diff_control_legacy_async_cpu_to_gpu.json.gz",
    "samples/megengine/generated_mge1130_static_profile.json",
    "samples/mxnet/generated_mxnet191_dumps_json.json",
    "samples/mxnet/generated_mxnet191_dumps_table.txt",
}


def _inputs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name not in SKIP_NAMES
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
        out[(process, track, r["name"], r["cat"], r["ts"], r["dur"], r["depth"])] += 1
    return out


def _oracle(path: Path) -> tuple[list[dict], list[dict], dict, Counter]:
    problems, rows, counts, glob = tp.run(path, tp.PROBLEMS_SQL, tp.SLICES_SQL, COUNTS_SQL, GLOBAL_SQL)
    g = Counter((r["name"], r["ts"]) for r in glob if r["dur"] == 0)
    return problems, rows, counts[0], g


def _convert(src: Path, tmp_path: Path, key: str) -> tuple[Path, Path, traceconv.Trace]:
    try:
        trace = traceconv.load(src)
    except TraceconvError as e:
        pytest.skip(f"traceconv cannot read it: {e}")
    except RecursionError:
        if key in READER_XFAIL:
            pytest.xfail(READER_XFAIL[key])
        raise
    pf, js = tmp_path / "out.pftrace", tmp_path / "out.json"
    traceconv.save(trace, pf)
    traceconv.save(trace, js)
    return pf, js, trace


def _lanes_aside(table: Counter) -> Counter:
    """The slice table with what the other branch's work on lanes and nesting changes put aside:
    the ``(overlap N)`` suffix of a lane's track name (the .pftrace shows a lane under its thread's
    name, the .json as a thread of its own) and the depth of zero-duration slices (a zero-duration
    slice at its parent's end: trace_processor's JSON importer nests it, traceconv's layout makes it
    a sibling)."""
    out: Counter = Counter()
    for (process, track, name, cat, ts, dur, depth), n in table.items():
        if track is not None:
            track = _LANE.sub("", track)
        out[(process, track, name, cat, ts, dur, depth if dur else None)] += n
    return out


def _differ(src: Path, a: Counter, b: Counter, what: str) -> str:
    only_p, only_j = a - b, b - a
    return (f"slice tables differ for {src.name}{what}: {sum(only_p.values())} rows only in the .pftrace, "
            f"{sum(only_j.values())} only in the .json; first: {sorted(only_p, key=str)[:3]} / "
            f"{sorted(only_j, key=str)[:3]}")


def check(src: Path, tmp_path: Path, key: str) -> None:
    pf, js, trace = _convert(src, tmp_path, key)
    with ThreadPoolExecutor(2) as pool:                 # the two trace_processor runs side by side
        f_pf, f_js = pool.submit(_oracle, pf), pool.submit(_oracle, js)
        (p_problems, p_rows, p_counts, p_glob), (j_problems, j_rows, j_counts, j_glob) = f_pf.result(), f_js.result()
    lanes = key in LANES_XFAIL
    assert not p_problems, f".pftrace of {src.name}: {p_problems}"
    # flow problems of the .json (a flow id bound twice) belong to the flow work on wt-lanes
    assert not [p for p in j_problems if not (lanes and p["name"].startswith("flow_"))], \
        f".json of {src.name}: {j_problems}"
    # content, not just "it loaded": a truncated .pftrace loads with no error
    n = len(trace.slices) + len(trace.instants)
    assert p_counts["slices"] == n, (p_counts, n)
    assert j_counts["slices"] == n, (j_counts, n)
    assert p_counts["counters"] == j_counts["counters"] == len(trace.counters)
    glob = p_glob + j_glob
    a, b = _normal(p_rows, glob), _normal(j_rows, glob)
    # everything but lanes and zero-duration depths agrees, on every input
    assert _lanes_aside(a) == _lanes_aside(b), _differ(src, _lanes_aside(a), _lanes_aside(b), " (lanes aside)")
    if a != b or j_problems:
        if lanes:
            pytest.xfail(f"lanes: fixed on branch wt-lanes ({_differ(src, a, b, '')[:300]}; {j_problems})")
        raise AssertionError(_differ(src, a, b, ""))


@pytest.mark.parametrize("src", FIXTURE_INPUTS)
def test_fixture_outputs_load_and_agree(src, tmp_path):
    check(src, tmp_path, f"fixtures/{src.relative_to(FIXTURES)}")


@pytest.mark.parametrize("src", SAMPLE_INPUTS)
def test_sample_outputs_load_and_agree(src, tmp_path):
    check(src, tmp_path, f"samples/{src.relative_to(SAMPLES)}")
