"""MXNet ``profiler.dumps()`` aggregate statistics (table or JSON) → synthesized timeline.

Layout rule: one process per ``dumps()`` report, one track per category
(``operator``, ``MXNET_C_API``, user domains, ...); on it a root slice named
after the category, as long as the sum of its rows' Total, and one slice per
row laid end to end in the file's (sort) order, each as long as its Total
(ms); the row's Count, Total, Min, Max, Avg are the slice's args, exactly as
printed.  Counter rows (``MXNet C API Calls``, user counters: MXNet prints
their last value/1000 as "Time" and (max-min)/2 as "Avg") and memory rows
(``Device Storage``: Count, Min/Max/Avg Use in kB) are not durations: they are
instants at the start of their category's track, with their stats in args.
A category slice whose last rows have zero length is 1 ns longer than the sum
(so that viewers keep those rows inside it).
The timeline starts at 0 (Clock.SYNTHETIC).  All stats are also in
``trace.meta.extra["summary_tables"]`` (one table per category).
"""

from __future__ import annotations

import math
import re
from typing import Any

from ...errors import TraceconvError, WarningCode
from ...io import Source
from ...model import Clock, Trace
from ..schema import parse_json, validate
from .synth import AggNode, lay_out, to_ns

WHAT = "MXNet profiler.dumps() statistics"
_HEADER = re.compile(r"^\s*Profile Statistics[:.]\s*$")
_SNIFF_TABLE = re.compile(rb"(?m)^\s*Profile Statistics[:.]\s*$")
_SNIFF_JSON = re.compile(rb'^\s*\{\s*"(?:Time|Memory|Unit)"\s*:\s*[{"]')
_NUM = r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_KNOWN_COUNTERS = {"MXNet C API Calls", "MXNet C API Concurrency"}


def sniff(head: bytes) -> bool:
    if _SNIFF_JSON.match(head):
        return True
    return bool(_SNIFF_TABLE.search(head)) and b"=================" in head


class _Category:
    def __init__(self, name: str, memory: bool, line: int) -> None:
        self.name = name
        self.memory = memory
        self.line = line
        self.rows: list[dict[str, Any]] = []


class _RowMatch:
    def __init__(self, name: str, nums: list[str]) -> None:
        self._g = {"name": name, "nums": " ".join(nums)}

    def group(self, key: str) -> str:
        return self._g[key]


class _row_re:
    """A table row: a name, then ``n`` numbers (what ``^(?P<name>.*?)\\s+(?P<nums>N(\\s+N){n-1})\\s*$``
    matches), read by splitting from the right: in linear time, where that regex took seconds per
    line on long runs of spaces and digits (a mangled table once took minutes)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def match(self, line: str) -> _RowMatch | None:
        parts = line.rsplit(None, self.n)
        if len(parts) < self.n:
            return None
        name, nums = ("", parts) if len(parts) == self.n else (parts[0], parts[1:])
        if len(parts) == self.n and not line[:1].isspace():
            return None                       # the regex wants whitespace before the numbers
        if not all(_NUM_RE.fullmatch(x) for x in nums):
            return None
        return _RowMatch(name, nums)


_NUM_RE = re.compile(_NUM)


_ROW_TIME = _row_re(5)
_ROW_MEM = _row_re(4)


def _parse_table(text: str, trace: Trace) -> list[list[_Category]]:
    lines = text.splitlines()
    reports: list[list[_Category]] = []
    bad = 0
    cut = 0
    i = 0
    n = len(lines)
    while i < n:
        if not _HEADER.match(lines[i]):
            i += 1
            continue
        cats: list[_Category] = []
        reports.append(cats)
        i += 1
        while i < n and not _HEADER.match(lines[i]):
            line = lines[i].rstrip("\r")
            nxt = lines[i + 1].rstrip("\r") if i + 1 < n else ""
            if line.strip() and re.fullmatch(r"=+\s*", nxt):
                # a category: name, '=====', column header, '----' line, rows, blank line
                name = line.strip()
                header = lines[i + 2] if i + 2 < n else ""
                if "Name" not in header or "Total Count" not in header:
                    cut += 1
                    cats.append(_Category(name, False, i + 1))
                    i += 2
                    continue
                cat = _Category(name, "Use" in header and "Time (ms)" not in header, i + 1)
                cats.append(cat)
                i += 3
                if i < n and lines[i].strip().startswith("----"):
                    i += 1
                row_re = _ROW_MEM if cat.memory else _ROW_TIME
                while i < n and lines[i].strip():
                    ln = lines[i].rstrip("\r")
                    if i + 1 < n and re.fullmatch(r"=+\s*", lines[i + 1].rstrip("\r")):
                        break   # the next category started without a blank line
                    m = row_re.match(ln)
                    if not m or not m.group("name").strip():
                        bad += 1
                    else:
                        nums = m.group("nums").split()
                        count = float(nums[0])
                        if not all(math.isfinite(float(x)) for x in nums) or not 0 <= count < 2**63 \
                                or count != int(count):
                            bad += 1        # inf, nan, 1e400, a count beyond 64 bits or negative
                        else:
                            vals = [float(x) for x in nums[1:]]
                            keys = ("min", "max", "avg") if cat.memory else ("total", "min", "max", "avg")
                            row: dict[str, Any] = {"name": m.group("name").rstrip(), "count": int(count)}
                            row.update(zip(keys, vals))
                            row["line"] = i + 1
                            cat.rows.append(row)
                    i += 1
                continue
            i += 1
    if not reports:
        raise TraceconvError(f"not {WHAT}: no 'Profile Statistics:' header "
                             "(the table printed by mxnet.profiler.dumps())")
    if bad:
        trace.diagnostics.warn(WarningCode.DROPPED_EVENT, "table rows whose name and numbers cannot be read "
                               "(not converted)", bad)
    if cut:
        trace.diagnostics.warn(WarningCode.TRUNCATED_INPUT, "categories without their column header "
                               "(the table may be cut short; kept empty)", cut)
    return reports


def _parse_json(data: bytes) -> list[list[_Category]]:
    raw = parse_json(data, WHAT)
    if not isinstance(raw, dict):
        raise TraceconvError(f"not {WHAT}: expected a JSON object with 'Time', 'Memory' and 'Unit', "
                             f"found a {type(raw).__name__}")
    from .mxnet_stats_schema import DumpsJson       # (not for sniffing)
    doc = validate(DumpsJson, raw, WHAT)
    if doc.Unit.Time != "ms" or doc.Unit.Memory != "kB":
        raise TraceconvError(f"not {WHAT} as traceconv knows it: units are "
                             f"{doc.Unit.Time!r}/{doc.Unit.Memory!r}, expected 'ms'/'kB'", where="at Unit")
    cats: list[_Category] = []
    for cname, rows in doc.Time.items():
        c = _Category(cname, False, 0)
        for name, s in rows.items():
            c.rows.append({"name": name, "count": s.Count, "total": s.Total, "min": s.Min, "max": s.Max,
                           "avg": s.Avg})
        cats.append(c)
    for cname, mrows in doc.Memory.items():
        c = _Category(cname, True, 0)
        for name, m in mrows.items():
            c.rows.append({"name": name, "count": m.Count, "min": m.Min, "max": m.Max, "avg": m.Avg})
        cats.append(c)
    return [cats]


def _group_dur(children: list[AggNode]) -> int:
    """A synthesized grouping slice covers its children; 1 ns more when the last ones have zero
    length, so that viewers (which close a slice at its end) keep them inside it."""
    total = sum(c.dur for c in children)
    return total + 1 if children and children[-1].dur == 0 and total else total


def _is_counter(row: dict[str, Any]) -> bool:
    """MXNet keeps counters in the same table as durations; their "Avg" is (max-min)/2, not Total/Count."""
    if row["name"] in _KNOWN_COUNTERS:
        return True
    count, total, lo, hi, avg = row["count"], row["total"], row["min"], row["max"], row["avg"]
    # (numbers no counter has: not finite, or a span beyond the double range in MXNet's units)
    if count < 2 or not all(math.isfinite(v) for v in (total, lo, hi, avg, (hi - lo) * 1000)):
        return False

    def close(a: float, b: float) -> bool:
        return abs(a - b) <= max(1e-4, 2e-3 * max(abs(a), abs(b)))

    # the halving is done on the raw integer value (then /1000 for printing)
    half = (hi - lo) / 2
    half_int = (round((hi - lo) * 1000) // 2) / 1000
    return not close(avg, total / count) and (close(avg, half) or close(avg, half_int))


def read(source: Source) -> Trace:
    data = source.read_bytes()
    trace = Trace("mxnet-stats")
    trace.meta.synthesized = True
    trace.meta.clock = Clock.SYNTHETIC
    layout = "json" if data.lstrip()[:1] == b"{" else "table"
    if layout == "json":
        reports = _parse_json(data)
    else:
        text = data.decode("utf-8", errors="replace")
        reports = _parse_table(text, trace)

    tables: list[dict[str, Any]] = []
    counters = 0
    for k, cats in enumerate(reports, 1):
        pname = "MXNet aggregate stats" + (f" (dumps #{k})" if len(reports) > 1 else "")
        proc = trace.process(("mxnet-stats", k), pname + " [synthesized timeline]", synthetic=True)
        proc.sort_index = k
        for cat in cats:
            if cat.memory:
                th = trace.thread(proc, ("synthesized", cat.name), cat.name, synthetic=True)
                for r in cat.rows:
                    args = {"count": r["count"], "min_kB": r["min"], "max_kB": r["max"], "avg_kB": r["avg"],
                            "category": cat.name, "kind": "memory"}
                    trace.add_instant(th.track, 0, r["name"], cat.name, args)
                tables.append({"name": cat.name, "report": k, "kind": "memory", "unit": "kB",
                               "columns": ["name", "count", "min", "max", "avg"],
                               "rows": [[r["name"], r["count"], r["min"], r["max"], r["avg"]] for r in cat.rows]})
                continue
            children: list[AggNode] = []
            counter_rows: list[tuple[dict[str, Any], dict[str, Any]]] = []
            for r in cat.rows:
                args = {"count": r["count"], "total_ms": r["total"], "min_ms": r["min"], "max_ms": r["max"],
                        "avg_ms": r["avg"]}
                if _is_counter(r):
                    r["kind"] = "counter"
                    counter_rows.append((r, args))
                    continue
                r["kind"] = "duration"
                dur = to_ns(r["total"], 1_000_000) if r["total"] > 0 else 0
                children.append(AggNode(r["name"], dur, args))
            root = AggNode(cat.name, _group_dur(children),
                           {"category": cat.name, "rows": len(cat.rows),
                            "sum_of_totals_ms": round(sum(c.args["total_ms"] for c in children), 6)},
                           children)
            if not cat.rows:
                root.args["empty"] = True
            lay_out(trace, root, proc, cat.name, 0, cat=cat.name)
            th = trace.thread(proc, ("synthesized", cat.name))
            for r, args in counter_rows:
                args.update(kind="counter", category=cat.name)
                trace.add_instant(th.track, 0, r["name"], cat.name, args)
                counters += 1
            tables.append({"name": cat.name, "report": k, "kind": "time", "unit": "ms",
                           "columns": ["name", "count", "total", "min", "max", "avg", "kind"],
                           "rows": [[r["name"], r["count"], r["total"], r["min"], r["max"], r["avg"], r["kind"]]
                                    for r in cat.rows]})
    if counters:
        trace.diagnostics.warn(WarningCode.NOTE, "counter rows (their 'Time' is a last value/1000, not a "
                               "duration) shown as instants with their stats in args", counters)
    trace.meta.extra = {
        "producer": "Apache MXNet profiler.dumps()",
        "mxnet_stats": {"layout": layout, "reports": len(reports),
                        "units": {"Time": "ms", "Memory": "kB"}},
        "summary_tables": tables,
    }
    return trace
