"""Independent decoders of traceconv's two outputs, for tests.

They do not use traceconv's own readers: they decode the bytes (Chrome JSON
with orjson, Perfetto protobuf with ``perfetto_trace_pb2``) the way the viewers
interpret them, into one normalized :class:`Timeline` so that the two outputs
of one input, and the model they came from, can be compared field by field.

Tracks are keyed by ``(process name, track name)``: a thread's name, or the
name of a non-thread track (which the JSON writer turns into a named thread).
"""

from __future__ import annotations

import gzip
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from traceconv.model import Trace, TrackKind, decode_args
from traceconv.writers.chrome_json import GLOBAL_PROCESS_NAME, SYNTHETIC_TID_BASE


@dataclass(frozen=True)
class Slice:
    process: str
    track: str
    tid: int | None    # a real thread's tid; None for other tracks (lanes, async tracks)
    name: str
    cat: str
    ts: int
    dur: int
    args: str          # canonical JSON of the args (sorted keys)
    depth: int = -1


@dataclass
class Timeline:
    slices: list[Slice] = field(default_factory=list)
    instants: list[tuple[str, str, str, int, str]] = field(default_factory=list)   # process, track, name, ts, scope
    counters: list[tuple[str, str, int, float]] = field(default_factory=list)      # process, track, ts, value
    flows: list[tuple[tuple, tuple]] = field(default_factory=list)                 # (src slice key, dst slice key)
    metadata: dict[str, Any] = field(default_factory=dict)
    processes: dict[int, str] = field(default_factory=dict)                        # pid -> name

    def slice_set(self, with_depth: bool = True) -> Counter:
        return Counter(s if with_depth else replace(s, depth=-1) for s in self.slices)

    def tracks(self) -> set[tuple[str, str]]:
        return {(s.process, s.track) for s in self.slices}


def _empty_as_null(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _empty_as_null(x) for k, x in v.items()} or None
    if isinstance(v, list):
        return [_empty_as_null(x) for x in v] or None
    return v


def canon(args: dict | None) -> str:
    return orjson.dumps(args or {}, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()


def _comparable(s: Slice) -> Slice:
    """``s`` with an empty object or list in its args as null, at any depth: a .pftrace writes all
    three as an annotation with no value, the one form trace_processor loads for them."""
    if "{}" not in s.args and "[]" not in s.args:
        return s
    args = {k: _empty_as_null(x) for k, x in orjson.loads(s.args).items()}
    return replace(s, args=canon(args))


def _key(s: Slice) -> tuple:
    return (s.process, s.track, s.tid, s.name, s.ts, s.dur)


def _depths(slices: list[Slice]) -> list[Slice]:
    """Depth of each slice on its track by Perfetto's nesting rule for X events (an open slice
    ends at or before the next one's start -- but a zero-duration slice stays open for what begins
    at its own time, as trace_processor reads them)."""
    by_track: dict[tuple, list[int]] = defaultdict(list)
    for i, s in enumerate(slices):
        by_track[(s.process, s.track, s.tid)].append(i)
    out = list(slices)
    for idx in by_track.values():
        idx.sort(key=lambda i: (slices[i].ts, -slices[i].dur, i))
        stack: list[tuple[int, int]] = []          # (start, end) of the open slices
        for i in idx:
            s = slices[i]
            while stack and stack[-1][1] <= s.ts and not (stack[-1][0] == stack[-1][1] == s.ts):
                stack.pop()
            if stack and s.ts + s.dur > stack[-1][1]:
                raise AssertionError(f"slices overlap without nesting on one track: {s}")
            out[i] = replace(s, depth=len(stack))
            stack.append((s.ts, s.ts + s.dur))
    return out


# ---------------------------------------------------------------- Chrome JSON

def _real(tid: Any) -> int | None:
    """A real thread's tid; None for the threads the JSON writer makes for other tracks."""
    return tid if isinstance(tid, int) and tid < SYNTHETIC_TID_BASE else None


def _ns(us: Any) -> int:
    # exact for the decimal strings traceconv writes: go through the text
    text = orjson.dumps(us).decode()
    if "e" in text or "E" in text:
        return round(float(text) * 1000)
    neg = text.startswith("-")
    text = text.lstrip("-")
    whole, _, frac = text.partition(".")
    v = int(whole) * 1000 + int((frac + "000")[:3])
    return -v if neg else v


def read_chrome_json(path: str | Path) -> Timeline:
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = orjson.loads(data)
    events = doc["traceEvents"]
    base = int(doc.get("baseTimeNanoseconds", 0))
    pnames: dict[int, str] = {}
    tnames: dict[tuple[int, int], str] = {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "process_name":
            # global tracks live in the writer's "Global" process: the same as no process
            pnames[e["pid"]] = "" if e["args"]["name"] == GLOBAL_PROCESS_NAME else e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            tnames[(e["pid"], e["tid"])] = e["args"]["name"]
    tl = Timeline(metadata=doc.get("metadata", {}), processes=dict(pnames))
    raw: list[Slice] = []
    binds: dict[tuple[str, int], list[int]] = defaultdict(list)
    v1: dict[int, dict[str, tuple]] = defaultdict(dict)
    for e in events:
        ph = e["ph"]
        if ph == "X":
            pid, tid = e["pid"], e["tid"]
            s = Slice(pnames.get(pid, ""), tnames.get((pid, tid), ""), _real(tid), e["name"], e.get("cat", ""),
                      base + _ns(e["ts"]), _ns(e["dur"]), canon(e.get("args")))
            if "bind_id" in e:
                binds[("out" if e.get("flow_out") else "in", e["bind_id"])].append(len(raw))
            raw.append(s)
        elif ph == "i":
            scope = e.get("s", "t")
            track = (tnames.get((e["pid"], e.get("tid")), ""), _real(e.get("tid"))) if scope == "t" else ("", None)
            tl.instants.append((pnames.get(e.get("pid"), "") if scope != "g" else "", track, e["name"],
                                base + _ns(e["ts"]), scope))
        elif ph == "C":
            ((series, value),) = e["args"].items()
            track = e["name"] if series == "value" else f"{e['name']} {series}"
            tl.counters.append((pnames.get(e["pid"], ""), track, base + _ns(e["ts"]), float(value)))
        elif ph in ("s", "f"):
            v1[e["id"]][ph] = (e["pid"], e["tid"], base + _ns(e["ts"]))
        elif ph != "M":
            raise AssertionError(f"unexpected phase {ph!r} in traceconv's output")
    tl.slices = _depths(raw)
    for (direction, bid), idx in binds.items():
        if direction == "out":
            (src,) = idx
            (dst,) = binds[("in", bid)]
            tl.flows.append((_key(tl.slices[src]), _key(tl.slices[dst])))

    def enclosing(pid: int, tid: int, ts: int) -> tuple:
        track = (pnames.get(pid, ""), tnames.get((pid, tid), ""), _real(tid))
        cands = [s for s in tl.slices if (s.process, s.track, s.tid) == track and s.ts <= ts <= s.ts + s.dur]
        # innermost; between a slice that ends at ts and one that begins there, the one that begins
        # (a viewer has closed the first by then)
        best = max(cands, key=lambda s: (s.depth, s.ts))
        return _key(best)

    for ends in v1.values():
        tl.flows.append((enclosing(*ends["s"]), enclosing(*ends["f"])))
    return tl


# ---------------------------------------------------------------- Perfetto protobuf

def _nothing(e: Any) -> bool:
    return (not e.name and not e.name_iid and e.WhichOneof("value") is None and not e.dict_entries
            and not e.array_values)


def _ann_value(a: Any, names: dict[int, str], strings: dict[int, str] | None = None) -> Any:
    """A DebugAnnotation's value; ``names`` and ``strings`` resolve interned names (at any depth) and
    interned string values."""
    which = a.WhichOneof("value")
    if len(a.dict_entries) == 1 and _nothing(a.dict_entries[0]):
        return {}                       # {} or [] in a list: one nameless entry with no value
    if a.dict_entries:
        return {(names[e.name_iid] if e.name_iid else e.name): _ann_value(e, names, strings)
                for e in a.dict_entries}
    if a.array_values:
        return [_ann_value(v, names, strings) for v in a.array_values]
    if which == "legacy_json_value":
        return orjson.loads(a.legacy_json_value)
    if which == "string_value_iid":
        return (strings or {})[a.string_value_iid]
    if which is None:
        return None
    return getattr(a, which)


BOOTTIME = pb.BuiltinClock.BUILTIN_CLOCK_BOOTTIME


class _Clocks:
    """Packet timestamps to the trace clock, the way trace_processor resolves them: a packet's
    ``timestamp_clock_id`` or else its sequence's ``TracePacketDefaults``; clocks 64..127 are
    scoped to their sequence; an ``is_incremental`` clock's timestamps are deltas from the previous
    timestamp on that clock (the first one after a snapshot from the snapshot's value), in units of
    ``unit_multiplier_ns``; a sequence clock maps to BOOTTIME (the default trace clock) through the
    snapshot that holds both.  Only what traceconv writes is supported: one snapshot per clock."""

    def __init__(self) -> None:
        self.defaults: dict[int, int] = {}                 # sequence -> default timestamp clock id
        self.clocks: dict[tuple[int, int], dict[str, Any]] = {}

    def snapshot(self, seq: int, snap: Any) -> None:
        clocks = {c.clock_id: c for c in snap.clocks}
        assert BOOTTIME in clocks, "a clock snapshot without the trace clock (BOOTTIME)"
        boot = clocks[BOOTTIME].timestamp
        for cid, c in clocks.items():
            assert cid == BOOTTIME or 64 <= cid < 128, f"clock {cid} is not supported here"
            if cid == BOOTTIME:
                continue
            assert (seq, cid) not in self.clocks, "a second snapshot of one clock is not supported here"
            unit = c.unit_multiplier_ns or 1
            self.clocks[(seq, cid)] = {"unit": unit, "incremental": c.is_incremental,
                                       "last": c.timestamp * unit, "at": c.timestamp * unit, "boot": boot}

    def resolve(self, seq: int, p: Any) -> int:
        cid = p.timestamp_clock_id or self.defaults.get(seq, 0)
        if cid in (0, BOOTTIME):
            return p.timestamp
        assert 64 <= cid < 128, f"clock {cid} is not supported here"
        c = self.clocks[(seq, cid)]
        ns = p.timestamp * c["unit"]
        if c["incremental"]:
            c["last"] += ns
            ns = c["last"]
        return ns - c["at"] + c["boot"]


def read_perfetto(path: str | Path, *, check_order: bool = True) -> Timeline:
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    trace = pb.Trace()
    trace.ParseFromString(data)
    tracks: dict[int, Any] = {}
    procs: dict[int, str] = {}
    tl = Timeline()
    interned: dict[int, dict[str, dict[int, str]]] = {}
    stacks: dict[int, list[tuple]] = defaultdict(list)
    flow_src: dict[int, tuple] = {}
    flow_dst: dict[int, tuple] = {}
    raw: list[Slice] = []
    last_ts: dict[int, int] = {}                     # sequence -> its last packet's time
    seen_first: set[int] = set()
    clocks = _Clocks()
    default_track: dict[int, int] = {}               # sequence -> TrackEventDefaults.track_uuid
    for p in trace.packet:
        seq = p.trusted_packet_sequence_id
        if seq and seq not in seen_first:
            assert p.first_packet_on_sequence, "first packet of a sequence must say so"
            assert p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            seen_first.add(seq)
        # in trace_processor's order: cleared state, defaults, interned data, then a clock snapshot
        # ends the packet
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            interned[seq] = {"names": {}, "cats": {}, "ann": {}, "str": {}}
            clocks.defaults.pop(seq, None)
            default_track.pop(seq, None)
        if p.HasField("trace_packet_defaults"):
            clocks.defaults[seq] = p.trace_packet_defaults.timestamp_clock_id
            d = p.trace_packet_defaults
            if d.HasField("track_event_defaults") and d.track_event_defaults.HasField("track_uuid"):
                default_track[seq] = d.track_event_defaults.track_uuid
        st = interned.setdefault(seq, {"names": {}, "cats": {}, "ann": {}, "str": {}})
        if p.HasField("interned_data"):
            for e in p.interned_data.event_names:
                st["names"][e.iid] = e.name
            for e in p.interned_data.event_categories:
                st["cats"][e.iid] = e.name
            for e in p.interned_data.debug_annotation_names:
                st["ann"][e.iid] = e.name
            for e in p.interned_data.debug_annotation_string_values:
                st["str"][e.iid] = e.str.decode("utf-8", "surrogatepass")
        if p.HasField("clock_snapshot"):
            clocks.snapshot(seq, p.clock_snapshot)
            continue
        ts = clocks.resolve(seq, p) if p.HasField("timestamp") else None
        on_sequence_clock = p.HasField("timestamp") and (p.timestamp_clock_id or clocks.defaults.get(seq, 0)) >= 64
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            assert d.uuid not in tracks, "two descriptors for one track uuid"
            tracks[d.uuid] = d
            if d.HasField("process"):
                procs[d.uuid] = d.process.process_name
        if p.HasField("chrome_events"):
            for m in p.chrome_events.metadata:
                which = m.WhichOneof("value")
                tl.metadata[m.name] = orjson.loads(m.json_value) if which == "json_value" else getattr(m, which)
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        uses_iids = te.name_iid or te.category_iids or any(a.name_iid for a in te.debug_annotations)
        uuid = te.track_uuid if te.HasField("track_uuid") else default_track.get(seq)
        if uses_iids or on_sequence_clock or not te.HasField("track_uuid"):
            assert p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE, \
                "packets using interned ids or the sequence's defaults must set SEQ_NEEDS_INCREMENTAL_STATE"
        assert ts is not None, "a track event without a timestamp"
        if check_order:
            assert ts >= last_ts.get(seq, ts), "packets of a sequence out of time order"
            last_ts[seq] = ts
        assert uuid in tracks, "event on a track with no descriptor before it"
        if te.type == pb.TrackEvent.TYPE_SLICE_END:
            assert stacks[uuid], "SLICE_END with no open slice"
            start = stacks[uuid].pop()
            t_uuid, name, cat, args, t0, fl_out, fl_in, depth = start
            raw.append(Slice(*_where(t_uuid, tracks, procs), name, cat, t0, ts - t0, canon(args), depth))
            key = _key(raw[-1])
            for f in fl_out:
                flow_src[f] = key
            for f in fl_in:
                flow_dst[f] = key
            continue
        name = st["names"][te.name_iid] if te.name_iid else te.name
        cat = ",".join(st["cats"][c] for c in te.category_iids) if te.category_iids else ",".join(te.categories)
        args = {(st["ann"][a.name_iid] if a.name_iid else a.name): _ann_value(a, st["ann"], st["str"])
                for a in te.debug_annotations}
        if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stacks[uuid].append((uuid, name, cat, args, ts, list(te.flow_ids),
                                          list(te.terminating_flow_ids), len(stacks[uuid])))
        elif te.type == pb.TrackEvent.TYPE_INSTANT:
            d = tracks[uuid]
            proc, track, tid = _where(uuid, tracks, procs)
            scope = "p" if d.HasField("process") else ("t" if (proc or d.HasField("thread")) else "g")
            tl.instants.append((proc, (track, tid) if scope == "t" else ("", None), name, ts, scope))
        elif te.type == pb.TrackEvent.TYPE_COUNTER:
            proc, track, _ = _where(uuid, tracks, procs)
            v = te.double_counter_value if te.HasField("double_counter_value") else float(te.counter_value)
            tl.counters.append((proc, track, ts, v))
    assert all(not s for s in stacks.values()), "slices left open at the end of the trace"
    tl.slices = raw
    for fid, src in flow_src.items():
        tl.flows.append((src, flow_dst[fid]))
    tl.processes = {tracks[u].process.pid: n for u, n in procs.items()}
    return tl


def _where(uuid: int, tracks: dict[int, Any], procs: dict[int, str]) -> tuple[str, str, int | None]:
    d = tracks[uuid]
    if d.HasField("process"):
        return d.process.process_name, "", None
    thread = d.HasField("thread")
    name = d.thread.thread_name if thread else d.name
    u = d.parent_uuid
    while u and u not in procs:
        u = tracks[u].parent_uuid
    return (procs.get(u, "") if u else ""), name, (d.thread.tid if thread else None)


# ---------------------------------------------------------------- the model itself

def from_model(trace: Trace) -> Timeline:
    """The model in the same normalized form (after layout.nest has run)."""
    st = trace.strings

    def where(track_id: int) -> tuple[str, str, int | None]:
        t = trace.tracks[track_id]
        proc = trace.processes[t.process].name if t.process is not None else ""
        if t.kind is TrackKind.PROCESS:
            return proc, "", None
        tid = trace.threads[t.thread].tid if t.kind is TrackKind.THREAD else None
        return proc, trace.track_label(t), tid

    tl = Timeline()
    s = trace.slices
    for i in range(len(s)):
        tl.slices.append(Slice(*where(s.track[i]), st[s.name[i]], st[s.cat[i]], s.ts[i], s.dur[i],
                               canon(decode_args(s.args[i])),
                               s.depth[i] if s.depth is not None else -1))
    for i in range(len(trace.instants)):
        t = trace.tracks[trace.instants.track[i]]
        proc, track, tid = where(t.id)
        scope = "p" if t.kind is TrackKind.PROCESS else ("g" if t.process is None else "t")
        tl.instants.append((proc, (track, tid) if scope == "t" else ("", None), st[trace.instants.name[i]],
                            trace.instants.ts[i], scope))
    for i in range(len(trace.counters)):
        tl.counters.append((*where(trace.counters.track[i])[:2], trace.counters.ts[i], trace.counters.value[i]))
    keys = [_key(x) for x in tl.slices]
    for i in range(len(trace.flows)):
        tl.flows.append((keys[trace.flows.src[i]], keys[trace.flows.dst[i]]))
    return tl


def assert_same_timeline(a: Timeline, b: Timeline, *, depth: bool = True) -> None:
    """Same slices (name, track, ts, dur, args, depth), instants, counters and flows."""
    sa = Counter(_comparable(s) for s in a.slice_set(depth).elements())
    sb = Counter(_comparable(s) for s in b.slice_set(depth).elements())
    if sa != sb:
        only_a = list((sa - sb).elements())[:5]
        only_b = list((sb - sa).elements())[:5]
        raise AssertionError(f"slices differ:\n  only in first: {only_a}\n  only in second: {only_b}")
    assert Counter(a.instants) == Counter(b.instants), "instants differ"
    assert Counter(a.counters) == Counter(b.counters), "counters differ"
    assert Counter(a.flows) == Counter(b.flows), "flows differ"


def sample_files() -> list[Path]:
    """Every fixture file (but the fuzz inputs), and every file of ../shared/samples when it is there."""
    root = Path(__file__).parent / "fixtures"
    shared = Path(__file__).parent.parent.parent / "shared" / "samples"
    # not tests/fixtures/fuzz: inputs made to break readers, with tests of their own (test_fuzz.py)
    files = [p for p in root.rglob("*") if p.is_file() and "fuzz" not in p.relative_to(root).parts]
    if shared.is_dir():
        files += [p for p in shared.rglob("*") if p.is_file()]
    return files


def assert_outputs_agree(trace: Trace, tmp_path: Path, *, read_back: bool = False) -> Timeline:
    """Write ``trace`` to Chrome JSON and to Perfetto protobuf, decode both, and check that each
    describes the model's timeline; with ``read_back``, also that traceconv reads its own JSON
    output back to that timeline.  Returns the model's normalized timeline."""
    import traceconv
    from traceconv.model.layout import nest
    nest(trace)
    traceconv.save(trace, tmp_path / "o.json")
    traceconv.save(trace, tmp_path / "o.pftrace")
    m = from_model(trace)
    assert_same_timeline(m, read_chrome_json(tmp_path / "o.json"))
    assert_same_timeline(m, read_perfetto(tmp_path / "o.pftrace"))
    if read_back:
        back = traceconv.load(tmp_path / "o.json")
        assert back.meta.source_format == "chrome-json"      # traceconv's own output reads generically
        nest(back)
        assert_same_timeline(m, from_model(back))
    return m
