"""PyTorch profiler / Kineto traces, on real files: counts, time base, devices, flows, memory, metadata."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceconv
from traceconv.readers.chrome.kineto import KinetoReader
from traceconv.io import open_source
from traceconv.model.layout import nest
from traceconv.model import Clock, TrackKind

from chrome_input import load as load_input
from chrome_input import ns, slice_counts_by_cat, slice_set, slices_by_thread
from timeline import assert_outputs_agree, assert_same_timeline, from_model, read_chrome_json, read_perfetto

FIX = Path(__file__).parent / "fixtures" / "kineto"
ALL = sorted(p.name for p in FIX.iterdir() if p.name.endswith((".json", ".gz")))
WORKER = "generated_torch213_cpu_single_worker0.pt.trace.json.gz"     # relative ts + baseTimeNanoseconds
GPU = "hta_critical_path_simple_add_trace.json.gz"                     # absolute integer µs, GPU, ac2g
MEMORY = "hta_df_index_resolver_gpu_memory_events_EXCERPT.json.gz"
LEGACY = "hta_trace_diff_control_legacy_async_cpu_to_gpu_EXCERPT.json.gz"


def read(name: str):
    r = KinetoReader(open_source(FIX / name))
    return r.read(), r


def base_of(header) -> int:
    return int(header.get("baseTimeNanoseconds", 0))


@pytest.mark.parametrize("name", ALL)
def test_every_event_is_kept_or_counted_and_both_outputs_agree(name, tmp_path):
    trace, r = read(name)
    header, events = load_input(FIX / name)
    assert r.n_events == len(events)
    assert sum(r.used.values()) + r.dropped == len(events)
    dropping = sum(w.count for w in trace.diagnostics.warnings
                   if w.code.value in ("dropped-event", "unknown-phase", "unmatched-end", "unresolved-flow"))
    assert dropping >= r.dropped
    # slices per category and per thread, exactly as the file has X events
    xs = [e for e in events if e["ph"] == "X"]
    assert slice_counts_by_cat(trace) == Counter(e.get("cat", "") for e in xs)
    assert slices_by_thread(trace) == Counter((e["pid"], e["tid"]) for e in xs)
    assert len(trace.instants) == sum(e["ph"] == "i" for e in events)
    # exact ns: every slice where the file puts it
    base = base_of(header)
    assert slice_set(trace) == Counter((e["name"], base + ns(e["ts"]), ns(e["dur"])) for e in xs)
    assert trace.meta.clock is Clock.UNIX
    assert_outputs_agree(trace, tmp_path)


def test_relative_ts_and_base_time_to_the_ns():
    trace, _ = read(WORKER)
    st = trace.strings
    s = trace.slices
    step = [i for i in range(len(s)) if st[s.name[i]] == "ProfilerStep#2"]
    assert len(step) == 1
    # "ts": 4378354946802.729 µs after baseTimeNanoseconds 1790857026000000000
    assert s.ts[step[0]] == 1790857026000000000 + 4378354946802729
    assert trace.meta.extra["trace_id"] == "442C3459B50B4CACB02AD9D254771CD4"


def test_absolute_integer_us_and_gpu_devices():
    trace, _ = read(GPU)
    procs = {p.raw_pid: p for p in trace.processes}
    host, gpu0 = procs[493459], procs[0]
    assert host.name == "python3.10" and host.labels == ["CPU"]
    assert gpu0.name == "GPU 0" and "python3.10" in gpu0.labels
    assert gpu0.sort_index > host.sort_index
    streams = {t.name for t in trace.threads if t.process == gpu0.id}
    assert "stream 7 " in streams
    # the profiling window on the string pid "Spans", tid = span name; the window end: a global instant
    spans = procs["Spans"]
    (window,) = [i for i in range(len(trace.slices))
                 if trace.tracks[trace.slices.track[i]].process == spans.id]
    assert trace.strings[trace.slices.name[window]] == "PyTorch Profiler (0)"
    assert trace.slices.ts[window] == 1694039968933321000 and trace.slices.dur[window] == 41602354000
    assert trace.threads[trace.tracks[trace.slices.track[window]].thread].name == "PyTorch Profiler"
    ends = [i for i in range(len(trace.instants)) if trace.strings[trace.instants.name[i]] == "Record Window End"]
    assert trace.tracks[trace.instants.track[ends[0]]].process is None
    assert trace.meta.rank == 0
    assert trace.meta.extra["deviceProperties"][0]["name"] == "NVIDIA A100-PG509-200"


@pytest.mark.parametrize("name,flow", [(GPU, "ac2g"), (LEGACY, "async_cpu_to_gpu"), (MEMORY, "ac2g")])
def test_cpu_to_gpu_flows_link_launch_to_kernel(name, flow):
    trace, _ = read(name)
    _, events = load_input(FIX / name)
    st = trace.strings
    assert len(trace.flows) > 0
    starts = {(e.get("cat"), e["id"]) for e in events if e["ph"] == "s"}
    ends = {(e.get("cat"), e["id"]) for e in events if e["ph"] == "f"}
    assert len(trace.flows) <= len(starts & ends)
    for i in range(len(trace.flows)):
        src, dst = trace.flows.src[i], trace.flows.dst[i]
        assert st[trace.flows.name[i]] == flow
        assert st[trace.slices.cat[src]] in ("cuda_runtime", "cuda_driver")
        assert st[trace.slices.cat[dst]] in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")
        assert trace.processes[trace.tracks[trace.slices.track[dst]].process].name.startswith("GPU ")
        assert trace.slice_args(src)["correlation"] == trace.slice_args(dst)["correlation"]


def test_fwdbwd_flows_link_forward_op_to_its_backward():
    trace, _ = read(WORKER)
    st = trace.strings
    assert len(trace.flows) == 16
    for i in range(len(trace.flows)):
        src, dst = trace.flows.src[i], trace.flows.dst[i]
        assert st[trace.flows.name[i]] == "fwdbwd"
        assert st[trace.slices.name[dst]].endswith("Backward0")
        assert trace.slice_args(src)["Sequence number"] == trace.slice_args(dst)["Sequence number"]


@pytest.mark.parametrize("name", [WORKER, MEMORY])
def test_memory_instants_become_counters_that_sum(name):
    trace, _ = read(name)
    _, events = load_input(FIX / name)
    mem = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: ns(e["ts"]))
    assert mem
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for i in range(len(trace.counters)):
        t = trace.tracks[trace.counters.track[i]]
        assert t.kind is TrackKind.COUNTER and t.unit == "bytes"
        series[t.name].append((trace.counters.ts[i], trace.counters.value[i]))
    by_dev: dict[str, list[dict]] = defaultdict(list)
    for e in mem:
        a = e["args"]
        dev = "CPU" if a["Device Type"] == 0 else f"GPU {a['Device Id']}"
        by_dev[dev].append(e)
    assert set(series) == {f"{d} memory {w}" for d in by_dev for w in ("allocated", "reserved")}
    for dev, evs in by_dev.items():
        alloc = sorted(series[f"{dev} memory allocated"], key=lambda x: x[0])   # stable: file order on ties
        assert [v for _, v in alloc] == [float(e["args"]["Total Allocated"]) for e in evs]
        # each step of the allocated counter is the event's Bytes (allocations positive, frees negative)
        steps = [b[1] - a[1] for a, b in zip(alloc, alloc[1:])]
        assert steps == [float(e["args"]["Bytes"]) for e in evs[1:]]
    if name == MEMORY:
        gpu1 = next(p for p in trace.processes if p.raw_pid == 1)
        assert any(t.process == gpu1.id and t.name == "GPU 1 memory allocated" for t in trace.tracks)
    assert len(trace.instants) >= len(mem)          # the instants themselves stay, with their args


def test_overlapping_slices_keep_their_exact_durations_in_both_outputs(tmp_path):
    trace, _ = read(WORKER)
    header, events = load_input(FIX / WORKER)
    base = base_of(header)
    expected = Counter((e["name"], base + ns(e["ts"]), ns(e["dur"])) for e in events if e["ph"] == "X")
    nest(trace)
    lanes = [t for t in trace.tracks if t.kind is TrackKind.LANE]
    assert lanes, "this Kineto sample has CPU slices that overlap without nesting"
    assert any(w.code.value == "overlap-lanes" for w in trace.diagnostics.warnings)
    traceconv.save(trace, tmp_path / "o.json")
    traceconv.save(trace, tmp_path / "o.pftrace")
    for tl in (read_chrome_json(tmp_path / "o.json"), read_perfetto(tmp_path / "o.pftrace")):
        assert Counter((s.name, s.ts, s.dur) for s in tl.slices) == expected


def test_distributed_info_and_metadata_reach_both_outputs(tmp_path):
    trace = traceconv.load(FIX / "hta_cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert trace.meta.source_format == "kineto"
    assert (trace.meta.rank, trace.meta.world_size) == (34, 300)
    assert trace.meta.extra["distributedInfo"]["backend"] == "gloo"
    nest(trace)
    traceconv.save(trace, tmp_path / "o.json")
    traceconv.save(trace, tmp_path / "o.pftrace")
    for tl in (read_chrome_json(tmp_path / "o.json"), read_perfetto(tmp_path / "o.pftrace")):
        assert tl.metadata["distributedInfo"]["world_size"] == 300
        assert tl.metadata["traceconv"]["rank"] == 34


def _kineto_doc(**header) -> dict:
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5,
               "args": {"External id": i}} for i in range(2000)]
    return {"schemaVersion": 1, **header, "traceEvents": events, "baseTimeNanoseconds": 1700000000000000000}


@pytest.mark.parametrize("bad, where", [({"rank": -1, "world_size": 2}, "distributedInfo.rank"),
                                        ({"rank": 0, "world_size": 0}, "distributedInfo.world_size")])
def test_a_header_its_schema_refuses_is_one_error(tmp_path, bad, where):
    """The header is checked by its schema before the events are read: a header it refuses ends the
    load in one error naming the key and the value found, and no output."""
    p = tmp_path / "bad.pt.trace.json"
    p.write_text(json.dumps(_kineto_doc(distributedInfo=bad)))
    with pytest.raises(traceconv.TraceconvError) as e:
        traceconv.convert(p, tmp_path / "o.pftrace")
    assert e.value.one_line().startswith(f"{p}: at {where}: not a valid PyTorch profiler (Kineto) trace: "), \
        e.value.one_line()
    assert not (tmp_path / "o.pftrace").exists()


def test_the_header_check_is_lax_as_pydantic_was_and_names_what_it_found(tmp_path):
    """The timeline formats' top-level keys are msgspec Structs checked as pydantic's lax mode
    checked them (a number written as a string, or as an integral float, is the number), each
    refusal one located error with the value found; a bool where a number belongs is refused."""
    from traceconv.readers.chrome.schema import ComposerMeta, KinetoHeader, MegEngineMetadata
    from traceconv.readers.schema import check

    h = check(KinetoHeader, {"distributedInfo": {"rank": "3", "world_size": 8.0, "pg_config": [{"x": 1}]},
                             "deviceProperties": [{"id": 0, "name": "H100", "extra": True}], "other": 1}, "K")
    assert (h.distributedInfo.rank, h.distributedInfo.world_size, h.deviceProperties[0].name) == (3, 8, "H100")
    p = tmp_path / "rank.pt.trace.json"
    p.write_text(json.dumps(_kineto_doc(distributedInfo={"rank": "3", "world_size": 8})))
    assert traceconv.load(p).meta.rank == 3
    for model, data, where, found in [
            (KinetoHeader, {"deviceProperties": [{"id": 1}, {"id": "x"}]}, "deviceProperties[1].id", "'x'"),
            (KinetoHeader, {"schemaVersion": True}, "schemaVersion", "True"),
            (KinetoHeader, {"distributedInfo": 5}, "distributedInfo", "5"),
            (KinetoHeader, {"distributedInfo": {"rank": 2.5}}, "distributedInfo.rank", "2.5"),
            (ComposerMeta, {"value": [1]}, "value", "list")]:
        with pytest.raises(traceconv.TraceconvError) as e:
            check(model, data, "K")
        assert e.value.one_line().startswith(f"at {where}: not a valid K: Expected ") \
            and e.value.one_line().endswith(f" (found {found})"), e.value.one_line()
    with pytest.raises(traceconv.TraceconvError, match=r"^at \(top level\): not a valid K: Object missing "
                                                       r"required field value$"):
        check(ComposerMeta, {}, "K")
    with pytest.raises(traceconv.TraceconvError, match=r"^at args\.value: not a valid K: Expected int, got str "
                                                       r"\(found 'x'\)$"):
        check(ComposerMeta, {"value": "x"}, "K", at="args")
    with pytest.raises(traceconv.TraceconvError, match=r"^at metadata: not a valid K: localTime must be an integer"):
        check(MegEngineMetadata, {"localTime": "soon"}, "K", at="metadata")
    assert check(MegEngineMetadata, {"localTime": "17"}, "K").local_time_ns() == 17


def test_composer_global_rank_is_the_rank_over_distributed_info(tmp_path):
    """Composer's top-level global_rank names the rank, over distributedInfo's (applied once the
    header's check is done)."""
    p = tmp_path / "composer.pt.trace.json"
    p.write_text(json.dumps(_kineto_doc(global_rank=5, distributedInfo={"rank": 3, "world_size": 8})))
    trace = traceconv.load(p)
    assert (trace.meta.source_format, trace.meta.rank, trace.meta.world_size) == ("composer", 5, 8)
    p.write_text(json.dumps(_kineto_doc(distributedInfo={"rank": 3, "world_size": 8}, traceName="t")))
    trace = traceconv.load(p)
    assert (trace.meta.source_format, trace.meta.rank, trace.meta.world_size) == ("kineto", 3, 8)
    assert trace.meta.extra["traceName"] == "t" and trace.meta.extra["schemaVersion"] == 1


def test_the_header_s_check_holds_on_the_repairing_path(tmp_path):
    """A trailing comma in the events: the stream gives up and the whole-document path reads the
    file again, a new reader with a check of its own: the rank still comes from the checked header,
    and a header the schema refuses is still the error."""
    text = json.dumps(_kineto_doc(distributedInfo={"rank": 3, "world_size": 8}))
    broken = text.replace('"dur": 5, "args": {"External id": 7}}', '"dur": 5, "args": {"External id": 7},}')
    assert broken != text
    p = tmp_path / "broken.pt.trace.json"
    p.write_text(broken)
    trace = traceconv.load(p)
    assert (trace.meta.rank, trace.meta.world_size, len(trace.slices)) == (3, 8, 1999)
    assert {w.code.value: w.count for w in trace.diagnostics.warnings} == {"dropped-event": 1, "note": 1}
    p.write_text(broken.replace('"rank": 3', '"rank": -3'))
    with pytest.raises(traceconv.TraceconvError, match="at distributedInfo.rank: not a valid"):
        traceconv.load(p)


def test_json_output_reads_back_to_the_same_absolute_times(tmp_path):
    trace = traceconv.load(FIX / WORKER)
    nest(trace)
    traceconv.save(trace, tmp_path / "o.json")
    back = traceconv.load(tmp_path / "o.json")
    assert back.meta.clock is Clock.UNIX
    nest(back)
    assert_same_timeline(from_model(trace), from_model(back))
    assert len(back.counters) == len(trace.counters)      # memory counters not rebuilt twice


def test_old_bare_array_torch_writer(tmp_path):
    p = tmp_path / "trace.json"
    p.write_text('[{"name": "aten::mm", "ph": "X", "ts": 100.5, "dur": 20, "tid": 3, "pid": "CPU functions",'
                 ' "args": {}},\n{"name": "k", "ph": "X", "ts": 105, "dur": 2, "tid": 0, "pid": "CUDA functions",'
                 ' "args": {}}]')
    trace = traceconv.load(p)
    assert trace.meta.source_format == "kineto"
    assert trace.meta.clock is Clock.RELATIVE
    assert sorted(p.name for p in trace.processes) == ["CPU functions", "CUDA functions"]
    assert sorted(trace.slices.ts) == [100500, 105000]


def test_memory_events_without_totals_sum_their_bytes(tmp_path):
    p = tmp_path / "old.pt.trace.json"
    ev = ",".join(
        f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, '
        f'"ts": {ts}, "args": {{"Device Type": 1, "Device Id": 0, "Bytes": {b}}}}}'
        for ts, b in ((10, 512), (11, 1024), (12, -512), (13, 4096)))
    p.write_text('{"schemaVersion": 1, "traceEvents": [' + ev + "]}")
    trace = traceconv.load(p)
    (t,) = {trace.tracks[i] for i in trace.counters.track}
    assert t.name == "GPU 0 memory allocated since trace start" and t.unit == "bytes"
    assert list(trace.counters.value) == [512.0, 1536.0, 1024.0, 5120.0]
    assert trace.processes[t.process].name == "GPU 0"


def test_memory_counters_in_time_order_across_devices_with_odd_values(tmp_path):
    """[memory] events out of time order, on two devices, one place a list (not a number), a
    value beyond a double's range (once an OverflowError that crashed the reader), a string, and
    an older-PyTorch device summing its Bytes: tracks made in the order time meets them, rows in
    time order, the running sum per device, the huge value counted in a note and kept in the
    instant's args."""
    huge = "1" + "0" * 400
    rows = [(30, '"Device Type": 1, "Device Id": 0, "Total Allocated": 300, "Total Reserved": 400'),
            (10, '"Device Type": 0, "Device Id": -1, "Total Allocated": 100'),
            (20, '"Device Type": 1, "Device Id": 0, "Total Allocated": 200, "Total Reserved": "x"'),
            (20, f'"Device Type": 0, "Device Id": -1, "Total Allocated": {huge}, "Total Reserved": 7'),
            (40, '"Device Type": 1, "Device Id": 1, "Bytes": 5'),
            (35, '"Device Type": 1, "Device Id": 1, "Bytes": -2'),
            (50, '"Device Type": [1], "Device Id": 2, "Total Allocated": 9')]
    ev = ",".join(f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, '
                  f'"tid": 1, "ts": {ts}, "args": {{{a}}}}}' for ts, a in rows)
    p = tmp_path / "mem.pt.trace.json"
    p.write_text('{"schemaVersion": 1, "traceEvents": [' + ev + "]}")
    trace = traceconv.load(p)
    c = trace.counters
    got = [(ts // 1000, trace.tracks[t].name, v) for t, ts, v in zip(c.track, c.ts, c.value)]
    assert got == [(10, "CPU memory allocated", 100.0), (20, "GPU 0 memory allocated", 200.0),
                   (20, "CPU memory reserved", 7.0), (30, "GPU 0 memory allocated", 300.0),
                   (30, "GPU 0 memory reserved", 400.0),
                   (35, "GPU 1 memory allocated since trace start", -2.0),
                   (40, "GPU 1 memory allocated since trace start", 3.0),
                   (50, "device type [1] 2 memory allocated", 9.0)]
    made = [t.name for t in trace.tracks if t.name and " memory " in t.name]
    assert made == ["CPU memory allocated", "GPU 0 memory allocated", "CPU memory reserved",
                    "GPU 0 memory reserved", "GPU 1 memory allocated since trace start",
                    "device type [1] 2 memory allocated"]
    notes = {w.message: w.count for w in trace.diagnostics.items.values()}
    assert notes["[memory] values beyond the range of a double (kept in the events' args) were left out "
                 "of the memory counters"] == 1
    assert len(trace.instants) == 7


_MEMORY_VALUES = st.one_of(
    st.integers(-2**70, 2**70), st.integers(-10, 10**12), st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(), st.none(), st.text(max_size=3), st.lists(st.integers(0, 3), max_size=2))
_MEMORY_KEYS = ["Device Type", "Device Id", "Total Allocated", "Total Reserved", "Bytes", "Addr"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from(_MEMORY_KEYS),
                                          st.one_of(st.integers(-1, 3), _MEMORY_VALUES)),
                          st.one_of(st.integers(0, 3), st.just("Spans"))), max_size=12),
       st.integers(1, 4))
def test_memory_args_read_the_typed_way_are_what_the_general_way_reads(rows, batches):
    """[memory] args as PyTorch writes them are decoded into typed fields (no Python call per
    value); any batch with another shape (a bool, a string, null, a number beyond a double, a
    float place) takes the general way.  Both give the same places, values and counts."""
    from traceconv.readers.chrome.kineto import _MemoryEvents
    raw = [json.dumps(a).encode() for a, _ in rows]
    fast, ref = _MemoryEvents(), _MemoryEvents()
    step = max(1, len(rows) // batches)
    for lo in range(0, len(rows), step):
        ts = list(range(lo, min(lo + step, len(rows))))
        pid = [p for _, p in rows[lo:lo + step]]
        fast.add(ts, pid, raw[lo:lo + step])
        ref.add_any(ts, pid, raw[lo:lo + step])
    assert fast.places == ref.places and fast.too_big == ref.too_big
    assert fast.ts == ref.ts and fast.place == ref.place and fast.no_total == ref.no_total
    assert [v.tobytes() for v in fast.values] == [v.tobytes() for v in ref.values]   # (NaN compared too)


def test_typical_memory_args_take_the_typed_way(monkeypatch):
    from traceconv.readers.chrome import kineto
    events = kineto._MemoryEvents()
    monkeypatch.setattr(events, "add_any", lambda *a: pytest.fail("took the general way"))
    events.add([1, 2], [7, 7], [b'{"Total Reserved":20,"Total Allocated":10,"Bytes":4096,"Addr":1,'
                                b'"Device Type":1,"Device Id":0}', b'{"Bytes":-4096,"Device Type":0,"Device Id":-1}'])
    assert events.places == [(1, 0, 7, True), (0, -1, 7, True)]
    assert list(events.values[0])[0] == 10.0 and events.no_total.tolist() == [0, 1]


def _compiled_memory(args_texts: list[bytes], memory: list[bool], pid: list[int]):
    """A batch of instants' args back to back, as the scanner gives them, read by the compiled
    helper (None: declined) for the [memory] rows among them."""
    from traceconv.readers.chrome.stream import SCAN
    lens = np.array([len(a) for a in args_texts], np.int64)
    buf = np.frombuffer(b"".join(args_texts), np.uint8)
    rows = np.flatnonzero(np.array(memory, bool) & (lens > 0))
    return rows, SCAN.memory_values(buf, lens, rows, np.array(pid, np.int64))


_RAW_MEMORY_ARGS = st.one_of(
    st.dictionaries(st.sampled_from(_MEMORY_KEYS), st.one_of(st.integers(-1, 3), _MEMORY_VALUES)).map(
        lambda a: json.dumps(a, separators=(",", ":")).encode()),
    st.sampled_from([b'{"Device Type":1,"Device Type":2}', b'{"Device\\u0020Type":1,"Bytes":2}', b"[1]",
                     b'{"Bytes":-0}', b'{"Device Id":-0,"Bytes":1e400}', b'{"Bytes":1.5e-300}', b"7",
                     b'{"Total Allocated":18446744073709551615}', b'{"Bytes":123456789012345678901}']))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_RAW_MEMORY_ARGS | st.just(b""), st.booleans(), st.integers(0, 3)), max_size=12))
def test_memory_args_read_by_the_compiled_helper_are_what_the_general_way_reads(rows):
    """The compiled helper (rust/src/scan/memory.rs) reads a batch's [memory] rows of PyTorch's
    shape with no Python object per row, and declines any batch with another shape: what it reads
    (through ``add_values``, or ``add`` where it declined) is what the general way reads."""
    from traceconv.readers.chrome.kineto import _MemoryEvents
    texts = [a for a, _, _ in rows]
    pid = [p for _, _, p in rows]
    picked, values = _compiled_memory(texts, [m for _, m, _ in rows], pid)
    fast, ref = _MemoryEvents(), _MemoryEvents()
    ts = picked.tolist()
    raw = [texts[r] for r in ts]
    if values is None:
        fast.add(ts, [pid[r] for r in ts], raw)
    else:
        fast.add_values(picked, *values)
    ref.add_any(ts, [pid[r] for r in ts], raw)
    assert fast.places == ref.places and fast.too_big == ref.too_big
    assert fast.ts == ref.ts and fast.place == ref.place and fast.no_total == ref.no_total
    assert [v.tobytes() for v in fast.values] == [v.tobytes() for v in ref.values]   # (NaN compared too)


def test_the_compiled_helper_reads_pytorchs_shape_and_declines_the_rest():
    typical = [b'{"Total Reserved":20,"Total Allocated":10.5,"Bytes":4096,"Addr":1,"Device Type":1,"Device Id":0}',
               b'{"Bytes":-4096,"Device Type":0,"Device Id":-1}', b'{"Addr":3}', b'{"Bytes":1}']
    rows, values = _compiled_memory(typical, [True, True, False, True], [7, 7, 7, 8])
    assert rows.tolist() == [0, 1, 3]
    places, place, total, reserved, nbytes = values
    assert places == [(1, 0, 7), (0, -1, 7), (None, None, 8)] and place.tolist() == [0, 1, 2]
    assert total[0] == 10.5 and np.isnan(total[1:]).all()
    assert nbytes.tolist() == [4096.0, -4096.0, 1.0] and reserved[0] == 20.0 and np.isnan(reserved[2])
    for other in (b'{"Device Type":null}', b'{"Device Type":1,"Device Type":2}', b'{"Bytes":"x"}',
                  b'{"Device Id":1.0}', b'{"Bytes":1e400}', b"[1]", b'{"Bytes":123456789012345678901}'):
        assert _compiled_memory(typical[:1] + [other], [True, True], [7, 7])[1] is None, other
