"""The Perfetto merge archive: a TAR of one .pftrace per rank file and a
``perfetto_manifest.json`` with each file's clock offset, which trace_processor (v58+) merges into
one timeline.  Written with :func:`traceconv.io.atomic_output` (a remote output is uploaded whole)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import orjson

from ..io import atomic_output


def write_archive(entries: list[tuple[str, int, Path]], alignments: Mapping[int, Any], out: str | os.PathLike[str],
                  inputs: Sequence[Any]) -> None:
    """A TAR of one .pftrace per rank file and a ``perfetto_manifest.json`` with the clock offsets,
    as Perfetto (v58+) merges archives: each file a machine of its own (``rank N``; a rank's
    second file ``rank N · 1``: two files on one machine would share pids, and their processes
    would merge); the trace's time is the reference rank's BOOTTIME (``trace_time.file``); every
    other file's BOOTTIME is related to it (``clocks.clock`` + ``sync_to`` + ``offset_ns``: the
    file keeps its own clocks -- the sequence clock and the snapshot our writer puts in it -- and
    moves by its rank's offset).  Without ``clocks.clock`` the manifest would *pin* the file as a
    clockless one, which trace_processor refuses for a trace with a ClockSnapshot; relating one
    machine's BOOTTIME twice is refused as a duplicate clock domain."""
    entries = sorted(entries, key=lambda e: (e[1], e[0]))
    ref_name = entries[0][0]
    seen: dict[int, int] = {}
    manifest_files = []
    with atomic_output(out, inputs=inputs, compress=False) as f, tarfile.open(fileobj=f, mode="w") as tar:
        for name, r, path in entries:
            info = tarfile.TarInfo(name)          # nothing of this machine's (times, owners): the same bytes
            info.size = os.path.getsize(path)     # on every run, on any engine
            info.mode = 0o644
            with open(path, "rb") as data:
                tar.addfile(info, data)
            k = seen[r] = seen.get(r, -1) + 1
            entry: dict[str, Any] = {"path": name, "machine": {"name": f"rank {r}" if not k else f"rank {r} · {k}"}}
            if name != ref_name:
                entry["clocks"] = {"clock": "BOOTTIME", "sync_to": {"file": ref_name, "clock": "BOOTTIME"},
                                   "offset_ns": alignments[r].offset_ns}
            manifest_files.append(entry)
        manifest = {"perfetto_manifest": {"version": 1, "trace_time": {"clock": "BOOTTIME", "file": ref_name},
                                          "files": manifest_files}}
        data = orjson.dumps(manifest, option=orjson.OPT_INDENT_2)
        info = tarfile.TarInfo("perfetto_manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
