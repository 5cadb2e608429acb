"""What in a profile would hurt in a viewer (``traceconv validate``), without converting it.

Each check is a :class:`Finding` with a severity: ``problem`` (the viewer will hide, cut,
merge or misplace something, or will not load the file) or ``info``.  The checks:

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
  about 1M events; a Perfetto UI tab has about 2 GB of memory (estimated here at 150 bytes
  per event once loaded).
"""

from __future__ import annotations

import os
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

import msgspec
import numpy as np
import orjson

from .api import PathLike, load
from .errors import WarningCode
from .io import open_source
from .layout import nest
from .model import Trace

CHROME_MAX_BYTES = 256 * 2**20
CHROME_MAX_EVENTS = 1_000_000
PERFETTO_TAB_BYTES = 2 * 2**30
PERFETTO_BYTES_PER_EVENT = 150
ABSURD_NS = 7 * 24 * 3600 * 10**9
TIME_BASE_GAP_NS = 30 * 24 * 3600 * 10**9

PROBLEM, INFO = "problem", "info"
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


@dataclass
class Finding:
    check: str
    severity: str
    count: int
    message: str


@dataclass
class Report:
    path: str
    format: str
    events: int
    findings: list[Finding] = field(default_factory=list)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == PROBLEM]

    def to_json(self) -> bytes:
        return orjson.dumps({"path": self.path, "format": self.format, "events": self.events,
                             "clean": not self.problems, "findings": [asdict(f) for f in self.findings]},
                            option=orjson.OPT_INDENT_2)


def _content_size(path: Path) -> int:
    """Bytes a viewer has to load: the decompressed size of a gzip file (from its trailer)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return size
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


class _Timed(msgspec.Struct, gc=False):
    ph: str = ""
    ts: float | int | str | None = None
    pid: int | float | str | None = None
    tid: int | float | str | None = None


_EVENTS = msgspec.json.Decoder(list[_Timed])
_DOC = msgspec.json.Decoder(dict[str, msgspec.Raw])


def out_of_order(data: bytes) -> int | None:
    """How many timed events come earlier than the one before them on the same thread, in file
    order; None if the events cannot be decoded this way (the reader has said why)."""
    try:
        h = data.lstrip()[:1]
        if h == b"[":
            events = _EVENTS.decode(data)
        else:
            raw = _DOC.decode(data).get("traceEvents")
            if raw is None:
                return None
            events = _EVENTS.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    last: dict[tuple, float] = {}
    n = 0
    for e in events:
        if e.ph in ("M", "C", "s", "t", "f") or e.ts is None:
            continue
        try:
            t = float(e.ts)
        except ValueError:
            continue
        key = (e.pid, e.tid)
        prev = last.get(key)
        if prev is not None and t < prev:
            n += 1
        last[key] = t
    return n


def check_trace(trace: Trace, path: Path | None = None) -> list[Finding]:
    findings: list[Finding] = []
    grouped: dict[tuple[str, str], list] = {}
    for w in trace.diagnostics.warnings:
        check, sev = _FROM_READER.get(w.code, ("other", INFO))
        grouped.setdefault((check, sev), []).append(w)
    for (check, sev), ws in grouped.items():
        findings.append(Finding(check, sev, sum(w.count for w in ws), "; ".join(w.message for w in ws)))

    before = {w.code: w.count for w in trace.diagnostics.warnings}
    nest(trace)
    moved = sum(w.count for w in trace.diagnostics.warnings if w.code is WarningCode.OVERLAP_LANES) \
        - before.get(WarningCode.OVERLAP_LANES, 0)
    if moved:
        tracks = sorted({trace.track_label(trace.tracks[t.parent]) for t in trace.tracks
                         if t.parent is not None and t.lane})
        findings.append(Finding("overlapping slices", PROBLEM, moved,
                                "slices overlap others on their thread without nesting (Perfetto moves them to "
                                "an overflow track or drops them; traceconv's outputs put them on 'overlap' "
                                "tracks): " + ", ".join(tracks[:5]) + (" ..." if len(tracks) > 5 else "")))
    s = trace.slices
    if len(s):
        dur = np.frombuffer(s.dur, dtype=np.int64)
        neg = int((dur < 0).sum())
        if neg:
            findings.append(Finding("negative durations", PROBLEM, neg, "slices that end before they begin"))
        absurd = int((dur > ABSURD_NS).sum())
        if absurd:
            findings.append(Finding("absurd durations", PROBLEM, absurd, "slices longer than a week"))
    all_ts = np.concatenate([np.frombuffer(a, dtype=np.int64) for a in
                             (s.ts, trace.instants.ts, trace.counters.ts) if len(a)] or [np.zeros(0, np.int64)])
    tb = _time_bases(all_ts)
    if tb:
        findings.append(Finding("mixed time bases", PROBLEM, min(tb[0], tb[1]),
                                f"timestamps form two groups {tb[2] / 86400e9:.0f} days apart ({tb[0]} and "
                                f"{tb[1]} events): relative and absolute times in one timeline?"))
    events = trace.event_count()
    if events > CHROME_MAX_EVENTS:
        findings.append(Finding("chrome://tracing limit", PROBLEM, events,
                                f"{events:,} events: chrome://tracing fails beyond about 1M events "
                                "(use the .pftrace output in ui.perfetto.dev)"))
    need = events * PERFETTO_BYTES_PER_EVENT
    sev = PROBLEM if need > PERFETTO_TAB_BYTES else INFO
    findings.append(Finding("Perfetto UI memory", sev, events,
                            f"about {need / 2**20:,.0f} MB of the ~2 GB a browser tab can use"))
    if path is not None:
        size = _content_size(path)
        source = open_source(path)
        if trace.meta.source_format not in AGGREGATE and source.head.lstrip()[:1] in (b"{", b"["):
            late = out_of_order(source.read_bytes())
            if late:
                findings.append(Finding("events out of order", INFO, late,
                                        "events that come earlier than the one before them on their thread "
                                        "(Perfetto and chrome://tracing sort them; a streaming reader would not)"))
        if source.head.lstrip()[:1] in (b"{", b"["):
            sev = PROBLEM if size > CHROME_MAX_BYTES else INFO
            findings.append(Finding("chrome://tracing size", sev, size,
                                    f"{size / 2**20:,.1f} MB of JSON (chrome://tracing's limit is about 256 MB)"))
    return findings


def validate(path: PathLike, format: str | None = None) -> Report:
    """Check ``path`` for what would hurt in a viewer.

    >>> r = validate("examples/mlagents_timers.json")
    >>> r.format, [f.check for f in r.problems]
    ('mlagents', [])
    """
    p = Path(path)
    trace = load(p, format)
    return Report(str(p), trace.meta.source_format, trace.event_count(), check_trace(trace, p))


__all__ = ["validate", "check_trace", "Report", "Finding"]
