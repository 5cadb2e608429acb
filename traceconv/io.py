"""Input sources (gzip detected by magic bytes) and atomic outputs.

Gzipped inputs are read with ISA-L's gunzip (``isal.igzip``, about 3x faster than the stdlib's
zlib); outputs are still written with the stdlib's ``gzip``."""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Sequence

from isal import igzip, isal_zlib

from .errors import TraceconvError

GZIP_MAGIC = b"\x1f\x8b"
HEAD_SIZE = 64 * 1024

# What reading a gzip input can raise when its data is damaged: BadGzipFile (an OSError) for a bad
# header, CRC or length, EOFError for a stream cut short, and for bad deflate data ISA-L's own
# error (isal_zlib.error, which is neither an OSError nor a zlib.error), or zlib.error from the
# stdlib's decompressor (_salvage_gzip_head).  Every reader of ``Source.open()`` catches these.
GZIP_ERRORS: tuple[type[Exception], ...] = (OSError, EOFError, zlib.error, isal_zlib.error)


@dataclass
class Source:
    """A file to read.  ``head`` holds its first bytes, decompressed."""

    path: Path
    gzipped: bool
    head: bytes

    @property
    def name(self) -> str:
        return str(self.path)

    def open(self) -> BinaryIO:
        """The decompressed content as a binary stream."""
        if self.gzipped:
            return igzip.open(self.path, "rb")  # type: ignore[return-value]
        return open(self.path, "rb")

    def read_bytes(self) -> bytes:
        """The whole decompressed content."""
        try:
            with self.open() as f:
                return f.read()
        except GZIP_ERRORS as e:
            if self.gzipped:
                raise TraceconvError(f"corrupt or truncated gzip data ({e})", path=self.path) from None
            raise TraceconvError(f"cannot read: {e}", path=self.path) from None

    def read_text(self) -> str:
        data = self.read_bytes()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data.decode("latin-1")


def open_source(path: str | os.PathLike[str]) -> Source:
    p = Path(path)
    if not p.exists():
        raise TraceconvError("no such file", path=p)
    if p.is_dir():
        raise TraceconvError("is a directory, not a file", path=p)
    try:
        with open(p, "rb") as f:
            magic = f.read(2)
    except OSError as e:
        raise TraceconvError(f"cannot read: {e.strerror or e}", path=p) from None
    gz = magic == GZIP_MAGIC
    head = b""
    try:
        if gz:
            with igzip.open(p, "rb") as g:
                head = g.read(HEAD_SIZE)
        else:
            with open(p, "rb") as f:
                head = f.read(HEAD_SIZE)
    except GZIP_ERRORS:
        # A truncated gzip stream still yields what came before the damage.
        head = _salvage_gzip_head(p)
    if not head.strip():
        raise TraceconvError("the file is empty", path=p)
    return Source(path=p, gzipped=gz, head=head)


def _salvage_gzip_head(p: Path) -> bytes:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with open(p, "rb") as f:
        try:
            return d.decompress(f.read(HEAD_SIZE * 4), HEAD_SIZE)
        except zlib.error:
            return b""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], *, inputs: Sequence[str | os.PathLike[str]] = (),
                  compress: bool | None = None) -> Iterator[BinaryIO]:
    """Write to a temporary file beside ``path`` and rename it into place on success.

    Never leaves a half-written file; refuses to overwrite one of ``inputs``.
    ``compress`` (default: the name ends in ``.gz``) gzips what is written.
    """
    out = Path(path)
    for i in inputs:
        if _same_file(out, Path(i)) or out.resolve() == Path(i).resolve():
            raise TraceconvError("refusing to overwrite an input file; choose another output name",
                                 path=out)
    if out.is_dir():
        raise TraceconvError("the output is a directory", path=out)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise TraceconvError("the output's folder does not exist", path=out)
    if compress is None:
        compress = out.name.endswith(".gz")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise TraceconvError(f"cannot write: {e.strerror or e}", path=out) from None
    ok = False
    try:
        with os.fdopen(fd, "wb") as raw:
            if compress:
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz:
                    yield gz  # type: ignore[misc]
            else:
                yield raw
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, out)
        ok = True
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
