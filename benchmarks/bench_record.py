"""Overhead of recording: the cost of one span (enter + exit) and of one counter sample, side by side
in one run with the timers the drop-ins replace and with viztracer's sparse/custom events.

    python benchmarks/bench_record.py [--n 200000] [--repeat 5]

Each row times the same loop body ``n`` times, the best of ``repeat`` runs, minus the cost of the
empty loop, in ns per operation.  Times are this thread's CPU time (``time.thread_time_ns``), not
wall time, so that other work on a shared machine does not count (it still disturbs the caches).  Rows whose
package is not installed are printed as "not installed".  "recording" rows time the hot path only
(the buffer is big enough not to fill inside the timed loop); the "amortized" row adds each event's
share of writing the .pftrace (turning the buffered tuples into the model and encoding them), timed
separately on the same number of spans.

Compared: ``mlagents_envs.timers.hierarchical_timer`` (a generator context manager over a node
tree), Sample Factory's ``Timing.add_time`` (its ``timing.py`` loaded alone, with its imports of
psutil / torch-importing helpers stubbed), viztracer 1.x with ``log_sparse=True`` (only what is
asked is recorded): ``tracer.log_event(name)`` (a custom duration event) and a ``@log_sparse``
function, and its counters (``add_counter``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import originals  # noqa: E402  (tests/originals.py: the real timer modules)
import traceconv.record as rec  # noqa: E402
from traceconv.record import mlagents as our_ml  # noqa: E402
from traceconv.record import samplefactory as our_sf  # noqa: E402


_now = time.thread_time_ns     # CPU time of this thread: other work on the machine does not count


def bench(body, n: int, repeat: int) -> float:
    """Best ns per call of ``body(n)`` (which loops n times itself)."""
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = _now()
            body(n)
            best = min(best, _now() - t0)
    finally:
        gc.enable()
    return best / n


def run_phase(rows_out: list, phase: list, n: int, repeat: int, base: float) -> None:
    """Time every row of ``phase`` once per round, rounds interleaved (so a burst of other work on
    the machine hits every row alike), keeping each row's best: (group, label, body, after, minus)."""
    best = [float("inf")] * len(phase)
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            for k, (_, _, body, after, _) in enumerate(phase):
                t0 = _now()
                body(n)
                best[k] = min(best[k], _now() - t0)
                if after is not None:
                    after()
    finally:
        gc.enable()
    for k, (group, label, _, _, minus) in enumerate(phase):
        rows_out.append((group, label, max(0.0, best[k] / n - base - (minus or 0.0))))


def empty_loop(n):
    for _ in range(n):
        pass


class Empty:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


_EMPTY = Empty()


def load_sf_timing():
    return originals.samplefactory_timing()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    n, repeat = a.n, a.repeat
    rows: list[tuple[str, str, float | None]] = []
    base = bench(empty_loop, n, repeat)
    span, counter = rec.span, rec.counter

    def empty_cm(n):
        for _ in range(n):
            with _EMPTY:
                pass

    def nullctx(n):
        nc = contextlib.nullcontext
        for _ in range(n):
            with nc():
                pass

    def rec_span(n):
        for _ in range(n):
            with span("step"):
                pass

    def rec_span_args(n):
        for i in range(n):
            with span("step", cat="rollout", i=i):
                pass

    def rec_counter(n):
        for i in range(n):
            counter("fps", i)

    @rec.traced
    def traced_fn():
        pass

    def plain_fn():
        pass

    def call_traced(n):
        for _ in range(n):
            traced_fn()

    def call_plain(n):
        for _ in range(n):
            plain_fn()

    plain = bench(call_plain, n, repeat)
    try:
        import mlagents_envs.timers as ml
    except ImportError:
        ml = None
    sf = load_sf_timing()

    def ml_timer(mod):
        def body(n):
            h = mod.hierarchical_timer
            for _ in range(n):
                with h("step"):
                    pass
        return body

    def ml_gauge(mod):
        def body(n):
            g = mod.set_gauge
            for i in range(n):
                g("fps", float(i))
        return body

    def sf_add_time(mod):
        def body(n):
            t = mod.Timing("bench")
            for _ in range(n):
                with t.add_time("step"):
                    pass
        return body

    # ---- nothing recording: the no-op paths and the timers the drop-ins replace
    phase = [
        ("off", "empty context manager (a class with __enter__/__exit__)", empty_cm, None, None),
        ("off", "contextlib.nullcontext()", nullctx, None, None),
        ("off", "traceconv span, no recorder", rec_span, None, None),
        ("off", "traceconv @traced call, no recorder (minus a plain call)", call_traced, None, plain),
        ("off", "traceconv counter, no recorder", rec_counter, None, None),
        ("timers", "traceconv.record.mlagents.hierarchical_timer, no recorder", ml_timer(our_ml), None, None),
        ("timers", "traceconv.record.samplefactory Timing.add_time, no recorder", sf_add_time(our_sf), None, None),
    ]
    if ml:
        phase += [("timers", "ML-Agents hierarchical_timer (mlagents_envs.timers)", ml_timer(ml), None, None),
                  ("timers", "ML-Agents set_gauge", ml_gauge(ml), None, None)]
    else:
        rows.append(("timers", "ML-Agents hierarchical_timer (mlagents_envs.timers)", None))
    if sf:
        phase.append(("timers", "Sample Factory Timing.add_time (sample_factory.utils.timing)", sf_add_time(sf),
                      None, None))
    else:
        rows.append(("timers", "Sample Factory Timing.add_time", None))
    run_phase(rows, phase, n, repeat, base)

    # ---- recording (hot path: the buffer holds the whole loop; what it buffered is dropped after)
    tmp = Path(tempfile.mkdtemp(prefix="bench-record-"))
    rec.start(tmp / "bench.pftrace", buffer=max(1 << 16, n + 16), workers=False)
    r = rec.recorder()
    drain = r.take

    def disabled_span(n):
        rec.disable()
        rec_span(n)
        rec.enable()

    run_phase(rows, [
        ("recording", "traceconv span", rec_span, drain, None),
        ("recording", "traceconv span with cat and an arg", rec_span_args, drain, None),
        ("recording", "traceconv @traced call (minus a plain call)", call_traced, drain, plain),
        ("recording", "traceconv counter sample", rec_counter, drain, None),
        ("recording", "traceconv.record.mlagents.hierarchical_timer", ml_timer(our_ml), drain, None),
        ("recording", "traceconv.record.mlagents.set_gauge", ml_gauge(our_ml), drain, None),
        ("recording", "traceconv.record.samplefactory Timing.add_time", sf_add_time(our_sf), drain, None),
        ("recording", "traceconv span, recorder started but disable()d", disabled_span, drain, None),
    ], n, repeat, base)
    # the write, amortized: n buffered spans turned into the model and written as one chunk
    best_write = float("inf")
    for _ in range(max(2, repeat // 2)):
        rec_span(n)
        t0 = _now()
        r.flush()
        best_write = min(best_write, _now() - t0)
    rows.append(("recording", "writing the .pftrace, per span (a flush of n spans)", best_write / n))
    span_cost = next(v for g, lab, v in rows if lab == "traceconv span")
    rows.append(("recording", "traceconv span + its share of the write (amortized)", span_cost + best_write / n))
    rec.stop()
    size = (tmp / "bench.pftrace").stat().st_size

    # ---- viztracer (sparse: only what is asked is recorded)
    try:
        from viztracer import VizTracer, log_sparse
    except ImportError:
        VizTracer = None
    if VizTracer is not None:
        tracer = VizTracer(log_sparse=True, verbose=0, tracer_entries=max(1_000_000, 4 * n))
        tracer.start()

        def viz_event(n):
            le = tracer.log_event
            for _ in range(n):
                with le("step"):
                    pass

        @log_sparse
        def sparse_fn():
            pass

        def viz_sparse(n):
            for _ in range(n):
                sparse_fn()

        def viz_counter(n):
            ac = tracer.add_counter
            for i in range(n):
                ac("fps", {"value": i})

        run_phase(rows, [
            ("viztracer", "viztracer log_event (custom duration event)", viz_event, tracer.clear, None),
            ("viztracer", "viztracer @log_sparse call (minus a plain call)", viz_sparse, tracer.clear, plain),
            ("viztracer", "viztracer add_counter", viz_counter, tracer.clear, None),
        ], n, repeat, base)
        tracer.stop()
        tracer.clear()
    else:
        rows.append(("viztracer", "viztracer", None))

    print(f"# bench_record: n={n:,} per row, best of {repeat} interleaved rounds, thread CPU time; "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} cores; empty loop {base:.1f} ns/iteration (subtracted)")
    print(f"# .pftrace of the write rows: {size / 1e6:.1f} MB")
    print("| group | operation | ns per op |")
    print("|---|---|---:|")
    for g, label, v in rows:
        print(f"| {g} | {label} | {'not installed' if v is None else f'{v:,.0f}'} |")


if __name__ == "__main__":
    main()
