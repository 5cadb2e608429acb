"""Record real timelines: spans, instants, counters and flows written straight to Perfetto.

>>> import traceconv.record as rec
>>> rec.start(path)                          # doctest: +SKIP
>>> with rec.span("env_step", cat="rollout", frames=4): ...     # doctest: +SKIP
>>> rec.stop()                               # doctest: +SKIP

``TRACECONV_RECORD=run.pftrace`` in the environment starts recording at import;
``TRACECONV_RECORD=0`` turns it off (every span is then a shared no-op object).
The drop-in faces of other timers live in :mod:`traceconv.record.mlagents`,
:mod:`traceconv.record.samplefactory` and :mod:`traceconv.record.torch`.
"""

from ._core import (  # noqa: F401
    NULL_SPAN, Recorder, Span, counter, disable, enable, flush, instant, measure_anchor, name_process,
    name_thread, new_flow, recorder, recording, span, start, stop, traced,
)
from ._core import _from_environment

__all__ = ["start", "stop", "flush", "span", "traced", "instant", "counter", "new_flow", "name_process",
           "name_thread", "disable", "enable", "recording", "recorder", "merge", "read"]


def merge(inputs, output):  # noqa: ANN001,ANN201
    """Merge recorded shards (a folder, files) into one timeline at ``output``."""
    from .merge import merge as _merge
    return _merge(inputs, output)


def read(path):  # noqa: ANN001,ANN201
    """A recorded file (.pftrace written by traceconv, or any format traceconv reads) as a Trace."""
    from .merge import read_any
    return read_any(path)


_from_environment()
