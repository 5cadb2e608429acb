"""Sample Factory logs (``sf_log.txt``, captured consoles) → synthesized timeline.

Layout rule: every profile report (an SF 2.x ``<component> profile tree view:``
block, the early SF2 ``Profiling tree view:`` block, or an SF 1.x flat
``... timing: k: v, ...`` line) becomes one process named after the component,
in the order SF printed them; its timers are laid out by :mod:`traceconv.readers.aggregate.synth`
(children end to end from the parent's start, self time as the remainder) under
a root slice as long as the sum of the top-level timers.  A ``timeit`` node
printed smaller than the sum of its children (SF keeps only its *last*
duration) is drawn as long as its children and flagged ``children_exceed_total``
with the printed ``value_s`` kept, so no slice escapes its parent (a slice
drawn from its children is 1 ns longer when its last children have zero
length, so that viewers keep them inside).  All
components of a run start together at ``Collected``-line time minus the run's
``main_loop`` (or the longest component); log times have no zone and are read
as UTC.  Reports are split into runs at ``Collected`` lines (the SF1 ``Timing:``
and early-SF2 ``Profiling tree view:`` right after one still belong to it), at
a component reported twice, at a start-up line and at a gap of over 5 minutes;
with several runs, process names start with ``run N · ``.  ``Fps is (...)``,
``Avg episode reward`` and ``Collected`` lines become counter tracks and
metadata.  Every node's printed value is in its slice's args (``value_s``) and
in ``trace.meta.extra["summary_tables"]``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator

from ...errors import TraceconvError, WarningCode
from ...io import Source
from ...model import MAX_TIME_NS, Clock, Process, Trace, TrackKind
from .synth import AggNode, lay_out, seconds_to_ns

WHAT = "Sample Factory log"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:,(\d{1,6}))?\](?:\[(\d+)\])? ?(.*)$")
_TREE_HEADER = re.compile(r"^(?P<name>\S.*?) ?tree view:\s*$")
_KEY = r"[A-Za-z_][\w.\-]*"
_TREE_LINE = re.compile(rf"^( *)({_KEY}: [^\s,]+(?:, {_KEY}: [^\s,]+)*)\s*$")
_FLAT = re.compile(rf"^(?P<who>.*?)[,:]?\s*\b[Tt]iming:?\s+(?P<kv>{_KEY}: [^\s,]+(?:, {_KEY}: [^\s,]+)*),?\s*$")
_COLLECTED = re.compile(r"^Collected (?P<steps>\{[^}]*\}|\d+), FPS: (?P<fps>\S+?)\.?(?:\s+(?P<rest>.*))?$")
_FPS = re.compile(r"^Fps is \((?P<win>[^)]*)\)")
_REWARD = re.compile(r"^Avg episode reward: \[(?P<pairs>.*)\]\s*$")
_PY_WARNING = re.compile(r"^\S.*?:\d+: \w*(?:Warning|Error):")
_START = re.compile(r"^(?:Starting experiment with the following configuration|Saving configuration to |"
                    r"Saved parameter configuration for experiment )")
_REQUESTS = re.compile(r"\s+avg\. requests\s+(\S+)$")
_RUN_GAP_NS = 300 * 1_000_000_000
MAX_SECONDS = MAX_TIME_NS / 1e9  # a value larger than this is not read as a number of seconds
MAX_TREE_DEPTH = 100            # tree view lines indented deeper are read at this depth

_SNIFF = re.compile(
    rb"(?m)(?:^|\] )(?:[^\n`'\"]*? profile tree view:|Profiling tree view:|Fps is \(\d+ sec: |"
    rb"Collected \{\d+: \d+\}, FPS: |[^\n`'\"]*?\b[Tt]iming:? [A-Za-z_]\w*: -?\d+\.\d{4}(?:, |\s*$))")
# start-up and periodic lines only SF writes (a long log's first 64 KiB may hold no report yet)
_SNIFF_SF2 = re.compile(
    rb"(?m)^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]\[\d+\] (?:Saving configuration to |"
    rb"Starting experiment with the following configuration|Decorrelating experience for \d+ frames|"
    rb"Updated weights for policy \d+, policy_version|Heartbeat connected on |Avg episode reward: \[\()")
_SNIFF_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")


def sniff(head: bytes) -> bool:
    start = head.lstrip()[:1]
    if start == b"{" or re.match(rb"\s*\[\s*[\[{\]]", head):
        return False   # JSON
    head = _SNIFF_ANSI.sub(b"", head)
    return bool(_SNIFF.search(head) or _SNIFF_SF2.search(head))


# ---------------------------------------------------------------------------------- records

@dataclass
class _Line:
    no: int                      # 1-based line number in the file
    ts: int | None               # ns since the epoch (log time read as UTC), None without a prefix
    stamp: str | None            # the time as printed
    pid: int | None
    text: str                    # the message (prefix and ANSI codes removed)


@dataclass
class _Record:
    head: _Line
    cont: list[_Line] = field(default_factory=list)   # following lines without a prefix


def _records(text: str, probs: "_Problems | None" = None) -> Iterator[_Record]:
    """Log records: a prefixed line and the unprefixed lines after it (an unprefixed
    line that is itself a report -- a tree header, a flat timing, Collected -- starts a
    record of its own)."""
    cur: _Record | None = None
    for no, raw in enumerate(text.splitlines(), 1):
        line = _ANSI.sub("", raw).rstrip("\r\n")
        m = _PREFIX.match(line)
        if m:
            date, frac, pid, msg = m.groups()
            stamp = date
            try:
                # read as UTC, without `calendar` (every conversion's format detection imports
                # this module for its sniffer, and paid ~2 ms for it)
                when = datetime.strptime(date, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
                ts: int | None = int(when.timestamp()) * 1_000_000_000
            except ValueError:          # not a date (month 13, second 99...): a record without a time
                ts = None
                if probs is not None:
                    probs.bad_stamps += 1
            if frac and ts is not None:
                ts += int((frac + "000000")[:6]) * 1000
                stamp += "," + frac
            if cur is not None:
                yield cur
            cur = _Record(_Line(no, ts, stamp, int(pid) if pid else None, msg.rstrip()))
            continue
        ln = _Line(no, None, None, None, line.rstrip())
        stripped = ln.text.strip()
        if stripped and not line.startswith(" ") and (
                _TREE_HEADER.match(stripped) or _COLLECTED.match(stripped) or _FLAT.match(stripped)):
            if cur is not None:
                yield cur
            cur = _Record(ln)
            continue
        if cur is None:
            cur = _Record(_Line(0, None, None, None, ""))   # free text before the first record
        cur.cont.append(ln)
    if cur is not None:
        yield cur


# ---------------------------------------------------------------------------------- trees

@dataclass
class _Node:
    name: str
    value: float | None          # seconds as printed; None when the text is not a number
    text: str                    # the value as printed
    line: int
    children: list["_Node"] = field(default_factory=list)


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    if math.isinf(v) or abs(v) > MAX_SECONDS:
        return None            # 1e26 s: not a time any run took (the model's time domain is 146 years)
    return v


class _Problems:
    def __init__(self) -> None:
        self.bad_numbers = 0
        self.bad_indent = 0
        self.out_of_order = 0
        self.cut_last_line = False
        self.empty_trees = 0
        self.nan_samples = 0
        self.untimed_samples = 0
        self.bad_stamps = 0
        self.too_deep = 0


def _parse_tree(lines: list[_Line], probs: _Problems) -> tuple[list[_Node], int]:
    """The tree_str() lines at the start of ``lines``: (top-level nodes, lines consumed)."""
    root = _Node("~", None, "", 0)
    stack: list[tuple[int, _Node]] = [(-1, root)]
    used = 0
    skip_source_line = False
    for ln in lines:
        text = ln.text
        if skip_source_line and text.startswith(" ") and not _TREE_LINE.match(text):
            skip_source_line = False
            used += 1
            continue
        skip_source_line = False
        m = _TREE_LINE.match(text)
        if not m:
            if _PY_WARNING.match(text):   # a Python warning printed into the middle of the block
                skip_source_line = True
                used += 1
                continue
            break
        used += 1
        indent = len(m.group(1))
        if indent % 2:
            probs.bad_indent += 1
        depth = indent // 2
        if depth > MAX_TREE_DEPTH:      # no timer tree is that deep: kept at the deepest level
            probs.too_deep += 1
            depth = MAX_TREE_DEPTH
        while stack[-1][0] >= depth:
            stack.pop()
        parent_depth, parent = stack[-1]
        if parent_depth < depth - 1:
            probs.bad_indent += 1
        items = m.group(2).split(", ")
        last: _Node | None = None
        for item in items:
            k, _, v = item.partition(": ")
            val = _number(v)
            if val is None:
                probs.bad_numbers += 1
            last = _Node(k, val, v, ln.no)
            parent.children.append(last)
        if len(items) == 1 and last is not None:
            stack.append((depth, last))
    return root.children, used


def _check_order(nodes: list[_Node], probs: _Problems) -> None:
    """tree_str() prints all leaves of a node before its non-leaf children."""
    seen_nonleaf = False
    for n in nodes:
        if n.children:
            seen_nonleaf = True
            _check_order(n.children, probs)
        elif seen_nonleaf:
            probs.out_of_order += 1


# ---------------------------------------------------------------------------------- reports and runs

@dataclass
class _Report:
    kind: str                    # "tree" or "flat"
    component: str
    head: _Line
    header: str                  # the message that introduced it
    nodes: list[_Node]
    details: str | None = None   # SF1: the text around "timing" (CPU affinity, rollouts, requests)
    display: str = ""


@dataclass
class _Run:
    reports: list[_Report] = field(default_factory=list)
    idents: set = field(default_factory=set)
    # counter samples: (track name, ts, value, log line)
    samples: list[tuple[str, int, float]] = field(default_factory=list)
    collected: list[dict[str, Any]] = field(default_factory=list)
    closing: bool = False
    last_report_ts: int | None = None

    def empty(self) -> bool:
        return not self.reports and not self.samples and not self.collected


def _flat_component(who: str) -> tuple[str, str | None]:
    who = who.strip().rstrip(",:").strip()
    if not who:
        return "Timing", None
    name, _, details = who.partition(", ")
    m = _REQUESTS.search(name)
    if m:
        name = name[:m.start()]
        details = f"avg. requests {m.group(1)}" + (f", {details}" if details else "")
    return name.strip(), (details.strip() or None)


def _kv_nodes(kv: str, line: int, probs: _Problems) -> list[_Node]:
    out = []
    for item in kv.split(", "):
        k, _, v = item.partition(": ")
        val = _number(v)
        if val is None:
            probs.bad_numbers += 1
        out.append(_Node(k, val, v, line))
    return out


def _parse(text: str, probs: _Problems) -> list[_Run]:
    runs: list[_Run] = [_Run()]

    def new_run() -> _Run:
        if not runs[-1].empty():
            runs.append(_Run())
        else:
            runs[-1] = _Run()
        return runs[-1]

    all_lines_consumed_to_eof = False
    for rec in _records(text, probs):
        msg = rec.head.text.strip()
        run = runs[-1]
        report: _Report | None = None
        cont = rec.cont
        all_lines_consumed_to_eof = False

        m = _TREE_HEADER.match(msg)
        if m:
            name = m.group("name")
            comp = name[: -len(" profile")] if name.endswith(" profile") else name
            nodes, used = _parse_tree(cont, probs)
            if not nodes:
                probs.empty_trees += 1
            if used and used == len(cont):
                all_lines_consumed_to_eof = True
            report = _Report("tree", comp, rec.head, msg, nodes)
        else:
            fm = _FLAT.match(msg)
            cm = _COLLECTED.match(msg)
            if fm and not cm and not msg.startswith("Fps is"):
                comp, details = _flat_component(fm.group("who"))
                report = _Report("flat", comp, rec.head, msg, _kv_nodes(fm.group("kv"), rec.head.no, probs),
                                 details=details)
            elif cm:
                if run.closing:
                    run = new_run()
                steps_text = cm.group("steps")
                steps: dict[str, int] = {}
                if steps_text.startswith("{"):
                    for pol, n in re.findall(r"(\d+): (\d+)", steps_text):
                        steps[pol] = int(n)
                else:
                    steps["all"] = int(steps_text)
                fps = _number(cm.group("fps"))
                entry: dict[str, Any] = {"env_steps": steps, "fps": fps, "line": rec.head.no}
                if rec.head.stamp:
                    entry["logged_at"] = rec.head.stamp
                if cm.group("rest"):
                    entry["note"] = cm.group("rest")
                entry["_ts"] = rec.head.ts
                run.collected.append(entry)
                run.closing = True
                continue
            elif _FPS.match(msg) or _REWARD.match(msg):
                if run.closing:
                    run = new_run()
                _samples(msg, rec.head, run, probs)
                continue
            elif _START.match(msg):
                if not run.empty():
                    run = new_run()
                continue
            else:
                if run.closing and rec.head.ts is not None:
                    run = new_run()
                continue

        # a profile report
        belongs_to_closing = run.closing and (
            (report.kind == "tree" and report.component == "Profiling")
            or (report.kind == "flat" and report.component == "Timing"))
        if run.closing and not belongs_to_closing:
            run = new_run()
        ident: tuple = (report.kind, report.component,
                        report.head.pid if report.kind == "flat" else None)
        if report.kind == "flat" and report.head.pid is None:
            ident = (*ident, len(run.reports))
        ts = report.head.ts
        if not run.closing and run.reports and (
                ident in run.idents
                or (ts is not None and run.last_report_ts is not None and ts - run.last_report_ts > _RUN_GAP_NS)):
            run = new_run()
        run.reports.append(report)
        run.idents.add(ident)
        if ts is not None:
            run.last_report_ts = ts
    if all_lines_consumed_to_eof and text and not text.endswith(("\n", "\r")):
        probs.cut_last_line = True
    return [r for r in runs if not r.empty()]


def _samples(msg: str, head: _Line, run: _Run, probs: _Problems) -> None:
    values: list[tuple[str, float | None]] = []
    m = _FPS.match(msg)
    if m:
        for win, v in re.findall(r"(\d+) sec: ([^,\s)]+)", m.group("win")):
            values.append((f"Fps ({win} sec)", _number(v)))
        rest = msg[m.end():]
        fm = re.search(r"Total num frames: (\d+)", rest)
        if fm:
            values.append(("Total num frames", float(fm.group(1))))
        tm = re.search(r"Throughput: (.*?)\. Samples", rest) or re.search(r"Throughput: ([^.]*(?:\.\d+)?)", rest)
        if tm:
            for pol, v in re.findall(r"(\d+): ([^,\s]+)", tm.group(1)):
                values.append((f"Throughput (policy {pol})", _number(v.rstrip("."))))
        sm = re.search(r"Samples: (\d+)", rest)
        if sm:
            values.append(("Samples", float(sm.group(1))))
        for pol, lag in re.findall(r"Policy #(\d+) lag: \(([^)]*)\)", rest):
            for stat, v in re.findall(r"(\w+): ([^,\s]+)", lag):
                values.append((f"Policy #{pol} lag ({stat})", _number(v)))
    else:
        rm = _REWARD.match(msg)
        assert rm is not None
        for pol, v in re.findall(r"\((\d+), '([^']*)'\)", rm.group("pairs")):
            values.append((f"Avg episode reward (policy {pol})", _number(v)))
    for name, v in values:
        if head.ts is None:
            probs.untimed_samples += 1
        elif v is None or math.isnan(v) or math.isinf(v):
            probs.nan_samples += 1
        else:
            run.samples.append((name, head.ts, v))


# ---------------------------------------------------------------------------------- timeline

def _agg(node: _Node, flagged: list[int]) -> AggNode:
    children = [_agg(c, flagged) for c in node.children]
    args: dict[str, Any] = {}
    if node.value is None:
        args["value_text"] = node.text
        value_ns = 0
    else:
        args["value_s"] = node.value
        value_ns = seconds_to_ns(node.value) if node.value > 0 and math.isfinite(node.value) else 0
    dur = value_ns
    kids = sum(c.dur for c in children)
    if kids > value_ns:
        args["children_exceed_total"] = True
        args["drawn_as_sum_of_children"] = True
        dur = _group_dur(children)
        flagged[0] += 1
    return AggNode(node.name, dur, args, children)


def _group_dur(children: list[AggNode]) -> int:
    """A slice drawn as long as its children; 1 ns more when the last ones have zero length, so
    that viewers (which close a slice at its end) keep them inside it."""
    total = sum(c.dur for c in children)
    return total + 1 if children and children[-1].dur == 0 and total else total


def _rows(nodes: list[_Node], depth: int = 0) -> Iterator[list[Any]]:
    for n in nodes:
        yield [depth, n.name, n.value if n.value is not None else n.text]
        yield from _rows(n.children, depth + 1)


def _count(nodes: list[_Node]) -> int:
    return sum(1 + _count(n.children) for n in nodes)


def read(source: Source) -> Trace:
    text = source.read_text()
    probs = _Problems()
    runs = _parse(text, probs)
    if not any(r.reports for r in runs):
        if any(r.samples or r.collected for r in runs):
            pass   # counters only; said below
        else:
            raise TraceconvError(
                f"no profile report in this {WHAT}: no '<component> profile tree view:', "
                "'Profiling tree view:' or '... timing: key: value' lines (SF prints them when a run ends)")

    trace = Trace("sample-factory")
    trace.meta.synthesized = True
    timed = all(any(rep.head.ts is not None for rep in r.reports)
                or any(c["_ts"] is not None for c in r.collected)
                or r.samples for r in runs)
    trace.meta.clock = Clock.UNIX if timed else Clock.SYNTHETIC
    multi = len(runs) > 1
    tables: list[dict[str, Any]] = []
    runs_meta: list[dict[str, Any]] = []
    flagged = [0]
    order = 0
    synthetic_cursor = 0
    total_nodes = 0

    for k, run in enumerate(runs, 1):
        prefix = f"run {k} · " if multi else ""
        # display names: components reported more than once in a run get their pid or a number
        seen: dict[tuple[str, str], int] = {}
        for rep in run.reports:
            seen[(rep.kind, rep.component)] = seen.get((rep.kind, rep.component), 0) + 1
        nth: dict[tuple[str, str], int] = {}
        for rep in run.reports:
            key = (rep.kind, rep.component)
            nth[key] = nth.get(key, 0) + 1
            if seen[key] > 1:
                rep.display = (f"{rep.component} (pid {rep.head.pid})" if rep.head.pid is not None
                               else f"{rep.component} #{nth[key]}")
            else:
                rep.display = rep.component

        roots = []
        for rep in run.reports:
            root = AggNode(rep.display, 0, {}, [_agg(n, flagged) for n in rep.nodes])
            root.dur = _group_dur(root.children)
            roots.append(root)
            total_nodes += _count(rep.nodes)
            _check_order(rep.nodes, probs)

        wall = 0
        for rep, root in zip(run.reports, roots):
            if rep.kind == "tree" and rep.component in ("Runner", "Profiling"):
                for c in root.children:
                    if c.name == "main_loop":
                        wall = max(wall, c.dur)
        if not wall:
            wall = max((r.dur for r in roots), default=0)
        end: int | None = None
        for c in run.collected:
            if c["_ts"] is not None:
                end = c["_ts"] if end is None else max(end, c["_ts"])
        if end is None:
            stamps = [rep.head.ts for rep in run.reports if rep.head.ts is not None]
            end = max(stamps) if stamps else None
        if trace.meta.clock is Clock.UNIX:
            if end is None:   # counters only
                end = max(s[1] for s in run.samples)
            start = end - wall
        else:
            start = synthetic_cursor
            end = start + wall
            synthetic_cursor = end + 1_000_000_000

        for rep, root in zip(run.reports, roots):
            order += 1
            pname = prefix + rep.display
            proc = trace.process(("sample-factory", k, rep.display), pname, synthetic=True)
            proc.sort_index = order
            if rep.head.pid is not None:
                proc.labels.append(f"pid {rep.head.pid}")
            args: dict[str, Any] = {"component": rep.component, "header": rep.header,
                                    "sum_of_top_level_timers_s": sum(c.dur for c in root.children) / 1e9}
            if multi:
                args["run"] = k
            if rep.head.stamp:
                args["logged_at"] = rep.head.stamp
            if rep.head.pid is not None:
                args["pid"] = rep.head.pid
            if rep.head.no:
                args["log_line"] = rep.head.no
            if rep.details:
                args["details"] = rep.details
            if rep.kind == "flat":
                args["flat"] = True   # SF 1.x Timing.__str__: one level, keys may overlap in time
            if not rep.nodes:
                args["empty_tree"] = True
            root.args = args
            lay_out(trace, root, proc, "profile tree" if rep.kind == "tree" else "timing", start, cat="timer")
            tables.append({"name": pname, "component": rep.component, "run": k, "unit": "s",
                           "columns": ["depth", "name", "value"], "rows": list(_rows(rep.nodes))})

        # counters: on the run's Runner process (SF's runner logs them)
        if run.samples or run.collected:
            order += 1
            proc = _runner_process(trace, k, prefix, order)
            for name, ts, v in run.samples:
                tr = trace.track(TrackKind.COUNTER, name, proc)
                trace.add_counter(tr.id, ts, v)
            for c in run.collected:
                ts = c["_ts"] if trace.meta.clock is Clock.UNIX and c["_ts"] is not None else end
                for pol, n in c["env_steps"].items():
                    label = "all policies" if pol == "all" else f"policy {pol}"
                    tr = trace.track(TrackKind.COUNTER, f"Collected env steps ({label})", proc)
                    trace.add_counter(tr.id, ts, float(n))
                if c["fps"] is not None and math.isfinite(c["fps"]):
                    tr = trace.track(TrackKind.COUNTER, "FPS (Collected)", proc)
                    trace.add_counter(tr.id, ts, c["fps"])
        rm: dict[str, Any] = {"run": k, "components": [rep.display for rep in run.reports]}
        if run.collected:
            last = run.collected[-1]
            rm["collected_env_steps"] = last["env_steps"]
            rm["fps"] = last["fps"]
            for key in ("logged_at", "note"):
                if key in last:
                    rm[key] = last[key]
        if run.samples:
            rm["counter_samples"] = len(run.samples)
        runs_meta.append(rm)

    trace.meta.extra = {
        "producer": "Sample Factory",
        "sample_factory": {"runs": runs_meta},
        "summary_tables": tables,
    }
    if trace.meta.clock is Clock.UNIX:
        trace.meta.extra["sample_factory"]["log_time_zone"] = "none in the log; read as UTC"
        trace.diagnostics.warn(WarningCode.NOTE, "Sample Factory log times carry no time zone: "
                               "they were read as UTC")
    _warn(trace, probs, flagged[0], runs)
    return trace


def _runner_process(trace: Trace, k: int, prefix: str, order: int) -> Process:
    key = ("sample-factory", k, "Runner")
    proc = trace.process(key, prefix + "Runner", synthetic=True)
    if proc.sort_index is None:
        proc.sort_index = order
    return proc


def _warn(trace: Trace, probs: _Problems, flagged: int, runs: list[_Run]) -> None:
    d = trace.diagnostics
    if flagged:
        d.warn(WarningCode.CHILDREN_EXCEED_PARENT,
               "timers printed smaller than the sum of their children (SF timeit keeps only the last "
               "duration): drawn as long as their children, printed value in args value_s, flagged "
               "children_exceed_total", flagged)
    if probs.bad_numbers:
        d.warn(WarningCode.DROPPED_EVENT, "timer values that are not numbers: kept with zero length, "
               "the text in args value_text", probs.bad_numbers)
    if probs.bad_indent:
        d.warn(WarningCode.NOTE, "tree view lines with an indentation that is not two spaces per level "
               "(attached to the nearest enclosing timer)", probs.bad_indent)
    if probs.out_of_order:
        d.warn(WarningCode.NOTE, "tree view timers without children printed after a sibling with "
               "children (not tree_str() order; kept where they appear)", probs.out_of_order)
    if probs.empty_trees:
        d.warn(WarningCode.TRUNCATED_INPUT, "tree view headers with no tree lines after them "
               "(kept as empty components)", probs.empty_trees)
    if probs.cut_last_line:
        d.warn(WarningCode.TRUNCATED_INPUT, "the log ends without a newline inside a tree view: "
               "its last line may be cut short")
    if probs.nan_samples:
        d.warn(WarningCode.DROPPED_EVENT, "Fps/reward values that are nan or inf in the log "
               "(no counter sample)", probs.nan_samples)
    if probs.too_deep:
        d.warn(WarningCode.CLAMPED_VALUE, f"tree view lines indented more than {MAX_TREE_DEPTH} levels "
               f"were read as children of the timer at level {MAX_TREE_DEPTH}", probs.too_deep)
    if probs.bad_stamps:
        d.warn(WarningCode.DROPPED_EVENT, "log lines whose time is not a date (e.g. month 13): read "
               "as lines without a time", probs.bad_stamps)
    if probs.untimed_samples:
        d.warn(WarningCode.DROPPED_EVENT, "Fps/reward lines without a log time (no counter sample)",
               probs.untimed_samples)
    if not any(r.reports for r in runs):
        d.warn(WarningCode.NOTE, "the log has no profile report (no tree view or timing line): "
               "only its Fps/Collected counters were converted")
    elif runs and runs[-1].reports and not runs[-1].collected:
        d.warn(WarningCode.NOTE, "the last run has no 'Collected ..., FPS' line (the log may be cut short)")
