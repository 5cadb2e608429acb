"""Which files to merge and the rank of each: local paths, folders, globs, and URLs of any
filesystem fsspec knows (``s3://bucket/run/rank*.json.gz``)."""

from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import Iterable

from .. import formats as _formats
from .. import remote
from ..errors import TraceconvError
from ..remote import URL
from .options import RANK_MAX

_RANK_IN_NAME = [re.compile(p, re.ASCII | re.IGNORECASE) for p in (r"(?<![a-z])rank[-_]?(\d+)", r"\.(\d{1,10})\.pt\.trace")]
# tensorboard_trace_handler's default: f"{socket.gethostname()}_{os.getpid()}.{time.time_ns()}.pt.trace.json[.gz]"
_HANDLER_NAME = re.compile(r"(.+)_(\d+)\.(\d{11,})\.pt\.trace\.json(?:\.gz)?", re.ASCII)

InputPath = Path | URL


def _is_trace_name(name: str) -> bool:
    return not name.startswith(".") and (name.endswith((".json", ".json.gz")) or ".pt.trace" in name)


def _none_in_folder(names: list[str]) -> str:
    """Why a folder gave no inputs.  A folder's .pftrace files are not taken (a merged output is
    often written beside its ranks, and would be a rank the next time): when it holds some, say how
    to name them."""
    pftrace = _formats.get("perfetto", role="reader").extensions
    own = sorted(n for n in names if n.endswith(pftrace) and not n.startswith("."))
    hint = f" (its .pftrace files are taken when named: '{own[0]}', or a pattern such as *.pftrace)" if own else ""
    return "no .json or .json.gz trace files in this folder" + hint


def _collect_remote(item: URL) -> list[URL]:
    if any(ch in item for ch in remote.GLOB_CHARS):
        found = remote.glob(item)
        if not found:
            raise TraceconvError("no file matches this pattern", path=item)
        return found
    if remote.isdir(item):
        listed = remote.listdir(item)
        found = [u for u in listed if _is_trace_name(u.name)]
        if not found:
            raise TraceconvError(_none_in_folder([u.name for u in listed]), path=item)
        return found
    remote.check_file(item)
    return [item]


def collect_inputs(items: Iterable[str | Path]) -> list[InputPath]:
    """Files, directories (their .json/.json.gz files) and globs, local or remote → sorted
    unique files (a local :class:`Path` or a remote :class:`~traceconv.remote.URL` each)."""
    files: list[InputPath] = []
    for item in items:
        if remote.is_url(item):
            u = remote.as_url(item)
            if isinstance(u, URL):
                files.extend(_collect_remote(u))
                continue
            item = u
        p = Path(item)
        if p.is_dir():
            listed = [f for f in p.iterdir() if f.is_file()]
            found = sorted(f for f in listed if _is_trace_name(f.name))
            if not found:
                raise TraceconvError(_none_in_folder([f.name for f in listed]), path=p)
            files.extend(found)
        elif p.exists():
            files.append(p)
        elif any(ch in str(item) for ch in "*?["):
            found = sorted(Path(f) for f in glob.glob(str(item)) if Path(f).is_file())
            if not found:
                raise TraceconvError("no file matches this pattern", path=item)
            files.extend(found)
        else:
            raise TraceconvError("no such file", path=p)
    seen: set = set()
    unique: list[InputPath] = []
    for f in files:
        r = f.resolve()
        if r not in seen:
            seen.add(r)
            unique.append(f)
    return unique


def handler_name(path: Path) -> tuple[str, int, int] | None:
    """``(host, pid, time_ns)`` of a file named as PyTorch's ``tensorboard_trace_handler`` names
    them by default: ``<host>_<pid>.<time_ns>.pt.trace.json[.gz]``."""
    m = _HANDLER_NAME.fullmatch(path.name)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def rank_from_name(path: Path) -> int | None:
    """A rank written in the file's name: ``rank3``, ``rank-3``, ``rank_3``, or ``.3.pt.trace``;
    never the pid or the timestamp of the handler's default name, nor anything past 2^31-1."""
    name = path.name
    handler = handler_name(path)
    if handler is not None:
        name = handler[0]                  # only the host part can say a rank ("...-rank3_4242.17...")
    for i, rx in enumerate(_RANK_IN_NAME):
        if handler is not None and i:
            break
        m = rx.search(name)
        if m and len(m.group(1)) <= 10 and int(m.group(1)) <= RANK_MAX:
            return int(m.group(1))
    return None



def expand_inputs(items: Iterable[str | Path]) -> list[str | Path]:
    """Each input as given, except a folder or a URL (a remote glob or folder: their files, as
    ``merge`` takes them) and a local glob no file is named after (its files): what ``summary``
    reads, one table per file."""
    out: list[str | Path] = []
    for item in items:
        if remote.is_url(item):
            u = remote.as_url(item)
            if isinstance(u, URL):
                out.extend(_collect_remote(u))
                continue
            item = u
        p = Path(item)
        if p.is_dir() or (not p.exists() and any(ch in str(item) for ch in "*?[")):
            out.extend(collect_inputs([item]))
        else:
            out.append(item)
    return out
