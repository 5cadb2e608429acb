"""The one in-memory timeline model.

Readers build a :class:`Trace`; writers consume it; neither knows the other.

Shape, chosen for tens of millions of events:

* Processes, threads and tracks are few and are ordinary objects.
* Events are *columns*: one ``array.array`` per field (timestamps, durations,
  track ids, interned name and category ids), so a slice costs
  ``8 + 8 + 4 + 4 + 4`` bytes of columns plus one offset (8 bytes) for its
  args: **36 bytes per slice** when it has no args; args are kept as the
  compact JSON text of an object, packed into one buffer per table
  (:class:`ArgsColumn`), which is what the Chrome JSON writer copies out
  verbatim and what the Perfetto writer transcodes.
* Strings (event names, categories) are interned once in a :class:`StringTable`.
* Timestamps and durations are integer **nanoseconds**.  ``Trace.meta.clock``
  says what they count from (Unix epoch, or a synthesized zero).  Every trace the
  loader returns lies in one time domain, ``[0, MAX_TIME_NS]`` (2^62 ns), and its args
  and metadata are strict JSON: see :func:`enforce_time_domain` and :func:`strict_args`.

The package: :mod:`.trace` (the trace and its tables), :mod:`.args` (the args column),
:mod:`.layout` (nesting, lanes and the event order the writers stream; imported on use).
"""

from .args import (MAX_ARGS_DEPTH, ArgsColumn, decode_args, encode_args, encode_args_counted,
                   strict_args)
from .trace import (INT32_MAX, MAX_DUR_NS, MAX_TIME_NS, Clock, CounterTable, FlowTable, InstantScope,
                    InstantTable, Process, SliceTable, StringTable, Thread, Trace, TraceMeta, Track,
                    TrackKind, enforce_time_domain)

__all__ = [
    "MAX_ARGS_DEPTH", "ArgsColumn", "decode_args", "encode_args", "encode_args_counted", "strict_args",
    "INT32_MAX", "MAX_DUR_NS", "MAX_TIME_NS", "Clock", "CounterTable", "FlowTable", "InstantScope",
    "InstantTable", "Process", "SliceTable", "StringTable", "Thread", "Trace", "TraceMeta", "Track",
    "TrackKind", "enforce_time_domain",
]
