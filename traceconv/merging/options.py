"""The merge's options as values: durations, rank sets, the rank of a file, time windows.

The CLI passes the user's strings; these parse them once, and the rest of the merge takes the
parsed values."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Iterable, Iterator, Sequence

from ..errors import TraceconvError
from ..remote import URL, as_url, is_url

ALIGN_METHODS = ("auto", "none", "wallclock", "barrier", "collectives")
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_RANGE = re.compile(r"\s*([0-9.]+\s*(?:ns|us|µs|ms|s))\s*:\s*([0-9.]+\s*(?:ns|us|µs|ms|s))\s*")


def parse_duration(text: str) -> int:
    """``5us``, ``1.5ms``, ``2s``, ``300ns`` → ns."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s)\s*", text)
    if not m:
        raise TraceconvError(f"'{text}' is not a duration; write it with a unit, e.g. 5us, 1.5ms, 2s")
    return round(float(m.group(1)) * _UNITS[m.group(2)])


RANK_MAX = 2**31 - 1          # ranks are 0..2^31-1 (what a pid-like id and Perfetto's int32 fields hold)


class RankSet(AbstractSet[int]):
    """The ranks ``--ranks`` keeps: a few ranges, never materialized (``0-2147483647`` is 16 bytes).

    It is a read-only set: ``in``, ``len``, iteration in order, ``==`` with other sets."""

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        merged: list[list[int]] = []
        for a, b in sorted(ranges):
            if merged and a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.ranges = [(a, b) for a, b in merged]     # inclusive, disjoint, sorted

    @classmethod
    def _from_iterable(cls, it: Iterable[int]) -> frozenset[int]:    # results of set operators
        return frozenset(it)

    def __contains__(self, r: object) -> bool:
        return isinstance(r, int) and any(a <= r <= b for a, b in self.ranges)

    def __len__(self) -> int:
        return sum(b - a + 1 for a, b in self.ranges)

    def __iter__(self) -> Iterator[int]:
        for a, b in self.ranges:
            yield from range(a, b + 1)

    def __repr__(self) -> str:
        return "RankSet(" + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.ranges) + ")"


def _rank_number(text: str, what: str) -> int:
    digits = text.lstrip("0") or "0"
    if len(digits) > 10 or int(digits) > RANK_MAX:
        raise TraceconvError(f"{what}: rank {text[:24]}{'...' if len(text) > 24 else ''} is out of range "
                             f"(ranks are 0..{RANK_MAX})")
    return int(text)


def parse_ranks(text: str) -> RankSet:
    """``0-3,5`` → {0, 1, 2, 3, 5} (a :class:`RankSet`: ranges are checked, never materialized)."""
    out: list[tuple[int, int]] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part, re.ASCII)
        if not m:
            raise TraceconvError(f"{{opt:ranks}}: '{part.strip()[:40]}' is not a rank or a range like 0-3")
        a = _rank_number(m.group(1), "{opt:ranks}")
        b = _rank_number(m.group(2), "{opt:ranks}") if m.group(2) else a
        if b < a:
            raise TraceconvError(f"{{opt:ranks}}: empty range '{part.strip()}'")
        out.append((a, b))
    return RankSet(out)



def _key(path: str) -> Path | URL:
    """How a file is named in a rank map: a URL as it is, a local path resolved."""
    if is_url(path):
        u = as_url(path)
        return u if isinstance(u, URL) else Path(u).resolve()
    return Path(path).resolve()


def parse_rank_map(items: Sequence[str]) -> dict[Path | URL, int]:
    out: dict[Path | URL, int] = {}
    for item in items:
        path, sep, num = item.rpartition("=")
        num = num.strip()
        if not sep or not path or not num.isdigit() or not num.isascii():
            raise TraceconvError(f"{{opt:rank_map}} takes FILE=N, not '{item[:200]}'")
        out[_key(path)] = _rank_number(num, f"{{opt:rank_map}} {path}")
    return out


@dataclass(frozen=True)
class Window:
    """A time window: ``name`` (the span of every slice of that name, over all ranks), or
    ``start_ns``..``end_ns`` counted from the merged trace's first event."""

    name: str | None = None
    start_ns: int = 0
    end_ns: int = 0

    def __str__(self) -> str:
        return self.name if self.name is not None else f"{self.start_ns}ns:{self.end_ns}ns"


def parse_window_spec(text: str) -> Window:
    """``A:B`` (durations, e.g. ``1.5s:2s``) or a slice name (``ProfilerStep#4``)."""
    m = _RANGE.fullmatch(text)
    if m:
        a, b = parse_duration(m.group(1)), parse_duration(m.group(2))
        if b <= a:
            raise TraceconvError(f"{{opt:window}} '{text}' is empty")
        return Window(None, a, b)
    return Window(text)
