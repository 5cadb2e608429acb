"""Hotspots: where did the time go (``traceconv summary``).

For every group (slice name, category, thread, process or rank):

* **count**: how many calls;
* **total**: by name, the summed durations of its slices; by category, thread, process or rank,
  the time its slices cover, counted once (the union of their intervals: a slice nested in
  another of the same group adds nothing);
* **self**: the durations minus the time of the slices nested directly inside them on the same
  track (so nested time is counted once, in the innermost slice), summed;
* **avg**: total / count; **share**: self as a part of all self time.

One call is counted once:

* A track marked ``summary = "mirror"`` by its reader holds the same calls as other tracks
  (MXNet's ``b``/``e`` operator track beside the device's ``B``/``E``; MegEngine's host times
  beside its device times): its slices are left out, and counted in :attr:`Summary.left_out`.
* A track marked ``"profiler"`` holds the profiler's own window (PyTorch's ``PyTorch Profiler
  (0)``), which spans everything it recorded: left out unless ``include_profiler_spans``.

Aggregate inputs (ML-Agents timers, Sample Factory logs: ``meta.synthesized``) carry the file's
own numbers in their slices' args, and those are used: ``count`` (calls), ``total_s`` or
``value_s`` (the total as printed; a Sample Factory node may be drawn longer to hold its
children) and ``self_s``; without ``self_s``, self is the printed total minus the time drawn
for the nodes nested in it (never below 0).

Slices with a numeric ``computation`` (FLO) or ``memory`` (bytes) arg (MegEngine's
``opr_footprint``) give FLOPS and bandwidth columns, computed as MegEngine's profile_analyze
does: the summed computation (or memory) over the summed time, the time being each slice's
``time_s`` arg (``end - start`` as written) or else its duration.

Several inputs (ranks of one run) are summed, and each row also tells the rank that spent the
most in it and how far it is from the fastest (stragglers).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
import orjson

from .errors import TraceconvError
from .model.layout import nest
from .model import Trace, TrackKind

GROUPINGS = ("name", "category", "thread", "process", "rank")
SORTS = ("self", "total", "count", "avg")
UNION_GROUPINGS = ("category", "thread", "process", "rank")

LEFT_OUT_MIRROR = "slices that repeat calls counted on another track"
LEFT_OUT_PROFILER = "profiler window spans (--include-profiler-spans counts them)"


@dataclass
class Row:
    key: str
    count: int
    total_ns: int
    self_ns: int
    share: float                 # self / all self time, 0..1
    per_rank_total_ns: dict[int, int] = field(default_factory=dict)
    computation: float | None = None   # FLO summed over the row's slices (MegEngine opr_footprint)
    memory: float | None = None        # bytes, likewise
    flops: float | None = None         # computation / time, as profile_analyze computes it
    bandwidth: float | None = None     # memory / time (bytes/s)

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
    # what was not counted, and why: {reason: slices} (mirrors, profiler spans, the filters)
    left_out: dict[str, int] = field(default_factory=dict)

    @property
    def footprint(self) -> bool:
        """True when rows have FLOPS / bandwidth (MegEngine opr_footprint)."""
        return any(r.computation is not None or r.memory is not None for r in self.rows)

    @property
    def total_is_union(self) -> bool:
        return self.by in UNION_GROUPINGS

    def to_json(self) -> bytes:
        out = []
        for r in self.rows:
            d = asdict(r)
            d["avg_ns"] = r.avg_ns
            d["per_rank_total_ns"] = {str(k): v for k, v in r.per_rank_total_ns.items()}
            if not self.footprint:
                for k in ("computation", "memory", "flops", "bandwidth"):
                    del d[k]
            out.append(d)
        # orjson writes a non-finite float (a FLOPS over zero time) as null
        return orjson.dumps({"by": self.by, "ranks": self.ranks, "total_self_ns": self.total_self_ns,
                             "total": "covered time (union)" if self.total_is_union else "sum of durations",
                             "left_out": self.left_out, "rows": out}, option=orjson.OPT_INDENT_2)

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        rank_cols = [f"total_ns_rank{r}" for r in self.ranks] if len(self.ranks) > 1 else []
        fp = ["computation", "memory", "flops", "bandwidth"] if self.footprint else []
        w.writerow([self.by, "count", "total_ns", "self_ns", "avg_ns", "share", *fp, *rank_cols])
        for r in self.rows:
            w.writerow([r.key, r.count, r.total_ns, r.self_ns, f"{r.avg_ns:.1f}", f"{r.share:.6f}",
                        *[_csv_num(getattr(r, k)) for k in fp],
                        *[r.per_rank_total_ns.get(k, 0) for k in self.ranks if rank_cols]])
        return buf.getvalue()

    def left_out_text(self) -> str:
        """One line saying what was not counted, or ''."""
        return "; ".join(f"{n:,} {what}" for what, n in self.left_out.items() if n)


def _csv_num(v: float | None) -> str:
    return "" if v is None else repr(float(v))


def _col(a: Any, dtype: Any) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype)


def _roles(trace: Trace) -> list[str | None]:
    """Each track's summary role, a lane taking its original track's."""
    out: list[str | None] = []
    for t in trace.tracks:
        b = t
        while b.kind is TrackKind.LANE and b.parent is not None:
            b = trace.tracks[b.parent]
        out.append(getattr(b, "summary", None))
    return out


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


_BIG = 2**62          # a file's number past this (1e26 s) is taken as this, not an overflow


def _ns(seconds: float) -> int:
    ns = seconds * 1e9
    return _BIG if ns >= _BIG else -_BIG if ns <= -_BIG else round(ns)


_FOOTPRINT = re.compile(rb'"(?:computation|memory)"\s*:')


@dataclass
class _Slices:
    keep: np.ndarray       # bool: counted
    total: np.ndarray      # int64 ns: the call's total (the file's own for aggregates)
    self_ns: np.ndarray    # int64 ns
    count: np.ndarray      # int64 calls
    comp: np.ndarray | None = None   # float64 FLO, NaN where none
    mem: np.ndarray | None = None    # float64 bytes, NaN where none
    secs: np.ndarray | None = None   # float64 s: the time FLOPS and bandwidth divide by


def _per_slice(trace: Trace, include_profiler_spans: bool, left_out: dict[str, int]) -> _Slices:
    nest(trace)
    s = trace.slices
    n = len(s)
    dur = _col(s.dur, np.int64).copy()
    parent = _col(s.parent, np.int64) if n else np.zeros(0, np.int64)
    track = _col(s.track, np.int32)
    roles = _roles(trace)
    keep = np.ones(n, dtype=bool)
    if n and any(r is not None for r in roles):
        role_ids = {None: 0, "mirror": 1, "profiler": 2}
        code = np.array([role_ids.get(r, 0) for r in roles], dtype=np.int8)[track]
        mirror = code == 1
        if mirror.any():
            keep &= ~mirror
            left_out[LEFT_OUT_MIRROR] = left_out.get(LEFT_OUT_MIRROR, 0) + int(mirror.sum())
        prof = code == 2
        if prof.any() and not include_profiler_spans:
            keep &= ~prof
            left_out[LEFT_OUT_PROFILER] = left_out.get(LEFT_OUT_PROFILER, 0) + int(prof.sum())
    total = dur.copy()
    count = np.ones(n, dtype=np.int64)
    given_self: dict[int, int] = {}
    if trace.meta.synthesized and n:
        for i, raw in enumerate(s.args):
            if not raw or not (b'"count"' in raw or b'"self_s"' in raw or b'"total_s"' in raw
                               or b'"value_s"' in raw):
                continue
            a = orjson.loads(raw)
            c = a.get("count")
            if isinstance(c, int) and not isinstance(c, bool) and c >= 0:
                count[i] = min(c, _BIG)
            t = _number(a.get("total_s"))
            if t is None:
                t = _number(a.get("value_s"))
            if t is not None and t >= 0:
                total[i] = _ns(t)
            v = _number(a.get("self_s"))
            if v is not None:
                given_self[i] = _ns(v)
    has = parent >= 0
    # a node's own time: its total less the time drawn for the nodes nested in it (an aggregate
    # node drawn longer than its printed total to hold its children has none)
    child = np.bincount(parent[has], weights=dur[has], minlength=n).astype(np.int64) if n else total
    self_ns = np.maximum(total - child, 0)
    for i, v in given_self.items():
        self_ns[i] = v
    out = _Slices(keep, total, self_ns, count)
    _footprint(trace, out)
    return out


def _footprint(trace: Trace, out: _Slices) -> None:
    """computation / memory / time_s args, where slices carry them (MegEngine opr_footprint)."""
    s = trace.slices
    if not len(s):
        return
    data, off = s.args.packed()
    rows: list[int] = []
    if len(data):
        ends = off[1:]
        for m in _FOOTPRINT.finditer(memoryview(data)):
            rows.append(int(np.searchsorted(ends, m.start(), side="right")))
        s.args.forget()
    if not rows:
        return
    n = len(s)
    comp = np.full(n, np.nan)
    mem = np.full(n, np.nan)
    secs = _col(s.dur, np.int64) / 1e9
    for i in sorted(set(rows)):
        a = orjson.loads(s.args[i])
        c, m, t = _number(a.get("computation")), _number(a.get("memory")), _number(a.get("time_s"))
        if c is not None:
            comp[i] = c
        if m is not None:
            mem[i] = m
        if t is not None and t >= 0:
            secs[i] = t
    out.comp, out.mem, out.secs = comp, mem, secs


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


def covered_ns(start: np.ndarray, end: np.ndarray) -> int:
    """The time covered by intervals [start, end), each instant once."""
    if not len(start):
        return 0
    o = np.argsort(start, kind="stable")
    a, b = start[o], end[o]
    reach = np.maximum.accumulate(b)
    prev = np.concatenate(([a[0]], reach[:-1]))
    return int(np.maximum(b - np.maximum(a, prev), 0).sum())


def _union_totals(trace: Trace, inv: np.ndarray, groups: int, keep: np.ndarray) -> np.ndarray:
    s = trace.slices
    ts = _col(s.ts, np.int64)[keep]
    end = ts + _col(s.dur, np.int64)[keep]
    out = np.zeros(groups, dtype=np.int64)
    o = np.argsort(inv, kind="stable")
    g = inv[o]
    bounds = np.flatnonzero(np.diff(g)) + 1
    for lo, hi in zip(np.concatenate(([0], bounds)), np.concatenate((bounds, [len(g)]))):
        if hi > lo:
            idx = o[lo:hi]
            out[g[lo]] = covered_ns(ts[idx], end[idx])
    return out


def filter_traces(traces: Sequence[Trace], *, window: str | None = None, drop_cat: Sequence[str] = (),
                  min_dur: str | None = None) -> dict[str, int]:
    """Apply ``traceconv merge``'s filters to each trace in place; returns {filter: slices left out}.

    ``window``: ``A:B`` (durations from each input's first event, e.g. ``1.5s:2s``) or a slice
    name (``ProfilerStep#4``: from its first start to its last end); slices that overlap it are
    kept whole.  ``drop_cat``: categories (comma lists allowed).  ``min_dur``: ``5us``.
    """
    from .merging import _filter, parse_duration, parse_window

    min_ns = parse_duration(min_dur) if min_dur else 0
    cats = frozenset(c.strip() for item in drop_cat for c in item.split(",") if c.strip())
    dropped: dict[str, int] = {}
    for t in traces:
        w = parse_window(window, t) if window else None
        if not (cats or min_ns or w):
            continue
        for k, v in _filter(t, cats, min_ns, w).items():
            dropped[k] = dropped.get(k, 0) + v
    return dropped


def summarize(traces: Trace | Sequence[Trace], by: str = "name", sort: str = "self",
              top: int | None = None, *, include_profiler_spans: bool = False,
              ranks: str | None = None, window: str | None = None, drop_cat: Sequence[str] = (),
              min_dur: str | None = None) -> Summary:
    """Hotspot rows of one trace, or of several (one per rank).

    ``ranks`` (``0-3,7``) keeps those ranks' traces (a trace's rank is its own, else its position);
    ``window``, ``drop_cat`` and ``min_dur`` filter slices as ``traceconv merge`` does (in place:
    see :func:`filter_traces`).  What is left out is counted in :attr:`Summary.left_out`.

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
    left_out: dict[str, int] = {}
    ranked = [(t.meta.rank if t.meta.rank is not None else k, t) for k, t in enumerate(traces)]
    if ranks is not None:
        from .merging import parse_ranks
        wanted = parse_ranks(ranks)
        chosen = [(r, t) for r, t in ranked if r in wanted]
        if not chosen:
            found = ", ".join(str(r) for r in sorted({r for r, _ in ranked}))
            raise TraceconvError(f"{{opt:ranks}} {ranks}: none of the inputs is one of those ranks (found: {found})")
        if len(chosen) < len(ranked):
            left_out["inputs of other ranks (--ranks)"] = len(ranked) - len(chosen)
        ranked = chosen
    for what, n in filter_traces([t for _, t in ranked], window=window, drop_cat=drop_cat,
                                 min_dur=min_dur).items():
        if what.startswith("--"):      # slices; not the instants, counters and flows it also drops
            left_out[f"left out by {what}"] = n
    acc: dict[str, list[Any]] = {}
    rank_list: list[int] = []
    fp_any = False
    for rank, trace in ranked:
        rank_list.append(rank)
        sl = _per_slice(trace, include_profiler_spans, left_out)
        keys = _keys(trace, by, rank)
        if not keys:
            continue
        kept = np.flatnonzero(sl.keep)
        if not len(kept):
            continue
        kk = np.array(keys, dtype=object)[kept]
        uniq, inv = np.unique(kk, return_inverse=True)
        inv = inv.reshape(-1)
        if by in UNION_GROUPINGS:
            tot = _union_totals(trace, inv, len(uniq), sl.keep)
        else:
            tot = np.bincount(inv, weights=sl.total[kept], minlength=len(uniq)).astype(np.int64)
        slf = np.bincount(inv, weights=sl.self_ns[kept], minlength=len(uniq)).astype(np.int64)
        cnt = np.bincount(inv, weights=sl.count[kept], minlength=len(uniq)).astype(np.int64)
        fp = None
        if sl.comp is not None:
            fp_any = True
            comp, mem, secs = sl.comp[kept], sl.mem[kept], sl.secs[kept]
            fp = []
            for vals in (comp, mem):
                ok = ~np.isnan(vals)
                fp.append((np.bincount(inv[ok], weights=vals[ok], minlength=len(uniq)),
                           np.bincount(inv[ok], minlength=len(uniq)) > 0))
            fp.append(np.bincount(inv, weights=secs, minlength=len(uniq)))
        for j, key in enumerate(uniq.tolist()):
            a = acc.setdefault(key, [0, 0, 0, {}, None, None, 0.0])
            a[0] += int(cnt[j])
            a[1] += int(tot[j])
            a[2] += int(slf[j])
            a[3][rank] = a[3].get(rank, 0) + int(tot[j])
            if fp is not None:
                (cs, chas), (ms, mhas), secs_sum = fp
                if chas[j]:
                    a[4] = (a[4] or 0.0) + float(cs[j])
                if mhas[j]:
                    a[5] = (a[5] or 0.0) + float(ms[j])
                a[6] += float(secs_sum[j])
    all_self = sum(max(v[2], 0) for v in acc.values())
    rows = []
    for key, (c, t, s, per_rank, comp, mem, secs) in acc.items():
        row = Row(key, c, t, s, (s / all_self) if all_self else 0.0, per_rank)
        if fp_any:
            row.computation, row.memory = comp, mem
            # profile_analyze: flops = (computation or N/A) / time, bandwidth = memory / time
            if comp:
                row.flops = comp / secs if secs > 0 else float("inf")
            if mem is not None:
                row.bandwidth = mem / secs if secs > 0 else (float("inf") if mem else float("nan"))
        rows.append(row)
    order = {"self": lambda r: r.self_ns, "total": lambda r: r.total_ns,
             "count": lambda r: r.count, "avg": lambda r: r.avg_ns}[sort]
    rows.sort(key=lambda r: (-order(r), r.key))
    if top is not None:
        rows = rows[:top]
    return Summary(by, rows, all_self, rank_list, {k: v for k, v in left_out.items() if v})


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


def fmt_rate(x: float | None, unit: str, base: int) -> str:
    """A rate with a unit prefix, as profile_analyze prints it: ``4.00 MFLOPS``, ``46.88 KiB/s``."""
    if x is None or math.isnan(x):
        return "N/A"
    if math.isinf(x):
        return f"inf {'byte/s' if base == 1024 else unit}"
    prefixes = ["", "K", "M", "G", "T", "P"]
    k = 0
    while x >= base and k < len(prefixes) - 1:
        x /= base
        k += 1
    if base == 1024:
        return f"{x:.2f} {prefixes[k]}{'iB/s' if k else 'byte/s'}"
    return f"{x:.2f} {prefixes[k]}{unit}"
