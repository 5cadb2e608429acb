"""What in a profile would hurt in a viewer (``traceconv validate``), without converting it.

Each check is a :class:`Finding` with a severity: ``problem`` (the viewer will hide, cut,
merge or misplace something, or will not load the file), ``note`` (a known quirk of the
producer: harmless, or repaired by traceconv's outputs) or ``info``.  Only problems make
``traceconv validate`` exit 1.  Each finding names a few of the events behind it
(``examples``: name, time from the first event of its clock, thread).  The known quirks:

* PyTorch/Kineto (and Composer's torch traces): flow events whose other end is not in the file
  (a launch before the profiled window, a kernel after it, sync flows): viewers skip them;
  Kineto's pid -1 and string pids;
* MXNet: 64-bit hashes as pids/tids (traceconv's outputs give each its own number);
* Sample Factory: ``nan``/``inf`` FPS and reward lines printed before the first window is full;
* Composer: its markers' begin and end events cut by the profiling window's edges.

The checks:

* unmatched B/E events, flows with a missing end, events a viewer drops (unknown phases,
  async events without an id), truncated input -- as the reader counted them;
* slices that overlap on one thread without nesting (Perfetto moves them to an overflow
  track or, before v57, drops them; chrome://tracing draws them wrongly);
* negative durations, and absurd ones (longer than a week);
* events out of time order within their thread in the file (viewers sort them, so this is
  information, but a streaming consumer would not);
* timestamps on mixed time bases (two clusters more than 30 days apart: relative and
  absolute times in one file);
* pids/tids outside 0..2^31-1 (Perfetto's JSON importer turns anything outside
  0..2^32-1 into 0, merging processes);
* size against the viewers' limits: chrome://tracing fails beyond about 256 MB of JSON or
  about 1M events; a Perfetto UI tab has about 2 GB of memory (estimated here at 160 bytes
  per event and 45 per args value once loaded, as trace_processor holds them).
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import numpy as np
import orjson

from .api import PathLike, load
from . import viewers
from .errors import WarningCode, clip
from .io import GZIP_ERRORS, Source, open_source
from .model.layout import MAX_DEPTH, nest
from .model import Trace
from .readers.chrome.reader import time_ns
from .readers.chrome.stream import SCAN, BlockScanner, _ChunkFailure, _head_events, repair_utf8

ABSURD_NS = 7 * 24 * 3600 * 10**9
TIME_BASE_GAP_NS = 30 * 24 * 3600 * 10**9

PROBLEM, NOTE, INFO = "problem", "note", "info"
EXAMPLES = 3
AGGREGATE = ("mlagents", "mxnet-stats", "megengine-static", "sample-factory")
_FROM_READER = {
    WarningCode.UNMATCHED_BEGIN: ("unmatched B/E", PROBLEM),
    WarningCode.UNMATCHED_END: ("unmatched B/E", PROBLEM),
    WarningCode.UNRESOLVED_FLOW: ("flows with a missing end", PROBLEM),
    WarningCode.DROPPED_EVENT: ("events a viewer cannot show", PROBLEM),
    WarningCode.UNKNOWN_PHASE: ("events a viewer cannot show", PROBLEM),
    WarningCode.TRUNCATED_INPUT: ("truncated input", PROBLEM),
    WarningCode.CLAMPED_VALUE: ("values out of range", PROBLEM),
    WarningCode.REMAPPED_ID: ("pids/tids out of range", PROBLEM),
    WarningCode.CHILDREN_EXCEED_PARENT: ("aggregate tree", INFO),
    WarningCode.NOTE: ("notes", INFO),
}


# (format, warning code, a word of the reader's message or "") -> why it is a known quirk (a note)
QUIRKS: dict[tuple[str, WarningCode, str], str] = {
    **{(fmt, WarningCode.UNRESOLVED_FLOW, ""): "PyTorch's profiler writes flow ends whose other end is not "
       "in the file (a launch before the profiled window, a kernel after it, sync flows); viewers skip them"
       for fmt in ("kineto", "composer")},
    **{(fmt, WarningCode.REMAPPED_ID, ""): "Kineto writes pid -1 (and names as pids) for its own tracks; "
       "traceconv's outputs number them" for fmt in ("kineto", "composer")},
    ("mxnet", WarningCode.REMAPPED_ID, ""): "MXNet writes 64-bit hashes as pids/tids (a viewer reading the raw "
                                             "file may merge them); traceconv's outputs give each its own number",
    ("sample-factory", WarningCode.DROPPED_EVENT, "nan"): "Sample Factory prints nan FPS/reward until its first "
                                                          "measurement window is full: nothing to draw",
    **{("composer", code, "expected in Composer"): "Composer's profiler cuts its markers at the profiling "
       "window's edges (the end of one opened before it, the begin of one still open after it); "
       "traceconv's outputs drop such an end and close such a begin at the trace's end"
       for code in (WarningCode.UNMATCHED_BEGIN, WarningCode.UNMATCHED_END)},
}


def _quirk(fmt: str, code: WarningCode, message: str) -> str | None:
    for (f, c, word), why in QUIRKS.items():
        if f == fmt and c is code and word in message:
            return why
    return None


@dataclass
class Finding:
    check: str
    severity: str
    count: int
    message: str
    examples: list[str] = field(default_factory=list)   # a few events behind it: name, time, thread


@dataclass
class Report:
    path: str
    format: str
    events: int
    findings: list[Finding] = field(default_factory=list)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == PROBLEM]

    @property
    def notes(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == NOTE]

    def to_json(self) -> bytes:
        return orjson.dumps({"path": self.path, "format": self.format, "events": self.events,
                             "clean": not self.problems, "findings": [asdict(f) for f in self.findings]},
                            option=orjson.OPT_INDENT_2)


def _content_size(source: Source) -> int:
    """Bytes a viewer has to load: the decompressed size of a gzip file (from its trailer)."""
    size = source.size()
    if not source.gzipped:
        return size
    with source.open_raw() as f:
        f.seek(-4, os.SEEK_END)
        isize = struct.unpack("<I", f.read(4))[0]
    return isize if isize >= size else size  # the trailer is mod 2^32; never smaller than the file


def _time_bases(ts: np.ndarray) -> tuple[int, int, int] | None:
    """(events before the gap, events after, gap ns) if the times form two far-apart clusters."""
    if len(ts) < 2:
        return None
    s = np.sort(ts)
    gaps = np.diff(s)
    k = int(np.argmax(gaps))
    if gaps[k] > TIME_BASE_GAP_NS:
        return k + 1, len(s) - k - 1, int(gaps[k])
    return None


_NO_TEXT = msgspec.Raw(b"")


# (any scalar: a field of another type, `"ph": null` or `"pid": true`, failed the decoding of the
# whole file, and every finding lost its examples and the order count)
_Scalar = str | bool | int | float | None


class _Timed(msgspec.Struct, gc=False):
    ph: _Scalar = ""
    ts: _Scalar = None
    pid: _Scalar = None
    tid: _Scalar = None
    name: _Scalar = None
    cat: _Scalar = None
    id: _Scalar = None
    dur: msgspec.Raw = _NO_TEXT        # (its text, read as the reader reads it: :func:`_negative`)
    # (kept as text, read for metadata events only: a dict of values per event took most of the
    # memory, 1.3 GB for the bench's 1M Kineto events; any value, where an args that was not an
    # object failed the whole file's decoding and lost its examples)
    args: msgspec.Raw = _NO_TEXT


_EVENTS = msgspec.json.Decoder(list[_Timed])
_DOC = msgspec.json.Decoder(dict[str, msgspec.Raw])     # (a document's top level, a metadata event's args)


def _decode_events(data: bytes) -> list[_Timed] | None:
    try:
        h = data.lstrip()[:1]
        if h == b"[":
            events = _EVENTS.decode(data)
        else:
            raw = _DOC.decode(data).get("traceEvents")
            if raw is None:
                return None
            events = _EVENTS.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None                  # (values nested thousands deep: the reader's counts stay, without examples)
    # a raw value is a view of the document's text, which it keeps alive: the metadata events'
    # args and the negative durations are copied, the others dropped, so the text can go (279 MB
    # for 1M Kineto events)
    for e in events:
        if e.args:
            e.args = msgspec.Raw(bytes(e.args)) if e.ph == "M" else _NO_TEXT
        if len(e.dur):
            e.dur = msgspec.Raw(bytes(e.dur)) if _negative(e) else _NO_TEXT
    return events


def _num(x: object) -> float | None:
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):      # (an int past a double's range)
        return None
    return v if v == v and abs(v) != float("inf") else None


KNOWN_PHASES = set("BEXIiCbenSTpFsftMPOND()RcVvAGLWwxy")


CLOCK_GAP_US = TIME_BASE_GAP_NS / 1000


def clock_starts(times: "list[float] | np.ndarray") -> list[float]:
    """The first of each group of ``times`` (µs) that lie more than 30 days from the group before:
    a file of relative and Unix times (Composer's) has two clocks, and an example's time is given
    from its own clock's first event, not as +1,790,857,026,081 ms."""
    t = np.sort(np.asarray(times, dtype=np.float64))
    return t[np.concatenate(([0], np.flatnonzero(np.diff(t) > CLOCK_GAP_US) + 1))].tolist() if len(t) else []


class _Scan:
    """Examples of the events behind the reader's counts, from the raw Chrome JSON events: all
    of them, or those :func:`_scan_columns` picks (the metadata events and those of the kinds
    behind ``CODES``), with ``starts`` the first time of each clock (µs, :func:`clock_starts`) of
    all of them."""

    CODES = frozenset({WarningCode.UNRESOLVED_FLOW, WarningCode.REMAPPED_ID, WarningCode.UNMATCHED_BEGIN,
                       WarningCode.UNMATCHED_END, WarningCode.UNKNOWN_PHASE, WarningCode.CLAMPED_VALUE})

    def __init__(self, events: list[_Timed], starts: list[float] | None = None, codes: "set[WarningCode] | None" = None):
        self.threads: dict[tuple, str] = {}
        self.procs: dict[object, str] = {}
        if starts is None:
            starts = clock_starts([t for e in events if e.ph != "M" and (t := _num(e.ts)) is not None])
        self.starts = starts or [0.0]
        self.examples: dict[WarningCode, list[str]] = {}
        for e in events:
            if e.ph == "M" and e.args:
                try:
                    nm = _DOC.decode(e.args).get("name")
                    label = msgspec.json.decode(nm) if nm is not None else None
                except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                    label = None
                if isinstance(label, str):
                    if e.name == "thread_name":
                        self.threads[(e.pid, e.tid)] = label
                    elif e.name == "process_name":
                        self.procs[e.pid] = label
        # (only the checks of the codes the reader warned of: the others' examples are not shown)
        codes = self.CODES if codes is None else codes
        if WarningCode.UNRESOLVED_FLOW in codes:
            self._flows(events)
        if WarningCode.REMAPPED_ID in codes:
            self._ids(events)
        if codes & {WarningCode.UNMATCHED_BEGIN, WarningCode.UNMATCHED_END}:
            self._begin_end(events)
        if WarningCode.UNKNOWN_PHASE in codes:
            self._phases(events)
        if WarningCode.CLAMPED_VALUE in codes:
            self._durations(events)

    def where(self, e: _Timed) -> str:
        t = _num(e.ts)
        start = self.starts[max(bisect.bisect_right(self.starts, t) - 1, 0)] if t is not None else 0.0
        # (signed: a metadata event may come before its clock's first timed event; + 0.0 makes a
        # -0.0, an event at -0.0 µs on a clock starting at 0, "+0.000", not "+-0.000")
        when = f"{(t - start) / 1e3 + 0.0:+.3f} ms" if t is not None else "no time"
        thread = self.threads.get((e.pid, e.tid))
        who = f"pid {clip(str(e.pid))} tid {clip(str(e.tid))}" + (f" '{clip(str(thread))}'" if thread else "")
        return f"'{clip('' if e.name is None else str(e.name))}' ({clip(str(e.ph))}) at {when} on {who}"

    def add(self, code: WarningCode, text: str) -> None:
        got = self.examples.setdefault(code, [])
        if len(got) < EXAMPLES:
            got.append(text)

    def full(self, code: WarningCode) -> bool:
        """Whether ``code`` has its examples: the checks stop there (a real 54 MB Kineto trace has
        20,083 flows without an end, and naming each took half of validate's time)."""
        return len(self.examples.get(code, ())) >= EXAMPLES

    def _flows(self, events: list[_Timed]) -> None:
        groups: dict[tuple, list[_Timed]] = {}
        for e in events:
            if e.ph in ("s", "t", "f") and e.id is not None:
                groups.setdefault((e.cat, e.id), []).append(e)
        for (cat, fid), es in groups.items():
            if self.full(WarningCode.UNRESOLVED_FLOW):
                break
            phases = {e.ph for e in es}
            if "s" not in phases or "f" not in phases:
                missing = "start" if "s" not in phases else "end"
                self.add(WarningCode.UNRESOLVED_FLOW,
                         f"flow {clip(str(cat))} id {clip(str(fid))}: {self.where(es[0])}, no {missing}")

    def _ids(self, events: list[_Timed]) -> None:
        seen: set = set()
        for e in sorted(events, key=lambda e: e.ph == "M"):     # timed events first
            for what, v in (("pid", e.pid), ("tid", e.tid)):
                if isinstance(v, (int, float)) and not 0 <= v < 2**31 and (what, v) not in seen:
                    if self.full(WarningCode.REMAPPED_ID):
                        return
                    seen.add((what, v))
                    self.add(WarningCode.REMAPPED_ID, f"{what} {clip(str(v))}: {self.where(e)}")

    def _begin_end(self, events: list[_Timed]) -> None:
        stacks: dict[tuple, list[_Timed]] = {}
        order = sorted((e for e in events if e.ph in ("B", "E") and _num(e.ts) is not None),
                       key=lambda e: _num(e.ts))  # type: ignore[arg-type, return-value]
        for e in order:
            st = stacks.setdefault((e.pid, e.tid), [])
            if e.ph == "B":
                st.append(e)
            elif st:
                st.pop()
            elif not self.full(WarningCode.UNMATCHED_END):
                self.add(WarningCode.UNMATCHED_END, f"an end without a begin: {self.where(e)}")
        for st in stacks.values():
            for e in st:
                if self.full(WarningCode.UNMATCHED_BEGIN):
                    return
                self.add(WarningCode.UNMATCHED_BEGIN, f"a begin without an end: {self.where(e)}")

    def _phases(self, events: list[_Timed]) -> None:
        for e in events:
            if e.ph not in KNOWN_PHASES:
                if self.full(WarningCode.UNKNOWN_PHASE):
                    return
                self.add(WarningCode.UNKNOWN_PHASE, f"unknown phase: {self.where(e)}")

    def _durations(self, events: list[_Timed]) -> None:
        for e in events:
            if _negative(e):
                if self.full(WarningCode.CLAMPED_VALUE):
                    return
                dur = clip(bytes(e.dur).decode(errors="replace"))
                self.add(WarningCode.CLAMPED_VALUE, f"a negative 'dur' ({dur} µs) given 0: {self.where(e)}")


def _negative(e: _Timed) -> bool:
    """An X event whose 'dur' the reader reads as negative (and gives 0)."""
    if e.ph != "X" or not len(e.dur):
        return False
    d = bytes(e.dur)
    return b"-" in d and (ns := time_ns(d)) is not None and ns < 0      # (no sign: not negative)


_NAN_LINE = re.compile(r"\b(nan|inf)\b", re.IGNORECASE)


def _log_examples(text: str) -> list[str]:
    """Sample Factory: the log lines with a nan/inf FPS or reward."""
    got = []
    for n, line in enumerate(text.splitlines(), 1):
        if _NAN_LINE.search(line) and re.search(r"fps|reward", line, re.IGNORECASE):
            got.append(f"line {n}: {line.strip()[:120]}")
            if len(got) == EXAMPLES:
                break
    return got


UNTIMED = ("M", "C", "s", "t", "f")           # phases out_of_order passes over
_BYTES = {name: np.frombuffer(text.encode(), np.uint8) for name, text in
          (("untimed", "".join(UNTIMED)), ("flow", "stf"), ("begin_end", "BE"), ("known", "".join(sorted(KNOWN_PHASES))))}
_PICKED_PHASES = ("M", "s", "t", "f", "B", "E")  # (what the examples may need, at most)
_NO_ID = np.iinfo(np.int64).min                # a pid or tid the event does not give (None)


@dataclass
class _Columns:
    """What :func:`_scan_columns` found: :func:`out_of_order`'s count, and for the examples (when
    it was given codes) the first time of each clock (µs, :func:`clock_starts`) and the events they
    need, in file order."""
    late: int
    starts: list[float]
    picked: list[_Timed]


class _ColumnPass:
    """One pass of the compiled scanner over an event array, a block at a time (the reader's
    scanner: an event of the plain shape is columns, any other is decoded from its own text):
    each timed event's thread and time, for :func:`out_of_order`, and the events picked for the
    examples.  A column per event where decoding every event made an object of each (~410 bytes
    an event: 790 MB for the bench's 1M-event trace of 279 MB)."""

    def __init__(self, codes: set[WarningCode]):
        self.codes = codes
        self.strings = SCAN.Strings()
        self.pairs = SCAN.Pairs()
        self.pair_key = np.zeros(0, np.int64)       # the scanner's pair id -> the thread's key
        self.keys: dict[tuple, int] = {}             # (pid, tid) as the events give them -> key
        self.key_parts: list[np.ndarray] = []        # per batch, of its timed events in file order:
        self.ns_parts: list[np.ndarray] = []         # the time in ns (a plain event's),
        self.slow_parts: list[np.ndarray] = []       # and, for a decoded event, its time in µs (else NaN)
        self.stamped: list[np.ndarray] = []           # the times (ns) of the plain events but metadata,
        self.stamped_us: list[float] = []            # and of the decoded ones (µs): for the clocks
        self.picked: list[_Timed] = []

    def key(self, pid: object, tid: object) -> int:
        return self.keys.setdefault((pid, tid), len(self.keys))

    def take(self, buf: bytes, rows: Any, n: int) -> None:
        """A batch of ``n`` scanned rows of ``buf``."""
        fl, ph = rows.flags, rows.ph
        slow = (fl & SCAN.SLOW) != 0
        fast_ts = ~slow & ((fl & SCAN.F_TS) != 0)
        timed = fast_ts & ~np.isin(ph, _BYTES["untimed"])
        if self.codes:
            self.stamped.append(rows.ts[fast_ts & (ph != ord("M"))])
        at = np.flatnonzero(timed)
        pid = np.where((fl[at] & SCAN.F_PID) != 0, rows.pid[at], _NO_ID)
        tid = np.where((fl[at] & SCAN.F_TID) != 0, rows.tid[at], _NO_ID)
        ids, new = self.pairs.ids(pid, tid)
        if new:
            got = [self.key(None if p == _NO_ID else p, None if t == _NO_ID else t) for p, t in new]
            self.pair_key = np.concatenate([self.pair_key, np.array(got, np.int64)])
        keys, ns, us = self.pair_key[ids], rows.ts[at], np.full(len(at), np.nan)
        wanted = slow.copy()
        if self.codes:
            wanted |= ph == ord("M")
            if WarningCode.UNRESOLVED_FLOW in self.codes:
                wanted |= np.isin(ph, _BYTES["flow"])
            if self.codes & {WarningCode.UNMATCHED_BEGIN, WarningCode.UNMATCHED_END}:
                wanted |= np.isin(ph, _BYTES["begin_end"])
            if WarningCode.UNKNOWN_PHASE in self.codes:
                wanted |= ~np.isin(ph, _BYTES["known"])
            if WarningCode.CLAMPED_VALUE in self.codes:
                wanted |= (ph == ord("X")) & ((fl & SCAN.F_DUR) != 0) & (rows.dur < 0)
            if WarningCode.REMAPPED_ID in self.codes:
                for col, flag in ((rows.pid, SCAN.F_PID), (rows.tid, SCAN.F_TID)):
                    wanted |= ((fl & flag) != 0) & ((col < 0) | (col >= 2**31))
        picked = np.flatnonzero(wanted)
        if len(picked):
            events = _decode_events(b"[" + b",".join(buf[rows.start[r]:rows.end[r]] for r in picked.tolist()) + b"]")
            if events is None:
                raise _ChunkFailure
            extra = []                                    # the decoded events' times, in row order
            for r, e in zip(picked.tolist(), events):
                if slow[r]:
                    t = _num(e.ts)
                    if t is not None and e.ph != "M" and self.codes:
                        self.stamped_us.append(t)
                    if t is not None and e.ph not in UNTIMED:
                        extra.append((r, self.key(e.pid, e.tid), t))
                    if not (self.codes and (e.ph in _PICKED_PHASES or e.ph not in KNOWN_PHASES or
                                            _out_of_range(e.pid) or _out_of_range(e.tid) or _negative(e))):
                        continue                          # (decoded for its time only)
                self.picked.append(e)
            if extra:
                rs = np.array([x[0] for x in extra], np.int64)
                order = np.argsort(np.concatenate([at, rs]), kind="stable")
                keys = np.concatenate([keys, np.array([x[1] for x in extra], np.int64)])[order]
                ns = np.concatenate([ns, np.zeros(len(extra), np.int64)])[order]
                us = np.concatenate([us, np.array([x[2] for x in extra])])[order]
        self.key_parts.append(keys)
        self.ns_parts.append(ns)
        self.slow_parts.append(us)

    def result(self) -> _Columns:
        keys = np.concatenate(self.key_parts or [np.zeros(0, np.int64)])
        ns = np.concatenate(self.ns_parts or [np.zeros(0, np.int64)])
        us = np.concatenate(self.slow_parts or [np.zeros(0)])
        order = np.argsort(keys, kind="stable")          # each thread's events, in file order
        keys, ns, us = keys[order], ns[order], us[order]
        same = keys[1:] == keys[:-1]
        decoded = ~np.isnan(us)
        plain = same & ~decoded[1:] & ~decoded[:-1]
        late = int((plain & (ns[1:] < ns[:-1])).sum())
        for i in np.flatnonzero(same & (decoded[1:] | decoded[:-1])).tolist():
            # a decoded event beside another: compared as out_of_order compares them, in µs
            prev = float(us[i]) if decoded[i] else int(ns[i]) / 1000
            now = float(us[i + 1]) if decoded[i + 1] else int(ns[i + 1]) / 1000
            late += now < prev
        return _Columns(late, self.starts(), self.picked)

    def starts(self) -> list[float]:
        """:func:`clock_starts` of every time, each start exact: the clocks are told apart on
        doubles (30 days apart), a plain event's time is then its ns / 1000 rounded once, as the
        double of its text is."""
        ns = np.sort(np.concatenate(self.stamped or [np.zeros(0, np.int64)]))
        nsu, us = ns / 1000, sorted(self.stamped_us)
        rough = clock_starts(np.concatenate([nsu, np.array(us, np.float64)]))
        got = []
        for k, lo in enumerate(rough):
            hi = rough[k + 1] if k + 1 < len(rough) else float("inf")
            # (each clock's least time: its plain events' exactly, its decoded events' as read)
            i = int(np.searchsorted(nsu, lo - CLOCK_GAP_US / 2))
            plain = [int(ns[i]) / 1000] if i < len(ns) and nsu[i] < hi - CLOCK_GAP_US / 2 else []
            j = bisect.bisect_left(us, lo - CLOCK_GAP_US / 2)
            decoded = [us[j]] if j < len(us) and us[j] < hi - CLOCK_GAP_US / 2 else []
            got.append(min(plain + decoded))
        return got


def _out_of_range(v: object) -> bool:
    return isinstance(v, (int, float)) and not 0 <= v < 2**31


def _scan_columns(f: BinaryIO, codes: set[WarningCode], block: int = 1 << 20) -> _Columns | None:
    """:func:`out_of_order`, the clocks and the events behind the examples of ``codes``, in one
    pass of the compiled scanner over a document read from ``f`` a block at a time (by the
    reader's :class:`BlockScanner`: two blocks scanned at once); None where it cannot read it (a
    document of another shape, text that is not UTF-8 or not JSON, a truncated file): the caller
    then decodes the whole document."""
    cols = _ColumnPass(codes)
    try:
        with f:
            blocks = iter(lambda: f.read(block), b"")
            head, found = _head_events(blocks)
            if found is None:
                return None
            scanner = BlockScanner(itertools.chain([head[found[2]:]], blocks), cols.strings)
            del head
            try:
                while True:
                    item = scanner.get()
                    if item[0] == "rows":
                        for buf, rows, n, _, _ in item[1]:
                            cols.take(buf, rows, n)
                        del item                         # (its blocks' text, before the next)
                    elif item[0] == "end":
                        return cols.result()
                    else:
                        return None                      # not JSON, or truncated (the reader said so)
            finally:
                scanner.close()
    except (_ChunkFailure, ValueError, *GZIP_ERRORS):
        return None


def out_of_order(events: list[_Timed]) -> int:
    """How many timed events come earlier than the one before them on the same thread, in file
    order (``events``: the document's, as :func:`_decode_events` gives them)."""
    last: dict[tuple, float] = {}
    n = 0
    for e in events:
        if e.ph in ("M", "C", "s", "t", "f") or e.ts is None:
            continue
        t = _num(e.ts)
        if t is None:
            continue
        key = (e.pid, e.tid)
        prev = last.get(key)
        if prev is not None and t < prev:
            n += 1
        last[key] = t
    return n


def _slice_examples(trace: Trace, idx: "np.ndarray | list[int]", t0: int) -> list[str]:
    s = trace.slices
    got = []
    for i in list(idx)[:EXAMPLES]:
        i = int(i)
        track = trace.tracks[s.track[i]]
        base = trace.tracks[track.parent] if track.parent is not None else track
        got.append(f"'{trace.strings[s.name[i]]}' at +{(s.ts[i] - t0) / 1e6:.3f} ms on '{trace.track_label(base)}'"
                   f" ({s.dur[i] / 1e6:.3f} ms)")
    return got


def check_trace(trace: Trace, path: Path | None = None) -> list[Finding]:
    findings: list[Finding] = []
    fmt = trace.meta.source_format
    scan: _Scan | None = None
    log_examples: list[str] = []
    source = open_source(path) if path is not None else None
    json_events = source is not None and fmt not in AGGREGATE and source.head.lstrip()[:1] in (b"{", b"[")
    late: int | None = None               # out_of_order's count
    if json_events:
        codes = {w.code for w in trace.diagnostics.warnings} & _Scan.CODES
        cols = _scan_columns(source.open(), codes)      # type: ignore[union-attr]
        if cols is not None:
            late = cols.late
            if codes:
                scan = _Scan(cols.picked, cols.starts, codes)
        else:
            # what is not UTF-8 becomes '?' as the reader makes it (the names in the examples are
            # the ones the conversion shows); valid text is checked, not copied
            data, _ = repair_utf8(source.read_bytes())   # type: ignore[union-attr]
            raw = _decode_events(data)
            del data
            if raw is not None:
                scan = _Scan(raw, codes=codes)
                late = out_of_order(raw)
            del raw
    elif source is not None and fmt == "sample-factory" and trace.diagnostics:
        log_examples = _log_examples(source.read_text())

    grouped: dict[tuple[str, str], list] = {}
    why: dict[tuple[str, str], list[str]] = {}
    for w in trace.diagnostics.warnings:
        check, sev = _FROM_READER.get(w.code, ("other", INFO))
        quirk = _quirk(fmt, w.code, w.message) if sev == PROBLEM else None
        if quirk:
            sev = NOTE
            why.setdefault((check, sev), []).append(f"a known quirk: {quirk}")
        grouped.setdefault((check, sev), []).append(w)
    for (check, sev), ws in grouped.items():
        examples: list[str] = []
        for w in ws:
            if scan is not None:
                examples += scan.examples.get(w.code, [])
            elif fmt == "sample-factory" and "nan" in w.message:
                examples += log_examples
        msg = "; ".join(dict.fromkeys([w.message for w in ws] + why.get((check, sev), [])))
        findings.append(Finding(check, sev, sum(w.count for w in ws), msg, list(dict.fromkeys(examples))[:EXAMPLES]))
    tr = trace.time_range()
    t0 = tr[0] if tr else 0

    moved, deep = nest(trace)      # (slices moved to overlap lanes, to depth lanes)
    s = trace.slices
    if deep:
        deep_tracks = np.array([t.id for t in trace.tracks if t.deep], dtype=np.int32)
        on_deep = np.flatnonzero(np.isin(np.frombuffer(s.track, dtype=np.int32), deep_tracks))
        findings.append(Finding("nesting too deep", PROBLEM, deep,
                                f"slices nested {MAX_DEPTH} levels deep or more (Perfetto drops them; "
                                "traceconv's outputs put them on 'depth' lanes): "
                                + _shown_tracks(sorted({trace.track_label(trace.tracks[t.parent]) for t in trace.tracks
                                                        if t.parent is not None and t.deep})),
                                _slice_examples(trace, on_deep, t0)))
    if moved:
        tracks = sorted({trace.track_label(trace.tracks[t.parent]) for t in trace.tracks
                         if t.parent is not None and t.lane and not t.deep})
        lane_tracks = np.array([t.id for t in trace.tracks if t.parent is not None and t.lane and not t.deep],
                               dtype=np.int32)
        on_lanes = np.flatnonzero(np.isin(np.frombuffer(s.track, dtype=np.int32), lane_tracks))
        findings.append(Finding("overlapping slices", PROBLEM, moved,
                                "slices overlap others on their thread without nesting (Perfetto moves them to "
                                "an overflow track or drops them; traceconv's outputs put them on 'overlap' "
                                "tracks): " + _shown_tracks(tracks),
                                _slice_examples(trace, on_lanes, t0)))
    if len(s):
        dur = np.frombuffer(s.dur, dtype=np.int64)
        neg = int((dur < 0).sum())
        if neg:
            findings.append(Finding("negative durations", PROBLEM, neg, "slices that end before they begin",
                                    _slice_examples(trace, np.flatnonzero(dur < 0), t0)))
        absurd = int((dur > ABSURD_NS).sum())
        if absurd:
            findings.append(Finding("absurd durations", PROBLEM, absurd, "slices longer than a week",
                                    _slice_examples(trace, np.flatnonzero(dur > ABSURD_NS), t0)))
    all_ts = np.concatenate([np.frombuffer(a, dtype=np.int64) for a in
                             (s.ts, trace.instants.ts, trace.counters.ts) if len(a)] or [np.zeros(0, np.int64)])
    tb = _time_bases(all_ts)
    if tb:
        examples = []
        if len(s):
            sts = np.frombuffer(s.ts, dtype=np.int64)
            order = np.argsort(sts, kind="stable")
            if len(order):
                examples = _slice_examples(trace, [order[0], order[-1]], t0)
        findings.append(Finding("mixed time bases", PROBLEM, min(tb[0], tb[1]),
                                f"timestamps form two groups {tb[2] / 86400e9:.0f} days apart ({tb[0]} and "
                                f"{tb[1]} events): relative and absolute times in one timeline?", examples))
    events = trace.event_count()
    if events > viewers.CHROME_MAX_EVENTS:
        findings.append(Finding("chrome://tracing limit", PROBLEM, events,
                                f"{events:,} events: chrome://tracing fails beyond about 1M events "
                                "(use the .pftrace output in ui.perfetto.dev)"))
    values = trace.slices.args.values_estimate() + trace.instants.args.values_estimate()
    need = events * viewers.PERFETTO_BYTES_PER_EVENT + values * viewers.PERFETTO_BYTES_PER_ARG
    sev = PROBLEM if need > viewers.PERFETTO_TAB_BYTES else INFO
    findings.append(Finding("Perfetto UI memory", sev, events,
                            f"about {need / 2**20:,.0f} MB once loaded ({events:,} events, ~{values:,} args "
                            f"values) of the ~2 GB a browser tab can use"
                            + (f"; open it through `trace_processor --httpd` ({viewers.LARGE_TRACES})"
                               if sev == PROBLEM else "")))
    if path is not None and source is not None:
        size = _content_size(source)
        if late:
            findings.append(Finding("events out of order", INFO, late,
                                    "events that come earlier than the one before them on their thread "
                                    "(Perfetto and chrome://tracing sort them; a streaming reader would not)"))
        if source.head.lstrip()[:1] in (b"{", b"[") and fmt != "sample-factory":   # SF log lines start with [
            sev = PROBLEM if size > viewers.CHROME_MAX_BYTES else INFO
            findings.append(Finding("chrome://tracing size", sev, size,
                                    f"{size / 2**20:,.1f} MB of JSON (chrome://tracing's limit is about 256 MB)"))
    return findings


def validate(path: PathLike, format: str | None = None) -> Report:
    """Check ``path`` for what would hurt in a viewer.

    >>> r = validate("examples/mlagents_timers.json")
    >>> r.format, [f.check for f in r.problems]
    ('mlagents', [])
    """
    from .remote import URL, as_url
    p = as_url(path)
    p = p if isinstance(p, URL) else Path(p)             # a URL (s3://...) stays one; file:// is a path
    trace = load(p, format)
    return Report(str(p), trace.meta.source_format, trace.event_count(), check_trace(trace, p))


__all__ = ["validate", "check_trace", "Report", "Finding"]


def _shown_tracks(names: list[str]) -> str:
    return ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
