"""traceconv.record: spans, instants, counters, flows, threads, streaming chunks, ring buffer, JSON.

Every recorded file is loaded back with Perfetto's trace_processor (tests/perfetto_oracle.py) and
checked for content: names, order, nesting, durations against what the test measured itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

import perfetto_oracle as tp
import traceconv.record as rec
from traceconv.record import _core

pytestmark = tp.requires_trace_processor
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _clean():
    rec.stop()
    rec.enable()
    yield
    rec.stop()
    rec.enable()


def _slices(path, where=""):
    return tp.query(path, f"""
        select s.name, s.category as cat, s.ts, s.dur, s.depth, t.name as thread, t.tid
        from slice s join thread_track tt on tt.id = s.track_id join thread t using (utid)
        where s.name not like 'traceconv.record%' {where} order by s.ts, s.depth""")


def _arg(path, slice_name, key):
    rows = tp.query(path, f"""select display_value v from slice s join args a using (arg_set_id)
        where s.name = '{slice_name}' and a.key = 'debug.{key}'""")
    return [r["v"] for r in rows]


def test_spans_nest_in_order_with_their_durations(tmp_path):
    out = tmp_path / "run.pftrace"
    rec.start(out)
    t = {}
    t0 = time.time_ns()
    with rec.span("step", cat="rollout", frames=4):
        t["a"] = time.perf_counter_ns()
        with rec.span("env_step"):
            time.sleep(0.01)
        with rec.span("policy"):
            time.sleep(0.005)
        t["b"] = time.perf_counter_ns()
    rec.instant("checkpoint", step=7)
    rec.counter("fps", 1234.5)
    rec.counter("fps", 1300.0)
    t1 = time.time_ns()
    rec.stop()
    assert tp.problems(out) == []
    rows = _slices(out)
    assert [(r["name"], r["depth"]) for r in rows] == [("step", 0), ("env_step", 1), ("policy", 1), ("checkpoint", 0)]
    step, env, pol, ck = rows
    assert step["cat"] == "rollout"
    assert 10_000_000 <= env["dur"] < 60_000_000 and 5_000_000 <= pol["dur"] < 50_000_000
    assert step["ts"] <= env["ts"] and env["ts"] + env["dur"] <= pol["ts"]
    assert pol["ts"] + pol["dur"] <= step["ts"] + step["dur"] <= ck["ts"]
    assert step["dur"] >= t["b"] - t["a"]
    # Unix time: the anchor put the spans between the wall-clock reads around them
    assert t0 - 1_000_000 <= step["ts"] <= t1 + 1_000_000
    assert ck["dur"] == 0
    assert _arg(out, "step", "frames") == ["4"] and _arg(out, "checkpoint", "step") == ["7"]
    assert env["thread"] == "MainThread" and env["tid"] == threading.get_native_id()
    vals = tp.query(out, """select c.value from counter c join counter_track t on t.id = c.track_id
                            where t.name = 'fps' order by c.ts""")
    assert [r["value"] for r in vals] == [1234.5, 1300.0]
    proc = tp.query(out, "select pid, name from process where pid = %d" % os.getpid())
    assert proc and proc[0]["name"]


def test_traced_threads_and_names(tmp_path):
    out = tmp_path / "threads.pftrace"
    rec.start(out)
    rec.name_process("trainer")

    @rec.traced
    def work(n):
        time.sleep(0.002)
        return n * 2

    @rec.traced(name="load", cat="io")
    def load():
        return 1

    def worker(k):
        rec.name_thread(f"env-{k}")
        for _ in range(3):
            work(k)

    ths = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert load() == 1 and work(3) == 6
    rec.stop()
    assert tp.problems(out) == []
    rows = _slices(out)
    by_thread = {}
    for r in rows:
        by_thread.setdefault(r["thread"], []).append(r["name"])
    assert by_thread["env-0"] == by_thread["env-1"] == ["test_traced_threads_and_names.<locals>.work"] * 3
    assert by_thread["MainThread"] == ["load", "test_traced_threads_and_names.<locals>.work"]
    assert [r["cat"] for r in rows if r["name"] == "load"] == ["io"]
    assert tp.query(out, f"select name from process where pid = {os.getpid()}")[0]["name"] == "trainer"


def test_flow_between_threads(tmp_path):
    out = tmp_path / "flow.pftrace"
    rec.start(out)
    fid = rec.new_flow()
    ready = threading.Event()

    def consumer():
        ready.wait()
        with rec.span("consume", flow_in=fid):
            time.sleep(0.001)

    th = threading.Thread(target=consumer)
    th.start()
    with rec.span("produce", flow_out=fid):
        time.sleep(0.001)
    ready.set()
    th.join()
    rec.stop()
    flows = tp.query(out, """select so.name src, si.name dst from flow f
        join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in""")
    assert flows == [{"src": "produce", "dst": "consume"}]
    assert _arg(out, "produce", "flow_out") == [str(fid)]


def test_streaming_chunks_bound_memory_and_survive_a_cut(tmp_path):
    out = tmp_path / "stream.pftrace"
    r = rec.start(out, buffer=50)
    with rec.span("outer"):
        for i in range(240):
            with rec.span("tick", i=i):
                pass
            if i % 40 == 0:
                rec.counter("i", i)
    rec.stop()
    assert r.sink.chunks >= 4                      # written as it went, not at the end
    assert max(len(info.events) for info in r.threads) <= 50
    assert tp.problems(out) == []
    rows = _slices(out)
    ticks = [x for x in rows if x["name"] == "tick"]
    assert len(ticks) == 240 and all(x["depth"] == 1 for x in ticks)
    assert [x["name"] for x in rows][0] == "outer"            # the parent, flushed last, encloses them all
    assert [int(v) for v in _arg(out, "tick", "i")] == list(range(240))
    # a copy cut right after the first chunk is a valid trace holding that chunk's events
    data = out.read_bytes()
    first = _first_chunk_end(data)
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(data[:first])
    assert tp.problems(cut) == []
    n = tp.query(cut, "select count(*) n from slice where name = 'tick'")[0]["n"]
    assert 0 < n < 240


def _first_chunk_end(data: bytes) -> int:
    """Offset of the second chunk: the second packet that opens the descriptors' sequence (each
    chunk is a whole trace: the descriptors' sequence, then the events')."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    pos, seen = 0, 0
    while pos < len(data):
        start = pos
        assert data[pos] == 0x0A
        pos += 1
        n, shift = 0, 0
        while True:
            b = data[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        p = pb.TracePacket.FromString(data[pos:pos + n])
        pos += n
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED and p.trusted_packet_sequence_id == 1:
            seen += 1
            if seen == 2:
                return start
    raise AssertionError("one chunk only")


def test_killed_process_keeps_what_was_flushed(tmp_path):
    out = tmp_path / "killed.pftrace"
    script = f"""
import os, signal, traceconv.record as rec
rec.start({str(out)!r}, buffer=100)
for i in range(250):
    with rec.span("step", i=i):
        pass
os.kill(os.getpid(), signal.SIGKILL)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACECONV_RECORD")}
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, timeout=120, env=env)
    assert proc.returncode == -9
    assert tp.problems(out) == []
    rows = tp.query(out, "select count(*) n from slice where name = 'step'")
    # two full buffers were flushed (100 steps, then the first flush's own span and 99 steps);
    # the 51 steps after them were lost with the process
    assert rows[0]["n"] == 199
    assert tp.query(out, "select count(*) n from slice where name = 'traceconv.record flush'")[0]["n"] == 1


def test_ring_buffer_bounds_memory(tmp_path):
    out = tmp_path / "ring_cap.pftrace"
    r = rec.start(out, buffer=100, ring_seconds=60)
    for i in range(1000):
        with rec.span("s", i=i):
            pass
    assert max(len(info.events) for info in r.threads) <= 100
    assert r.dropped > 0
    rec.stop()
    vals = [int(v) for v in _arg(out, "s", "i")]
    assert len(vals) + r.dropped == 1000 and vals == list(range(1000 - len(vals), 1000))   # the newest kept


def test_ring_buffer_keeps_the_last_seconds(tmp_path):
    out = tmp_path / "ring.pftrace"
    rec.start(out, buffer=20, ring_seconds=0.2)
    for i in range(30):
        with rec.span("old", i=i):
            pass
    time.sleep(0.3)
    for i in range(10):
        with rec.span("new", i=i):
            pass
    rec.flush()
    assert tp.problems(out) == []
    names = [r["name"] for r in _slices(out)]
    assert names == ["new"] * 10
    rec.stop()


def test_chrome_json_output(tmp_path):
    out = tmp_path / "run.json"
    rec.start(out)
    with rec.span("a", k="v"):
        with rec.span("b"):
            pass
    rec.stop()
    doc = orjson.loads(out.read_bytes())
    xs = sorted((e for e in doc["traceEvents"] if e.get("ph") == "X"), key=lambda e: float(e["ts"]))
    assert [e["name"] for e in xs] == ["a", "b"] and xs[0]["args"] == {"k": "v"}
    assert doc["metadata"]["record"]["pid"] == os.getpid()
    assert [r["name"] for r in _slices(out)] == ["a", "b"]


def test_disabled_span_is_a_shared_no_op(tmp_path):
    assert rec.span("x") is rec.NULL_SPAN                      # nothing started
    out = tmp_path / "off.pftrace"
    rec.start(out)
    rec.disable()
    assert rec.span("x", k=1) is rec.NULL_SPAN and not rec.recording()
    with rec.span("hidden"):
        pass
    rec.enable()
    with rec.span("shown"):
        pass
    rec.stop()
    assert [r["name"] for r in _slices(out)] == ["shown"]


def test_environment_variable_starts_and_turns_off(tmp_path):
    out = tmp_path / "env.pftrace"
    script = "import traceconv.record as rec\nwith rec.span('from_env'):\n    pass\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACECONV_RECORD")}
    env["TRACECONV_RECORD"] = str(out)
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True, timeout=120)
    assert [r["name"] for r in _slices(out)] == ["from_env"]
    env["TRACECONV_RECORD"] = "0"
    script_off = script + (f"rec.start({str(tmp_path / 'no.pftrace')!r})\nassert rec.span('x') is rec.NULL_SPAN\n"
                           "f = lambda: 1\nassert rec.traced(f) is f\n")
    subprocess.run([sys.executable, "-c", script_off], cwd=ROOT, env=env, check=True, timeout=120)
    assert not (tmp_path / "no.pftrace").exists()


@pytest.mark.parametrize("name", ["run.pftrace", "run.pftrace.gz", "run.json", "run.json.gz"])
def test_a_recording_never_stopped_is_saved_at_interpreter_exit(tmp_path, name):
    """The recorder's stop runs at interpreter exit (atexit), after Python's threads are shut down:
    no thread can start there, nor can concurrent.futures' thread pool be imported.  Every output
    kind is saved then, with nothing on stderr (a .pftrace.gz recording was lost there, and for a
    while the JSON ones too, when the writers began to write on a thread of their own)."""
    out = tmp_path / name
    script = (f"import traceconv.record as rec\nrec.start({str(out)!r})\n"
              "with rec.span('outer'):\n    with rec.span('inner'):\n        pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACECONV_RECORD")}
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert r.returncode == 0 and r.stderr == b"", r.stderr.decode()
    assert [(x["name"], x["depth"]) for x in _slices(out)] == [("outer", 0), ("inner", 1)]


def test_flows_past_the_hold_are_linked_when_the_recording_ends_at_interpreter_exit(tmp_path):
    """More flows open at once than the sink holds, in a program that never calls stop: the stop at
    exit reads the streamed file back and writes it again with the flows linked, as an explicit
    stop does, though no thread can start there (a child interpreter does it)."""
    out = tmp_path / "held.pftrace"
    script = ("import traceconv.record as rec\nfrom traceconv.record import _sink\n_sink.HOLD_EVENTS = 4\n"
              f"r = rec.start({str(out)!r}, buffer=16)\nfids = [rec.new_flow() for _ in range(10)]\n"
              "for f in fids:\n    with rec.span('send', flow_out=f):\n        pass\n"
              "for i in range(40):\n    with rec.span('filler'):\n        pass\n"
              "for f in fids:\n    with rec.span('recv', flow_in=f):\n        pass\n"
              "rec.flush()\nassert r.sink.chunks > 2 and r.sink.unlinked_flows > 0\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACECONV_RECORD")}
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert r.returncode == 0 and r.stderr == b"", r.stderr.decode()
    assert tp.problems(out) == []
    flows = tp.query(out, """select so.name src, si.name dst from flow f
        join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in""")
    assert flows == [{"src": "send", "dst": "recv"}] * 10
    assert [p.name for p in tmp_path.iterdir()] == ["held.pftrace"]


@pytest.mark.parametrize("workers", [True, False])
def test_flows_past_the_hold_are_linked_at_stop_with_or_without_workers(tmp_path, monkeypatch, workers):
    """More flows open at once than the sink holds: their starts go out in earlier chunks than
    their ends, and stop() links them by writing the file again -- also for a recording started with
    ``workers=False`` (whose stop skipped that, leaving the flows out of the file)."""
    from traceconv.record import _sink
    monkeypatch.setattr(_sink, "HOLD_EVENTS", 4)
    out = tmp_path / "held.pftrace"
    r = rec.start(out, buffer=16, workers=workers)
    fids = [rec.new_flow() for _ in range(10)]
    for f in fids:
        with rec.span("send", flow_out=f):
            pass
    _fillers(40)
    for f in fids:
        with rec.span("recv", flow_in=f):
            pass
    rec.stop()
    assert r.sink.chunks > 2 and r.sink.unlinked_flows > 0
    assert tp.problems(out) == []
    flows = tp.query(out, """select so.name src, si.name dst from flow f
        join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in""")
    assert flows == [{"src": "send", "dst": "recv"}] * 10


def test_flow_across_chunks_is_linked_at_stop(tmp_path):
    out = tmp_path / "chunks.pftrace"
    r = rec.start(out, buffer=10)
    fid = rec.new_flow()
    with rec.span("produce", flow_out=fid):
        pass
    for i in range(25):                     # two flushes between the flow's two ends
        with rec.span("filler"):
            pass
    with rec.span("consume", flow_in=fid):
        pass
    assert r.sink.chunks >= 2
    rec.stop()
    assert tp.problems(out) == []
    flows = tp.query(out, """select so.name src, si.name dst from flow f
        join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in""")
    assert flows == [{"src": "produce", "dst": "consume"}]
    assert tp.query(out, "select count(*) n from slice where name = 'filler'")[0]["n"] == 25


def _fillers(n: int) -> None:
    """``n`` spans named "filler" (to fill chunks between the spans a test is about)."""
    for _ in range(n):
        with rec.span("filler"):
            pass


def test_flows_across_chunks_are_linked_in_the_chunk_of_their_end(tmp_path, monkeypatch):
    """300 flows from a producer span to a consumer span 0-20 spans later, in chunks of 16 events,
    and a chain of flows a -> b -> c across chunks: the spans a flow starts wait for its end
    (with what flows link them to), so every flow is a link in one chunk and stop() reads nothing
    back (that took ~35 us an event: 200k flows stopped in 13-15 s, now 0.04 s)."""
    from traceconv.record import _sink
    relinked = []
    monkeypatch.setattr(_sink, "_relink", lambda r: relinked.append(r))
    out = tmp_path / "flows.pftrace"
    r = rec.start(out, buffer=16)
    for i in range(300):
        fid = rec.new_flow()
        with rec.span(f"produce {i}", flow_out=fid):
            pass
        _fillers((i * 7) % 21)
        with rec.span(f"consume {i}", flow_in=fid):
            pass
    f1, f2 = rec.new_flow(), rec.new_flow()
    with rec.span("a", flow_out=f1):
        pass
    _fillers(40)
    with rec.span("b", flow_in=f1, flow_out=f2):
        pass
    _fillers(40)
    with rec.span("c", flow_in=f2):
        pass
    rec.stop()
    assert r.sink.chunks > 100 and r.sink.unlinked_flows == 0 and relinked == []
    assert tp.problems(out) == []
    flows = tp.query(out, """select so.name src, si.name dst from flow f
        join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in""")
    assert sorted((x["src"], x["dst"]) for x in flows) == sorted(
        [(f"produce {i}", f"consume {i}") for i in range(300)] + [("a", "b"), ("b", "c")])
    n = tp.query(out, "select count(*) n, count(distinct name) k from slice where name != 'traceconv.record flush'")[0]
    assert (n["n"], n["k"]) == (sum((i * 7) % 21 for i in range(300)) + 80 + 600 + 3, 1 + 600 + 3)


def test_spans_that_wait_for_a_flow_s_end_are_written_at_stop(tmp_path, monkeypatch):
    """A flow whose end never comes in this process (another process's, or none) and one whose
    end was written first: their start spans wait, and stop() writes them; past HOLD_EVENTS
    waiting spans all are written at once."""
    from traceconv.record import _sink
    monkeypatch.setattr(_sink, "HOLD_EVENTS", 5)
    out = tmp_path / "waiting.pftrace"
    r = rec.start(out, buffer=10)
    fid = rec.new_flow()
    with rec.span("consume", flow_in=fid):
        pass
    _fillers(25)
    with rec.span("produce", flow_out=fid):
        pass
    for k in range(3):
        with rec.span(f"send {k}", flow_out=rec.new_flow()):
            pass
    _fillers(25)
    assert sorted(e[3] for _, e in r.sink.held) == ["produce", "send 0", "send 1", "send 2"]
    for k in range(3, 6):
        with rec.span(f"send {k}", flow_out=rec.new_flow()):
            pass
    _fillers(25)
    assert r.sink.held == []                   # 7 waiting > 5: all written
    with rec.span("send 6", flow_out=rec.new_flow()):
        pass
    rec.stop()
    assert tp.problems(out) == []
    names = [x["name"] for x in tp.query(out, "select name from slice where name not in ('filler', "
                                              "'traceconv.record flush') order by name")]
    assert names == ["consume", "produce"] + [f"send {k}" for k in range(7)]


def test_flush_every_writes_in_the_background(tmp_path):
    out = tmp_path / "bg.pftrace"
    r = rec.start(out, flush_every=0.05)
    with rec.span("early"):
        pass
    deadline = time.monotonic() + 10
    while r.flushes == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.05)
    assert r.flushes >= 1
    assert [x["name"] for x in _slices(out)] == ["early"]        # on disk before stop
    rec.stop()


def test_the_readme_example_runs(tmp_path):
    out = tmp_path / "run.pftrace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACECONV_RECORD")}
    subprocess.run([sys.executable, str(ROOT / "examples" / "record_basic.py"), str(out)], cwd=tmp_path,
                   env=env, check=True, timeout=120)
    assert tp.problems(out) == []
    rows = _slices(out)
    assert [(r["name"], r["depth"], r["thread"]) for r in rows] == [
        ("load_batch", 0, "loader"), ("step", 0, "MainThread"), ("env_step", 1, "MainThread"),
        ("forward", 1, "MainThread"), ("checkpoint", 0, "MainThread")]
    flows = tp.query(out, """select so.name src, si.name dst from flow f
        join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in""")
    assert flows == [{"src": "load_batch", "dst": "step"}]
    assert tp.query(out, "select name from process where name = 'trainer'") == [{"name": "trainer"}]


def test_null_span_behaves_as_a_context_manager():
    assert rec.span("x") is rec.NULL_SPAN
    with rec.span("x", k=1) as s:
        assert s is rec.NULL_SPAN
        s.set(more=2)
    with pytest.raises(KeyError):                 # exceptions are not swallowed
        with rec.span("x"):
            raise KeyError("k")


def test_overlapping_spans_keep_their_durations_across_chunks(tmp_path):
    """Spans that overlap without nesting on one thread (generators, async code) go to an overlap
    lane; the lane keeps its track number in later chunks, whose own tracks come after it."""
    out = tmp_path / "overlap.pftrace"
    rec.start(out, buffer=6)
    for k in range(3):
        a = rec.span("a", k=k)
        b = rec.span("b", k=k)
        a.__enter__()
        b.__enter__()
        time.sleep(0.001)
        a.__exit__(None, None, None)             # a ends inside b: not nested
        time.sleep(0.001)
        b.__exit__(None, None, None)
        if k == 1:
            def other():
                with rec.span("other_thread"):
                    pass
            th = threading.Thread(target=other, name="late")
            th.start()
            th.join()
    rec.stop()
    assert tp.problems(out) == []
    rows = tp.query(out, """select s.name, s.dur, coalesce(t.name, th.name) track from slice s
        join track t on t.id = s.track_id left join thread_track tt on tt.id = s.track_id
        left join thread th using (utid) where s.name in ('a', 'b', 'other_thread') order by s.ts""")
    assert [r["name"] for r in rows if r["name"] != "other_thread"] == ["a", "b"] * 3
    assert all(r["dur"] >= 1_000_000 for r in rows if r["name"] == "a")
    assert all(r["dur"] >= 2_000_000 for r in rows if r["name"] == "b")
    assert {r["track"] for r in rows if r["name"] == "b"} == {"MainThread (overlap 1)"}
    assert [r["track"] for r in rows if r["name"] == "other_thread"] == ["late"]


def test_the_top_level_names_record_too(tmp_path):
    """``traceconv.span`` / ``traceconv.traced`` (as the issue spells them) are the recorder's."""
    import traceconv

    @traceconv.traced
    def forward():
        time.sleep(0.002)

    out = tmp_path / "top.pftrace"
    rec.start(out)
    with traceconv.span("env_step", cat="rollout"):
        forward()
    traceconv.counter("fps", 10.0)
    rec.stop()
    rows = _slices(out)
    assert [(r["name"], r["depth"]) for r in rows] == [
        ("env_step", 0), ("test_the_top_level_names_record_too.<locals>.forward", 1)]   # (qualname)
    assert rows[1]["dur"] >= 2_000_000


def test_traceconv_summary_of_a_recording_is_its_timeline_summed(tmp_path):
    """``traceconv summary run.pftrace`` reads the recording back (traceconv's own .pftrace is an
    input): each name's count and total are those of its slices in trace_processor, and the JSON
    conversion of the recording holds the same slices."""
    out = tmp_path / "run.pftrace"
    rec.start(out, workers=False)
    for i in range(3):
        with rec.span("step", i=i):
            with rec.span("forward"):
                time.sleep(0.002)
            time.sleep(0.001)
    rec.stop()
    r = subprocess.run([sys.executable, "-m", "traceconv", "summary", str(out), "--format", "json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = {row["key"]: row for row in orjson.loads(r.stdout)["rows"]}
    want = {q["name"]: q for q in tp.query(out, "select name, count(*) n, sum(dur) total from slice group by name")}
    for name in ("step", "forward"):
        assert (rows[name]["count"], rows[name]["total_ns"]) == (3, want[name]["total"]) and want[name]["n"] == 3
    assert rows["step"]["self_ns"] == want["step"]["total"] - want["forward"]["total"]
    j = tmp_path / "run.json"
    c = subprocess.run([sys.executable, "-m", "traceconv", "convert", str(out), "-o", str(j)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert c.returncode == 0 and "(perfetto)" in c.stdout, c.stderr
    got = tp.query(j, "select name, count(*) n, sum(dur) total from slice group by name")
    assert {q["name"]: (q["n"], q["total"]) for q in got} == {q["name"]: (q["n"], q["total"]) for q in want.values()}


def test_a_recursion_deeper_than_perfetto_keeps_is_recorded_whole(tmp_path):
    """A recursion 600 spans deep, recorded three times, a chunk each: trace_processor drops what a
    track nests 512 levels deep or more, so the deeper spans go to a depth lane, which keeps its
    track and its name in later chunks.  (A recursion cut by a chunk's end: the next test.)"""
    out = tmp_path / "deep.pftrace"
    rec.start(out)

    def down(k):
        with rec.span(f"level{k:03}"):
            if k < 599:
                down(k + 1)

    for _ in range(3):
        down(0)
        rec.flush()
    rec.stop()
    assert tp.problems(out) == []
    rows = tp.query(out, """select coalesce(t.name, th.name) track, count(*) n, min(s.depth) lo, max(s.depth) hi,
        min(s.name) first from slice s join track t on t.id = s.track_id left join thread_track tt on tt.id = s.track_id
        left join thread th using (utid) where s.name like 'level%' group by 1 order by n desc""")
    assert rows == [{"track": "MainThread", "n": 3 * 512, "lo": 0, "hi": 511, "first": "level000"},
                    {"track": "MainThread (depth 512+)", "n": 3 * 88, "lo": 0, "hi": 87, "first": "level512"}]


@pytest.mark.parametrize("levels, buffer", [(500, 97), (512, 200), (513, 200), (600, 97), (600, 200)])
def test_a_recursion_cut_by_chunks_is_laid_out_whole_when_it_is_too_deep(tmp_path, levels, buffer):
    """A recursion cut by chunks' ends: each chunk is laid out alone, and its spans are written
    before the spans that enclose them, so the sink keeps the heights of the trees it wrote
    (record._sink.Heights) and, when one grows past 512 levels across chunks, stop() reads the
    file back and writes it again, laid out whole: every span kept, no error stat.  512 levels or
    fewer: no rewrite (its cost is ~6 us an event)."""
    out = tmp_path / "deep.pftrace"
    rec.start(out, buffer=buffer)

    def down(k):
        with rec.span(f"level{k:03}"):
            if k < levels - 1:
                down(k + 1)

    for _ in range(3):
        down(0)
    sink = rec.recorder().sink
    assert sink.chunks > 3
    assert (sink.heights.crossed > 0) == (levels > 512)
    rec.stop()
    assert tp.problems(out) == []
    rows = tp.query(out, "select count(*) n from slice where name like 'level%'")
    assert rows[0]["n"] == 3 * levels
