"""Input sources (gzip detected by magic bytes) and outputs to any target.

Gzipped inputs are read with ISA-L's gunzip (``isal.igzip``, about 3x faster than the stdlib's
zlib); gzipped outputs are written with zlib-ng's deflate at level 6 (:func:`_gzipped`).

Where an output goes (:func:`atomic_output`):

* ``-`` (and ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``): streamed to that file descriptor;
  a binary format is refused when it is a terminal;
* a new or regular file: written to a temporary file beside it and renamed into place, so it is
  never seen half-written; an existing file keeps its permission bits;
* a symlink: followed; its target is replaced the same way (or written through if it is not
  a regular file);
* an existing device or FIFO (``/dev/null``, ``mkfifo``): opened and written through, never
  replaced;
* never one of the inputs;
* a URL (``s3://``, ``gs://``, ``az://``, ...): written to a local temporary file and uploaded
  through fsspec once complete, so no half-written object is ever seen there.

Inputs and outputs may be URLs of any filesystem fsspec knows (``s3://``, ``gs://``, ``az://``,
``http(s)://``; ``file://`` is a local path): see :mod:`traceconv.remote`.  A remote input is read
as a stream, a block at a time (through gzip too), never downloaded whole first.

An operating-system error (disk full, permission denied, read-only file system, ...) is one
:class:`TraceconvError` naming the file, with ``exit_code`` 3; nothing half-written is left behind
(on a stream, the reader has seen a prefix and the exit code says it is incomplete).  A reader of
a pipe that goes away raises :class:`~traceconv.errors.Stopped` (SIGPIPE)."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import signal
import stat
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Iterator, Sequence

from isal import igzip, isal_zlib

from . import remote
from .errors import EXIT_ENVIRONMENT, Stopped, TraceconvError, signals_held
from .remote import URL, is_url

if TYPE_CHECKING:
    from concurrent.futures import Future

GZIP_MAGIC = b"\x1f\x8b"
HEAD_SIZE = 64 * 1024

# What reading a gzip input can raise when its data is damaged: BadGzipFile (an OSError) for a bad
# header, CRC or length, EOFError for a stream cut short, and for bad deflate data ISA-L's own
# error (isal_zlib.error, which is neither an OSError nor a zlib.error), or zlib.error from the
# stdlib's decompressor (_salvage_gzip_head).  Every reader of ``Source.open()`` catches these.
GZIP_ERRORS: tuple[type[Exception], ...] = (OSError, EOFError, zlib.error, isal_zlib.error)


class _ClosingGzip(igzip.IGzipFile):
    """ISA-L's gunzip over a file object it owns (a remote file): closing it closes both."""

    def close(self) -> None:
        raw = self.fileobj
        try:
            super().close()
        finally:
            if raw is not None:
                raw.close()


@dataclass
class Source:
    """A file to read.  ``head`` holds its first bytes, decompressed.  ``path`` is a :class:`Path`,
    or a :class:`~traceconv.remote.URL` for a remote file (read through fsspec).  ``threads``
    False: the reader keeps to as few threads as it can (one scanning thread, not two), where
    other processes already keep every core busy (a merge's workers)."""

    path: Path | URL
    gzipped: bool
    head: bytes
    threads: bool = True

    @property
    def name(self) -> str:
        return str(self.path)

    @property
    def remote(self) -> bool:
        return isinstance(self.path, URL)

    def open_raw(self) -> BinaryIO:
        """The bytes as stored (compressed or not), seekable."""
        if isinstance(self.path, URL):
            return remote.open_read(self.path)
        return open(self.path, "rb")

    def open(self) -> BinaryIO:
        """The decompressed content as a binary stream (a remote file is read in blocks)."""
        raw = self.open_raw()
        return _ClosingGzip(fileobj=raw, mode="rb") if self.gzipped else raw  # type: ignore[return-value]

    def size(self) -> int:
        """The size of the file as stored (compressed), in bytes."""
        if isinstance(self.path, URL):
            return remote.size(self.path)
        return os.path.getsize(self.path)

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
    """A file to read: a local path, or a URL fsspec knows (``file://`` is a local path)."""
    if is_url(path):
        url = remote.as_url(path)
        if isinstance(url, URL):
            return _open_remote(url)
        path = url
    p = Path(path)
    if not p.exists():
        raise TraceconvError("no such file", path=p)
    if p.is_dir():
        raise TraceconvError("is a directory, not a file", path=p)
    try:
        with open(p, "rb") as f:
            magic = f.read(2)
    except OSError as e:
        raise environment_error(e, p, "cannot read") from None
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


def _open_remote(url: URL) -> Source:
    remote.check_file(url)
    try:
        with remote.open_read(url, block_size=HEAD_SIZE * 4) as f:
            first = f.read(HEAD_SIZE * 4)
    except OSError as e:
        raise environment_error(e, url, "cannot read") from None
    gz = first[:2] == GZIP_MAGIC
    head = _gunzip_head(first) if gz else first[:HEAD_SIZE]
    if not head.strip():
        raise TraceconvError("the file is empty", path=url)
    return Source(path=url, gzipped=gz, head=head)


def _salvage_gzip_head(p: Path) -> bytes:
    with open(p, "rb") as f:
        return _gunzip_head(f.read(HEAD_SIZE * 4))


def _gunzip_head(first: bytes) -> bytes:
    """The first HEAD_SIZE bytes gunzipped from the start of a gzip file (what came before any damage;
    empty when even that is not gzip)."""
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(first, HEAD_SIZE)
    except zlib.error:
        return b""


STDOUT = "-"
_FD_PATH = re.compile(r"/(?:dev/fd|proc/self/fd)/(\d+)")


def stream_fd(path: str | os.PathLike[str]) -> int | None:
    """The file descriptor an output name stands for: ``-`` and ``/dev/stdout`` are 1,
    ``/dev/stderr`` 2, ``/dev/fd/N`` N; None for an ordinary path."""
    s = os.fspath(path)
    if s in (STDOUT, "/dev/stdout"):
        return 1
    if s == "/dev/stderr":
        return 2
    m = _FD_PATH.fullmatch(s)
    return int(m.group(1)) if m else None


def output_label(path: str | os.PathLike[str]) -> str:
    """How messages name an output: ``<stdout>`` for ``-``, else the path."""
    return "<stdout>" if os.fspath(path) == STDOUT else os.fspath(path)


def environment_error(e: OSError, path: str | os.PathLike[str], doing: str = "cannot write") -> TraceconvError:
    """One line for an OSError the user's system raised (exit code 3)."""
    what = e.strerror or str(e)
    return TraceconvError(f"{doing}: {what}", path=output_label(path), exit_code=EXIT_ENVIRONMENT)


def refuse_binary_terminal(path: str | os.PathLike[str], binary: bool) -> None:
    """A binary output to a terminal is refused before any work is done."""
    fd = stream_fd(path)
    if not binary:
        return
    if fd is None:
        try:
            st = os.stat(path)
        except OSError:
            return
        if not stat.S_ISCHR(st.st_mode):
            return
        try:
            tfd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            return
        try:
            tty = os.isatty(tfd)
        finally:
            os.close(tfd)
    else:
        try:
            tty = os.isatty(fd)
        except OSError:
            return
    if tty:
        raise TraceconvError("refusing to write a binary Perfetto trace to a terminal: redirect it "
                             "(> run.pftrace), pipe it, or choose {opt:to_format} chrome-json", path=output_label(path))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _is_input(out: Path, st: os.stat_result | None, inputs: Sequence[str | os.PathLike[str]]) -> bool:
    """Whether ``out`` (``st``: its stat, None when there is no file yet) is one of ``inputs``: the
    same file, or the same path once symlinks are resolved.  The output is stat'ed and resolved
    once, an input stat'ed once and resolved only when it does not exist (a merge's thousand local
    ranks: one stat each, where a stat, a samefile and two resolves each took 60-100 ms)."""
    real: Path | None = None
    for i in inputs:
        try:
            si = os.stat(i)
        except (OSError, ValueError):
            si = None
        if si is not None:
            # an input that exists is the output only if the output exists and is the same file
            if st is not None and (si.st_dev, si.st_ino) == (st.st_dev, st.st_ino):
                return True
            continue
        if real is None:
            real = out.resolve()
        if Path(i).resolve() == real:
            return True
    return False


class _Stream:
    """A write-only byte stream over a file descriptor that is not replaced (stdout, a FIFO, a
    device).  Counts what it wrote (``tell()``: tarfile asks), and turns a reader that went away
    into :class:`Stopped` (SIGPIPE) and any other OSError into a one-line TraceconvError."""

    def __init__(self, fd: int, label: str, close: bool):
        self.fd, self.label, self._close = fd, label, close
        self.pos = 0
        self.closed = False

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # noqa: ANN001 (bytes-like)
        view = memoryview(data).cast("B")
        n = len(view)
        try:
            while view:
                k = os.write(self.fd, view)
                view = view[k:]
        except BrokenPipeError:
            raise Stopped(signal.SIGPIPE, f"{self.label}: the reader went away") from None
        except OSError as e:
            raise environment_error(e, self.label) from None
        self.pos += n
        return n

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self._close:
                with contextlib.suppress(OSError):
                    os.close(self.fd)


class _Buffered:
    """1 MiB of buffering in front of a :class:`_Stream` (the writers write many small pieces)."""

    def __init__(self, raw: _Stream, size: int = 1 << 20):
        self.raw, self.size = raw, size
        self.buf = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # noqa: ANN001
        self.buf += data
        if len(self.buf) >= self.size:
            self.flush()
        return len(data)

    def tell(self) -> int:
        return self.raw.tell() + len(self.buf)

    def flush(self) -> None:
        if self.buf:
            data, self.buf = bytes(self.buf), bytearray()
            self.raw.write(data)

    @property
    def closed(self) -> bool:
        return self.raw.closed


# gzip's level for outputs: the default of gzip(1).  zlib-ng's deflate writes the same size as the
# stdlib's zlib at that level (16.1 MB for the bench's 1M .pftrace, 21.7 MB against 22.1 MB for its
# Chrome JSON) in half the time (0.94 s against 1.81 s, 1.35 s against 2.38 s).  ISA-L's levels
# are 10-15x faster still, but their files 12-28 % larger (docs/design.md, *Twenty-seventh day*).
GZIP_LEVEL = 6


@contextlib.contextmanager
def _gzipped(raw, compress: bool) -> Iterator[BinaryIO]:  # noqa: ANN001
    """``raw``, gzipped when ``compress`` (with no name and no time in the header: the same input
    gives the same bytes)."""
    if compress:
        from zlib_ng import gzip_ng             # (imported by the commands that gzip, only)
        with gzip_ng.GzipNGFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL, mtime=0) as gz:
            yield gz  # type: ignore[misc]
    else:
        yield raw


@contextlib.contextmanager
def _write_through(fd: int, label: str, close: bool, compress: bool, binary: bool) -> Iterator[BinaryIO]:
    try:
        if binary and os.isatty(fd):
            raise TraceconvError("refusing to write a binary Perfetto trace to a terminal: redirect it "
                                 "(> run.pftrace), pipe it, or choose {opt:to_format} chrome-json", path=label)
        buf = _Buffered(_Stream(fd, label, close))
        try:
            with _gzipped(buf, compress) as f:
                yield f
            buf.flush()
        except OSError as e:
            if isinstance(e, BrokenPipeError):
                raise Stopped(signal.SIGPIPE, f"{label}: the reader went away") from None
            raise environment_error(e, label) from None
    finally:
        if close:
            with contextlib.suppress(OSError):
                os.close(fd)


COPY_BYTES = 8 << 20        # write_pieces' reads and writes where the kernel cannot copy

Piece = bytes | tuple[str, int]      # bytes, or (path, size): the first size bytes of that file


class WriteBehind:
    """``out``'s writes on a thread of their own (``threaded``, on a machine of two cores or more;
    else on the caller's), each begun as the caller hands it over, in order, while the caller makes
    the next: :meth:`write` returns once the write before it is done, so a buffer handed over in
    one call can be filled again after the next.  The writers' big outputs go through it: their
    encoding goes on beside the writes and, for a gzipped output, beside the compression (the
    bench's 1M trace to .pftrace.gz 3.2 -> 2.2 s, with zlib-ng; to .json.gz 5.9 -> 4.4 s; to
    .pftrace no faster, its writes being ~20 ms of 1.4 s).  A write's error is raised by the next call, or when the ``with`` block ends;
    nothing is written after it."""

    def __init__(self, out: BinaryIO, *, threaded: bool = True) -> None:
        self.out = out
        self.pool = None
        if threaded and (os.cpu_count() or 1) > 1:
            # (imported here: without threads, as a recorder's save at interpreter exit is, where
            # importing concurrent.futures' thread pool raises, nothing imports it)
            from concurrent.futures import ThreadPoolExecutor
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="traceconv-write")
        self.last: Future | None = None

    def write(self, data: "bytes | memoryview") -> None:
        self.wait()
        if self.pool is None:
            self.out.write(data)
        else:
            self.last = self.pool.submit(self.out.write, data)

    def wait(self) -> None:
        """Until every write handed over is done (its error raised here)."""
        last, self.last = self.last, None
        if last is not None:
            last.result()

    def __enter__(self) -> "WriteBehind":
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        try:
            self.wait()
        except BaseException:
            if kind is None:            # (else the caller's own error goes on)
                raise
        finally:
            if self.pool is not None:
                self.pool.shutdown()


def write_pieces(out: BinaryIO, pieces: Sequence[Piece]) -> None:
    """``pieces`` appended to ``out`` in order: bytes, or ``(path, size)`` for the first ``size``
    bytes of a file.  Into a plain file a file is copied by the kernel (``copy_file_range``, never
    through this process's memory); into anything else (gzip, a stream), or where the kernel cannot
    copy between the two files, read and written ``COPY_BYTES`` at a time.  A file shorter than its
    size is an OSError.  (Two copies at once on two threads were measured no faster: 157 MB in
    0.054-0.060 s either way.)"""
    kernel = isinstance(out, io.BufferedWriter) and hasattr(os, "copy_file_range")
    for piece in pieces:
        if not isinstance(piece, tuple):
            out.write(piece)
            continue
        path, size = piece
        with open(path, "rb", buffering=0) as src:
            done = 0
            if kernel:
                out.flush()
                try:
                    while done < size:
                        n = os.copy_file_range(src.fileno(), out.fileno(), size - done)
                        if n == 0:
                            break
                        done += n
                except OSError as e:
                    if e.errno not in _NO_KERNEL_COPY:
                        raise
                    kernel = False              # (the same two files: the next pieces by hand at once)
                out.seek(0, os.SEEK_END)        # (the buffer's idea of the position, after the kernel's writes)
            while done < size:
                b = os.pread(src.fileno(), min(size - done, COPY_BYTES), done)
                if not b:
                    raise OSError(f"{path} ended before its {size - done} last bytes")
                out.write(b)
                done += len(b)


# copy_file_range cannot copy between these files (another file system, an old kernel, a special file)
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF}


def _local_target(out: Path, inputs: Sequence[str | os.PathLike[str]]) -> tuple[os.stat_result | None, Path]:
    """What a local output path is now (None: no file yet) and the file a rename would replace (a
    symlink's target), after the checks that refuse it: one of ``inputs``, a directory, a regular
    file's folder that does not exist."""
    try:
        st: os.stat_result | None = os.stat(out)          # follows a symlink
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise environment_error(e, out) from None
    if _is_input(out, st, inputs):
        raise TraceconvError("refusing to overwrite an input file; choose another output name",
                             path=out)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise TraceconvError("the output is a directory", path=out)
    target = Path(os.path.realpath(out))
    if (st is None or stat.S_ISREG(st.st_mode)) and not target.parent.is_dir():
        raise TraceconvError("the output's folder does not exist", path=out)
    return st, target


def _remote_target(url: URL, inputs: Sequence[str | os.PathLike[str]]) -> None:
    """The checks that refuse a URL as an output: one of ``inputs``, or a protocol whose fsspec
    backend is not installed."""
    for i in inputs:
        if remote.as_url(i) == url:
            raise TraceconvError("refusing to overwrite an input file; choose another output name", path=url)
    remote.check_writable(url)


def check_output(path: str | os.PathLike[str], inputs: Sequence[str | os.PathLike[str]] = ()) -> None:
    """Refuse an output before any input is read, as :func:`atomic_output` would after: one of
    ``inputs``, a directory, a file in a folder that does not exist, a URL whose backend is not
    installed (a merge of a thousand ranks, or a 1 GB conversion, learnt of a mistyped folder only
    once every input was read).  Standard output and open descriptors are checked when written."""
    if is_url(path):
        url = remote.as_url(path)
        if isinstance(url, URL):
            _remote_target(url, inputs)
            return
        path = url
    if stream_fd(path) is not None:
        return
    _local_target(Path(path), inputs)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], *, inputs: Sequence[str | os.PathLike[str]] = (),
                  compress: bool | None = None, binary: bool = False) -> Iterator[BinaryIO]:
    """A binary stream that ends up at ``path`` (see the module's docstring for each kind of target).

    A regular file is written to a temporary file beside it and renamed into place on success:
    never left half-written.  Refuses to overwrite one of ``inputs``.  ``compress`` (default: the
    name ends in ``.gz``) gzips what is written.  ``binary`` outputs are refused on a terminal.
    """
    if is_url(path):
        url = remote.as_url(path)
        if isinstance(url, URL):
            with _remote_output(url, inputs, compress, binary) as f:
                yield f
            return
        path = url
    out = Path(path)
    if compress is None:
        compress = out.name.endswith(".gz") and os.fspath(path) != STDOUT
    fd = stream_fd(path)
    if fd is not None:
        if fd == 1:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
        with _write_through(fd, output_label(path), False, compress, binary) as f:
            yield f
        return
    st, target = _local_target(out, inputs)
    if st is not None and not stat.S_ISREG(st.st_mode):
        # a device or a FIFO (or a symlink to one): write through it, never replace it
        try:
            tfd = os.open(out, os.O_WRONLY | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            raise environment_error(e, out) from None
        with _write_through(tfd, str(out), True, compress, binary) as f:
            yield f
        return
    parent = target.parent                                # (a symlink's target is what is replaced)
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    tmp: str | None = None
    ok = False
    try:
        # a stop signal between the file's creation and its name reaching ``tmp`` would leave it
        # behind: held until the name is known, then raised here, where the cleanup below runs
        with signals_held():
            try:
                tfd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
            except OSError as e:
                raise environment_error(e, out) from None
        try:
            with os.fdopen(tfd, "wb") as raw:
                with _gzipped(raw, compress) as f:
                    yield f
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except OSError as e:
            raise environment_error(e, out) from None
        ok = True
    finally:
        if not ok and tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


@contextlib.contextmanager
def _remote_output(url: URL, inputs: Sequence[str | os.PathLike[str]], compress: bool | None,
                   binary: bool) -> Iterator[BinaryIO]:
    """Write to a local temporary file, then upload it whole (fsspec's ``put_file``: an S3
    multipart upload is only seen once complete); nothing is uploaded if writing fails."""
    _remote_target(url, inputs)
    if compress is None:
        compress = url.name.endswith(".gz")
    tmp: str | None = None
    try:
        with signals_held():                # (as in atomic_output: the name is known before a stop)
            tfd, tmp = tempfile.mkstemp(prefix=".traceconv-upload.", suffix=".tmp")
        try:
            with os.fdopen(tfd, "wb") as raw:
                with _gzipped(raw, compress) as f:
                    yield f
        except OSError as e:
            raise environment_error(e, url) from None
        remote.upload(tmp, url)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
