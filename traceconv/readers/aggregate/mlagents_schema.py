"""Unity ML-Agents ``timers.json``: the Python writer (``mlagents_envs/timers.py``, all
versions: dict children, legacy list children with ``name``) and the C#/Unity writer
(``Runtime/Timer.cs``: no ``name`` on the root, ``"children": null``, extra gauge fields)."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

_STRICT = ConfigDict(strict=True, allow_inf_nan=False, extra="allow", populate_by_name=True, defer_build=True)


class Gauge(BaseModel):
    model_config = _STRICT
    value: float
    min: float
    max: float
    count: int = Field(ge=0)
    # The C# writer adds runningAverage and weightedAverage; extra="allow" keeps them.


class TimerNode(BaseModel):
    model_config = _STRICT
    name: Optional[str] = None                      # root only (Python), or every node (legacy lists)
    total: float = Field(ge=0)                      # seconds, summed over `count` entries
    count: int = Field(ge=0)
    self_: Optional[float] = Field(default=None, alias="self")
    is_parallel: bool = False
    children: Optional[dict[str, "TimerNode"]] = None

    @field_validator("children", mode="before")
    @classmethod
    def _legacy_list(cls, v: Any) -> Any:
        """Legacy (<= 0.14) children: a list of nodes that carry their ``name``."""
        if not isinstance(v, list):
            return v
        out: dict[str, Any] = {}
        for i, c in enumerate(v):
            name = c.get("name") if isinstance(c, dict) else None
            key = str(name) if name else f"child {i}"
            while key in out:
                key += " (again)"
            out[key] = c
        return out

    def child_items(self) -> list[tuple[str, "TimerNode"]]:
        """(name, node) in the file's order."""
        return list(self.children.items()) if self.children else []


class TimersFile(TimerNode):
    gauges: dict[str, Gauge] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
