"""How the Chrome reader gets its events: the three read paths of :class:`ReadPaths`, which
:class:`~.reader.ChromeReader` (and so every dialect) inherits.

* the stream (:meth:`ReadPaths._read_stream`): a file read a block at a time (through gzip too),
  its events scanned into columns by the compiled scanner on threads of their own
  (:mod:`.stream`) while this thread turns them into the model; the whole text never exists at
  once.  The path of every file a dialect can read so (:meth:`~.reader.ChromeReader.streamable`);
* in memory (:meth:`ReadPaths._read_chunked`): the same scan over a text already read (bytes
  given to the reader, or a document the stream could not take: traceconv's own output known
  too late);
* the whole document (:meth:`ReadPaths._read`'s end): decoded at once by :func:`.document.decode`,
  which repairs what it can (trailing commas, a truncated array, invalid escapes) and counts it:
  the reference the other two are tested against, and where they fall back to.

A path that cannot go on starts the read over on the next one, with a fresh reader of the same
dialect (:meth:`ReadPaths._again`), never by running ``__init__`` again.  Either way the events
reach the reader's hooks in file order: the header through ``_begin``, scanned rows through
``_take_rows``, decoded events through ``on_events``; the reader's state is its own."""

from __future__ import annotations

import gc
import itertools
from typing import Any, Iterator

import msgspec
import numpy as np

from ... import memory
from ...errors import WarningCode
from ...io import GZIP_ERRORS
from ...model import Trace
from ...progress import report
from .document import _TOP, Document, Event, _header_value, decode, is_own_output
from .stream import (SCAN, SCAN_THREADS, BlockScanner, Rows, _ChunkFailure, _head_events, _LateHeader, _parse_tail,
                     _Prefetch, _read_blocks, _scan, _tail_guess, _utf8_blocks, repair_utf8)

CHUNK_BYTES = 1 << 20       # the event array's text is read and scanned this much at a time
TRIM_BATCHES = 512          # the heap's free space goes back to the system every this many batches
                            # (a block and the event cut before it are two: every 256 blocks); the
                            # space given back is faulted in again page by page as the next batches
                            # take it: every 32 blocks, the 1M conversion took ~0.05 s more (CPU
                            # ~0.08 s), for a peak ~9 MB lower (docs/design.md, "Thirty-first day")
FAST = True                 # False: read every file with the whole-document decoder (the reference)


class Rejudge(Exception):
    """A dialect's judgement from the file's first events (its time base) proved wrong once every
    event was read: the read starts over, the fresh reader told what the whole file said
    (``told``: attributes set on it before it reads)."""

    def __init__(self, **told: Any) -> None:
        super().__init__()
        self.told = told


class ReadPaths:
    """The read paths of :class:`~.reader.ChromeReader` (see the module's text).  What they ask of
    the reader: ``source``, ``data``, ``what`` and ``warn``; ``streamable()``; ``_begin(doc)``
    (the header), ``_take_rows`` and ``_decode_rows`` (scanned rows), ``on_events`` (decoded
    events), ``_finish_events()`` and ``_shift(delta)`` (a time base judged again at the end);
    they count into its ``trace``, ``n_events`` and ``dropped``.  What the scan leaves for the
    reader (``_first``, ``_smaps``, ``_pending_strings``, ``_progress``) is named where it is set."""

    def read(self) -> Trace:
        try:
            return self._read()
        except RecursionError:
            # a value nested too deep for a decoder the fast paths use: read it again on the
            # whole-document path, which first makes such values strings (see decode)
            return self._again(self.data, whole=True)
        except Rejudge as e:
            # (at most once: the fresh reader is told what the whole file said)
            return self._again(self.data, told=e.told)

    _whole = False          # True: the whole-document path only
    _no_stream = False      # True: not the stream (the text is scanned in memory)
    _told: dict[str, Any] = {}     # what a read started over was told (Rejudge), kept by every later one

    def _again(self, data: bytes | None, whole: bool = False, no_stream: bool = False,
               told: dict[str, Any] | None = None) -> Trace:
        """Start over with a fresh reader of the same dialect (nothing of this one's state kept but
        what it was told): on the whole-document path, scanning the text in memory instead of as a
        stream, or told what a first read learnt (:class:`Rejudge`)."""
        fresh = type(self)(self.source, data)
        fresh._whole = whole
        fresh._no_stream = no_stream
        fresh._told = {**self._told, **(told or {})}
        vars(fresh).update(fresh._told)
        trace = fresh._read()
        vars(self).update(vars(fresh))      # its counts (used, dropped, n_events) are this read's
        return trace

    def _read(self) -> Trace:
        scan_in_memory = FAST and self.streamable() and not self._whole
        if scan_in_memory and self.data is None and self.source is not None and not self._no_stream:
            try:
                return self._read_stream()
            except _LateHeader:
                # traceconv's own output, known too late: scan it again, in memory, keys first
                return self._again(None, no_stream=True)
            except _ChunkFailure:
                # text the scanner cannot read (truncated, not JSON): the whole-document path
                # repairs what it can; scanning it again in memory would fail the same way
                return self._again(None, whole=True)
        data = self.data if self.data is not None else self.source.read_bytes()  # type: ignore[union-attr]
        data, bad = repair_utf8(data)
        self._bad_utf8(bad)
        if scan_in_memory:
            try:
                return self._read_chunked(data)
            except _ChunkFailure:
                # a document the fast path cannot cut: start over on the whole-document path
                return self._again(data, whole=True)
        doc = decode(data, self.what)
        del data
        self.data = None
        for code, msg, n in doc.problems:
            self.warn(code, msg, n)
            if code is WarningCode.DROPPED_EVENT:
                self.dropped += n
                self.n_events += n
        self._begin(doc)
        # Millions of small objects and no cycles: the cyclic GC would only rescan them.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            self.on_events(doc.events)
        finally:
            if was_enabled:
                gc.enable()
        self.n_events += len(doc.events)
        return self.trace

    def _read_chunked(self, data: bytes) -> Trace:
        """Read the events with the compiled scanner (:data:`SCAN`), a block of
        ``CHUNK_BYTES`` of text at a time: plain complete events become slice rows in bulk, every
        other event is decoded from its own text by the general decoder and converted one by one."""
        at = SCAN.skip_ws(data, 0)
        start = data[at:at + 1]          # (not data.lstrip(): a copy of the whole text if it starts blank)
        try:
            if start == b"[":
                header: dict[str, Any] = {}
                text = memoryview(data)
            elif start == b"{":
                top = _TOP.decode(data)
                raw = top.pop("traceEvents", None)
                if raw is None:
                    raise _ChunkFailure
                header = {k: _header_value(v) for k, v in top.items()}
                text = memoryview(raw)
            else:
                raise _ChunkFailure
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise _ChunkFailure from None
        i = 0
        while i < len(text) and text[i] in b" \t\r\n":
            i += 1
        if bytes(text[i:i + 1]) != b"[":
            raise _ChunkFailure
        blocks = (text[k:k + CHUNK_BYTES] for k in range(i + 1, len(text), CHUNK_BYTES))
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._scan_blocks(header, start == b"[", blocks)
            rest = (self._tail or b"") + b"".join(bytes(b) for b in blocks)
            if rest.strip():
                raise _ChunkFailure              # text after the array's end
            self._first = []
            self._finish_events()
        finally:
            if was_enabled:
                gc.enable()
        return self.trace

    def _read_stream(self) -> Trace:
        """Read the file as a stream, ``CHUNK_BYTES`` at a time (through gzip too): the whole text
        never exists at once.  The top-level keys before ``traceEvents`` are read first; those after
        it (Kineto writes ``baseTimeNanoseconds`` there) are guessed from the file's last bytes
        when it can be read backwards, and checked when the stream gets there: if they differ from
        the guess, the time base is judged again and every time moved by the difference."""
        src = self.source
        assert src is not None
        try:
            f = src.open()
        except OSError:
            raise _ChunkFailure from None
        try:
            with f:
                size = src.size()
                memory.stream_start(CHUNK_BYTES, size * (memory.GZIP_TEXT if src.gzipped else 1))
                raw = getattr(f, "fileobj", None) or f
                self._progress = ([0], size, f"reading {src.path.name} (MB)")
                blocks = _Prefetch(_utf8_blocks(_read_blocks(f, CHUNK_BYTES, raw, self._progress[0]),
                                                self._bad_utf8))
                try:
                    head, found = _head_events(blocks)
                    if found is None:
                        raise _ChunkFailure
                    header, is_array, pos = found
                    guess = {} if is_array or src.gzipped else _tail_guess(src)
                    self._tail: bytes | None = None
                    self._first: list[Event] = []
                    was_enabled = gc.isenabled()
                    gc.disable()
                    try:
                        stream = itertools.chain([head[pos:]], blocks)
                        del head                           # only the stream holds text now, a block at a time
                        self._scan_blocks({**header, **guess}, is_array, stream)
                        # what follows the array (joined once: `+=` copied it for every block)
                        tail = b"".join([self._tail or b"", *blocks])
                        full = {**header, **_parse_tail(tail, is_array)}
                        delta = 0
                        if full != {**header, **guess}:
                            if is_own_output(full) != self._own:
                                raise _LateHeader
                            before = self.base_ns
                            self._begin(Document(full, self._first, is_array))
                            delta = self.base_ns - before
                        self._first = []
                        blocks.close()
                        memory.stream_end()        # the stream's buffers, before linking flows
                        self._finish_events()
                        if delta:
                            self._shift(delta)
                    finally:
                        if was_enabled:
                            gc.enable()
                finally:
                    blocks.close()               # before the file closes under the reading thread
        except GZIP_ERRORS:
            raise _ChunkFailure from None
        finally:
            memory.stream_end()
        return self.trace

    def _scan_blocks(self, header: dict[str, Any], is_array: bool, blocks: Iterator[Any]) -> None:
        """Scan the events of the array's text, given as consecutive blocks after its ``[``."""
        strings = SCAN.Strings()
        blocks = iter(blocks)
        # the time base is judged from the first 2000 events (as on the whole-document path):
        # read blocks until they hold that many, or the array ends
        # (the blocks gathered in a bytearray, copied out to scan only when their text has doubled:
        # linear time; `bytes += block` copied the head so far for every block)
        gathered = bytearray()
        head = b""
        status = SCAN.MORE
        sample: Rows | None = None
        n = 0
        # the scanner's strings not yet given model ids, in id order (the sample's, first)
        pending: list[str] = []
        for block in blocks:
            gathered += block
            if len(gathered) < 2 * len(head):
                continue
            head = bytes(gathered)
            sample, n, _, status, new = _scan(head, 0, 2000, strings)
            pending += new
            if status != SCAN.MORE:
                break
        else:
            if len(gathered) != len(head):   # blocks gathered since the last scan
                head = bytes(gathered)
                sample, n, _, status, new = _scan(head, 0, 2000, strings)
                pending += new
        del gathered
        self._first = self._decode_rows(head, sample, np.arange(n)) \
            if status != SCAN.BAD and sample is not None else []
        self._pending_strings = pending
        self._begin(Document(header, self._first, is_array))
        del sample
        # every event of the array (the head's again, then the rest's), scanned by threads of
        # their own (stream.BlockScanner) while this one turns the rows scanned into the model
        scanner = BlockScanner(itertools.chain([head], blocks), strings,
                               SCAN_THREADS if self.source is None or self.source.threads else 1)
        del head
        self._smaps = [np.zeros(0, np.int32) for _ in scanner.tables]      # each table's model string ids
        seq = 0
        batch = 0
        try:
            while True:
                item = scanner.get()
                if item[0] == "rows":
                    for buf, cols, n, new, table in item[1]:
                        self._take_rows(buf, cols, new, n, seq, table)
                        seq += n
                        self.n_events += n
                        batch += 1
                        if not batch % TRIM_BATCHES:
                            memory.trim()       # the batches' small freed blocks: ~40 MB at 1M events
                    if self._progress is not None:
                        where, total, stage = self._progress
                        report(stage, where[0] >> 20, total >> 20)
                    del buf, item, cols
                elif item[0] == "end":
                    self._tail = item[1]
                    break
                else:
                    raise _ChunkFailure           # not JSON, or truncated: the repairing path reads it
        finally:
            scanner.close()
