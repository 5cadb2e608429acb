"""MXNet profiler.dump() traces, on real MXNet 1.9.1 output (and damaged copies of it)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import traceconv
from traceconv.readers.chrome.mxnet import MXNetReader
from traceconv.errors import WarningCode
from traceconv.io import open_source
from traceconv.model.layout import nest
from traceconv.model import Clock, TrackKind

from chrome_input import load as load_input
from chrome_input import ns, slice_counts_by_cat
from timeline import assert_outputs_agree, assert_same_timeline, from_model

FIX = Path(__file__).parent / "fixtures" / "mxnet_trace"
ALL_EVENTS = FIX / "generated_mxnet191_profile_all.json"
FINAL = FIX / "generated_mxnet191_continuous_dump_final.json"
TRUNCATED = FIX / "generated_mxnet191_continuous_dump_midrun_TRUNCATED.json"


def read(path: Path | None = None, data: bytes | None = None):
    r = MXNetReader(open_source(path) if path else None, data=data)
    trace = r.read()
    assert sum(r.used.values()) + r.dropped == r.n_events
    return trace, r


@pytest.mark.parametrize("path", [ALL_EVENTS, FINAL, TRUNCATED], ids=lambda p: p.name)
def test_detected_and_both_outputs_agree(path, tmp_path):
    trace = traceconv.load(path)
    assert trace.meta.source_format == "mxnet"
    assert_outputs_agree(trace, tmp_path, read_back=True)


def test_counts_per_category_and_process():
    trace, r = read(ALL_EVENTS)
    _, events = load_input(ALL_EVENTS)
    assert r.n_events == len(events) and r.dropped == 0
    begins = [e for e in events if e["ph"] in ("B", "b", "(")]
    assert slice_counts_by_cat(trace) == Counter(e["cat"] for e in begins)
    assert len(trace.counters) == sum(e["ph"] == "C" for e in events)
    assert len(trace.instants) == sum(e["ph"] == "n" for e in events)
    # slices per process: every 64-bit hash pid is its own process, named after its category
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    expect = Counter(names[e["pid"]] for e in begins)
    got = Counter(trace.processes[trace.tracks[t].process].name for t in trace.slices.track)
    assert got == expect
    used_pids = {e["pid"] for e in events if e["ph"] != "M"}
    assert {p.raw_pid for p in trace.processes} == used_pids
    assert len({p.pid for p in trace.processes}) == len(used_pids)
    assert all(0 <= p.pid < 2**31 for p in trace.processes)
    assert any(p.raw_pid > 2**63 for p in trace.processes)


def test_absolute_times_frames_markers_and_counters():
    trace, _ = read(ALL_EVENTS)
    _, events = load_input(ALL_EVENTS)
    assert trace.meta.clock is Clock.UNIX
    st, s = trace.strings, trace.slices
    (frame,) = [i for i in range(len(s)) if st[s.name[i]] == "my_frame"]
    assert trace.tracks[s.track[frame]].name == "MyDomain frames"
    assert (s.ts[frame], s.dur[frame]) == (1795235214297885000, (1795235214328023 - 1795235214297885) * 1000)
    # a B/E operator and a b/e C API call, to the ns
    first_b = next(e for e in events if e["ph"] == "B")
    first_e = next(e for e in events if e["ph"] == "E")
    assert any(s.ts[i] == ns(first_b["ts"]) and s.dur[i] == ns(first_e["ts"]) - ns(first_b["ts"])
               and st[s.name[i]] == first_b["name"] for i in range(len(s)))
    api = [i for i in range(len(s)) if st[s.cat[i]] == "MXNET_C_API"]
    assert all(trace.tracks[s.track[i]].kind is TrackKind.THREAD for i in api)
    # markers keep their scope
    kind = {"g": "global", "p": "process", "t": "thread"}
    expect = sorted(kind[e["s"]] for e in events if e["ph"] == "n")
    assert expect == ["global", "process", "thread"]

    def scope(t):
        return "process" if t.kind is TrackKind.PROCESS else "global" if t.process is None else "thread"
    assert sorted(scope(trace.tracks[t]) for t in trace.instants.track) == expect
    mem = [t for t in trace.tracks if t.kind is TrackKind.COUNTER and t.name == "Memory: cpu/0"]
    assert len(mem) == 1 and mem[0].unit == "bytes"
    values = [trace.counters.value[i] for i in range(len(trace.counters)) if trace.counters.track[i] == mem[0].id]
    assert values == [float(e["args"]["Memory: cpu/0"]) for e in events if e["name"] == "Memory: cpu/0"]


def test_truncated_continuous_dump_is_salvaged():
    final, _ = read(FINAL)
    cut, r = read(TRUNCATED)
    (w,) = [w for w in cut.diagnostics.warnings if w.code is WarningCode.TRUNCATED_INPUT]
    assert "kept the 186 complete events" in w.message
    assert r.n_events == 186
    nest(final)
    nest(cut)
    assert_same_timeline(from_model(final), from_model(cut))


@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.77, 0.95])
def test_a_cut_anywhere_keeps_every_complete_event_before_it(fraction):
    text = FINAL.read_text()
    start = text.index("[") + 1
    dec = json.JSONDecoder()
    ends, pos = [], start
    while True:            # where each event of the intact file ends
        while text[pos] in " \n\t,":
            pos += 1
        if text[pos] == "]":
            break
        _, pos = dec.raw_decode(text, pos)
        ends.append(pos)
    cut_at = int(len(text) * fraction)
    trace, r = read(data=text[:cut_at].encode())
    assert r.n_events == sum(e <= cut_at for e in ends)
    assert any(w.code is WarningCode.TRUNCATED_INPUT for w in trace.diagnostics.warnings)


def test_unescaped_names_are_repaired_or_counted():
    text = ALL_EVENTS.read_text()
    text = text.replace('"name": "diag"', '"name": "C:\\data\\diag"', 1)         # not JSON escapes
    text = text.replace('"name": "broadcast_mul"', '"name": "say "hi""', 2)        # breaks the JSON
    trace, r = read(data=text.encode())
    st = trace.strings
    assert "C:\\data\\diag" in {st[n] for n in trace.slices.name}
    (bad,) = [w for w in trace.diagnostics.warnings if w.code is WarningCode.DROPPED_EVENT]
    assert bad.count == 2 and "not valid JSON" in bad.message
    # the partners of the two lost events: an end with no begin is counted too
    lost_partner = sum(w.count for w in trace.diagnostics.warnings if w.code is WarningCode.UNMATCHED_END)
    assert r.dropped == 2 + lost_partner
    _, events = load_input(ALL_EVENTS)
    assert r.n_events == len(events)


def test_mxnet_1_1_layout_relative_times_and_trailing_comma(tmp_path):
    meta = ('        {\n            "ph": "M",\n            "args": {\n                "name": "cpu/0"\n            },\n'
            '            "pid": 0,\n            "name": "process_name"\n        }\n')
    op = ('    {{\n        "name": "dot",\n        "cat": "category",\n        "ph": "{ph}",\n        "ts": {ts},\n'
          '        "pid": 0,\n        "tid": 3\n    }}\n')
    empty = tmp_path / "empty.json"
    empty.write_text('{\n    "traceEvents": [\n' + meta + ',\n    ],\n    "displayTimeUnit": "ms"\n}\n')
    trace = traceconv.load(empty)
    assert trace.meta.source_format == "mxnet" and len(trace.slices) == 0
    ops = tmp_path / "ops.json"
    ops.write_text('{\n    "traceEvents": [\n' + meta + ',\n' + op.format(ph="B", ts=120) + ",\n\n"
                   + op.format(ph="E", ts=185) + '\n    ],\n    "displayTimeUnit": "ms"\n}\n')
    trace = traceconv.load(ops)
    assert trace.meta.source_format == "mxnet"
    assert trace.meta.clock is Clock.RELATIVE
    assert (list(trace.slices.ts), list(trace.slices.dur)) == ([120000], [65000])
    assert trace.processes[0].name == "cpu/0"
