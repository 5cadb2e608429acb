"""Independent reading of Chrome-trace-like *inputs* for the tests: Python's json (exact decimals),
no traceconv code, so that what the importers produce can be checked against what the files say."""

from __future__ import annotations

import decimal
import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

from traceconv.model.layout import nest
from traceconv.model import Trace, TrackKind


def load(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(top-level keys but traceEvents, events) of a file, gz or not, object or array."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = json.loads(data, parse_float=decimal.Decimal)
    if isinstance(doc, list):
        return {}, doc
    events = doc.pop("traceEvents")
    return doc, events


def ns(us: Any) -> int:
    """µs as the file wrote it → exact ns."""
    return int(decimal.Decimal(str(us)) * 1000)


def slice_counts_by_cat(trace: Trace) -> Counter:
    st = trace.strings
    return Counter(st[c] for c in trace.slices.cat)


def slices_by_thread(trace: Trace) -> Counter:
    """Slices per (raw pid, raw tid) of the thread they are on (overlap lanes count for their thread)."""
    out: Counter = Counter()
    for t in trace.slices.track:
        tr = trace.tracks[t]
        while tr.kind is TrackKind.LANE and tr.parent is not None:
            tr = trace.tracks[tr.parent]
        if tr.kind is TrackKind.THREAD:
            th = trace.threads[tr.thread]
            out[(trace.processes[th.process].raw_pid, th.raw_tid)] += 1
        else:
            out[("track", tr.name)] += 1
    return out


def slice_set(trace: Trace) -> Counter:
    """(name, ts, dur) of every slice: what must survive whatever track a slice ends on."""
    st = trace.strings
    s = trace.slices
    return Counter((st[s.name[i]], s.ts[i], s.dur[i]) for i in range(len(s)))


def flow_pairs(trace: Trace) -> list[tuple[int, int, str]]:
    f = trace.flows
    return [(f.src[i], f.dst[i], trace.strings[f.name[i]]) for i in range(len(f))]


def nested(trace: Trace) -> Trace:
    nest(trace)
    return trace
