"""Clock alignment: an offset per rank from what each rank's file says (its features: the
metadata, the collectives, the ``ProfilerStep#N`` marks), computed where the file is read.
Only the features come here; the events stay where they were read."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TraceconvError
from ..model import Clock, Trace
from .inputs import InputPath, handler_name
from .options import ALIGN_METHODS

MIN_COLLECTIVES = 3
AUTO_MAX_SPREAD_NS = 1_000_000
SAME_CLOCK_SLACK_NS = 10_000     # how far causality may seem broken on one clock (timestamp rounding)


def _median(x: Any) -> float:
    """``np.median`` of a 1-D array or list of numbers without NaN, to the bit (the middle value or
    the two middle ones added as doubles and halved, as ``np.mean`` does), ``nan`` when empty.
    numpy's own imports ``numpy.ma`` on a float array's first median (9 ms, in a merge's serial
    tail)."""
    a = np.asarray(x)
    n = len(a)
    if n == 0:
        return float("nan")
    k = n // 2
    p = np.partition(a, k if n % 2 else (k - 1, k))
    # np.mean of the middle one or two, its sum starting from 0.0 (so -0.0 comes out 0.0)
    return 0.0 + float(p[k]) if n % 2 else (0.0 + float(p[k - 1]) + float(p[k])) / 2


@dataclass
class Loaded:
    """One rank file's features: the trace (the whole one where it was read; elsewhere a stub that
    holds only its metadata), its collectives and steps, what the filters left out."""
    path: InputPath
    trace: Trace
    collectives: dict[str, list[tuple[int, int]]]   # key -> [(start, end)] sorted by start (see _collectives)
    dropped: dict[str, int] = field(default_factory=dict)
    steps: dict[int, int] = field(default_factory=dict)   # ProfilerStep#N -> its start (ns)
    events: int = 0                                       # events read
    named: dict[str, tuple[int, int]] = field(default_factory=dict)   # window name -> (first start, last end)
    time_range: tuple[int, int] | None = None              # of the kept events, in the file's own clock
    # the rank's events encoded where it was read (ranks.sequence_of): a perfetto.Sequence, the
    # uuid of each of the trace's tracks in it, and its slice count (also a merge archive's file's,
    # ranks.archive_entry); the trace then is a stub with its metadata and tracks
    sequence: Any = None
    uuids: list[int] = field(default_factory=list)
    slices: int = 0


# Collectives every rank leaves only once every rank has entered them: their records bound the clock
# offset both ways (see _match).  Rooted ones (broadcast, reduce, gather, scatter) and point-to-point
# kernels (SendRecv) do not: they are used only when a run has none of these.
_ALL_TO_ALL = ("allreduce", "allgather", "reducescatter", "alltoall", "barrier")
_NCCL_KERNEL = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)")
_UNEVEN = re.compile(r":(?:alltoall|sendrecv|send|recv)")
_STEP = re.compile(r"ProfilerStep#(\d{1,18})")


def _kind(op: str) -> str:
    """``_all_gather_base`` / ``AllGather`` / ``all_reduce`` -> ``allgatherbase`` / ``allgather`` / ``allreduce``."""
    return re.sub(r"[^a-z]", "", op.lower())


def all_to_all(key: str) -> bool:
    kind = key.split(":", 1)[1].split("[", 1)[0]
    return kind.startswith(_ALL_TO_ALL)


def _size(args: dict[str, Any]) -> int | None:
    """The element count of a collective from its args (Kineto: ``In msg nelems`` on NCCL kernels,
    ``Input Dims`` on gloo's annotations)."""
    n = args.get("In msg nelems")
    if isinstance(n, int) and not isinstance(n, bool):
        return n
    dims = args.get("Input Dims")
    if isinstance(dims, list) and dims and isinstance(dims[0], list) \
            and all(isinstance(x, int) and not isinstance(x, bool) for x in dims[0]):
        size = 1
        for x in dims[0]:
            size *= x
        return size
    return None


def _collectives(trace: Trace) -> dict[str, list[tuple[int, int]]]:
    """The collectives of one rank that end together on every rank, as ``key -> [(start, end)]``
    sorted by start.  Two sources, kept apart by the key's prefix:

    * ``kernel:``: NCCL/RCCL kernels on the GPU (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``,
      ``ncclKernel_SendRecv_...``);
    * ``gloo:``: gloo's own ``gloo:all_reduce`` / ``gloo:barrier`` / ... spans, recorded on gloo's
      worker threads around the communication itself.

    The CPU-side ops (``c10d::allreduce_``, ``record_param_comms``, ``nccl:all_reduce``) only enqueue
    the work and return, so their ends say nothing about when the collective completed: they are
    not used.  The key is the source, the kind and, when the args give it, the element count:
    ``gloo:allreduce[676]``."""
    strs = trace.strings.strings
    s = trace.slices
    if not len(s):
        return {}
    name = np.frombuffer(s.name, np.int32)
    cat = np.frombuffer(s.cat, np.int32)
    ts = np.frombuffer(s.ts, np.int64)
    end = ts + np.frombuffer(s.dur, np.int64)
    # decide per string, then pick rows with numpy: the table has thousands of strings, the trace millions of slices
    kinds: dict[int, str] = {}
    for i, x in enumerate(strs):
        if x.startswith("gloo:"):
            kinds[i] = "gloo:" + _kind(x[5:])
        elif x.startswith(("nccl", "rccl")):
            m = _NCCL_KERNEL.match(x)
            if m:
                kinds[i] = "kernel:" + _kind(m.group(1))
    if not kinds:
        return {}
    is_coll = np.zeros(len(strs), bool)
    is_coll[list(kinds)] = True
    not_cpu = np.array([x in ("kernel", "") for x in strs], bool)
    rows = np.flatnonzero(is_coll[name])
    out: dict[str, list[tuple[int, int]]] = {}
    for r in rows.tolist():
        kind = kinds[int(name[r])]
        if kind.startswith("kernel:") and not not_cpu[cat[r]]:
            continue
        # sizes tell collectives of one kind apart; an all-to-all's or a send/recv's may differ by rank
        size = _size(trace.slice_args(r)) if s.args[r] and not _UNEVEN.search(kind) else None
        key = kind if size is None else f"{kind}[{size}]"
        out.setdefault(key, []).append((int(ts[r]), int(end[r])))
    return {k: sorted(v) for k, v in out.items()}


def _steps(trace: Trace) -> dict[int, int]:
    """``ProfilerStep#N`` -> the start of its first slice: a coarse common mark across ranks."""
    out: dict[int, int] = {}
    sids = {i: int(m.group(1)) for i, x in enumerate(trace.strings.strings) if (m := _STEP.fullmatch(x))}
    if not sids or not len(trace.slices):
        return out
    name = np.frombuffer(trace.slices.name, np.int32)
    ts = np.frombuffer(trace.slices.ts, np.int64)
    rows = np.flatnonzero(np.isin(name, np.fromiter(sids, np.int32, len(sids))))
    for sid, t in zip(name[rows].tolist(), ts[rows].tolist()):
        step = sids[sid]
        out[step] = min(out.get(step, t), t)
    return out



def host_of(item: "Loaded") -> str | None:
    """The host that recorded a file: Kineto's ``host_name``, else the handler's default name."""
    host = item.trace.meta.extra.get("host_name")
    if isinstance(host, str) and host:
        return host
    handler = handler_name(item.path)
    return handler[0] if handler is not None else None


# ---------------------------------------------------------------- alignment

@dataclass
class Alignment:
    rank: int
    method: str
    offset_ns: int
    uncertainty_ns: int | None
    detail: str = ""
    matched: int | None = None                  # collectives of this rank matched with the reference rank
    bounds_ns: tuple[int, int] | None = None    # the offsets the matched collectives allow (see _match)
    host: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "method": self.method, "offset_ns": self.offset_ns,
                "uncertainty_ns": self.uncertainty_ns, "detail": self.detail, "matched": self.matched,
                "bounds_ns": list(self.bounds_ns) if self.bounds_ns else None, "host": self.host}


def _barrier(by_rank: dict[int, list[Loaded]]) -> dict[int, tuple[int, int]] | None:
    """rank -> (sync time ns, error bound ns) from Composer metadata, if every rank has it."""
    out = {}
    for r, items in by_rank.items():
        for it in items:
            info = it.trace.meta.extra.get("composer.ranks", {}).get(str(r))
            if info and "clock_sync_timestamp_us" in info:
                out[r] = (int(info["clock_sync_timestamp_us"]) * 1000,
                          int(info.get("clock_sync_error_bound", 0)) * 1000)
                break
    return out if len(out) == len(by_rank) else None


@dataclass
class Match:
    """What the collectives of two ranks say about the offset to add to the second's times."""
    diffs: np.ndarray               # end(ref) - end(other) of each matched pair
    lo: int | None = None           # causality: ref's end >= other's start and other's end >= ref's start
    hi: int | None = None           # for every matched all-to-all collective (None: no bound, or a conflict)

    @property
    def matched(self) -> int:
        return len(self.diffs)

    conflict: bool = False          # pooled pairs whose bounds do not meet: not one clock after all

    def extend(self, other: "Match") -> None:
        """Pool another pair's matches (ranks known to share one clock): bounds intersect."""
        self.diffs = np.concatenate([self.diffs, other.diffs])
        self.conflict |= other.conflict
        if other.lo is None or other.hi is None:
            return
        if self.lo is None or self.hi is None:
            self.lo, self.hi = other.lo, other.hi
            return
        self.lo, self.hi = max(self.lo, other.lo), min(self.hi, other.hi)
        if self.lo > self.hi:
            self.lo = self.hi = None
            self.conflict = True

    def estimate(self) -> tuple[int, int]:
        """(offset, uncertainty): the median end difference, kept inside the causality bounds;
        1.4826 x the median absolute deviation (at least 1 µs), or less when the bounds are tighter
        (they hold the true offset whatever the noise)."""
        d = self.diffs
        med = int(_median(d))
        unc = max(int(round(1.4826 * _median(np.abs(d - med)))), 1_000)
        if self.lo is not None and self.hi is not None:
            med = min(max(med, self.lo), self.hi)
            unc = min(unc, max(med - self.lo, self.hi - med, 1_000))
        return med, unc


def _candidates(a: np.ndarray, b: np.ndarray, causal: bool, max_shift: int) -> list[tuple]:
    """The ways to pair the collectives of one key: the k-th of ``a`` with the (k - shift)-th of
    ``b`` (windows may start a few collectives apart), as ``(pairs, spread, |shift|, median,
    diffs, bounds)``.  A shift that breaks causality (an all-to-all collective cannot end on one
    rank before it started on another) is left out."""
    out = []
    for shift in range(-max_shift, max_shift + 1):
        i0, j0 = max(0, shift), max(0, -shift)
        n = min(len(a) - i0, len(b) - j0)
        if n <= 0:
            continue
        A, B = a[i0:i0 + n], b[j0:j0 + n]
        d = A[:, 1] - B[:, 1]
        lo, hi = int((A[:, 0] - B[:, 1]).max()), int((A[:, 1] - B[:, 0]).min())
        if causal and lo > hi:
            continue
        med = _median(d)
        out.append((n, _median(np.abs(d - med)), abs(shift), med, d, (lo, hi) if causal else None))
    return out


def _match(ref: dict[str, list[tuple[int, int]]], other: dict[str, list[tuple[int, int]]],
           prior: int | None = None, max_shift: int = 16) -> Match:
    """Match the collectives of two ranks key by key (same source, kind and size): the all-to-all
    ones (all-reduce, all-gather, reduce-scatter, all-to-all, barrier) when the two share any, else
    all they share.  Keys are taken the richest first; each takes the pairing that agrees with
    those taken before (its causality bounds meet theirs; for keys without bounds, its offset is
    the nearest to theirs), and of those the one nearest the ``prior`` (from ProfilerStep#N marks)
    when there is one, else the one with the most pairs, then the tightest, then the least
    shifted.  A key none of whose pairings agrees is left out."""
    keys = [k for k in ref if k in other]
    causal = [k for k in keys if all_to_all(k)]
    cands = {k: _candidates(np.asarray(ref[k], np.int64), np.asarray(other[k], np.int64), bool(causal), max_shift)
             for k in (causal or keys)}
    order = sorted((k for k in cands if cands[k]), key=lambda k: (-max(c[0] for c in cands[k]), k))
    lo, hi = -(2**63), 2**63 - 1
    chosen: list[np.ndarray] = []
    for k in order:
        cs = cands[k]
        if causal:
            cs = [c for c in cs if c[5][0] <= hi and c[5][1] >= lo]
        if not cs:
            continue
        most = max(c[0] for c in cs)
        if prior is not None:
            cs = [c for c in cs if 2 * c[0] >= most]
            best = min(cs, key=lambda c: (abs(c[3] - prior), c[2]))
        elif chosen and not causal:
            so_far = _median(np.concatenate(chosen))
            best = min(cs, key=lambda c: (abs(c[3] - so_far), -c[0], c[2]))
        else:
            best = min(cs, key=lambda c: (-c[0], c[1], c[2]))
        chosen.append(best[4])
        if causal:
            lo, hi = max(lo, best[5][0]), min(hi, best[5][1])
    diffs = np.concatenate(chosen) if chosen else np.zeros(0, np.int64)
    return Match(diffs, lo, hi) if causal and chosen else Match(diffs)


def match_collectives(ref: dict[str, list[tuple[int, int]]], other: dict[str, list[tuple[int, int]]],
                      max_shift: int = 16) -> np.ndarray:
    """End-time differences (ref - other) of matched collectives (see :func:`_match`)."""
    return _match(ref, other, None, max_shift).diffs


def _rank_collectives(items: list[Loaded]) -> dict[str, list[tuple[int, int]]]:
    merged: dict[str, list[tuple[int, int]]] = {}
    for it in items:
        for k, v in it.collectives.items():
            merged.setdefault(k, []).extend(v)
    return {k: sorted(v) for k, v in merged.items()}


def _prior(ref: list[Loaded], other: list[Loaded]) -> int | None:
    """A coarse offset from the ProfilerStep#N marks both ranks have: which period is the right one."""
    sa = {k: v for it in ref for k, v in it.steps.items()}
    sb = {k: v for it in other for k, v in it.steps.items()}
    common = sorted(set(sa) & set(sb))
    return int(_median([sa[k] - sb[k] for k in common])) if common else None


def _rank_hosts(by_rank: dict[int, list[Loaded]]) -> dict[int, str | None]:
    """rank -> the host that recorded it, when all its files say the same one and have an absolute
    time (two processes on one host read one clock)."""
    out: dict[int, str | None] = {}
    for r, items in by_rank.items():
        hosts = {host_of(it) for it in items}
        absolute = all(it.trace.meta.clock is Clock.UNIX for it in items)
        out[r] = hosts.pop() if len(hosts) == 1 and absolute else None
    return out


def align(by_rank: dict[int, list[Loaded]], method: str) -> dict[int, Alignment]:
    if method not in ALIGN_METHODS:
        raise TraceconvError(f"unknown {{opt:align_method}} '{method}'; choose one of: {', '.join(ALIGN_METHODS)}")
    ranks = sorted(by_rank)
    ref = ranks[0]
    hosts = _rank_hosts(by_rank)
    if method == "none":
        return {r: Alignment(r, "none", 0, None, "timestamps as the files have them", host=hosts[r]) for r in ranks}
    barrier = _barrier(by_rank) if method in ("auto", "barrier") else None
    if method == "barrier" and barrier is None:
        lacking = [r for r in ranks if r not in (_barrier_partial(by_rank))]
        raise TraceconvError("{opt:align_method} barrier needs Composer's clock_sync_timestamp_us for every rank; "
                             f"missing for rank(s) {', '.join(map(str, lacking))}")
    if barrier is not None:
        base = barrier[ref][0]
        return {r: Alignment(r, "barrier", base - t, bound, f"Composer clock sync (rank {ref} at {base} ns)",
                             host=hosts[r]) for r, (t, bound) in barrier.items()}
    absolute = {r: all(it.trace.meta.clock is Clock.UNIX for it in by_rank[r]) for r in ranks}
    if method == "wallclock":
        bad = [str(r) for r in ranks if not absolute[r]]
        if bad:
            raise TraceconvError("{opt:align_method} wallclock: rank(s) " + ", ".join(bad) + " have no absolute time base")
        one = {r for r in ranks if hosts[r] is not None and hosts[r] == hosts[ref]}   # one host: one clock
        return {r: Alignment(r, "wallclock", 0, 0 if r in one else None, "the files' own absolute time"
                             + (f" (host {hosts[r]}, as rank {ref})" if r in one and r != ref else ""), host=hosts[r])
                for r in ranks}

    # collectives, rank by rank against the reference rank
    coll = {r: _rank_collectives(by_rank[r]) for r in ranks}
    matches = {r: _match(coll[ref], coll[r], _prior(by_rank[ref], by_rank[r])) for r in ranks if r != ref}
    matched = {r: m.matched for r, m in matches.items()}
    matched[ref] = max(matched.values(), default=0)
    by_coll: dict[int, Alignment] = {ref: Alignment(ref, "collectives", 0, 0, "reference rank", matched[ref],
                                                    host=hosts[ref])}
    for r, m in matches.items():
        if m.matched >= MIN_COLLECTIVES:
            off, unc = m.estimate()
            by_coll[r] = Alignment(r, "collectives", off, unc, f"{m.matched} collectives matched with rank {ref}",
                                   m.matched, (m.lo, m.hi) if m.lo is not None else None, hosts[r])
    if method == "collectives":
        if len(by_coll) < len(ranks):
            lacking = [f"{r} ({matched[r]})" for r in ranks if r not in by_coll]
            raise TraceconvError(f"{{opt:align_method}} collectives: fewer than {MIN_COLLECTIVES} collectives matched with rank {ref} "
                                 f"for rank(s) {', '.join(lacking)} (NCCL kernels and gloo's gloo:* spans are used; "
                                 "c10d:: and record_param_comms ops only enqueue the work)")
        return by_coll

    # auto: ranks recorded on the reference's host read its clock; every other host (or rank, when
    # the files do not say their host) is placed by the collectives of all its ranks against those
    # of the reference's host, when they agree to within AUTO_MAX_SPREAD_NS; else by its wall clock
    groups: dict[Any, list[int]] = {}
    for r in ranks:
        groups.setdefault(("host", hosts[r]) if hosts[r] is not None else ("rank", r), []).append(r)
    ref_group = ("host", hosts[ref]) if hosts[ref] is not None else ("rank", ref)
    out: dict[int, Alignment] = {}
    refuted: set[int] = set()
    for r in groups[ref_group][1:]:
        # a host name is a claim: collectives that end on one rank before they began on the
        # reference (or the reverse) at offset 0 prove two clocks
        m = matches[r]
        if m.lo is not None and m.hi is not None and not m.lo - SAME_CLOCK_SLACK_NS <= 0 <= m.hi + SAME_CLOCK_SLACK_NS:
            refuted.add(r)
    for r in sorted(refuted):
        groups[ref_group].remove(r)
        groups[("rank", r)] = [r]
    refs = groups[ref_group]
    for r in refs:
        detail = ("reference rank" + (f" (host {hosts[r]})" if hosts[r] else "")) if r == ref \
            else f"same host as rank {ref} ({hosts[r]}): one clock"
        out[r] = Alignment(r, "wallclock" if hosts[r] else "collectives", 0, 0, detail, matched.get(r), host=hosts[r])

    def pool(members: list[int]) -> Match:
        pooled = Match(np.zeros(0, np.int64))
        for r in members:
            for q in refs:
                m = matches[r] if q == ref else _match(coll[q], coll[r], _prior(by_rank[q], by_rank[r]))
                pooled.extend(m)
        return pooled

    todo = [(g, members) for g, members in groups.items() if g != ref_group]
    while todo:
        g, members = todo.pop(0)
        pooled = pool(members)
        if pooled.conflict and len(members) > 1:       # one host name, but not one clock: rank by rank
            todo[:0] = [(("rank", r), [r]) for r in members]
            continue
        usable = pooled.matched >= MIN_COLLECTIVES
        off, unc = pooled.estimate() if usable else (0, None)
        note = ""
        if members[0] in refuted:
            note = f"host {hosts[members[0]]} as rank {ref}, but its collectives rule out one clock; "
        if usable and (unc <= AUTO_MAX_SPREAD_NS or not all(absolute[r] for r in members)):
            where = f"host {g[1]}: " if g[0] == "host" else ""
            with_ = f"host {hosts[ref]}" if ref_group[0] == "host" and len(refs) > 1 else f"rank {ref}"
            detail = f"{note}{where}{pooled.matched} collectives matched with {with_}"
            for r in members:
                out[r] = Alignment(r, "collectives", off, unc, detail, matched.get(r),
                                   (pooled.lo, pooled.hi) if pooled.lo is not None else None, hosts[r])
            continue
        bad = [str(r) for r in members if not absolute[r]]
        if bad:
            raise TraceconvError("cannot align: rank(s) " + ", ".join(bad)
                                 + " have no absolute time base (nor a Composer clock sync or enough matched "
                                 "collectives); use {opt:align_method} none to merge them as they are")
        why = note + "the files' own absolute time"
        if usable:
            why += f"; collectives disagree by up to {unc / 1e6:.3f} ms, so not used"
        elif pooled.matched:
            why += f"; only {pooled.matched} collectives matched"
        for r in members:
            out[r] = Alignment(r, "wallclock", 0, None, why, matched.get(r), host=hosts[r])
    # the reference rank: named after how the others were placed on its clock
    others = {a.method for r, a in out.items() if r != ref}
    placed_by_collectives = "collectives" in others or (not others and not absolute[ref])
    out[ref].method = "collectives" if placed_by_collectives else "wallclock"
    return {r: out[r] for r in ranks}


def _barrier_partial(by_rank: dict[int, list[Loaded]]) -> set[int]:
    have = set()
    for r, items in by_rank.items():
        for it in items:
            info = it.trace.meta.extra.get("composer.ranks", {}).get(str(r))
            if info and "clock_sync_timestamp_us" in info:
                have.add(r)
    return have

