"""A handler for ``torch.profiler.profile(on_trace_ready=...)`` that writes Perfetto traces.

    from traceconv.record.torch import trace_handler
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=2),
                                on_trace_ready=trace_handler("traces/")) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

Each profiling window becomes ``traces/<worker_name>.<time ns>.pt.trace.pftrace`` (``.pftrace.gz``
with ``use_gzip=True``), the names ``torch.profiler.tensorboard_trace_handler`` gives its JSON
files; ``worker_name`` defaults to ``<hostname>_<pid>``, with ``_rank<N>`` when
``torch.distributed`` is initialized.  The content is what ``traceconv convert`` makes of the JSON
the profiler would have written: the handler has the profiler export it to a temporary file
beside the output, converts it, and deletes it (also when the conversion fails), so no JSON stays
on disk.  The ``.pftrace`` files of several ranks go on one timeline with
``python -m traceconv.record merge traces/ -o run.pftrace`` (``traceconv merge`` reads JSON only).

torch is imported only when a handler runs and torch.distributed is asked for the rank.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Callable


def _rank() -> int | None:
    try:
        import torch.distributed as dist
    except Exception:  # noqa: BLE001 - no torch, or a build without distributed
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # noqa: BLE001
        return None
    return None


def trace_handler(dir_name: str | os.PathLike[str], worker_name: str | None = None,
                  use_gzip: bool = False) -> Callable[[Any], Path]:
    """``on_trace_ready`` handler: one ``.pftrace`` per profiling window (and rank) in ``dir_name``."""
    from ..api import convert

    def handler_fn(prof: Any) -> Path:
        nonlocal worker_name
        d = Path(dir_name)
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RuntimeError(f"Can't create directory: {d}") from e
        if not worker_name:
            worker_name = f"{socket.gethostname()}_{os.getpid()}"
            r = _rank()
            if r is not None:
                worker_name += f"_rank{r}"
        out = d / f"{worker_name}.{time.time_ns()}.pt.trace.pftrace{'.gz' if use_gzip else ''}"
        fd, tmp = tempfile.mkstemp(prefix=f".{worker_name}.", suffix=".pt.trace.json", dir=d)
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            convert(tmp, out, from_format="kineto")
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return out

    return handler_fn
