"""The one error type for user errors, and the typed warnings of lossy conversions.

A :class:`TraceconvError` is raised for anything the *user* can fix: an unreadable
file, a file of the wrong shape, an unknown format name, an output that would
overwrite an input.  The CLI turns it into one line on stderr and its ``exit_code``: 2, or 3
when the system refused a file operation (disk full, permission denied, read-only file system).
Bugs are ordinary exceptions and keep their traceback (exit code 70).  A signal that stops the
command raises :class:`Stopped` so that temporary files are removed (exit code 128 + signum).

A conversion that cannot keep everything does not fail: it records a
:class:`ConversionWarning` (a code, a message and a count) in a
:class:`Diagnostics` object.  Nothing is ever dropped without being counted.
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Mapping


# The exit codes of the ``traceconv`` command (see traceconv_cli/app.py main()).
EXIT_OK = 0              # done
EXIT_PROBLEMS = 1        # ``validate`` found problems (nothing else exits 1)
EXIT_USAGE = 2           # a user error: bad arguments, an unreadable or malformed input, a bad output name
EXIT_ENVIRONMENT = 3     # the system refused a file operation: disk full, permission denied, read-only
#                          file system, I/O error (nothing half-written is left behind)
EXIT_BUG = 70            # an internal error (a bug: a traceback is printed); BSD's EX_SOFTWARE
EXIT_SIGNAL_BASE = 128   # stopped by a signal: 128 + its number (SIGINT 130, SIGTERM 143, SIGHUP 129;
#                          141 when the reader of standard output went away)


_OPTION = re.compile(r"\{opt:(\w+)\}")   # a parameter named in a message (see TraceconvError)


def spell(text: str, options: Mapping[str, str] | None = None) -> str:
    """``text`` with each parameter it names as ``{opt:name}`` spelled: as ``options`` spells it (a
    front end's own words: the CLI's ``--rank``), else as the parameter's name (``rank_map``)."""
    names = options or {}
    return _OPTION.sub(lambda m: names.get(m.group(1), m.group(1)), text)


def _escaped(text: str) -> str:
    """``text`` (a file's name, the keys of a place in it, a warning naming a thread) with each
    character that is not printable written as its escape (``\\n``, ``\\x1b``, ``\\u2028``): such
    names can hold a newline, and an error or a warning stays one line (a fuzz case: an MXNet stats
    key holding one)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


SHOWN_CHARS = 60     # of a value from the input that a message quotes (a name, a phase, a key)


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` from the input as a message quotes it: whole up to ``limit`` characters, else its
    start and its length.  (A fuzz case's 70,000-character phase made a 140,000-character warning
    and an 8,000-line ``validate`` table; each distinct long name its own warning line.)"""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def count(n: int, what: str, grouped: bool = False) -> str:
    """``n`` and ``what`` for a message: plural unless ``n`` is 1 (``1 slice``, ``3 slices``);
    ``grouped``: the digits in groups of three (``1,156 events``)."""
    number = f"{n:,}" if grouped else str(n)
    return f"{number} {what}" if n == 1 else f"{number} {what}s"


class TraceconvError(Exception):
    """A problem with the user's input, arguments or output path.

    ``str(err)`` is the one-line message: ``<file>: <where>: <what is wrong>``.
    ``exit_code`` is what the command exits with: :data:`EXIT_USAGE` (2) unless the
    environment refused (:data:`EXIT_ENVIRONMENT`, 3: disk full, permission denied, ...).

    The library speaks of its own parameters, not of any command's flags: a message names a
    parameter as ``{opt:from_format}``, which ``str(err)`` shows as the parameter's name and a
    front end shows as its own spelling (:meth:`one_line` with ``options``: the CLI's ``--from``;
    see :func:`spell`).  Warnings, a merge's counts of what its filters left out and a summary's
    notes name parameters the same way.
    """

    def __init__(self, message: str, *, path: str | Path | None = None, where: str | None = None,
                 exit_code: int = EXIT_USAGE):
        self.message = message
        self.path = str(path) if path is not None else None
        self.where = where
        self.exit_code = exit_code
        super().__init__(self.one_line())

    def one_line(self, options: Mapping[str, str] | None = None) -> str:
        """The message on one line; ``options`` spells the parameters it names (``{opt:name}``)."""
        parts = [_escaped(p) for p in (self.path, self.where) if p]
        text = " ".join(spell(self.message, options).split())  # never more than one line
        return ": ".join([*parts, text])

    def with_path(self, path: str | Path) -> "TraceconvError":
        """The same error, naming ``path`` if it did not name a file yet."""
        if self.path is None:
            return TraceconvError(self.message, path=path, where=self.where, exit_code=self.exit_code)
        return self


class Stopped(BaseException):
    """A signal stopped the command (SIGTERM, SIGHUP, SIGINT), or the reader of its output went away
    (SIGPIPE).  A BaseException, like KeyboardInterrupt: every ``finally`` block runs on the way out
    (temporary files removed) and no ``except Exception`` swallows it.  ``exit_code`` is 128 + signum."""

    def __init__(self, signum: int, what: str = ""):
        self.signum = signum
        self.exit_code = EXIT_SIGNAL_BASE + signum
        super().__init__(what or f"stopped by signal {signum}")


_held = 0                    # how many signals_held() blocks are open in the main thread
_pending: list[int] = []     # the stop signals that came meanwhile


@contextlib.contextmanager
def signals_held() -> "Iterator[None]":
    """Stop signals wait until the block ends, then raise :class:`Stopped`: for the few steps that
    must not be cut midway (loading the compiled core and NumPy's C API, creating a temporary
    output).  The command line's signal handler asks :func:`hold_signal` first.  Only the main
    thread counts: Python runs signal handlers there and nowhere else, so another thread's block
    is never cut, and must neither hold the main thread's signals nor race on the count."""
    global _held
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending:
            raise Stopped(_pending.pop())


def hold_signal(signum: int) -> bool:
    """Inside :func:`signals_held`: keep ``signum`` for the block's end (True); else False."""
    if _held:
        _pending.append(signum)
    return bool(_held)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` or an empty string."""
    close = difflib.get_close_matches(word.lower(), list(choices), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


class WarningCode(str, enum.Enum):
    """Every way a conversion can change or drop something.  Stable names: scripts may match on them."""

    OVERLAP_LANES = "overlap-lanes"          # overlapping slices moved to extra tracks (kept, not dropped)
    CHILDREN_EXCEED_PARENT = "children-exceed-parent"  # aggregate tree: children longer than their parent
    DROPPED_EVENT = "dropped-event"          # an input event that could not be represented
    UNKNOWN_PHASE = "unknown-phase"          # trace event with a phase traceconv does not know
    UNMATCHED_BEGIN = "unmatched-begin"      # a begin without an end: closed at the end of the trace
    UNMATCHED_END = "unmatched-end"          # an end without a begin
    UNRESOLVED_FLOW = "unresolved-flow"      # a flow endpoint that binds to no slice
    REMAPPED_ID = "remapped-id"              # pid/tid out of the viewers' range, given a new number
    TRUNCATED_INPUT = "truncated-input"      # input ended early; what was complete was kept
    CLAMPED_VALUE = "clamped-value"          # a value out of range, changed to fit
    NOTE = "note"                            # lossless, but worth knowing


@dataclass
class ConversionWarning:
    code: WarningCode
    message: str
    count: int = 1

    def one_line(self, options: Mapping[str, str] | None = None) -> str:
        """``code: message (count)``; ``options`` spells the parameters it names (see :func:`spell`)."""
        return f"{self.code.value}: {_escaped(spell(self.message, options))} ({self.count})"      # (one line)

    def __str__(self) -> str:
        return self.one_line()


@dataclass
class Diagnostics:
    """Counts what a reader or writer changed or dropped, grouped by (code, message)."""

    items: dict[tuple[WarningCode, str], ConversionWarning] = field(default_factory=dict)

    def warn(self, code: WarningCode, message: str, count: int = 1) -> None:
        if count <= 0:
            return
        key = (code, message)
        item = self.items.get(key)
        if item is None:
            self.items[key] = ConversionWarning(code, message, count)
        else:
            item.count += count

    def extend(self, other: "Diagnostics") -> None:
        for w in other.items.values():
            self.warn(w.code, w.message, w.count)

    @property
    def warnings(self) -> list[ConversionWarning]:
        return list(self.items.values())

    def lossy(self) -> list[ConversionWarning]:
        """Warnings that mean something was dropped or changed (not mere notes)."""
        return [w for w in self.items.values() if w.code is not WarningCode.NOTE]

    def summary(self) -> str:
        """One line: ``3 warnings: overlap-lanes: ... (12); ...`` or an empty string."""
        ws = self.warnings
        if not ws:
            return ""
        return f"{len(ws)} warning{'s' if len(ws) != 1 else ''}: " + "; ".join(str(w) for w in ws)

    def __bool__(self) -> bool:
        return bool(self.items)
