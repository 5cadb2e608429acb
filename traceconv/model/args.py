"""The args of events: the compact text of a JSON object per event, strict JSON always, packed into one
buffer per table (:class:`ArgsColumn`) that moves to a temporary file when it grows big.

The Chrome JSON writer copies this text out verbatim; the Perfetto writer transcodes it.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from array import array
from collections.abc import Mapping      # (not typing's: its isinstance() goes through Python code, ~4 us)
from typing import Any, Iterator

import orjson


# An args column moves its text to a temporary file past this many bytes (see ArgsColumn); < 0: never.
SPILL_BYTES = 4 << 20
SPILL_FLUSH = 4 << 20        # a spilled column writes its new text out this many bytes at a time
DIRECT_BYTES = 1 << 16       # extend_packed writes a spilled column's batch of this many bytes straight out
TAKE_ROWS = 1 << 13          # ArgsColumn.take gathers at most this many rows at a time ...
TAKE_BYTES = 1 << 20         # ... and of at most this much text (its byte index: 8 MB)
FORGET_ROWS = 1 << 16        # iterating over a spilled column forgets its pages this often (a power of 2)


# ---- args: always strict JSON -----------------------------------------------------------------
#
# The model's args are the compact text of a JSON object that any strict parser reads (orjson,
# Perfetto's JSON parser): UTF-8, no NaN/Infinity, numbers within a double or a 64-bit integer, and
# nested at most MAX_ARGS_DEPTH levels.  A value that breaks one of these is changed (counted as
# CLAMPED_VALUE by the loader): a non-finite double becomes the string "NaN", "Infinity" or
# "-Infinity"; an integer beyond 64 bits becomes its decimal string; a value nested deeper becomes
# the string of its own JSON text.

MAX_ARGS_DEPTH = 64
_NONFINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _json_text(v: Any) -> str:
    """JSON text of ``v`` (any depth, without recursion), non-finite numbers and big integers as strings."""
    out: list[str] = []
    stack: list[Any] = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, _Lit):
            out.append(x.text)
            continue
        parts: list[Any] = []
        if isinstance(x, Mapping):
            out.append("{")
            for j, (key, val) in enumerate(x.items()):
                parts.append(_Lit(("," if j else "") + orjson.dumps(_safe_key(key)).decode() + ":"))
                parts.append(val)
            parts.append(_Lit("}"))
        elif isinstance(x, (list, tuple)):
            out.append("[")
            for j, val in enumerate(x):
                if j:
                    parts.append(_Lit(","))
                parts.append(val)
            parts.append(_Lit("]"))
        else:
            out.append(orjson.dumps(_scalar(x)[0]).decode())
        stack.extend(reversed(parts))
    return "".join(out)


class _Lit:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _safe_key(k: Any) -> str:
    s = k if isinstance(k, str) else str(k)
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:                 # a lone surrogate
        s = s.encode("utf-8", "replace").decode("utf-8")
    return s


def _scalar(x: Any) -> tuple[Any, bool]:
    """A leaf as strict JSON allows it; second item: whether it had to change."""
    if isinstance(x, float):
        if x != x or x in (float("inf"), float("-inf")):
            return _NONFINITE[repr(x)], True
        return x, False
    if isinstance(x, int) and not isinstance(x, bool):
        if -(2**63) <= x < 2**64:
            return x, False
        try:
            return str(x), True
        except ValueError:                      # thousands of digits
            return f"<{x.bit_length()}-bit integer>", True
    if isinstance(x, str):
        try:
            x.encode("utf-8")
            return x, False
        except UnicodeEncodeError:
            return x.encode("utf-8", "replace").decode("utf-8"), True
    if x is None or isinstance(x, bool):
        return x, False
    return _safe_key(x), True                   # anything else: its text


def strict_args(args: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """``args`` made strict JSON (see above), without recursion; second item: values changed."""
    changed = 0
    root: dict[str, Any] = {}
    # (source container, destination container, depth of the destination)
    stack: list[tuple[Any, Any, int]] = [(args, root, 1)]
    while stack:
        src, dst, depth = stack.pop()
        items = src.items() if isinstance(src, Mapping) else enumerate(src)
        for k, v in items:
            if isinstance(v, (Mapping, list, tuple)):
                if depth >= MAX_ARGS_DEPTH and v:
                    new: Any = _json_text(v)
                    changed += 1
                else:
                    new = {} if isinstance(v, Mapping) else []
                    stack.append((v, new, depth + 1))
            else:
                new, fixed = _scalar(v)
                changed += fixed
            if isinstance(dst, dict):
                key = _safe_key(k)
                changed += isinstance(k, str) and key != k
                dst[key] = new
            else:
                dst.append(new)
    return root, changed


def encode_args(args: Mapping[str, Any] | bytes | None) -> bytes | None:
    """Args as stored in the model: compact JSON object text, or None."""
    return encode_args_counted(args)[0]


def encode_args_counted(args: Mapping[str, Any] | bytes | None) -> tuple[bytes | None, int]:
    """:func:`encode_args` and how many values had to change to be strict JSON."""
    if args is None:
        return None, 0
    if isinstance(args, (bytes, bytearray, memoryview)):
        b = bytes(args)
        return (None if b in (b"{}", b"") else b), 0
    if not args:
        return None, 0
    clean, changed = strict_args(args)
    return orjson.dumps(clean), changed


def decode_args(raw: bytes | None) -> dict[str, Any]:
    return orjson.loads(raw) if raw else {}


def _write_at(fd: int, data: "Any", pos: int) -> None:
    """All of ``data`` into the file at ``pos`` (a write may take part of it)."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        view, pos = view[n:], pos + n


COUNT_CHUNK = 1 << 23          # bytes of args text :meth:`ArgsColumn.chunks` gives at a time


class ArgsColumn:
    """The args of a table's rows: each row's compact JSON object text, or None (no args).

    Stored packed -- one byte buffer and an offset per row -- instead of one ``bytes`` object per
    row: a million rows of args cost their text plus 8 bytes each, not their text plus ~40 bytes of
    object header and a list slot, and a reader or writer can hand the whole column to numpy at
    once (:meth:`packed`).  Row ``i`` is ``data[off[i]:off[i + 1]]``; an empty row is None.
    Behaves as a sequence of ``bytes | None`` for everything else.

    **Spilling.**  Args are most of a big trace's bytes (115 of the ~140 MB a million Kineto events
    take) and are read once or twice, in bulk.  Past :data:`SPILL_BYTES` a column moves its text to
    an unlinked temporary file (appends then go there, ``SPILL_FLUSH`` bytes at a time) and reads it
    through a memory map; :meth:`forget` drops the pages read so far from the process's resident
    set (they stay in the system's page cache, so reading them again costs a page fault, not a
    disk read).  Readers of a spilled column call it between batches.  If the file cannot be
    written (disk full), the column quietly goes back to memory.
    """

    __slots__ = ("_data", "_off", "_file", "_size", "_map", "_stay")

    def __init__(self, rows: "Any" = ()) -> None:
        self._data = bytearray()          # the text (in memory), or its unwritten tail (spilled)
        self._off = array("q", [0])
        self._file: Any = None            # the temporary file once spilled
        self._size = 0                    # bytes in the file
        self._map: Any = None             # a read-only map of the file's first _size bytes
        self._stay = False                # True once a file could not be made or written
        self.extend(rows)

    # -- storage

    @property
    def spilled(self) -> bool:
        return self._file is not None

    def _grew(self) -> None:
        """After an append: spill or flush when due."""
        if self._file is None:
            if len(self._data) > SPILL_BYTES and SPILL_BYTES >= 0 and not self._stay:
                self._spill()
        elif len(self._data) >= SPILL_FLUSH:
            self._flush()

    def _spill(self) -> None:
        try:
            self._file = tempfile.TemporaryFile(prefix="traceconv-args-", buffering=0)
        except OSError:
            self._stay = True
            return
        self._flush()

    def _flush(self) -> None:
        if not self._data:
            return
        try:
            _write_at(self._file.fileno(), self._data, self._size)
        except OSError:                       # no room: back to memory
            self._unspill()
            return
        self._size += len(self._data)
        self._data = bytearray()

    def _unspill(self) -> None:
        tail = self._data
        self._data = self._file_bytes(0, self._size)
        self._data += tail
        self._close()
        self._stay = True

    def _close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:               # a numpy view of it is still alive: leave it to the GC
                pass
            self._map = None
        if self._file is not None:
            self._file.close()
            self._file = None
        self._size = 0

    def _file_bytes(self, a: int, b: int) -> bytearray:
        out = bytearray(b - a)
        view, fd = memoryview(out), self._file.fileno()
        while view:
            n = os.preadv(fd, [view], a)
            if not n:
                raise OSError(f"the args file ended {len(view)} bytes early")
            view, a = view[n:], a + n
        return out

    def _mapped(self) -> "Any":
        """The whole text as a buffer: the bytearray, or (spilled) a map of the file."""
        if self._file is None:
            return self._data
        self._flush()
        if self._file is None:                # the flush failed and brought it back to memory
            return self._data
        if self._map is None or len(self._map) != self._size:
            # copy-on-write: the pages are the file's (no copy), and the buffer numpy sees behaves as
            # the in-memory bytearray does (writable); nobody writes to it
            self._map = mmap.mmap(self._file.fileno(), self._size, access=mmap.ACCESS_COPY) \
                if self._size else None
        return self._map if self._map is not None else b""

    def forget(self) -> None:
        """Drop the pages of a spilled column read so far from the resident set (no-op in memory)."""
        if self._map is not None and hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)

    def __del__(self) -> None:
        try:
            self._close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __getstate__(self) -> tuple:
        data, _ = self.packed()
        return bytes(data), self._off.tobytes()

    def __setstate__(self, state: tuple) -> None:
        self._data, self._off = bytearray(), array("q")
        self._file = self._map = None
        self._size = 0
        self._stay = False
        self._off.frombytes(state[1])
        self._data += state[0]
        self._grew()

    # -- the sequence

    def __len__(self) -> int:
        return len(self._off) - 1

    def __getitem__(self, i: int) -> bytes | None:
        off = self._off
        if i < 0:
            i += len(off) - 1
        a, b = off[i], off[i + 1]      # IndexError past the end, as a list would raise
        return bytes(self._mapped()[a:b]) if b > a else None

    def __iter__(self):
        data, off = self._mapped(), self._off
        a = 0
        for k, b in enumerate(off[1:], 1):
            yield bytes(data[a:b]) if b > a else None
            a = b
            if not k & FORGET_ROWS - 1:
                self.forget()
        self.forget()

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (ArgsColumn, list)) else NotImplemented

    def append(self, row: bytes | None) -> None:
        if row:
            self._data += row
        self._off.append(self._size + len(self._data))
        self._grew()

    def extend(self, rows: "Any") -> None:
        if isinstance(rows, ArgsColumn):
            import numpy as np
            data, off = rows.packed()
            step = 1 << 16
            for lo in range(0, len(rows), step):
                o = off[lo:lo + step + 1]
                self.extend_packed(data[int(o[0]):int(o[-1])], np.diff(o))
                rows.forget()
            return
        for r in rows:
            self.append(r)

    def extend_packed(self, data: "Any", lengths: "Any") -> None:
        """Append rows given as one buffer of their texts back to back and each row's length
        (0 for a row without args): how the fast readers add a chunk of rows at once."""
        import numpy as np
        base = self._size + len(self._data)
        text = memoryview(data).cast("B")
        if self._file is not None and len(text) >= DIRECT_BYTES:
            # spilled: a big batch goes to the file from the caller's buffer (no copy kept here)
            self._flush()
            if self._file is not None and not self._data:
                try:
                    _write_at(self._file.fileno(), text, self._size)
                    self._size += len(text)
                    text = memoryview(b"")
                except OSError:               # no room: back to memory, with this batch
                    self._unspill()
        self._data += text
        ends = np.cumsum(np.asarray(lengths, dtype=np.int64)) + base
        self._off.frombytes(ends.tobytes())
        self._grew()

    def take(self, idx: "Any") -> "ArgsColumn":
        """A new column of the rows at ``idx`` (integer indices), in that order."""
        import numpy as np
        data, off = self.packed()
        idx = np.asarray(idx, dtype=np.int64)
        out = ArgsColumn()
        # a batch of rows at a time, bounded temporaries: each byte has an int64 index.  The batches
        # end at TAKE_ROWS rows or TAKE_BYTES of text, whichever comes first (65,536 rows took 140 MB
        # of temporaries for 271k slices' args; 8,192 of MegEngine's longer args still 26 MB)
        size = np.cumsum(off[idx + 1] - off[idx]) if len(idx) else np.zeros(0, np.int64)
        lo = 0
        while lo < len(idx):
            hi = min(lo + TAKE_ROWS, int(np.searchsorted(size, (size[lo - 1] if lo else 0) + TAKE_BYTES, "right")))
            hi = max(hi, lo + 1)
            rows = idx[lo:hi]
            starts, lens = off[rows], off[rows + 1] - off[rows]
            ends = np.cumsum(lens)
            pos = np.repeat(starts - (ends - lens), lens) + np.arange(int(ends[-1]) if len(ends) else 0)
            out.extend_packed(data[pos], lens)
            self.forget()
            lo = hi
        return out

    def packed(self) -> "tuple[Any, Any]":
        """(data, offsets) as numpy arrays (uint8, int64 of len(self) + 1), sharing memory with the
        column: valid until the column next grows.  Of a spilled column, ``data`` maps its file:
        call :meth:`forget` now and then while reading it."""
        import numpy as np
        data = self._mapped()
        return (np.frombuffer(data, dtype=np.uint8) if len(data) else np.zeros(0, np.uint8),
                np.frombuffer(self._off, dtype=np.int64))

    def values_estimate(self) -> int:
        """About how many values (the leaves of the rows' objects and arrays: what a viewer lists
        as args) the column holds: a row's leaves are its commas plus one, less its empty arrays
        and objects (Kineto's ``"Input Dims": [[64, 8], []]``), counted in the text ``COUNT_CHUNK``
        bytes at a time (a comma or ``[]`` inside a string counts too; ``[ ]`` does not).  0.3 s for
        the 115 MB of a million Kineto events, 7.52M against the 7.48M args rows trace_processor
        makes of them."""
        import numpy as np
        _, off = self.packed()
        n = int(np.count_nonzero(np.diff(off)))                 # rows with args
        for _, size, a in self.chunks(1):                       # (and the next chunk's first byte)
            body = a[:size]
            n += int(np.count_nonzero(body == 44))              # ,
            opens = np.flatnonzero((body == 91) | (body == 123)) + 1
            after = a[opens[opens < len(a)]]
            n -= int(np.count_nonzero((after == 93) | (after == 125)))      # [] {}
        return n

    def chunks(self, overlap: int) -> "Iterator[tuple[int, int, Any]]":
        """The text ``COUNT_CHUNK`` bytes at a time, as (offset, the chunk's size, a uint8 array of
        the chunk and the next ``overlap`` bytes); a spilled column's pages are dropped after each
        (mapped whole, the 115 MB of a million Kineto events' args stayed resident)."""
        data, _ = self.packed()
        for lo in range(0, len(data), COUNT_CHUNK):
            yield lo, min(COUNT_CHUNK, len(data) - lo), data[lo:lo + COUNT_CHUNK + overlap]
            self.forget()

    @property
    def nbytes(self) -> int:
        """Bytes of text and offsets (wherever the text is)."""
        return self._size + len(self._data) + 8 * len(self._off)
