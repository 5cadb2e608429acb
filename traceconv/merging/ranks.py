"""The per-rank work, run where a rank's file is read (a pool process, a Dask worker): read it,
filter it, take its alignment features; later cut it to the window and encode it."""

from __future__ import annotations

import copy
import io
import os
from typing import Callable

from ..api import load, save
from ..errors import Diagnostics
from ..model import Trace
from ..model.layout import nest
from ..writers import perfetto
from .align import Loaded, _collectives, _steps
from .combine import _filter, named_span


def load_rank(path, fmt: str | None, drop_cats: frozenset[str], min_dur: int,  # noqa: ANN001
              window_name: str | None = None) -> Loaded:
    """Read one file, apply the category and duration filters, and take what alignment needs
    (read with ``threads=False``, as it is encoded: the engine's workers keep the cores busy)."""
    trace = load(path, fmt, threads=False)
    coll = _collectives(trace)
    steps = _steps(trace)
    dropped = _filter(trace, drop_cats, min_dur) if drop_cats or min_dur else {}
    item = Loaded(path, trace, coll, dropped, steps, events=trace.event_count())
    if window_name is not None:
        span = named_span(trace, window_name)
        if span is not None:
            item.named[window_name] = span
    item.time_range = trace.time_range()
    return item


def features(item: Loaded) -> Loaded:
    """The same, with a stub trace holding only the metadata: what travels to the client."""
    stub = Trace(item.trace.meta.source_format)
    stub.meta = copy.deepcopy(item.trace.meta)       # a copy even where nothing is pickled (threads)
    stub.diagnostics.extend(item.trace.diagnostics)
    return Loaded(item.path, stub, item.collectives, item.dropped, item.steps, item.events, item.named,
                  item.time_range)


def sequence_of(item: Loaded, k: int, files: int, spool: str | None = None) -> Loaded:
    """The rank's events encoded where they were read, as packet sequence ``k`` of a merged
    .pftrace of ``files`` files (:func:`traceconv.writers.perfetto.encode_sequence`): its own
    sequence id, track uuids ``id * files + k + 1`` and flow ids ``(i + 1) * files + k``, unique in
    the file.  Its clock starts at its own first event; the merged file's first packet of the
    sequence moves it by the rank's offset, so it is encoded before the offsets are known.  With
    ``spool`` (a folder of this machine) the packets go to a file there instead of travelling back
    in memory.  Returns the features with a stub trace that keeps the tracks (for their descriptors)."""
    trace = item.trace
    nest(trace)
    uuids = [t.id * files + k + 1 for t in trace.tracks]
    file = os.path.join(spool, f"rank-{k}.seq") if spool is not None else None
    seq = perfetto.encode_sequence(trace, perfetto.SEQ_ID + 1 + k, uuids, (files, k), threads=False, file=file)
    out = features(item)                 # (after encoding: with what nesting and writing noted)
    stub = out.trace
    stub.processes, stub.threads, stub.tracks = trace.processes, trace.threads, trace.tracks
    out.sequence, out.uuids, out.slices = seq, uuids, len(trace.slices)
    return out


def load_sequence(path, fmt: str | None, drop_cats: frozenset[str], min_dur: int,  # noqa: ANN001
                  k: int, files: int, spool: str | None = None) -> Loaded:
    """:func:`load_rank` then :func:`sequence_of`: only the encoded events (or, with ``spool``, the
    name of their file) and the stub travel."""
    return sequence_of(load_rank(path, fmt, drop_cats, min_dur), k, files, spool)


def cut_sequence(item: Loaded, offset: int, window: tuple[int, int] | None, k: int, files: int,
                 spool: str | None = None) -> tuple[Loaded, dict[str, int]]:
    """:func:`finish_rank` then :func:`sequence_of`: the rank cut to ``window`` (the second pass,
    once every offset is known) and encoded as sequence ``k``; with what the window left out."""
    _, dropped = finish_rank(item, offset, window)
    return sequence_of(item, k, files, spool), dropped


def reload_cut_sequence(path, fmt: str | None, drop_cats: frozenset[str], min_dur: int,  # noqa: ANN001
                        offset: int, window: tuple[int, int] | None, k: int, files: int,
                        spool: str | None = None) -> tuple[Loaded, dict[str, int]]:
    """:func:`cut_sequence` on the file read again (the features are known already)."""
    return cut_sequence(_reread(path, fmt, drop_cats, min_dur), offset, window, k, files, spool)


def finish_rank(item: Loaded, offset: int, window: tuple[int, int] | None) -> tuple[Trace, dict[str, int]]:
    """The rank's trace cut to ``window`` (in the merged time: the rank's times plus ``offset``),
    and what the cut left out."""
    trace = item.trace
    dropped: dict[str, int] = {}
    if window is not None:
        dropped = _filter(trace, frozenset(), 0, (window[0] - offset, window[1] - offset))
    return trace, dropped


def noted(trace: Trace, write: Callable[[], object]) -> Diagnostics:
    """What ``write`` (nesting and encoding ``trace``) adds to its diagnostics: a merge archive's
    result counts it, as a merged trace's does (the moves to overlap lanes, say)."""
    before = {key: w.count for key, w in trace.diagnostics.items.items()}
    write()
    added = Diagnostics()
    for key, w in trace.diagnostics.items.items():
        added.warn(w.code, w.message, w.count - before.get(key, 0))
    return added


def encode_rank(item: Loaded, offset: int, window: tuple[int, int] | None,
                file: str | None = None) -> tuple[bytes | None, int, dict[str, int], Diagnostics]:
    """The rank's trace cut to ``window`` as a .pftrace (a merge archive's file: the manifest carries
    the offset), written to ``file`` (a worker of this machine) or returned as bytes (None with a
    file); its slice count and what the window left out, as the merged trace counts them; and what
    the encoding noted (see :func:`noted`)."""
    trace, dropped = finish_rank(item, offset, window)
    buf = io.BytesIO() if file is None else None

    def write() -> None:
        if file is not None:
            save(trace, file, "perfetto", threads=False)
        else:
            perfetto.write(trace, buf, threads=False)      # (it nests the slices first, as save does)

    notes = noted(trace, write)
    return (buf.getvalue() if buf is not None else None), len(trace.slices), dropped, notes


def archive_entry(item: Loaded, file: str) -> Loaded:
    """The rank's trace written where it was read, as the .pftrace ``file`` of a merge archive (with
    a window, which needs every rank's offset first, :func:`encode_rank` writes it instead).
    Returns the features (with what the encoding noted) and the slice count."""
    trace = item.trace
    save(trace, file, "perfetto", threads=False)
    out = features(item)
    out.slices = len(trace.slices)
    return out


def load_archive_entry(path, fmt: str | None, drop_cats: frozenset[str], min_dur: int,  # noqa: ANN001
                       file: str) -> Loaded:
    """:func:`load_rank` then :func:`archive_entry`: only the features and the file's name travel."""
    return archive_entry(load_rank(path, fmt, drop_cats, min_dur), file)


def load_features(path, fmt: str | None, drop_cats: frozenset[str], min_dur: int,  # noqa: ANN001
                  window_name: str | None = None) -> Loaded:
    """:func:`load_rank` whose trace is dropped where it was read (the second pass reads it again)."""
    return features(load_rank(path, fmt, drop_cats, min_dur, window_name))


def reload_finish(path, fmt: str | None, drop_cats: frozenset[str], min_dur: int,  # noqa: ANN001
                  offset: int, window: tuple[int, int] | None) -> tuple[Trace, dict[str, int]]:
    """:func:`finish_rank` on the file read again: memory holds one rank at a time."""
    return finish_rank(_reread(path, fmt, drop_cats, min_dur), offset, window)


def reload_encode(path, fmt: str | None, drop_cats: frozenset[str], min_dur: int,  # noqa: ANN001
                  offset: int, window: tuple[int, int] | None,
                  file: str | None = None) -> tuple[bytes | None, int, dict[str, int], Diagnostics]:
    """:func:`encode_rank` on the file read again."""
    return encode_rank(_reread(path, fmt, drop_cats, min_dur), offset, window, file)


def _reread(path, fmt: str | None, drop_cats: frozenset[str], min_dur: int) -> Loaded:  # noqa: ANN001
    """The file read and filtered again for the second pass, without the alignment features the
    first pass already took (the collectives' args, the steps)."""
    trace = load(path, fmt, threads=False)
    if drop_cats or min_dur:
        _filter(trace, drop_cats, min_dur)
    return Loaded(path, trace, {}, events=trace.event_count())
