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
from typing import Any, Mapping, Sequence

import numpy as np
import orjson

from .errors import TraceconvError, spell
from .model.layout import nest
from .model import Trace, TrackKind

GROUPINGS = ("name", "category", "thread", "process", "rank")
SORTS = ("self", "total", "count", "avg")
UNION_GROUPINGS = ("category", "thread", "process", "rank")

LEFT_OUT_MIRROR = "slices that repeat calls counted on another track"
LEFT_OUT_PROFILER = "profiler window spans ({opt:include_profiler_spans} counts them)"


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
    # what was not counted, and why: {reason: slices} (mirrors, profiler spans, the filters); a reason
    # names a parameter as {opt:name} (errors.spell), which to_json and left_out_text spell
    left_out: dict[str, int] = field(default_factory=dict)
    # each rank's self time over all its rows: its busy time (the straggler view, :meth:`skew`)
    per_rank_self_ns: dict[int, int] = field(default_factory=dict)
    synthesized: bool = False          # an aggregate input (the file's own totals)

    def skew(self) -> list[tuple[int, int, float]]:
        """``(rank, busy ns, busy / the median rank's)`` for each rank, the slowest first."""
        if not self.per_rank_self_ns:
            return []
        med = float(np.median(list(self.per_rank_self_ns.values())))
        return sorted(((r, v, v / med if med else float("inf") if v else 1.0)
                       for r, v in self.per_rank_self_ns.items()), key=lambda x: (-x[1], x[0]))

    @property
    def footprint(self) -> bool:
        """True when rows have FLOPS / bandwidth (MegEngine opr_footprint)."""
        return any(r.computation is not None or r.memory is not None for r in self.rows)

    @property
    def total_is_union(self) -> bool:
        return self.by in UNION_GROUPINGS

    def to_json(self, options: Mapping[str, str] | None = None) -> bytes:
        """The table as JSON; ``options`` spells the parameters the notes name (see errors.spell)."""
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
                             "per_rank_self_ns": {str(k): v for k, v in self.per_rank_self_ns.items()},
                             "total": "covered time (union)" if self.total_is_union else "sum of durations",
                             "left_out": {spell(k, options): n for k, n in self.left_out.items()},
                             "rows": out}, option=orjson.OPT_INDENT_2)

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

    def left_out_text(self, options: Mapping[str, str] | None = None) -> str:
        """One line saying what was not counted, or ''; ``options`` spells the parameters it names."""
        return "; ".join(f"{n:,} {spell(what, options)}" for what, n in self.left_out.items() if n)


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
_FOOTPRINT_KEY = 64        # bytes a match can take (the model's args text has no blanks)


@dataclass
class _Slices:
    keep: np.ndarray       # bool: counted
    total: np.ndarray      # int64 ns: the call's total (the file's own for aggregates)
    self_ns: np.ndarray    # int64 ns
    count: np.ndarray      # int64 calls
    comp: np.ndarray | None = None   # float64 FLO, NaN where none
    mem: np.ndarray | None = None    # float64 bytes, NaN where none
    secs: np.ndarray | None = None   # float64 s: the time FLOPS and bandwidth divide by


def _per_slice(trace: Trace, include_profiler_spans: bool, left_out: dict[str, int],
               only: np.ndarray | None = None) -> _Slices:
    """``only``: the slices to count (bool; None: all)."""
    nest(trace)
    s = trace.slices
    n = len(s)
    dur = _col(s.dur, np.int64).copy()
    parent = _col(s.parent, np.int64) if n else np.zeros(0, np.int64)
    track = _col(s.track, np.int32)
    roles = _roles(trace)
    keep = np.ones(n, dtype=bool) if only is None else only.copy()
    if n and any(r is not None for r in roles):
        role_ids = {None: 0, "mirror": 1, "profiler": 2}
        code = np.array([role_ids.get(r, 0) for r in roles], dtype=np.int8)[track]
        mirror = (code == 1) & keep
        if mirror.any():
            keep &= ~mirror
            left_out[LEFT_OUT_MIRROR] = left_out.get(LEFT_OUT_MIRROR, 0) + int(mirror.sum())
        prof = (code == 2) & keep
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
    ends = s.args.packed()[1][1:]
    rows: set[int] = set()
    # a chunk at a time, each with the next one's first bytes (a key cut by the chunk's end): the
    # whole text mapped at once held 100 MB more (the bench's 1M trace)
    for lo, size, chunk in s.args.chunks(_FOOTPRINT_KEY):
        for m in _FOOTPRINT.finditer(memoryview(chunk)):
            if m.start() < size:
                rows.add(int(np.searchsorted(ends, lo + m.start(), side="right")))
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


def _keys(trace: Trace, by: str, rank: int, track_rank: np.ndarray | None = None) -> tuple[np.ndarray, list[str]]:
    """Each slice's group as a code, and each code's label (codes of one label are one group):
    the slices' names, categories or tracks as they are stored, not a string per slice.  By rank:
    ``rank``, or each track's (``track_rank``: a merged trace)."""
    s = trace.slices
    st = trace.strings
    if by == "name":
        return _col(s.name, np.int32), st.strings
    if by == "category":
        return _col(s.cat, np.int32), [x or "(none)" for x in st.strings]

    def base(track_id: int):
        t = trace.tracks[track_id]
        while t.kind is TrackKind.LANE and t.parent is not None:
            t = trace.tracks[t.parent]
        return t

    labels: list[str] = []
    for t in trace.tracks:
        b = base(t.id)
        proc = trace.processes[b.process].name if b.process is not None else "(global)"
        if by == "thread":
            labels.append(f"{proc} / {trace.track_label(b)}")
        elif by == "process":
            labels.append(proc)
        else:
            labels.append(f"rank {rank if track_rank is None else int(track_rank[t.id])}")
    return _col(s.track, np.int32), labels


def _groups(codes: np.ndarray, labels: list[str]) -> tuple[list[str], np.ndarray]:
    """np.unique of the codes' labels (sorted labels, each code's index among them), from the
    distinct codes: sorting 630k strings took 0.8 s of a summary of the bench's 1M trace."""
    used, inv = np.unique(codes, return_inverse=True)
    uniq, back = np.unique(np.array([labels[c] for c in used.tolist()], dtype=object), return_inverse=True)
    return uniq.tolist(), back.reshape(-1)[inv.reshape(-1)]


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
    from .merging.combine import _filter, parse_window
    from .merging.options import parse_duration

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


@dataclass
class RankTable:
    """The rows of one rank (or, reduced, of several): what a worker sends back for ``summary``.

    ``rows``: key -> [count, total ns, self ns, {rank: total ns}, FLO or None, bytes or None, seconds]."""
    ranks: list[int] = field(default_factory=list)
    rows: dict[str, list[Any]] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)
    footprint: bool = False
    synthesized: bool = False
    seen: list[int] = field(default_factory=list)      # every input's rank, kept or not
    per_rank_self_ns: dict[int, int] = field(default_factory=dict)


def merge_tables(a: RankTable, b: RankTable) -> RankTable:
    """Two tables as one (``a``'s ranks first): the reduction step, run where the tables are."""
    rows = {k: [v[0], v[1], v[2], dict(v[3]), v[4], v[5], v[6]] for k, v in a.rows.items()}
    for key, (c, t, sl, per_rank, comp, mem, secs) in b.rows.items():
        x = rows.get(key)
        if x is None:
            rows[key] = [c, t, sl, dict(per_rank), comp, mem, secs]
            continue
        x[0] += c
        x[1] += t
        x[2] += sl
        for r, v in per_rank.items():
            x[3][r] = x[3].get(r, 0) + v
        if comp is not None:
            x[4] = (x[4] or 0.0) + comp
        if mem is not None:
            x[5] = (x[5] or 0.0) + mem
        x[6] += secs
    left = dict(a.left_out)
    for k, v in b.left_out.items():
        left[k] = left.get(k, 0) + v
    per = dict(a.per_rank_self_ns)
    for r, v in b.per_rank_self_ns.items():
        per[r] = per.get(r, 0) + v
    return RankTable(a.ranks + b.ranks, rows, left, a.footprint or b.footprint, a.synthesized or b.synthesized,
                     a.seen + b.seen, per)


def _track_ranks(trace: Trace, rank: int) -> np.ndarray | None:
    """Each track's rank when the trace is a merged one (its processes' ``rank`` arg, which
    traceconv's own metadata keeps), a track of no such process taking ``rank``; None when it is
    one rank's."""
    got = [p.args.get("rank") for p in trace.processes]
    if not any(type(r) is int for r in got):
        return None
    out = np.full(len(trace.tracks), rank, dtype=np.int64)
    for t in trace.tracks:
        b = t
        while b.kind is TrackKind.LANE and b.parent is not None:
            b = trace.tracks[b.parent]
        r = got[b.process] if b.process is not None else None
        if type(r) is int:
            out[t.id] = r
    return out


def rank_table(trace: Trace, rank: int, by: str = "name", *, include_profiler_spans: bool = False,
               wanted: Any = None, window: str | None = None, drop_cat: Sequence[str] = (),
               min_dur: str | None = None) -> RankTable:
    """The rows of one input (the per-input step of :func:`summarize`; filters applied in place):
    of rank ``rank``, or of each rank whose slices a merged trace holds (:func:`_track_ranks`: a
    rank with no slices there is none, as a .json output keeps no process without events)."""
    track_rank = _track_ranks(trace, rank)
    here = [rank] if track_rank is None else (np.unique(track_rank[_col(trace.slices.track, np.int32)]).tolist()
                                              or [rank])      # (no slices: a trace of one rank, as read back)
    out = RankTable(seen=list(here), synthesized=bool(trace.meta.synthesized))
    todo = [r for r in here if wanted is None or r in wanted]
    if len(todo) < len(here):
        out.left_out[LEFT_OUT_RANKS] = len(here) - len(todo)
    if not todo:
        return out
    left_out = out.left_out
    from .merging.combine import SLICE_FILTERS
    for what, n in filter_traces([trace], window=window, drop_cat=drop_cat, min_dur=min_dur).items():
        if what in SLICE_FILTERS:      # slices; not the instants, counters and flows it also drops
            left_out[left_out_by(what)] = n
    out.ranks.extend(todo)
    # (after the filters, which drop slices; nesting then moves some to lanes of their track, of
    # the same rank, which the ranks of the tracks are taken again for)
    slice_rank = None if track_rank is None else track_rank[_col(trace.slices.track, np.int32)]
    only = None if slice_rank is None or len(todo) == len(here) else np.isin(slice_rank, todo)
    sl = _per_slice(trace, include_profiler_spans, left_out, only)
    track_rank = None if track_rank is None else _track_ranks(trace, rank)
    codes, labels = _keys(trace, by, rank, track_rank)
    kept = np.flatnonzero(sl.keep)
    if not len(kept):
        return out
    # a group per (rank, key): the rows' per-rank totals and each rank's busy time
    keys, inv = _groups(codes[kept], labels)
    if track_rank is None:                     # (one rank: a group per key, every key used)
        rank_list, pairs = np.array([rank]), np.arange(len(keys))
    else:
        rank_list, rank_inv = np.unique(slice_rank[kept], return_inverse=True)
        pairs, inv = np.unique(rank_inv.reshape(-1).astype(np.int64) * len(keys) + inv, return_inverse=True)
        inv = inv.reshape(-1)
    ngroups = len(pairs)
    if by in UNION_GROUPINGS:
        tot = _union_totals(trace, inv, ngroups, sl.keep)
    else:
        tot = np.bincount(inv, weights=sl.total[kept], minlength=ngroups).astype(np.int64)
    slf = np.bincount(inv, weights=sl.self_ns[kept], minlength=ngroups).astype(np.int64)
    cnt = np.bincount(inv, weights=sl.count[kept], minlength=ngroups).astype(np.int64)
    fp = None
    if sl.comp is not None:
        out.footprint = True
        comp, mem, secs = sl.comp[kept], sl.mem[kept], sl.secs[kept]
        fp = []
        for vals in (comp, mem):
            ok = ~np.isnan(vals)
            fp.append((np.bincount(inv[ok], weights=vals[ok], minlength=ngroups),
                       np.bincount(inv[ok], minlength=ngroups) > 0))
        fp.append(np.bincount(inv, weights=secs, minlength=ngroups))
    acc = out.rows
    for j, pair in enumerate(pairs.tolist()):
        r, key = int(rank_list[pair // len(keys)]), keys[pair % len(keys)]
        a = acc.setdefault(key, [0, 0, 0, {}, None, None, 0.0])
        a[0] += int(cnt[j])
        a[1] += int(tot[j])
        a[2] += int(slf[j])
        a[3][r] = a[3].get(r, 0) + int(tot[j])
        out.per_rank_self_ns[r] = out.per_rank_self_ns.get(r, 0) + int(slf[j])
        if fp is not None:
            (cs, chas), (ms, mhas), secs_sum = fp
            if chas[j]:
                a[4] = (a[4] or 0.0) + float(cs[j])
            if mhas[j]:
                a[5] = (a[5] or 0.0) + float(ms[j])
            a[6] += float(secs_sum[j])
    for r, v in out.per_rank_self_ns.items():
        out.per_rank_self_ns[r] = max(v, 0)
    return out


LEFT_OUT_RANKS = "ranks not asked for ({opt:ranks})"


def left_out_by(what: str) -> str:
    """Summary.left_out's key for the slices a filter left out (``what``: one of the merge's
    :data:`~traceconv.merging.combine.SLICE_FILTERS`)."""
    return f"left out by {what}"


def _left_out_order() -> tuple[str, ...]:
    """The order Summary.left_out names its reasons in."""
    from .merging.combine import SLICE_FILTERS
    return (LEFT_OUT_RANKS, *map(left_out_by, SLICE_FILTERS), LEFT_OUT_MIRROR, LEFT_OUT_PROFILER)


def finish_table(table: RankTable, by: str = "name", sort: str = "self", top: int | None = None,
                 ranks: str | None = None) -> Summary:
    """The reduced table as sorted rows (the last step of :func:`summarize`, on the client)."""
    if ranks is not None and not table.ranks:
        found = ", ".join(str(r) for r in sorted(set(table.seen)))
        raise TraceconvError(f"{{opt:ranks}} {ranks}: none of the inputs is one of those ranks (found: {found})")
    acc = table.rows
    fp_any = table.footprint
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
    lo = table.left_out
    left = {k: lo[k] for k in _left_out_order() if lo.get(k)}
    left.update({k: v for k, v in lo.items() if v and k not in left})
    return Summary(by, rows, all_self, list(table.ranks), left, dict(table.per_rank_self_ns),
                   table.synthesized)


def _check(by: str, sort: str) -> None:
    if by not in GROUPINGS:
        raise TraceconvError(f"cannot group by '{by}'; choose one of: {', '.join(GROUPINGS)}")
    if sort not in SORTS:
        raise TraceconvError(f"cannot sort by '{sort}'; choose one of: {', '.join(SORTS)}")


def summarize(traces: Trace | Sequence[Trace], by: str = "name", sort: str = "self",
              top: int | None = None, *, include_profiler_spans: bool = False,
              ranks: str | None = None, window: str | None = None, drop_cat: Sequence[str] = (),
              min_dur: str | None = None) -> Summary:
    """Hotspot rows of one trace, or of several (one per rank).

    ``ranks`` (``0-3,7``) keeps those ranks' traces (a trace's rank is its own, else its position);
    ``window``, ``drop_cat`` and ``min_dur`` filter slices as ``traceconv merge`` does (in place:
    see :func:`filter_traces`).  What is left out is counted in :attr:`Summary.left_out`.  One
    table per rank (:func:`rank_table`), reduced pairwise (:func:`merge_tables`) as
    :func:`summarize_files` does on an engine, then sorted (:func:`finish_table`).

    >>> import traceconv
    >>> t = traceconv.load("examples/mlagents_timers.json")
    >>> row = summarize(t, by="name", sort="self", top=1).rows[0]
    >>> row.key, row.count, round(row.self_ns / 1e9, 2)
    ('env_step', 1553, 84.85)
    """
    if isinstance(traces, Trace):
        traces = [traces]
    _check(by, sort)
    from .merging.options import parse_duration, parse_ranks
    wanted = parse_ranks(ranks) if ranks is not None else None
    if min_dur:
        parse_duration(min_dur)
    tables = [rank_table(t, t.meta.rank if t.meta.rank is not None else k, by,
                         include_profiler_spans=include_profiler_spans, wanted=wanted, window=window,
                         drop_cat=drop_cat, min_dur=min_dur) for k, t in enumerate(traces)]
    from .merging.engine import LocalEngine
    table = LocalEngine(1).reduce(merge_tables, tables) if tables else RankTable()
    return finish_table(table, by, sort, top, ranks)


def _file_table(path: Any, position: int, fmt: str | None, by: str, include_profiler_spans: bool,
                wanted: Any, window: str | None, drop_cat: Sequence[str], min_dur: str | None) -> RankTable:
    """Read one input and make its table: the per-rank work of :func:`summarize_files` (on a worker)."""
    from .api import load
    trace = load(path, fmt)
    rank = trace.meta.rank if trace.meta.rank is not None else position
    return rank_table(trace, rank, by, include_profiler_spans=include_profiler_spans, wanted=wanted,
                      window=window, drop_cat=drop_cat, min_dur=min_dur)


def summarize_files(inputs: Sequence[Any], by: str = "name", sort: str = "self", top: int | None = None, *,
                    from_format: str | None = None, include_profiler_spans: bool = False,
                    ranks: str | None = None, window: str | None = None, drop_cat: Sequence[str] = (),
                    min_dur: str | None = None, engine: Any = "local", scheduler: str | None = None,
                    workers: int | None = None) -> Summary:
    """:func:`summarize` over files (local paths, globs, URLs: ``s3://bucket/run/rank*.json.gz``), each
    read and tabled where the engine runs it (this machine's process pool, or a Dask cluster); the
    per-rank tables are reduced pairwise there, and only the reduced table comes back.  The same
    table on either engine."""
    _check(by, sort)
    from .merging.engine import DaskEngine, make_engine
    from .merging.inputs import expand_inputs
    from .merging.options import parse_duration, parse_ranks
    files = expand_inputs(inputs)
    wanted = parse_ranks(ranks) if ranks is not None else None
    if min_dur:
        parse_duration(min_dur)
    items = [(f, k, from_format, by, include_profiler_spans, wanted, window, tuple(drop_cat), min_dur)
             for k, f in enumerate(files)]
    with make_engine(engine, scheduler=scheduler, workers=workers) as eng:
        if isinstance(eng, DaskEngine):
            futures = eng.map_keep(_file_table, items)
            try:
                table = eng.reduce(merge_tables, futures)
            except TraceconvError as e:
                raise e from None
        else:
            table = eng.reduce(merge_tables, list(eng.map(_file_table, items, files)))
    return finish_table(table, by, sort, top, ranks)


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
