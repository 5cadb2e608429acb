"""Top-level structure of the timeline (Chrome-trace-like) formats: Kineto's header, Composer's
per-rank metadata, MegEngine's ``metadata``, as msgspec Structs checked by
:func:`traceconv.readers.schema.check`.  Events themselves are decoded by msgspec too, never here.

msgspec and not pydantic (which the aggregate formats' schemas use): these few keys are checked
beside a stream of events, where pydantic's import and the first build of a model held the GIL for
~0.1 s (0.08 s of the 0.30 s conversion of a real 15 MB Kineto trace, and 0.06-0.15 s of the 1M
bench trace's; docs/design.md, "Twenty-fifth day"); msgspec is already imported to decode the
events, and a Struct is checked in microseconds.  The check is lax as pydantic's was (a number
written as a string, an integral float within 2^53: the number); unlike pydantic it refuses
``true``/``false`` where a number belongs, and an integral float past 2^53."""

from __future__ import annotations

from typing import Annotated, Any, Optional, Union

import msgspec
from msgspec import Meta

NonNegative = Annotated[int, Meta(ge=0)]


class DistributedInfo(msgspec.Struct):
    """``distributedInfo`` written by ``torch.profiler`` (``_KinetoProfile._get_distributed_info``)."""

    backend: Optional[str] = None
    rank: Optional[NonNegative] = None
    world_size: Optional[Annotated[int, Meta(ge=1)]] = None
    pg_count: Optional[int] = None
    pg_config: Any = None
    nccl_version: Optional[str] = None


class DeviceProperty(msgspec.Struct):
    """One entry of ``deviceProperties`` (kineto ``devicePropertiesJson``)."""

    id: Optional[int] = None
    name: Optional[str] = None
    totalGlobalMem: Optional[int] = None
    computeMajor: Optional[int] = None
    computeMinor: Optional[int] = None
    numSms: Optional[int] = None


class KinetoHeader(msgspec.Struct):
    """The keys of a Kineto trace object besides ``traceEvents`` (all optional: HTA-trimmed files
    keep only ``distributedInfo``; other keys are not checked)."""

    schemaVersion: Optional[int] = None
    distributedInfo: Optional[DistributedInfo] = None
    deviceProperties: Optional[list[DeviceProperty]] = None
    baseTimeNanoseconds: Optional[NonNegative] = None
    displayTimeUnit: Optional[str] = None
    traceName: Optional[str] = None
    global_rank: Optional[NonNegative] = None   # added by Composer's TorchProfiler


class MegEngineMetadata(msgspec.Struct):
    """``metadata`` of a MegEngine ≥1.6 chrome timeline: ``localTime`` = profile start, Unix-epoch
    system_clock ticks (ns with libstdc++) as a decimal string."""

    localTime: Optional[Union[int, str]] = None

    def __post_init__(self) -> None:
        v = self.localTime
        if isinstance(v, str) and not v.strip().lstrip("-").isdigit():
            raise ValueError("localTime must be an integer (ns since the Unix epoch) written as a string")

    def local_time_ns(self) -> Optional[int]:
        return int(self.localTime) if self.localTime is not None else None


class ComposerMeta(msgspec.Struct):
    """Composer's per-rank ``M`` events (``Profiler``/``JSONTraceHandler``): ``args.value``."""

    value: int
