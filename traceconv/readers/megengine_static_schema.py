"""MegEngine static-graph profile (``trace.get_profile()``, ``load_and_run --profile``):
``{"graph_exec": {operator, var, mem_chunk, comp_seq}, "profiler": {device, host, opr_footprint,
opr_internal_pf}}`` written by ``GraphProfiler::to_json`` / ``ComputingSequence::to_json``.
Times are seconds (``start``/``kern``/``end``) per comp node (device) or host thread; ids are
decimal strings.  MegEngine 1.0-1.2 (``*.compatible.json``) had ``var`` as a list and no
``mem_chunk``/``comp_seq``."""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

_LAX = ConfigDict(extra="allow", allow_inf_nan=False, defer_build=True)


class OprTimes(BaseModel):
    model_config = _LAX
    start: float
    kern: float
    end: float


class Operator(BaseModel):
    model_config = _LAX
    id: Union[str, int]
    name: str
    type: str
    input: list[Union[str, int]] = Field(default_factory=list)
    output: list[Union[str, int]] = Field(default_factory=list)


class Footprint(BaseModel):
    model_config = _LAX
    computation: Optional[float] = None
    memory: Optional[float] = None
    in_shapes: Optional[list[Any]] = None
    out_shapes: Optional[list[Any]] = None
    in_layouts: Optional[list[Any]] = None
    param: Optional[Any] = None


class GraphExec(BaseModel):
    model_config = _LAX
    operator: dict[str, Operator]
    var: Union[dict[str, dict[str, Any]], list[dict[str, Any]]] = Field(default_factory=dict)
    mem_chunk: dict[str, Any] = Field(default_factory=dict)
    comp_seq: Optional[list[Union[str, int]]] = None


class ProfilerSection(BaseModel):
    model_config = _LAX
    device: dict[str, dict[str, OprTimes]] = Field(default_factory=dict)
    host: dict[str, dict[str, OprTimes]] = Field(default_factory=dict)
    opr_footprint: dict[str, Footprint] = Field(default_factory=dict)
    opr_internal_pf: Any = None


class StaticProfile(BaseModel):
    model_config = _LAX
    graph_exec: GraphExec
    profiler: ProfilerSection
