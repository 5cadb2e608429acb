"""Byte-level mutation of the real fixtures in tests/fixtures (deterministic for a given seed)."""

from __future__ import annotations

import gzip
import random
import re
from functools import lru_cache
from pathlib import Path

from .strategies import BAD_UTF8, Case

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MAX_BASE = 96 * 1024          # larger fixtures are cut to about this size first (at an event boundary)

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_STRING = re.compile(rb'"(?:name|cat|ph|args|[A-Za-z_ ]{1,20})"\s*:\s*"')
_VALUE = re.compile(rb'"[^"\\]{0,40}"\s*:\s*')
_BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*\{")
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[\s*\{|^\s*\[\s*\{')   # (not a header's own list)
_ARRAY_END = re.compile(rb"\}\s*\]")

NASTY_NUMBERS = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"9.3e18", b"4611686018427387904",
                 b"1180591620717411303424", b"-1", b"-9223372036854775809", b"1e26", b"-0", b"0", b"1e-400",
                 b"99999999999999999999", b"-4611686018427387904"]


@lru_cache(maxsize=None)
def fixtures() -> tuple[Path, ...]:
    return tuple(sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix != ".md"
                        and "fuzz" not in p.relative_to(FIXTURES).parts))


@lru_cache(maxsize=64)
def _content(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _suffix(path: Path) -> str:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    for s in (".pt.trace.json", ".chrome_timeline.json", ".json", ".txt", ".log"):
        if name.endswith(s):
            return s
    return path.suffix or ".txt"


def _base(rng: random.Random, data: bytes) -> bytes:
    """A fixture cut at an event boundary to at most about MAX_BASE bytes, the array closed again."""
    if len(data) <= MAX_BASE:
        return data
    at = data.rfind(b"},", 0, rng.randint(MAX_BASE // 4, MAX_BASE))
    if at < 0:
        return data[:MAX_BASE]
    arr = data.rfind(b"[", 0, 256 * 1024)
    closer = b"]}" if data.lstrip()[:1] == b"{" and arr >= 0 else b"]"
    return data[:at + 1] + b"\n" + closer + b"\n"


def _one(rng: random.Random, d: bytearray) -> str:
    n = len(d)
    op = rng.randrange(13)
    if n == 0:
        d += b"{"
        return "grow"
    i = rng.randrange(n)
    if op == 0:
        d[i] = rng.randrange(256)
        return "byte"
    if op == 1:
        d[i] ^= 1 << rng.randrange(8)
        return "bitflip"
    if op == 2:
        j = min(n, i + rng.choice([1, 2, 8, 64, 1024]))
        del d[i:j]
        return "delete"
    if op == 3:
        j = min(n, i + rng.choice([1, 8, 64, 512]))
        d[i:i] = d[i:j] * rng.choice([1, 2, 16])
        return "duplicate"
    if op == 4:
        del d[i:]
        return "truncate"
    if op == 5:                           # invalid UTF-8 inside a string value or key
        ms = list(_STRING.finditer(d, max(0, i - 4096), min(n, i + 4096)))
        at = ms[rng.randrange(len(ms))].end() if ms else i
        d[at:at] = rng.choice(BAD_UTF8)
        return "bad-utf8"
    if op == 6:                           # a number out of range
        ms = list(_NUMBER.finditer(d, max(0, i - 2048), min(n, i + 2048)))
        if ms:
            m = ms[rng.randrange(len(ms))]
            d[m.start():m.end()] = rng.choice(NASTY_NUMBERS)
        return "number"
    if op == 7:                           # a value nested 1,000+ deep
        ms = list(_VALUE.finditer(d, max(0, i - 4096), min(n, i + 4096)))
        if ms:
            at = ms[rng.randrange(len(ms))].end()
            k = rng.choice([1000, 2000, 5000])
            d[at:at] = (b"[" * k + b"1" + b"]" * k + b",") if rng.random() < 0.5 else b"[" * k
        return "deep"
    if op == 8:                           # a string longer than 64 KiB
        ms = list(_STRING.finditer(d, max(0, i - 4096), min(n, i + 4096)))
        at = ms[rng.randrange(len(ms))].end() if ms else i
        d[at:at] = rng.choice([b"a", b"\xc3\xa9", b"\\u00e9", b"\\\\"]) * rng.choice([33_000, 70_000])
        return "long-string"
    if op == 9:                           # an indented tree line deeper than any before
        k = rng.choice([1000, 1500])
        d[i:i] = b"\n" + b"".join(b"  " * j + b"k: 1.0000\n" for j in range(k))
        return "deep-lines"
    if op == 10:                          # special JSON tokens and separators
        d[i:i] = rng.choice([b"null", b"{}", b"[]", b",", b":", b'"', b"\\", b"\x00", b"}", b"]", b"\n"])
        return "token"
    if op == 11:
        return separator(rng, d, i)
    j = min(n, i + rng.randrange(1, 256))
    k = rng.randrange(n)
    d[k:k] = d[i:j]
    return "splice"


def separator(rng: random.Random, d: bytearray, i: int) -> str:
    """The separators of an event array broken near ``i``: the comma between two events dropped or
    doubled, or one added before the first event or after the last (where a scan call or a block
    of the stream starts or ends, the scanner must still refuse them: the fuzz finds of 2026-11-28).
    What was done, or "separator" if there was no such place."""
    kind = rng.randrange(4)
    if kind < 2:
        ms = list(_BETWEEN_EVENTS.finditer(d, max(0, i - 4096), min(len(d), i + 4096))) or \
            list(_BETWEEN_EVENTS.finditer(d))
        if ms:
            m = ms[rng.randrange(len(ms))]
            c = d.index(b",", m.start(), m.end())
            d[c:c + 1] = b"" if kind == 0 else b",,"
            return "no-comma" if kind == 0 else "two-commas"
    elif kind == 2:
        m = _ARRAY_START.search(d)
        if m:
            at = m.end() - 1                    # (the first event's `{`)
            d[at:at] = b","
            return "leading-comma"
    else:
        ms = list(_ARRAY_END.finditer(d))
        if ms:
            d[ms[-1].start() + 1:ms[-1].start() + 1] = b","
            return "trailing-comma"
    return "separator"


def mutated(rng: random.Random) -> tuple[Case, str]:
    """One mutated fixture: the case and a description (fixture and mutations)."""
    path = rng.choice(fixtures())
    d = bytearray(_base(rng, _content(path)))
    ops = [_one(rng, d) for _ in range(rng.choice([1, 1, 1, 2, 3, 5]))]
    data = bytes(d)
    gz = path.name.endswith(".gz") and rng.random() < 0.3
    suffix = _suffix(path)
    if gz:
        data = gzip.compress(data, mtime=0)
        if rng.random() < 0.3:                 # damage the compressed stream too
            b = bytearray(data)
            b[rng.randrange(10, max(11, len(b)))] ^= 0xFF
            data = bytes(b)
        suffix += ".gz"
    return Case("mutated", suffix, data), f"{path.relative_to(FIXTURES)}: {'+'.join(ops)}"
