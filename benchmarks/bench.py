"""Benchmarks of traceconv against json.loads and the naive converter, side by side.

    python benchmarks/bench.py                       # 100k and 1M events, merge of 8 x 250k
    python benchmarks/bench.py --sizes 100k,1M,4M --repeat 3

Every measurement runs in a fresh child process (time and its own peak RSS), on traces
made by benchmarks/generate.py (seeded) in benchmarks/data/ (not in git).  Prints, per
size: time / json.loads (garbage collector off), time / naive, peak RSS / input size,
output / input size, compressed output / gzip of the input, and with --verify how many
complete events lost their own duration.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
DATA = HERE / "data"

CHILD = r"""
import gc, json, sys, time
what, args = sys.argv[1], sys.argv[2:]
t = time.perf_counter()
if what == "jsonloads":
    gc.disable()
    for a in args:
        with open(a, "rb") as f:
            json.loads(f.read())
elif what == "convert":
    import traceconv
    traceconv.convert(args[0], args[1])
elif what == "naive":
    sys.path.insert(0, %(here)r)
    import naive
    naive.convert(args[0], args[1])
elif what == "merge":
    import traceconv
    traceconv.merge(args[1:], args[0])
dt = time.perf_counter() - t
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork+exec, so a child would report the
# benchmark's own peak; VmHWM belongs to this process's address space alone
with open("/proc/self/status") as f:
    hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
print(json.dumps({"seconds": dt, "maxrss": hwm}))
"""


def measure(what: str, *args: str | Path, repeat: int = 1) -> dict:
    runs = []
    for _ in range(repeat):
        r = subprocess.run([sys.executable, "-c", CHILD % {"here": str(HERE)}, what, *map(str, args)],
                           capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"{what} failed:\n{r.stderr}")
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return {"seconds": statistics.median(x["seconds"] for x in runs),
            "maxrss": statistics.median(x["maxrss"] for x in runs)}


def parse_size(text: str) -> int:
    text = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("km")) * mult)


def ensure(path: Path, events: int, **kw) -> Path:
    if not path.exists():
        sys.path.insert(0, str(HERE))
        from generate import generate
        path.write_bytes(generate(events, **kw))
    return path


def durations_lost(src: Path, out: Path) -> tuple[int, int]:
    """(complete events whose (name, duration) is missing from the output, complete events)."""
    from collections import Counter

    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    doc = json.loads(src.read_bytes())
    want = Counter((e["name"], round(float(e["dur"]) * 1000)) for e in doc["traceEvents"] if e.get("ph") == "X")
    tr = pb.Trace()
    tr.ParseFromString(out.read_bytes())
    names: dict[int, str] = {}
    stacks: dict[int, list] = {}
    got: Counter = Counter()
    for p in tr.packet:
        for n in p.interned_data.event_names:
            names[n.iid] = n.name
    # trace_processor sorts packets by timestamp (stably) before it pairs begins and ends
    for p in sorted((p for p in tr.packet if p.HasField("track_event")), key=lambda p: p.timestamp):
        te = p.track_event
        if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stacks.setdefault(te.track_uuid, []).append((names.get(te.name_iid, te.name), p.timestamp))
        elif te.type == pb.TrackEvent.TYPE_SLICE_END:
            name, t0 = stacks[te.track_uuid].pop()
            got[(name, p.timestamp - t0)] += 1
    return sum((want - got).values()), sum(want.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100k,1M")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--rank-events", default="250k")
    ap.add_argument("--no-naive", action="store_true")
    ap.add_argument("--no-merge", action="store_true")
    ap.add_argument("--verify", action="store_true", help="decode the outputs and count wrong durations")
    a = ap.parse_args()
    DATA.mkdir(exist_ok=True)
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}; median of {a.repeat} run(s)\n")
    rows = []
    for size in a.sizes.split(","):
        n = parse_size(size)
        src = ensure(DATA / f"big_{size}.pt.trace.json", n)
        raw = src.read_bytes()
        t = time.perf_counter()
        gz = len(gzip.compress(raw, 6))
        gz_s = time.perf_counter() - t
        del raw
        insize = src.stat().st_size
        base = measure("jsonloads", src, repeat=a.repeat)
        ours = measure("convert", src, DATA / f"out_{size}.pftrace", repeat=a.repeat)
        out = (DATA / f"out_{size}.pftrace").stat().st_size
        outgz = len(gzip.compress((DATA / f"out_{size}.pftrace").read_bytes(), 6))
        naive = None if a.no_naive else measure("naive", src, DATA / f"naive_{size}.pftrace", repeat=a.repeat)
        row = {"size": size, "events": n, "input_mb": insize / 1e6, "json_loads_s": base["seconds"],
               "json_loads_rss_mb": base["maxrss"] / 1e6, "convert_s": ours["seconds"],
               "convert_rss_mb": ours["maxrss"] / 1e6, "pftrace_mb": out / 1e6, "pftrace_gz_mb": outgz / 1e6,
               "input_gz_mb": gz / 1e6, "gzip_s": gz_s}
        if naive:
            row.update(naive_s=naive["seconds"], naive_rss_mb=naive["maxrss"] / 1e6,
                       naive_mb=(DATA / f"naive_{size}.pftrace").stat().st_size / 1e6)
        if a.verify:
            row["ours_lost"], row["complete"] = durations_lost(src, DATA / f"out_{size}.pftrace")
            if naive:
                row["naive_lost"], _ = durations_lost(src, DATA / f"naive_{size}.pftrace")
        rows.append(row)
        report(row)
    if not a.no_merge:
        n = parse_size(a.rank_events)
        files = [ensure(DATA / f"rank{r}_{a.rank_events}.pt.trace.json", n, seed=1, rank=r, world=a.ranks,
                        offset_ns=r * 700_000) for r in range(a.ranks)]
        base = measure("jsonloads", *files, repeat=a.repeat)
        ours = measure("merge", DATA / "merged.pftrace", *files, repeat=a.repeat)
        print(f"merge {a.ranks} x {a.rank_events}: {ours['seconds']:.1f} s = {ours['seconds'] / base['seconds']:.2f} x "
              f"json.loads of all files ({base['seconds']:.1f} s) [target <= 1.0]; peak RSS {ours['maxrss'] / 1e6:.0f} MB "
              f"for {sum(f.stat().st_size for f in files) / 1e6:.0f} MB of input")
    print("\n" + json.dumps(rows, indent=1))


def report(r: dict) -> None:
    print(f"== {r['size']} events, {r['input_mb']:.0f} MB of Kineto JSON")
    print(f"  json.loads (gc off): {r['json_loads_s']:.2f} s, {r['json_loads_rss_mb']:.0f} MB peak")
    print(f"  traceconv convert:   {r['convert_s']:.2f} s = {r['convert_s'] / r['json_loads_s']:.2f} x json.loads "
          f"[target <= 1.0]; peak RSS {r['convert_rss_mb']:.0f} MB = {r['convert_rss_mb'] / r['input_mb']:.2f} x input "
          f"[target <= 1.0]")
    if "naive_s" in r:
        print(f"  naive converter:     {r['naive_s']:.2f} s, {r['naive_rss_mb']:.0f} MB peak, {r['naive_mb']:.0f} MB out; "
              f"traceconv takes {r['convert_s'] / r['naive_s']:.2f} x its time")
    print(f"  .pftrace: {r['pftrace_mb']:.1f} MB = {100 * r['pftrace_mb'] / r['input_mb']:.1f} % of the input "
          f"[target <= 15 %]; gzipped {r['pftrace_gz_mb']:.1f} MB vs gzip of the JSON {r['input_gz_mb']:.1f} MB "
          f"({r['gzip_s']:.1f} s) = {r['pftrace_gz_mb'] / r['input_gz_mb']:.2f} x [target < 1.0]")
    if "ours_lost" in r:
        print(f"  complete events that lost their own duration: traceconv {r['ours_lost']} of {r['complete']}"
              + (f", naive {r['naive_lost']}" if "naive_lost" in r else ""))


if __name__ == "__main__":
    main()
