"""The compiled core, ``traceconv._core``, loaded with the stop signals held back.

Loading it also loads NumPy's C API for rust-numpy, which runs Python code and cannot be cut
midway: an exception that a signal handler raises into it becomes a Rust panic instead of a clean
stop.  The library imports the core from here; a SIGTERM that arrives meanwhile stops the command
just after.
"""

from .errors import signals_held

with signals_held():
    from . import _core  # noqa: F401
