"""Perfetto's own trace processor as the tests' oracle.

Every output traceconv writes must load in ``trace_processor_shell`` -- the engine ui.perfetto.dev
runs -- with no crash and no error or data-loss stat, and tests assert on what it makes of the
file, in the style of Perfetto's own diff tests: a tiny input, a SQL query, the expected table.

The binary is ``../shared/bin/trace_processor_shell`` beside the project (Perfetto v58.2), or the
path in ``$TRACECONV_TRACE_PROCESSOR``.  Tests that need it are marked
:data:`requires_trace_processor` and skip, saying why, where it is absent.

One call runs one process over one trace (``trace_processor_shell -q FILE``) for any number of
queries; its CSV is read back typed: unquoted cells are numbers (exact integers stay ``int``),
quoted cells strings, ``[NULL]`` is ``None``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Sequence

import pytest

ROOT = Path(__file__).resolve().parent.parent
TP_PATH = Path(os.environ.get("TRACECONV_TRACE_PROCESSOR")
               or ROOT.parent / "shared" / "bin" / "trace_processor_shell")

requires_trace_processor = pytest.mark.skipif(
    not (TP_PATH.is_file() and os.access(TP_PATH, os.X_OK)),
    reason=f"Perfetto's trace_processor_shell is not at {TP_PATH} (set $TRACECONV_TRACE_PROCESSOR)")

# Every import problem is a row of `stats`; these severities mean the UI shows an error or lost data.
PROBLEMS_SQL = ("select name, idx, severity, value from stats "
                "where severity in ('error', 'data_loss') and value > 0 order by name, idx")

def text(expr: str) -> str:
    """SQL for a string column read back exactly: trace_processor's CSV quotes a string but does not
    double the quotes inside it, so they are doubled in the query."""
    return f"""replace({expr}, '"', '""')"""


# The slices as a viewer shows them, comparable across the .pftrace and the Chrome JSON of one
# input: the owning process's and the track's (or, for a thread's own track, which has no name,
# the thread's) names, times relative to the trace's first slice, depth.  (A track of a thread that
# has a name of its own -- an overlap lane of the .pftrace -- shows that name.)
SLICES_SQL = f"""
select
  {text("coalesce(p1.name, p2.name)")} as process,
  {text("coalesce(tr.name, th.name)")} as track,
  {text("s.name")} as name, {text("s.category")} as cat,
  s.ts - (select min(ts) from slice) as ts, s.dur as dur, s.depth as depth
from slice s
join track tr on tr.id = s.track_id
left join thread_track tt on tt.id = s.track_id
left join thread th using (utid)
left join process p1 on p1.upid = th.upid
left join process_track pt on pt.id = s.track_id
left join process p2 on p2.upid = pt.upid
order by process, track, ts, depth, name
"""


class PerfettoCrash(AssertionError):
    """trace_processor crashed or refused the trace: the UI would fail the same way."""


def _cell(text: str, quoted: bool) -> Any:
    if quoted:
        return None if text == "[NULL]" else text
    try:
        return int(text)
    except ValueError:
        return float(text)


def _parse_csv(out: str) -> list[list[dict[str, Any]]]:
    """trace_processor's CSV blocks (one per query, a blank line between) as typed rows."""
    blocks: list[list[list[Any]]] = []
    rows: list[list[Any]] = []
    row: list[Any] = []
    i, n = 0, len(out)
    at_line_start = True
    while i < n:
        c = out[i]
        if at_line_start and c == "\n":          # a blank line ends a block
            if rows:
                blocks.append(rows)
            rows = []
            i += 1
            continue
        at_line_start = False
        if c == '"':
            j, parts = i + 1, []
            while True:
                k = out.index('"', j)
                parts.append(out[j:k])
                if k + 1 < n and out[k + 1] == '"':
                    parts.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            row.append(_cell("".join(parts), True))
        else:
            k = i
            while k < n and out[k] not in ",\n":
                k += 1
            row.append(_cell(out[i:k], False))
            i = k
        if i < n and out[i] == ",":
            i += 1
        else:                                      # end of the row
            rows.append(row)
            row = []
            i += 1
            at_line_start = True
    if rows:
        blocks.append(rows)
    return [[dict(zip(b[0], r)) for r in b[1:]] for b in blocks]


def run(trace: str | os.PathLike[str], *queries: str, timeout: float = 300) -> list[list[dict[str, Any]]]:
    """Load ``trace`` once and run each query; one list of row dicts per query.

    Raises :class:`PerfettoCrash` when trace_processor crashes or fails to load the file."""
    if not queries:
        queries = ("select 1 as loaded",)
    sql = ";\n".join(q.strip().rstrip(";") for q in queries) + ";\n"
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(sql)
    try:
        proc = subprocess.run([str(TP_PATH), "-q", f.name, str(trace)], capture_output=True,
                              timeout=timeout)
    finally:
        os.unlink(f.name)
    err = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0 or "PERFETTO PRE-CRASH LOG" in err:
        tail = "\n".join(err.strip().splitlines()[-25:])
        raise PerfettoCrash(f"trace_processor failed on {trace} (exit {proc.returncode}):\n{tail}")
    out = proc.stdout.decode("utf-8")
    results = _parse_csv(out)
    # a query with no rows prints its header alone, which reads as an empty block
    if len(results) != len(queries):
        raise AssertionError(f"expected {len(queries)} result tables, got {len(results)}:\n{out[:2000]}")
    return results


def query(trace: str | os.PathLike[str], sql: str) -> list[dict[str, Any]]:
    """The rows of one query over ``trace``."""
    return run(trace, sql)[0]


def problems(trace: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The error and data-loss stats trace_processor recorded while importing ``trace``."""
    return query(trace, PROBLEMS_SQL)


def assert_loads(trace: str | os.PathLike[str], allow: Sequence[str] = ()) -> None:
    """``trace`` loads with no crash and no error or data-loss stat (but the names in ``allow``)."""
    bad = [p for p in problems(trace) if p["name"] not in allow]
    assert not bad, f"trace_processor reported problems importing {trace}: {bad}"


def slices(trace: str | os.PathLike[str]) -> list[tuple]:
    """:data:`SLICES_SQL` as tuples ``(process, track, name, cat, ts, dur, depth)``."""
    return [tuple(r.values()) for r in query(trace, SLICES_SQL)]
