"""MegEngine chrome timelines: the real MegEngine 1.13 file, and the older layouts from formats.md §6."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import traceconv
from traceconv.readers.chrome.megengine import MegEngineReader, sniff
from traceconv.io import open_source
from traceconv.model import Clock

from chrome_input import load as load_input
from chrome_input import ns, slices_by_thread
from timeline import assert_outputs_agree

FIX = Path(__file__).parent / "fixtures" / "megengine_timeline"
DYNAMIC = FIX / "generated_mge1130_dynamic.chrome_timeline.json.gz"
LOCAL_TIME = 1795235402694290028


def read(path: Path | None = None, data: bytes | None = None):
    r = MegEngineReader(open_source(path) if path else None, data=data)
    trace = r.read()
    assert sum(r.used.values()) + r.dropped == r.n_events
    return trace, r


def test_detected_and_both_outputs_agree(tmp_path):
    trace = traceconv.load(DYNAMIC)
    assert trace.meta.source_format == "megengine"
    assert_outputs_agree(trace, tmp_path, read_back=True)


def test_counts_time_base_and_threads():
    trace, r = read(DYNAMIC)
    header, events = load_input(DYNAMIC)
    assert r.n_events == len(events) and r.dropped == 0
    ph = Counter(e["ph"] for e in events)
    assert len(trace.slices) == ph["X"] + ph["B"]
    assert len(trace.instants) == ph["i"]
    assert len(trace.counters) == ph["C"]
    assert slices_by_thread(trace) == Counter((e["pid"], e.get("tid", 0)) for e in events if e["ph"] in "XB")
    assert trace.meta.clock is Clock.UNIX
    assert int(header["metadata"]["localTime"]) == LOCAL_TIME
    st, s = trace.strings, trace.slices
    first = next(e for e in events if e["ph"] == "B")
    assert any(s.ts[i] == LOCAL_TIME + ns(first["ts"]) and st[s.name[i]] == first["name"] for i in range(len(s)))
    assert {t.name for t in trace.threads} == {"interpreter", "worker", "xpux:0"}
    (p,) = trace.processes
    assert p.name == "MegEngine (pid 18692)"
    counters = {trace.tracks[t].name for t in trace.counters.track}
    assert {"gpu_usgae_ratio", "nr_alive_tensor", "device_ahead_ms"} <= counters


def test_flows_connect_what_megengine_links():
    trace, _ = read(DYNAMIC)
    _, events = load_input(DYNAMIC)
    st, s = trace.strings, trace.slices
    kinds = Counter(st[n] for n in trace.flows.name)
    flow_ids = {}
    for e in events:
        if e["ph"] in "stf":
            flow_ids.setdefault((e["cat"], e["id"]), []).append(e["ph"])
    # every hop of every chain: s->t->...->f is len-1 links
    expect = Counter()
    for (cat, _), phs in flow_ids.items():
        expect[cat] += len(phs) - 1
    assert kinds == expect
    for i in range(len(trace.flows)):
        kind = st[trace.flows.name[i]]
        src, dst = trace.flows.src[i], trace.flows.dst[i]
        where = (trace.track_label(trace.tracks[s.track[src]]), trace.track_label(trace.tracks[s.track[dst]]))
        if kind == "KernelLaunch":     # the op on the worker launches the kernel of the same name on the device
            assert where == ("worker", "xpux:0")
            assert st[s.name[src]] == st[s.name[dst]] and st[s.cat[dst]] == "Kernel"
        elif kind == "OpDispatch":     # dispatched on the interpreter thread, executed on the worker
            assert where == ("interpreter", "worker")
            assert st[s.name[src]] == "OpDispatch"


def test_omitted_zero_fields_of_the_1_6_layout():
    doc = {"traceEvents": [
        {"name": "step", "pid": 7, "ph": "B"},                              # no tid, no ts: tid 0 at ts 0
        {"name": "prop", "pid": 7, "ph": "X", "ts": 1.5, "args": {"k": 1}},   # X without dur: 0
        {"cat": "Kernel", "name": "k", "pid": 7, "tid": 1, "ph": "B", "ts": 2.25},
        {"cat": "Kernel", "name": "k", "pid": 7, "tid": 1, "ph": "E", "ts": 3.5},
        {"name": "ratio", "pid": 7, "ph": "C", "args": {"value": 4.5}},
        {"name": "step", "pid": 7, "ph": "E", "ts": 10, "args": {"op": "x"}},
        {"name": "thread_name", "pid": 7, "tid": 1, "ph": "M", "args": {"name": "gpu0:0"}},
        {"name": "thread_name", "pid": 7, "ph": "M", "args": {"name": "main"}},
    ], "metadata": {"localTime": "1700000000000000007"}}
    data = json.dumps(doc, separators=(",", ":")).encode()
    assert sniff(b'{"traceEvents":[{"cat":"OpDispatch","id":1,"name":"7","ph":"s","scope":"7"}]}')
    trace, r = read(data=data)
    st, s = trace.strings, trace.slices
    got = sorted((st[s.name[i]], s.ts[i], s.dur[i], trace.track_label(trace.tracks[s.track[i]]))
                 for i in range(len(s)))
    t0 = 1700000000000000007
    assert got == [("k", t0 + 2250, 1250, "gpu0:0"), ("prop", t0 + 1500, 0, "main"), ("step", t0, 10000, "main")]
    assert trace.counters.ts[0] == t0 and trace.counters.value[0] == 4.5
    assert trace.meta.clock is Clock.UNIX
    step = next(i for i in range(len(s)) if st[s.name[i]] == "step")
    assert trace.slice_args(step) == {"op": "x"}


def test_1_5_layout_metadata_event_and_1_4_bare_array():
    v15 = {"traceEvents": [
        {"name": "Metadata", "ph": "I", "pid": 3, "args": {"localTime": 1700000000000000.5}},
        {"name": "OpDispatch", "ph": "B", "pid": 3, "ts": 1},
        {"name": "OpDispatch", "ph": "E", "pid": 3, "ts": 2},
    ]}
    trace, r = read(data=json.dumps(v15).encode())
    assert r.used["metadata"] == 1 and len(trace.instants) == 0
    assert list(trace.slices.ts) == [1700000000000000500 + 1000]
    v14 = [{"name": "OpDispatch", "ph": "B", "pid": 3, "tid": 0, "ts": 1.5},
           {"name": "OpDispatch", "ph": "E", "pid": 3, "tid": 0, "ts": 2}]
    trace, _ = read(data=json.dumps(v14).encode())
    assert trace.meta.clock is Clock.RELATIVE
    assert list(trace.slices.ts) == [1500]


def test_the_static_profile_is_not_claimed():
    assert not sniff(b'{\n  "profiler": {"host": {}}, "graph_exec": {"operator": {}}}')


@pytest.mark.parametrize("bad", ['{"traceEvents": [], "metadata": {"localTime": "soon"}}',
                                 '{"traceEvents": [], "metadata": 5}'])
def test_bad_metadata_is_a_located_error(bad, tmp_path):
    p = tmp_path / "1.chrome_timeline.json"
    p.write_text(bad)
    with pytest.raises(traceconv.TraceconvError, match="MegEngine"):
        traceconv.load(p, "megengine")
