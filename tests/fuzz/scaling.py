"""``python -m tests.fuzz.scaling [--size N] [--factor 4] [--only NAME ...]``: what costs more than
linear time.

Each shape below is an input of an unusual kind (thousands of lanes, a very long event, many
reports, flows across a recording's chunks, ...) made at ``size`` and at ``factor`` times that,
and read, nested and written to .pftrace in this process (``traceconv.convert``; ``merge`` and
recording for theirs), the two runs timed.  A shape whose time grows by more than ``2 × factor``
is printed as SUPERLINEAR and the exit status is 1.  Timing, so never part of the test suite
(tests/test_fuzz.py only checks that every shape makes an input traceconv takes); the shapes
are those that found a cost growing with the square of the input (docs/design.md, *Twentieth
day*), kept so that a change bringing one back shows here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import traceconv

_NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _chrome(events: list[dict]) -> str:
    return json.dumps({"traceEvents": events})


def _x(name: str, ts: int, dur: int, pid: int = 1, tid: int = 1, **more) -> dict:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, **more}


def stairs(n: int) -> str:
    """Slices that each partly overlap all the others: a lane each."""
    return _chrome([_x("a", i, n) for i in range(n)])


def lanes_of_many_threads(n: int) -> str:
    """n / 40 threads of one process, each with 40 overlapping slices: 40 lanes each."""
    return _chrome([_x("a", i, 100, tid=t) for t in range(max(1, n // 40)) for i in range(40)])


def long_event(n: int) -> str:
    """A slice whose args hold n kB, among 3,000 small ones (past the first 2,000): many blocks."""
    events = [_x(f"e{i}", i, 1) for i in range(3000)]
    events.insert(2500, _x("big", 5000, 2, args={"s": "x" * (n * 1000)}))
    return _chrome(events)


def keys_after_the_array(n: int) -> str:
    """n kB of a top-level key after the event array."""
    return json.dumps({"traceEvents": [_x(f"e{i}", i, 1) for i in range(3000)], "otherData": {"s": "x" * (n * 1000)}})


def unique_tids(n: int) -> str:
    return _chrome([_x("a", i, 1, tid=i) for i in range(n)])


def async_ids(n: int) -> str:
    return _chrome([e for i in range(n) for e in ({"ph": "b", "id": i, "name": "a", "cat": "c", "ts": i, "pid": 1, "tid": 1},
                                                  {"ph": "e", "id": i, "name": "a", "cat": "c", "ts": i + 5, "pid": 1, "tid": 1})])


def be_stack(n: int) -> str:
    return _chrome([{"ph": "B", "name": "a", "ts": i, "pid": 1, "tid": 1} for i in range(n)]
                   + [{"ph": "E", "ts": n + i, "pid": 1, "tid": 1} for i in range(n)])


def sample_factory_reports(n: int) -> str:
    """n / 10 SF1 timing lines: a report (a process and its tree) each."""
    line = ("[2019-11-27 22:06:{s:02d},056] Env runner 0: timing waiting: 0.8708, reset: 27.0515, "
            "env_step: 26.0700, work: 36.5773\n")
    return "".join(line.format(s=i % 60) for i in range(max(1, n // 10)))


def mlagents_wide(n: int) -> str:
    return json.dumps({"name": "root", "total": 1.0, "count": 1, "self": 0.0,
                       "children": {f"c{i}": {"total": 0.0001, "count": 1, "self": 0.0001} for i in range(n)}})


def collectives(n: int) -> dict[str, str]:
    """Two ranks whose clocks start at 0, with n / 4 all-reduce kernels, rank 1's 3 µs late."""
    out = {}
    for r in range(2):
        events = [_x("ProfilerStep#1", 0, n * 25 + 100, cat="user_annotation")]
        events += [_x(_NCCL, 10 + 100 * k + 3 * r, 50, pid=0, tid=7, cat="kernel", args={"Collective name": "allreduce"})
                   for k in range(max(1, n // 4))]
        out[f"rank{r}.pt.trace.json"] = json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": r, "world_size": 2},
                                                    "traceEvents": events})
    return out


# name -> (make the input at a size, the file name, what reads it)
SHAPES: dict[str, tuple[Callable[[int], str | dict[str, str]], str, str | None]] = {
    "stairs": (stairs, "t.json", None),
    "lanes_of_many_threads": (lanes_of_many_threads, "t.json", None),
    "long_event": (long_event, "t.json", None),
    "keys_after_the_array": (keys_after_the_array, "t.json", None),
    "unique_tids": (unique_tids, "t.json", None),
    "async_ids": (async_ids, "t.json", None),
    "be_stack": (be_stack, "t.json", None),
    "sample_factory_reports": (sample_factory_reports, "sf_log.txt", "sample-factory"),
    "mlagents_wide": (mlagents_wide, "timers.json", "mlagents"),
    "merge_collectives": (collectives, "", "merge"),
    "record_flows": (lambda n: "", "", "record"),
}


def _record(n: int, out: Path) -> None:
    """n spans, each pair a flow, recorded in chunks of 512 events a thread (flows cross them).
    (Linear before its mend too, at ~35 µs an event: only the times printed show that.)"""
    import traceconv.record as rec
    rec.start(out, buffer=512)
    for _ in range(n // 2):
        f = rec.new_flow()
        with rec.span("produce", flow_out=f):
            pass
        with rec.span("consume", flow_in=f):
            pass
    rec.stop()


def run(name: str, n: int, folder: Path) -> None:
    """Make shape ``name`` at size ``n`` in ``folder`` and take it through traceconv."""
    make, fname, how = SHAPES[name]
    out = folder / "out.pftrace"
    if how == "record":
        _record(n, out)
        return
    data = make(n)
    if how == "merge":
        ranks = folder / "ranks"
        ranks.mkdir(exist_ok=True)
        for k, text in data.items():  # type: ignore[union-attr]
            (ranks / k).write_text(text)
        traceconv.merge([ranks], out)
        return
    src = folder / fname
    src.write_text(data)  # type: ignore[arg-type]
    traceconv.convert(src, out, from_format=how)


def timed(name: str, n: int) -> float:
    with tempfile.TemporaryDirectory(prefix="traceconv-scaling-") as d:
        t = time.perf_counter()
        run(name, n, Path(d))
        return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz.scaling", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=20_000, help="the smaller input's size (events, roughly)")
    ap.add_argument("--factor", type=int, default=4, help="how much larger the second input is")
    ap.add_argument("--only", nargs="*", help="these shapes only")
    a = ap.parse_args(argv)
    bad = 0
    for name in a.only or list(SHAPES):
        timed(name, 100)                            # (imports and first calls out of the timing)
        small, large = timed(name, a.size), timed(name, a.size * a.factor)
        grew = large / max(small, 1e-3)
        flag = grew > 2 * a.factor
        bad += flag
        print(f"{name:24s} {small:7.2f} s  {large:7.2f} s  x{grew:5.1f}{'  SUPERLINEAR' if flag else ''}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
