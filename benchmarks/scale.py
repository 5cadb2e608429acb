"""A real producer's Chrome JSON trace made N times longer, for timing the readers of producers the
bench's generated Kineto traces do not stand for (MegEngine, MXNet, Composer): its events after the
metadata repeated N times, each copy shifted past the last (times keep at most 3 decimals, integer
flow ids move by 1,000,000 a copy).  A copy is shifted by the span of the run, not of its times:
Composer's trace holds its own events in Unix µs beside torch's relative ones (~50 days apart),
and shifting by that gap would put the copies past any valid time.

    python benchmarks/scale.py ../shared/samples/megengine/generated_mge1130_dynamic.chrome_timeline.json 100 mge.json
    python -c "import gc, json, time; gc.disable(); b = open('mge.json', 'rb').read(); \\
               t = time.perf_counter(); json.loads(b); print(time.perf_counter() - t)"
    /usr/bin/time -f "%e s %M KB" traceconv convert mge.json -o mge.pftrace
"""

from __future__ import annotations

import sys

import orjson

RELATIVE_BELOW_US = 100_000_000_000_000


def scale(src: str, dst: str, copies: int) -> int:
    doc = orjson.loads(open(src, "rb").read())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    meta = [e for e in events if e.get("ph") == "M"]
    rest = [e for e in events if e.get("ph") != "M"]
    times = [e["ts"] for e in rest if isinstance(e.get("ts"), (int, float))]
    # the times of each clock apart: relative ones (below 1e14 µs, 1973) and Unix ones
    clocks = [[t for t in times if abs(t) < RELATIVE_BELOW_US], [t for t in times if abs(t) >= RELATIVE_BELOW_US]]
    span = int(max(max(c) - min(c) for c in clocks if c) * 1.1 + 10) if times else 0
    out = list(meta)
    for k in range(copies):
        for e in rest:
            e = dict(e)
            t = e.get("ts")
            if isinstance(t, int):
                e["ts"] = t + k * span
            elif isinstance(t, float):
                e["ts"] = round(t + k * span, 3)
            if isinstance(e.get("id"), int):
                e["id"] += k * 1_000_000
            out.append(e)
    if isinstance(doc, dict):
        doc = {**doc, "traceEvents": out}
    else:
        doc = out
    with open(dst, "wb") as f:
        f.write(orjson.dumps(doc))
    return len(out)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python benchmarks/scale.py SAMPLE.json COPIES OUT.json")
    print(f"{sys.argv[3]}: {scale(sys.argv[1], sys.argv[3], int(sys.argv[2])):,} events")
