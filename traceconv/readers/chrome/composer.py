"""MosaicML Composer profiler traces → timeline: deltas on the generic Chrome reader and on Kineto.

Two kinds of file:

* **Composer's own JSON trace** (``ep{E}-ba{B}-rank{R}.json``, ``merged_trace.json``): a bare array.
  ``B``/``E`` markers (``event/<name>``, ``callback/<Class>/event/<event>``) on the training-loop
  thread, ``C`` system counters, ``i`` instants, and ``M`` metadata: ``global_rank`` → the trace's
  rank, ``clock_sync_timestamp_us`` / ``clock_sync_error_bound`` → trace metadata (per rank); pid =
  global rank, named "Rank N training loop process".  The profiling window opens and closes
  mid-iteration, so begins without ends and ends without begins at its edges are expected: they are
  counted (begins are ended at the end of the trace) with a warning that says so.
  The file also holds the torch-profiler events Composer re-emits (pid overwritten to the rank) with
  their **relative** Kineto ``ts`` next to Composer's absolute Unix µs (formats.md §5).  Those are
  shifted by the Kineto ``baseTimeNanoseconds``, read from the companion torch trace
  (``*/rank{R}.{B}.pt.trace.json[.gz]`` beside the trace folder) when it is there, else rebuilt by
  Kineto's own rule (Unix time floored to a 7 889 238 s bucket) from Composer's earliest timestamp; a
  note says which.  The file is streamed like any other: the base is judged from its first events,
  the scanned rows' times moved in place (:meth:`ComposerReader.scanned_times`), and judged again
  from every event at the end, the read starting over in the rare file where the two differ
  (:class:`~.paths.Rejudge`).  Torch's ``process_name``/``process_sort_index`` (meant for the host pid) do not
  replace Composer's: the torch process name becomes a label, and Composer's thread names stay too.
* **Composer's torch traces** (``rank{R}.{B}.pt.trace.json``): Kineto traces with a top-level
  ``global_rank`` key: read as Kineto, rank from ``global_rank``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...errors import WarningCode
from ...io import Source, open_source
from ...model import Clock, Trace
from ..schema import check
from .paths import Rejudge
from .reader import ChromeReader, Document, Event, looks_like_own_output, time_ns, timed_ns
from .kineto import KinetoReader, read_header
from .stream import SCAN

WHAT = "Composer profiler trace"
KINETO_BUCKET_NS = 7_889_238 * 1_000_000_000     # kineto's ChromeTraceBaseTime granularity
RELATIVE_BELOW_NS = 100_000_000_000_000 * 1000   # ts below 1e14 µs (1973): not Unix time

_ARRAY_META = re.compile(rb'"name"\s*:\s*"(global_rank|clock_sync_timestamp_us)"[^{}]*"ph"\s*:\s*"M"')
_MARKER = re.compile(rb'"name"\s*:\s*"(callback|algorithm)/[^"]*/event/[^"]*"\s*,\s*"cat"\s*:\s*"[^"]*"\s*,'
                     rb'\s*"ph"\s*:\s*"[BE]"')
_EVENT_MARKER = re.compile(rb'"name"\s*:\s*"event/[a-z_]+"\s*,\s*"cat"\s*:\s*""\s*,\s*"ph"\s*:\s*"[BE]"')
_TOP_GLOBAL_RANK = re.compile(rb'"global_rank"\s*:\s*\d+')
_FILE_NAME = re.compile(r"ep(\d+)-ba(\d+)-rank(\d+)\.json")


def sniff(head: bytes) -> bool:
    h = head.lstrip()
    if looks_like_own_output(h):
        return False
    if h[:1] == b"[":
        return bool(_ARRAY_META.search(h) or _MARKER.search(h) or _EVENT_MARKER.search(h))
    if h[:1] == b"{":
        events_at = h.find(b'"traceEvents"')
        top = h if events_at < 0 else h[:events_at]
        return _TOP_GLOBAL_RANK.search(top) is not None
    return False


class ComposerTorchReader(KinetoReader):
    """A Kineto trace written by Composer's TorchProfiler (top-level ``global_rank``)."""

    format_name = "composer"
    what = "Composer torch-profiler trace"

    _global_rank: Any = None

    def on_header(self, header: dict[str, Any], doc: Document) -> None:
        super().on_header(header, doc)
        self._global_rank = header.get("global_rank")

    def finish(self) -> None:
        super().finish()                         # (the rank of distributedInfo, which global_rank overrides)
        if isinstance(self._global_rank, int):
            self.trace.meta.rank = self._global_rank


class ComposerReader(ChromeReader):
    """Composer's own per-rank (or merged) JSON array."""

    format_name = "composer"
    what = WHAT
    unmatched_begin_note = (" (expected in Composer traces: markers still open when the profiling window "
                            "closed)")
    unmatched_end_note = (" (expected in Composer traces: markers opened before the profiling window "
                          "started)")

    def __init__(self, source: Source | None = None, data: bytes | None = None) -> None:
        super().__init__(source, data)
        self.torch_base_ns = 0
        self._ranks: dict[int, dict[str, int]] = {}
        self._composer_named: set[Any] = set()
        self._companion: tuple[int, str] | None | bool = False   # (base, file name); False: not looked for
        self._first_abs: int | None = None    # the earliest Unix time of any timed event, in ns
        self._relative = False                # whether any timed event has a relative time
        self._judged: int | None = None       # the torch base a read started over was told (Rejudge)

    # The torch events' base is judged from the first events (all of them on the whole-document
    # path); the events are read with it; when the last is read, it is judged again from all of
    # them, and the read starts over told the right one in the rare file where the two differ
    # (no companion trace, and an earlier Composer time than the first events' in another of
    # kineto's 91-day buckets).

    def _judge(self, first_abs: int | None) -> tuple[int, str | None]:
        """The torch events' base for a file whose earliest Unix time is ``first_abs``, and the
        companion trace it came from (None: kineto's rule, or no base at all)."""
        if self._companion is False:
            self._companion = self._companion_base()
        if self._companion:
            return self._companion
        if first_abs is not None:
            return first_abs - first_abs % KINETO_BUCKET_NS, None
        return 0, None

    def time_base(self, header: dict[str, Any], events: list[Event]) -> None:
        self.trace.meta.clock = Clock.UNIX
        if self._judged is not None:
            self.torch_base_ns = self._judged
        else:
            first = min((v for v in timed_ns(events) if v >= RELATIVE_BELOW_NS), default=None)
            self.torch_base_ns = self._judge(first)[0]

    def _seen(self, times: np.ndarray) -> None:
        """Timed events' times (ns, as written): whether one is relative, and the earliest Unix one."""
        if not len(times):
            return
        rel = times < RELATIVE_BELOW_NS
        if rel.any():
            self._relative = True
        if not rel.all():
            m = int(times[~rel].min())
            if self._first_abs is None or m < self._first_abs:
                self._first_abs = m

    def scanned_times(self, cols: Any, n: int) -> bool:
        timed = ((cols.flags[:n] & (SCAN.F_TS | SCAN.SLOW)) == SCAN.F_TS) & (cols.ph[:n] != ord("M"))
        ts = cols.ts[:n]
        self._seen(ts[timed])
        ts[timed & (ts < RELATIVE_BELOW_NS)] += self.torch_base_ns
        return True

    def _convert_events(self, events: list[Event], seq0: int, seqs: list[int] | None = None) -> None:
        self._seen(np.fromiter(timed_ns(events), np.int64))
        super()._convert_events(events, seq0, seqs)

    def _finish_events(self) -> None:
        if not self._own and self._relative:
            base, companion = self._judge(self._first_abs)
            if base != self.torch_base_ns:
                raise Rejudge(_judged=base)
            if companion is not None:
                self.warn(WarningCode.NOTE, "torch-profiler events with relative times were placed on Unix time "
                          f"with the baseTimeNanoseconds of {companion}")
            elif self._first_abs is not None:
                self.warn(WarningCode.NOTE, "torch-profiler events with relative times were placed on Unix time "
                          "with kineto's base-time rule (no companion .pt.trace.json found)")
            else:
                self.trace.meta.clock = Clock.RELATIVE
            self.trace.meta.extra["composer.torch_base_time_ns"] = self.torch_base_ns
        super()._finish_events()

    def _companion_base(self) -> tuple[int, str] | None:
        if self.source is None:
            return None
        path = Path(self.source.path)
        m = _FILE_NAME.search(path.name)
        if not m:
            return None
        batch, rank = m.group(2), m.group(3)
        try:
            cands = sorted(path.parent.parent.glob(f"*/rank{rank}.{batch}.pt.trace.json*"))
        except OSError:
            return None
        for c in cands:
            try:
                base = read_header(open_source(c).head)
            except Exception:   # any unreadable companion: fall back to the rule
                continue
            if base:
                return base, c.name
        return None

    def ts_converter(self) -> Callable[[Any], int | None]:
        tb = self.torch_base_ns

        def conv(b: Any) -> int | None:
            v = time_ns(b)
            if v is not None and v < RELATIVE_BELOW_NS:
                v += tb
            return v
        return conv

    def on_metadata(self, ev: Event, args: dict[str, Any]) -> bool:
        name = ev.name
        pid = ev.pid
        torch_event = ev.cat is None    # Composer writes "cat": "" on its own events
        if name in ("global_rank", "clock_sync_timestamp_us", "clock_sync_error_bound"):
            from .schema import ComposerMeta      # (not for sniffing)

            value = check(ComposerMeta, args, f"{self.what} ('{name}' metadata event)", at="args").value
            self._ranks.setdefault(pid if isinstance(pid, int) else -1, {})[name] = value
            return True
        if name == "process_name" and isinstance(args.get("name"), str):
            if torch_event and pid in self._composer_named:
                self.names.labels.setdefault(pid, []).append(args["name"])
                return True
            if not torch_event:
                self._composer_named.add(pid)
            return False
        if name == "process_sort_index" and torch_event and pid in self._composer_named:
            return True      # torch's sort index was meant for the host pid, not the rank
        if name in ("thread_name", "thread_sort_index"):
            key = (name, pid, ev.tid)
            if not torch_event:
                self._composer_named.add(key)
            elif key in self._composer_named:
                return True  # Composer named its training-loop thread; torch's name for it is generic
        return False

    def finish(self) -> None:
        ranks = sorted(r for r in self._ranks if r >= 0)
        meta = self.trace.meta
        if len(ranks) == 1:
            meta.rank = self._ranks[ranks[0]].get("global_rank", ranks[0])
        meta.extra["composer.ranks"] = {str(r): self._ranks[r] for r in ranks}


def read(source: Source) -> Trace:
    h = source.head.lstrip()
    if h[:1] == b"{":
        return ComposerTorchReader(source).read()
    return ComposerReader(source).read()
