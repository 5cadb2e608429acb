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
