"""The library's entry points: load, save, convert."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from . import formats as _formats
from . import memory
from .errors import ConversionWarning, TraceconvError, WarningCode, count, signals_held
from .io import atomic_output, check_output, open_source, refuse_binary_terminal, stream_fd
from .model.layout import nest, stream_length
from .remote import URL, is_url
from .model import Trace, enforce_time_domain
from .progress import report

PathLike = str | os.PathLike[str]


def load(path: PathLike, format: str | None = None, *, threads: bool = True) -> Trace:
    """Read a profile of any supported format into a :class:`~traceconv.model.Trace`.

    The format is detected from the content unless ``format`` names it.
    What the reader could not keep is in ``trace.diagnostics``.  ``threads`` False: a large
    Chrome/Kineto file is scanned by one thread, not two, beside the one converting it (for a
    process that is one of several keeping the cores busy, as a merge's workers are).

    >>> trace = load("tests/fixtures/mlagents/csharp_3DBall_timers.json")
    >>> trace.meta.source_format, len(trace.slices)
    ('mlagents', 9)
    """
    source = open_source(path)
    source.threads = threads
    fmt = _formats.get(format, role="reader") if format else _formats.detect(source.head, source.path)
    report(f"reading {source.path.name} ({fmt.name})", 0, None)
    try:
        trace = fmt.load("reader")(source)
    except TraceconvError as e:
        raise e.with_path(source.path) from None
    trace.meta.source_format = fmt.name
    enforce_time_domain(trace)  # the model's one time domain (see traceconv.model.MAX_TIME_NS)
    memory.trim()               # what reading freed (batches, small objects) back to the system
    if trace.remapped_ids:
        trace.diagnostics.warn(WarningCode.REMAPPED_ID,
                               "pids/tids outside 0..2^31-1 were given new numbers "
                               "(the original kept as the process/thread's raw id)", trace.remapped_ids)
    return trace


DEFAULT_STREAM_FORMAT = "perfetto"


def output_format(path: PathLike, format: str | None = None) -> _formats.Format:
    """The writer for ``path``: ``format`` if given, else from the name; ``-`` (standard output)
    and ``/dev/stdout`` have no name to go by and get Perfetto's protobuf unless ``format`` says."""
    if not format and stream_fd(path) is not None:
        format = DEFAULT_STREAM_FORMAT
    return _formats.for_output(path, format)


def is_binary(fmt: _formats.Format) -> bool:
    return fmt.name != "chrome-json"


def save(trace: Trace, path: PathLike, format: str | None = None, *,
         inputs: Sequence[PathLike] = (), threads: bool = True) -> None:
    """Write ``trace`` to ``path`` in ``format`` or the one its name implies.

    A regular file is written atomically (a temporary file renamed into place); ``-`` is standard
    output (Perfetto's format unless ``format`` says; refused on a terminal); a device or FIFO
    is written through; a symlink is followed (see :func:`traceconv.io.atomic_output`).
    ``.gz`` at the end of the name gzips the output.  Slices that overlap without
    nesting are moved to extra tracks by the writer (:func:`~traceconv.model.layout.nest`,
    counted in ``trace.diagnostics``).  ``threads`` False: the writer starts no thread (a
    recorder's save, which must not take a core from the program it records, and may run at
    interpreter exit, when no thread can start).

    >>> import tempfile, os
    >>> trace = load("examples/mlagents_timers.json")
    >>> out = os.path.join(tempfile.mkdtemp(), "timers.json.gz")
    >>> save(trace, out)
    >>> open(out, "rb").read(2) == b"\\x1f\\x8b"
    True
    """
    fmt = output_format(path, format)
    writer = fmt.load("writer")
    refuse_binary_terminal(path, is_binary(fmt))
    with atomic_output(path, inputs=inputs, binary=is_binary(fmt)) as out, \
            (memory.writing(stream_length(trace)) if threads else contextlib.nullcontext()):
        writer(trace, out, threads=threads)


@dataclass
class ConvertResult:
    input_format: str
    output_format: str
    slices: int
    instants: int
    counters: int
    flows: int
    warnings: list[ConversionWarning] = field(default_factory=list)

    def counts(self) -> str:
        """What the output holds, as the command says it: ``244 slices, 2 instants, 80 flows``
        (slices always; the rest when there are any; ``1 slice``, not ``1 slices``)."""
        parts = [count(self.slices, "slice")]
        for n, what in ((self.instants, "instant"), (self.counters, "counter sample"), (self.flows, "flow")):
            if n:
                parts.append(count(n, what))
        return ", ".join(parts)


def convert(input: PathLike, output: PathLike, *, from_format: str | None = None,
            to_format: str | None = None, strict: bool = False, engine: object = "local",
            scheduler: str | None = None) -> ConvertResult:
    """Convert one file to another format (``traceconv convert``).

    With ``strict``, any lossy change is an error and nothing is written.  ``output`` may be
    ``-`` (standard output): see :func:`save`.  Either may be a URL (``s3://...``: read as a
    stream, the output uploaded once complete).  ``engine="dask"`` (or ``scheduler``) runs the
    conversion on a Dask worker, which reads the input and writes the output itself: only the
    counts come back (give URLs or absolute paths the workers can reach).
    """
    if engine != "local" or scheduler:
        if stream_fd(output) is not None:
            raise TraceconvError("standard output is this process's: convert to it on the local engine",
                                 path=output)
        from .merging.engine import make_engine
        where = [os.path.abspath(p) if isinstance(p, (str, os.PathLike)) and not is_url(p) else p
                 for p in (input, output)]
        with make_engine(engine, scheduler=scheduler, workers=1) as eng:
            return next(iter(eng.map(_convert_here, [(*where, from_format, to_format, strict)], [input])))
    return _convert_here(input, output, from_format, to_format, strict)


def _convert_here(input: PathLike, output: PathLike, from_format: str | None, to_format: str | None,
                  strict: bool) -> ConvertResult:
    out_fmt = output_format(output, to_format)   # fail on a bad output name before reading
    refuse_binary_terminal(output, is_binary(out_fmt))
    check_output(output, inputs=[input])         # (and on a folder that does not exist)
    trace = load(input, from_format)
    if strict:
        nest(trace)                              # (what the writer would move to lanes is a change)
    lossy = trace.diagnostics.lossy()
    if strict and lossy:
        raise TraceconvError("{opt:strict}: the conversion would change or drop events: "
                             + "; ".join(str(w) for w in lossy), path=input)
    save(trace, output, out_fmt.name, inputs=[input])
    return ConvertResult(trace.meta.source_format, out_fmt.name, len(trace.slices),
                         len(trace.instants), len(trace.counters), len(trace.flows),
                         trace.diagnostics.warnings)


@contextlib.contextmanager
def open_in_ui(input: PathLike, from_format: str | None = None) -> Iterator[Path]:
    """A Perfetto trace of ``input`` to serve: the file itself if it already is one, else a
    temporary ``.pftrace`` converted from it (removed afterwards)."""
    source = open_source(input)
    src = source.path
    perfetto = from_format is None and _formats.looks_like_perfetto(source.head)
    if perfetto and not isinstance(src, URL):
        yield Path(src)
        return
    tmp: Path | None = None
    try:
        with signals_held():              # (a stop cannot leave the folder nameless: see io.atomic_output)
            tmp = Path(tempfile.mkdtemp(prefix="traceconv-"))
        name = src.name.split(".")[0] or "trace"
        out = tmp / f"{name}.pftrace"
        if perfetto:                      # a remote Perfetto trace: copied here, a block at a time
            with source.open() as f, open(out, "wb") as g:
                shutil.copyfileobj(f, g, 8 << 20)
        else:
            save(load(src, from_format), out)
        yield out
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
