"""What the viewers can hold: chrome://tracing's limits, and what a trace takes in a Perfetto UI tab
once trace_processor has loaded it.  ``traceconv validate`` checks a profile against them; ``convert``,
``merge`` and ``open`` note a .pftrace too big for a tab (:func:`too_big_for_a_tab`, light enough
for a command's start: no NumPy, no reader)."""

from __future__ import annotations

import os

from .io import stream_fd
from .remote import is_url

CHROME_MAX_BYTES = 256 * 2**20
CHROME_MAX_EVENTS = 1_000_000
PERFETTO_TAB_BYTES = 2 * 2**30
# What trace_processor holds per event and per args value once a trace is loaded: its resident set
# (v58.2's native build, less its 22 MB at rest) fitted on traceconv's .pftrace of three traces --
# 1M slices without args 162 MB; 500k slices with 8 args each 278 MB; the bench's 1M Kineto events
# with 7.48M args rows 469 MB (each within 6 % of the fit).  Args are most of a Kineto trace's.
PERFETTO_BYTES_PER_EVENT = 160
PERFETTO_BYTES_PER_ARG = 45
LARGE_TRACES = "https://perfetto.dev/docs/visualization/large-traces"
# trace_processor's resident set over the size of traceconv's .pftrace of those traces: 5.0-6.0
# (and 5.0 for the bench's merge of 8 ranks of 250k events: 157 MB, 779 MB once loaded)
PFTRACE_LOADED_RATIO = 6


def too_big_for_a_tab(path: str | os.PathLike[str]) -> str | None:
    """For a local Perfetto trace written by traceconv whose loaded size would pass what a browser
    tab can typically use, a line that says so and what to do instead (Perfetto's own advice);
    None for a smaller file, a URL, standard output or a file that is not there."""
    if is_url(path) or stream_fd(path) is not None:
        return None
    try:
        size = os.stat(path).st_size
    except (OSError, ValueError):
        return None
    need = size * PFTRACE_LOADED_RATIO
    if need <= PERFETTO_TAB_BYTES:
        return None
    return (f"{path} takes about {need / 2**30:,.1f} GB once loaded ({size / 2**20:,.0f} MB of trace), past the "
            f"~2 GB a browser tab can typically use: if ui.perfetto.dev runs out of memory, run "
            f"`trace_processor --httpd {path}` and open ui.perfetto.dev again ({LARGE_TRACES})")
