"""traceconv's own .pftrace read back into the model (``traceconv.record.reader``): what the
recorder's stop merges and relinks.  Each slice comes back as it was written: name, start,
duration, category and args, also where slices overlap on a thread (its overlap lanes)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import traceconv
from traceconv.model import Trace
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
