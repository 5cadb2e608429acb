"""Schemas of each input format's *structure*: pydantic models of the aggregate formats' trees
and documents (:func:`validate`), msgspec Structs of the timeline formats' top-level keys and
metadata (:func:`check`; see :mod:`traceconv.readers.chrome.schema` for why).

Both give the same clear, located one-line errors.  The per-event hot path of the timeline formats
builds no schema object per event.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ..errors import TraceconvError, clip

if TYPE_CHECKING:
    from pydantic import BaseModel

# pydantic is imported when a model is first validated, not with this module: telling a file's
# format apart imports every reader module, and a plain Chrome JSON trace needs no schema at all
M = TypeVar("M", bound="BaseModel")
S = TypeVar("S")


def _where(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts) or "(top level)"


def validate(model: type[M], data: Any, what: str) -> M:
    """``model.model_validate(data)``, with a failure turned into a one-line :class:`TraceconvError`."""
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as e:
        errs = e.errors(include_url=False)
        first = errs[0]
        more = f" (and {len(errs) - 1} more problems)" if len(errs) > 1 else ""
        raise TraceconvError(f"not a valid {what}: {first['msg']} (found {_shown(first.get('input'))}){more}",
                             where=f"at {_where(tuple(first['loc']))}") from None


def _shown(got: Any) -> str:
    return clip(repr(got)) if isinstance(got, (str, int, float, bool)) or got is None else type(got).__name__


_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


def check(struct: type[S], data: Any, what: str, at: str = "") -> S:
    """``data`` as the msgspec Struct ``struct``, checked laxly as pydantic's lax mode does (a number
    written as a string, or as an integral float, is the number), a failure turned into the same
    one-line :class:`TraceconvError` as :func:`validate`'s; ``at`` is where ``data`` is in its
    document (the error's place is named from there)."""
    import msgspec

    try:
        return msgspec.convert(data, struct, strict=False)
    except msgspec.ValidationError as e:
        msg, _, path = str(e).partition(" - at `$")
        path, msg = path.rstrip("`"), msg.replace("`", "")
        found = ""
        got: Any = data
        for m in _STEP.finditer(path):                  # the value at the path, if it is there
            key, index = m.groups()
            if key is not None and isinstance(got, dict) and key in got:
                got = got[key]
            elif index is not None and isinstance(got, list) and int(index) < len(got):
                got = got[int(index)]
            else:
                break
        else:
            if path:
                found = f" (found {_shown(got)})"
        where = (at + path if at else path.lstrip(".")) or "(top level)"
        raise TraceconvError(f"not a valid {what}: {msg}{found}", where=f"at {where}") from None


def parse_json(data: bytes, what: str) -> Any:
    """Parse JSON text, naming the line and column of a syntax error."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise TraceconvError(f"not valid JSON, so not a {what}: {e.msg} at line {e.lineno} column {e.colno}") from None
