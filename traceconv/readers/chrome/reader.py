"""Chrome Trace Event JSON → timeline: the generic reader every timeline dialect builds on.

What goes where (the rules follow Perfetto's JSON importer, docs/getting-started/other-formats.md,
except where noted):

* Container: an object with ``traceEvents`` (other top-level keys go to the trace metadata) or a
  bare array; ``.gz`` is detected by magic bytes.  A file is read as a stream, a block at a time,
  by the compiled scanner (``traceconv._core.scan``, rust/src/scan/: serde_json underneath) that
  turns events of the plain shape into columns; an event of any other shape is decoded from its own text with msgspec into a
  small Struct and converted one by one.  ``args`` stay JSON text (whitespace between tokens
  removed), never rebuilt as Python objects, and reach the Chrome JSON output verbatim and the
  protobuf as debug annotations.  What neither can read (trailing commas, a truncated array,
  invalid escapes, lone surrogates, non-string names) goes through the whole-document repair path
  with a counted warning; a file cut short keeps every complete event.
* ``ts``/``dur`` are µs (number or numeric string) and become exact integer ns: a double is used
  only below 2^43 µs, where 3 decimals still pin down the ns; a file with larger fractional times
  is read again keeping them as text.  The clock is Unix when the file says so
  (``baseTimeNanoseconds``, traceconv's own ``metadata.traceconv.clock``) or when the times are
  plausible Unix µs; otherwise relative.  traceconv's own Chrome JSON output reads back to the
  same timeline (its lanes and async tracks become tracks again, not threads).
* pid/tid: numbers or strings, any size: the model gives out-of-range and string ids their own
  int32 numbers and keeps the raw one (a string pid/tid names its process/thread, as in Perfetto).
  A missing tid is the pid (Perfetto's rule); a missing pid is 0.
* ``X`` → a slice on its thread.  ``B``/``E`` → matched per thread after a stable sort by time: an
  ``E`` closes the innermost open slice with the same name and category (an ``E`` without name
  closes the top one); slices left open above it end with it; a ``B`` never closed ends at the
  end of the trace; an ``E`` that closes nothing is dropped.  ``E`` args are merged into the slice.
* ``i``/``I``/``R`` → instants: ``s:"g"`` on the global track, ``s:"p"`` on the process track,
  otherwise on the thread.  ``n`` with an id → an instant on that async track; without an id (MXNet)
  → an instant with its ``s`` scope.
* ``C`` → one counter track per series, under the process: named ``<name>`` when the series key is
  ``value`` or the event name itself, else ``<name> <key>``; with ``id``: ``<name> id: <id> ...``.
* ``b``/``e`` (nestable async, ``id`` or ``id2``) and legacy ``S``/``F`` → slices on an async track
  per (process or global, category, id), named after its first slice; ``T``/``p`` steps and ``n``
  → instants on that track.
* ``M`` → process/thread names, sort indexes and ``process_labels`` (applied to processes and
  threads that have events); other metadata events are counted.
* Flows v1 (``s``/``t``/``f``, identity = category + name + id, string ids read as hex like
  Perfetto): ``s`` and ``t`` bind to the innermost slice open on their thread at their time (at
  one time, in file order, as Perfetto's stable sort sees them: a slice is open from its begin
  until its ``E``; an ``X`` through its end), ``f`` with ``bp:"e"`` too, otherwise to the next
  slice that begins on the thread.  Then, in time order, Perfetto's v1 rule: an ``s`` starts the
  flow from its slice (an ``s`` of a flow already started is ignored, as trace_processor does);
  a ``t`` links the flow's current slice to its own and the flow goes on from there; an ``f``
  links the current slice to its own without closing the flow, so several ``f`` of one id are a
  fan-out (one ``cudaGraphLaunch``, each kernel it started).  One start and one end whose times
  are reversed (host/device clock skew) are still linked, with a note.  Flows v2: ``bind_id`` with
  ``flow_out``/``flow_in`` on ``X``/``B`` events (a ``flow_in`` does not close the flow: fan-out).
  Endpoints that bind to no slice are counted.
* Every other phase is counted as unknown, never fatal.

A dialect (Kineto, Composer, MXNet, MegEngine) is a subclass that overrides a few hooks: the time
base, how ids and names are read, extra tracks.  See :class:`ChromeReader`.

The module's neighbours: :mod:`.paths` holds the three read paths this reader inherits (the
stream, the text in memory, the whole document) and starts a read over on the next one when it
must; :mod:`.document` decodes a whole document (the reference path and the repairing fallback),
:mod:`.stream` reads a big one a block at a time and scans its events into columns with the
compiled scanner, on threads of its own; this module turns either into the model, and
:mod:`.flows` binds the flow points it gathers to the slices and links them; :mod:`.names` keeps
what metadata events name.
"""

from __future__ import annotations

import decimal
import json
import math
import re
from array import array
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import msgspec
import numpy as np
import orjson
from msgspec import Raw

from ...errors import WarningCode, clip
from ...io import Source
from ...model import MAX_TIME_NS, Clock, Thread, Trace, TrackKind

from .document import (EXACT_FLOAT_US, FIXED_VALUES, WHAT, Document, Event, ExactEvent, _EVENTS, _EXACT_EVENTS,
                       _number, _has_inexact_times, _jsonable, is_own_output)
from .flows import FlowPoints
from .names import Names, name_remapped
from .paths import ReadPaths
from .stacks import Stacks
from .stream import BAD_UTF8, SCAN, Rows, _ChunkFailure

# Plausible Unix times in µs: 1973-03-03 .. 2100-01-01.
UNIX_US_MIN = 100_000_000_000_000
UNIX_US_MAX = 4_102_444_800_000_000


WRAPPED_SLICE_ARGS = "slice args that were not a JSON object were wrapped in 'args'"
_NEVER = 2**31 - 1          # the input position of the end of a slice closed only by the trace's end

# ---------------------------------------------------------------- numbers

def _raw(a: np.ndarray) -> memoryview:
    """A contiguous array's bytes, for ``array.frombytes`` (no copy)."""
    return memoryview(a).cast("B")


def us_to_ns(b: bytes) -> int | None:
    """µs as JSON number text (or a quoted numeric string) → exact integer ns; None if not a number."""
    i = b.find(b".")
    if i < 0:
        try:
            return int(b) * 1000
        except ValueError:
            return _slow_ns(b) if b else None
    n = len(b) - i - 1
    if 0 < n <= 3:
        try:
            # "12.345" -> 12345 ns; the sign and a missing whole part come out right too
            return int(b[:i] + b[i + 1:]) * (100, 10, 1)[n - 1]
        except ValueError:
            pass
    return _slow_ns(b)


MAX_US = 4_000_000_000_000_000   # |ts| and dur beyond (year 2096 as Unix µs) leave no room in int64 ns


def time_ns(v: Any) -> int | None:
    """An event's ts/dur (µs: int, double, numeric string or raw JSON text) → integer ns; None if it
    is not a number or is out of range."""
    t = type(v)
    if t is int:
        return v * 1000 if -MAX_US < v < MAX_US else None
    if t is float:
        if -EXACT_FLOAT_US < v < EXACT_FLOAT_US:
            w = math.floor(v)
            return w * 1000 + round((v - w) * 1000)
        return round(v * 1000) if -MAX_US < v < MAX_US else None
    if t is str:
        return _slow_ns(v.encode())
    if v is None:
        return None
    ns = us_to_ns(bytes(v)) if len(v) else None
    return ns if ns is not None and -MAX_US * 1000 < ns < MAX_US * 1000 else None


def _slow_ns(b: bytes) -> int | None:
    t = b.strip().strip(b'"').strip()
    try:
        d = decimal.Decimal(t.decode("ascii"))
        if not d.is_finite() or not -MAX_US < d < MAX_US:
            return None
        return int((d * 1000).to_integral_value(rounding=decimal.ROUND_HALF_EVEN))
    except (ArithmeticError, UnicodeDecodeError, ValueError):
        return None


def number(v: Any) -> float | None:
    """A counter value: a number or a numeric string."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


_DIGITS_TO_0 = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 300       # an integer this long is infinite as a double


def _risky(b: bytes) -> bool:
    """Whether orjson may refuse this JSON text: an escape that may be a lone surrogate, or a number
    with a 3-digit exponent or 300 digits (infinite as a double).  Plain finds over the text with
    its digits made zeros: a regex costs 10x more here."""
    if b"\\u" in b:
        return True
    t = b.translate(_DIGITS_TO_0)
    return b"e+000" in t or b"E+000" in t or b"e000" in t or b"E000" in t or _LONG_NUMBER in t


_NEWLINE_INDENT = re.compile(rb"\n[ \t\r]*")


def compact_args(raw: Raw | bytes) -> tuple[bytes | None, bool]:
    """Args text → JSON object bytes for the model (None if empty); second item: whether it had to be
    changed.  msgspec has checked the syntax, so an object is kept as it is with its line breaks
    removed (a JSON string cannot hold a raw one); only text with what orjson may refuse (lone
    surrogates, infinite numbers) or that is not an object is rebuilt."""
    if not len(raw):
        return None, False
    b = raw if type(raw) is bytes else bytes(raw)
    if b[:1] == b"{" and not _risky(b):
        if b"\n" in b:
            b = _NEWLINE_INDENT.sub(b"", b)
        return (None if b == b"{}" else b), False
    try:
        v = orjson.loads(b)
    except orjson.JSONDecodeError:
        fixed = [0]
        try:
            v = _jsonable(json.loads(b, parse_float=_number), fixed)
        except ValueError:
            return orjson.dumps({"args": b.decode("utf-8", "replace")}), True
        out = json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode()
        try:
            orjson.loads(out)
        except orjson.JSONDecodeError:
            return orjson.dumps({"args": b.decode("utf-8", "replace")}), True
        if not isinstance(v, dict):
            return orjson.dumps({"args": v}), True
        return (out if v else None), bool(fixed[0])
    if isinstance(v, dict):
        return (orjson.dumps(v) if v else None), False
    if v is None:
        return None, False
    return orjson.dumps({"args": v}), True


def norm_id(v: Any) -> Any:
    """pid/tid as the model keeps them: integral floats become ints, None stays None."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def flow_id(v: Any) -> Any:
    """Flow/async ids: strings are hex as in Perfetto (``"0x402"`` or ``"402"``)."""
    if isinstance(v, str):
        try:
            return int(v, 16)
        except ValueError:
            return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


# ---------------------------------------------------------------- the reader

OWN_SYNTHETIC_TID = 2_000_000_000     # traceconv's Chrome JSON writer numbers invented threads from here


@dataclass
class _TrackRef:
    """Stands in for a Thread when a (pid, tid) of traceconv's own output is really another track."""

    track: int


class ChromeReader(ReadPaths):
    """The generic reader.  Dialects override the class attributes and hooks below."""

    format_name = "chrome-json"
    what = WHAT
    # the dialect's own words for the warnings about B/E pairs cut by the profiling window
    unmatched_begin_note = ""
    unmatched_end_note = ""
    missing_tid = "pid"        # "pid" (Perfetto) or "zero" (MegEngine omits zero fields)
    missing_ts_zero = False    # MegEngine omits ts == 0
    missing_dur_zero = False   # MegEngine omits dur == 0 on X events

    def __init__(self, source: Source | None = None, data: bytes | None = None) -> None:
        self.source = source
        self.data = data
        self.trace = Trace(self.format_name)
        self.base_ns = 0
        self.used: Counter[str] = Counter()     # input events by what they became
        self.dropped = 0                        # input events counted in a warning and not kept
        self.n_events = 0
        self.max_ts: int | None = None
        self._threads: dict[tuple[Any, Any], Thread] = {}
        self.names = Names()            # what metadata events say of processes and threads
        self._stacks = Stacks(self.trace, compact_args)     # B/E and the like, paired at the end
        # the input position of an event a dialect read as part of the header (MegEngine 1.5's
        # first event holds its time base): counted as metadata, not converted
        self.header_event = -1
        self._stack_track: dict[Any, int] = {}
        self._acc_max_ts = -(2**63)
        self._flows = FlowPoints()      # bound and linked once every slice is read (.flows)
        self._counter_tracks: dict[tuple, int] = {}
        self._global_track: int | None = None
        self.warn = self.trace.diagnostics.warn
        self._own = False
        self._own_meta: dict[str, Any] = {}    # traceconv's own metadata, when the file has it
        self._progress: tuple[list[int], int, str] | None = None   # (bytes read, of how many, stage)
        # int32: 2**31 events would be a file of ~500 GB
        self._bseq = array("i")        # per slice: the input position of the event that began it
        self._eseq = array("i")        # ... and of the one that ended it (-1: an X, closed lazily)
        self._pairs: Any = None        # the (pid, tid) pairs of the scanner's rows (SCAN.Pairs) ...
        self._pair_track = np.zeros(0, np.int32)     # ... and each one's track
        self._counters: Any = None     # the counters of the scanner's C rows (SCAN.Counters) ...
        self._counter_track = np.zeros(0, np.int32)  # ... and each one's track

    # ---- hooks for dialects -----------------------------------------------------------------

    def on_header(self, header: dict[str, Any], doc: Document) -> None:
        """Validate the top-level keys and put them into ``trace.meta``."""
        meta = header.get("metadata")
        if isinstance(meta, dict):
            own = meta.get("traceconv")
            for k, v in meta.items():
                if k != "traceconv":
                    self.trace.meta.extra[k] = v
            if isinstance(own, dict):
                self.trace.meta.restore(own)
                self._own_meta = own
        for k, v in header.items():
            if k not in ("metadata", "displayTimeUnit", "baseTimeNanoseconds"):
                self.trace.meta.extra[k] = v

    def time_base(self, header: dict[str, Any], events: list[Event]) -> None:
        """Set ``self.base_ns`` (added to every converted ts) and ``trace.meta.clock``."""
        base = header.get("baseTimeNanoseconds")
        own = header.get("metadata", {}).get("traceconv") if isinstance(header.get("metadata"), dict) else None
        own_clock = own.get("clock") if isinstance(own, dict) else None
        if isinstance(base, int) and not isinstance(base, bool) and base > 0:
            self.base_ns = base
            self.trace.meta.clock = Clock.UNIX
        elif own_clock in (c.value for c in Clock):
            self.trace.meta.clock = Clock(own_clock)
        else:
            self.trace.meta.clock = Clock.UNIX if looks_unix(events) else Clock.RELATIVE

    def ts_converter(self) -> Callable[[Any], int | None]:
        """ts value (see :func:`time_ns`) → ns on the trace's clock."""
        base = self.base_ns
        if not base:
            return time_ns

        def conv(v: Any) -> int | None:
            ns = time_ns(v)
            return None if ns is None else ns + base
        return conv

    def on_metadata(self, ev: Event, args: dict[str, Any]) -> bool:
        """A metadata event the generic reader does not know; True if the dialect used it."""
        return False

    def on_instant(self, ev: Event, ts: int, pid: Any, tid: Any) -> None:
        """Called for every instant event after it was added."""

    # whether ``b``/``e`` (async begin/end) nest per thread, as ``B``/``E`` do (MXNet), or on a track
    # of their id (Perfetto's reading)
    async_on_threads = False

    def finish(self) -> None:
        """Last step: extra tracks, names."""

    def _bad_utf8(self, n: int) -> None:
        self.warn(WarningCode.CLAMPED_VALUE, BAD_UTF8, n)

    def streamable(self) -> bool:
        """Whether this dialect can read a large file chunk by chunk (its ``time_base`` works from the
        first chunk and it does not override :meth:`on_events`)."""
        return type(self).on_events is ChromeReader.on_events and self.time_base_from_first_chunk

    time_base_from_first_chunk = True

    @property
    def _plain_times(self) -> bool:
        """Whether ts/dur are read as plain µs (no dialect reads them its own way)."""
        return type(self).ts_converter is ChromeReader.ts_converter

    def scanned_times(self, cols: Rows, n: int) -> bool:
        """The scanner's rows ``0..n-1`` before they are taken: a dialect that reads times its own way
        (:meth:`ts_converter`) may put their ``ts`` on its clock here, in place (``cols.ts``: exact
        ns, before the base, where a row's flags have ``F_TS`` and not ``SLOW``; the other rows are
        decoded and go through :meth:`ts_converter`), and return True.  False sends every row
        through the general decoder: the default for such a dialect."""
        return self._plain_times

    def _shift(self, delta: int) -> None:
        """Move every time in the model by ``delta`` ns (the time base was judged again)."""
        t = self.trace
        for col in (t.slices.ts, t.instants.ts, t.counters.ts):
            if len(col):
                a = np.frombuffer(col, np.int64)
                a += delta

    def _begin(self, doc: Document) -> None:
        """The header's keys read and the time base judged (from the document's first events,
        on the paths that scan it)."""
        if is_own_output(doc.header):
            self._own = True
            # traceconv's own Chrome JSON (written by the generic writer): read back generically,
            # whatever dialect was asked for, so that times and tracks come back as they were
            ChromeReader.on_header(self, doc.header, doc)
            ChromeReader.time_base(self, doc.header, doc.events)
            # (and none of the dialect's finishing: _finish_events skips finish())
        else:
            self.on_header(doc.header, doc)
            self.time_base(doc.header, doc.events)
        self._check_base()

    def _check_base(self) -> None:
        """A time base (a header's baseTimeNanoseconds, MegEngine's localTime) outside the model's
        time domain is not used: the times stay relative (counted)."""
        if not 0 <= self.base_ns <= MAX_TIME_NS:
            self.warn(WarningCode.CLAMPED_VALUE, f"the file's time base ({self.base_ns} ns) is outside "
                      f"0..{MAX_TIME_NS} ns: not used, times are relative to the profile's start", 1)
            self.base_ns = 0
            self.trace.meta.clock = Clock.RELATIVE

    def _decode_rows(self, buf: bytes, cols: Rows | None, rows: np.ndarray) -> list[Event]:
        """The events of the given rows, decoded from their own text by msgspec."""
        if cols is None or not len(rows):
            return []
        start, end = cols.start, cols.end
        piece = b"[" + b",".join(buf[start[r]:end[r]] for r in rows.tolist()) + b"]"
        try:
            events = _EVENTS.decode(piece)
            if _has_inexact_times(events):
                events = _EXACT_EVENTS.decode(piece)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise _ChunkFailure from None
        return events

    def _string_ids(self, new: list[str], table: int) -> np.ndarray:
        """The model's string id of every string of a scanner table, given the strings the scanner
        added to it since the last call (in id order; for table 0, the sample's first)."""
        if table == 0 and self._pending_strings:
            new = self._pending_strings + new
            self._pending_strings = []
        if new:
            intern = self.trace.strings.intern
            self._smaps[table] = np.concatenate([self._smaps[table], np.array([intern(x) for x in new], np.int32)])
        return self._smaps[table]

    def _take_instants(self, k: dict[str, Any]) -> None:
        """The instants of a batch (:func:`SCAN.split`'s ``i_`` part): on the thread, the process
        (``s: "p"``) or the global track (``s: "g"``), as :meth:`_instant` puts them."""
        ts, pid, scope = k["i_ts"], k["i_pid"], k["i_letter"]
        tracks = self._tracks_of(pid, k["i_tid"])
        for j in np.flatnonzero(scope == ord("g")).tolist():
            tracks[j] = self.global_track()
        for j in np.flatnonzero(scope == ord("p")).tolist():
            tracks[j] = self.trace.process_track(self.trace.process(int(pid[j]))).id
        t = self.trace.instants
        t.ts.frombytes(_raw(ts))
        t.track.frombytes(_raw(tracks))
        t.name.frombytes(_raw(k["i_name"]))
        t.cat.frombytes(_raw(k["i_cat"]))
        lens = k["i_lens"]
        t.args.extend_packed(k["i_args"], lens)
        self.used["instant"] += len(ts)
        self.on_instants(k["i_name"], ts, pid, k["i_args"], lens)

    def _take_counters(self, k: dict[str, Any]) -> None:
        """The counters of a batch (:func:`SCAN.split`'s ``c_`` part: a sample per member of each
        event's args), on the tracks :meth:`_counter` puts them on."""
        if k["c_new"]:
            strings = self.trace.strings
            made = []
            for pid, name_id, key in k["c_new"]:
                name = strings[name_id]
                made.append(self.counter_track(pid, name if key == "value" or key == name else f"{name} {key}"))
            self._counter_track = np.concatenate([self._counter_track, np.array(made, np.int32)])
        c = self.trace.counters
        c.ts.frombytes(_raw(k["c_ts"]))
        c.track.frombytes(_raw(self._counter_track[k["c_ids"]]))
        c.value.frombytes(_raw(k["c_value"]))
        self.used["counter"] += len(k["c_rows"])

    def on_instants(self, names: np.ndarray, ts: np.ndarray, pid: np.ndarray, args: Any, lens: np.ndarray) -> None:
        """Like :meth:`on_instant`, for a batch of instants read by the scanner, the last
        ``len(names)`` of the model's (string ids of their names, ns, pids, their args texts back to
        back in one buffer and each one's length)."""

    def _tracks_of(self, pid: np.ndarray, tid: np.ndarray, big: np.ndarray | None = None) -> np.ndarray:
        """The thread track of each (pid, tid) pair: the pairs seen before are looked up in the
        compiled pair table (:class:`SCAN.Pairs`: one hash lookup per row), the new ones get
        their thread here -- in the order of the pairs sorted as one int64 key ``pid << 32 |
        tid & 0xFFFF_FFFF`` when the batch is within int32, else by (pid, tid) (the order a sort
        of the batch's pairs gave them before the table; thread ids follow it)."""
        if self._pairs is None:
            self._pairs = SCAN.Pairs()
        ids, new = self._pairs.ids(pid, tid, big)
        if new:
            lim = 1 << 31
            if -lim <= pid.min() and pid.max() < lim and -lim <= tid.min() and tid.max() < lim:
                key = (lambda pt: (pt[0] << 32) | (pt[1] & 0xFFFF_FFFF))
            else:
                key = None
            thread = self.thread
            made = {pt: thread(*pt).track for pt in sorted(new, key=key)}
            self._pair_track = np.concatenate([self._pair_track, np.array([made[pt] for pt in new], np.int32)])
        return self._pair_track[ids]

    def _take_rows(self, buf: bytes, cols: Rows, new_strings: list[str], n: int,
                   seq0: int, table: int) -> None:
        """Rows ``0..n-1`` of the scanner's output, numbered from ``seq0`` in the file: complete
        events of the plain shape, flow points, instants, begins and ends, counters in bulk (sorted out
        and gathered in one pass by :func:`SCAN.split`), the rest through :meth:`_convert_events`."""
        smap = self._string_ids(new_strings, table)
        if seq0 <= self.header_event < seq0 + n:
            cols.flags[self.header_event - seq0] |= SCAN.SLOW      # (left to _convert_events)
        if not self.scanned_times(cols, n):
            # a dialect reads times its own way: every row through the general decoder
            rest = np.arange(n)
            self._convert_events(self._decode_rows(buf, cols, rest), seq0, (rest + seq0).tolist())
            return
        if self._counters is None:
            self._counters = SCAN.Counters()
        k = SCAN.split(cols.flags, cols.ph, cols.name, cols.cat, cols.ts, cols.dur, cols.pid, cols.tid,
                       cols.id, cols.s, cols.bp, cols.bind, cols.flow, cols.args, cols.args_off, smap, self.base_ns,
                       self.missing_tid == "zero", self._counters, self.async_on_threads)
        rows = k["x_rows"]
        if len(rows):
            tracks = self._tracks_of(k["x_pid"], k["x_tid"], k["x_big"])
            s = self.trace.slices
            s.depth = None
            s.ts.frombytes(_raw(k["x_ts"]))
            s.dur.frombytes(_raw(k["x_val"]))
            s.track.frombytes(_raw(tracks))
            s.name.frombytes(_raw(k["x_name"]))
            s.cat.frombytes(_raw(k["x_cat"]))
            s.args.extend_packed(k["x_args"], k["x_lens"])
            self._bseq.frombytes(_raw((rows + seq0).astype(np.int32)))
            self._eseq.frombytes(_raw(np.full(len(rows), -1, np.int32)))
            self.used["X"] += len(rows)
            flow = k["x_flow"]
            bound = np.flatnonzero(flow & 4)
            if len(bound):          # v2 flows: (bind_id, slice, flow_in, flow_out, ts), as _convert_events
                first = len(s.ts) - len(rows)
                self._flows.binds.extend(zip(k["x_bind"][bound].tolist(), (bound + first).tolist(),
                                             (flow[bound] & 1 != 0).tolist(), (flow[bound] & 2 != 0).tolist(),
                                             k["x_ts"][bound].tolist()))
        # flow events (s/t/f) with an integer id: straight into their flow's list
        frows = k["f_rows"]
        if len(frows):
            tracks = self._tracks_of(k["f_pid"], k["f_tid"], k["f_big"])
            self._flows.rows.append((k["f_cat"], k["f_name"], k["f_val"], k["f_ts"], frows + seq0, k["f_letter"],
                                  tracks, k["f_bp_e"]))
        # instants (i/I/R) without an id: straight into the instants table
        if len(k["i_rows"]):
            self._take_instants(k)
        # begins and ends (B/E): onto their threads' stacks, paired once every event is read
        if len(k["b_rows"]):
            ends = (k["b_letter"] == ord("E")) | (k["b_letter"] == ord("e"))
            self._stacks.add_rows(k["b_ts"], k["b_rows"] + seq0, ends, k["b_pid"], k["b_tid"], k["b_big"],
                                  k["b_name"], k["b_cat"], k["b_args"], k["b_lens"], k["b_has_args"],
                                  k["b_bind"], k["b_flow"])
        if len(k["c_rows"]):
            self._take_counters(k)
        top = max(k["x_top"], k["f_top"], k["i_top"], k["b_top"], k["c_top"])
        if top > self._acc_max_ts:
            self._acc_max_ts = top
        rest = k["rest"]
        del k
        if len(rest):
            self._convert_events(self._decode_rows(buf, cols, rest), seq0, (rest + seq0).tolist())

    # ---- places ---------------------------------------------------------------------------

    def thread(self, pid: Any, tid: Any) -> Thread:
        key = (pid, tid)
        th = self._threads.get(key)
        if th is None:
            p = self.trace.process(pid)
            if self._own and isinstance(tid, int) and tid >= OWN_SYNTHETIC_TID:
                # traceconv's writer turns lanes and async tracks into threads numbered from 2e9:
                # they come back as tracks, not threads
                th = _TrackRef(self.trace.new_track(TrackKind.ASYNC, "", p).id)   # type: ignore[assignment]
            else:
                th = self.trace.thread(p, tid)
            self._threads[key] = th
        return th

    def global_track(self) -> int:
        if self._global_track is None:
            self._global_track = self.trace.track(TrackKind.ASYNC, "Global instants").id
        return self._global_track

    def drop(self, code: WarningCode, msg: str, n: int = 1) -> None:
        self.warn(code, msg, n)
        self.dropped += n

    # ---- the event loop -------------------------------------------------------------------

    def on_events(self, events: list[Event]) -> None:
        """Turn every event of a whole document (one list) into the model, then resolve what needs
        all of them.  A hook: a dialect that overrides it is read as a whole document, never
        streamed (:meth:`streamable`)."""
        self._convert_events(events, 0)
        self._finish_events()

    def _convert_events(self, events: list[Event], seq0: int, seqs: list[int] | None = None) -> None:
        """Convert events numbered from ``seq0`` (the file order), or numbered ``seqs``."""
        trace = self.trace
        conv = self.ts_converter()
        thread = self.thread
        threads = self._threads
        slices = trace.slices
        slices.depth = None
        s_ts, s_dur, s_track = slices.ts.append, slices.dur.append, slices.track.append
        s_name, s_cat, s_args = slices.name.append, slices.cat.append, slices.args.append
        intern = trace.strings.intern
        string_ids = trace.strings._ids      # read-only fast path of intern(); intern() adds new ones
        n_x = 0
        bseq = self._bseq.append
        eseq = self._eseq.append
        used = self.used
        missing_tid_zero = self.missing_tid == "zero"
        ts_zero = self.missing_ts_zero
        dur_zero = self.missing_dur_zero
        max_ts = self._acc_max_ts
        changed_args = 0
        stacks = self._stacks
        exact = bool(events) and type(events[0]) is ExactEvent
        # the common case inlined (time_ns + the base): no dialect changes how times are read
        plain = type(self).ts_converter is ChromeReader.ts_converter and not exact
        base = self.base_ns
        lim = EXACT_FLOAT_US
        floor = math.floor
        header_event = self.header_event
        for seq, ev in (zip(seqs, events) if seqs is not None else enumerate(events, seq0)):
            if seq == header_event:
                used["metadata"] += 1
                continue
            ph = ev.ph
            t = ev.ts
            if plain and type(t) is float and -lim < t < lim:
                w = floor(t)
                ts = w * 1000 + round((t - w) * 1000) + base
            elif plain and type(t) is int and -MAX_US < t < MAX_US:
                ts = t * 1000 + base
            elif t is not None and (not exact or len(t)):
                ts = conv(t)
                if ts is None:
                    if ph != "M":
                        self.drop(WarningCode.DROPPED_EVENT, "events whose 'ts' is not a number (or is out "
                                  "of range) were dropped")
                        continue
                    ts = 0
            elif ts_zero:
                ts = conv(0)
            elif ph == "M":
                ts = 0
            else:
                self.drop(WarningCode.DROPPED_EVENT, "events without 'ts' were dropped (as Perfetto does)")
                continue
            pid = ev.pid
            if pid is None:
                pid = 0
            elif type(pid) is float:
                pid = norm_id(pid)
            tid = ev.tid
            if tid is None:
                tid = 0 if missing_tid_zero else pid
            elif type(tid) is float:
                tid = norm_id(tid)

            if ph == "X":
                d = ev.dur
                if d is not None and (not exact or len(d)):
                    dur = time_ns(d)
                elif dur_zero:
                    dur = 0
                else:
                    self.drop(WarningCode.DROPPED_EVENT, "X events without 'dur' were dropped (as Perfetto does)")
                    continue
                if dur is None or dur < 0:
                    if dur is None:
                        self.drop(WarningCode.DROPPED_EVENT, "X events whose 'dur' is not a number (or is out "
                                  "of range) were dropped")
                        continue
                    self.warn(WarningCode.CLAMPED_VALUE, "X events with a negative 'dur' were given 0")
                    dur = 0
                # compact_args and trace.add_slice, inlined: this is the hot path
                a = ev.args
                if len(a):
                    args = bytes(a)
                    if args[:1] != b"{" or _risky(args):
                        args, ch = compact_args(args)
                        changed_args += ch
                    elif b"\n" in args:
                        args = _NEWLINE_INDENT.sub(b"", args)
                    if args == b"{}":
                        args = None
                else:
                    args = None
                th = threads.get((pid, tid))
                if th is None:
                    th = thread(pid, tid)
                s_ts(ts)
                s_dur(dur)
                s_track(th.track)
                nm = ev.name
                sid = string_ids.get(nm) if nm else 0
                s_name(sid if sid is not None else intern(nm))
                nm = ev.cat
                sid = string_ids.get(nm) if nm else 0
                s_cat(sid if sid is not None else intern(nm))
                s_args(args)
                bseq(seq)
                eseq(-1)
                if ev.bind_id is not None:
                    self._flows.binds.append((flow_id(ev.bind_id), len(slices.ts) - 1, ev.flow_in, ev.flow_out, ts))
                n_x += 1
                end = ts + dur
                if end > max_ts:
                    max_ts = end
                continue
            if ts > max_ts:
                max_ts = ts
            if ph == "B" or ph == "E":
                stacks.add(ts, seq, ph == "E", ("t", pid, tid), ev.name, ev.cat, ev.args, _bind(ev))
            elif ph == "i" or ph == "I" or ph == "R" or (ph == "n" and ev.id is None and not ev.id2):
                self._instant(ev, ts, pid, tid)
            elif ph == "C":
                self._counter(ev, ts, pid)
            elif ph == "M":
                self._metadata(ev, pid, tid)
            elif ph == "s" or ph == "t" or ph == "f":
                key = (ev.cat or "", ev.name or "", flow_id(ev.id))
                if ev.id is None:
                    self.drop(WarningCode.UNRESOLVED_FLOW, "flow events without an 'id' were dropped")
                    continue
                self._flows.v1[key].append((ts, seq, ph, thread(pid, tid).track, ev.bp == "e"))
            elif ph in ("b", "e", "n", "S", "F", "T", "p"):
                self._async_event(ev, ts, pid, tid, seq)
            elif ph == "(" or ph == ")":
                self._frame_event(ev, ts, pid, tid, seq)
            else:
                shown = repr(clip(ph)) if ph else "(none)"
                self.drop(WarningCode.UNKNOWN_PHASE, f"events of a phase traceconv does not know were dropped "
                          f"(ph {shown})")
        used["X"] += n_x
        if changed_args:
            self.warn(WarningCode.CLAMPED_VALUE, "args that were not a JSON object, or held values no viewer "
                      "can hold (infinite numbers, lone surrogates), were kept in a changed form (wrapped in "
                      "'args', or as text)", changed_args)
        self._acc_max_ts = max_ts

    def _finish_events(self) -> None:
        max_ts = self._acc_max_ts
        self.max_ts = max_ts if max_ts > -(2**63) else None
        self._match_begins()
        self.dropped += self._flows.resolve(self.trace, self._bseq, self._eseq, self.warn, self.used)
        self.names.apply(self.trace, self._threads, self.warn)
        if not self._own:
            self.finish()           # a dialect's last step; traceconv's own output needs none
        else:
            self._fold_lanes(self._own_meta.get("lanes"))
        self.trace.restore_marks(self._own_meta)
        name_remapped(self.trace)

    def _fold_lanes(self, lanes: Any) -> None:
        """traceconv's writer puts overlap lanes on threads of their own, ``[pid, lane's tid, its
        track's tid]`` in its metadata: their slices go back onto their track's (as the .pftrace
        reader does), for :func:`~traceconv.model.layout.nest` to lay out as they were.  An entry
        that names no such pair of tracks is counted, not used."""
        if not isinstance(lanes, list):
            return
        into: dict[int, int] = {}
        bad = 0
        for e in lanes:
            ok = isinstance(e, list) and len(e) == 3 and all(type(x) is int for x in e)
            lane = self._threads.get((e[0], e[1])) if ok else None
            base = self._threads.get((e[0], e[2])) if ok else None
            if isinstance(lane, _TrackRef) and base is not None and base is not lane and lane.track not in into:
                into[lane.track] = base.track
            else:
                bad += 1
        for k in list(into):
            if into[k] in into:                 # (a lane of a lane: not what traceconv writes)
                del into[k]
                bad += 1
        self.trace.fold_tracks(into)            # (the last step on tracks: the ids in _threads are stale)
        if bad:
            self.warn(WarningCode.NOTE, "entries of traceconv's metadata that name no process or thread of the "
                      "trace were not used (overlap lanes)", bad)

    # ---- instants, counters, metadata ----------------------------------------------------

    def _instant(self, ev: Event, ts: int, pid: Any, tid: Any) -> None:
        scope = ev.s or "t"
        if scope == "g":
            track = self.global_track()
        elif scope == "p":
            track = self.trace.process_track(self.trace.process(pid)).id
        else:
            track = self.thread(pid, tid).track
        args, ch = compact_args(ev.args)
        if ch:
            self.warn(WarningCode.CLAMPED_VALUE, "instant args that were not a JSON object were wrapped in 'args'")
        self.trace.add_instant(track, ts, ev.name or "", ev.cat, args)
        self.used["instant"] += 1
        self.on_instant(ev, ts, pid, tid)

    def counter_track(self, pid: Any, name: str, unit: str | None = None) -> int:
        key = (pid, name)
        t = self._counter_tracks.get(key)
        if t is None:
            p = self.trace.process(pid)
            t = self.trace.track(TrackKind.COUNTER, name, p, unit=unit or self.counter_unit(name)).id
            self._counter_tracks[key] = t
        return t

    def counter_unit(self, name: str) -> str | None:
        return None

    def _counter(self, ev: Event, ts: int, pid: Any) -> None:
        try:
            args = orjson.loads(memoryview(ev.args)) if len(ev.args) else None
        except orjson.JSONDecodeError:
            args = None
        if not isinstance(args, dict) or not args:
            self.drop(WarningCode.DROPPED_EVENT, "counter events without values in 'args' were dropped")
            return
        name = ev.name or ""
        prefix = f"{name} id: {ev.id}" if ev.id is not None else name
        kept = 0
        for k, v in args.items():
            x = number(v)
            if x is None:
                self.warn(WarningCode.DROPPED_EVENT, "counter values that are not numbers were dropped")
                continue
            tname = prefix if (k == "value" or k == name) else f"{prefix} {k}"
            self.trace.add_counter(self.counter_track(pid, tname), ts, x)
            kept += 1
        if kept:
            self.used["counter"] += 1
        else:
            self.dropped += 1

    def _metadata(self, ev: Event, pid: Any, tid: Any) -> None:
        # (msgspec, not orjson: orjson reads an integer past 64 bits as a double; such a number
        # becomes its text, as on the whole-document path, and is counted)
        try:
            args = msgspec.json.decode(ev.args) if len(ev.args) else {}
        except msgspec.DecodeError:
            args = {}
        if not isinstance(args, dict):
            args = {}
        fixed = [0]
        args = _jsonable(args, fixed)
        self.warn(WarningCode.CLAMPED_VALUE, FIXED_VALUES, fixed[0])      # (a count of 0 says nothing)
        if self.on_metadata(ev, args) or self.names.take(ev.name, args, pid, tid):
            self.used["metadata"] += 1
            return
        self.drop(WarningCode.DROPPED_EVENT, f"metadata events that viewers ignore were dropped "
                  f"({clip(ev.name) if ev.name else 'unnamed'})")

    # ---- B/E, async, frames ---------------------------------------------------------------

    def _async_event(self, ev: Event, ts: int, pid: Any, tid: Any, seq: int) -> None:
        ph = ev.ph
        if ph in ("b", "e") and self.async_on_threads:
            self._stacks.add(ts, seq, ph == "e", ("t", pid, tid), ev.name, ev.cat, ev.args, _bind(ev))
            return
        if ev.id is not None:
            scope: Any = pid
            ident = flow_id(ev.id)
        elif len(ev.id2):
            try:
                id2 = orjson.loads(memoryview(ev.id2))
            except orjson.JSONDecodeError:
                id2 = {}
            if isinstance(id2, dict) and "global" in id2:
                scope, ident = None, ("global", flow_id(id2["global"]))
            elif isinstance(id2, dict) and "local" in id2:
                scope, ident = pid, ("local", flow_id(id2["local"]))
            else:
                scope = ident = None
        else:
            scope = ident = None
        if ident is None:
            self.drop(WarningCode.DROPPED_EVENT, f"async events without 'id' or 'id2' were dropped (ph {clip(ph)!r})")
            return
        key = ("a", scope, ev.cat or "", ident)
        if ph in ("b", "S"):
            if key not in self._stack_track:
                p = self.trace.process(pid) if scope is not None else None
                self._stack_track[key] = self.trace.new_track(TrackKind.ASYNC, ev.name or "async", p).id
            self._stacks.add(ts, seq, 0, key, ev.name, ev.cat, ev.args, _bind(ev))
        elif ph in ("e", "F"):
            self._stacks.add(ts, seq, 1, key, ev.name, ev.cat, ev.args)
        else:   # n, T, p: instants on the async track
            if key not in self._stack_track:
                p = self.trace.process(pid) if scope is not None else None
                self._stack_track[key] = self.trace.new_track(TrackKind.ASYNC, ev.name or "async", p).id
            args, _ = compact_args(ev.args)
            self.trace.add_instant(self._stack_track[key], ts, ev.name or "", ev.cat, args)
            self.used["instant"] += 1

    def frame_track(self, ev: Event, pid: Any, tid: Any) -> int:
        """Where ``(``/``)`` frames go: a track of their own under the process."""
        p = self.trace.process(pid)
        return self.trace.track(TrackKind.ASYNC, "frames", p).id

    def _frame_event(self, ev: Event, ts: int, pid: Any, tid: Any, seq: int) -> None:
        track = self.frame_track(ev, pid, tid)
        key = ("f", track)
        self._stack_track[key] = track
        self._stacks.add(ts, seq, ev.ph == ")", key, ev.name, ev.cat, ev.args, _bind(ev))

    def _stack_target(self, key: Any) -> int:
        if key[0] == "t":
            return self.thread(key[1], key[2]).track
        return self._stack_track[key]

    def _match_begins(self) -> None:
        """The slices the begins and ends make (:mod:`.stacks`), added to the model in bulk."""
        st = self._stacks
        if not len(st):
            return
        end = self.max_ts if self.max_ts is not None else 0
        m = st.match(end, _NEVER)
        begin, ended = m["begin"], m["end"]
        if len(begin):
            # each stack's track, made in the order the slices close (a thread has its track
            # made by its first slice, as before)
            keys = np.frombuffer(st.key, np.int32)[begin]
            used, first = np.unique(keys, return_index=True)
            by_key = {k: key for key, k in st.keys.items()}
            track = np.zeros(len(st.keys), np.int32)
            for k in used[np.argsort(first, kind="stable")].tolist():
                track[k] = self._stack_target(by_key[k])
            args, changed = st.slice_args(begin, ended)
            name, cat = st.names(begin)
            ts = np.frombuffer(st.ts, np.int64)[begin]
            s = self.trace.slices
            s.depth = s.parent = None
            first_slice = len(s.ts)
            s.ts.frombytes(ts.tobytes())
            s.dur.frombytes((m["end_ts"] - ts).tobytes())
            s.track.frombytes(track[keys].tobytes())
            s.name.frombytes(name.astype(np.int32).tobytes())
            s.cat.frombytes(cat.astype(np.int32).tobytes())
            s.args.extend(args)
            self._bseq.frombytes(np.frombuffer(st.seq, np.int64)[begin].astype(np.int32).tobytes())
            self._eseq.frombytes(m["end_seq"].astype(np.int32).tobytes())
            if st.binds:
                for j in np.flatnonzero(np.isin(begin, list(st.binds))).tolist():
                    b = st.binds[int(begin[j])]
                    self._flows.binds.append((b[0], first_slice + j, b[1], b[2], int(ts[j])))
            self.used["slice from begin/end"] += len(begin) + int(np.count_nonzero(ended >= 0))
        else:
            changed = np.zeros(0, bool)
        # the warnings in the order they were first given when each pair was closed in turn
        left = m["left_open"]
        wrapped = int(np.count_nonzero(changed[:len(changed) - left]))
        if wrapped:
            self.warn(WarningCode.CLAMPED_VALUE, WRAPPED_SLICE_ARGS, wrapped)
        if m["unmatched_end"]:
            self.drop(WarningCode.UNMATCHED_END, "end events (E) with no open begin on their thread were "
                      "dropped" + self.unmatched_end_note, m["unmatched_end"])
        if m["cut_short"]:
            self.warn(WarningCode.UNMATCHED_BEGIN, "begins still open when an enclosing slice ended were ended "
                      "with it (as Perfetto does)", m["cut_short"])
        wrapped = int(np.count_nonzero(changed[len(changed) - left:])) if left else 0
        if wrapped:
            self.warn(WarningCode.CLAMPED_VALUE, WRAPPED_SLICE_ARGS, wrapped)
        if left:
            self.warn(WarningCode.UNMATCHED_BEGIN, "begin events (B) never ended were ended at the end of the "
                      "trace" + self.unmatched_begin_note, left)
        self._stacks = Stacks(self.trace, compact_args)


def _bind(ev: Event) -> tuple | None:
    """A begin's flow binding (v2 flows: ``bind_id``, ``flow_in``, ``flow_out``), if it has one."""
    return (flow_id(ev.bind_id), ev.flow_in, ev.flow_out) if ev.bind_id is not None else None


def timed_ns(events: list[Event]) -> Iterator[int]:
    """The ts, in ns, of every event that has one (metadata events left out)."""
    for ev in events:
        if ev.ph == "M" or ev.ts is None:
            continue
        v = time_ns(ev.ts)
        if v is not None:
            yield v


def looks_unix(events: list[Event], sample: int = 2000) -> bool:
    """Whether the timestamps look like absolute Unix µs (checks the first events that have one)."""
    seen = 0
    for v in timed_ns(events):
        if not (UNIX_US_MIN * 1000 <= v <= UNIX_US_MAX * 1000):
            return False
        seen += 1
        if seen >= sample:
            break
    return seen > 0


_OWN_HEAD = re.compile(rb'\{"traceEvents":\[\n(\{"ph":"[MXiC]","|\n?\])')


def looks_like_own_output(head: bytes) -> bool:
    """traceconv's writer starts every file with ``{"traceEvents":[`` and a compact ``{"ph":`` event;
    dialect sniffers leave such files to the generic reader."""
    return _OWN_HEAD.match(head) is not None


# ---------------------------------------------------------------- the generic format

_PH = re.compile(rb'"ph"\s*:\s*"')


def sniff(head: bytes) -> bool:
    """Any Trace Event JSON: an object with ``traceEvents``, or an array of objects with ``ph``."""
    h = head.lstrip()
    if h[:1] == b"{":
        return re.search(rb'"traceEvents"\s*:\s*\[', h) is not None
    if h[:1] == b"[":
        return re.match(rb"\[\s*(\{|\]|$)", h) is not None and (_PH.search(h) is not None or len(h) < 8)
    return False


def read(source: Source) -> Trace:
    return ChromeReader(source).read()
