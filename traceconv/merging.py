"""Merge the traces of many ranks into one aligned timeline (``traceconv merge``).

1. **Inputs**: files, directories (their ``*.json`` / ``*.json.gz`` files) and globs; any
   format traceconv reads; parsed in parallel, one worker per core.
2. **Rank of each file**: an explicit ``--rank FILE=N``; else what the file says
   (Kineto ``distributedInfo.rank``, Composer ``global_rank``); else its name
   (``rank3``, ``rank-3``, ``rank_3``, ``.3.pt.trace``), but never the pid or the timestamp of
   ``tensorboard_trace_handler``'s default name ``<host>_<pid>.<time_ns>.pt.trace.json``; else
   the order of the files: the smallest ranks no other file claims, with a note naming the file.
   Two files of one format claiming one rank is an error naming both.  Ranks are 0..2^31-1.
3. **One namespace per rank**: each rank's processes become processes of their own,
   named ``rank 3 · python3 (pid 4242)`` / ``rank 3 · GPU 1``, ordered by rank, host before
   devices.  Flows are links between slices of the model, so no arrow can join two
   ranks; raw correlation/flow ids stay in the args untouched.
4. **Clock alignment** (an offset per rank, added to its timestamps):

   * ``wallclock``: the files' own absolute time bases as they are (Kineto
     ``baseTimeNanoseconds``, which differs between ranks that straddle a quarter
     boundary, is applied per file by the reader); offset 0, uncertainty unknown.
   * ``barrier``: Composer's ``clock_sync_timestamp_us``, taken between two barriers on
     every rank; rank r moves by ``sync(lowest rank) - sync(r)``, as Composer's own merger
     does, with ``clock_sync_error_bound`` as the uncertainty.
   * ``collectives``: the collectives whose records bracket the communication itself: NCCL
     kernels on the GPU and gloo's own ``gloo:all_reduce`` / ``gloo:barrier`` / ... spans (the
     CPU-side ``c10d::`` ops and ``record_param_comms`` only enqueue the work).  They are matched
     against the reference rank (the lowest) key by key (source, kind, element count), the k-th
     with the k-th, allowing windows that start up to 16 collectives apart: an all-to-all
     collective (all-reduce, all-gather, reduce-scatter, all-to-all, barrier) cannot end on one
     rank before it started on another, which bounds the offset both ways and rules pairings out;
     ``ProfilerStep#N`` marks pick among pairings a period apart.  The offset is the median
     end-time difference, kept inside those bounds; the uncertainty 1.4826 × their median
     absolute deviation (at least 1 µs), or half the bounds' width around it when narrower.
     Each rank reports how many collectives it matched.
   * ``auto``: barrier if every rank has it; else ranks recorded on the reference rank's host
     (Kineto's ``host_name``, or the handler's default file name) keep their times (one clock,
     uncertainty 0); every other host (or rank, when the files do not say) moves by what the
     collectives of all its ranks say against those of the reference's host when at least 3
     matched and they agree within 1 ms, else keeps its wall clock; a rank with no absolute time
     and no collectives is an error.
5. **Filters**: ``--ranks``, ``--window`` (a time range, or the span of a named slice such
   as ``ProfilerStep#4`` over all ranks), ``--min-dur``, ``--drop-cat``.
6. **Archive** (``-o run.tar``): one .pftrace per rank file and a ``perfetto_manifest.json``
   that trace_processor (v58+) merges: see :func:`_write_archive`.
"""

from __future__ import annotations

import glob
import io
import os
import re
import tarfile
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import AbstractSet, Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import orjson

from . import formats as _formats
from .api import PathLike, load, save
from .errors import TraceconvError, WarningCode
from .io import atomic_output
from .model import Clock, Trace, TrackKind

ALIGN_METHODS = ("auto", "none", "wallclock", "barrier", "collectives")
ARCHIVE = "perfetto-archive"
MIN_COLLECTIVES = 3
AUTO_MAX_SPREAD_NS = 1_000_000
SAME_CLOCK_SLACK_NS = 10_000     # how far causality may seem broken on one clock (timestamp rounding)
_RANK_IN_NAME = [re.compile(p, re.ASCII | re.IGNORECASE) for p in (r"(?<![a-z])rank[-_]?(\d+)", r"\.(\d{1,10})\.pt\.trace")]
# tensorboard_trace_handler's default: f"{socket.gethostname()}_{os.getpid()}.{time.time_ns()}.pt.trace.json[.gz]"
_HANDLER_NAME = re.compile(r"(.+)_(\d+)\.(\d{11,})\.pt\.trace\.json(?:\.gz)?", re.ASCII)
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


# ---------------------------------------------------------------- arguments

def parse_duration(text: str) -> int:
    """``5us``, ``1.5ms``, ``2s``, ``300ns`` → ns."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s)\s*", text)
    if not m:
        raise TraceconvError(f"'{text}' is not a duration; write it with a unit, e.g. 5us, 1.5ms, 2s")
    return round(float(m.group(1)) * _UNITS[m.group(2)])


RANK_MAX = 2**31 - 1          # ranks are 0..2^31-1 (what a pid-like id and Perfetto's int32 fields hold)


class RankSet(AbstractSet[int]):
    """The ranks ``--ranks`` keeps: a few ranges, never materialized (``0-2147483647`` is 16 bytes).

    It is a read-only set: ``in``, ``len``, iteration in order, ``==`` with other sets."""

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        merged: list[list[int]] = []
        for a, b in sorted(ranges):
            if merged and a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.ranges = [(a, b) for a, b in merged]     # inclusive, disjoint, sorted

    @classmethod
    def _from_iterable(cls, it: Iterable[int]) -> frozenset[int]:    # results of set operators
        return frozenset(it)

    def __contains__(self, r: object) -> bool:
        return isinstance(r, int) and any(a <= r <= b for a, b in self.ranges)

    def __len__(self) -> int:
        return sum(b - a + 1 for a, b in self.ranges)

    def __iter__(self) -> Iterator[int]:
        for a, b in self.ranges:
            yield from range(a, b + 1)

    def __repr__(self) -> str:
        return "RankSet(" + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.ranges) + ")"


def _rank_number(text: str, what: str) -> int:
    digits = text.lstrip("0") or "0"
    if len(digits) > 10 or int(digits) > RANK_MAX:
        raise TraceconvError(f"{what}: rank {text[:24]}{'...' if len(text) > 24 else ''} is out of range "
                             f"(ranks are 0..{RANK_MAX})")
    return int(text)


def parse_ranks(text: str) -> RankSet:
    """``0-3,5`` → {0, 1, 2, 3, 5} (a :class:`RankSet`: ranges are checked, never materialized)."""
    out: list[tuple[int, int]] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part, re.ASCII)
        if not m:
            raise TraceconvError(f"--ranks: '{part.strip()[:40]}' is not a rank or a range like 0-3")
        a = _rank_number(m.group(1), "--ranks")
        b = _rank_number(m.group(2), "--ranks") if m.group(2) else a
        if b < a:
            raise TraceconvError(f"--ranks: empty range '{part.strip()}'")
        out.append((a, b))
    return RankSet(out)


def parse_rank_map(items: Sequence[str]) -> dict[Path, int]:
    out: dict[Path, int] = {}
    for item in items:
        path, sep, num = item.rpartition("=")
        num = num.strip()
        if not sep or not path or not num.isdigit() or not num.isascii():
            raise TraceconvError(f"--rank takes FILE=N, not '{item[:200]}'")
        out[Path(path).resolve()] = _rank_number(num, f"--rank {path}")
    return out


def collect_inputs(items: Iterable[PathLike]) -> list[Path]:
    """Files, directories (their .json/.json.gz files) and globs → sorted unique files."""
    files: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith(".")
                           and (f.name.endswith((".json", ".json.gz")) or ".pt.trace" in f.name))
            if not found:
                raise TraceconvError("no .json or .json.gz trace files in this folder", path=p)
            files.extend(found)
        elif p.exists():
            files.append(p)
        elif any(ch in str(item) for ch in "*?["):
            found = sorted(Path(f) for f in glob.glob(str(item)) if Path(f).is_file())
            if not found:
                raise TraceconvError("no file matches this pattern", path=item)
            files.extend(found)
        else:
            raise TraceconvError("no such file", path=p)
    seen: set[Path] = set()
    unique = []
    for f in files:
        r = f.resolve()
        if r not in seen:
            seen.add(r)
            unique.append(f)
    return unique


# ---------------------------------------------------------------- per-file work (in workers)

@dataclass
class Loaded:
    path: Path
    trace: Trace
    collectives: dict[str, list[tuple[int, int]]]   # key -> [(start, end)] sorted by start (see _collectives)
    dropped: dict[str, int] = field(default_factory=dict)
    steps: dict[int, int] = field(default_factory=dict)   # ProfilerStep#N -> its start (ns)


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


def _load_one(path: Path, fmt: str | None, drop_cats: frozenset[str], min_dur: int) -> Loaded:
    trace = load(path, fmt)
    coll = _collectives(trace)
    steps = _steps(trace)
    dropped = {}
    if drop_cats or min_dur:
        dropped = _filter(trace, drop_cats, min_dur)
    return Loaded(path, trace, coll, dropped, steps)


def _filter(trace: Trace, drop_cats: frozenset[str], min_dur: int,
            window: tuple[int, int] | None = None) -> dict[str, int]:
    """Drop slices/instants/counters in place by category, duration and time window."""
    st = trace.strings
    s = trace.slices
    n = len(s)
    keep = np.ones(n, dtype=bool)
    dropped: dict[str, int] = {}
    if n:
        ts = np.frombuffer(s.ts, dtype=np.int64)
        dur = np.frombuffer(s.dur, dtype=np.int64)
        if drop_cats:
            bad = np.array([st[i] in drop_cats for i in range(len(st))], dtype=bool)
            m = bad[np.frombuffer(s.cat, dtype=np.int32)]
            dropped["--drop-cat"] = int(m.sum())
            keep &= ~m
        if min_dur:
            m = (dur < min_dur) & keep
            dropped["--min-dur"] = int(m.sum())
            keep &= ~m
        if window:
            w0, w1 = window
            inside = (ts < w1) & ((ts + dur > w0) | ((dur == 0) & (ts >= w0)))
            m = ~inside & keep
            dropped["--window"] = int(m.sum())
            keep &= ~m
    if not keep.all():
        new_index = np.cumsum(keep) - 1
        idx = np.nonzero(keep)[0]
        for col in ("ts", "dur", "track", "name", "cat"):
            a = getattr(s, col)
            setattr(s, col, type(a)(a.typecode, np.frombuffer(a, dtype=a.typecode).take(idx).tobytes())
                    if len(idx) else type(a)(a.typecode))
        s.args = s.args.take(idx.tolist())
        s.depth = s.parent = None
        f = trace.flows
        if len(f):
            src = np.frombuffer(f.src, dtype=np.int64)
            dst = np.frombuffer(f.dst, dtype=np.int64)
            fk = keep[src] & keep[dst]
            lost = int((~fk).sum())
            if lost:
                dropped["flows whose slice was filtered out"] = lost
            f.src = type(f.src)("q", new_index[src[fk]].astype(np.int64).tobytes())
            f.dst = type(f.dst)("q", new_index[dst[fk]].astype(np.int64).tobytes())
            f.name = type(f.name)("i", np.frombuffer(f.name, dtype=np.int32)[fk].tobytes())
    ins = trace.instants
    if len(ins) and (drop_cats or window):
        its = np.frombuffer(ins.ts, dtype=np.int64)
        k = np.ones(len(ins), dtype=bool)
        if drop_cats:
            k &= ~np.array([st[c] in drop_cats for c in ins.cat], dtype=bool)
        if window:
            k &= (its >= window[0]) & (its < window[1])
        if not k.all():
            dropped["instants"] = dropped.get("instants", 0) + int((~k).sum())
            idx = np.nonzero(k)[0]
            for col in ("ts", "track", "name", "cat"):
                a = getattr(ins, col)
                setattr(ins, col, type(a)(a.typecode, np.frombuffer(a, dtype=a.typecode).take(idx).tobytes()))
            ins.args = ins.args.take(idx.tolist())
    c = trace.counters
    if len(c) and window:
        cts = np.frombuffer(c.ts, dtype=np.int64)
        k = (cts >= window[0]) & (cts < window[1])
        if not k.all():
            dropped["counter samples"] = int((~k).sum())
            for col in ("ts", "track", "value"):
                a = getattr(c, col)
                setattr(c, col, type(a)(a.typecode, np.frombuffer(a, dtype=a.typecode)[k].tobytes()))
    return {k: v for k, v in dropped.items() if v}


# ---------------------------------------------------------------- ranks

def handler_name(path: Path) -> tuple[str, int, int] | None:
    """``(host, pid, time_ns)`` of a file named as PyTorch's ``tensorboard_trace_handler`` names
    them by default: ``<host>_<pid>.<time_ns>.pt.trace.json[.gz]``."""
    m = _HANDLER_NAME.fullmatch(path.name)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def rank_from_name(path: Path) -> int | None:
    """A rank written in the file's name: ``rank3``, ``rank-3``, ``rank_3``, or ``.3.pt.trace``;
    never the pid or the timestamp of the handler's default name, nor anything past 2^31-1."""
    name = path.name
    handler = handler_name(path)
    if handler is not None:
        name = handler[0]                  # only the host part can say a rank ("...-rank3_4242.17...")
    for i, rx in enumerate(_RANK_IN_NAME):
        if handler is not None and i:
            break
        m = rx.search(name)
        if m and len(m.group(1)) <= 10 and int(m.group(1)) <= RANK_MAX:
            return int(m.group(1))
    return None


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
        med = int(np.median(d))
        unc = max(int(round(1.4826 * float(np.median(np.abs(d - med))))), 1_000)
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
        med = float(np.median(d))
        out.append((n, float(np.median(np.abs(d - med))), abs(shift), med, d, (lo, hi) if causal else None))
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
            so_far = float(np.median(np.concatenate(chosen)))
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
    return int(np.median([sa[k] - sb[k] for k in common])) if common else None


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
        raise TraceconvError(f"unknown --align '{method}'; choose one of: {', '.join(ALIGN_METHODS)}")
    ranks = sorted(by_rank)
    ref = ranks[0]
    hosts = _rank_hosts(by_rank)
    if method == "none":
        return {r: Alignment(r, "none", 0, None, "timestamps as the files have them", host=hosts[r]) for r in ranks}
    barrier = _barrier(by_rank) if method in ("auto", "barrier") else None
    if method == "barrier" and barrier is None:
        lacking = [r for r in ranks if r not in (_barrier_partial(by_rank))]
        raise TraceconvError("--align barrier needs Composer's clock_sync_timestamp_us for every rank; "
                             f"missing for rank(s) {', '.join(map(str, lacking))}")
    if barrier is not None:
        base = barrier[ref][0]
        return {r: Alignment(r, "barrier", base - t, bound, f"Composer clock sync (rank {ref} at {base} ns)",
                             host=hosts[r]) for r, (t, bound) in barrier.items()}
    absolute = {r: all(it.trace.meta.clock is Clock.UNIX for it in by_rank[r]) for r in ranks}
    if method == "wallclock":
        bad = [str(r) for r in ranks if not absolute[r]]
        if bad:
            raise TraceconvError("--align wallclock: rank(s) " + ", ".join(bad) + " have no absolute time base")
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
            raise TraceconvError(f"--align collectives: fewer than {MIN_COLLECTIVES} collectives matched with rank {ref} "
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
                                 "collectives); use --align none to merge them as they are")
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


# ---------------------------------------------------------------- combining

def _is_device(name: str, labels: list[str]) -> bool:
    return name.startswith("GPU ") or any(l.startswith("GPU ") for l in labels)


def append_rank(dst: Trace, src: Trace, rank: int, offset: int) -> None:
    """Copy ``src`` into ``dst`` as rank ``rank``'s namespace, shifted by ``offset`` ns."""
    smap = np.array([dst.strings.intern(x) for x in src.strings.strings], dtype=np.int32)
    # processes: host before devices, then by their own sort order
    order = sorted(src.processes, key=lambda p: (_is_device(p.name, p.labels),
                                                 p.sort_index if p.sort_index is not None else 0, p.id))
    pmap: dict[int, Any] = {}
    base_sort = rank * 1000
    for k, p in enumerate(order):
        if isinstance(p.raw_pid, int) and not _is_device(p.name, p.labels):
            name = f"rank {rank} · {p.name or 'process'} (pid {p.raw_pid})"
        else:
            name = f"rank {rank} · {p.name or p.raw_pid or 'process'}"
        q = dst.process(("rank", rank, id(src), p.id), name, synthetic=True, pid=base_sort + k + 1)
        q.sort_index = base_sort + k
        q.labels = [f"rank {rank}", *p.labels]
        q.args = {**p.args, "rank": rank, "raw_pid": p.raw_pid if isinstance(p.raw_pid, (int, str)) else None}
        pmap[p.id] = q
    tmap = np.zeros(len(src.tracks), dtype=np.int32)
    for t in src.tracks:
        base = t
        while base.kind is TrackKind.LANE and base.parent is not None:
            base = src.tracks[base.parent]
        if base is not t:
            continue
        if t.kind is TrackKind.PROCESS:
            tmap[t.id] = dst.process_track(pmap[t.process]).id
        elif t.kind is TrackKind.THREAD:
            th = src.threads[t.thread]
            nt = dst.thread(pmap[th.process], th.tid, th.name)
            nt.sort_index = th.sort_index
            tmap[t.id] = nt.track
        else:
            proc = pmap[t.process] if t.process is not None else None
            name = t.name if proc is not None else f"rank {rank} · {t.name}"
            if t.kind is TrackKind.COUNTER:
                tmap[t.id] = dst.track(TrackKind.COUNTER, name, proc, unit=t.unit, series=t.series).id
            else:
                tmap[t.id] = dst.new_track(t.kind, name, proc).id
    for t in src.tracks:
        if t.kind is TrackKind.LANE:
            base = t
            while base.kind is TrackKind.LANE and base.parent is not None:
                base = src.tracks[base.parent]
            tmap[t.id] = tmap[base.id]

    def ext(dst_arr, src_arr, dtype, fn=None):
        a = np.frombuffer(src_arr, dtype=dtype) if len(src_arr) else np.zeros(0, dtype)
        dst_arr.frombytes((fn(a) if fn is not None else a).astype(dtype).tobytes())

    s, d = src.slices, dst.slices
    first = len(d)
    ext(d.ts, s.ts, np.int64, lambda a: a + offset)
    ext(d.dur, s.dur, np.int64)
    ext(d.track, s.track, np.int32, lambda a: tmap[a])
    ext(d.name, s.name, np.int32, lambda a: smap[a])
    ext(d.cat, s.cat, np.int32, lambda a: smap[a])
    d.args.extend(s.args)
    d.depth = d.parent = None
    si, di = src.instants, dst.instants
    ext(di.ts, si.ts, np.int64, lambda a: a + offset)
    ext(di.track, si.track, np.int32, lambda a: tmap[a])
    ext(di.name, si.name, np.int32, lambda a: smap[a])
    ext(di.cat, si.cat, np.int32, lambda a: smap[a])
    di.args.extend(si.args)
    sc, dc = src.counters, dst.counters
    ext(dc.ts, sc.ts, np.int64, lambda a: a + offset)
    ext(dc.track, sc.track, np.int32, lambda a: tmap[a])
    ext(dc.value, sc.value, np.float64)
    sf, df = src.flows, dst.flows
    ext(df.src, sf.src, np.int64, lambda a: a + first)
    ext(df.dst, sf.dst, np.int64, lambda a: a + first)
    ext(df.name, sf.name, np.int32, lambda a: smap[a])
    dst.diagnostics.extend(src.diagnostics)


def _named_window(trace: Trace, name: str) -> tuple[int, int]:
    sid = trace.strings._ids.get(name)
    if sid is None:
        raise TraceconvError(f"--window: no slice named '{name}' in any rank")
    s = trace.slices
    names = np.frombuffer(s.name, dtype=np.int32)
    idx = np.nonzero(names == sid)[0]
    ts = np.frombuffer(s.ts, dtype=np.int64)[idx]
    dur = np.frombuffer(s.dur, dtype=np.int64)[idx]
    return int(ts.min()), int((ts + dur).max())


def parse_window(text: str, trace: Trace) -> tuple[int, int]:
    """``A:B`` (durations from the merged trace's start, e.g. ``1.5s:2s``) or a slice name."""
    m = re.fullmatch(r"\s*([0-9.]+\s*(?:ns|us|µs|ms|s))\s*:\s*([0-9.]+\s*(?:ns|us|µs|ms|s))\s*", text)
    if m:
        rng = trace.time_range()
        start = rng[0] if rng else 0
        a, b = start + parse_duration(m.group(1)), start + parse_duration(m.group(2))
        if b <= a:
            raise TraceconvError(f"--window '{text}' is empty")
        return a, b
    return _named_window(trace, text)


# ---------------------------------------------------------------- the verb

@dataclass
class MergeResult:
    output: Path
    output_format: str
    files: list[tuple[Path, int, str]]        # path, rank, how the rank was found
    alignments: list[Alignment]
    slices: int
    dropped: dict[str, int]
    warnings: list = field(default_factory=list)


def merge(inputs: Sequence[PathLike], output: PathLike, *, to_format: str | None = None,
          from_format: str | None = None, ranks: str | None = None, rank_map: Sequence[str] = (),
          window: str | None = None, min_dur: str | None = None, drop_cat: Sequence[str] = (),
          align_method: str = "auto", workers: int | None = None,
          progress: Callable[[int, int, str], None] | None = None) -> MergeResult:
    """Merge one trace per rank into one aligned timeline and write it (``traceconv merge``).

    Files are parsed in a process pool and appended to the merged trace one by one in the
    inputs' order, so memory holds the kept events and a few files in flight; the clock
    offsets are applied in place once every rank is known.  ``progress(done, total, path)``
    is called as each file is parsed (the text names the file and the events read so far).

    >>> import tempfile, os, traceconv
    >>> out = os.path.join(tempfile.mkdtemp(), "run.pftrace")
    >>> res = traceconv.merge(["tests/fixtures/multirank/gloo_2ranks"], out)
    >>> [(a.rank, a.method, a.offset_ns) for a in res.alignments]
    [(0, 'wallclock', 0), (1, 'wallclock', 0)]
    """
    files = collect_inputs(inputs)
    archive = (to_format or "").lower() == ARCHIVE or (not to_format and str(output).endswith(".tar"))
    out_fmt = ARCHIVE if archive else _formats.for_output(output, to_format).name
    if align_method not in ALIGN_METHODS:
        raise TraceconvError(f"unknown --align '{align_method}'; choose one of: {', '.join(ALIGN_METHODS)}")
    explicit = parse_rank_map(rank_map)
    wanted = parse_ranks(ranks) if ranks else None
    min_ns = parse_duration(min_dur) if min_dur else 0
    cats = frozenset(c for item in drop_cat for c in item.split(",") if c)

    merged = Trace("merge")
    dropped: dict[str, int] = {}
    kept: list[tuple[Loaded, int, str]] = []
    skipped: list[int] = []
    claims: dict[tuple[int, str], Path] = {}
    spans: list[tuple[int, tuple[int, int], tuple[int, int], tuple[int, int]]] = []
    tmp = tempfile.TemporaryDirectory(prefix="traceconv-") if archive else None
    archived: list[tuple[str, int, Path]] = []
    events = 0

    def counted(done: int, total: int, path: Path) -> None:
        if progress:
            progress(done, total, f"{path.name} ({events:,} events so far)")

    def take(item: Loaded, r: int, how: str) -> None:
        fmt = item.trace.meta.source_format
        other = claims.get((r, fmt))
        if other is not None:
            raise TraceconvError(f"rank {r} is claimed by 2 {fmt} files: {other}, {item.path}")
        claims[(r, fmt)] = item.path
        if wanted is not None and r not in wanted:
            skipped.append(r)
            return
        for k, v in item.dropped.items():
            dropped[k] = dropped.get(k, 0) + v
        t = item.trace
        before = (len(merged.slices), len(merged.instants), len(merged.counters))
        append_rank(merged, t, r, 0)
        after = (len(merged.slices), len(merged.instants), len(merged.counters))
        spans.append((r, (before[0], after[0]), (before[1], after[1]), (before[2], after[2])))
        if tmp is not None:
            name = f"rank{r}_{sum(1 for _, rr, _ in archived if rr == r)}_{item.path.name.split('.')[0] or 'trace'}.pftrace"
            save(t, Path(tmp.name) / name)
            archived.append((name, r, Path(tmp.name) / name))
        # keep only what alignment needs: the metadata and the collectives
        stub = Trace(t.meta.source_format)
        stub.meta = t.meta
        item.trace = stub
        kept.append((item, r, how))

    unranked: list[Loaded] = []     # files that say no rank: ranked by their order once the others are known
    try:
        for item in _iter_loaded(files, from_format, cats, min_ns, workers, counted):
            events += item.trace.event_count()
            found = rank_of_file(item, explicit)
            if found is None:
                unranked.append(item)
            else:
                take(item, *found)
        if unranked:
            claimed = {r for r, _ in claims}
            free = (r for r in range(RANK_MAX + 1) if r not in claimed)
            for item in unranked:
                r = next(free)
                merged.diagnostics.warn(WarningCode.NOTE, f"{item.path}: no rank in the file (distributedInfo.rank, "
                                        f"global_rank) nor in its name, so rank {r} by the order of the files; "
                                        f"give it with --rank FILE=N")
                take(item, r, "file order")
        if not kept:
            raise TraceconvError(f"--ranks {ranks}: none of the inputs is one of those ranks "
                                 f"(found: {', '.join(str(r) for r in sorted(set(skipped)))})")
        by_rank: dict[int, list[Loaded]] = {}
        for item, r, _ in kept:
            by_rank.setdefault(r, []).append(item)
        alignments = align(by_rank, align_method)
        _shift(merged, spans, alignments)
        merged.meta.clock = Clock.UNIX if all(it.trace.meta.clock is Clock.UNIX for it, _, _ in kept) \
            else Clock.RELATIVE
        merged.meta.world_size = max([it.trace.meta.world_size or 0 for it, _, _ in kept] + [max(by_rank) + 1])
        if window:
            w = parse_window(window, merged)
            for k, v in _filter(merged, frozenset(), 0, w).items():
                dropped[k] = dropped.get(k, 0) + v
        for what, n in dropped.items():
            merged.diagnostics.warn(WarningCode.NOTE, f"left out by the filters ({what})", n)
        merged.meta.extra["merge"] = {
            "alignment": [alignments[r].as_dict() for r in sorted(alignments)],
            "files": [{"path": str(it.path), "rank": r, "rank_from": how, "format": it.trace.meta.source_format}
                      for it, r, how in kept],
        }
        out = Path(output)
        if archive:
            _write_archive(archived, alignments, out, files)
        else:
            save(merged, out, out_fmt, inputs=files)
    finally:
        if tmp is not None:
            tmp.cleanup()
    used = [(it.path, r, how) for it, r, how in kept]
    return MergeResult(out, out_fmt, used, [alignments[r] for r in sorted(alignments)], len(merged.slices),
                       dropped, merged.diagnostics.warnings)


def _shift(trace: Trace, spans: list, alignments: dict[int, Alignment]) -> None:
    """Add each rank's clock offset to its rows of the columns, in place."""
    s_ts = np.frombuffer(trace.slices.ts, dtype=np.int64) if len(trace.slices) else None
    i_ts = np.frombuffer(trace.instants.ts, dtype=np.int64) if len(trace.instants) else None
    c_ts = np.frombuffer(trace.counters.ts, dtype=np.int64) if len(trace.counters) else None
    for r, (s0, s1), (i0, i1), (c0, c1) in spans:
        off = alignments[r].offset_ns
        if not off:
            continue
        for col, a, b in ((s_ts, s0, s1), (i_ts, i0, i1), (c_ts, c0, c1)):
            if col is not None and b > a:
                col[a:b] += off


def rank_of_file(item: Loaded, explicit: dict[Path, int]) -> tuple[int, str] | None:
    """The rank of one loaded file and where it came from: ``--rank FILE=N``, else what the file
    says (Kineto's ``distributedInfo.rank``, Composer's ``global_rank``), else its name; None if
    none of them says (the caller then ranks it by the order of the files)."""
    r = explicit.get(item.path.resolve())
    if r is not None:
        return r, "--rank"
    r = item.trace.meta.rank
    if r is not None:
        how = "Composer global_rank" if item.trace.meta.source_format == "composer" else "distributedInfo.rank"
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= RANK_MAX:
            raise TraceconvError(f"{how} {str(r)[:30]} is out of range (ranks are 0..{RANK_MAX}); "
                                 "give the rank with --rank FILE=N", path=item.path)
        return r, how
    r = rank_from_name(item.path)
    if r is not None:
        return r, "file name"
    return None


def _iter_loaded(files: list[Path], fmt: str | None, cats: frozenset[str], min_ns: int,
                 workers: int | None, progress: Callable[[int, int, Path], None] | None) -> Iterator[Loaded]:
    """Parse the files in a process pool and yield them in the files' order, keeping only a few
    results waiting at a time, so memory holds the merged trace and little more."""
    n = len(files)
    workers = workers or min(os.cpu_count() or 1, n)
    if workers <= 1 or n == 1:
        for i, f in enumerate(files):
            item = _load_one(f, fmt, cats, min_ns)
            if progress:
                progress(i + 1, n, f)
            yield item
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending: list = []
        nxt = 0
        for i in range(n):
            while nxt < n and len(pending) < workers + 1:
                pending.append((nxt, pool.submit(_load_one, files[nxt], fmt, cats, min_ns)))
                nxt += 1
            j, fut = pending.pop(0)
            try:
                item = fut.result()
            except TraceconvError as e:
                for _, f2 in pending:
                    f2.cancel()
                raise e.with_path(files[j]) from None
            if progress:
                progress(j + 1, n, files[j])
            yield item


def _write_archive(entries: list[tuple[str, int, Path]], alignments: dict[int, Alignment], out: Path,
                   inputs: list[Path]) -> None:
    """A TAR of one .pftrace per rank file and a ``perfetto_manifest.json`` with the clock offsets,
    as Perfetto (v58+) merges archives: each file a machine of its own (``rank N``; a rank's
    second file ``rank N · 1``: two files on one machine would share pids, and their processes
    would merge); the trace's time is the reference rank's BOOTTIME (``trace_time.file``); every
    other file's BOOTTIME is related to it (``clocks.clock`` + ``sync_to`` + ``offset_ns``: the
    file keeps its own clocks -- the sequence clock and the snapshot our writer puts in it -- and
    moves by its rank's offset).  Without ``clocks.clock`` the manifest would *pin* the file as a
    clockless one, which trace_processor refuses for a trace with a ClockSnapshot; relating one
    machine's BOOTTIME twice is refused as a duplicate clock domain."""
    entries = sorted(entries, key=lambda e: (e[1], e[0]))
    ref_name = entries[0][0]
    seen: dict[int, int] = {}
    manifest_files = []
    with atomic_output(out, inputs=inputs, compress=False) as f, tarfile.open(fileobj=f, mode="w") as tar:
        for name, r, path in entries:
            tar.add(path, arcname=name)
            k = seen[r] = seen.get(r, -1) + 1
            entry: dict[str, Any] = {"path": name, "machine": {"name": f"rank {r}" if not k else f"rank {r} · {k}"}}
            if name != ref_name:
                entry["clocks"] = {"clock": "BOOTTIME", "sync_to": {"file": ref_name, "clock": "BOOTTIME"},
                                   "offset_ns": alignments[r].offset_ns}
            manifest_files.append(entry)
        manifest = {"perfetto_manifest": {"version": 1, "trace_time": {"clock": "BOOTTIME", "file": ref_name},
                                          "files": manifest_files}}
        data = orjson.dumps(manifest, option=orjson.OPT_INDENT_2)
        info = tarfile.TarInfo("perfetto_manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
