"""The trace: processes, threads, tracks and the column tables of events (slices, instants,
counters, flows), and the time domain every loaded trace lies in.  See the package's docstring."""

from __future__ import annotations

import enum
import numbers
from array import array
from dataclasses import dataclass, field
from collections import Counter
from typing import Any, Callable, Iterable, Mapping

from ..errors import Diagnostics, WarningCode
from .args import MAX_ARGS_DEPTH, ArgsColumn, decode_args, encode_args_counted, strict_args

INT32_MAX = 2**31 - 1
SUMMARY_ROLES = ("mirror", "profiler")      # Track.summary's values besides None
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class TrackKind(enum.IntEnum):
    PROCESS = 0   # the process's own track: process-scoped instants
    THREAD = 1    # a thread's slices and instants
    ASYNC = 2     # a named slice track under a process (or global): async work, synthesized lanes
    COUNTER = 3   # a counter series
    LANE = 4      # an extra track of a THREAD/ASYNC track for slices that overlap without nesting


class Clock(str, enum.Enum):
    UNIX = "unix"              # ns since the Unix epoch
    RELATIVE = "relative"      # ns since an unknown start (the source had no absolute time)
    SYNTHETIC = "synthetic"    # laid out by traceconv from aggregate data; not measured times


class InstantScope(enum.IntEnum):
    THREAD = 0
    PROCESS = 1
    GLOBAL = 2


class StringTable:
    """Interned strings; id 0 is the empty string."""

    __slots__ = ("_ids", "strings")

    def __init__(self) -> None:
        self.strings: list[str] = [""]
        self._ids: dict[str, int] = {"": 0}

    def intern(self, s: str | None) -> int:
        if not s:
            return 0
        i = self._ids.get(s)
        if i is None:
            i = len(self.strings)
            self._ids[s] = i
            self.strings.append(s)
        return i

    def __getitem__(self, i: int) -> str:
        return self.strings[i]

    def __len__(self) -> int:
        return len(self.strings)


@dataclass(eq=False)
class Process:
    id: int
    pid: int                    # the pid written out: unique in the trace, within int32
    name: str = ""
    raw_pid: Any = None         # the pid as the source had it (may be a string or > 2^32)
    labels: list[str] = field(default_factory=list)
    sort_index: int | None = None
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class Thread:
    id: int
    process: int                # Process.id
    tid: int                    # the tid written out: unique in its process, within int32
    name: str = ""
    raw_tid: Any = None
    sort_index: int | None = None
    track: int = -1             # the thread's THREAD track id


@dataclass(eq=False)
class Track:
    id: int
    kind: TrackKind
    name: str = ""
    process: int | None = None  # Process.id, None for a global track
    thread: int | None = None   # Thread.id for THREAD tracks (and lanes of thread tracks)
    parent: int | None = None   # Track.id: a LANE's original track
    lane: int = 0               # 1, 2, ... for LANE tracks
    deep: int = 0               # a LANE for slices nested too deep for Perfetto: the depth they start at
    unit: str | None = None     # COUNTER: unit name (e.g. "bytes"); None = plain number
    series: str | None = None   # COUNTER: the arg key of a Chrome "C" event, if it came from one
    sort_index: int | None = None
    # How ``traceconv summary`` counts this track's slices (its lanes follow it): None = counted;
    # "mirror" = the same calls as slices counted on other tracks (MXNet's operator b/e, MegEngine's
    # host times): never counted; "profiler" = the profiler's own window (PyTorch's "PyTorch
    # Profiler (0)"): left out unless asked for.  Writers ignore it.
    summary: str | None = None


class SliceTable:
    """Columns of slices.  ``args[i]`` is compact JSON bytes or None."""

    __slots__ = ("ts", "dur", "track", "name", "cat", "args", "depth", "parent", "order")

    def __init__(self) -> None:
        self.ts = array("q")
        self.dur = array("q")
        self.track = array("i")
        self.name = array("i")
        self.cat = array("i")
        self.args = ArgsColumn()
        self.depth: array | None = None   # set by layout.nest(): nesting depth on its track
        self.parent: array | None = None  # set by layout.nest(): enclosing slice on its track, or -1
        self.order: Any = None            # set by layout.nest(): the rows in layout.slice_order after
        #                                   its moves (taken by the writer's layout.event_windows)

    def __len__(self) -> int:
        return len(self.ts)


class InstantTable:
    __slots__ = ("ts", "track", "name", "cat", "args")

    def __init__(self) -> None:
        self.ts = array("q")
        self.track = array("i")
        self.name = array("i")
        self.cat = array("i")
        self.args = ArgsColumn()

    def __len__(self) -> int:
        return len(self.ts)


class CounterTable:
    __slots__ = ("ts", "track", "value")

    def __init__(self) -> None:
        self.ts = array("q")
        self.track = array("i")
        self.value = array("d")

    def __len__(self) -> int:
        return len(self.ts)


class FlowTable:
    """Directed links between two slices (indices into the slice table)."""

    __slots__ = ("src", "dst", "name")

    def __init__(self) -> None:
        self.src = array("q")
        self.dst = array("q")
        self.name = array("i")   # interned flow name / category (e.g. "ac2g"); 0 = none

    def __len__(self) -> int:
        return len(self.src)


def _lane_stem(label: str) -> str:
    """A track's label as its lanes' names begin: without the spaces that end it."""
    return label.rstrip() or label


@dataclass
class TraceMeta:
    source_format: str = ""
    clock: Clock = Clock.UNIX
    synthesized: bool = False
    rank: int | None = None
    world_size: int | None = None
    # Anything else worth keeping from the source (JSON-able): run metadata, device properties...
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "source_format": self.source_format,
            "clock": self.clock.value,
            "synthesized": self.synthesized,
        }
        if self.rank is not None:
            d["rank"] = self.rank
        if self.world_size is not None:
            d["world_size"] = self.world_size
        return d

    def restore(self, own: Mapping[str, Any]) -> None:
        """The fields of :meth:`as_dict` from traceconv's own metadata read back from a file it
        wrote (the times' clock is each reader's: it decides how they are read)."""
        if own.get("rank") is not None:
            self.rank = own["rank"]
        if own.get("world_size") is not None:
            self.world_size = own["world_size"]
        if own.get("synthesized"):
            self.synthesized = True            # (an aggregate input's: summary counts its calls)


class Trace:
    """A timeline: processes, threads, tracks, and columns of events."""

    def __init__(self, source_format: str = "") -> None:
        self.meta = TraceMeta(source_format=source_format)
        self.strings = StringTable()
        self.processes: list[Process] = []
        self.threads: list[Thread] = []
        self.tracks: list[Track] = []
        self.slices = SliceTable()
        self.instants = InstantTable()
        self.counters = CounterTable()
        self.flows = FlowTable()
        self.diagnostics = Diagnostics()   # what reading and writing this trace changed or dropped
        self._process_by_raw: dict[Any, Process] = {}
        self._thread_by_raw: dict[tuple[int, Any], Thread] = {}
        self._used_pids: set[int] = set()
        self._used_tids: dict[int, set[int]] = {}
        self._process_threads: dict[int, list[Thread]] = {}   # each process's threads
        self._process_track: dict[int, int] = {}
        self._named_tracks: dict[tuple[TrackKind, int | None, str, str | None], int] = {}
        self._next_synthetic_id = 1_000_000_000
        self.remapped_ids = 0   # pids/tids that had to be given a new number
        self.fixed_args = 0     # args values changed to be strict JSON (see strict_args)
        self.saturated = 0      # times beyond int64 given to add_* (see enforce_time_domain)

    # ---- processes, threads, tracks -------------------------------------------------------

    def _fresh_id(self, used: set[int], wanted: Any, synthetic: bool) -> int:
        if not synthetic and isinstance(wanted, int) and not isinstance(wanted, bool) \
                and 0 <= wanted <= INT32_MAX and wanted not in used:
            return wanted
        if not synthetic and isinstance(wanted, int) and not isinstance(wanted, bool):
            self.remapped_ids += 1
        while self._next_synthetic_id in used:
            self._next_synthetic_id += 1
        v = self._next_synthetic_id
        self._next_synthetic_id += 1
        return v

    def process(self, raw_pid: Any, name: str | None = None, *, synthetic: bool = False,
                pid: int | None = None) -> Process:
        """The process for a source pid (any hashable), created on first use.

        A pid that is not an int in [0, 2^31-1] (a string, a 64-bit hash) gets a fresh
        number; ``synthetic`` processes (made up by traceconv) always do, unless ``pid``
        asks for a particular (unused) number.
        """
        p = self._process_by_raw.get(raw_pid)
        if p is None:
            if pid is not None and 0 <= pid <= INT32_MAX and pid not in self._used_pids:
                pass
            else:
                pid = self._fresh_id(self._used_pids, raw_pid, synthetic)
            self._used_pids.add(pid)
            p = Process(id=len(self.processes), pid=pid, raw_pid=None if synthetic else raw_pid,
                        name=name if name is not None else (raw_pid if isinstance(raw_pid, str) else ""))
            self.processes.append(p)
            self._process_by_raw[raw_pid] = p
            self._used_tids[p.id] = set()
            t = self._add_track(TrackKind.PROCESS, p.name, process=p.id)
            self._process_track[p.id] = t.id
        elif name:
            p.name = name
        return p

    def process_track(self, process: Process) -> Track:
        return self.tracks[self._process_track[process.id]]

    def thread(self, process: Process, raw_tid: Any, name: str | None = None, *,
               synthetic: bool = False) -> Thread:
        """The thread ``raw_tid`` of ``process``, created on first use (with its track)."""
        key = (process.id, raw_tid)
        t = self._thread_by_raw.get(key)
        if t is None:
            used = self._used_tids[process.id]
            tid = self._fresh_id(used, raw_tid, synthetic)
            used.add(tid)
            t = Thread(id=len(self.threads), process=process.id, tid=tid,
                       raw_tid=None if synthetic else raw_tid,
                       name=name if name is not None else (raw_tid if isinstance(raw_tid, str) else ""))
            self.threads.append(t)
            self._thread_by_raw[key] = t
            self._process_threads.setdefault(process.id, []).append(t)
            tr = self._add_track(TrackKind.THREAD, t.name, process=process.id, thread=t.id)
            t.track = tr.id
        elif name:
            t.name = name
            self.tracks[t.track].name = name
        return t

    def set_thread_name(self, thread: Thread, name: str) -> None:
        thread.name = name
        self.tracks[thread.track].name = name

    def track(self, kind: TrackKind, name: str, process: Process | None = None, *,
              unit: str | None = None, series: str | None = None) -> Track:
        """A named ASYNC or COUNTER track, one per (kind, process, name, series)."""
        if kind not in (TrackKind.ASYNC, TrackKind.COUNTER):
            raise ValueError("use process()/thread() for process and thread tracks")
        pid = process.id if process is not None else None
        key = (kind, pid, name, series)
        tid = self._named_tracks.get(key)
        if tid is None:
            tr = self._add_track(kind, name, process=pid, unit=unit, series=series)
            self._named_tracks[key] = tr.id
            return tr
        return self.tracks[tid]

    def new_track(self, kind: TrackKind, name: str, process: Process | None = None) -> Track:
        """A new ASYNC track even if one of that name exists (the UI shows same-named ones together)."""
        return self._add_track(kind, name, process=process.id if process else None)

    def _add_track(self, kind: TrackKind, name: str, **kw: Any) -> Track:
        tr = Track(id=len(self.tracks), kind=kind, name=name, **kw)
        self.tracks.append(tr)
        return tr

    def mark_summary(self, processes: "set[int] | list[int]", mark: str) -> int:
        """Mark the slice tracks (thread, async, lane) of ``processes`` with ``Track.summary =
        mark`` ("mirror": counted elsewhere; "profiler": the profiler's own window) and return
        how many were marked."""
        n = 0
        for tr in self.tracks:
            if tr.process in processes and tr.kind in (TrackKind.THREAD, TrackKind.ASYNC, TrackKind.LANE):
                tr.summary = mark
                n += 1
        return n

    def written_marks(self, place: Callable[[Track], "tuple[int, int] | None"]) -> dict[str, list]:
        """What traceconv's own metadata keeps of the trace beyond its events, for ``traceconv
        summary`` of a file traceconv wrote (:meth:`restore_marks` reads it back):

        * ``summary_roles``: ``[pid, None, role]`` when every slice track of the process has that
          :attr:`Track.summary` role, else ``[pid, tid, role]`` for each thread track that has one;
        * ``process_ranks``: ``[pid, rank]`` for each process of a merged trace (its ``rank`` arg).

        ``place``: the (pid, tid) a writer gave a thread track's slices; pids are the processes'
        written ones."""
        by_proc: dict[int, list[Track]] = {}
        for t in self.tracks:
            if t.kind in (TrackKind.THREAD, TrackKind.ASYNC) and t.process is not None:
                by_proc.setdefault(t.process, []).append(t)
        roles: list[list[Any]] = []
        for proc, tracks in by_proc.items():
            kinds = {t.summary for t in tracks}
            if len(kinds) == 1 and None not in kinds:
                roles.append([self.processes[proc].pid, None, kinds.pop()])
                continue
            for t in tracks:
                where = place(t) if t.summary is not None and t.kind is TrackKind.THREAD else None
                if where is not None:
                    roles.append([where[0], where[1], t.summary])
        ranks = [[p.pid, r] for p in self.processes
                 if type(r := p.args.get("rank")) is int and 0 <= r <= INT32_MAX]
        out: dict[str, list] = {}
        if roles:
            out["summary_roles"] = roles
        if ranks:
            out["process_ranks"] = ranks
        return out

    def restore_marks(self, own: Mapping[str, Any]) -> int:
        """Apply :meth:`written_marks` read back from traceconv's own metadata, once the processes
        and threads are read; returns how many entries named no process or thread of the trace or
        were not of the form written (a damaged or edited file: those are not applied)."""
        roles, ranks = own.get("summary_roles"), own.get("process_ranks")
        if roles is None and ranks is None:
            return 0
        procs = {p.pid: p for p in self.processes}
        threads = {(self.processes[th.process].pid, th.tid): th for th in self.threads}

        def pid_of(v: Any) -> "Process | None":
            return procs.get(v) if type(v) is int else None

        bad = 0
        for e in roles if isinstance(roles, list) else ():
            ok = isinstance(e, list) and len(e) == 3 and e[2] in SUMMARY_ROLES
            p = pid_of(e[0]) if ok else None
            if p is not None and e[1] is None:
                self.mark_summary({p.id}, e[2])
            elif p is not None and type(e[1]) is int and (th := threads.get((e[0], e[1]))) is not None:
                self.tracks[th.track].summary = e[2]
            else:
                bad += 1
        for e in ranks if isinstance(ranks, list) else ():
            p = pid_of(e[0]) if isinstance(e, list) and len(e) == 2 else None
            if p is not None and type(e[1]) is int and 0 <= e[1] <= INT32_MAX:
                p.args["rank"] = e[1]
            else:
                bad += 1
        bad += (roles is not None and not isinstance(roles, list)) + (ranks is not None and not isinstance(ranks, list))
        if bad:
            self.diagnostics.warn(WarningCode.NOTE, "entries of traceconv's metadata that name no process or "
                                  "thread of the trace were not used (summary roles, process ranks)", bad)
        return bad

    def take_slices(self, idx: Any) -> int:
        """Keep the slices at ``idx`` (row numbers, in the order they are to have: a subset, or all
        of them in another order) and the flows whose two slices are kept, renumbered; returns how
        many flows were lost."""
        import numpy as np

        s, f = self.slices, self.flows
        idx = np.asarray(idx, dtype=np.int64)
        for col in ("ts", "dur", "track", "name", "cat"):
            a = getattr(s, col)
            setattr(s, col, type(a)(a.typecode, np.frombuffer(a, dtype=a.typecode).take(idx).tobytes())
                    if len(idx) else type(a)(a.typecode))
        n = len(s.args)
        s.args = s.args.take(idx)
        s.depth = s.parent = None
        if not len(f):
            return 0
        new_index = np.full(n, -1, dtype=np.int64)
        new_index[idx] = np.arange(len(idx), dtype=np.int64)
        src = new_index[np.frombuffer(f.src, dtype=np.int64)]
        dst = new_index[np.frombuffer(f.dst, dtype=np.int64)]
        kept = (src >= 0) & (dst >= 0)
        f.src = array("q", src[kept].tobytes())
        f.dst = array("q", dst[kept].tobytes())
        f.name = array("i", np.frombuffer(f.name, dtype=np.int32)[kept].tobytes())
        return int((~kept).sum())

    def fold_tracks(self, into: Mapping[int, int]) -> None:
        """Move the events of each track ``k`` of ``into`` onto track ``into[k]`` and drop the
        emptied tracks, the later ones renumbered: a reader's step, where a track of the file is
        part of another in the model (Chrome JSON's threads for overlap lanes, laid out again by
        :func:`~traceconv.model.layout.nest`).  A track folded into is not itself folded."""
        import numpy as np

        if not into:
            return
        if not into.keys().isdisjoint(into.values()):
            raise ValueError("fold_tracks: a track folded into is folded too")
        n = len(self.tracks)
        target = np.arange(n, dtype=np.int32)
        target[list(into)] = list(into.values())
        keep = np.ones(n, dtype=bool)
        keep[list(into)] = False
        new_id = np.cumsum(keep, dtype=np.int32) - 1
        remap = new_id[target]
        for col in (self.slices.track, self.instants.track, self.counters.track):
            if len(col):
                a = np.frombuffer(col, np.int32)          # (the column's own buffer, written in place)
                a[:] = remap[a]
                del a
        tracks = [t for t in self.tracks if keep[t.id]]
        for t in tracks:
            t.id = int(new_id[t.id])
            if t.parent is not None:
                t.parent = int(remap[t.parent])
        for th in self.threads:
            th.track = int(remap[th.track])
        self.tracks = tracks
        if self.slices.depth is not None:
            self.slices.depth = self.slices.parent = None     # (nested again when asked)

    def add_lane(self, track: Track, lane: int, labels: Counter[tuple[int, str]] | None = None,
                 deep: int = 0) -> Track:
        """Extra track ``lane`` (1, 2, ...) of ``track`` for slices that overlap its own, or (``deep``)
        for its slices nested ``deep`` levels and more, past the depth Perfetto keeps.  A thread's
        lane names its tid when another thread of its process goes by the same label: ``labels``
        is :meth:`thread_labels` of (at least) the thread's process, from a caller adding many
        lanes at once (counted again for each lane, 1,000 threads with 40 lanes each took 29 s).
        The lane's name drops the spaces that end its track's (Kineto names a CUDA stream's thread
        ``"stream 7 "``: its lanes were ``"stream 7  (overlap 1)"``)."""
        label = _lane_stem(self.track_label(track) or "track")
        if track.kind is TrackKind.THREAD and track.thread is not None:
            th = self.threads[track.thread]
            if labels is None:
                labels = self.thread_labels((th.process,))
            if labels[(th.process, label)] > 1:
                label = f"{label} [tid {th.tid}]"
        return self._add_track(TrackKind.LANE, f"{label} (depth {deep}+)" if deep else f"{label} (overlap {lane})",
                               process=track.process, thread=track.thread, parent=track.id, lane=lane, deep=deep)

    # ---- events ---------------------------------------------------------------------------

    def _args(self, args: Mapping[str, Any] | bytes | None) -> bytes | None:
        raw, changed = encode_args_counted(args)
        self.fixed_args += changed
        return raw

    def _time(self, v: Any) -> int:
        """A time as the int64 column holds it; what is beyond int64 (or not a number) is saturated
        here and counted, then dropped or clamped by :func:`enforce_time_domain`."""
        if type(v) is int and INT64_MIN <= v <= INT64_MAX:
            return v
        try:
            i = int(v)
        except (OverflowError, ValueError, TypeError):        # inf, nan, None
            self.saturated += 1
            return INT64_MIN if (isinstance(v, float) and v < 0) else INT64_MAX
        if INT64_MIN <= i <= INT64_MAX:
            return i
        self.saturated += 1
        return INT64_MIN if i < 0 else INT64_MAX

    def add_slice(self, track: int, ts: int, dur: int, name: str, cat: str | None = None,
                  args: Mapping[str, Any] | bytes | None = None) -> int:
        s = self.slices
        s.ts.append(self._time(ts))
        s.dur.append(self._time(dur))
        s.track.append(track)
        s.name.append(self.strings.intern(name))
        s.cat.append(self.strings.intern(cat))
        s.args.append(self._args(args))
        s.depth = s.parent = None
        return len(s.ts) - 1

    def add_instant(self, track: int, ts: int, name: str, cat: str | None = None,
                    args: Mapping[str, Any] | bytes | None = None) -> int:
        t = self.instants
        t.ts.append(self._time(ts))
        t.track.append(track)
        t.name.append(self.strings.intern(name))
        t.cat.append(self.strings.intern(cat))
        t.args.append(self._args(args))
        return len(t.ts) - 1

    def add_counter(self, track: int, ts: int, value: float) -> None:
        c = self.counters
        c.ts.append(self._time(ts))
        c.track.append(track)
        try:
            c.value.append(value)
        except (OverflowError, TypeError):     # an integer beyond a double, or not a number
            try:
                c.value.append(float(value))
            except (OverflowError, TypeError, ValueError):
                c.value.append(float("nan"))   # dropped by enforce_time_domain, counted

    def add_flow(self, src_slice: int, dst_slice: int, name: str | None = None) -> None:
        f = self.flows
        f.src.append(src_slice)
        f.dst.append(dst_slice)
        f.name.append(self.strings.intern(name))

    # ---- reading back ---------------------------------------------------------------------

    def slice_args(self, i: int) -> dict[str, Any]:
        return decode_args(self.slices.args[i])

    def time_range(self) -> tuple[int, int] | None:
        """(first, last) timestamp over all events, or None for an empty trace."""
        import numpy as np                  # (the model's module does not import numpy up front)
        lo: list[int] = []
        hi: list[int] = []
        s = self.slices
        if len(s):
            ts, dur = np.frombuffer(s.ts, np.int64), np.frombuffer(s.dur, np.int64)
            lo.append(int(ts.min()))
            if -MAX_TIME_NS <= lo[-1] and ts.max() <= MAX_TIME_NS and dur.max() <= MAX_TIME_NS:
                hi.append(int((ts + dur).max()))          # (no end can overflow int64)
            else:                                       # (times not yet in the model's domain)
                hi.append(max(a + b for a, b in zip(s.ts, s.dur)))
        for col in (self.instants.ts, self.counters.ts):
            if len(col):
                a = np.frombuffer(col, np.int64)
                lo.append(int(a.min()))
                hi.append(int(a.max()))
        return (min(lo), max(hi)) if lo else None

    def event_count(self) -> int:
        return len(self.slices) + len(self.instants) + len(self.counters) + len(self.flows)

    def process_threads(self, process: Process) -> list[Thread]:
        """The threads of ``process``, in the order they were made (the list itself: it grows)."""
        return self._process_threads.setdefault(process.id, [])

    def thread_labels(self, processes: Iterable[int]) -> Counter[tuple[int, str]]:
        """How many threads of each of ``processes`` (ids) go by each label (:meth:`track_label`,
        less the spaces that end it, as a lane's name has it), keyed (process id, label): what
        :meth:`add_lane` asks."""
        return Counter((p, _lane_stem(self.track_label(self.tracks[t.track])))
                       for p in processes for t in self._process_threads.get(p, ()))

    def track_label(self, track: Track) -> str:
        """Human name of a track, for messages and summaries."""
        if track.kind is TrackKind.THREAD and track.thread is not None:
            th = self.threads[track.thread]
            return th.name or f"thread {th.tid}"
        if track.kind is TrackKind.COUNTER and track.series:
            # how Perfetto names the series of a Chrome "C" event: "<name> <arg key>"
            return f"{track.name} {track.series}"
        return track.name


# ---- the time domain ---------------------------------------------------------------------------

MAX_TIME_NS = 2**62    # every time and every slice's end lies in [0, MAX_TIME_NS] ns (~146 years)
# no slice lasts longer (~52 days): a Chrome JSON viewer reads ts and dur as doubles of µs, and past
# 2^53 ns a child's end could round beyond its parent's (trace_processor then spills it, an error)
MAX_DUR_NS = 2**52


def enforce_time_domain(trace: Trace) -> None:
    """Bring every time of ``trace`` into the model's domain; the one place that does (the loader
    calls it on every trace a reader returns).

    Times and durations are integer ns.  A slice's start and end, an instant's and a counter
    sample's time lie in ``[0, MAX_TIME_NS]`` (2^62 ns: Unix times up to the year 2116; within
    int64 with room for any sum of two times, and exact in a .pftrace), and no slice lasts longer
    than ``MAX_DUR_NS`` (2^52 ns, ~52 days: exact as the doubles a JSON viewer reads).  On a clock with no
    absolute zero (RELATIVE, SYNTHETIC) the times are first moved later as one, so that none is
    negative (a note).  Then an event whose time is still outside the domain is dropped (with the
    flows of a dropped slice), a negative duration becomes 0 and one that ends past the domain is
    cut at its end (CLAMPED_VALUE), and a counter sample that is not a finite number is dropped
    (DROPPED_EVENT); each counted.  Args values that had to change to be strict JSON (counted while
    the reader added them) are reported here too, and ``trace.meta.extra`` is made strict JSON the
    same way.
    """
    import numpy as np

    d = trace.diagnostics
    if trace.fixed_args:
        d.warn(WarningCode.CLAMPED_VALUE, "args values that are not strict JSON (NaN/Infinity, integers "
               "beyond 64 bits, text that is not UTF-8, values nested deeper than "
               f"{MAX_ARGS_DEPTH} levels) were written as strings", trace.fixed_args)
        trace.fixed_args = 0
    for attr in ("rank", "world_size"):
        v = getattr(trace.meta, attr)
        if v is not None and not (isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                  and 0 <= v <= INT32_MAX):
            setattr(trace.meta, attr, None)
            d.warn(WarningCode.CLAMPED_VALUE, f"a {attr.replace('_', ' ')} that is not an integer in "
                   f"0..{INT32_MAX} was not kept ({str(v)[:40]})", 1)
    if trace.meta.extra:
        extra, changed = strict_args(trace.meta.extra)
        if changed:                    # replaced only then: readers' own types stay as they were
            trace.meta.extra = extra
            d.warn(WarningCode.CLAMPED_VALUE, "metadata values that are not strict JSON were written as "
                   "strings", changed)
    s, ins, cnt = trace.slices, trace.instants, trace.counters
    cols = [np.frombuffer(c, np.int64) for c in (s.ts, ins.ts, cnt.ts) if len(c)]
    if not cols:
        return
    lo = min(int(c.min()) for c in cols)
    shift = 0
    if lo < 0 and trace.meta.clock is not Clock.UNIX:
        # the earliest time that is itself a plausible one (not a saturated or absurd outlier)
        lows = [c[c >= -MAX_TIME_NS] for c in cols]
        lows = [int(x.min()) for x in lows if len(x)]
        if lows and min(lows) < 0:
            shift = -min(lows)
            for c in (s.ts, ins.ts, cnt.ts):
                if len(c):
                    a = np.frombuffer(c, np.int64)
                    ok = (a >= -MAX_TIME_NS) & (a <= MAX_TIME_NS)
                    a[ok] += shift
            d.warn(WarningCode.NOTE, f"times were moved {shift} ns later so that none is negative "
                   "(the source's clock has no absolute zero)", 1)
    # slices (first four reductions: a trace whose every start, duration and end is in the domain,
    # as most are, needs none of the masks below: 13.6 -> 1.1 ms for the 1M trace's 630k slices)
    if len(s) and not _in_domain(np.frombuffer(s.ts, np.int64), np.frombuffer(s.dur, np.int64)):
        ts = np.frombuffer(s.ts, np.int64)
        bad = (ts < 0) | (ts > MAX_TIME_NS)
        dur = np.frombuffer(s.dur, np.int64)
        neg = (dur < 0) & ~bad
        if neg.any():
            dur[neg] = 0
            d.warn(WarningCode.CLAMPED_VALUE, "slices with a negative duration were given a duration of 0",
                   int(neg.sum()))
        huge = (dur > MAX_DUR_NS) & ~bad
        if huge.any():
            dur[huge] = MAX_DUR_NS
            d.warn(WarningCode.CLAMPED_VALUE, f"slices longer than {MAX_DUR_NS} ns (~52 days, the longest "
                   "a slice can be) were cut to that", int(huge.sum()))
        room = MAX_TIME_NS - np.clip(ts, 0, MAX_TIME_NS)
        long_ = (dur > room) & ~bad
        if long_.any():
            dur[long_] = room[long_]
            d.warn(WarningCode.CLAMPED_VALUE, f"slices ending after {MAX_TIME_NS} ns (the time domain's "
                   "end) were cut there", int(long_.sum()))
        if bad.any():
            _drop_slices(trace, np.flatnonzero(~bad))
            d.warn(WarningCode.DROPPED_EVENT, f"slices starting outside 0..{MAX_TIME_NS} ns (the time "
                   "domain) were dropped", int(bad.sum()))
    if len(ins) and not _in_domain(np.frombuffer(ins.ts, np.int64)):
        ts = np.frombuffer(ins.ts, np.int64)
        bad = (ts < 0) | (ts > MAX_TIME_NS)
        if bad.any():
            keep = np.flatnonzero(~bad)
            new = InstantTable()
            for name in ("ts", "track", "name", "cat"):
                _take_col(getattr(ins, name), getattr(new, name), keep)
            new.args = ins.args.take(keep)
            trace.instants = new
            d.warn(WarningCode.DROPPED_EVENT, f"instants outside 0..{MAX_TIME_NS} ns (the time domain) "
                   "were dropped", int(bad.sum()))
    if len(cnt) and not (_in_domain(np.frombuffer(cnt.ts, np.int64))
                         and np.isfinite(np.frombuffer(cnt.value, np.float64)).all()):
        ts = np.frombuffer(cnt.ts, np.int64)
        val = np.frombuffer(cnt.value, np.float64)
        bad_t = (ts < 0) | (ts > MAX_TIME_NS)
        bad_v = ~np.isfinite(val) & ~bad_t
        if bad_t.any() or bad_v.any():
            keep = np.flatnonzero(~(bad_t | bad_v))
            new_c = CounterTable()
            for name in ("ts", "track", "value"):
                _take_col(getattr(cnt, name), getattr(new_c, name), keep)
            trace.counters = new_c
            if bad_t.any():
                d.warn(WarningCode.DROPPED_EVENT, f"counter samples outside 0..{MAX_TIME_NS} ns (the time "
                       "domain) were dropped", int(bad_t.sum()))
            if bad_v.any():
                d.warn(WarningCode.DROPPED_EVENT, "counter samples whose value is not a finite number "
                       "(NaN, Infinity, beyond a double) were dropped", int(bad_v.sum()))


def _in_domain(ts: "Any", dur: "Any | None" = None) -> bool:
    """Whether every time ``ts`` (int64 array, not empty) lies in the domain, and with ``dur`` every
    duration is in ``0..MAX_DUR_NS`` and every end too (then :func:`enforce_time_domain` changes
    nothing)."""
    lo, hi = int(ts.min()), int(ts.max())
    if dur is None:
        return lo >= 0 and hi <= MAX_TIME_NS
    d_lo, d_hi = int(dur.min()), int(dur.max())
    return lo >= 0 and d_lo >= 0 and d_hi <= MAX_DUR_NS and hi + d_hi <= MAX_TIME_NS


def _take_col(src: array, dst: array, keep: "Any") -> None:
    import numpy as np
    dst.frombytes(np.frombuffer(src, dtype=np.dtype(src.typecode))[keep].tobytes())


def _drop_slices(trace: Trace, keep: "Any") -> None:
    """Keep only the slices at ``keep`` (sorted indices), with the flows between kept slices."""
    lost = trace.take_slices(keep)
    if lost:
        trace.diagnostics.warn(WarningCode.DROPPED_EVENT, "flows to or from a dropped slice were dropped", lost)
