"""Unity ML-Agents ``timers.json``: the Python writer (``mlagents_envs/timers.py``, all
versions: dict children, legacy list children with ``name``) and the C#/Unity writer
(``Runtime/Timer.cs``: no ``name`` on the root, ``"children": null``, extra gauge fields)."""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

_STRICT = ConfigDict(strict=True, allow_inf_nan=False, extra="allow", populate_by_name=True)


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
    children: Union[dict[str, "TimerNode"], list["TimerNode"], None] = None

    def child_items(self) -> list[tuple[str, "TimerNode"]]:
        """(name, node) in the file's order, for dict and legacy list children alike."""
        if self.children is None:
            return []
        if isinstance(self.children, dict):
            return list(self.children.items())
        return [(c.name or f"child {i}", c) for i, c in enumerate(self.children)]


class TimersFile(TimerNode):
    gauges: dict[str, Gauge] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
