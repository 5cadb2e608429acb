"""traceconv: profiler outputs of ML frameworks → Perfetto / Chrome trace timelines.

Not Perfetto's own ``traceconv`` binary (which converts *out of* Perfetto's format).

>>> import traceconv
>>> trace = traceconv.load("tests/fixtures/mlagents/csharp_3DBall_timers.json")
>>> trace.meta.source_format
'mlagents'
"""

__version__ = "0.1.0"

from .errors import ConversionWarning, Diagnostics, TraceconvError, WarningCode  # noqa: E402

__all__ = [
    "__version__", "load", "save", "convert", "merge", "summary", "open_in_ui", "ConvertResult", "Trace",
    "TraceconvError", "ConversionWarning", "Diagnostics", "WarningCode",
]

# ``import traceconv`` is light (a command's ``--help`` must not wait for numpy or pydantic): the API
# is imported when first used.  The recorder's most used names are at the top level too
# (``with traceconv.span("env_step"): ...``, ``@traceconv.traced``), and importing traceconv does not
# start it.
_LAZY = {
    "load": ("api", "load"), "save": ("api", "save"), "convert": ("api", "convert"),
    "open_in_ui": ("api", "open_in_ui"), "ConvertResult": ("api", "ConvertResult"),
    "Trace": ("model", "Trace"), "merge": ("merging", "merge"), "summary": ("hotspots", "summarize"),
    "span": ("record", "span"), "traced": ("record", "traced"), "instant": ("record", "instant"),
    "counter": ("record", "counter"),
}


def __getattr__(name: str):  # noqa: ANN202
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'traceconv' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
