"""When freed memory goes back to the system, while big files are read and traces written.

glibc's malloc serves a request of at least its *mmap threshold* from its own mapping, returned to
the system on free.  The threshold is dynamic: after such a block is freed it rises to that block's
size (up to 32 MB), so that later blocks of a few MB -- the readers' per-batch arrays -- come from
the heap, where freed space stays in the process.  Over a million events that left ~110 MB of
freed heap in the resident set at the peak (``malloc_trim`` gave it back afterwards).  Fixing the
threshold at 1 MB keeps such blocks mapped: measured on 1M Kineto events, peak RSS 476-494 MB ->
416 MB, for ~0.4 s more of page faults.  While a file's text streams through (a block and a
batch's columns at a time, each freed before the next), the threshold is one and a half blocks
instead (:func:`stream_start`/:func:`stream_end`): the blocks then reuse the heap's space instead
of being fresh mappings the system zeroes and unmaps each time (1M Kineto events: ~0.5 s of CPU
less, system time halved), while the model's growing columns, past that size, stay mappings that
grow in place and leave no holes in the heap.  Both while a file streams through and while a
trace is written (:func:`writing`), the free top of a heap goes back to the system only once it
passes 16 MB instead of glibc's 128 KB (less for a small input), for the next blocks to reuse; the
explicit trims (:func:`trim`) still give it back.  A worker process of a merge's pool, which
reads one rank after another, keeps what it freed instead (:func:`keep_freed`): the next rank
reuses it.  A no-op where there is no glibc.
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Iterator

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
DEFAULT_TRIM_THRESHOLD = 128 << 10     # glibc's, once any threshold is set by hand
_libc: "ctypes.CDLL | None | bool" = False      # False: not looked up yet; None: no C library


def _c() -> "ctypes.CDLL | None":
    """The C library, looked up once: glibc's ``libc.so.6`` by name, else wherever ``find_library``
    finds one (it runs ``ldconfig -p`` in a subprocess: ~1 ms, in each of a merge's workers)."""
    global _libc
    if _libc is False:
        try:
            _libc = ctypes.CDLL("libc.so.6")
        except OSError:
            from ctypes.util import find_library    # (imports subprocess: ~2 ms; only where needed)
            try:
                _libc = ctypes.CDLL(find_library("c") or "libc.so.6")
            except OSError:
                _libc = None
    return _libc  # type: ignore[return-value]


def _mallopt(param: int, value: int) -> None:
    """glibc's ``mallopt``; nothing where there is none."""
    try:
        libc = _c()
        if libc is not None:
            libc.mallopt(param, value)
    except AttributeError:
        pass


MMAP_THRESHOLD = 1 << 20           # see above
KEEP_MMAP_THRESHOLD = 64 << 20     # in a pool's worker (see keep_freed())
KEEP_TRIM_THRESHOLD = 64 << 20     # the free top of a worker's heap kept, at most (see keep_freed())
_keep = False


def _set_threshold(n: int) -> None:
    if not _keep:
        _mallopt(M_MMAP_THRESHOLD, n)


def _set_trim(n: int) -> None:
    if not _keep:
        _mallopt(M_TRIM_THRESHOLD, n)


STREAM_TRIM_THRESHOLD = 16 << 20   # a heap's free top goes back past this while a file streams through ...
STREAM_TRIM_SHARE = 16             # ... or past this share of its text, if less (stream_start)
GZIP_TEXT = 8                      # a gzipped trace's text, about this many times its size (Kineto's: 10-12)
WRITE_THRESHOLD = 16 << 20         # while a trace is written, blocks up to this size come from the heap, and
                                   # its free top goes back past it (writing) ...
WRITE_STREAM_BYTES = 16            # ... or past this many bytes for each event of the stream written, if less


def _kept(n: int, most: int, least: int) -> int:
    return max(least, min(most, n))


_streaming = False


def stream_start(block: int, text: int | None = None) -> None:
    """While a big file's text streams through, a ``block`` of bytes and a batch's columns at a
    time: memory blocks of up to one and a half of those come from the heap, where the next block
    reuses the space the last one freed, instead of each being a new mapping that the system
    zeroes page by page and unmaps again (on 1M Kineto events: ~0.5 s of CPU less, much of it in
    the thread that reads the file).  Anything larger -- the model's columns as they grow --
    is a mapping of its own, which grows in place (``mremap``) and is unmapped when freed: kept
    out of the heap, it leaves no holes there that only :func:`trim` would give back.  With the
    threshold at 4 MB (for 2 MB blocks, kept when blocks became 1 MB) the 1M read needed a trim
    every 8 blocks to stay within its memory and spent 0.70-0.79 s; at 1.5 MB, trimmed every 32
    blocks, 0.65-0.67 s (CPU 1.11-1.21 -> 1.00-1.04 s, page faults 134-149k -> 82-91k), its
    peak no higher (116-120 against 117-128 MiB; docs/design.md, "Ninth day").
    The free top of each heap (the main one, and those of the scanning threads) goes back to the
    system only once it passes :data:`STREAM_TRIM_THRESHOLD`, or a sixteenth of the ``text`` to
    come when its size is given and that is less (glibc gives it back past 128 KB at each ``free``
    otherwise, and the next blocks fault it in again page by page): on the 1M conversion 74k ->
    50k page faults while reading, 0.52 -> 0.48 s, its peak 5 MB higher; at 100k events the peak
    no higher (docs/design.md, "Thirty-seventh day").  The trims every few hundred batches still
    give it back.  :func:`stream_end` sets both thresholds back."""
    global _streaming
    _set_threshold(block + block // 2)         # (any mallopt also ends glibc's dynamic threshold)
    _set_trim(STREAM_TRIM_THRESHOLD if text is None
              else _kept(text // STREAM_TRIM_SHARE, STREAM_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD))
    _streaming = True


def stream_end() -> None:
    """The stream is read: the mmap threshold back to 1 MB, the trim threshold to glibc's 128 KB,
    and the heap's free space back to the system (once; later calls do nothing)."""
    global _streaming
    if _streaming:
        _streaming = False
        _set_threshold(MMAP_THRESHOLD)
        _set_trim(DEFAULT_TRIM_THRESHOLD)
        trim()


@contextlib.contextmanager
def writing(events: int) -> Iterator[None]:
    """While a trace is laid out and written as a stream of ``events`` events
    (:func:`traceconv.model.layout.stream_length`: a slice's begin and end are two;
    :func:`traceconv.api.save`): blocks up to :data:`WRITE_THRESHOLD` come from the heap, whose
    free top goes back to the system only past that size (:data:`WRITE_STREAM_BYTES` for each
    event instead, if that is less, and at least 1 MB), so that the writer's temporaries (NumPy's arrays of a few MB per
    column while nesting and sorting the windows, the encoder's buffers) reuse the memory the last
    ones freed instead of each being a mapping the system zeroes page by page and unmaps again.
    The 1M conversion's save: 38k -> 17-24k page faults, system time 0.11 -> 0.03-0.08 s, its peak
    no higher than the read's (docs/design.md, "Thirty-seventh day").  The trims after nesting and
    after the args' first pass still give the heap's free space back.  Afterwards both thresholds
    are set back to 1 MB and 128 KB."""
    n = _kept(events * WRITE_STREAM_BYTES, WRITE_THRESHOLD, MMAP_THRESHOLD)
    _set_threshold(n)
    _set_trim(n)
    try:
        yield
    finally:
        _set_threshold(MMAP_THRESHOLD)
        _set_trim(DEFAULT_TRIM_THRESHOLD)


def keep_freed() -> None:
    """For the rest of this process, freed memory stays in it for the next allocation: blocks up to
    64 MB come from the heap, :func:`trim` gives nothing back, and ``free`` gives back the top of a
    heap only past 64 MB of it (glibc's trim threshold, else 128 KB once the mmap threshold is set).
    For a pool's worker process, which reads one file after another: each would otherwise fault in
    again, page by page, what the one before gave back.  Measured on a merge of 8 ranks of 250k
    events: the mmap threshold 7 % faster (550k -> 350k page faults, the largest worker's peak 114
    -> 117 MB); the trim threshold then 2.04 -> 1.89 s (median of 5, alternated), 200k -> 71k
    faults, system time 0.75 -> 0.5 s, the largest worker 114 -> 140 MB.  What a worker keeps is
    bounded: one process reading 80 such ranks in turn stayed at 126 MB between ranks and 150 MB at
    its peak from the 36th on, with 0.6k page faults a rank instead of 18k after the first few."""
    global _keep
    _set_threshold(KEEP_MMAP_THRESHOLD)
    _mallopt(M_TRIM_THRESHOLD, KEEP_TRIM_THRESHOLD)
    _keep = True


def trim() -> None:
    """Give the heap's free space back to the system now (glibc's ``malloc_trim``): after a phase
    that freed many small blocks, ~30 MB after reading a million events.  A no-op elsewhere, and
    after :func:`keep_freed`."""
    if _keep:
        return
    try:
        libc = _c()
        if libc is not None:
            libc.malloc_trim(0)
    except AttributeError:
        pass
