"""Decoding a whole Chrome Trace Event JSON document (the reference path, and the fallback for
text the stream cannot read): :class:`Event` (one event, as much of it as any reader needs, args
kept as raw JSON text), :func:`decode` with msgspec, and :func:`_decode_tolerant`, which repairs
what msgspec rejects (trailing commas, truncation, bad escapes, odd types) with counted warnings.
Values nested deeper than :data:`DOC_DEPTH` become strings of their text first (:func:`flatten_deep`,
over the compiled ``deep_spans``)."""

from __future__ import annotations

import decimal
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson
from msgspec import Raw

from ..._native import _core
from ...errors import TraceconvError, WarningCode
from ...model import MAX_ARGS_DEPTH


WHAT = "Chrome Trace Event JSON file"


class Event(msgspec.Struct, gc=False):
    """One trace event, as much of it as any reader needs.  ``args`` stays raw JSON text.

    ``ts``/``dur`` are decoded as numbers: integers are exact, and so are doubles below 2^43 µs with
    up to 3 decimals (Kineto's relative times, every profile-relative clock); a file with larger
    fractional times is decoded again as :class:`ExactEvent`, whose times stay text.
    """

    ph: str = ""
    name: str | None = None
    cat: str | None = None
    ts: int | float | str | None = None
    dur: int | float | str | None = None
    pid: int | float | str | None = None
    tid: int | float | str | None = None
    id: int | float | str | None = None
    id2: Raw = Raw()
    s: str | None = None
    bp: str | None = None
    args: Raw = Raw()
    bind_id: int | float | str | None = None
    flow_in: bool = False
    flow_out: bool = False


class ExactEvent(Event, gc=False):
    """An :class:`Event` whose times stay JSON text (for fractional µs too large for a double)."""

    ts: Raw = Raw()      # type: ignore[assignment]
    dur: Raw = Raw()     # type: ignore[assignment]


_TOP = msgspec.json.Decoder(dict[str, Raw])
_EVENTS = msgspec.json.Decoder(list[Event])
_EXACT_EVENTS = msgspec.json.Decoder(list[ExactEvent])
EXACT_FLOAT_US = float(2**43)   # below it a double with 3 decimals still pins down the ns


# ---------------------------------------------------------------- decoding the container

@dataclass
class Document:
    header: dict[str, Any]          # every top-level key but traceEvents (empty for a bare array)
    events: list[Event]
    is_array: bool
    problems: list[tuple[WarningCode, str, int]] = field(default_factory=list)


def _header_value(raw: Raw) -> Any:
    b = bytes(raw)
    try:
        return orjson.loads(b)
    except orjson.JSONDecodeError:
        try:
            return _jsonable(json.loads(b, parse_float=_number), [0])
        except ValueError:
            return None


# Containers nested deeper than this (counted from the document's top) are kept as the JSON text
# of a string: no decoder recurses past it, and args stay within the model's MAX_ARGS_DEPTH.
DOC_DEPTH = MAX_ARGS_DEPTH + 2


def decode(data: bytes, what: str = WHAT) -> Document:
    """Decode a Chrome Trace Event JSON document; fall back to a repairing decoder if needed.
    Values nested deeper than :data:`DOC_DEPTH` become strings of their text (counted)."""
    data, deep = flatten_deep(data, DOC_DEPTH)
    doc = _decode(data, what)
    if deep:
        doc.problems.append((WarningCode.CLAMPED_VALUE, f"values nested deeper than {DOC_DEPTH} levels "
                             "were kept as strings of their JSON text", deep))
    return doc


def flatten_deep(data: bytes, limit: int) -> tuple[bytes, int]:
    """``data`` (JSON text) with every value nested deeper than ``limit`` levels replaced by a JSON
    string of its own text, so that no decoder recurses past ``limit``; and how many were replaced.
    Returns ``data`` itself when nothing is that deep."""
    spans = _core.scan.deep_spans(data if type(data) is bytes else bytes(data), limit)
    if not spans:
        return data, 0
    parts = []
    at = 0
    for s, e in spans:
        parts.append(data[at:s])
        parts.append(orjson.dumps(data[s:e].decode("utf-8", "replace")))
        at = e
    parts.append(data[at:])
    return b"".join(parts), len(spans)


def _decode(data: bytes, what: str) -> Document:
    start = data.lstrip()[:1]
    if start not in (b"{", b"["):
        raise TraceconvError(f"not a {what}: expected a JSON object or array at the start")
    try:
        if start == b"[":
            header: dict[str, Any] = {}
            raw_events: Any = data
        else:
            top = _TOP.decode(data)
            raw_events = top.pop("traceEvents", None)
            header = {k: _header_value(v) for k, v in top.items()}
            if raw_events is None:
                raise TraceconvError(f"not a {what}: the top-level object has no 'traceEvents' array")
        events: list[Event] = _EVENTS.decode(raw_events)
        if _has_inexact_times(events):
            events = _EXACT_EVENTS.decode(raw_events)
        return Document(header, events, start == b"[")
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _decode_tolerant(data, what)


def _has_inexact_times(events: list[Event]) -> bool:
    lim = EXACT_FLOAT_US
    for ev in events:
        t = ev.ts
        if type(t) is float and not -lim < t < lim:
            return True
        d = ev.dur
        if type(d) is float and not -lim < d < lim:
            return True
    return False


_BAD_ESCAPE = re.compile(r'\\(?!["\\/bfnrtu])')
_NEXT_EVENT = re.compile(r"\}\s*,\s*\{")
_EVENTS_KEY = re.compile(r'"traceEvents"\s*:\s*\[')


def _decode_tolerant(data: bytes, what: str) -> Document:
    """Event-by-event decoding with Python's json: repairs what msgspec rejects.

    Handles trailing commas, a file cut short (keeps every complete event), backslashes that are
    not JSON escapes (MXNet writes names unescaped), numbers of any size and events of odd types;
    an event that still cannot be read is skipped and counted.
    """
    problems: list[tuple[WarningCode, str, int]] = []
    text = data.decode("utf-8", errors="replace")
    if _BAD_ESCAPE.search(text):
        n = len(_BAD_ESCAPE.findall(text))
        text = _BAD_ESCAPE.sub(r"\\\\", text)
        problems.append((WarningCode.NOTE, "backslashes that were not valid JSON escapes (names written "
                         "unescaped by the producer) were read as literal backslashes", n))
    dec = json.JSONDecoder(parse_float=_number, strict=False)
    i = len(text) - len(text.lstrip())
    header: dict[str, Any] = {}
    is_array = text[i] == "["
    if is_array:
        pos = i + 1
    else:
        m = _EVENTS_KEY.search(text)
        if m is None:
            raise TraceconvError(f"not a {what}: no 'traceEvents' array found (the JSON is invalid)")
        pos = m.end()
        head_text = text[i:m.start()].rstrip().rstrip(",") + "}"
        try:
            header = _jsonable(dict(json.loads(head_text, parse_float=_number)), [0])
        except (ValueError, TypeError, RecursionError):
            header = {}
    dicts: list[Any] = []
    skipped = 0
    closed = False
    n_text = len(text)
    ws = " \t\r\n"
    while True:
        while pos < n_text and (text[pos] in ws or text[pos] == ","):
            pos += 1
        if pos >= n_text:
            break
        if text[pos] == "]":
            closed = True
            pos += 1
            break
        try:
            obj, end = dec.raw_decode(text, pos)
        except (ValueError, RecursionError):       # RecursionError: nested deeper than the decoder goes
            m = _NEXT_EVENT.search(text, pos)
            if m is None:
                break          # the rest is an incomplete last event
            skipped += 1
            pos = m.end() - 1
            continue
        dicts.append(obj)
        pos = end
    if not is_array and closed:
        # the keys after the array (MXNet's displayTimeUnit, MegEngine's metadata)
        rest = text[pos:].strip()
        if rest.startswith(","):
            try:
                header.update(_jsonable(json.loads("{" + rest[1:].rstrip().rstrip("}").rstrip().rstrip(",")
                                                   + "}", parse_float=_number), [0]))
            except (ValueError, TypeError, RecursionError):
                pass
    if not closed:
        tail = len(text[pos:].strip())
        lost = f"ignored the last {tail} bytes (an incomplete event)" if tail else "nothing after them was lost"
        problems.append((WarningCode.TRUNCATED_INPUT,
                         f"the file ends inside its event array (no closing ']'): kept the {len(dicts)} "
                         f"complete events before the cut; {lost}", 1))
    if skipped:
        problems.append((WarningCode.DROPPED_EVENT, "events that are not valid JSON (e.g. a name with an "
                         "unescaped quote) were skipped", skipped))
    events, bad, fixed = events_from_dicts(dicts)
    if fixed:
        problems.append((WarningCode.CLAMPED_VALUE, FIXED_VALUES, fixed))
    if bad:
        problems.append((WarningCode.DROPPED_EVENT, "array entries that are not event objects were skipped", bad))
    problems.append((WarningCode.NOTE, "the JSON needed the repairing reader (slower): "
                     "trailing commas, a cut, odd escapes or values", 1))
    return Document(header, events, is_array, problems)


def _number(text: str) -> "decimal.Decimal | float":
    """A JSON float for Python's json: exact as a Decimal, or, where its exponent is past what a
    Decimal holds (``1e99900000000000000000``, found by the fuzz harness), the double it rounds to
    (infinity or zero, as Python's own json would read it)."""
    try:
        return decimal.Decimal(text)
    except decimal.InvalidOperation:
        return float(text)


FIXED_VALUES = ("values no viewer can hold (numbers beyond 64 bits or a double, text with lone surrogates) were "
                "kept as text or with '?'")


def _jsonable(v: Any, fixed: list[int]) -> Any:
    """Python's json output made safe for orjson and the writers: numbers a double or 64-bit integer
    cannot hold, and strings with lone surrogates, become strings (counted in ``fixed``)."""
    if isinstance(v, decimal.Decimal):
        if v.is_finite() and v == v.to_integral_value() and -(2**63) <= v < 2**64:
            return int(v)
        f = float(v)
        if math.isinf(f):
            fixed[0] += 1
            return str(v)
        return f
    if isinstance(v, int) and not isinstance(v, bool) and not (-(2**63) <= v < 2**64):
        fixed[0] += 1
        return _safe_str(v)
    if isinstance(v, float) and not math.isfinite(v):      # NaN, Infinity: not JSON; kept as text
        fixed[0] += 1
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            fixed[0] += 1
            return v.encode("utf-8", "replace").decode("utf-8")
        return v
    if isinstance(v, dict):
        return {_jsonable(str(k), fixed): _jsonable(x, fixed) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x, fixed) for x in v]
    return v


def _num(v: Any) -> int | str | None:
    """A ts/dur from Python's json (decimals as Decimal): ints stay ints, the rest exact text."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, (decimal.Decimal, float)):
        return str(v)
    if isinstance(v, str):
        return v
    return None


def _id(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        if v.is_finite() and v.adjusted() >= 20:
            # past 64 bits, an id is kept as its text (as _jsonable keeps such an int), and never
            # made an int: int(Decimal("1e9992319")) builds ten million digits for minutes (a fuzz case)
            return str(v)
        try:
            return int(v) if v == v.to_integral_value() else float(v)
        except (ArithmeticError, ValueError):
            return str(v)
    if isinstance(v, (int, float, str)) and not isinstance(v, bool):
        return v
    return None if v is None else _safe_str(v)


def _safe_str(v: Any) -> str:
    try:
        return str(v)
    except ValueError:          # an integer of thousands of digits
        return f"<{v.bit_length()}-bit integer>"


def _text(v: Any, fixed: list[int]) -> str | None:
    return None if v is None else _jsonable(v if isinstance(v, str) else _safe_str(v), fixed)


def events_from_dicts(dicts: list[Any]) -> tuple[list[Event], int, int]:
    """Build Events from decoded dicts (the slow path); returns (events, entries that were not
    objects, values that had to be changed to be written: see :func:`_jsonable`)."""
    out: list[Event] = []
    bad = 0
    fixed = [0]
    for d in dicts:
        if not isinstance(d, dict):
            bad += 1
            continue
        args = d.get("args")
        raw_args = Raw()
        if args is not None:
            try:
                raw_args = Raw(json.dumps(_jsonable(args, fixed), ensure_ascii=False,
                                          separators=(",", ":")).encode())
            except RecursionError:          # nested deeper than Python recurses: not an event we can read
                bad += 1
                continue
        id2 = d.get("id2")
        name, cat, ph, s, bp = (_text(d.get(k), fixed) for k in ("name", "cat", "ph", "s", "bp"))
        pid, tid = (_jsonable(_id(d.get(k)), fixed) for k in ("pid", "tid"))
        out.append(Event(
            ph=ph or "", name=name, cat=cat,
            ts=_num(d.get("ts")), dur=_num(d.get("dur")),
            pid=pid, tid=tid, id=_id(d.get("id")),
            id2=Raw(json.dumps(_jsonable(id2, fixed)).encode()) if isinstance(id2, dict) else Raw(),
            s=s, bp=bp,
            args=raw_args, bind_id=_id(d.get("bind_id")),
            flow_in=bool(d.get("flow_in")), flow_out=bool(d.get("flow_out")),
        ))
    return out, bad, fixed[0]


def is_own_output(header: dict[str, Any]) -> bool:
    """Whether a decoded header is traceconv's own Chrome JSON output (``metadata.traceconv``)."""
    meta = header.get("metadata")
    return isinstance(meta, dict) and isinstance(meta.get("traceconv"), dict) \
        and "clock" in meta["traceconv"]
