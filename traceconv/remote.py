"""Remote files through fsspec: ``s3://``, ``gs://``, ``az://``, ``http(s)://`` and any other
protocol fsspec knows (``file://`` is a local path, read as one).

fsspec itself is a dependency; each protocol's backend is a package of its own (s3fs, gcsfs,
adlfs, aiohttp), in the ``remote`` extra (``pip install 'traceconv[remote]'``): a URL whose backend
is missing is one :class:`TraceconvError` naming the package.  Credentials and endpoints come
from where each backend looks (the environment, ``~/.aws``, ``~/.config/gcloud``, fsspec's
config: ``FSSPEC_S3_ENDPOINT_URL`` and the like), never from traceconv's own options.

A remote input is opened as a file object that fetches ``BLOCK_SIZE`` bytes at a time, so a trace
is never downloaded whole before it is read.
"""

from __future__ import annotations

import os
import re
from typing import Any, BinaryIO

from .errors import EXIT_ENVIRONMENT, TraceconvError

BLOCK_SIZE = 8 << 20            # what one read from the remote store fetches
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_LOCAL = ("file", "local")
# protocol -> the package that implements it (fsspec's own registry names it too, in prose)
BACKENDS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs",
            "abfss": "adlfs", "adl": "adlfs", "http": "aiohttp", "https": "aiohttp"}
GLOB_CHARS = "*?["


class URL(str):
    """The address of a remote file: a ``str`` with the few ``Path``-like properties messages and
    rank detection use (``name``, ``parent``)."""

    __slots__ = ()

    @property
    def protocol(self) -> str:
        m = _SCHEME.match(self)
        return m.group(1).lower() if m else ""

    @property
    def name(self) -> str:
        return self.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> "URL":
        return URL(self.rstrip("/").rsplit("/", 1)[0])

    def resolve(self) -> "URL":
        return self

    def __truediv__(self, other: str) -> "URL":
        return URL(self.rstrip("/") + "/" + str(other))


def is_url(path: Any) -> bool:
    """``scheme://...``: anything fsspec would open (``file://`` included)."""
    if isinstance(path, URL):
        return True
    if not isinstance(path, str):
        return False
    return _SCHEME.match(path) is not None


def as_url(path: Any) -> URL | str | os.PathLike[str]:
    """A remote :class:`URL`, or for ``file://`` (and any local path) the local path."""
    if isinstance(path, URL):
        return path
    if not is_url(path):
        return path
    m = _SCHEME.match(path)
    assert m is not None
    if m.group(1).lower() in _LOCAL:
        return path[m.end():] if path[m.end():].startswith("/") else "/" + path[m.end():]
    return URL(path)


def _missing(protocol: str, e: BaseException, url: str) -> TraceconvError:
    pkg = BACKENDS.get(protocol)
    if pkg:
        return TraceconvError(f"{protocol}:// needs the {pkg} package: pip install 'traceconv[remote]' "
                              f"(or pip install {pkg})", path=url)
    return TraceconvError(f"cannot open {protocol}:// ({e})", path=url)


def filesystem(url: URL) -> tuple[Any, str]:
    """(the fsspec filesystem, the path within it) for a URL."""
    url = URL(url)
    try:
        import fsspec
    except ImportError:  # pragma: no cover - fsspec is a dependency
        raise TraceconvError("remote files need the fsspec package: pip install fsspec", path=url) from None
    protocol = url.protocol
    try:
        fs, path = fsspec.core.url_to_fs(str(url))
    except ImportError as e:
        raise _missing(protocol, e, url) from None
    except ValueError as e:
        if "not known" in str(e) or "Protocol" in str(e):
            raise TraceconvError(f"unknown protocol {protocol}:// (fsspec knows no such filesystem)",
                                 path=url) from None
        raise TraceconvError(f"cannot open: {e}", path=url) from None
    return fs, path


def _oserror(e: BaseException, url: str, doing: str) -> TraceconvError:
    if isinstance(e, FileNotFoundError):
        return TraceconvError("no such file", path=url)
    what = getattr(e, "strerror", None) or str(e) or type(e).__name__
    return TraceconvError(f"{doing}: {what}", path=url, exit_code=EXIT_ENVIRONMENT)


def check_file(url: URL) -> None:
    fs, path = filesystem(url)
    try:
        info = fs.info(path)
    except FileNotFoundError:
        raise TraceconvError("no such file", path=url) from None
    except (OSError, ValueError) as e:
        raise _oserror(e, url, "cannot read") from None
    if info.get("type") == "directory":
        raise TraceconvError("is a directory, not a file", path=url)


def open_read(url: URL, block_size: int = BLOCK_SIZE) -> BinaryIO:
    """A seekable binary file object over the remote file, fetching ``block_size`` bytes at a time."""
    fs, path = filesystem(url)
    try:
        return fs.open(path, "rb", block_size=block_size)
    except (OSError, ValueError) as e:
        raise _oserror(e, url, "cannot read") from None


def size(url: URL) -> int:
    fs, path = filesystem(url)
    try:
        return int(fs.size(path) or 0)
    except (OSError, ValueError):
        return 0


def isdir(url: URL) -> bool:
    fs, path = filesystem(url)
    try:
        return bool(fs.isdir(path))
    except (OSError, ValueError):
        return False


def _full(fs: Any, url: URL, path: str) -> URL:
    """A path the filesystem returned, as a URL of the same protocol as ``url``."""
    prefix = url[:len(url.protocol) + 3]
    return URL(prefix + path.split("://", 1)[-1].lstrip("/") if "://" in path else prefix + path.lstrip("/"))


def glob(url: URL) -> list[URL]:
    """The files a URL with ``*``, ``?`` or ``[...]`` matches, sorted."""
    fs, path = filesystem(url)
    try:
        found = fs.glob(path, detail=True)
    except (OSError, ValueError) as e:
        raise _oserror(e, url, "cannot list") from None
    return sorted(_full(fs, url, p) for p, info in found.items() if info.get("type") != "directory")


def listdir(url: URL) -> list[URL]:
    """The files directly in a remote folder, sorted."""
    fs, path = filesystem(url)
    try:
        found = fs.ls(path, detail=True)
    except (OSError, ValueError) as e:
        raise _oserror(e, url, "cannot list") from None
    return sorted(_full(fs, url, i["name"]) for i in found if i.get("type") != "directory")


def check_writable(url: URL) -> None:
    """Fail before any work on a URL whose backend is missing."""
    filesystem(url)


def upload(local: str, url: URL) -> None:
    """Put a finished local file at ``url``, whole."""
    fs, path = filesystem(url)
    try:
        fs.put_file(local, path)
    except Exception as e:      # noqa: BLE001 - each backend raises its own (botocore, aiohttp, ...)
        raise _oserror(e, url, "cannot upload") from None
