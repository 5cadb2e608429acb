"""Put the shards of a recording -- one file per process -- on one timeline.

Every process of a run records on the same clock (``CLOCK_MONOTONIC`` turned into Unix ns with
one anchor, inherited by the workers), so merging needs no alignment: each shard is appended as
its own process group with :func:`traceconv.merging.append_rank` (the shard number as the rank,
``rank 2 · ForkPoolWorker-2 (pid 4242)``, as ``traceconv merge`` names ranks), the flows whose
two ends were recorded in different shards (or chunks) are linked by their ids, and the result is
written with the project's writers.

``python -m traceconv.record merge run.shards/ -o run.pftrace`` does the same from the shell.
``traceconv merge run.shards/*.pftrace`` reads the shards too (as ranks to align by their clocks);
this module puts them on the recording's one clock as they are.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

import numpy as np
import orjson

from ..errors import TraceconvError, WarningCode
from ..model import Clock, Trace

_SHARD = re.compile(r"rank(\d+)")
_EXTS = (".pftrace", ".pftrace.gz", ".json", ".json.gz")


def read_any(path: str | os.PathLike[str]) -> Trace:
    """A shard, or any file traceconv reads: a shard's .pftrace is traceconv's own, which the
    registry's ``perfetto`` reader reads (:mod:`traceconv.readers.pftrace`)."""
    from ..api import load
    return load(path)


def shard_inputs(inputs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    files: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found = sorted((f for f in p.iterdir() if f.is_file() and not f.name.startswith(".")
                            and f.name.endswith(_EXTS)), key=_key)
            if not found:
                raise TraceconvError("no recorded shards (.pftrace, .json) in this folder", path=p)
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise TraceconvError("no such file", path=p)
    return files


def _key(p: Path) -> tuple[int, str]:
    m = _SHARD.match(p.name)
    return (int(m.group(1)) if m else 1 << 30, p.name)


def link_flows(trace: Trace) -> tuple[int, int]:
    """Link every span recorded with ``flow_out=X`` to the span with ``flow_in=X``; (linked, left)."""
    data, off = trace.slices.args.packed()
    if not len(data):
        return 0, 0
    src: dict[int, int] = {}
    dst: dict[int, int] = {}
    # only rows that mention a flow are decoded
    hits = _rows_with(data, off, b'"flow_')
    for i in hits:
        args = orjson.loads(bytes(data[off[i]:off[i + 1]]))
        for key, table in (("flow_out", src), ("flow_in", dst)):
            v = args.get(key)
            for f in (v if isinstance(v, list) else [v] if v is not None else []):
                if isinstance(f, int):
                    table.setdefault(f, i)
    have = set(zip(np.frombuffer(trace.flows.src, np.int64).tolist(),
                   np.frombuffer(trace.flows.dst, np.int64).tolist())) if len(trace.flows) else set()
    linked = 0
    for f, s in src.items():
        d = dst.get(f)
        if d is not None:
            if (s, d) not in have:
                trace.add_flow(s, d, "flow")
            linked += 1
    left = sum(1 for f in src if f not in dst) + sum(1 for f in dst if f not in src)
    return linked, left


def _rows_with(data: np.ndarray, off: np.ndarray, needle: bytes) -> list[int]:
    text = data.tobytes()
    pos, out = text.find(needle), []
    while pos >= 0:
        row = int(np.searchsorted(off, pos, side="right")) - 1
        out.append(row)
        pos = text.find(needle, int(off[row + 1]))
    return out


def merge(inputs: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str], *,
          single: bool = False) -> Trace:
    """Merge recorded shards (files, or folders of them) into ``output`` (.pftrace, .json, ...).
    Returns the merged trace.  ``single``: one recording rewritten as it was (no rank names)."""
    from ..api import save
    from ..merging import append_rank
    from ..io import check_output
    files = shard_inputs(inputs)
    check_output(output, files)                 # (never over a shard, and refused before reading)
    merged = Trace("record")
    merged.meta.clock = Clock.UNIX
    used: list[dict] = []
    taken: set[int] = set()
    empty = [f for f in files if f.stat().st_size == 0]
    files = [f for f in files if f.stat().st_size]
    if not files:
        raise TraceconvError("every shard is empty (nothing was flushed)", path=str(inputs[0]))
    if single:
        t = read_any(files[0])
        t.meta.source_format = "record"
        linked, left = link_flows(t)
        save(t, output, inputs=files)
        return t
    for k, f in enumerate(files):
        t = read_any(f)
        if t.meta.clock is not Clock.UNIX:
            raise TraceconvError("not on the Unix clock: cannot be put on a recording's timeline", path=f)
        rank = t.meta.rank if isinstance(t.meta.rank, int) else None
        if rank is None:
            m = _SHARD.match(f.name)
            rank = int(m.group(1)) if m else None
        if rank is None or rank in taken:
            rank = max(taken, default=-1) + 1
        taken.add(rank)
        append_rank(merged, t, rank, 0)
        info = t.meta.extra.get("record", {})
        used.append({"path": str(f), "rank": rank, "pid": info.get("pid"), "process": info.get("process")})
    linked, left = link_flows(merged)
    if left:
        merged.diagnostics.warn(WarningCode.UNRESOLVED_FLOW,
                                "flow ids recorded on one end only (the other end was not recorded or not flushed)",
                                left)
    if empty:
        merged.diagnostics.warn(WarningCode.NOTE, "empty shards (processes that flushed nothing) skipped",
                                len(empty))
    merged.meta.extra["record.merge"] = {"files": used, "flows_linked": linked,
                                         "empty": [str(f) for f in empty]}
    merged.meta.world_size = len(files)
    save(merged, output, inputs=files)
    return merged
