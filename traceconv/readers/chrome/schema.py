"""Top-level structure of the timeline (Chrome-trace-like) formats: Kineto's header, Composer's
per-rank metadata, MegEngine's ``metadata``.  Events themselves are decoded by msgspec, never here."""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

_OPEN = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)


class DistributedInfo(BaseModel):
    """``distributedInfo`` written by ``torch.profiler`` (``_KinetoProfile._get_distributed_info``)."""

    model_config = _OPEN
    backend: Optional[str] = None
    rank: Optional[int] = Field(default=None, ge=0)
    world_size: Optional[int] = Field(default=None, ge=1)
    pg_count: Optional[int] = None
    pg_config: Optional[Any] = None
    nccl_version: Optional[str] = None


class DeviceProperty(BaseModel):
    """One entry of ``deviceProperties`` (kineto ``devicePropertiesJson``)."""

    model_config = _OPEN
    id: Optional[int] = None
    name: Optional[str] = None
    totalGlobalMem: Optional[int] = None
    computeMajor: Optional[int] = None
    computeMinor: Optional[int] = None
    numSms: Optional[int] = None


class KinetoHeader(BaseModel):
    """The keys of a Kineto trace object besides ``traceEvents`` (all optional: HTA-trimmed files
    keep only ``distributedInfo``)."""

    model_config = _OPEN
    schemaVersion: Optional[int] = None
    distributedInfo: Optional[DistributedInfo] = None
    deviceProperties: Optional[list[DeviceProperty]] = None
    baseTimeNanoseconds: Optional[int] = Field(default=None, ge=0)
    displayTimeUnit: Optional[str] = None
    traceName: Optional[str] = None
    global_rank: Optional[int] = Field(default=None, ge=0)   # added by Composer's TorchProfiler


class MegEngineMetadata(BaseModel):
    """``metadata`` of a MegEngine ≥1.6 chrome timeline: ``localTime`` = profile start, Unix-epoch
    system_clock ticks (ns with libstdc++) as a decimal string."""

    model_config = _OPEN
    localTime: Optional[Union[int, str]] = None

    @field_validator("localTime")
    @classmethod
    def _digits(cls, v: Union[int, str, None]) -> Union[int, str, None]:
        if isinstance(v, str) and not v.strip().lstrip("-").isdigit():
            raise ValueError("localTime must be an integer (ns since the Unix epoch) written as a string")
        return v

    def local_time_ns(self) -> Optional[int]:
        return int(self.localTime) if self.localTime is not None else None


class ComposerMeta(BaseModel):
    """Composer's per-rank ``M`` events (``Profiler``/``JSONTraceHandler``): ``args.value``."""

    model_config = _OPEN
    value: int
