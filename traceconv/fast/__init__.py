"""Compiled numba kernels for the hot paths not yet in the Rust core (encoding protobuf: pbwrite).

The event scanner moved to ``traceconv._core.scan`` (rust/src/scan.rs); the glibc memory helper
to :mod:`traceconv.memory`.

The per-event work of a conversion -- tens of millions of events -- runs in loops over numpy
byte buffers compiled by numba, so it costs machine instructions per byte, not Python bytecodes
per event.  Kernels are compiled on first use and cached on disk (numba's ``cache=True``: in
``__pycache__`` beside this package, or the user's cache directory when that is read-only), so
only the very first conversion on a machine pays the compilation.

Everything here works on plain arrays and knows nothing of the model or of any file format
beyond the byte-level grammar it handles; the readers and writers call it.
"""

from __future__ import annotations

import numba

# nogil: a kernel may run beside other threads; cache: compiled once per machine, not per process
jit = numba.njit(cache=True, nogil=True, boundscheck=False)
# small helpers of the kernels' innermost loops, inlined into their callers: a call that passes an
# array costs two atomic reference-count operations, which in a per-byte loop cost more than the work
inline = numba.njit(cache=True, nogil=True, boundscheck=False, inline="always")


@inline
def same_bytes(x, xo, y, yo, n):
    """Whether ``x[xo:xo + n]`` and ``y[yo:yo + n]`` hold the same bytes (the kernels' table probes
    and predictions)."""
    for q in range(n):
        if x[xo + q] != y[yo + q]:
            return False
    return True
