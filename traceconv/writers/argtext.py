"""Args text that the writers cannot copy or transcode as it is, made writable.

The model's args are JSON object text.  Both writers take almost every row as it is (the Chrome
JSON writer copies it, the Perfetto writer's kernels transcode it); the rare rows below go through
:func:`clean` first, which parses them without recursion and gives a JSON value that every client
loads:

* a value nested more than :data:`MAX_DEPTH` containers deep inside the args object: that
  container is kept as a string holding its JSON text (Perfetto's and Python's protobuf decoders
  stop at 100 nested messages, orjson at 1,024 nested containers, trace_processor's UI draws none
  of it usefully); counted;
* a lone UTF-16 surrogate escape (``"\\ud800"``), which orjson refuses and which makes Perfetto's
  JSON importer drop every arg of the event: U+FFFD; counted;
* a number beyond the double range (``1e400``, an integer of 309+ digits): orjson and Perfetto's
  JSON importer refuse it (Perfetto drops every arg of the event): the nearest double,
  ±1.7976931348623157e308; counted.  (An integer beyond 64 bits but within the double range is
  the nearest double in a rewritten row, what orjson and JavaScript read; a row that is not
  rewritten keeps its digits in the JSON output);
* ``NaN``, ``Infinity``, ``-Infinity`` (not JSON; readers should not let them through): the
  strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; counted;
* text that is not JSON at all: one string arg ``"args"`` holding it; counted;
* bytes that are not UTF-8 (readers should not let them through): U+FFFD; counted;
* an escaped surrogate pair (``"\\ud83d\\ude80"``, valid JSON, which Perfetto's JSON importer
  nevertheless fails on): written as the character's UTF-8 by the JSON writer; lossless, not
  counted;
* a number of 20 or more digits (``0.00003300000000000525``), which Perfetto's JSON importer
  misreads (its mantissa overflows: 0.000425): the JSON writer writes a float as its shortest form
  (the same double, ``3.300000000000525e-05``; in exponent form where the plain one still has 20
  digits: ``2.6199999999998447e-04``; not counted) and an integer beyond 64 bits as the
  nearest double (what orjson and JavaScript read it as).  An integer within uint64 keeps its
  digits (Perfetto's JSON importer misreads those beyond int64; the .pftrace has them exactly).

Everything else (huge integers within JSON's grammar, ``-0``, duplicate keys -- the last value
wins, as in every JSON parser the tests use --, empty keys) is kept.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from ..errors import WarningCode

MAX_DEPTH = 64            # containers inside the args object kept as structure; deeper ones as text
DBL_MAX = 1.7976931348623157e308

DEEP = "args nested deeper than 64 levels: the deeper containers written as strings of their JSON text"
SURROGATE = "args strings with a lone UTF-16 surrogate escape: the surrogate written as U+FFFD"
HUGE = "args numbers beyond the double range: written as +-1.7976931348623157e308"
NON_JSON = "args NaN/Infinity (not JSON): written as the strings \"NaN\"/\"Infinity\"/\"-Infinity\""
INVALID = "args that are not a JSON object: written as one string arg \"args\" holding the text"
UTF8 = "args text that is not UTF-8: the bytes that are not written as U+FFFD"
MESSAGES = {"utf8": UTF8, "deep": DEEP, "surrogate": SURROGATE, "huge": HUGE, "nonjson": NON_JSON, "invalid": INVALID}

_LONE = re.compile("[\ud800-\udfff]")
_WS = b" \t\r\n"


def _cut_deep(text: str, counts: Counter) -> str:
    """``text`` with every container that opens more than MAX_DEPTH containers deep inside the
    top-level object replaced by a JSON string of its text.  Iterative: any depth."""
    if text.count("{") + text.count("[") <= MAX_DEPTH + 1:
        return text
    out: list[str] = []
    depth = 0
    i, n = 0, len(text)
    last = 0
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if c in "{[":
            if depth == MAX_DEPTH + 1:           # opens a container at level MAX_DEPTH + 1
                start, d = i, 0
                while i < n:
                    c = text[i]
                    if c == '"':
                        i += 1
                        while i < n and text[i] != '"':
                            i += 2 if text[i] == "\\" else 1
                    elif c in "{[":
                        d += 1
                    elif c in "}]":
                        d -= 1
                        if d == 0:
                            i += 1
                            break
                    i += 1
                out.append(text[last:start])
                out.append(json.dumps(_LONE.sub("\ufffd", text[start:i]), ensure_ascii=False))
                last = i
                counts["deep"] += 1
                continue
            depth += 1
        elif c in "}]":
            depth -= 1
        i += 1
    out.append(text[last:])
    return "".join(out)


def _fix(v: Any, counts: Counter) -> Any:
    """Surrogates, infinities and NaN out of a parsed value (iterative)."""
    stack = [v]
    top = [v]

    def one(x: Any) -> Any:
        if isinstance(x, str):
            if _LONE.search(x):
                counts["surrogate"] += 1
                return _LONE.sub("\ufffd", x)
            return x
        if isinstance(x, float):
            if x != x:
                counts["nonjson"] += 1
                return "NaN"
            if x in (float("inf"), float("-inf")):
                counts["huge"] += 1
                return DBL_MAX if x > 0 else -DBL_MAX
            return x
        if isinstance(x, (dict, list)):
            stack.append(x)
        return x

    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            items = list(x.items())
            x.clear()
            for k, val in items:
                x[one(k)] = one(val)
        else:
            for j, val in enumerate(x):
                x[j] = one(val)
    return top[0]


def clean(raw: bytes, counts: Counter) -> dict:
    """The args object of ``raw`` as a Python dict every writer can write (see the module
    docstring); what was changed is counted in ``counts`` by kind (keys of :data:`MESSAGES`)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        counts["utf8"] += 1
        text = raw.decode("utf-8", "replace")
    text = _cut_deep(text, counts)

    def constant(name: str) -> Any:
        if name == "NaN":
            counts["nonjson"] += 1
            return "NaN"
        counts["nonjson"] += 1
        return name                       # "Infinity" / "-Infinity"

    def number(s: str) -> Any:
        f = float(s)
        if f in (float("inf"), float("-inf")):
            counts["huge"] += 1
            return DBL_MAX if f > 0 else -DBL_MAX
        return f

    def integer(s: str) -> Any:
        if len(s) <= 20:
            v = int(s)
            if -(2**63) <= v < 2**64:
                return v
        return number(s)                     # beyond 64 bits: the nearest double, as orjson reads it

    try:
        v = json.loads(text, parse_constant=constant, parse_float=number, parse_int=integer)
    except (ValueError, RecursionError):
        v = None
    if not isinstance(v, dict):
        counts["invalid"] += 1
        return {"args": _LONE.sub("\ufffd", text)}
    return _fix(v, counts)


def _float(f: float) -> str:
    """The shortest text of ``f`` that reads back as ``f``; in exponent form when the plain one has 20
    or more digits (``0.00026199999999998447``), which Perfetto's JSON importer misreads."""
    s = repr(f)
    if sum(c.isdigit() for c in s.partition("e")[0]) < 20:
        return s
    for p in range(17):
        t = f"{f:.{p}e}"
        if float(t) == f:
            return t
    return f"{f:.16e}"


def _dump(v: Any, out: list[str]) -> None:
    if isinstance(v, dict):
        out.append("{")
        for j, (k, x) in enumerate(v.items()):
            if j:
                out.append(",")
            out.append(json.dumps(k, ensure_ascii=False))
            out.append(":")
            _dump(x, out)
        out.append("}")
    elif isinstance(v, list):
        out.append("[")
        for j, x in enumerate(v):
            if j:
                out.append(",")
            _dump(x, out)
        out.append("]")
    elif isinstance(v, float):
        out.append(_float(v))
    else:
        out.append(json.dumps(v, ensure_ascii=False, allow_nan=False))


def dumps(v: dict) -> bytes:
    """Compact JSON of a :func:`clean` value (at most MAX_DEPTH + 1 levels): exact integers of any
    size, UTF-8 not escaped, floats in their shortest form (:func:`_float`)."""
    out: list[str] = []
    _dump(v, out)
    return "".join(out).encode("utf-8")


def warn(diagnostics: Any, counts: Counter) -> None:
    for kind, n in counts.items():
        if n:
            diagnostics.warn(WarningCode.CLAMPED_VALUE, MESSAGES[kind], n)
