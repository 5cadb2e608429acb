"""Merge the traces of many ranks into one aligned timeline (``traceconv merge``).

1. **Inputs**: files, directories (their ``*.json`` / ``*.json.gz`` files) and globs; any
   format traceconv reads; parsed in parallel, one worker per core.
2. **Rank of each file**: an explicit ``--rank FILE=N``; else what the file says
   (Kineto ``distributedInfo.rank``, Composer ``global_rank``); else its name
   (``rank3``, ``rank-3``, ``rank_3``, ``.3.pt.trace``), but never the pid or the timestamp of
   ``tensorboard_trace_handler``'s default name ``<host>_<pid>.<time_ns>.pt.trace.json``; else
   the order of the files: the smallest ranks no other file claims, with a note naming the file.
   Two files of one format claiming one rank is an error naming both.  Ranks are 0..2^31-1.
3. **One namespace per rank**: each rank's processes become processes of their own,
   named ``rank 3 · python3 (pid 4242)`` / ``rank 3 · GPU 1``, ordered by rank, host before
   devices.  Flows are links between slices of the model, so no arrow can join two
   ranks; raw correlation/flow ids stay in the args untouched.
4. **Clock alignment** (an offset per rank, added to its timestamps):

   * ``wallclock``: the files' own absolute time bases as they are (Kineto
     ``baseTimeNanoseconds``, which differs between ranks that straddle a quarter
     boundary, is applied per file by the reader); offset 0, uncertainty unknown.
   * ``barrier``: Composer's ``clock_sync_timestamp_us``, taken between two barriers on
     every rank; rank r moves by ``sync(lowest rank) - sync(r)``, as Composer's own merger
     does, with ``clock_sync_error_bound`` as the uncertainty.
   * ``collectives``: the collectives whose records bracket the communication itself: NCCL
     kernels on the GPU and gloo's own ``gloo:all_reduce`` / ``gloo:barrier`` / ... spans (the
     CPU-side ``c10d::`` ops and ``record_param_comms`` only enqueue the work).  They are matched
     against the reference rank (the lowest) key by key (source, kind, element count), the k-th
     with the k-th, allowing windows that start up to 16 collectives apart: an all-to-all
     collective (all-reduce, all-gather, reduce-scatter, all-to-all, barrier) cannot end on one
     rank before it started on another, which bounds the offset both ways and rules pairings out;
     ``ProfilerStep#N`` marks pick among pairings a period apart.  The offset is the median
     end-time difference, kept inside those bounds; the uncertainty 1.4826 × their median
     absolute deviation (at least 1 µs), or half the bounds' width around it when narrower.
     Each rank reports how many collectives it matched.
   * ``auto``: barrier if every rank has it; else ranks recorded on the reference rank's host
     (Kineto's ``host_name``, or the handler's default file name) keep their times (one clock,
     uncertainty 0); every other host (or rank, when the files do not say) moves by what the
     collectives of all its ranks say against those of the reference's host when at least 3
     matched and they agree within 1 ms, else keeps its wall clock; a rank with no absolute time
     and no collectives is an error.
5. **Filters**: ``--ranks``, ``--window`` (a time range, or the span of a named slice such
   as ``ProfilerStep#4`` over all ranks), ``--min-dur``, ``--drop-cat``.
6. **Archive** (``-o run.tar``): one .pftrace per rank file and a ``perfetto_manifest.json``
   that trace_processor (v58+) merges: see :func:`traceconv.writers.archive.write_archive`.
7. **Where**: inputs and the output may be URLs (``s3://``, ``gs://``, ``az://``, ``http(s)://``),
   read as streams and uploaded whole (:mod:`traceconv.remote`); the per-rank work runs on this
   machine's process pool or on a Dask cluster (:mod:`traceconv.merging.engine`), with the same result.

The modules: :mod:`.options` (parsed options), :mod:`.inputs` (files, globs, URLs, ranks from
names), :mod:`.ranks` (the per-rank work), :mod:`.align` (clock offsets from per-rank features),
:mod:`.combine` (filters, namespaces, offsets), :mod:`.engine` (process pool or Dask),
:mod:`.driver` (the verb).
"""

from __future__ import annotations

from .align import (Alignment, Loaded, Match, align, all_to_all, host_of,  # noqa: F401
                    match_collectives)
from .combine import append_rank, parse_window  # noqa: F401
from .driver import ARCHIVE, MergeResult, merge, rank_of_file  # noqa: F401
from .engine import ENGINES, DaskEngine, LocalEngine, make_engine  # noqa: F401
from .inputs import collect_inputs, handler_name, rank_from_name  # noqa: F401
from .options import (ALIGN_METHODS, RANK_MAX, RankSet, Window, parse_duration,  # noqa: F401
                      parse_rank_map, parse_ranks, parse_window_spec)
