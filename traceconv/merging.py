"""Merge the traces of many ranks into one aligned timeline (``traceconv merge``).

1. **Inputs**: files, directories (their ``*.json`` / ``*.json.gz`` files) and globs; any
   format traceconv reads; parsed in parallel, one worker per core.
2. **Rank of each file**: an explicit ``--rank FILE=N``; else what the file says
   (Kineto ``distributedInfo.rank``, Composer ``global_rank``); else its name
   (``rank3``, ``rank-3``, ``rank_3``, ``.3.pt.trace``).  A file with no rank, or two
   files of one format claiming one rank, is an error naming the files.
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
   * ``collectives``: a collective ends at nearly the same moment on every rank.  The
     k-th NCCL kernel (else the k-th ``c10d::`` op) of each name is matched across ranks
     (allowing for windows that start a few collectives apart); the median of the
     end-time differences to the reference rank is the offset, and 1.4826 × their median
     absolute deviation (at least 1 µs) is the uncertainty.
   * ``auto``: barrier if every rank has it; else collectives if at least 3 are matched
     for every rank and their spread is under 1 ms (asynchronous CPU collectives, or
     point-to-point kernels, do not end together); else wallclock if every file has an
     absolute time; else collectives whatever their spread; else it is an error.
5. **Filters**: ``--ranks``, ``--window`` (a time range, or the span of a named slice such
   as ``ProfilerStep#4`` over all ranks), ``--min-dur``, ``--drop-cat``.
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
from typing import Any, Callable, Iterable, Iterator, Sequence

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
_RANK_IN_NAME = [re.compile(p) for p in (r"rank[-_]?(\d+)", r"\.(\d+)\.pt\.trace")]
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


# ---------------------------------------------------------------- arguments

def parse_duration(text: str) -> int:
    """``5us``, ``1.5ms``, ``2s``, ``300ns`` → ns."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s)\s*", text)
    if not m:
        raise TraceconvError(f"'{text}' is not a duration; write it with a unit, e.g. 5us, 1.5ms, 2s")
    return round(float(m.group(1)) * _UNITS[m.group(2)])


def parse_ranks(text: str) -> set[int]:
    """``0-3,5`` → {0, 1, 2, 3, 5}."""
    out: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m:
            raise TraceconvError(f"--ranks: '{part}' is not a rank or a range like 0-3")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if b < a:
            raise TraceconvError(f"--ranks: empty range '{part}'")
        out.update(range(a, b + 1))
    return out


def parse_rank_map(items: Sequence[str]) -> dict[Path, int]:
    out: dict[Path, int] = {}
    for item in items:
        path, sep, num = item.rpartition("=")
        if not sep or not num.strip().isdigit():
            raise TraceconvError(f"--rank takes FILE=N, not '{item}'")
        out[Path(path).resolve()] = int(num)
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
    collectives: dict[str, list[tuple[int, int]]]   # name -> [(start, end)] sorted by start
    dropped: dict[str, int] = field(default_factory=dict)


def _collectives(trace: Trace) -> dict[str, list[tuple[int, int]]]:
    """NCCL kernels if the trace has any, else ``c10d::`` CPU ops: name -> [(start, end)]."""
    strs = trace.strings.strings
    s = trace.slices
    if not len(s):
        return {}
    name = np.frombuffer(s.name, np.int32)
    cat = np.frombuffer(s.cat, np.int32)
    ts = np.frombuffer(s.ts, np.int64)
    end = ts + np.frombuffer(s.dur, np.int64)
    # decide per string, then pick rows with numpy: the table has thousands of strings, the trace millions of slices
    is_nccl = np.array([x.startswith("nccl") for x in strs], bool)
    is_c10d = np.array([x.startswith("c10d::") for x in strs], bool)
    kernel_cat = np.array([x in ("kernel", "") for x in strs], bool)
    gpu_rows = np.flatnonzero(is_nccl[name] & kernel_cat[cat])
    rows = gpu_rows if len(gpu_rows) else np.flatnonzero(is_c10d[name] & ~(is_nccl[name] & kernel_cat[cat]))
    out: dict[str, list[tuple[int, int]]] = {}
    if len(rows):
        order = rows[np.lexsort((end[rows], ts[rows], name[rows]))]
        for nid, t0, t1 in zip(name[order].tolist(), ts[order].tolist(), end[order].tolist()):
            out.setdefault(strs[nid], []).append((t0, t1))
    return out


def _load_one(path: Path, fmt: str | None, drop_cats: frozenset[str], min_dur: int) -> Loaded:
    trace = load(path, fmt)
    coll = _collectives(trace)
    dropped = {}
    if drop_cats or min_dur:
        dropped = _filter(trace, drop_cats, min_dur)
    return Loaded(path, trace, coll, dropped)


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

def rank_from_name(path: Path) -> int | None:
    for rx in _RANK_IN_NAME:
        m = rx.search(path.name)
        if m:
            return int(m.group(1))
    return None


# ---------------------------------------------------------------- alignment

@dataclass
class Alignment:
    rank: int
    method: str
    offset_ns: int
    uncertainty_ns: int | None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "method": self.method, "offset_ns": self.offset_ns,
                "uncertainty_ns": self.uncertainty_ns, "detail": self.detail}


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


def match_collectives(ref: dict[str, list[tuple[int, int]]], other: dict[str, list[tuple[int, int]]],
                      max_shift: int = 3) -> np.ndarray:
    """End-time differences (ref - other) of matched collectives: the k-th of each name,
    allowing the two windows to start up to ``max_shift`` collectives apart."""
    diffs: list[np.ndarray] = []
    for name, a in ref.items():
        b = other.get(name)
        if not b:
            continue
        ea = np.array([e for _, e in a], dtype=np.int64)
        eb = np.array([e for _, e in b], dtype=np.int64)
        best = None
        for shift in range(-max_shift, max_shift + 1):
            i0, j0 = max(0, shift), max(0, -shift)
            n = min(len(ea) - i0, len(eb) - j0)
            if n <= 0:
                continue
            d = ea[i0:i0 + n] - eb[j0:j0 + n]
            spread = float(np.median(np.abs(d - np.median(d))))
            key = (spread, -n, abs(shift))
            if best is None or key < best[0]:
                best = (key, d)
        if best is not None:
            diffs.append(best[1])
    return np.concatenate(diffs) if diffs else np.zeros(0, dtype=np.int64)


def _collective_offsets(by_rank: dict[int, list[Loaded]], ref_rank: int) -> dict[int, tuple[int, int, int]]:
    """rank -> (offset, uncertainty, matched) by collectives, for ranks with enough matches."""
    def coll(r: int) -> dict[str, list[tuple[int, int]]]:
        merged: dict[str, list[tuple[int, int]]] = {}
        for it in by_rank[r]:
            for k, v in it.collectives.items():
                merged.setdefault(k, []).extend(v)
        return {k: sorted(v) for k, v in merged.items()}

    ref = coll(ref_rank)
    out = {ref_rank: (0, 0, sum(len(v) for v in ref.values()))}
    for r in by_rank:
        if r == ref_rank:
            continue
        d = match_collectives(ref, coll(r))
        if len(d) < MIN_COLLECTIVES:
            continue
        med = int(np.median(d))
        mad = float(np.median(np.abs(d - med)))
        out[r] = (med, max(int(round(1.4826 * mad)), 1_000), len(d))
    return out


def align(by_rank: dict[int, list[Loaded]], method: str) -> dict[int, Alignment]:
    if method not in ALIGN_METHODS:
        raise TraceconvError(f"unknown --align '{method}'; choose one of: {', '.join(ALIGN_METHODS)}")
    ranks = sorted(by_rank)
    ref = ranks[0]
    if method == "none":
        return {r: Alignment(r, "none", 0, None, "timestamps as the files have them") for r in ranks}
    barrier = _barrier(by_rank) if method in ("auto", "barrier") else None
    if method == "barrier" and barrier is None:
        lacking = [r for r in ranks if r not in (_barrier_partial(by_rank))]
        raise TraceconvError("--align barrier needs Composer's clock_sync_timestamp_us for every rank; "
                             f"missing for rank(s) {', '.join(map(str, lacking))}")
    if barrier is not None:
        base = barrier[ref][0]
        return {r: Alignment(r, "barrier", base - t, bound,
                             f"Composer clock sync (rank {ref} at {base} ns)") for r, (t, bound) in barrier.items()}
    co = _collective_offsets(by_rank, ref) if method in ("auto", "collectives") else {}
    by_collectives = {r: Alignment(r, "collectives", off, unc,
                                   "reference rank" if r == ref else f"{n} collectives matched with rank {ref}")
                      for r, (off, unc, n) in co.items()}
    if method == "collectives":
        if len(co) < len(ranks):
            lacking = [str(r) for r in ranks if r not in co]
            raise TraceconvError(f"--align collectives: fewer than {MIN_COLLECTIVES} collectives matched with "
                                 f"rank {ref} for rank(s) {', '.join(lacking)}")
        return by_collectives
    complete = len(co) == len(ranks)
    if method == "auto" and complete and max(unc for _, unc, _ in co.values()) <= AUTO_MAX_SPREAD_NS:
        return by_collectives
    bad = [str(r) for r in ranks for it in by_rank[r] if it.trace.meta.clock is not Clock.UNIX]
    if bad and method == "auto" and complete:
        return by_collectives
    if bad:
        raise TraceconvError("cannot align: rank(s) " + ", ".join(sorted(set(bad), key=int))
                             + " have no absolute time base (nor a Composer clock sync or enough matched "
                             "collectives); use --align none to merge them as they are")
    why = ""
    if method == "auto" and complete:
        worst = max(unc for _, unc, _ in co.values())
        why = f"; collectives disagree by up to {worst / 1e6:.3f} ms, so not used"
    return {r: Alignment(r, "wallclock", 0, None, "the files' own absolute time" + why) for r in ranks}


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

    try:
        for item in _iter_loaded(files, from_format, cats, min_ns, workers, counted):
            events += item.trace.event_count()
            r, how = rank_of_file(item, explicit)
            fmt = item.trace.meta.source_format
            other = claims.get((r, fmt))
            if other is not None:
                raise TraceconvError(f"rank {r} is claimed by 2 {fmt} files: {other}, {item.path}")
            claims[(r, fmt)] = item.path
            if wanted is not None and r not in wanted:
                skipped.append(r)
                continue
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


def rank_of_file(item: Loaded, explicit: dict[Path, int]) -> tuple[int, str]:
    """The rank of one loaded file and where it came from; an error naming the file if none."""
    r = explicit.get(item.path.resolve())
    if r is not None:
        return r, "--rank"
    if item.trace.meta.rank is not None:
        how = "Composer global_rank" if item.trace.meta.source_format == "composer" else "distributedInfo.rank"
        return item.trace.meta.rank, how
    r = rank_from_name(item.path)
    if r is not None:
        return r, "file name"
    raise TraceconvError(f"cannot tell the rank of: {item.path} (no distributedInfo.rank or global_rank in "
                         "the file, no rankN in its name); give it with --rank FILE=N")


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
    """A TAR of one .pftrace per rank file and a perfetto_manifest.json with the clock offsets,
    as Perfetto (v58+) merges archives: each rank its own machine, each file pinned to the
    reference rank's file by ``clocks.sync_to`` + ``offset_ns``."""
    entries = sorted(entries, key=lambda e: (e[1], e[0]))
    ref_name = entries[0][0]
    manifest_files = []
    with atomic_output(out, inputs=inputs, compress=False) as f, tarfile.open(fileobj=f, mode="w") as tar:
        for name, r, path in entries:
            tar.add(path, arcname=name)
            entry: dict[str, Any] = {"path": name, "machine": {"name": f"rank {r}"}}
            if name != ref_name:
                entry["clocks"] = {"sync_to": {"file": ref_name, "clock": "BOOTTIME"},
                                   "offset_ns": alignments[r].offset_ns}
            manifest_files.append(entry)
        manifest = {"perfetto_manifest": {"version": 1, "trace_time": {"clock": "BOOTTIME"},
                                          "files": manifest_files}}
        data = orjson.dumps(manifest, option=orjson.OPT_INDENT_2)
        info = tarfile.TarInfo("perfetto_manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
