"""traceconv's own .pftrace read back into the model (``traceconv.record.reader``): what the
recorder's stop merges and relinks.  Each slice comes back as it was written: name, start,
duration, category and args, also where slices overlap on a thread (its overlap lanes)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traceconv
from traceconv.model import Trace, TrackKind
from traceconv.model.args import decode_args
from traceconv.record.reader import read_pftrace

FIX = Path(__file__).parent / "fixtures"


def slices(t: Trace) -> Counter:
    s = t.slices
    return Counter((t.strings[n], t.strings[c], ts, d, repr(t.slice_args(i)))
                   for i, (n, c, ts, d) in enumerate(zip(s.name, s.cat, s.ts, s.dur)))


def test_overlapping_slices_on_one_thread_come_back_whole(tmp_path):
    """Slices that overlap without nesting are written on overlap lanes of their thread; each
    lane's begins and ends pair on that lane (paired on the thread, A [0, 10] and B [5, 15] came
    back as B [5, 10] and A [0, 15])."""
    t = Trace("x")
    th = t.thread(t.process(1, "p", pid=1), 1, "t")
    t.add_slice(th.track, 0, 10_000, "A", "c", {"k": 1})
    t.add_slice(th.track, 5_000, 10_000, "B")
    t.add_slice(th.track, 6_000, 1_000, "B.inner")
    t.add_slice(th.track, 12_000, 1_000, "C")
    out = tmp_path / "ov.pftrace"
    traceconv.save(t, out)
    assert slices(read_pftrace(out)) == slices(t)


@pytest.mark.parametrize("fixture", [
    "lanes/with_stack_overlap.pt.trace.json",
    "kineto/generated_torch213_cpu_single_worker0.pt.trace.json.gz",
    "mlagents/python_SoccerTwos_run_logs_timers.json",
])
def test_a_conversion_reads_back_slice_for_slice(tmp_path, fixture):
    t = traceconv.load(FIX / fixture)
    out = tmp_path / "t.pftrace"
    traceconv.save(t, out)
    back = read_pftrace(out)
    assert slices(back) == slices(t) and len(back.slices) == len(t.slices) > 0


ARG = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
                   | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
                   lambda inner: st.lists(inner, min_size=1, max_size=3)
                   | st.dictionaries(st.text(min_size=1, max_size=4), inner, min_size=1, max_size=3),
                   max_leaves=6)


@st.composite
def traces(draw):
    """Slices that nest, overlap and repeat on a few threads of two processes, instants, counters
    and args of every JSON kind (a null or an empty container at the top of the args reads back
    as ``None``: the writer gives it no value field)."""
    t = Trace("drawn")
    threads = [t.thread(t.process(p, f"p{p}", pid=p), tid, f"t{tid}") for p, tid in ((1, 1), (1, 2), (2, 3))]
    for _ in range(draw(st.integers(1, 30))):
        th = draw(st.sampled_from(threads))
        ts, dur = draw(st.integers(0, 10_000)), draw(st.integers(0, 3_000))
        args = draw(st.none() | st.dictionaries(st.sampled_from(["a", "b", "flow_out", "x y"]), ARG, max_size=3))
        name, cat = draw(st.sampled_from(["step", "fwd", "bwd", "é"])), draw(st.sampled_from([None, "c", "d"]))
        if draw(st.booleans()):
            t.add_slice(th.track, ts, dur, name, cat, args)
        else:
            t.add_instant(th.track, ts, name, cat, args)
    mem = t.track(TrackKind.COUNTER, "mem", t.processes[0])
    for k in range(draw(st.integers(0, 4))):
        t.add_counter(mem.id, 100 * k, draw(st.floats(-1e9, 1e9)))
    return t


def instants(t: Trace) -> Counter:
    i = t.instants
    label = {tr.id: t.track_label(tr) for tr in t.tracks}
    return Counter((label[tr], t.strings[n], t.strings[c], ts, repr(decode_args(i.args[k])))
                   for k, (tr, n, c, ts) in enumerate(zip(i.track, i.name, i.cat, i.ts)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(traces())
def test_any_trace_reads_back_as_it_was_written(tmp_path, t):
    out = tmp_path / "d.pftrace"
    traceconv.save(t, out)
    back = read_pftrace(out)
    assert slices(back) == slices(t) and instants(back) == instants(t)
    assert Counter(zip(back.counters.ts, back.counters.value)) == Counter(zip(t.counters.ts, t.counters.value))
