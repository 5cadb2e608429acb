"""MXNet ``profiler.dumps(format='json')`` (``src/profiler/aggregate_stats.cc``, ``DumpJson``):
``{"Time": {category: {name: {Count, Total, Min, Max, Avg}}}, "Memory": {category: {name:
{Count, Min, Max, Avg}}}, "Unit": {"Time": "ms", "Memory": "kB"}}``; numbers printed with 4
significant digits (``setprecision(4)``), a category with no printable rows is ``{}``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

_STRICT = ConfigDict(strict=True, allow_inf_nan=False, extra="allow", defer_build=True)


class TimeStat(BaseModel):
    model_config = _STRICT
    Count: int = Field(ge=0)
    Total: float
    Min: float
    Max: float
    Avg: float


class MemoryStat(BaseModel):
    model_config = _STRICT
    Count: int = Field(ge=0)
    Min: float
    Max: float
    Avg: float


class Units(BaseModel):
    model_config = _STRICT
    Time: str = "ms"
    Memory: str = "kB"


class DumpsJson(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", defer_build=True)
    Time: dict[str, dict[str, TimeStat]] = Field(default_factory=dict)
    Memory: dict[str, dict[str, MemoryStat]] = Field(default_factory=dict)
    Unit: Units = Field(default_factory=Units)
