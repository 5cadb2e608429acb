"""MosaicML Composer traces, on the real files of a 2-rank CPU run."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import orjson
import pytest

import traceconv
from traceconv.readers.chrome import paths
from traceconv.readers.chrome.composer import ComposerReader
from traceconv.errors import WarningCode
from traceconv.io import open_source
from traceconv.model import Clock

from chrome_input import load as load_input
from chrome_input import ns, slice_counts_by_cat
from timeline import assert_outputs_agree

FIX = Path(__file__).parent / "fixtures" / "composer"
RANK0 = FIX / "composer_profiler" / "ep0-ba3-rank0.json.gz"
MERGED = FIX / "composer_profiler" / "merged_trace.json.gz"
TORCH0 = FIX / "torch_profiler" / "rank0.3.pt.trace.json.gz"
TORCH_BASE = 1790857026000000000       # baseTimeNanoseconds of rank0.3.pt.trace.json


def read(path: Path):
    r = ComposerReader(open_source(path))
    return r.read(), r


def x_set(trace, cat):
    st, s = trace.strings, trace.slices
    return Counter((st[s.name[i]], s.ts[i], s.dur[i]) for i in range(len(s)) if st[s.cat[i]] == cat)


@pytest.mark.parametrize("path", [RANK0, MERGED, TORCH0], ids=lambda p: p.name)
def test_detected_and_both_outputs_agree(path, tmp_path):
    trace = traceconv.load(path)
    assert trace.meta.source_format == "composer"
    assert trace.meta.clock is Clock.UNIX
    assert_outputs_agree(trace, tmp_path)


def test_per_rank_trace_counts_and_window_edges():
    trace, r = read(RANK0)
    _, events = load_input(RANK0)
    assert r.n_events == len(events) and sum(r.used.values()) + r.dropped == len(events)
    ph = Counter(e["ph"] for e in events)
    begins = ph["B"]
    # every B is a slice (the 3 left open at the window's end are ended at the end of the trace);
    # the 9 E whose B came before the window are counted, and the warning says why
    unmatched_b = sum(w.count for w in trace.diagnostics.warnings if w.code is WarningCode.UNMATCHED_BEGIN)
    unmatched_e = sum(w.count for w in trace.diagnostics.warnings if w.code is WarningCode.UNMATCHED_END)
    assert (unmatched_b, unmatched_e) == (3, 9)
    assert begins - unmatched_b == ph["E"] - unmatched_e
    assert len(trace.slices) == ph["X"] + begins
    assert any("profiling window" in w.message for w in trace.diagnostics.warnings
               if w.code is WarningCode.UNMATCHED_END)
    xs = Counter(e.get("cat", "") for e in events if e["ph"] == "X")
    cats = slice_counts_by_cat(trace)
    assert all(cats[c] == n for c, n in xs.items())
    # counters: one track per series (cpu: cpu_percent; memory: used/free...)
    series = {trace.tracks[t].name for t in set(trace.counters.track)}
    assert "cpu cpu_percent" in series
    assert len(trace.counters) == sum(len(e["args"]) for e in events if e["ph"] == "C")
    assert trace.meta.rank == 0
    sync = trace.meta.extra["composer.ranks"]["0"]
    assert sync == {"global_rank": 0, "clock_sync_timestamp_us": 1795235655577620, "clock_sync_error_bound": 8364}


def test_composer_times_are_absolute_and_torch_times_are_shifted_to_match_the_torch_trace():
    trace, _ = read(RANK0)
    _, events = load_input(RANK0)
    st, s = trace.strings, trace.slices
    # Composer's own markers: absolute Unix µs, exactly
    (init,) = [i for i in range(len(s)) if st[s.name[i]] == "callback/Profiler/event/init"]
    assert (s.ts[init], s.dur[init]) == (1795235654049672000, (1795235654049808 - 1795235654049672) * 1000)
    # the torch events Composer re-emits with relative ts land exactly where the Kineto trace puts them
    torch = traceconv.load(TORCH0)
    assert torch.meta.source_format == "composer" and torch.meta.rank == 0
    assert x_set(trace, "cpu_op") == x_set(torch, "cpu_op")
    assert x_set(trace, "user_annotation") == x_set(torch, "user_annotation")
    rel = next(e for e in events if e["ph"] == "X")
    assert (st[s.name[0]], s.ts[0]) != ("", 0)
    assert any(s.ts[i] == TORCH_BASE + ns(rel["ts"]) for i in range(len(s)) if st[s.name[i]] == rel["name"])
    assert any("rank0.3.pt.trace.json" in w.message for w in trace.diagnostics.warnings)
    # both torch flows survive the shift
    assert len(trace.flows) == 20


def test_without_the_companion_kinetos_base_time_rule_gives_the_same_times(tmp_path):
    alone = tmp_path / "traces" / "ep0-ba3-rank0.json.gz"
    alone.parent.mkdir()
    shutil.copy(RANK0, alone)
    a, _ = read(RANK0)
    b, _ = read(alone)
    assert list(a.slices.ts) == list(b.slices.ts)
    assert any("base-time rule" in w.message for w in b.diagnostics.warnings)


def test_process_names_rank_first_torch_name_as_label():
    trace, _ = read(RANK0)
    (p,) = trace.processes
    assert p.name == "Rank 0 training loop process"
    assert "python" in p.labels
    assert p.sort_index == 0
    names = {t.name for t in trace.threads}
    assert "Training Loop" in names and "thread 22294 (pt_gloo_runloop)" in names


def test_merged_trace_keeps_both_ranks():
    trace, r = read(MERGED)
    _, events = load_input(MERGED)
    assert sum(r.used.values()) + r.dropped == len(events)
    assert sorted(p.raw_pid for p in trace.processes) == [0, 1]
    assert sorted(trace.meta.extra["composer.ranks"]) == ["0", "1"]
    assert trace.meta.rank is None


def test_read_in_bulk_by_the_scanner_as_a_stream(monkeypatch):
    """A Composer trace is streamed, its events taken in bulk by the compiled scanner: only the
    metadata events go through the general decoder (until 2026-11-28 the whole document was decoded
    and every event converted in Python: 6.4 s and 800 MB for 236 MB, now ~2 s and ~110 MB)."""
    decoded = []
    convert = ComposerReader._convert_events
    monkeypatch.setattr(ComposerReader, "_convert_events",
                        lambda self, events, *a: (decoded.extend(e.ph for e in events), convert(self, events, *a)))
    trace, _ = read(RANK0)
    # (and the three torch events with a string tid: "PyTorch Profiler (0)" and two instants)
    assert Counter(decoded) == Counter({"M": 19, "i": 2, "X": 1})
    assert (len(trace.slices), len(trace.counters)) == (1814, 165)   # as read whole (test_chunked_reading)


def _torch_and_composer(path: Path, first_abs_us: int, late_abs_us: int) -> None:
    """A Composer array: 2,100 Composer markers (Unix µs from ``first_abs_us``), then torch events
    (relative µs), then one Composer marker at ``late_abs_us``."""
    events = [{"name": "process_name", "cat": "", "ph": "M", "ts": first_abs_us, "pid": 0, "tid": 1,
               "args": {"name": "Rank 0 training loop process"}},
              {"name": "global_rank", "cat": "", "ph": "M", "ts": first_abs_us, "pid": 0, "tid": 1,
               "args": {"value": 0}}]
    events += [{"name": "event/batch", "cat": "", "ph": "X", "ts": first_abs_us + 10 * i, "dur": 5, "pid": 0,
                "tid": 1} for i in range(2100)]
    events += [{"name": "aten::mm", "ph": "X", "ts": 4_000_000 + 3 * i, "dur": 2, "pid": 0, "tid": 2}
               for i in range(50)]
    events.append({"name": "event/fit", "cat": "", "ph": "X", "ts": late_abs_us, "dur": 5, "pid": 0, "tid": 1})
    path.write_bytes(b"[\n" + b",\n".join(orjson.dumps(e) for e in events) + b"\n]\n")


@pytest.mark.parametrize("days_earlier", [0, 1, 200])
def test_the_torch_base_is_judged_from_every_event(tmp_path, monkeypatch, days_earlier):
    """Without a companion trace the torch events' base is kineto's rule applied to the earliest
    Composer time of the file.  The stream reads the events with the base its first 2,000 events
    give; when a later event is earlier, in another of kineto's 91-day buckets (200 days earlier),
    the read starts over told the right base: the times are those of the whole document's read."""
    first = 1_795_235_654_049_672
    late = first - days_earlier * 86_400_000_000
    src = tmp_path / "traces" / "ep0-ba3-rank0.json"
    src.parent.mkdir()
    _torch_and_composer(src, first, late)
    starts = []
    init = ComposerReader.__init__
    monkeypatch.setattr(ComposerReader, "__init__", lambda self, *a: (starts.append(1), init(self, *a))[1])
    fast = traceconv.load(src)
    monkeypatch.setattr(paths, "FAST", False)
    whole = traceconv.load(src)
    assert len(starts) == 1 + (days_earlier == 200) + 1
    bucket = 7_889_238 * 10**9
    base = late * 1000 - late * 1000 % bucket
    for t in (fast, whole):
        st, s = t.strings, t.slices
        torch = sorted(s.ts[i] for i in range(len(s)) if st[s.name[i]] == "aten::mm")
        assert torch == [base + (4_000_000 + 3 * i) * 1000 for i in range(50)]
        assert t.meta.extra["composer.torch_base_time_ns"] == base
        assert [w.message for w in t.diagnostics.warnings if w.code is WarningCode.NOTE] == [
            "torch-profiler events with relative times were placed on Unix time with kineto's base-time rule "
            "(no companion .pt.trace.json found)"]
    assert list(fast.slices.ts) == list(whole.slices.ts)
    assert (first * 1000 - first * 1000 % bucket != base) == (days_earlier == 200)
