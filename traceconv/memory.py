"""Give freed memory back to the system while big files are read.

glibc's malloc serves a request of at least its *mmap threshold* from its own mapping, returned to
the system on free.  The threshold is dynamic: after such a block is freed it rises to that block's
size (up to 32 MB), so that later blocks of a few MB -- the readers' per-batch arrays -- come from
the heap, where freed space stays in the process.  Over a million events that left ~110 MB of
freed heap in the resident set at the peak (``malloc_trim`` gave it back afterwards).  Fixing the
threshold at 1 MB keeps such blocks mapped: measured on 1M Kineto events, peak RSS 476-494 MB ->
416 MB, for ~0.4 s more of page faults.  A no-op where there is no glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3
_done = False
_libc: "ctypes.CDLL | None | bool" = False      # False: not looked up yet; None: no C library


def _c() -> "ctypes.CDLL | None":
    """The C library, looked up once (``find_library`` runs a subprocess)."""
    global _libc
    if _libc is False:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        except OSError:
            _libc = None
    return _libc  # type: ignore[return-value]


def give_back_freed_memory() -> None:
    """Fix glibc's mmap threshold at 1 MB for this process (once)."""
    global _done
    if _done:
        return
    _done = True
    try:
        libc = _c()
        if libc is not None:
            libc.mallopt(M_MMAP_THRESHOLD, 1 << 20)
    except AttributeError:
        pass


def trim() -> None:
    """Give the heap's free space back to the system now (glibc's ``malloc_trim``): after a phase
    that freed many small blocks, ~30 MB after reading a million events.  A no-op elsewhere."""
    try:
        libc = _c()
        if libc is not None:
            libc.malloc_trim(0)
    except AttributeError:
        pass
