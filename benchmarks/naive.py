"""The converter a user would write by hand: the baseline of the benchmarks.

json.load the whole file, then perfetto's TraceProtoBuilder with a SLICE_BEGIN at ts and a
SLICE_END at ts+dur for every complete event, on a track per (pid, tid), one debug
annotation per arg.  It keeps the slice count, but slices that overlap on one thread
without nesting take each other's ends.

    python benchmarks/naive.py big.pt.trace.json naive.pftrace
"""

from __future__ import annotations

import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import TraceProtoBuilder


def convert(src: str, dst: str) -> None:
    with open(src) as f:
        doc = json.load(f)
    base = int(doc.get("baseTimeNanoseconds", 0))
    builder = TraceProtoBuilder()
    tracks: dict[tuple, int] = {}
    seq = 1

    def track(pid, tid) -> int:
        key = (str(pid), str(tid))
        if key not in tracks:
            uuid = len(tracks) + 1
            tracks[key] = uuid
            p = builder.add_packet()
            p.track_descriptor.uuid = uuid
            p.track_descriptor.name = f"{pid} / {tid}"
        return tracks[key]

    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        uuid = track(e.get("pid"), e.get("tid"))
        ts = base + round(float(e["ts"]) * 1000)
        p = builder.add_packet()
        p.timestamp = ts
        p.trusted_packet_sequence_id = seq
        p.track_event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
        p.track_event.track_uuid = uuid
        p.track_event.name = e.get("name", "")
        for k, v in (e.get("args") or {}).items():
            a = p.track_event.debug_annotations.add()
            a.name = k
            a.string_value = json.dumps(v) if not isinstance(v, str) else v
        q = builder.add_packet()
        q.timestamp = ts + round(float(e.get("dur", 0)) * 1000)
        q.trusted_packet_sequence_id = seq
        q.track_event.type = pb.TrackEvent.TYPE_SLICE_END
        q.track_event.track_uuid = uuid
    with open(dst, "wb") as f:
        f.write(builder.serialize())


if __name__ == "__main__":
    convert(sys.argv[1], sys.argv[2])
