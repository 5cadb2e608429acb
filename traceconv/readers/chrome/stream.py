"""The block stream of a big Chrome/Kineto document: its text read a block at a time (through
gzip too) in a thread of its own (:class:`_Prefetch`), made valid UTF-8 (:func:`repair_utf8`, a
character cut between blocks moved to the next one), the top-level keys before and after the event
array found (:func:`_find_events`, :func:`_parse_tail`, :func:`_tail_guess`), and the events scanned
into columns by the compiled scanner (:data:`SCAN`, rust/src/scan/) through :func:`_scan`, a block
at a time by threads of their own (:class:`BlockScanner`).  The reader (:mod:`.reader`) drives it
and turns the columns into the model."""

from __future__ import annotations

import os
import queue
import re
import threading
import types
from typing import Any, Callable, Iterator

import msgspec
import orjson
from msgspec import Raw

from ..._native import _core
from ...io import Source
from .document import _TOP, _header_value


SCAN = _core.scan           # the compiled scanner (rust/src/scan/)
Rows = types.SimpleNamespace  # one scan call's columns (see SCAN.scan), by name


def _scan(text: bytes, pos: int, cap: int, strings: Any,
          after: bool = False) -> tuple[Rows, int, int, int, list[str]]:
    """SCAN.scan on ``text[pos:]``, ``after`` an event or not (at the array's start, or at an
    event): (rows, how many, where to go on, status, strings it added).  The scan stops right after
    the last event it read: the next call goes on ``after or how many > 0``."""
    cols, pos, status, new = SCAN.scan(text, pos, cap, strings, after)
    return Rows(**cols), len(cols["flags"]), pos, status, new


_BETWEEN = re.compile(rb"[ \t\r\n]*(?:,[ \t\r\n]*)?")
_NEXT_EVENT = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
GUESS_BYTES = 1 << 16        # how far into a block an event's start is looked for


def _event_at(text: bytes, pos: int) -> int:
    """Where the scanner, going on from ``pos`` between two events, finds the next one: past
    whitespace, a comma and whitespace."""
    m = _BETWEEN.match(text, pos)
    return m.end() if m is not None else pos


def _guess_start(block: bytes) -> int | None:
    """Where an event seems to start in a block cut from the middle of an event array: the ``{``
    after the first ``}``, ``,`` (whitespace between) in its first ``GUESS_BYTES``, or None.  Only
    a guess (the three may be inside a string): the reader checks it before using a scan from it."""
    m = _NEXT_EVENT.search(block, 0, GUESS_BYTES)
    return m.end() - 1 if m is not None else None


class _ChunkFailure(Exception):
    """The chunked path cannot read this document; the whole-document path will."""


class _LateHeader(_ChunkFailure):
    """The keys after the event array say the document is traceconv's own output, which the stream
    had not known (a .gz cannot be read backwards): read it again with every key known first."""


def _read_blocks(f: Any, size: int, raw: Any = None, where: list[int] | None = None) -> Iterator[bytes]:
    """``f``'s content ``size`` bytes at a time; ``where[0]`` follows the position in ``raw`` (the
    file under a gzip stream), for progress reports."""
    size = min(size, 1 << 30)
    while True:
        b = f.read(size)
        if not b:
            return
        if where is not None:
            where[0] = raw.tell()
        yield b


def utf8_incomplete_tail(b: bytes) -> int:
    """Where a UTF-8 sequence cut by the end of ``b`` starts (``len(b)`` if none is cut)."""
    n = len(b)
    for back in range(1, min(4, n) + 1):
        c = b[n - back]
        if c < 0x80:
            return n
        if c >= 0xC0:                      # a lead byte: does its sequence fit?
            need = 2 if c < 0xE0 else 3 if c < 0xF0 else 4
            return n - back if back < need else n
    return n


UTF8_STEP = 4 << 20     # repair_utf8 checks a large text this many bytes at a time


BAD_UTF8 = "bytes that are not valid UTF-8 (in names, keys or values) were read as '?'"


def repair_utf8(data: bytes) -> tuple[bytes, int]:
    """``data`` with every byte that is not part of valid UTF-8 replaced by ``?`` (the length and
    every offset stay as they were), and how many bytes were replaced.  Valid text is returned as
    it is (the same object), at the cost of one check, :data:`UTF8_STEP` bytes at a time (no
    decoded copy of a large text is ever made)."""
    n = len(data)
    if n <= UTF8_STEP:
        return _repair_piece(bytes(data))
    mv = memoryview(data)
    parts: list[bytes] | None = None
    bad = 0
    carry = b""
    i = 0
    while i < n:
        start = i - len(carry)
        piece = carry + bytes(mv[i:i + UTF8_STEP])
        i += UTF8_STEP
        carry = b""
        if i < n:
            cut = utf8_incomplete_tail(piece)
            piece, carry = piece[:cut], piece[cut:]
        fixed, k = _repair_piece(piece)
        if k and parts is None:
            parts = [bytes(mv[:start])]
        if parts is not None:
            parts.append(fixed)
        bad += k
    return (b"".join(parts) if parts is not None else data), bad


def _repair_piece(data: bytes) -> tuple[bytes, int]:
    # (checked by the compiled core without the GIL: on the reading thread, `bytes.isascii` and
    # `decode` held it ~35 ms per million events while the scanning threads waited for it)
    if SCAN.is_utf8(data):
        return data, 0
    fixed, bad = _ESCAPED.subn("?", data.decode("utf-8", "surrogateescape"))
    return fixed.encode("utf-8"), bad


_ESCAPED = re.compile("[\udc80-\udcff]")      # what surrogateescape makes of each invalid byte


def _utf8_blocks(blocks: Iterator[bytes], bad: Callable[[int], None]) -> Iterator[bytes]:
    """``blocks`` with bytes that are not valid UTF-8 replaced by ``?`` (see :func:`repair_utf8`;
    a character cut between two blocks moves to the next one)."""
    carry = b""
    for b in blocks:
        if carry:
            b = carry + b
        cut = utf8_incomplete_tail(b)
        b, carry = b[:cut], b[cut:]
        b, n = repair_utf8(b)
        if n:
            bad(n)
        if b:
            yield b
    if carry:
        b, n = repair_utf8(carry)
        if n:
            bad(n)
        yield b


class _Prefetch:
    """Iterate ``it`` in a thread of its own, a few items ahead (a queue of ``depth``): the file's
    reads and gunzip (which release the GIL) run beside the scanner and the conversion.
    :meth:`close` stops the thread."""

    def __init__(self, it: Iterator[bytes], depth: int = 2) -> None:
        self._done = False
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(it,), name="traceconv-read", daemon=True)
        self._t.start()

    def _put(self, item: tuple) -> bool:
        """Hand ``item`` over, waiting while the queue is full; False once stopped."""
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def _run(self, it: Iterator[bytes]) -> None:
        try:
            for x in it:
                if not self._put(("item", x)):
                    return
            self._put(("end", None))
        except BaseException as e:        # raised again in the reading thread
            self._put(("error", e))

    def close(self) -> None:
        """Stop the thread and wait for it; what it handed over and nobody took is freed now."""
        self._stop.set()
        self._t.join()
        while not self._q.empty():
            self._q.get_nowait()

    def __iter__(self) -> "_Prefetch":
        return self

    def __next__(self) -> bytes:
        if self._done:
            raise StopIteration
        kind, x = self._q.get()
        if kind == "item":
            return x
        self._done = True
        if kind == "error":
            raise x
        raise StopIteration


SCAN_ROWS = 1 << 16         # events scanned into columns at a time
SEAM_BYTES = 1 << 16        # an event cut between two blocks is scanned with this much of the second
SCAN_DEPTH = 8              # blocks in flight in a streamed read: being scanned, or waiting to be handed over
SCAN_DEPTH_ONE = 3          # ... where one thread scans them (a merge's worker)
SCAN_THREADS = 2            # blocks scanned at once (1 for a source read with threads=False)
SCAN_NICE = 10              # nice steps the two scanning threads run below the converting one, when the
                            # machine has cores to spare (see BlockScanner)


def cores_to_spare() -> bool:
    """Whether the machine has cores to spare for this process (:func:`spare`, from Linux's
    ``/proc/loadavg`` and this process's threads' states); False where the system does not say."""
    try:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        with open("/proc/loadavg") as f:
            load = f.read()
        ours = 0
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            ours += stat[stat.rindex(")") + 2] == "R"
        return spare(load, ours, cores)
    except (OSError, ValueError, IndexError):
        return False


def spare(loadavg: str, ours: int, cores: int) -> bool:
    """Given ``/proc/loadavg``'s text, how many of this process's threads are running and its
    cores: no other task wants a core now (the system's runnable tasks are ours) and the last
    minute's load average stayed below the cores."""
    load = loadavg.split()
    return int(load[3].split("/")[0]) <= ours and float(load[0]) < cores


class BlockScanner:
    """The events of an event array's text, given as consecutive blocks, scanned into columns by
    threads of their own (the compiled core's: no GIL) while the caller converts the rows already
    scanned.

    :meth:`get` hands over, in file order, ``("rows", batches)`` for each block: its batches (the
    event cut before it, then its own) as ``(text, columns, how many, strings the scan added to its
    table in id order, which table)``; at the array's end ``("end", the text after it)``; or
    ``("bad",)`` (not JSON), ``("truncated",)`` (the text ended first); an error reading the
    blocks (a broken gzip stream) is raised by :meth:`get`.
    What joins the blocks (the seams below, the batches' columns handed over) runs in :meth:`get`,
    on the caller's thread, since the scans need no GIL: a thread of its own only passed the GIL
    back and forth with the converting one (the same time without it, the 1M load's peak 4 MB
    lower; docs/design.md, "Thirty-fifth day").

    ``scanners`` blocks are scanned at once: block k + 1 from where an event seems to start in it
    (:func:`_guess_start`), beside block k.  Once block k is done, the event cut between the two
    blocks is scanned (the seam) and says where block k + 1's events truly start: the scan from the
    guess is used only if it started there (then it is the very scan made from there), else block
    k + 1 is scanned again from its true start (and its table cut back to where it was).  Blocks
    are scanned ahead of the one handed over: block k + depth - 1's scan is submitted as soon as
    block k's is done, so the scanning threads do not wait for the converting one (``depth``: 8
    blocks in flight with two scanning threads, 3 with one; docs/design.md, "Twenty-fifth day").
    Block k uses table k % depth (scans at once cannot share one; a table is used by one block at a
    time), the seams a table of their own (:attr:`tables`: ``strings`` first); the tables' strings
    are numbered in the order their file position gives.  (A merge's worker, beside other workers
    on every core, scans one block at a time: fewer hand-overs between threads, less CPU in all and
    a lower peak; docs/design.md, "Eighth day".)"""

    def __init__(self, blocks: Iterator[bytes], strings: Any, scanners: int = SCAN_THREADS) -> None:
        self.depth = SCAN_DEPTH if scanners > 1 else SCAN_DEPTH_ONE
        self.tables = [strings] + [SCAN.Strings() for _ in range(self.depth)]
        self.seams = self.depth                     # the seams' table
        # the scanning threads: the compiled core's own, which scan a block from its start to its
        # end without the GIL (Python's took it back after every scan and for every block, and
        # waited ~70 ms each for it in the 1M trace's load).  Two of them run SCAN_NICE steps
        # below the converting thread when the machine has cores to spare: on the two cores the
        # three share, the blocks ahead are then scanned in the time the converting thread
        # leaves, where at one priority it waited behind them for the next block as often as
        # they waited for room ahead (the 1M conversion 0.972 -> 0.924 s).  Beside other busy
        # processes in the same scheduling group, a lower priority would starve them instead
        # (1.5 -> 3.4 s beside two busy loops): there they keep the converting thread's, as one
        # (a merge's worker, beside the other workers) always does (docs/design.md,
        # "Thirty-fifth day").
        self._pool = SCAN.Pool(scanners, SCAN_NICE if scanners > 1 and cores_to_spare() else 0)
        self._items = self._produce(blocks)

    def get(self) -> tuple:
        """The next item (see above)."""
        return next(self._items, ("truncated",))

    def close(self) -> None:
        """Stop the scans (those running end before their next batch), let their blocks go and
        wait for the scanning threads."""
        self._pool.stop()
        self._items.close()
        self._pool.close()                          # (again, if the stream ran: a no-op then)

    @staticmethod
    def _batches(scanned: tuple) -> tuple[int, list, int, int, bool]:
        """A block's scan as the pool hands it over, its batches' columns as :data:`Rows`."""
        before, got, pos, status, after = scanned
        return before, [(Rows(**cols), n, new) for cols, n, new in got], pos, status, after

    def _scan_block(self, buf: bytes, pos: int, table: int,
                    after: bool) -> tuple[int, list, int, int, bool]:
        """The batches of ``buf``'s events from ``pos`` (``after`` an event or not) to its end (or
        the array's end, or bad text; BAD too once the scanner is closed), where the scan stopped
        and why, the table's size before it, and whether where it stopped is after an event: on
        this thread (the pool's threads scan the blocks ahead: :meth:`_produce`)."""
        return self._batches(self._pool.scan(buf, pos, SCAN_ROWS, self.tables[table], after))

    def _produce(self, stream: Iterator[bytes]) -> Iterator[tuple]:
        tables, depth, seams = self.tables, self.depth, self.seams
        pool = self._pool
        try:
            blocks_in = iter(stream)
            ahead: dict[int, tuple[bytes, int | None, Any]] = {}

            def start(k: int) -> None:
                block = next(blocks_in, None)
                if block is not None:
                    buf = bytes(block)
                    guess = 0 if k == 0 else _guess_start(buf)
                    # (a guessed start is a `{` whose comma is behind it)
                    ahead[k] = (buf, guess, pool.submit(buf, guess, SCAN_ROWS, tables[k % depth], False)
                                if guess is not None else None)

            for j in range(depth - 1):
                start(j)
            carry = b""                     # the text after the last event read (holding the event cut)
            after = False                   # whether it starts after an event (not the array's start)
            held: list[bytes] = []          # blocks after it not scanned yet (see below)
            held_bytes = 0
            pending: list[list[str]] = [[] for _ in tables]     # strings not yet sent, per table
            k = 0
            while k in ahead:
                buf, guess, job = ahead.pop(k)
                table = k % depth
                done = self._batches(job.result()) if job is not None else None
                start(k + depth - 1)        # (a scanning thread is free)
                if carry and k + 1 in ahead and len(carry) + held_bytes + len(buf) < 2 * len(carry):
                    # an event longer than a block: scanned again only once its text so far has
                    # doubled (and at the stream's end), so that its blocks cost linear time, not
                    # a scan of all of it for each (a 64 MB event in 1 MB blocks took 8.3 s)
                    held.append(buf)
                    held_bytes += len(buf)
                    if done is not None:
                        tables[table].truncate(done[0])
                    k += 1
                    continue
                if held:
                    carry = b"".join([carry, *held])
                    held, held_bytes = [], 0
                pos: int | None = 0
                rows: list[tuple] = []      # the block's batches: handed over at once
                if carry and len(carry) > SEAM_BYTES:
                    buf, pos = carry + buf, None    # a long event: scanned with the whole block below
                elif carry:
                    # the event cut by the last block's end: scanned from its two pieces joined
                    # with only the start of this block (not the whole block copied after it)
                    seam = carry + buf[:SEAM_BYTES]
                    cols, n, at, status, new = _scan(seam, 0, 1, tables[seams], after)
                    pending[seams] += new
                    if n == 1 and at > len(carry) and status in (SCAN.FULL, SCAN.MORE):
                        rows.append((seam, cols, n, pending[seams], seams))
                        pending[seams] = []
                        pos, after = at - len(carry), True
                    else:                   # a longer event, the array's end, or bad text
                        buf, pos = carry + buf, None
                    del seam, cols
                # (a guessed start past the comma after `pos`: the guess's `},{` holds that comma,
                # so a scan from the guess never passes over a missing one)
                if done is not None and pos is not None and guess in (pos, _event_at(buf, pos)):
                    _, got, end, status, after = done
                else:
                    if done is not None:
                        tables[table].truncate(done[0])
                    _, got, end, status, after = self._scan_block(buf, pos or 0, table, after)
                del done
                for cols, n, new in got:
                    pending[table] += new
                    if n:
                        rows.append((buf, cols, n, pending[table], table))
                        pending[table] = []
                del got
                if rows:
                    yield ("rows", rows)
                del rows
                if status == SCAN.BAD:
                    yield ("bad",)
                    return
                if status == SCAN.END:
                    # the rest of the document after the array: this block's, and the next
                    # one's, already taken from the stream to be scanned beside it
                    yield ("end", buf[end:] + b"".join(ahead[j][0] for j in sorted(ahead)))
                    return
                carry = buf[end:]
                k += 1
            yield ("truncated",)
        finally:
            pool.close()                                 # (the scans still running stop early)


def _find_events(head: bytes) -> tuple[dict[str, Any], bool, int] | None:
    """Where the event array starts in a document's first bytes: (the top-level keys before it,
    whether the document is a bare array, the index just after its ``[``); None if the bytes end
    first.  Raises :class:`_ChunkFailure` for a document of another shape."""
    buf = bytes(head)
    n = len(buf)
    i = SCAN.skip_ws(buf, 0)
    if i >= n:
        return None
    if head[i:i + 1] == b"[":
        return {}, True, i + 1
    if head[i:i + 1] != b"{":
        raise _ChunkFailure
    header: dict[str, Any] = {}
    i += 1
    while True:
        i = SCAN.skip_ws(buf, i)
        if i >= n:
            return None
        if head[i:i + 1] == b"}":
            raise _ChunkFailure                  # no traceEvents
        if head[i:i + 1] == b"," and header:
            i = SCAN.skip_ws(buf, i + 1)
        k0 = i
        k1 = SCAN.value_end(buf, i)
        if k1 == -1:
            return None
        if k1 < 0 or head[k0:k0 + 1] != b'"':
            raise _ChunkFailure
        i = SCAN.skip_ws(buf, k1)
        if i >= n:
            return None
        if head[i:i + 1] != b":":
            raise _ChunkFailure
        i = SCAN.skip_ws(buf, i + 1)
        if i >= n:
            return None
        try:
            key = orjson.loads(head[k0:k1])
        except orjson.JSONDecodeError:
            raise _ChunkFailure from None
        if key == "traceEvents":
            if head[i:i + 1] != b"[":
                raise _ChunkFailure
            return header, False, i + 1
        v1 = SCAN.value_end(buf, i)
        if v1 == -1:
            return None
        if v1 < 0 or key in header:
            raise _ChunkFailure
        header[key] = _header_value(Raw(head[i:v1]))
        i = v1


def _head_events(blocks: Iterator[bytes]) -> tuple[bytes, tuple[dict[str, Any], bool, int] | None]:
    """The document's first blocks joined, as far as :func:`_find_events` needs to find where its
    event array starts, and what it found (None: the text ended first).  It looks again only when
    the head has doubled: a header of H bytes costs O(H), where looking at every block cost
    O(H^2 / block)."""
    head = bytearray()
    tried = 0
    for block in blocks:
        head += block
        if len(head) < 2 * tried:
            continue
        tried = len(head)
        found = _find_events(bytes(head))
        if found is not None:
            return bytes(head), found
    found = _find_events(bytes(head)) if len(head) != tried else None
    return bytes(head), found


def _parse_tail(tail: bytes, is_array: bool) -> dict[str, Any]:
    """The top-level keys in the text after the event array's ``]`` (``, "k": v ... }``)."""
    t = tail.strip()
    if is_array:
        if t:
            raise _ChunkFailure
        return {}
    if t == b"}":
        return {}
    if not t.startswith(b",") or not t.endswith(b"}"):
        raise _ChunkFailure
    try:
        top = _TOP.decode(b"{" + t[1:])
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        raise _ChunkFailure from None
    if "traceEvents" in top:
        raise _ChunkFailure
    return {k: _header_value(v) for k, v in top.items()}


TAIL_BYTES = 1 << 16


def _tail_guess(src: "Source") -> dict[str, Any]:
    """The top-level keys after the event array, guessed from the file's last bytes: the longest
    text after a ``]`` there that reads as the end of the top-level object ({} if none does).  Only
    a guess: the stream checks it when it gets there."""
    try:
        with src.open_raw() as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            end = f.read()
    except OSError:
        return {}
    i = end.find(b"]")
    while i >= 0:
        try:
            return _parse_tail(end[i + 1:], False)
        except _ChunkFailure:
            i = end.find(b"]", i + 1)
    return {}
