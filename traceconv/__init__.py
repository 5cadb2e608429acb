"""traceconv: profiler outputs of ML frameworks → Perfetto / Chrome trace timelines.

Not Perfetto's own ``traceconv`` binary (which converts *out of* Perfetto's format).

>>> import traceconv
>>> trace = traceconv.load("tests/fixtures/mlagents/csharp_3DBall_timers.json")
>>> trace.meta.source_format
'mlagents'
"""

__version__ = "0.1.0"

from .api import ConvertResult, convert, load, open_in_ui, save  # noqa: E402
from .errors import ConversionWarning, Diagnostics, TraceconvError, WarningCode  # noqa: E402
from .model import Trace  # noqa: E402
# The merge's package (``traceconv.merge``) first, then its function in its place (importing
# ``traceconv.merge`` later would otherwise rebind the name to the package).
from . import merge as _merge_package  # noqa: E402,F401
from .merge import merge  # noqa: E402
from .hotspots import summarize as summary  # noqa: E402

__all__ = [
    "__version__", "load", "save", "convert", "merge", "summary", "open_in_ui", "ConvertResult", "Trace",
    "TraceconvError", "ConversionWarning", "Diagnostics", "WarningCode",
]

# The recorder's most used names at the top level (``with traceconv.span("env_step"): ...``,
# ``@traceconv.traced``), imported when first used: ``import traceconv`` does not start it.
_RECORD_NAMES = ("span", "traced", "instant", "counter")


def __getattr__(name: str):  # noqa: ANN202
    if name in _RECORD_NAMES:
        from . import record
        return getattr(record, name)
    raise AttributeError(f"module 'traceconv' has no attribute {name!r}")
