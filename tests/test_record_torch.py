"""traceconv.record.torch.trace_handler: a .pftrace per profiling window, named as
tensorboard_trace_handler names its JSON, equal to converting that JSON, no JSON left on disk.

Without torch, a stand-in profiler whose ``export_chrome_trace`` writes a real torch 2.1.3 CPU
trace (tests/fixtures/kineto) checks the handler's own work; with torch installed, a CPU training
loop under ``torch.profiler.profile`` checks the whole path (it skips, saying so, without torch).
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import socket
from pathlib import Path

import pytest

import perfetto_oracle as tp
import traceconv
from traceconv.record.torch import trace_handler

FIXTURE = Path(__file__).parent / "fixtures" / "kineto" / "generated_torch213_cpu_single_worker0.pt.trace.json.gz"


class StandInProfiler:
    """What the handler uses of torch.profiler.profile: export_chrome_trace(path)."""

    def __init__(self) -> None:
        self.exported: list[str] = []

    def export_chrome_trace(self, path: str) -> None:
        self.exported.append(path)
        with gzip.open(FIXTURE, "rb") as f, open(path, "wb") as g:
            shutil.copyfileobj(f, g)


def test_handler_writes_the_converted_window_and_no_json(tmp_path):
    out_dir = tmp_path / "traces"
    handler = trace_handler(out_dir)
    prof = StandInProfiler()
    first = handler(prof)
    second = handler(prof)
    assert first != second and first.parent == second.parent == out_dir
    pattern = rf"{re.escape(socket.gethostname())}_{os.getpid()}\.\d+\.pt\.trace\.pftrace"
    assert re.fullmatch(pattern, first.name) and re.fullmatch(pattern, second.name)
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([first.name, second.name])   # no JSON left
    assert not any(Path(p).exists() for p in prof.exported)
    # the same content as converting the JSON the profiler wrote: the same bytes
    ref = tmp_path / "ref.pftrace"
    traceconv.convert(FIXTURE, ref)
    assert first.read_bytes() == ref.read_bytes()
    from traceconv.readers.pftrace import read_pftrace
    back = read_pftrace(first)
    want = traceconv.load(FIXTURE)
    assert len(back.slices) == len(want.slices) > 10


def test_handler_gzip_and_worker_name(tmp_path):
    handler = trace_handler(tmp_path, worker_name="trainer0", use_gzip=True)
    out = handler(StandInProfiler())
    assert re.fullmatch(r"trainer0\.\d+\.pt\.trace\.pftrace\.gz", out.name)
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_handler_removes_the_json_when_conversion_fails(tmp_path):
    class Broken:
        def export_chrome_trace(self, path):
            Path(path).write_text("not a trace")

    with pytest.raises(traceconv.TraceconvError):
        trace_handler(tmp_path, worker_name="w")(Broken())
    assert list(tmp_path.iterdir()) == []


@tp.requires_trace_processor
def test_cpu_training_loop_under_torch_profiler(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch", reason="torch is not installed (a CPU build runs this test)")
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(handler, steps=5):
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2),
                     on_trace_ready=handler) as prof:
            for _ in range(steps):
                x = torch.randn(16, 32)
                loss = model(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()

    # the JSON the profiler exported for the window is kept aside (a copy made as the handler
    # deletes it), to be converted the usual way and compared
    kept = tmp_path / "window.pt.trace.json"
    real_unlink = os.unlink

    def spy(path, *a, **kw):
        if str(path).endswith(".pt.trace.json"):
            shutil.copyfile(path, kept)
        return real_unlink(path, *a, **kw)

    monkeypatch.setattr(os, "unlink", spy)
    ours = tmp_path / "ours"
    train(trace_handler(ours, worker_name="w"))
    monkeypatch.undo()
    files = sorted(ours.iterdir())
    assert len(files) == 1 and re.fullmatch(r"w\.\d+\.pt\.trace\.pftrace", files[0].name)   # no JSON left
    assert tp.problems(files[0]) == []
    got = tp.slices(files[0])
    names = {r[2] for r in got}
    assert sum(n.startswith("ProfilerStep#") for n in names) == 2 and "aten::addmm" in names
    # the same content as converting the JSON of the same window
    ref = tmp_path / "ref.pftrace"
    traceconv.convert(kept, ref)
    assert files[0].read_bytes() == ref.read_bytes()
    assert got == tp.slices(ref)


def test_rank_in_the_name_when_torch_distributed_is_initialized(tmp_path):
    pytest.importorskip("torch", reason="torch is not installed")
    import socket as _s

    import torch.distributed as dist
    if not dist.is_available():
        pytest.skip("this torch build has no torch.distributed")
    with _s.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        out = trace_handler(tmp_path)(StandInProfiler())
    finally:
        dist.destroy_process_group()
    assert re.fullmatch(rf"{re.escape(socket.gethostname())}_{os.getpid()}_rank0\.\d+\.pt\.trace\.pftrace", out.name)
