"""Where trace_processor's time goes when it opens the bench's Kineto trace and traceconv's .pftrace
of it: issue 13's opening target (the .pftrace, every arg kept, opens no slower than the JSON).

    python benchmarks/opening.py [--size 1M] [--repeat 3]

Each file is opened as it is, without its complete events' args, and without its flows as well
(the JSON variants made with orjson, their .pftrace by ``traceconv.convert`` from them), in
alternated runs.  Then what a slice's two packets cost: the flow-less, arg-less trace with its
durations rounded to whole microseconds, its .pftrace as written (a begin and an end a slice)
and the same with one packet a slice (on the threads' tracks), a legacy phase-X event, whose
duration trace_processor takes in whole microseconds only (``legacy_event.duration_us``:
TrackEvent has no complete event in ns, so no faithful encoding of Kineto's sub-microsecond
durations can use it).  Per row: the file, its slices and args rows in trace_processor (the same
rows for each pair) and its time to open; then the parts: the events alone, the flows, and the
args per row.  Needs ../shared/bin/trace_processor_shell.  The JSON variants are made once per
size, the .pftrace ones by each run, in benchmarks/data/opening_<size>/ (not in git).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))
from bench import DATA, TRACE_PROCESSOR, ensure, open_times, oracle, parse_size, write_new  # noqa: E402

WHOLE = "no args, no flows, durations in whole µs"
COUNTS = ("select (select count(*) from slice) as slices, (select count(*) from args) as args, "
          "(select count(*) from flow) as flows, (select ifnull(sum(value), 0) from stats "
          "where severity in ('error', 'data_loss')) as problems")


def json_variants(src: Path, work: Path) -> dict[str, Path]:
    """The JSON without its complete events' args, without its flow events (s/t/f) too, and that
    with its complete events' durations rounded to whole µs (which one packet a slice keeps)."""
    made = {"no args": work / "no_args.json", "no args, no flows": work / "no_args_no_flows.json",
            WHOLE: work / "no_args_no_flows_whole_us.json"}
    if all(p.exists() for p in made.values()):
        return made
    doc = orjson.loads(src.read_bytes())
    events = [{k: v for k, v in e.items() if k != "args"} if e.get("ph") == "X" else e
              for e in doc["traceEvents"]]
    write_new(made["no args"], orjson.dumps({**doc, "traceEvents": events}))
    events = [e for e in events if e.get("ph") not in ("s", "t", "f")]
    write_new(made["no args, no flows"], orjson.dumps({**doc, "traceEvents": events}))
    events = [{**e, "dur": round(e["dur"])} if e.get("ph") == "X" and "dur" in e else e for e in events]
    write_new(made[WHOLE], orjson.dumps({**doc, "traceEvents": events}))
    return made


def pftrace_of(src: Path, work: Path) -> Path:
    """``src`` converted by this traceconv (each run: the writer may have changed since the last)."""
    import traceconv

    out = work / (src.stem + ".pftrace" if src.parent == work else "as_written.pftrace")
    traceconv.convert(src, out)
    return out


def one_packet_per_slice(src: Path, out: Path | None = None) -> Path:
    """``src`` (a traceconv .pftrace) with each slice of a thread's track made one legacy phase-X
    packet instead of a begin and an end, its duration in whole µs, at absolute times; the rest as
    it is (at ``out``: by default beside ``src``)."""
    out = out or src.with_name(src.stem + ".one_packet.pftrace")
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    trace = Trace.FromString(src.read_bytes())
    # (trace_processor takes phase X on a thread's track only: the slices of other tracks, such
    # as the overlap lanes, keep their begin and end)
    threads = {p.track_descriptor.uuid for p in trace.packet if p.track_descriptor.HasField("thread")}
    clocks: dict[int, int] = {}       # a sequence's incremental clock: its time so far
    default: dict[int, int] = {}      # a sequence's default track
    when: list[int | None] = []
    for p in trace.packet:
        seq = p.trusted_packet_sequence_id
        if p.HasField("trace_packet_defaults"):        # (with the sequence's clock snapshot)
            d = p.trace_packet_defaults
            default[seq] = d.track_event_defaults.track_uuid
            for c in p.clock_snapshot.clocks:
                if c.clock_id == d.timestamp_clock_id and c.is_incremental:
                    clocks[seq] = c.timestamp
        if p.HasField("track_event"):
            if seq in clocks:
                clocks[seq] += p.timestamp
            when.append(clocks.get(seq, p.timestamp))
        else:
            when.append(None)
    open_: dict[int, list[int]] = {}
    duration: dict[int, int] = {}
    ends: set[int] = set()
    for i, p in enumerate(trace.packet):
        e = p.track_event
        if not p.HasField("track_event") or e.type not in (TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END):
            continue
        track = e.track_uuid if e.HasField("track_uuid") else default.get(p.trusted_packet_sequence_id, 0)
        if track not in threads:
            continue
        if e.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_.setdefault(track, []).append(i)
        else:
            begin = open_[track].pop()
            duration[begin] = when[i] - when[begin]
            ends.add(i)
    rewritten = Trace()
    for i, p in enumerate(trace.packet):
        if i in ends:
            continue
        q = rewritten.packet.add()
        q.CopyFrom(p)
        if q.HasField("trace_packet_defaults"):
            q.ClearField("clock_snapshot")
            q.trace_packet_defaults.ClearField("timestamp_clock_id")
        if q.HasField("track_event"):
            q.timestamp = when[i]
            if i in duration:
                q.track_event.ClearField("type")
                q.track_event.legacy_event.phase = ord("X")
                q.track_event.legacy_event.duration_us = round(duration[i] / 1000)
    write_new(out, rewritten.SerializeToString())
    return out


def counts(path: Path) -> dict[str, int]:
    """trace_processor's slices, args rows, flows and error stats of ``path``."""
    return oracle().query(path, COUNTS)[0]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1M", help="events of the bench's generated trace (1M: the issue's)")
    ap.add_argument("--repeat", type=int, default=3, help="alternated runs of each file; medians are shown")
    return ap


def main() -> None:
    a = parser().parse_args()
    if not TRACE_PROCESSOR.exists():
        raise SystemExit(f"needs {TRACE_PROCESSOR}")
    work = DATA / f"opening_{a.size}"
    work.mkdir(parents=True, exist_ok=True)
    src = ensure(DATA / f"big_{a.size}.pt.trace.json", parse_size(a.size))
    json_files = {"as written": src, **json_variants(src, work)}
    files: dict[str, Path] = {}
    for label, path in json_files.items():
        files[f"JSON, {label}"] = path
        files[f".pftrace, {label}"] = pftrace_of(path, work)
    files[f".pftrace, {WHOLE}, one packet a slice"] = one_packet_per_slice(files[f".pftrace, {WHOLE}"])
    times = open_times(files, a.repeat)
    rows = {label: {**counts(path), **times[label], "bytes": os.path.getsize(path)}
            for label, path in files.items()}
    w = max(map(len, rows))
    print(f"{'file':<{w}}  {'MB':>6}  {'slices':>8}  {'args':>9}  {'problems':>8}  {'opens in':>8}  CPU")
    for label, r in rows.items():
        print(f"{label:<{w}}  {r['bytes'] / 1e6:6.1f}  {r['slices']:8,}  {r['args']:9,}  {r['problems']:8,}  "
              f"{r['seconds']:7.2f}s  {r['cpu_seconds']:.2f}s")

    def part(kind: str, more: str, less: str) -> tuple[float, int]:
        hi, lo = rows[f"{kind}, {more}"], rows[f"{kind}, {less}"]
        return hi["seconds"] - lo["seconds"], hi["args"] - lo["args"]

    ev_j, ev_p = rows["JSON, no args, no flows"]["seconds"], rows[".pftrace, no args, no flows"]["seconds"]
    fl_j, fl_p = part("JSON", "no args", "no args, no flows")[0], part(".pftrace", "no args", "no args, no flows")[0]
    (ar_j, n_j), (ar_p, n_p) = part("JSON", "as written", "no args"), part(".pftrace", "as written", "no args")
    two, one = rows[f".pftrace, {WHOLE}"], rows[f".pftrace, {WHOLE}, one packet a slice"]
    whole_j, whole_p = rows["JSON, as written"]["seconds"], rows[".pftrace, as written"]["seconds"]
    print(f"\nopening the .pftrace / the JSON: {whole_p / whole_j:.2f} x ({whole_p:.2f} against {whole_j:.2f} s); "
          "its parts:")
    print(f"  the events alone: {ev_p:.2f} against {ev_j:.2f} s = {ev_p / ev_j:.2f} x; with durations in whole µs, "
          f"a begin and an end a slice {two['seconds']:.2f} s, one packet a slice {one['seconds']:.2f} s "
          f"({two['slices']:,} and {one['slices']:,} slices)")
    print(f"  the flows: {fl_p:+.2f} against {fl_j:+.2f} s")
    print(f"  the args: {ar_p:.2f} against {ar_j:.2f} s for {n_p:,} and {n_j:,} rows: "
          f"{1e9 * ar_p / max(n_p, 1):.0f} against {1e9 * ar_j / max(n_j, 1):.0f} ns a row")


if __name__ == "__main__":
    main()
