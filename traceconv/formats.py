"""The format registry: the one table that the readers, the writers, content
detection, the CLI's choices and ``traceconv formats`` all come from.

Readers and writers are named as ``"module:function"`` and imported only when
used, so listing formats or detecting one does not import every importer.

* reader:  ``read(source: traceconv.io.Source) -> Trace``
* writer:  ``write(trace: Trace, out: BinaryIO) -> None``, which first lays the slices out as its
  format needs (:func:`traceconv.model.layout.nest`; a no-op on a nested trace); an *archive* format's writer holds one
  trace per rank file instead, and only ``traceconv merge`` writes it
  (``write_archive(entries, alignments, out, inputs)``, :mod:`traceconv.writers.archive`)
* sniffer: ``sniff(head: bytes) -> bool`` -- ``head`` is the (decompressed) start of the file;
  ``claims``, where a format has one, is a sniffer that cannot be wrong (a binary signature), tried
  before every format's ``sniff``: text sniffers search a head for their markers, and a binary file
  can hold those markers in its strings (a .pftrace converted from a Sample Factory log holds the
  log's ``profile tree view`` headers).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import TraceconvError, did_you_mean


@dataclass(frozen=True)
class Format:
    name: str
    title: str
    extensions: tuple[str, ...] = ()
    reader: str | None = None
    writer: str | None = None
    sniff: str | None = None
    claims: str | None = None        # a sniffer that cannot be wrong, tried before every sniff
    aggregate: bool = False          # the source holds totals, not timestamps: the timeline is synthesized
    archive: bool = False            # one trace per rank file in one output: only a merge writes it
    aliases: tuple[str, ...] = ()

    def load(self, which: str) -> Callable[..., Any]:
        target = getattr(self, which)
        if target is None:
            raise TraceconvError(f"traceconv cannot {'read' if which == 'reader' else 'write'} "
                                 f"the {self.name} format")
        module, _, func = target.partition(":")
        return getattr(importlib.import_module(module), func)


# Order matters for detection: the most specific sniffers come first.
FORMATS: tuple[Format, ...] = (
    Format("mlagents", "Unity ML-Agents timers.json (aggregate timer tree)",
           extensions=("_timers.json", "timers.json"),
           reader="traceconv.readers.aggregate.mlagents:read", sniff="traceconv.readers.aggregate.mlagents:sniff",
           aggregate=True, aliases=("ml-agents", "unity")),
    Format("sample-factory", "Sample Factory log (sf_log.txt / console: profile tree views, SF1 timing lines)",
           extensions=("sf_log.txt",),
           reader="traceconv.readers.aggregate.samplefactory:read", sniff="traceconv.readers.aggregate.samplefactory:sniff",
           aggregate=True, aliases=("samplefactory", "sf")),
    Format("mxnet-stats", "Apache MXNet aggregate stats (profiler.dumps(): 'Profile Statistics' table or JSON)",
           extensions=(),
           reader="traceconv.readers.aggregate.mxnet_stats:read", sniff="traceconv.readers.aggregate.mxnet_stats:sniff",
           aggregate=True, aliases=("mxnet-dumps", "mxnet-aggregate")),
    Format("megengine-static", "MegEngine static-graph profile (trace.get_profile() / load_and_run --profile JSON)",
           extensions=(),
           reader="traceconv.readers.megengine_static:read", sniff="traceconv.readers.megengine_static:sniff",
           aliases=("mge-static",)),
    # Timeline dialects of Chrome Trace Event JSON (each a delta on traceconv.readers.chrome.reader);
    # Composer before Kineto (its files hold torch events too); chrome-json stays the generic fallback.
    Format("composer", "MosaicML Composer profiler trace (per-rank JSON array, merged trace, torch traces)",
           extensions=(".json",),
           reader="traceconv.readers.chrome.composer:read", sniff="traceconv.readers.chrome.composer:sniff",
           aliases=("mosaicml",)),
    Format("kineto", "PyTorch profiler / Kineto trace (*.pt.trace.json[.gz], export_chrome_trace)",
           extensions=(".pt.trace.json", ".pt.trace.json.gz"),
           reader="traceconv.readers.chrome.kineto:read", sniff="traceconv.readers.chrome.kineto:sniff",
           aliases=("pytorch", "torch", "pt")),
    Format("mxnet", "Apache MXNet profiler trace (profiler.dump(), incl. truncated continuous dumps)",
           extensions=("profile.json",),
           reader="traceconv.readers.chrome.mxnet:read", sniff="traceconv.readers.chrome.mxnet:sniff",
           aliases=("mxnet-trace",)),
    Format("megengine", "MegEngine profiler chrome timeline (<pid>.chrome_timeline.json)",
           extensions=(".chrome_timeline.json",),
           reader="traceconv.readers.chrome.megengine:read",
           sniff="traceconv.readers.chrome.megengine:sniff", aliases=("mge", "megengine-timeline")),
    Format("chrome-json", "Chrome Trace Event JSON (chrome://tracing, Perfetto legacy JSON, viztracer, ...)",
           extensions=(".json", ".json.gz"),
           reader="traceconv.readers.chrome.reader:read", sniff="traceconv.readers.chrome.reader:sniff",
           writer="traceconv.writers.chrome_json:write", aliases=("json", "chrome")),
    Format("perfetto", "Perfetto TrackEvent protobuf trace (reads back only what traceconv wrote: "
           "recordings, conversions, merges)",
           extensions=(".pftrace", ".perfetto-trace", ".pb", ".pftrace.gz", ".perfetto-trace.gz"),
           reader="traceconv.readers.pftrace:read", sniff="traceconv.readers.pftrace_head:sniff",
           claims="traceconv.readers.pftrace_head:claims",
           writer="traceconv.writers.perfetto:write", aliases=("pftrace", "proto", "protobuf")),
    Format("perfetto-archive", "Perfetto merge archive (a TAR of one .pftrace per rank file and the clock "
           "offsets in perfetto_manifest.json, which trace_processor v58+ merges)",
           extensions=(".tar",), writer="traceconv.writers.archive:write_archive", archive=True,
           aliases=("archive", "tar")),
)


def _by_name() -> dict[str, Format]:
    table: dict[str, Format] = {}
    for f in FORMATS:
        table[f.name] = f
        for a in f.aliases:
            table.setdefault(a, f)
    return table


def reader_names() -> list[str]:
    return [f.name for f in FORMATS if f.reader]


def writer_names(merge: bool = False) -> list[str]:
    """The formats a conversion writes; with ``merge``, also those only a merge writes (archives)."""
    return [f.name for f in FORMATS if f.writer and (merge or not f.archive)]


def get(name: str, *, role: str, merge: bool = False) -> Format:
    """The format called ``name`` that can do ``role`` ("reader" or "writer"); an archive format
    only for a ``merge``."""
    table = _by_name()
    f = table.get(name.lower())
    names = reader_names() if role == "reader" else writer_names(merge)
    if f is None:
        raise TraceconvError(f"unknown format '{name}'{did_you_mean(name, names)}; "
                             f"known: {', '.join(names)}")
    if getattr(f, role) is None:
        raise TraceconvError(f"traceconv cannot {'read' if role == 'reader' else 'write'} the "
                             f"'{f.name}' format; it {'reads' if role == 'reader' else 'writes'}: "
                             f"{', '.join(names)}")
    if role == "writer" and f.archive and not merge:
        _archive_refused(f)
    return f


def _archive_refused(f: Format, path: str | Path | None = None) -> None:
    raise TraceconvError(f"a {f.name} holds one trace per rank file: only a merge writes it; a "
                         f"conversion writes {', '.join(writer_names())}", path=path)


FOREIGN_PERFETTO = ("this is already a Perfetto protobuf trace, not one traceconv wrote: traceconv converts into "
                    "Perfetto's format, not out of it (that is Perfetto's own traceconv); open it in "
                    "ui.perfetto.dev, or with 'traceconv open'")


def detect(head: bytes, path: str | Path) -> Format:
    """The reader format of a file, from its content (not its name)."""
    for f in FORMATS:
        if f.reader and f.claims and f.load("claims")(head):
            return f
    for f in FORMATS:
        if f.reader and f.sniff and f.load("sniff")(head):
            return f
    if looks_like_perfetto(head):
        raise TraceconvError(FOREIGN_PERFETTO, path=path)
    raise TraceconvError("cannot tell what format this file is; name it with {opt:from_format} "
                         f"(one of: {', '.join(reader_names())})", path=path)


def looks_like_perfetto(head: bytes) -> bool:
    """A Perfetto trace: TracePacket records (field 1, length-delimited) that parse as such."""
    from .readers.pftrace_head import packets
    packet = next(packets(head), (b"", 0))[0]
    if not packet:
        return False
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    try:
        pb.TracePacket.FromString(packet)
    except Exception:      # noqa: BLE001 (any parse failure means: not a packet)
        return False
    return True


def for_output(path: str | Path, to: str | None = None, *, merge: bool = False) -> Format:
    """The writer format for an output path: ``to`` if given, else from the file name; an archive
    format only for a ``merge``."""
    if to:
        return get(to, role="writer", merge=merge)
    name = Path(path).name.lower()
    best: Format | None = None
    best_len = 0
    for f in FORMATS:
        if not f.writer:
            continue
        for ext in f.extensions:
            if name.endswith(ext) and len(ext) > best_len:
                best, best_len = f, len(ext)
    if best is not None and best.archive and not merge:
        _archive_refused(best, path)
    if best is None:
        exts = sorted({e for f in FORMATS if f.writer and (merge or not f.archive) for e in f.extensions})
        raise TraceconvError("cannot tell the output format from the file name; use {opt:to_format} "
                             f"({', '.join(writer_names(merge))}) or an extension: {', '.join(exts)}",
                             path=path)
    return best
