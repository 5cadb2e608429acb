"""The traceconv command line (installed as the ``traceconv_cli`` package)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import MutableMapping


def one_blas_thread(environ: "MutableMapping[str, str]" = os.environ) -> None:
    """One OpenBLAS thread for the command's process, unless the user set a number.  traceconv does
    no linear algebra, and OpenBLAS otherwise starts a thread per core when numpy is imported, which
    spins ~0.1 s of CPU beside the command's start (0.25-0.29 against 0.16 s of user CPU for the
    bundled example).  An empty ``OPENBLAS_NUM_THREADS`` is no setting (OpenBLAS ignores it too): it
    used to keep this default from applying.  The library leaves the environment alone.  Here, not in
    :mod:`traceconv_cli.app`, so that the bench's processes set themselves up as the command does
    without importing the command's modules before their clocks start."""
    if not environ.get("OPENBLAS_NUM_THREADS", "").strip():
        environ["OPENBLAS_NUM_THREADS"] = "1"
