"""The hotspot table against Perfetto's own engine: for real profiles, each name's count, total and
self time in ``traceconv summary`` equal what trace_processor makes of traceconv's .pftrace of the
same file (a SQL query over its ``slice`` table: durations summed, self time as the duration less
the direct children's).  The table is what users act on; this holds its arithmetic to the slices a
viewer shows, not to traceconv's own reading of them.

Self time is compared where no slice was moved to an overlap lane: there the summary counts what
starts inside a moved slice as its child (as PyTorch's own tables nest by time on a thread), while
Perfetto shows the moved slice alone on its lane, childless (docs/design.md, *Lanes*)."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfetto_oracle as tp
import traceconv

FIX = Path(__file__).parent / "fixtures"
INPUTS = [FIX / "kineto" / "cuda_graph_replays.pt.trace.json.gz",
          FIX / "kineto" / "hta_critical_path_simple_add_trace.json.gz",
          FIX / "kineto" / "hta_amd_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
          FIX / "kineto" / "generated_torch213_cpu_single_worker0.pt.trace.json.gz",
          FIX / "kineto" / "streams_memcpy_memset.pt.trace.json.gz",
          FIX / "multirank" / "gloo_2ranks" / "rank0.pt.trace.json.gz",
          FIX / "multirank" / "composer_2ranks" / "ep0-ba3-rank0.json.gz"]
# (self time compared on the four without overlap lanes, 225 to 626 nested slices each)

# per name: slices (instants are dur 0 slices there: counted apart), total, self
PER_NAME = f"""
select {tp.text("coalesce(s.name, '')")} as name,
       sum(s.dur) as total,
       sum(s.dur - coalesce((select sum(c.dur) from slice c where c.parent_id = s.id), 0)) as self,
       count(*) as n
from slice s
group by 1 order by 1
"""
LANES = "select count(*) as n from track where name like '%(overlap %)'"
INSTANTS = f"""
select {tp.text("coalesce(name, '')")} as name, count(*) as n from slice where dur = 0 group by 1
"""


@tp.requires_trace_processor
@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_summary_by_name_is_what_trace_processor_makes_of_the_slices(path, tmp_path):
    out = tmp_path / "t.pftrace"
    traceconv.convert(path, out)
    trace = traceconv.load(path)
    s = traceconv.summary(trace, by="name", top=None, include_profiler_spans=True)
    assert not s.left_out, s.left_out                   # (no producer's copies to leave out here)
    ours = {r.key: (r.total_ns, r.self_ns, r.count) for r in s.rows}
    per_name, zero, lanes = tp.run(out, PER_NAME, INSTANTS, LANES)
    zero_dur = {r["name"]: r["n"] for r in zero}
    theirs = {r["name"]: (r["total"], r["self"], r["n"]) for r in per_name}
    moved = lanes[0]["n"] > 0
    assert len(ours) > 3
    for name, (total, self_ns, count) in ours.items():
        t_total, t_self, t_n = theirs[name]
        assert total == t_total, name
        assert moved or self_ns == t_self, name
        # (trace_processor's slices of a name: ours, and the name's instants, which are dur 0)
        assert count <= t_n <= count + zero_dur.get(name, 0), name
    assert {n for n, (total, _, _) in theirs.items() if total} <= set(ours)


# per process of the merged trace: its slices (not instants) and their durations summed
PER_PROCESS = f"""
select {tp.text("p.name")} as process, count(*) as n, sum(s.dur) as total
from slice s
left join thread_track tt on s.track_id = tt.id
left join thread t using (utid)
left join process_track pt on s.track_id = pt.id
join process p on p.upid = coalesce(t.upid, pt.upid)
where s.dur > 0
group by 1 order by 1
"""


@tp.requires_trace_processor
@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_summary_of_a_merged_file_by_rank_is_what_trace_processor_makes_of_its_processes(tmp_path, ext):
    """Each rank's calls and their summed durations in ``traceconv summary`` of a merged file, against
    trace_processor's slices of that file grouped by the rank its processes are named after."""
    ranks = sorted((FIX / "multirank" / "gloo_2ranks").glob("*.json.gz"))
    out = tmp_path / f"run{ext}"
    traceconv.merge(ranks, out)
    s = traceconv.summary(traceconv.load(out), by="name", top=None, include_profiler_spans=True)
    ours: dict[int, list[int]] = {}
    for r in s.rows:
        for rank, total in r.per_rank_total_ns.items():
            ours.setdefault(rank, [0, 0])[1] += total
    by_rank = traceconv.summary(traceconv.load(out), by="rank", top=None, include_profiler_spans=True)
    for r in by_rank.rows:
        ours[int(r.key.split()[1])][0] = r.count
    theirs: dict[int, list[int]] = {}
    for row in tp.run(out, PER_PROCESS)[0]:
        rank = int(row["process"].split(" · ")[0].split()[1])           # "rank 1 · python (pid 4242)"
        got = theirs.setdefault(rank, [0, 0])
        got[0] += row["n"]
        got[1] += row["total"]
    assert sorted(ours) == [0, 1] and ours == theirs
