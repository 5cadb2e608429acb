"""Benchmarks of traceconv against json.loads and the naive converter: every target of issue 7.

    python benchmarks/bench.py                       # 100k and 1M events, merge of 8 x 250k
    python benchmarks/bench.py --sizes 100k,1M,4M --repeat 3 --verify --json out.json

Traces are made once by benchmarks/generate.py (seeded) in benchmarks/data/ (not in git),
each with a gzip -6 copy (big_{size}.pt.trace.json.gz).  Every measurement runs in a fresh
child process, which reports its own time and peak RSS (VmHWM).  With --repeat N the runs
alternate (json.loads, convert, json.loads of the .gz, convert of the .gz, then again) and
the medians are reported; the naive converter runs once per size.

Per size it prints: json.loads (garbage collector off) time; traceconv convert time / json.loads,
time / naive, peak RSS / input size, .pftrace / input size, gzip -6 of the .pftrace / gzip of
the JSON; the same convert from the .json.gz (baseline: gzip.decompress + json.loads, peak RSS
against the uncompressed JSON's size); with --verify, how many complete events lost their own
duration (traceconv and naive).  With more than one size: time and peak RSS per event, less
the fixed start-up cost: a child that converts a 100-event trace (the imports, and loading the
compiled kernels from numba's cache).  Then the merge of 8 ranks:
time / json.loads of all eight files, CPU time / wall time (both cores used?), peak RSS of
the main process and of its largest worker.  Last, a summary with one line per target: the
figure, the target, and met / NOT MET.  --json saves all figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
DATA = HERE / "data"
MB = 1e6

CHILD = r"""
import gc, gzip, json, resource, sys, time
what, args = sys.argv[1], sys.argv[2:]
t = time.perf_counter()
cpu0 = time.process_time()
if what == "startup":
    import traceconv
    traceconv.convert(args[0], args[1])
elif what == "jsonloads":
    gc.disable()
    for a in args:
        with open(a, "rb") as f:
            raw = f.read()
        if a.endswith(".gz"):
            raw = gzip.decompress(raw)
        json.loads(raw)
        del raw
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
# CPU time of this process and of the worker processes it waited for (merge's pool)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = time.process_time() - cpu0 + kids.ru_utime + kids.ru_stime
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork+exec, so a child would report the
# benchmark's own peak; VmHWM belongs to this process's address space alone
with open("/proc/self/status") as f:
    hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
print(json.dumps({"seconds": dt, "cpu_seconds": cpu, "maxrss": hwm, "largest_worker_maxrss": kids.ru_maxrss * 1024}))
"""


def run_child(what: str, *args: str | Path) -> dict:
    """One measurement in a fresh Python process."""
    r = subprocess.run([sys.executable, "-c", CHILD % {"here": str(HERE)}, what, *map(str, args)],
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{what} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def alternate(jobs: dict[str, tuple], repeat: int) -> dict[str, dict]:
    """Run every job once per round, in the given order, for ``repeat`` rounds (so a slow
    moment of a noisy machine falls on all of them alike); the median of each figure per job."""
    runs: dict[str, list[dict]] = {label: [] for label in jobs}
    for _ in range(repeat):
        for label, (what, *args) in jobs.items():
            runs[label].append(run_child(what, *args))
    return {label: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for label, rs in runs.items()}


def parse_size(text: str) -> int:
    text = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("km")) * mult)


def ensure(path: Path, events: int, **kw) -> Path:
    """The generated trace at ``path``, made once (written under another name, then renamed,
    so that an interrupted run leaves no half file)."""
    if not path.exists():
        sys.path.insert(0, str(HERE))
        from generate import generate
        print(f"generating {path.name} ({events:,} events)...", flush=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(generate(events, **kw))
        tmp.rename(path)
    return path


def ensure_gz(src: Path) -> Path:
    """``src`` gzipped at level 6 next to it, made once."""
    path = src.with_name(src.name + ".gz")
    if not path.exists():
        print(f"gzipping {src.name}...", flush=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(src, "rb") as f, open(tmp, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as g:
            shutil.copyfileobj(f, g, 1 << 20)
        tmp.rename(path)
    return path


def durations_lost(src: Path, out: Path) -> tuple[int, int]:
    """(complete events whose (name, duration) is missing from the output, complete events)."""
    from collections import Counter

    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    doc = json.loads(src.read_bytes())
    want = Counter((e["name"], round(float(e["dur"]) * 1000)) for e in doc["traceEvents"] if e.get("ph") == "X")
    del doc
    tr = pb.Trace()
    tr.ParseFromString(out.read_bytes())
    names: dict[int, str] = {}
    stacks: dict[int, list] = {}
    got: Counter = Counter()
    events = []
    # absolute times: a naive writer's are on the trace clock; traceconv's on an incremental clock of
    # its sequence (TracePacketDefaults.timestamp_clock_id; deltas from the ClockSnapshot's value,
    # which maps to the trace clock), resolved the way trace_processor does
    default_clock: dict[int, int] = {}
    clocks: dict[tuple[int, int], list[int]] = {}     # (sequence, clock) -> [last value, unit, offset to trace clock]
    for p in tr.packet:
        seq = p.trusted_packet_sequence_id
        for n in p.interned_data.event_names:
            names[n.iid] = n.name
        if p.HasField("trace_packet_defaults"):
            default_clock[seq] = p.trace_packet_defaults.timestamp_clock_id
        if p.HasField("clock_snapshot"):
            snap = {c.clock_id: c for c in p.clock_snapshot.clocks}
            boot = snap[6].timestamp                    # BOOTTIME, the trace clock
            for cid, c in snap.items():
                if cid >= 64:
                    unit = c.unit_multiplier_ns or 1
                    clocks[(seq, cid)] = [c.timestamp * unit, unit, boot - c.timestamp * unit, c.is_incremental]
        if p.HasField("track_event") and p.HasField("timestamp"):
            cid = p.timestamp_clock_id or default_clock.get(seq, 0)
            t = p.timestamp
            if cid >= 64:
                c = clocks[(seq, cid)]
                t = (c[0] + t * c[1]) if c[3] else t * c[1]
                if c[3]:
                    c[0] = t
                t += c[2]
            events.append((t, p.track_event))
    # trace_processor sorts packets by timestamp (stably) before it pairs begins and ends
    events.sort(key=lambda e: e[0])
    for t, te in events:
        if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stacks.setdefault(te.track_uuid, []).append((names.get(te.name_iid, te.name), t))
        elif te.type == pb.TrackEvent.TYPE_SLICE_END:
            name, t0 = stacks[te.track_uuid].pop()
            got[(name, t - t0)] += 1
    return sum((want - got).values()), sum(want.values())


def gzip_size(path: Path) -> int:
    return len(gzip.compress(path.read_bytes(), 6))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100k,1M", help="events per trace, comma-separated (100k,1M,4M)")
    ap.add_argument("--repeat", type=int, default=1, help="alternated runs of each measurement; medians are shown")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--rank-events", default="250k")
    ap.add_argument("--no-naive", action="store_true")
    ap.add_argument("--no-merge", action="store_true")
    ap.add_argument("--verify", action="store_true", help="decode the outputs and count wrong durations")
    ap.add_argument("--json", metavar="OUT", help="save all figures to this JSON file")
    a = ap.parse_args()
    DATA.mkdir(exist_ok=True)
    machine = f"{os.cpu_count()} cores, Python {sys.version.split()[0]}"
    print(f"machine: {machine}; median of {a.repeat} alternated run(s), each in a fresh process\n", flush=True)
    summary: list[dict] = []

    def target(what: str, figure: str, goal: str, met: bool | None) -> None:
        summary.append({"target": what, "figure": figure, "goal": goal,
                        "verdict": "not checked" if met is None else "met" if met else "NOT MET"})

    tiny = ensure(DATA / "tiny_100.pt.trace.json", 100)
    startup = alternate({"startup": ("startup", tiny, DATA / "tiny_100.pftrace")}, a.repeat)["startup"]
    rows = []
    for size in a.sizes.split(","):
        row = measure_size(size, parse_size(size), a)
        rows.append(row)
        report(row)
        size_targets(row, target)
    linear = growth(rows, startup, target) if len(rows) > 1 else []
    merge = None if a.no_merge else measure_merge(a, target)

    print("\n== summary (issue 7 targets)")
    w = [max(len(r[k]) for r in summary) for k in ("target", "figure", "goal")]
    for r in summary:
        print(f"  {r['target']:<{w[0]}}  {r['figure']:>{w[1]}}  {r['goal']:<{w[2]}}  {r['verdict']}")
    missed = sum(r["verdict"] == "NOT MET" for r in summary)
    unchecked = sum(r["verdict"] == "not checked" for r in summary)
    print(f"  {len(summary) - missed - unchecked} of {len(summary)} targets met, {missed} NOT MET"
          + (f", {unchecked} not checked (add --verify)" if unchecked else ""))
    if a.json:
        Path(a.json).write_text(json.dumps({"machine": machine, "repeat": a.repeat, "startup": startup,
                                            "sizes": rows, "linear": linear, "merge": merge,
                                            "summary": summary}, indent=1) + "\n")
        print(f"figures saved to {a.json}")


def measure_size(size: str, n: int, a: argparse.Namespace) -> dict:
    src = ensure(DATA / f"big_{size}.pt.trace.json", n)
    srcgz = ensure_gz(src)
    out, out_from_gz = DATA / f"out_{size}.pftrace", DATA / f"out_{size}_from_gz.pftrace"
    print(f"measuring {size}...", flush=True)
    m = alternate({"jsonloads": ("jsonloads", src), "convert": ("convert", src, out),
                   "jsonloads_gz": ("jsonloads", srcgz), "convert_gz": ("convert", srcgz, out_from_gz)}, a.repeat)
    row = {"size": size, "events": n, "input_bytes": src.stat().st_size, "input_gz_bytes": srcgz.stat().st_size,
           **{f"{label}_{k}": v for label, fig in m.items() for k, v in fig.items() if k in ("seconds", "maxrss")},
           "pftrace_bytes": out.stat().st_size, "pftrace_gz_bytes": gzip_size(out)}
    # the .json.gz input should give the very same .pftrace; its sizes are measured either way
    same = out.read_bytes() == out_from_gz.read_bytes()
    row.update(gz_same_output=same, pftrace_from_gz_bytes=out_from_gz.stat().st_size,
               pftrace_from_gz_gz_bytes=row["pftrace_gz_bytes"] if same else gzip_size(out_from_gz))
    if not a.no_naive:
        naive = run_child("naive", src, DATA / f"naive_{size}.pftrace")
        row.update(naive_seconds=naive["seconds"], naive_maxrss=naive["maxrss"],
                   naive_bytes=(DATA / f"naive_{size}.pftrace").stat().st_size)
    if a.verify:
        row["lost"], row["complete"] = durations_lost(src, out)
        if not a.no_naive:
            row["naive_lost"], _ = durations_lost(src, DATA / f"naive_{size}.pftrace")
    return row


def report(r: dict) -> None:
    inp = r["input_bytes"]
    print(f"\n== {r['size']} events, {inp / MB:.0f} MB of Kineto JSON ({r['input_gz_bytes'] / MB:.1f} MB gzipped)")
    print(f"  json.loads (gc off):      {r['jsonloads_seconds']:.2f} s, {r['jsonloads_maxrss'] / MB:.0f} MB peak")
    print(f"  traceconv convert:        {r['convert_seconds']:.2f} s = {r['convert_seconds'] / r['jsonloads_seconds']:.2f} x "
          f"json.loads [target <= 1.0]; peak RSS {r['convert_maxrss'] / MB:.0f} MB = "
          f"{r['convert_maxrss'] / inp:.2f} x input [target <= 1.0]")
    if "naive_seconds" in r:
        print(f"  naive converter (1 run):  {r['naive_seconds']:.2f} s, {r['naive_maxrss'] / MB:.0f} MB peak, "
              f"{r['naive_bytes'] / MB:.0f} MB out; traceconv takes {r['convert_seconds'] / r['naive_seconds']:.2f} x its time")
    print(f"  .pftrace: {r['pftrace_bytes'] / MB:.1f} MB = {100 * r['pftrace_bytes'] / inp:.1f} % of the input "
          f"[target <= 15 %]; gzip -6 of it {r['pftrace_gz_bytes'] / MB:.1f} MB vs gzip of the JSON "
          f"{r['input_gz_bytes'] / MB:.1f} MB = {r['pftrace_gz_bytes'] / r['input_gz_bytes']:.2f} x [target < 1.0]")
    print("  from the .json.gz:")
    print(f"    gzip.decompress + json.loads (gc off): {r['jsonloads_gz_seconds']:.2f} s, "
          f"{r['jsonloads_gz_maxrss'] / MB:.0f} MB peak")
    print(f"    traceconv convert: {r['convert_gz_seconds']:.2f} s = "
          f"{r['convert_gz_seconds'] / r['jsonloads_gz_seconds']:.2f} x that [target <= 1.0]; "
          f"peak RSS {r['convert_gz_maxrss'] / MB:.0f} MB = {r['convert_gz_maxrss'] / inp:.2f} x the uncompressed "
          f"JSON's size [target <= 1.0]")
    print(f"    .pftrace {'identical to' if r['gz_same_output'] else 'DIFFERENT from'} the one made from the JSON")
    if "lost" in r:
        print(f"  complete events that lost their own duration: traceconv {r['lost']:,} of {r['complete']:,}"
              + (f", naive {r['naive_lost']:,}" if "naive_lost" in r else ""))


def size_targets(r: dict, target) -> None:
    s, inp = r["size"], r["input_bytes"]
    x = r["convert_seconds"] / r["jsonloads_seconds"]
    target(f"{s}: convert time / json.loads", f"{x:.2f} x", "<= 1.0 x", x <= 1.0)
    x = r["convert_maxrss"] / inp
    target(f"{s}: convert peak RSS / input", f"{x:.2f} x", "<= 1.0 x", x <= 1.0)
    x = r["pftrace_bytes"] / inp
    target(f"{s}: .pftrace / input", f"{100 * x:.1f} %", "<= 15 %", x <= 0.15)
    x = r["pftrace_gz_bytes"] / r["input_gz_bytes"]
    target(f"{s}: .pftrace.gz / gzip of the JSON", f"{x:.2f} x", "< 1.0 x", x < 1.0)
    x = r["convert_gz_seconds"] / r["jsonloads_gz_seconds"]
    target(f"{s}: .json.gz convert time / (gunzip + json.loads)", f"{x:.2f} x", "<= 1.0 x", x <= 1.0)
    x = r["convert_gz_maxrss"] / inp
    target(f"{s}: .json.gz convert peak RSS / JSON size", f"{x:.2f} x", "<= 1.0 x", x <= 1.0)
    x = r["pftrace_from_gz_bytes"] / inp
    target(f"{s}: .json.gz: .pftrace / JSON size", f"{100 * x:.1f} %", "<= 15 %", x <= 0.15)
    x = r["pftrace_from_gz_gz_bytes"] / r["input_gz_bytes"]
    target(f"{s}: .json.gz: .pftrace.gz / .json.gz", f"{x:.2f} x", "< 1.0 x", x < 1.0)
    if "lost" in r:
        target(f"{s}: complete events keep own name + duration", f"{r['lost']:,} of {r['complete']:,} lost",
               "0 lost", r["lost"] == 0)
    else:
        target(f"{s}: complete events keep own name + duration", "-", "0 lost", None)


def growth(rows: list[dict], startup: dict, target) -> list[dict]:
    """Time and peak RSS per event of convert (JSON input) at each size, less the start-up cost."""
    print(f"\n== growth: convert of the JSON, less the fixed start-up cost (a child converting a 100-event trace: "
          f"imports, compiled kernels loaded from the cache) "
          f"({startup['seconds']:.2f} s, {startup['maxrss'] / MB:.0f} MB peak), subtracted from each size")
    out = []
    for r in sorted(rows, key=lambda r: r["events"]):
        out.append({"size": r["size"], "events": r["events"],
                    "us_per_event": (r["convert_seconds"] - startup["seconds"]) / r["events"] * 1e6,
                    "rss_bytes_per_event": (r["convert_maxrss"] - startup["maxrss"]) / r["events"]})
    first = out[0]
    for g in out:
        t, m = g["us_per_event"] / first["us_per_event"], g["rss_bytes_per_event"] / first["rss_bytes_per_event"]
        print(f"  {g['size']:>5}: {g['us_per_event']:.2f} µs per event ({t:.2f} x {first['size']}'s), "
              f"{g['rss_bytes_per_event']:.0f} bytes of peak RSS per event ({m:.2f} x)")
        if g is not first:
            # time flat: within ±25 % of the smallest size's; memory flat or falling (memory that
            # grows slower than the input is what the issue asks for), so at most +25 %
            target(f"{g['size']}: time per event vs {first['size']}", f"{t:.2f} x", "0.75-1.25 x", 0.75 <= t <= 1.25)
            target(f"{g['size']}: peak RSS per event vs {first['size']}", f"{m:.2f} x", "<= 1.25 x", m <= 1.25)
    return out


def measure_merge(a: argparse.Namespace, target) -> dict:
    n = parse_size(a.rank_events)
    files = [ensure(DATA / f"rank{r}_{a.rank_events}.pt.trace.json", n, seed=1, rank=r, world=a.ranks,
                    offset_ns=r * 700_000) for r in range(a.ranks)]
    inp = sum(f.stat().st_size for f in files)
    print(f"\nmeasuring merge {a.ranks} x {a.rank_events}...", flush=True)
    m = alternate({"jsonloads": ("jsonloads", *files), "merge": ("merge", DATA / "merged.pftrace", *files)}, a.repeat)
    base, ours = m["jsonloads"], m["merge"]
    x = ours["seconds"] / base["seconds"]
    cores = ours["cpu_seconds"] / ours["seconds"]
    print(f"== merge {a.ranks} x {a.rank_events} ({inp / MB:.0f} MB of JSON): {ours['seconds']:.1f} s = {x:.2f} x "
          f"json.loads of all files ({base['seconds']:.1f} s) [target <= 1.0]; CPU time / wall time {cores:.2f} "
          f"[target > 1.0: more than one core busy]; peak RSS {ours['maxrss'] / MB:.0f} MB in the main process, "
          f"{ours['largest_worker_maxrss'] / MB:.0f} MB in the largest worker (a forked worker counts the pages "
          f"it shares with the main process)")
    target(f"merge {a.ranks} x {a.rank_events}: time / json.loads of all", f"{x:.2f} x", "<= 1.0 x", x <= 1.0)
    target(f"merge {a.ranks} x {a.rank_events}: uses both cores (CPU / wall)", f"{cores:.2f}", "> 1.0", cores > 1.0)
    return {"ranks": a.ranks, "rank_events": n, "input_bytes": inp, "jsonloads": base, "merge": ours}


if __name__ == "__main__":
    main()
