"""Hotspots: where did the time go (``traceconv summary``).

For every group (slice name, category, thread, process or rank):

* **total**: the summed durations of its slices;
* **self**: total minus the time of the slices nested directly inside them on the
  same track (so nested time is counted once, in the innermost slice);
* **count**: how many slices (calls);
* **avg**: total / count; **share**: self as a part of all self time.

Aggregate inputs (ML-Agents timers and the other synthesized timelines) already say
how many calls a node stands for and its self time: a synthesized slice's args
``count`` and ``self_s`` are used, so the numbers equal the file's own.

Several inputs (ranks of one run) are summed, and each row also tells the rank that
spent the most in it and how far it is from the fastest (stragglers).
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
import orjson

from .errors import TraceconvError
from .layout import nest
from .model import Trace, TrackKind

GROUPINGS = ("name", "category", "thread", "process", "rank")
SORTS = ("self", "total", "count", "avg")


@dataclass
class Row:
    key: str
    count: int
    total_ns: int
    self_ns: int
    share: float                 # self / all self time, 0..1
    per_rank_total_ns: dict[int, int] = field(default_factory=dict)

    @property
    def avg_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0

    def straggler(self) -> tuple[int, float] | None:
        """(slowest rank, its total / the fastest rank's total) when several ranks ran this."""
        if len(self.per_rank_total_ns) < 2:
            return None
        rank, worst = max(self.per_rank_total_ns.items(), key=lambda kv: (kv[1], -kv[0]))
        best = min(self.per_rank_total_ns.values())
        return rank, (worst / best if best else float("inf"))


@dataclass
class Summary:
    by: str
    rows: list[Row]
    total_self_ns: int
    ranks: list[int]

    def to_json(self) -> bytes:
        out = []
        for r in self.rows:
            d = asdict(r)
            d["avg_ns"] = r.avg_ns
            d["per_rank_total_ns"] = {str(k): v for k, v in r.per_rank_total_ns.items()}
            out.append(d)
        return orjson.dumps({"by": self.by, "ranks": self.ranks, "total_self_ns": self.total_self_ns,
                             "rows": out}, option=orjson.OPT_INDENT_2)

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        rank_cols = [f"total_ns_rank{r}" for r in self.ranks] if len(self.ranks) > 1 else []
        w.writerow([self.by, "count", "total_ns", "self_ns", "avg_ns", "share", *rank_cols])
        for r in self.rows:
            w.writerow([r.key, r.count, r.total_ns, r.self_ns, f"{r.avg_ns:.1f}", f"{r.share:.6f}",
                        *[r.per_rank_total_ns.get(k, 0) for k in self.ranks if rank_cols]])
        return buf.getvalue()


def _self_and_count(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per slice: duration, self time, number of calls (all int64)."""
    nest(trace)
    s = trace.slices
    n = len(s)
    dur = np.frombuffer(s.dur, dtype=np.int64).copy() if n else np.zeros(0, np.int64)
    parent = np.frombuffer(s.parent, dtype=np.int64) if n else np.zeros(0, np.int64)
    has = parent >= 0
    child_time = np.bincount(parent[has], weights=dur[has], minlength=n).astype(np.int64) if n else dur
    self_ns = dur - child_time
    count = np.ones(n, dtype=np.int64)
    if trace.meta.synthesized:
        for i, raw in enumerate(s.args):
            if raw and (b'"count"' in raw or b'"self_s"' in raw):
                a = orjson.loads(raw)
                if isinstance(a.get("count"), int) and not isinstance(a.get("count"), bool):
                    count[i] = a["count"]
                if isinstance(a.get("self_s"), (int, float)) and not isinstance(a.get("self_s"), bool):
                    self_ns[i] = round(a["self_s"] * 1e9)
    return dur, self_ns, count


def _keys(trace: Trace, by: str, rank: int) -> list[str]:
    s = trace.slices
    st = trace.strings
    if by == "name":
        return [st[i] for i in s.name]
    if by == "category":
        return [st[i] or "(none)" for i in s.cat]

    def base(track_id: int):
        t = trace.tracks[track_id]
        while t.kind is TrackKind.LANE and t.parent is not None:
            t = trace.tracks[t.parent]
        return t

    labels: dict[int, str] = {}
    for t in trace.tracks:
        b = base(t.id)
        proc = trace.processes[b.process].name if b.process is not None else "(global)"
        if by == "thread":
            labels[t.id] = f"{proc} / {trace.track_label(b)}"
        elif by == "process":
            labels[t.id] = proc
        else:
            labels[t.id] = f"rank {rank}"
    return [labels[t] for t in s.track]


def summarize(traces: Trace | Sequence[Trace], by: str = "name", sort: str = "self",
              top: int | None = None) -> Summary:
    """Hotspot rows of one trace, or of several (one per rank).

    >>> import traceconv
    >>> t = traceconv.load("examples/mlagents_timers.json")
    >>> row = summarize(t, by="name", sort="self", top=1).rows[0]
    >>> row.key, row.count, round(row.self_ns / 1e9, 2)
    ('env_step', 1553, 84.85)
    """
    if isinstance(traces, Trace):
        traces = [traces]
    if by not in GROUPINGS:
        raise TraceconvError(f"cannot group by '{by}'; choose one of: {', '.join(GROUPINGS)}")
    if sort not in SORTS:
        raise TraceconvError(f"cannot sort by '{sort}'; choose one of: {', '.join(SORTS)}")
    acc: dict[str, list[Any]] = {}
    ranks: list[int] = []
    for k, trace in enumerate(traces):
        rank = trace.meta.rank if trace.meta.rank is not None else k
        ranks.append(rank)
        dur, self_ns, count = _self_and_count(trace)
        keys = _keys(trace, by, rank)
        uniq, inv = np.unique(np.array(keys, dtype=object), return_inverse=True) if keys else ([], [])
        if not len(uniq):
            continue
        tot = np.bincount(inv, weights=dur).astype(np.int64)
        slf = np.bincount(inv, weights=self_ns).astype(np.int64)
        cnt = np.bincount(inv, weights=count).astype(np.int64)
        for j, key in enumerate(uniq.tolist()):
            a = acc.setdefault(key, [0, 0, 0, {}])
            a[0] += int(cnt[j])
            a[1] += int(tot[j])
            a[2] += int(slf[j])
            a[3][rank] = a[3].get(rank, 0) + int(tot[j])
    all_self = sum(max(v[2], 0) for v in acc.values())
    rows = [Row(key, c, t, s, (s / all_self) if all_self else 0.0, per_rank)
            for key, (c, t, s, per_rank) in acc.items()]
    order = {"self": lambda r: r.self_ns, "total": lambda r: r.total_ns,
             "count": lambda r: r.count, "avg": lambda r: r.avg_ns}[sort]
    rows.sort(key=lambda r: (-order(r), r.key))
    if top is not None:
        rows = rows[:top]
    return Summary(by, rows, all_self, ranks)


def fmt_ns(ns: float) -> str:
    """A duration for people: 1.23 s, 45.6 ms, 789 µs, 12 ns."""
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"
