"""Pydantic models of each input format's *structure* (headers, aggregate trees, metadata).

They validate and give clear, located errors.  The per-event hot path of the
timeline formats does not build a pydantic object per event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ..errors import TraceconvError, clip

if TYPE_CHECKING:
    from pydantic import BaseModel

# pydantic is imported when a model is first validated, not with this module: telling a file's
# format apart imports every reader module, and a plain Chrome JSON trace needs no schema at all
M = TypeVar("M", bound="BaseModel")


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
        got = first.get("input")
        shown = clip(repr(got)) if isinstance(got, (str, int, float, bool)) or got is None else type(got).__name__
        raise TraceconvError(f"not a valid {what}: {first['msg']} (found {shown}){more}",
                             where=f"at {_where(tuple(first['loc']))}") from None


def parse_json(data: bytes, what: str) -> Any:
    """Parse JSON text, naming the line and column of a syntax error."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise TraceconvError(f"not valid JSON, so not a {what}: {e.msg} at line {e.lineno} column {e.colno}") from None
