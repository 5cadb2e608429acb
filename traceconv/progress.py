"""Progress reporting without threading a callback through every reader and writer.

The CLI installs a reporter with :func:`reporting`; library code calls :func:`report`
(cheap and silent when nobody listens) at stage changes and every few thousand events.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Callable, Iterator

Reporter = Callable[[str, int, "int | None"], None]
_current: ContextVar[Reporter | None] = ContextVar("traceconv_progress", default=None)
EVERY = 1 << 16


@contextlib.contextmanager
def reporting(fn: Reporter | None) -> Iterator[None]:
    token = _current.set(fn)
    try:
        yield
    finally:
        _current.reset(token)


def report(stage: str, done: int = 0, total: int | None = None) -> None:
    fn = _current.get()
    if fn is not None:
        fn(stage, done, total)
