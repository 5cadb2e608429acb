"""The merge itself: read every rank (on an engine), rank the files, align the clocks, combine,
cut to the window, write one trace or a Perfetto merge archive."""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import formats as _formats
from ..api import PathLike, save
from ..errors import TraceconvError, WarningCode, spell
from ..io import atomic_output, check_output
from ..model import Clock, Trace
from ..remote import URL, as_url, is_url
from ..writers import perfetto
from .align import Alignment, Loaded, align
from .combine import WINDOW_LEAVES_OUT, append_rank, append_tracks, resolve_window, shift
from .engine import DaskEngine, LocalEngine, make_engine
from .inputs import InputPath, collect_inputs, rank_from_name
from .options import ALIGN_METHODS, RANK_MAX, parse_duration, parse_rank_map, parse_ranks, parse_window_spec
from .ranks import (cut_sequence, encode_rank, features, finish_rank, load_archive_entry, load_features, load_rank,
                    load_sequence, reload_cut_sequence, reload_encode, reload_finish)

# On a cluster, each rank's trace stays on its worker between the two passes while the JSON per
# worker is at most this (a trace in memory takes about 0.45 x its JSON: 1.5 GB of JSON is ~0.7 GB);
# past that each file is read twice, one rank in memory at a time
HOLD_BYTES_PER_WORKER = 1_500_000_000
GZIP_RATIO = 8                   # a .gz file's JSON, guessed from its size


def _json_bytes(files: list[InputPath]) -> int:
    from .. import remote
    total = 0
    for f in files:
        try:
            n = remote.size(f) if isinstance(f, URL) else f.stat().st_size
        except OSError:
            n = 0
        total += n * GZIP_RATIO if f.name.endswith(".gz") else n
    return total

ARCHIVE = next(f.name for f in _formats.FORMATS if f.archive)     # the registry's merge archive


@dataclass
class MergeResult:
    """What a merge wrote.  ``files``' ways of finding a rank and ``dropped``'s reasons (what the
    filters left out) name the parameters they come from as ``{opt:name}``, like the warnings:
    :func:`traceconv.errors.spell` spells them."""
    output: Path | URL
    output_format: str
    files: list[tuple[InputPath, int, str]]        # path, rank, how the rank was found
    alignments: list[Alignment]
    slices: int
    dropped: dict[str, int]
    warnings: list = field(default_factory=list)


def rank_of_file(item: Loaded, explicit: dict) -> tuple[int, str] | None:
    """The rank of one loaded file and where it came from: ``rank_map`` (``FILE=N``), else what the file
    says (Kineto's ``distributedInfo.rank``, Composer's ``global_rank``), else its name; None if
    none of them says (the caller then ranks it by the order of the files)."""
    r = explicit.get(item.path.resolve())
    if r is not None:
        return r, "{opt:rank_map}"
    r = item.trace.meta.rank
    if r is not None:
        how = "Composer global_rank" if item.trace.meta.source_format == "composer" else "distributedInfo.rank"
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= RANK_MAX:
            raise TraceconvError(f"{how} {str(r)[:30]} is out of range (ranks are 0..{RANK_MAX}); "
                                 "give the rank with {opt:rank_map} FILE=N", path=item.path)
        return r, how
    r = rank_from_name(item.path)
    if r is not None:
        return r, "file name"
    return None


def _output(output: PathLike) -> Path | URL:
    if is_url(output):
        u = as_url(output)
        return u if isinstance(u, URL) else Path(u)
    return Path(output)


def merge(inputs: Sequence[PathLike], output: PathLike, *, to_format: str | None = None,
          from_format: str | None = None, ranks: str | None = None, rank_map: Sequence[str] = (),
          window: str | None = None, min_dur: str | None = None, drop_cat: Sequence[str] = (),
          align_method: str = "auto", workers: int | None = None,
          progress: Callable[[int, int, str], None] | None = None,
          engine: Any = "local", scheduler: str | None = None, hold: bool | None = None) -> MergeResult:
    """Merge one trace per rank into one aligned timeline and write it (``traceconv merge``).

    Inputs and ``output`` may be URLs (``s3://bucket/run/rank*.json.gz``: see
    :mod:`traceconv.remote`).  ``engine``: ``"local"`` (a process pool of ``workers``), ``"dask"``
    (a LocalCluster of ``workers``, or the cluster at ``scheduler``), or a
    ``dask.distributed.Client``.  The result is the same bytes on either.  ``hold``: on a cluster,
    keep each rank's trace on its worker between the two passes (default: while the inputs come to at
    most HOLD_BYTES_PER_WORKER of JSON per worker); else each file is read twice, one rank in memory
    at a time.

    For one Perfetto trace with no window, each rank is encoded where it is read as a packet
    sequence of its own whose clock the merged file moves by the rank's offset (see
    :meth:`_Run.by_sequence`): only its encoded events and its tracks come back; for an archive
    with no window, each rank's file is written where it is read.  With a window, each rank's
    trace is kept where it was read (on the local engine, pickled to a temporary folder; on Dask,
    on its worker) and only its alignment features come here; once the offsets are known, the
    rank is cut to the window there and encoded as its sequence (or as an archive's file; for
    Chrome JSON, its events inside the window come here).  Otherwise (a Chrome JSON output with no
    window), on the local engine, files are parsed in a process pool and appended to the merged
    trace one by one in the inputs' order, so memory holds the kept events and a few files in
    flight; the clock offsets are applied in place once every rank is known.  On Dask, every merge
    runs in those two passes.  ``progress(done, total, path)`` is called as each file is parsed
    (and, in a second pass, as each rank is cut or encoded: ``path`` then says so).

    >>> import tempfile, os, traceconv
    >>> out = os.path.join(tempfile.mkdtemp(), "run.pftrace")
    >>> res = traceconv.merge(["tests/fixtures/multirank/gloo_2ranks"], out)
    >>> [(a.rank, a.method, a.offset_ns) for a in res.alignments]
    [(0, 'wallclock', 0), (1, 'wallclock', 0)]
    """
    files = collect_inputs(inputs)
    writes = _formats.for_output(output, to_format, merge=True)
    if align_method not in ALIGN_METHODS:
        raise TraceconvError(f"unknown {{opt:align_method}} '{align_method}'; choose one of: {', '.join(ALIGN_METHODS)}")
    explicit = parse_rank_map(rank_map)
    wanted = parse_ranks(ranks) if ranks else None
    min_ns = parse_duration(min_dur) if min_dur else 0
    cats = frozenset(c for item in drop_cat for c in item.split(",") if c)
    win = parse_window_spec(window) if window else None
    out = _output(output)
    check_output(out, inputs=files)             # before a thousand ranks are read, not after
    with make_engine(engine, scheduler=scheduler, workers=workers) as eng:
        run = _Run(files, out, writes, explicit, wanted, ranks, cats, min_ns, win, align_method,
                   from_format, progress)
        if isinstance(eng, DaskEngine):
            if hold is None:
                hold = _json_bytes(files) <= HOLD_BYTES_PER_WORKER * eng.workers()
            return run.in_two_passes(eng, hold)
        return run.here(eng)


class _Run:
    """One merge: the bookkeeping both engines share."""

    def __init__(self, files: list[InputPath], out: Path | URL, writes: _formats.Format, explicit: dict,
                 wanted: Any, ranks: str | None, cats: frozenset[str], min_ns: int, win: Any, method: str,
                 fmt: str | None, progress: Callable[[int, int, str], None] | None) -> None:
        self.files, self.out, self.writes = files, out, writes
        self.out_fmt, self.archive = writes.name, writes.archive
        self.explicit, self.wanted, self.ranks_text = explicit, wanted, ranks
        self.cats, self.min_ns, self.win, self.method, self.fmt = cats, min_ns, win, method, fmt
        self.user_progress = progress
        self.merged = Trace("merge")
        self.dropped: dict[str, int] = {}
        self.kept: list[tuple[Loaded, int, str]] = []
        self.skipped: list[int] = []
        self.claims: dict[tuple[int, str], InputPath] = {}
        self.events = 0
        self.names: list[str] = []               # archive entry of each kept file

    def progress(self, done: int, total: int, path: Any) -> None:
        if self.user_progress:
            self.user_progress(done, total, f"{path.name} ({self.events:,} events so far)")

    def second_progress(self, done: int, total: int, path: Any) -> None:
        """The second pass of a merge in two passes, reported as it goes (the ranks cut and written)."""
        if self.user_progress:
            what = "cut to the window" if self.win is not None else "encoded"
            self.user_progress(done, total, f"{path.name} ({what})")

    def claim(self, item: Loaded, r: int) -> bool:
        """Check no other file of its format claims rank ``r``; False if the rank is not wanted."""
        fmt = item.trace.meta.source_format
        other = self.claims.get((r, fmt))
        if other is not None:
            raise TraceconvError(f"rank {r} is claimed by 2 {fmt} files: {other}, {item.path}")
        self.claims[(r, fmt)] = item.path
        if self.wanted is not None and r not in self.wanted:
            self.skipped.append(r)
            return False
        _add(self.dropped, item.dropped)
        k = sum(1 for _, rr, _ in self.kept if rr == r)
        self.names.append(f"rank{r}_{k}_{item.path.name.split('.')[0] or 'trace'}.pftrace")
        return True

    def order(self, loaded: Any, add: Callable[[Loaded, int, str, Any], None], defer_notes: bool = False) -> None:
        """Rank each file as it comes (``loaded`` yields ``(item, handle)``), the unranked ones by
        the order of the files once the others are known; ``add`` takes each kept one."""
        unranked: list[tuple[Loaded, Any]] = []
        for item, handle in loaded:
            self.events += item.events
            found = rank_of_file(item, self.explicit)
            if found is None:
                unranked.append((item, handle))
            else:
                add(item, *found, handle)
        if unranked:
            claimed = {r for r, _ in self.claims}
            free = (r for r in range(RANK_MAX + 1) if r not in claimed)
            for item, handle in unranked:
                r = next(free)
                if not defer_notes:
                    self.note_unranked(item, r)
                add(item, r, "file order", handle)
        if not self.kept:
            raise TraceconvError(f"{{opt:ranks}} {self.ranks_text}: none of the inputs is one of those ranks "
                                 f"(found: {', '.join(str(r) for r in sorted(set(self.skipped)))})")

    def note_unranked(self, item: Loaded, r: int) -> None:
        self.merged.diagnostics.warn(WarningCode.NOTE, f"{item.path}: no rank in the file (distributedInfo.rank, "
                                     f"global_rank) nor in its name, so rank {r} by the order of the files; "
                                     "give it with {opt:rank_map} FILE=N")

    def aligned(self) -> dict[int, Alignment]:
        by_rank: dict[int, list[Loaded]] = {}
        for item, r, _ in self.kept:
            by_rank.setdefault(r, []).append(item)
        alignments = align(by_rank, self.method)
        m = self.merged
        m.meta.clock = Clock.UNIX if all(it.trace.meta.clock is Clock.UNIX for it, _, _ in self.kept) \
            else Clock.RELATIVE
        m.meta.world_size = max([it.trace.meta.world_size or 0 for it, _, _ in self.kept] + [max(by_rank) + 1])
        self.no_time_before_zero(alignments)
        return alignments

    def no_time_before_zero(self, alignments: dict[int, Alignment]) -> None:
        """No time of the merged trace may be negative (the model's domain; Perfetto drops such
        events).  When an offset moves a rank's first event before 0 -- ranks whose clocks start
        at 0, one of them found ahead of the reference by the collectives -- every rank's offset
        grows by the same amount, so the ranks stay aligned, and a note says by how much (as the
        loader moves the times of one such trace); the merged times are then no Unix times."""
        firsts = [it.time_range[0] + alignments[r].offset_ns for it, r, _ in self.kept if it.time_range]
        low = min(firsts, default=0)
        if low >= 0:
            return
        for a in alignments.values():
            a.offset_ns -= low
            if a.bounds_ns is not None:
                a.bounds_ns = (a.bounds_ns[0] - low, a.bounds_ns[1] - low)
        self.merged.meta.clock = Clock.RELATIVE
        self.merged.diagnostics.warn(WarningCode.NOTE, f"times were moved {-low} ns later so that none is "
                                     "negative (a rank's clock offset put its first event before 0)", 1)

    def finish(self, alignments: dict[int, Alignment]) -> None:
        m = self.merged
        for what, n in self.dropped.items():
            m.diagnostics.warn(WarningCode.NOTE, f"left out by the filters ({what})", n)
        m.meta.extra["merge"] = {
            "alignment": [alignments[r].as_dict() for r in sorted(alignments)],
            "files": [{"path": str(it.path), "rank": r, "rank_from": spell(how), "format": it.trace.meta.source_format}
                      for it, r, how in self.kept],
        }

    def result(self, alignments: dict[int, Alignment], slices: int) -> MergeResult:
        used = [(it.path, r, how) for it, r, how in self.kept]
        return MergeResult(self.out, self.out_fmt, used, [alignments[r] for r in sorted(alignments)], slices,
                           self.dropped, self.merged.diagnostics.warnings)

    def add_dropped(self, more: dict[str, int]) -> None:
        _add(self.dropped, more)

    # -------------------------------------------------------------- this machine

    def by_sequence(self) -> bool:
        """Whether each rank's events are encoded where the rank is read, in one pass, as a packet
        sequence of its own (:func:`.ranks.sequence_of`), and the merged file assembled from them:
        for one Perfetto trace with no time window (a window needs every rank's offset first: then
        :meth:`in_two_passes` encodes the ranks' sequences in its second pass)."""
        return self.out_fmt == "perfetto" and not self.archive and self.win is None

    def write_archive(self, entries: list[tuple[str, int, Path]], alignments: Any) -> None:
        """The archive format's writer, from the registry (:mod:`traceconv.writers.archive`)."""
        self.writes.load("writer")(entries, alignments, self.out, self.files)

    def here(self, eng: LocalEngine) -> MergeResult:
        if self.by_sequence():
            return self.here_by_sequence(eng)
        if self.win is not None:
            # the window is known once every rank's offset is: until then each rank's trace is kept
            # on this machine's disk by the worker that read it (LocalEngine.keep), not gathered here
            return self.in_two_passes(eng)
        if self.archive:
            return self.here_archive(eng)
        merged = self.merged
        spans: list = []

        def add(item: Loaded, r: int, how: str, _handle: Any) -> None:
            if not self.claim(item, r):
                return
            before = (len(merged.slices), len(merged.instants), len(merged.counters))
            append_rank(merged, item.trace, r, 0)
            after = (len(merged.slices), len(merged.instants), len(merged.counters))
            spans.append((r, (before[0], after[0]), (before[1], after[1]), (before[2], after[2])))
            self.kept.append((features(item), r, how))   # only the metadata and the collectives stay

        items = [(f, self.fmt, self.cats, self.min_ns) for f in self.files]
        with contextlib.closing(eng.map(load_rank, items, self.files, self.progress)) as loaded:
            self.order(((it, None) for it in loaded), add)     # (closed at once on an error)
        alignments = self.aligned()
        shift(merged, spans, alignments)
        self.finish(alignments)
        save(merged, self.out, self.out_fmt, inputs=self.files)
        return self.result(alignments, len(merged.slices))

    def here_by_sequence(self, eng: Any) -> MergeResult:
        with _Spool(self.merged) as spool:
            def add(item: Loaded, r: int, how: str, _handle: Any) -> None:
                if self.claim(item, r):
                    spool.add(item, r)
                    self.kept.append((item, r, how))

            n = len(self.files)
            items = [(f, self.fmt, self.cats, self.min_ns, k, n, spool.dir) for k, f in enumerate(self.files)]
            # the workers write into the spool's folder: their pool is closed (what runs finished,
            # what waits cancelled) before the folder is removed, also when a rank is refused midway
            with contextlib.closing(eng.map(load_sequence, items, self.files, self.progress)) as loaded:
                self.order(((it, None) for it in loaded), add)
            return self.write_sequences(spool, self.aligned())

    def here_archive(self, eng: Any) -> MergeResult:
        """A merge archive with no window: each rank's .pftrace written by the worker that read it
        (:func:`.ranks.archive_entry`), into a temporary folder, then put in the archive as it is.
        (With a window, which needs every rank's offset first: :meth:`in_two_passes`.)"""
        with tempfile.TemporaryDirectory(prefix="traceconv-merge-") as tmp:
            archived: list[tuple[str, int, Path]] = []
            slices = 0

            def add(item: Loaded, r: int, how: str, _handle: Any) -> None:
                nonlocal slices
                if self.claim(item, r):
                    self.kept.append((item, r, how))
                    self.merged.diagnostics.extend(item.trace.diagnostics)
                    archived.append((self.names[-1], r, Path(file_of[str(item.path)])))
                    slices += item.slices

            file_of = {str(f): os.path.join(tmp, f"rank-{k}.pftrace") for k, f in enumerate(self.files)}
            items = [(f, self.fmt, self.cats, self.min_ns, file_of[str(f)]) for f in self.files]
            # (the pool is closed before the folder is removed, as in here_by_sequence)
            with contextlib.closing(eng.map(load_archive_entry, items, self.files, self.progress)) as loaded:
                self.order(((it, None) for it in loaded), add)
            alignments = self.aligned()
            self.finish(alignments)
            self.write_archive(archived, alignments)
        return self.result(alignments, slices)

    def write_sequences(self, spool: "_Spool", alignments: dict[int, Alignment]) -> MergeResult:
        self.finish(alignments)
        spool.write(self.out, self.files, alignments)
        return self.result(alignments, spool.slices)

    # -------------------------------------------------------------- in two passes (Dask; a window here)

    def in_two_passes(self, eng: DaskEngine | LocalEngine, hold: bool = True) -> MergeResult:
        """Each rank read and kept where it was read (``hold``; else read again in the second pass),
        only its features coming here; once every offset is known, the second pass runs there too:
        the rank cut to the window (if any), then encoded as a sequence of the merged .pftrace or
        as an archive's file, or sent here (Chrome JSON).  Every merge on a Dask cluster, and a
        window's on this machine."""
        held: list[tuple[Any, bool]] = []             # (handle, ranked by the order of the files) per kept file

        def add(item: Loaded, r: int, how: str, handle: Any) -> None:
            if not self.claim(item, r):
                return
            self.kept.append((item, r, how))
            held.append((handle, how == "file order"))

        name = self.win.name if self.win is not None else None
        items = [(f, self.fmt, self.cats, self.min_ns, name) for f in self.files]
        if hold:
            loaded = eng.keep(load_rank, features, items, self.files, self.progress)
        else:
            loaded = ((it, it.path) for it in eng.map(load_features, items, self.files, self.progress))
        self.order(loaded, add, defer_notes=True)
        alignments = self.aligned()
        window = None
        if self.win is not None:
            starts = [it.time_range[0] + alignments[r].offset_ns for it, r, _ in self.kept if it.time_range]
            spans = [(a + alignments[r].offset_ns, b + alignments[r].offset_ns)
                     for it, r, _ in self.kept for a, b in it.named.values()]
            window = resolve_window(self.win, min(starts) if starts else None, spans)
        wdrop: dict[str, int] = {}
        labels = [it.path for it, _, _ in self.kept]
        local = isinstance(eng, LocalEngine)    # (its workers can write into this machine's folders)

        def second(fn: Callable[..., Any], again: Callable[..., Any], extra: list[tuple] | None = None) -> Any:
            """``fn(kept rank, its offset, the window, *extra[i])`` where each rank is held (with
            ``hold``; else ``again`` on its file read again), in order, reported as it goes."""
            args = [(alignments[r].offset_ns, window, *(extra[i] if extra else ()))
                    for i, (_, r, _) in enumerate(self.kept)]
            if hold:
                return eng.then(fn, [(h, a) for (h, _), a in zip(held, args)], labels, self.second_progress)
            return eng.map(again, [(h, self.fmt, self.cats, self.min_ns, *a) for (h, _), a in zip(held, args)],
                           labels, self.second_progress)

        if self.archive:
            with tempfile.TemporaryDirectory(prefix="traceconv-merge-") as tmp:
                archived = []
                slices = 0
                notes = []
                got = second(encode_rank, reload_encode,
                             [(os.path.join(tmp, entry) if local else None,) for entry in self.names])
                # (a worker of this machine writes its rank's file into the folder: the pool is
                # closed before it goes; a Dask worker's bytes travel, and are written here)
                with contextlib.closing(got):
                    for (data, n, dropped, noted_), (it, r, _), entry in zip(got, self.kept, self.names):
                        p = Path(tmp) / entry
                        if data is not None:
                            p.write_bytes(data)
                        archived.append((entry, r, p))
                        slices += n
                        _add(wdrop, dropped)
                        notes.append(noted_)
                self._diagnostics_in_order(held, notes)
                self.add_dropped({k: wdrop[k] for k in WINDOW_LEAVES_OUT if wdrop.get(k)})
                self.finish(alignments)
                self.write_archive(archived, alignments)
            return self.result(alignments, slices)
        if self.out_fmt == "perfetto":
            return self._sequences(second, local, held, alignments)
        merged = self.merged
        finished = second(finish_rank, reload_finish)
        for (trace, dropped), (it, r, _), (_, unranked) in zip(finished, self.kept, held):
            if unranked:
                self.note_unranked(it, r)
            append_rank(merged, trace, r, alignments[r].offset_ns)
            _add(wdrop, dropped)
            del trace
        self.add_dropped({k: wdrop[k] for k in WINDOW_LEAVES_OUT if wdrop.get(k)})
        self.finish(alignments)
        save(merged, self.out, self.out_fmt, inputs=self.files)
        return self.result(alignments, len(merged.slices))

    def _sequences(self, second: Callable[..., Any], local: bool, held: list[tuple[Any, bool]],
                   alignments: dict[int, Alignment]) -> MergeResult:
        """Each kept rank cut to the window and encoded as a sequence of the merged file by the
        worker that holds it (``second``, :meth:`in_two_passes`'s; a worker of this machine writes
        its packets into the spool's folder, a Dask worker's bytes travel), then the file assembled
        here (as :meth:`here_by_sequence`)."""
        where = {str(f): k for k, f in enumerate(self.files)}
        wdrop: dict[str, int] = {}
        with _Spool(self.merged) as spool:
            folder = spool.dir if local else None
            got = second(cut_sequence, reload_cut_sequence,
                         [(where[str(it.path)], len(self.files), folder) for it, _, _ in self.kept])
            # (the workers write into the spool's folder: their pool is closed before it goes)
            with contextlib.closing(got):
                for (item, dropped), (it, r, _), (_, unranked) in zip(got, self.kept, held):
                    if unranked:
                        self.note_unranked(it, r)
                    spool.add(item, r)
                    _add(wdrop, dropped)
            self.add_dropped({k: wdrop[k] for k in WINDOW_LEAVES_OUT if wdrop.get(k)})
            return self.write_sequences(spool, alignments)

    def _diagnostics_in_order(self, held: list[tuple[Any, bool]], notes: list[Any]) -> None:
        """What the merged trace's diagnostics hold on the local engine, in its order (an archive on
        the cluster builds no merged trace: each rank's own diagnostics came with its features, what
        its encoding noted with its file)."""
        for (_, unranked), (it, r, _), noted_ in zip(held, self.kept, notes):
            if unranked:
                self.note_unranked(it, r)
            self.merged.diagnostics.extend(it.trace.diagnostics)
            self.merged.diagnostics.extend(noted_)


class _Spool:
    """The kept ranks encoded as sequences (:func:`.ranks.sequence_of`), in the order they are kept:
    their tracks go into the merged trace (each keeps the uuid its events use), their packets into
    files of a temporary folder until every rank's offset is known (workers on this machine write
    them there themselves: ``dir``); :meth:`write` then assembles the .pftrace."""

    def __init__(self, merged: Trace) -> None:
        self.merged = merged
        self._dir = tempfile.TemporaryDirectory(prefix="traceconv-merge-")
        self.dir = self._dir.name
        self.parts: list[tuple[perfetto.Sequence, int]] = []   # (sequence, rank)
        self.uuids: list[int] = []               # of each track of the merged trace
        self.slices = 0

    def __enter__(self) -> "_Spool":
        return self

    def __exit__(self, *exc: object) -> None:
        self._dir.cleanup()

    def add(self, item: Loaded, r: int) -> None:
        tmap = append_tracks(self.merged, item.trace, r)
        self.uuids.extend([0] * (len(self.merged.tracks) - len(self.uuids)))
        for local, m in enumerate(tmap.tolist()):
            self.uuids[m] = item.uuids[local]
        seq = item.sequence
        if seq.file is None and seq.packets:     # (from a cluster: its bytes to a file of their own)
            file = os.path.join(self.dir, f"part-{len(self.parts)}.seq")
            with open(file, "wb") as f:
                f.write(seq.packets)
            seq = replace(seq, packets=b"", file=file)
        if seq.size:                             # (a rank with no events has no sequence: nothing to move)
            self.parts.append((seq, r))
        item.sequence = None
        self.merged.diagnostics.extend(item.trace.diagnostics)
        self.slices += item.slices

    def write(self, out: Path | URL, inputs: list[InputPath], alignments: dict[int, Alignment]) -> None:
        """The merged .pftrace at ``out``: the merged trace's descriptors and metadata, then each
        rank's sequence, its clock moved by the rank's offset, its packets copied from its file."""
        with atomic_output(out, inputs=inputs, binary=True) as f:
            perfetto.write_sequences(self.merged, self.uuids, [seq for seq, _ in self.parts],
                                     [alignments[r].offset_ns for _, r in self.parts], f)


def _add(into: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v
