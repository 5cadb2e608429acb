"""The fleet benchmark of issue 15: many ranks in an S3-compatible server, summary and merge --window
on the local process pool and on a Dask LocalCluster, side by side.

    python benchmarks/bench_fleet.py                        # 32 ranks x 250k events (about 2.2 GB of JSON)
    python benchmarks/bench_fleet.py --ranks 8 --events 250000 --json out.json
    python benchmarks/bench_fleet.py --ranks 4 --events 20000  # a quick check

The ranks are made by benchmarks/generate.py (seeded; consecutive ranks' clocks 50 us apart, so the
merge aligns them by their collectives), kept in benchmarks/data/fleet/ (not in git), and put in
moto's S3 server (``moto[server]``), started here on 127.0.0.1 in a process of its own; every
command reads them from there as a user's would (s3fs, AWS_ENDPOINT_URL).

Each measurement is one ``traceconv`` command in a child process (the CLI, as a user runs it):

* ``summary 's3://.../rank*.pt.trace.json' --engine local --workers W`` and ``--engine dask
  --workers W`` (a LocalCluster of W single-threaded worker processes);
* ``merge ... --window ProfilerStep#N -o out.pftrace`` likewise.

It reports wall time and the peak RSS of the client and of each worker (VmHWM of every process
under the command, sampled until it exits), checks the Dask outputs are the local ones (the same
table, the same bytes), and the targets: Dask within 1.2x the local pool's time, each worker under
1 GB.  Then the scaling: Dask summary on 1 and 2 workers, the cost per rank and per GB of JSON,
and what that predicts for 1,024 ranks of 1 GB on 32 workers.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
DATA = HERE / "data" / "fleet"
GB = 1e9
sys.path.insert(0, str(HERE))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_ranks(ranks: int, events: int) -> list[Path]:
    from generate import generate
    DATA.mkdir(parents=True, exist_ok=True)
    files = []
    for r in range(ranks):
        f = DATA / f"e{events}" / f"rank{r}.pt.trace.json"
        f.parent.mkdir(exist_ok=True)
        if not f.exists():
            tmp = f.with_suffix(".tmp")
            tmp.write_bytes(generate(events, seed=7, rank=r, world=ranks, offset_ns=r * 50_000))
            tmp.rename(f)
        files.append(f)
    return files


def start_server(env: dict) -> tuple[subprocess.Popen, str]:
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return p, endpoint


def children(pid: int) -> list[int]:
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def hwm(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            st = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    for line in st.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024, cmd
    return None


def run(args: list[str], env: dict) -> dict:
    """One traceconv command: wall time, stdout, and the peak RSS of it and of each process under it."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "traceconv", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    peaks: dict[int, tuple[int, str]] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            todo = [p.pid]
            while todo:
                pid = todo.pop()
                h = hwm(pid)
                if h is not None:
                    peaks[pid] = h
                todo += children(pid)
            time.sleep(0.1)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    if p.returncode:
        raise SystemExit(f"traceconv {' '.join(args)} failed ({p.returncode}):\n{err.decode()[-3000:]}")
    client = peaks.get(p.pid, (0, ""))[0]
    # the processes under the command that did work: the pool's processes or Dask's workers (not
    # multiprocessing's resource tracker, nor the nannies that only watch a worker)
    workers = sorted((v for pid, (v, cmd) in peaks.items() if pid != p.pid and "resource_tracker" not in cmd
                      and v > 64 << 20), reverse=True)
    return {"seconds": wall, "client_peak": client, "worker_peaks": workers, "stdout": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=32)
    ap.add_argument("--events", type=int, default=250_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--window", default="ProfilerStep#3")
    ap.add_argument("--no-scaling", action="store_true", help="skip the 1-worker run of the scaling table")
    ap.add_argument("--repeat", type=int, default=1, help="run each command N times, alternating; report the medians")
    ap.add_argument("--verbs", default="summary,merge", help="which of summary,merge to measure")
    ap.add_argument("--json", help="save the figures here")
    a = ap.parse_args()

    t0 = time.perf_counter()
    files = make_ranks(a.ranks, a.events)
    size = sum(f.stat().st_size for f in files)
    print(f"{a.ranks} ranks x {a.events:,} events: {size / GB:.2f} GB of JSON (made in {time.perf_counter() - t0:.0f} s)",
          flush=True)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_DEFAULT_REGION": "us-east-1", "COLUMNS": "200"}
    server, endpoint = start_server(env)
    env["AWS_ENDPOINT_URL"] = endpoint
    os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                                           "AWS_ENDPOINT_URL")})
    out_dir = DATA / "out"
    out_dir.mkdir(exist_ok=True)
    figures: dict = {"ranks": a.ranks, "events": a.events, "json_bytes": size, "workers": a.workers}
    try:
        import s3fs
        fs = s3fs.S3FileSystem()
        fs.mkdir("fleet")
        t0 = time.perf_counter()
        for f in files:
            fs.put_file(str(f), f"fleet/run/{f.name}")
        print(f"uploaded to {endpoint} in {time.perf_counter() - t0:.0f} s", flush=True)
        url = "s3://fleet/run/rank*.pt.trace.json"
        load = os.getloadavg()
        print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores)", flush=True)
        figures["load_before"] = load
        w = str(a.workers)
        verbs = a.verbs.split(",")
        jobs = {
            "summary local": ["summary", url, "--engine", "local", "--workers", w, "--format", "json", "--top", "0"],
            "summary dask": ["summary", url, "--engine", "dask", "--workers", w, "--format", "json", "--top", "0"],
            "merge local": ["merge", url, "--window", a.window, "-q", "--engine", "local", "--workers", w,
                            "-o", str(out_dir / "local.pftrace")],
            "merge dask": ["merge", url, "--window", a.window, "-q", "--engine", "dask", "--workers", w,
                           "-o", str(out_dir / "dask.pftrace")],
        }
        jobs = {k: v for k, v in jobs.items() if k.split()[0] in verbs}
        runs: dict[str, list[dict]] = {k: [] for k in jobs}
        for _ in range(a.repeat):
            for name, args in jobs.items():
                r = run(args, env)
                runs[name].append(r)
                print(f"  {name:14s} {r['seconds']:7.1f} s   client peak {r['client_peak'] / 2**20:6.0f} MiB   "
                      f"workers' peaks {', '.join(f'{x / 2**20:.0f}' for x in r['worker_peaks'][:4]) or '-'} MiB",
                      flush=True)
        res = {k: sorted(v, key=lambda r: r["seconds"])[len(v) // 2] for k, v in runs.items()}
        if a.repeat > 1:
            print("  medians: " + ", ".join(f"{k} {v['seconds']:.1f} s" for k, v in res.items()))
        same_table = "summary" not in verbs or res["summary local"]["stdout"] == res["summary dask"]["stdout"]
        same_bytes = "merge" not in verbs or \
            (out_dir / "local.pftrace").read_bytes() == (out_dir / "dask.pftrace").read_bytes()
        print(f"  the same table: {same_table}; the same merged bytes: {same_bytes}")
        targets = []
        for verb in verbs:
            x = res[f"{verb} dask"]["seconds"] / res[f"{verb} local"]["seconds"]
            peak = max(res[f"{verb} dask"]["worker_peaks"] or [0])
            targets.append((f"{verb}: dask / local time", f"{x:.2f} x", "<= 1.2 x", x <= 1.2))
            targets.append((f"{verb}: peak of the largest dask worker", f"{peak / 2**20:.0f} MiB", "< 1 GB",
                            peak < 1e9))
        print("\n== targets")
        for what, fig, goal, met in targets:
            print(f"  {what:40s} {fig:>10s}   target {goal:10s} {'met' if met else 'NOT MET'}")
        figures["runs"] = {k: {kk: vv for kk, vv in v.items() if kk != "stdout"} for k, v in res.items()}
        figures["same_table"], figures["same_bytes"] = same_table, same_bytes
        if not a.no_scaling and "summary" in verbs:
            one = run(["summary", url, "--engine", "dask", "--workers", "1", "--format", "json", "--top", "0"], env)
            two = res["summary dask"]
            per_rank = one["seconds"] / a.ranks
            per_gb = one["seconds"] / (size / GB)
            speedup = one["seconds"] / two["seconds"]
            # 1,024 ranks of 1 GB on 32 workers: the per-GB cost of one worker, the work split 32 ways,
            # at the parallel efficiency measured from 1 to 2 workers
            eff = speedup / 2
            predict = 1024 * per_gb / (32 * eff)
            print("\n== scaling (dask summary)")
            print("  | workers | time | per rank | per GB of JSON |")
            print(f"  | 1 | {one['seconds']:.1f} s | {per_rank:.2f} s | {per_gb:.1f} s |")
            print(f"  | 2 | {two['seconds']:.1f} s | {two['seconds'] / a.ranks * 2:.2f} s per rank per worker | "
                  f"{two['seconds'] / (size / GB) * 2:.1f} s per worker |")
            print(f"  speed-up 1 -> 2 workers: {speedup:.2f} x (efficiency {eff:.0%})")
            print(f"  prediction, 1,024 ranks of 1 GB on 32 workers: {predict / 60:.0f} min "
                  f"({predict / 3600:.1f} h) of reading, if the store serves 32 readers as this one serves 2")
            figures["scaling"] = {"one_worker_s": one["seconds"], "two_workers_s": two["seconds"],
                                  "per_rank_s": per_rank, "per_gb_s": per_gb, "efficiency": eff,
                                  "predict_1024x1GB_32w_s": predict}
        figures["load_after"] = os.getloadavg()
        print(f"load average after: {' '.join(f'{x:.2f}' for x in figures['load_after'])}")
    finally:
        server.terminate()
        server.wait()
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=2, default=str))


if __name__ == "__main__":
    main()
