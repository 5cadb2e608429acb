"""The generic Chrome Trace Event JSON reader: every phase, the repair path, both writers."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from pathlib import Path

import orjson
import pytest

import traceconv
from traceconv.readers.chrome import paths as chrome_paths
from traceconv.readers.chrome import reader
from traceconv.readers.chrome.reader import ChromeReader, sniff, us_to_ns
from traceconv.errors import TraceconvError, WarningCode
from traceconv.model.layout import nest
from traceconv.model import Clock, TrackKind

from chrome_input import load as load_input
from timeline import assert_outputs_agree, assert_same_timeline, from_model

FIX = Path(__file__).parent / "fixtures" / "chrome_json"
WEIRD = 'quote " backslash \\ newline \n tab \t ünïcødé 中文 🚀'


def read(doc, cls=ChromeReader):
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    r = cls(data=data)
    trace = r.read()
    assert sum(r.used.values()) + r.dropped == r.n_events, (dict(r.used), r.dropped, r.n_events)
    return trace, r


def slices(trace):
    st = trace.strings
    s = trace.slices
    return sorted((st[s.name[i]], s.ts[i], s.dur[i], trace.track_label(trace.tracks[s.track[i]]))
                  for i in range(len(s)))


def warned(trace, code):
    return sum(w.count for w in trace.diagnostics.warnings if w.code is code)


# ---------------------------------------------------------------- numbers and ids

@pytest.mark.parametrize("text,ns", [
    (b"12", 12000), (b"12.345", 12345), (b"-12.345", -12345), (b"12.5", 12500), (b"0.001", 1),
    (b"4378354946620.791", 4378354946620791), (b"1661203462598738", 1661203462598738000),
    (b'"123.456"', 123456), (b"1.5e3", 1500000), (b"12.3456", 12346), (b"x", None), (b"", None),
])
def test_us_to_ns_is_exact(text, ns):
    assert us_to_ns(text) == ns


def test_ts_as_string_pid_tid_as_strings_and_64bit_ids():
    big = 17510480809887784029
    trace, _ = read({"traceEvents": [
        {"ph": "X", "name": "a", "ts": "1700000000123456.789", "dur": "2.5", "pid": "Spans", "tid": "span"},
        {"ph": "X", "name": "b", "ts": 1700000000123457, "dur": 1, "pid": big, "tid": big},
        {"ph": "X", "name": "c", "ts": 1700000000123458, "dur": 1, "pid": big - 1, "tid": 7},
    ]})
    assert slices(trace) == [("a", 1700000000123456789, 2500, "span"),
                             ("b", 1700000000123457000, 1000, f"tid {big}"),
                             ("c", 1700000000123458000, 1000, "thread 7")]
    procs = {p.raw_pid: p for p in trace.processes}
    assert procs["Spans"].name == "Spans"
    assert procs[big].pid != procs[big - 1].pid            # 64-bit hashes stay apart
    assert all(0 <= p.pid < 2**31 for p in trace.processes)
    assert procs[big].name == f"pid {big}"
    assert trace.meta.clock is Clock.UNIX


def test_relative_times_give_a_relative_clock():
    trace, _ = read([{"ph": "X", "name": "a", "ts": 10, "dur": 5, "pid": 1, "tid": 1}])
    assert trace.meta.clock is Clock.RELATIVE
    assert slices(trace) == [("a", 10000, 5000, "thread 1")]


# ---------------------------------------------------------------- B/E

def test_begin_end_matching_like_perfetto():
    ev = [
        {"ph": "B", "name": "outer", "ts": 0, "pid": 1, "tid": 1, "args": {"a": 1}},
        {"ph": "B", "name": "inner", "ts": 1, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 2, "pid": 1, "tid": 1},                       # no name: closes the top
        {"ph": "B", "name": "left-open", "ts": 3, "pid": 1, "tid": 1},
        {"ph": "E", "name": "outer", "ts": 4, "pid": 1, "tid": 1, "args": {"b": 2}},  # closes outer, ends left-open
        {"ph": "E", "name": "nothing", "ts": 5, "pid": 1, "tid": 1},    # closes nothing: dropped
        {"ph": "B", "name": "never-ended", "ts": 6, "pid": 1, "tid": 1},
        {"ph": "X", "name": "last", "ts": 7, "dur": 3, "pid": 1, "tid": 2},
        # out of order in the file: sorted by time per thread
        {"ph": "E", "name": "late", "ts": 21, "pid": 1, "tid": 3},
        {"ph": "B", "name": "late", "ts": 20, "pid": 1, "tid": 3},
    ]
    trace, r = read(ev)
    assert slices(trace) == [
        ("inner", 1000, 1000, "thread 1"), ("last", 7000, 3000, "thread 2"),
        ("late", 20000, 1000, "thread 3"),
        ("left-open", 3000, 1000, "thread 1"), ("never-ended", 6000, 15000, "thread 1"),   # to the last ts
        ("outer", 0, 4000, "thread 1"),
    ]
    outer = [i for i in range(len(trace.slices)) if trace.strings[trace.slices.name[i]] == "outer"][0]
    assert trace.slice_args(outer) == {"a": 1, "b": 2}            # E args merged in
    assert warned(trace, WarningCode.UNMATCHED_END) == 1
    assert warned(trace, WarningCode.UNMATCHED_BEGIN) == 2          # left-open + never-ended
    assert r.dropped == 1


def test_begin_end_same_name_nest_and_category_must_match():
    ev = [
        {"ph": "B", "name": "f", "cat": "a", "ts": 0, "pid": 1, "tid": 1},
        {"ph": "B", "name": "f", "cat": "b", "ts": 1, "pid": 1, "tid": 1},
        {"ph": "E", "name": "f", "cat": "a", "ts": 5, "pid": 1, "tid": 1},
        {"ph": "E", "name": "f", "cat": "b", "ts": 6, "pid": 1, "tid": 1},
    ]
    trace, _ = read(ev)
    # E(cat a) closes the cat-a slice and ends the inner one with it; E(cat b) then matches nothing
    assert slices(trace) == [("f", 0, 5000, "thread 1"), ("f", 1000, 4000, "thread 1")]
    assert warned(trace, WarningCode.UNMATCHED_END) == 1


# ---------------------------------------------------------------- instants, counters, metadata

def test_instants_counters_and_metadata():
    ev = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "proc"}},
        {"ph": "M", "name": "process_sort_index", "pid": 1, "args": {"sort_index": 5}},
        {"ph": "M", "name": "process_labels", "pid": 1, "args": {"labels": "CPU,main"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "worker"}},
        {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": 2, "args": {"sort_index": 3}},
        {"ph": "M", "name": "process_name", "pid": 99, "args": {"name": "no events"}},
        {"ph": "M", "name": "something_else", "pid": 1, "args": {}},
        {"ph": "i", "name": "t", "ts": 1, "pid": 1, "tid": 2},
        {"ph": "I", "name": "p", "s": "p", "ts": 2, "pid": 1, "tid": 2},
        {"ph": "i", "name": "g", "s": "g", "ts": 3, "pid": 1, "tid": 2},
        {"ph": "C", "name": "mem", "ts": 4, "pid": 1, "args": {"used": 10, "free": "5.5"}},
        {"ph": "C", "name": "mem", "ts": 5, "pid": 1, "args": {"used": 11, "free": 4}},
        {"ph": "C", "name": "q", "ts": 4, "pid": 1, "id": 7, "args": {"value": 1}},
        {"ph": "C", "name": "bad", "ts": 4, "pid": 1, "args": {}},
        {"ph": "X", "name": "x", "ts": 0, "dur": 9, "pid": 1, "tid": 2},
    ]
    trace, r = read(ev)
    p = next(p for p in trace.processes if p.raw_pid == 1)
    assert (p.name, p.sort_index, p.labels) == ("proc", 5, ["CPU", "main"])
    th = next(t for t in trace.threads if t.raw_tid == 2)
    assert (th.name, th.sort_index) == ("worker", 3)
    assert not any(p.name == "no events" for p in trace.processes)
    # (the name of a process with no events is not kept, and counted)
    assert [w.count for w in trace.diagnostics.warnings if w.message.startswith("names/sort indexes")] == [1]
    scopes = {trace.strings[trace.instants.name[i]]: trace.tracks[trace.instants.track[i]]
              for i in range(len(trace.instants))}
    assert scopes["t"].kind is TrackKind.THREAD
    assert scopes["p"].kind is TrackKind.PROCESS
    assert scopes["g"].process is None
    series = {}
    for i in range(len(trace.counters)):
        series.setdefault(trace.tracks[trace.counters.track[i]].name, []).append(trace.counters.value[i])
    assert series == {"mem used": [10.0, 11.0], "mem free": [5.5, 4.0], "q id: 7": [1.0]}
    assert r.dropped == 2         # something_else, bad counter
    assert warned(trace, WarningCode.DROPPED_EVENT) == 2


# ---------------------------------------------------------------- async, legacy async, unknown

def test_async_events_get_their_own_tracks():
    ev = [
        {"ph": "b", "name": "req", "cat": "net", "id": "0x10", "ts": 0, "pid": 1, "tid": 1},
        {"ph": "b", "name": "req", "cat": "net", "id": "0x11", "ts": 1, "pid": 1, "tid": 1},
        {"ph": "n", "name": "mark", "cat": "net", "id": "0x10", "ts": 2, "pid": 1, "tid": 1},
        {"ph": "e", "name": "req", "cat": "net", "id": "0x10", "ts": 5, "pid": 1, "tid": 1},
        {"ph": "e", "name": "req", "cat": "net", "id": "0x11", "ts": 3, "pid": 1, "tid": 1},
        {"ph": "b", "name": "g", "cat": "x", "id2": {"global": 5}, "ts": 0, "pid": 1, "tid": 1},
        {"ph": "e", "name": "g", "cat": "x", "id2": {"global": 5}, "ts": 9, "pid": 2, "tid": 1},
        {"ph": "S", "name": "legacy", "cat": "y", "id": 3, "ts": 0, "pid": 1, "tid": 1},
        {"ph": "T", "name": "legacy", "cat": "y", "id": 3, "ts": 1, "pid": 1, "tid": 1, "args": {"step": "s1"}},
        {"ph": "F", "name": "legacy", "cat": "y", "id": 3, "ts": 4, "pid": 1, "tid": 1},
        {"ph": "b", "name": "noid", "ts": 0, "pid": 1, "tid": 1},
        {"ph": "P", "name": "sample", "ts": 0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "nodur", "ts": 0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "nots", "dur": 1, "pid": 1, "tid": 1},
        {"name": "noph", "ts": 1, "pid": 1, "tid": 1},
    ]
    trace, r = read(ev)
    got = slices(trace)
    assert ("req", 0, 5000, "req") in got and ("req", 1000, 2000, "req") in got
    req_tracks = {trace.slices.track[i] for i in range(len(trace.slices))
                  if trace.strings[trace.slices.name[i]] == "req"}
    assert len(req_tracks) == 2                                 # one track per async id
    assert ("g", 0, 9000, "g") in got
    g = next(i for i in range(len(trace.slices)) if trace.strings[trace.slices.name[i]] == "g")
    assert trace.tracks[trace.slices.track[g]].process is None  # id2.global: not tied to a process
    assert ("legacy", 0, 4000, "legacy") in got
    names = sorted(trace.strings[n] for n in trace.instants.name)
    assert names == ["legacy", "mark"]
    assert r.dropped == 5
    assert warned(trace, WarningCode.UNKNOWN_PHASE) == 2      # P, and the event without ph


# ---------------------------------------------------------------- flows

def test_v1_flow_binding_rules():
    ev = [
        {"ph": "X", "name": "parent", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "name": "child", "ts": 2, "dur": 3, "pid": 1, "tid": 1},
        {"ph": "s", "name": "f", "cat": "c", "id": 1, "ts": 3, "pid": 1, "tid": 1},    # -> child (innermost)
        {"ph": "t", "name": "f", "cat": "c", "id": 1, "ts": 21, "pid": 1, "tid": 3},   # -> step
        {"ph": "X", "name": "step", "ts": 20, "dur": 5, "pid": 1, "tid": 3},
        {"ph": "f", "name": "f", "cat": "c", "id": 1, "ts": 30, "pid": 1, "tid": 2},   # no bp: next slice
        {"ph": "X", "name": "next", "ts": 31, "dur": 1, "pid": 1, "tid": 2},
        {"ph": "X", "name": "encl", "ts": 40, "dur": 5, "pid": 1, "tid": 2},
        {"ph": "s", "name": "g", "cat": "c", "id": "0x2", "ts": 8, "pid": 1, "tid": 1},  # -> parent
        {"ph": "f", "name": "g", "cat": "c", "id": "2", "ts": 41, "pid": 1, "tid": 2, "bp": "e"},  # -> encl
        {"ph": "s", "name": "h", "cat": "c", "id": 9, "ts": 50, "pid": 1, "tid": 1},   # binds to nothing
        {"ph": "f", "name": "h", "cat": "c", "id": 9, "ts": 51, "pid": 1, "tid": 2, "bp": "e"},
        {"ph": "f", "name": "orphan", "cat": "c", "id": 10, "ts": 41, "pid": 1, "tid": 2, "bp": "e"},
    ]
    trace, r = read(ev)
    st = trace.strings
    name = lambda i: st[trace.slices.name[i]]    # noqa: E731
    links = sorted((name(trace.flows.src[i]), name(trace.flows.dst[i])) for i in range(len(trace.flows)))
    assert links == [("child", "step"), ("parent", "encl"), ("step", "next")]
    assert r.used["flow event"] == 5
    assert r.dropped == 3                       # h's two ends, the orphan
    assert warned(trace, WarningCode.UNRESOLVED_FLOW) == 3


def test_perfetto_flow_samples(tmp_path):
    expect = {
        "perfetto_flow_events_json_v1.json": [("SenderA", "OtherSlice"), ("OtherSlice", "SomeSlice"),
                                              ("SenderB", "Blergh")],
        "perfetto_flow_events_json_v2.json": [("SenderA", "OtherSlice"), ("OtherSlice", "SomeSlice"),
                                              ("OtherSlice", "SomeOtherSlice"), ("SenderB", "Blergh")],
        "perfetto_connected_flow_data.json": [
            ("Flow0_Slice0", "Flow0_Slice1"), ("Flow1_Slice0", "Flow1_Slice1a"), ("Flow1_Slice0", "Flow1_Slice1b"),
            ("Flow2_Slice0", "Flow2_Slice1"), ("Flow2_Slice1", "Flow2_Slice2"), ("Flow2_Slice2", "Flow2_Slice3b"),
            ("Flow2_Slice2a", "Flow2_Slice3a")],
    }
    for fname, links in expect.items():
        trace = traceconv.load(FIX / fname)
        assert trace.meta.source_format == "chrome-json"
        st = trace.strings
        got = sorted((st[trace.slices.name[trace.flows.src[i]]], st[trace.slices.name[trace.flows.dst[i]]])
                     for i in range(len(trace.flows)))
        assert got == sorted(links), fname
        _, events = load_input(FIX / fname)
        assert len(trace.slices) == sum(e["ph"] in ("X", "B") for e in events)
        m = assert_outputs_agree(trace, tmp_path)
        assert len(m.flows) == len(links)


# ---------------------------------------------------------------- repair path

def test_trailing_comma_truncation_escapes_and_huge_numbers():
    text = (b'{"traceEvents": [\n'
            b'{"ph": "X", "name": "C:\\path\\q", "ts": 1, "dur": 1, "pid": 1, "tid": 1},\n'
            b'{"ph": "X", "name": "ok", "ts": 2, "dur": 1, "pid": 1, "tid": 1, "args": {"n": 123456789012345678901234}},\n'
            b'{"ph": "X", "name": "bro"ken", "ts": 3, "dur": 1, "pid": 1, "tid": 1},\n'
            b'{"ph": "X", "name": "last", "ts": 4, "dur": 1, "pid": 1, "tid": 1},\n'
            b'{"ph": "X", "name": "cut", "ts": 5, "du')
    trace, r = read(text)
    assert [s[0] for s in slices(trace)] == ["C:\\path\\q", "last", "ok"]
    ok = next(i for i in range(len(trace.slices)) if trace.strings[trace.slices.name[i]] == "ok")
    assert trace.slice_args(ok) == {"n": "123456789012345678901234"}
    assert warned(trace, WarningCode.TRUNCATED_INPUT) == 1
    assert r.dropped == 1 and r.n_events == 5 - 1      # the broken event; the cut one was never an event
    trace2, _ = read(b'[{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1},]')
    assert [s[0] for s in slices(trace2)] == ["a"]
    assert not warned(trace2, WarningCode.TRUNCATED_INPUT)


def test_not_a_trace_is_a_located_error(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"nothing": 1}')
    with pytest.raises(TraceconvError, match="traceEvents"):
        traceconv.load(p, "chrome-json")
    p.write_text("hello")
    with pytest.raises(TraceconvError):
        traceconv.load(p, "chrome-json")


# ---------------------------------------------------------------- names and args through both writers

def test_weird_names_and_args_survive_both_writers(tmp_path):
    doc = {"traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": WEIRD}},
        {"ph": "X", "name": WEIRD, "cat": WEIRD, "ts": "TS", "dur": 3, "pid": 1, "tid": 1,
         "args": {WEIRD: [WEIRD, {"k": None, "n": -1.5}], "big": 18446744073709551615}},
        {"ph": "i", "name": WEIRD, "ts": 1700000000000001, "pid": 1, "tid": 1, "args": {"x": 1}},
        {"ph": "C", "name": WEIRD, "ts": 1700000000000001, "pid": 1, "args": {"v": 2}},
    ]}
    p = tmp_path / "in.json"
    p.write_bytes(orjson.dumps(doc).replace(b'"TS"', b"1700000000000000.001"))   # a µs double can't hold it
    trace = traceconv.load(p)
    m = assert_outputs_agree(trace, tmp_path)
    (s,) = m.slices
    assert (s.name, s.cat, s.track, s.ts, s.dur) == (WEIRD, WEIRD, WEIRD, 1700000000000000001, 3000)
    assert json.loads(s.args) == {WEIRD: [WEIRD, {"k": None, "n": -1.5}], "big": 18446744073709551615}
    assert m.instants[0][2] == WEIRD


def test_traceconv_output_reads_back_to_the_same_timeline(tmp_path):
    doc = {"traceEvents": [
        {"ph": "X", "name": "a", "ts": 1700000000000000.123, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "name": "b", "ts": 1700000000000005, "dur": 10, "pid": 1, "tid": 1},   # overlaps a
        {"ph": "b", "name": "as", "cat": "c", "id": 1, "ts": 1700000000000001, "pid": 1, "tid": 1},
        {"ph": "e", "name": "as", "cat": "c", "id": 1, "ts": 1700000000000002, "pid": 1, "tid": 1},
        {"ph": "i", "name": "g", "s": "g", "ts": 1700000000000003, "pid": 1, "tid": 1},
        {"ph": "C", "name": "c", "ts": 1700000000000003, "pid": 1, "args": {"value": 3}},
        {"ph": "s", "name": "fl", "cat": "fl", "id": 1, "ts": 1700000000000001, "pid": 1, "tid": 1},
        {"ph": "f", "name": "fl", "cat": "fl", "id": 1, "ts": 1700000000000006, "pid": 1, "tid": 1, "bp": "e"},
    ]}
    p = tmp_path / "in.json"
    p.write_bytes(orjson.dumps(doc))
    trace = traceconv.load(p)
    m = assert_outputs_agree(trace, tmp_path)
    back = traceconv.load(tmp_path / "o.json")
    assert back.meta.clock is Clock.UNIX
    nest(back)
    assert_same_timeline(m, from_model(back))


def test_sniff():
    assert sniff(b'{"traceEvents": []}')
    assert sniff(b'[{"ph": "X"}]')
    assert sniff(b"[]")
    assert not sniff(b'{"Time": {}, "Memory": {}, "Unit": {}}')
    assert not sniff(b'{"graph_exec": {}, "profiler": {}}')
    assert not sniff(b'{"name": "root", "total": 1}')


def test_gzip_by_magic_bytes(tmp_path):
    p = tmp_path / "no_suffix"
    p.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]}'))
    trace = traceconv.load(p)
    assert trace.meta.source_format == "chrome-json" and len(trace.slices) == 1


@pytest.mark.parametrize("event", [
    b'{"ph": "X", "name": "a", "ts": 1e400, "dur": 1, "pid": 1, "tid": 1}',
    b'{"ph": "X", "name": "a", "ts": ' + b"9" * 5000 + b', "dur": 1, "pid": 1, "tid": 1}',
    b'{"ph": "X", "name": "a", "ts": 10000000000000000000, "dur": 1, "pid": 1, "tid": 1}',
    b'{"ph": "X", "name": "a\\ud800", "ts": 1, "dur": 1, "pid": "\\udc00", "tid": 1, "args": {"k\\ud800": 1}}',
    b'{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": {"v": 1e+999}}',
    b'{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": {"n": ' + b"7" * 5000 + b"}}",
    b'{"ph": "C", "name": "c", "ts": 1, "pid": 1, "args": {"v": "NaN?"}}',
])
def test_values_no_viewer_can_hold_are_changed_or_dropped_never_fatal(event, tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [' + event + b',\n{"ph": "X", "name": "ok", "ts": 2, "dur": 1, "pid": 1, "tid": 1}]}')
    trace = traceconv.load(p)
    assert "ok" in trace.strings.strings
    assert trace.diagnostics.lossy() or len(trace.slices) == 2
    assert_outputs_agree(trace, tmp_path)


def test_scanned_batches_do_not_depend_on_how_many_names_a_file_has(monkeypatch):
    """The numba scanner cut a batch of rows where its string table filled up (its GROW status);
    the rows of each batch make their threads in (pid, tid) order, so the table's size changed the
    order of the threads (and of their metadata in the outputs): on this HTA sample its batch of
    4855 events was cut after 4486, and thread 4037/4037 came before GPU stream 0/203.  The
    compiled scanner's table has no fixed size: batches end only at the row cap and block ends,
    so with the file in one block (1.7 MB) its threads come in (pid, tid) order."""
    monkeypatch.setattr(chrome_paths, "CHUNK_BYTES", 4 << 20)
    path = Path(__file__).parent / "fixtures" / "multirank" / "hta_trace_filter_2ranks" / "sampled_rank-0.json.gz"
    t = traceconv.load(path)
    pids = {p.id: p.pid for p in t.processes}
    order = [(pids[th.process], th.tid) for th in t.threads]
    assert order == sorted(order) and (0, 203) in order and (4037, 4037) in order


def test_counters_read_in_bulk_and_one_by_one_land_alike(tmp_path):
    """Counters the scanner takes in bulk (every member a number) and those it leaves to the general
    decoder (all of a batch's, when one has a string value, an id or an exponent) get the same
    tracks, names and values: a member named ``value`` or as the event is the counter's own name,
    any other ``name key``."""
    plain = ['{"ph": "C", "name": "mem", "pid": 1, "ts": 1, "args": {"value": 5, "free": 2.50}}',
             '{"ph": "C", "name": "cpu", "pid": 2, "ts": 3, "args": {"cpu": -0, "big": 18446744073709551615}}',
             '{"ph": "C", "name": "cpu", "pid": 2, "ts": 4, "args": {"cpu": 0.1}}',
             '{"ph": "C", "name": "mem", "pid": 1, "ts": 2, "args": {"value": 7, "free": 1.0}}']
    other = ['{"ph": "C", "name": "q", "pid": 2, "ts": 5, "id": 3, "args": {"n": "1"}}']

    def samples(events: list[str]) -> list[tuple]:
        p = tmp_path / "c.json"
        p.write_text('{"traceEvents": [' + ",".join(events) + "]}")
        tr = traceconv.load(p)
        c = tr.counters
        assert not any(math.copysign(1, v) < 0 for v in c.value)      # "-0": the integer 0, as orjson reads it
        return [(tr.tracks[c.track[i]].name, c.ts[i], c.value[i]) for i in range(len(c))]

    want = [("mem", 1000, 5.0), ("mem free", 1000, 2.5), ("cpu", 3000, 0.0), ("cpu big", 3000, 18446744073709551615.0),
            ("cpu", 4000, 0.1), ("mem", 2000, 7.0), ("mem free", 2000, 1.0)]
    assert samples(plain) == want                                     # in bulk
    assert samples(plain + other) == want + [("q id: 3 n", 5000, 1.0)]   # one by one, in the file's order


def test_v2_flows_read_in_bulk_and_one_by_one_link_alike(tmp_path):
    """Complete events and begins with a ``bind_id`` (v2 flows: traceconv's own JSON writes them)
    are read by the scanner; one it leaves to the general decoder (an escaped name) makes it leave
    it every bound complete event of the batch, so flows link in the file's order either way."""
    ev = ['{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "bind_id": 5, "flow_out": true}',
          '{"ph": "X", "name": "b", "ts": 3, "dur": 1, "pid": 1, "tid": 2, "bind_id": 5, "flow_in": true}',
          '{"ph": "B", "name": "c", "ts": 5, "pid": 1, "tid": 1, "bind_id": 6, "flow_out": true, "flow_in": false}',
          '{"ph": "E", "ts": 6, "pid": 1, "tid": 1}',
          '{"ph": "X", "name": "d", "ts": 7, "dur": 1, "pid": 1, "tid": 2, "bind_id": 6, "flow_in": true}',
          '{"ph": "X", "name": "e", "ts": 9, "dur": 1, "pid": 1, "tid": 2, "bind_id": "0x7", "flow_out": true}']

    def flows(events: list[str]) -> list[tuple]:
        p = tmp_path / "f.json"
        p.write_text('{"traceEvents": [' + ",".join(events) + "]}")
        tr = traceconv.load(p)
        s, f, names = tr.slices, tr.flows, tr.strings
        return [(names[s.name[f.src[i]]], names[s.name[f.dst[i]]]) for i in range(len(f.src))]

    want = [("a", "b"), ("c", "d")]
    assert flows(ev[:5]) == want                                         # in bulk
    assert flows(ev[:5] + [ev[5]]) == want                               # (e: a hex id, alone)
    escaped = ev[:4] + [ev[4].replace('"name": "d"', '"name": "\\u0064"')]
    assert flows(escaped) == want                                        # one by one


@pytest.mark.parametrize("path", [
    "fixtures/megengine_timeline/generated_mge1130_dynamic.chrome_timeline.json.gz",
    "fixtures/mxnet_trace/generated_mxnet191_profile_all.json",
    None,
])
def test_begins_ends_counters_v2_flows_and_64_bit_ids_skip_the_general_decoder(path, tmp_path, monkeypatch):
    """The shapes of MegEngine's and MXNet's timelines and of traceconv's own JSON are read in bulk:
    B/E and MXNet's b/e, counters, complete events with a v2 flow, ids past int64.  Before, every
    such event was decoded and converted one by one (MegEngine's file as one whole document)."""
    if path is None:
        path = tmp_path / "own.json"
        # (a Kineto excerpt with flows and [memory] counters, written as traceconv's own JSON)
        kineto = Path(__file__).parent / "fixtures/kineto"
        traceconv.convert(kineto / "hta_df_index_resolver_gpu_memory_events_EXCERPT.json.gz", path)
    else:
        path = Path(__file__).parent / path
    general: list[str] = []
    convert = reader.ChromeReader._convert_events

    def spy(self, events, seq0, seqs=None):
        general.extend(e.ph for e in events)
        return convert(self, events, seq0, seqs)

    monkeypatch.setattr(reader.ChromeReader, "_convert_events", spy)
    tr = traceconv.load(path)
    assert len(tr.slices) > 100 and len(tr.counters) > 100 and (len(tr.flows) > 100 or "mxnet" in str(path))
    assert not [ph for ph in general if ph in ("B", "E", "b", "e", "C", "X")], Counter(general)
