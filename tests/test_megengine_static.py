"""MegEngine static-graph profile (trace.get_profile() of MegEngine 1.13.0, generated)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

import traceconv
from traceconv import formats
from traceconv.errors import TraceconvError, WarningCode
from traceconv.io import open_source
from traceconv.model.layout import nest
from traceconv.model import Clock

from timeline import assert_same_timeline, from_model, read_chrome_json, read_perfetto

FIX = Path(__file__).parent / "fixtures" / "megengine"
PROFILE = FIX / "generated_mge1130_static_profile.json"
PROC = "MegEngine static graph"
DEVICE = "device cpu0:0 (xpux:0)"
HOST = "host comp_node_dispatch cpu:default"


def ns(s: float) -> int:
    return int(round(s * 1e9))


@pytest.fixture(scope="module")
def doc():
    return json.loads(PROFILE.read_text())


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    d = tmp_path_factory.mktemp("mge")
    j, p = d / "a.json", d / "a.pftrace"
    assert traceconv.convert(PROFILE, j).input_format == "megengine-static"
    traceconv.convert(PROFILE, p)
    trace = traceconv.load(PROFILE)
    nest(trace)
    return trace, read_chrome_json(j), read_perfetto(p)


def test_detected_and_both_outputs_agree(out):
    assert formats.detect(open_source(PROFILE).head, PROFILE).name == "megengine-static"
    trace, tj, tp = out
    assert_same_timeline(tj, tp)
    assert_same_timeline(tj, from_model(trace))
    assert tj.metadata == tp.metadata
    assert trace.meta.clock is Clock.RELATIVE and trace.meta.synthesized is False


def test_every_executed_operator_on_each_comp_node_and_thread(out, doc):
    trace, tj, _ = out
    seq = doc["graph_exec"]["comp_seq"]
    ops = doc["graph_exec"]["operator"]
    assert len(seq) == 177 and len(ops) == 180
    for track, section in ((DEVICE, "device"), (HOST, "host")):
        slices = [s for s in tj.slices if s.process == PROC and s.track == track]
        assert len(slices) == 177
        by_seq = sorted(slices, key=lambda s: orjson.loads(s.args)["seq"])
        assert [orjson.loads(s.args)["id"] for s in by_seq] == seq          # execution order
        assert [s.name for s in by_seq] == [ops[o]["name"] for o in seq]
        assert [s.cat for s in by_seq] == [ops[o]["type"] for o in seq]
        for s, o in zip(by_seq, seq):
            ((_, t),) = doc["profiler"][section][o].items()
            assert (s.ts, s.dur) == (ns(t["start"]), ns(t["end"]) - ns(t["start"]))
            a = orjson.loads(s.args)
            assert (a["start_s"], a["kern_s"], a["end_s"]) == (t["start"], t["kern"], t["end"])
        # comp_seq order is time order on a comp node / thread
        starts = [s.ts for s in by_seq]
        assert starts == sorted(starts)
    untimed = [w for w in trace.diagnostics.warnings if "no profile times" in w.message]
    assert untimed and untimed[0].count == 3        # 180 operators, 177 executed


def test_footprint_flops_and_bandwidth_as_profile_analyze(out, doc):
    trace, tj, _ = out
    fp = doc["profiler"]["opr_footprint"]
    checked = 0
    for s in tj.slices:
        if s.track != DEVICE:
            continue
        a = orjson.loads(s.args)
        f = fp[a["id"]]
        assert a["memory"] == f["memory"] and a["in_shapes"] == f["in_shapes"]
        assert a["out_shapes"] == f["out_shapes"] and a.get("param") == f.get("param")
        assert a.get("computation") == f["computation"]
        t = a["end_s"] - a["start_s"]
        if t > 0:
            if f["computation"]:
                assert a["flops"] == pytest.approx(f["computation"] / t)
                checked += 1
            assert a["bandwidth"] == pytest.approx(f["memory"] / t)
        else:
            assert "flops" not in a and "bandwidth" not in a
    assert checked > 10
    matmul = [s for s in tj.slices if s.track == DEVICE and s.cat == "MatrixMul"]
    assert matmul and all(orjson.loads(s.args)["computation"] > 0 for s in matmul)


def test_summary_table_per_operator(out, doc):
    trace, tj, _ = out
    (table,) = tj.metadata["summary_tables"]
    rows = {r[1]: dict(zip(table["columns"], r)) for r in table["rows"]}
    assert len(rows) == 177 and table["unit"] == "s"
    for o, per_node in doc["profiler"]["device"].items():
        t = max(v["end"] - v["start"] for v in per_node.values())
        assert rows[o]["device_time"] == pytest.approx(t)
        c = doc["profiler"]["opr_footprint"][o]["computation"]
        if c and t:
            assert rows[o]["flops"] == pytest.approx(c / t)
    meta = tj.metadata["megengine_static"]
    assert meta["operators"] == 180 and meta["executed"] == 177


def test_old_compatible_layout_without_comp_seq(tmp_path, doc):
    """MegEngine 1.0-1.2 *.compatible.json: var as a list, no comp_seq/mem_chunk: ordered by start time."""
    old = json.loads(json.dumps(doc))
    g = old["graph_exec"]
    del g["comp_seq"], g["mem_chunk"]
    g["var"] = list(g["var"].values())
    for op in g["operator"].values():
        op["output"] = []
    p = tmp_path / "old.json"
    p.write_text(json.dumps({"graph_exec": g, "profiler": old["profiler"]}))
    t = traceconv.load(p, "megengine-static")
    nest(t)
    dev = [i for i in range(len(t.slices)) if t.track_label(t.tracks[t.slices.track[i]]) == DEVICE]
    assert len(dev) == 177
    by_seq = sorted(dev, key=lambda i: t.slice_args(i)["seq"])
    starts = [t.slices.ts[i] for i in by_seq]
    assert starts == sorted(starts)


def test_bad_input(tmp_path, doc):
    p = tmp_path / "p.json"
    p.write_text(PROFILE.read_text()[:1000])
    with pytest.raises(TraceconvError, match="not valid JSON"):
        traceconv.load(p, "megengine-static")
    p.write_text(json.dumps({"graph_exec": doc["graph_exec"], "profiler": {"device": {}, "host": {}}}))
    with pytest.raises(TraceconvError, match="no operator times"):
        traceconv.load(p)
    bad = json.loads(json.dumps(doc))
    first = next(iter(bad["profiler"]["device"]))
    next(iter(bad["profiler"]["device"][first].values()))["start"] = "soon"
    p.write_text(json.dumps(bad))
    with pytest.raises(TraceconvError) as e:
        traceconv.load(p)
    assert f"profiler.device.{first}" in str(e.value) and "\n" not in str(e.value)
    p.write_text(json.dumps([{"name": "x", "ph": "X"}]))
    with pytest.raises(TraceconvError, match="expected an object with 'graph_exec'"):
        traceconv.load(p, "megengine-static")
    # end before start: kept with zero length, counted
    rev = json.loads(json.dumps(doc))
    v = next(iter(rev["profiler"]["host"][first].values()))
    v["end"] = v["start"] - 0.001
    p.write_text(json.dumps(rev))
    t = traceconv.load(p)
    assert any(w.code is WarningCode.CLAMPED_VALUE and w.count == 1 for w in t.diagnostics.warnings)


def test_sniffer_claims_only_static_profiles():
    from traceconv.readers.megengine_static import sniff
    from timeline import sample_files
    for p in sample_files():
        assert sniff(open_source(p).head) == (p.name == PROFILE.name), p
