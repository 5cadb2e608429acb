"""Every timeline sample in ../shared/samples: detected as its dialect, converted to both outputs,
every event kept or counted.  (Skipped where shared/ is not beside the project.)"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import traceconv
from traceconv import formats
from traceconv.readers.chrome.reader import ChromeReader
from traceconv.readers.chrome.composer import ComposerReader, ComposerTorchReader
from traceconv.readers.chrome.kineto import KinetoReader
from traceconv.readers.chrome.megengine import MegEngineReader
from traceconv.readers.chrome.mxnet import MXNetReader
from traceconv.io import open_source
from traceconv.model.layout import nest
from traceconv.writers import chrome_json, perfetto
from typer.testing import CliRunner

SAMPLES = Path(__file__).resolve().parent.parent.parent / "shared" / "samples"
DIALECT = {"kineto": "kineto", "composer": "composer", "mxnet": "mxnet", "megengine": "megengine",
           "chrome_trace_perfetto": "chrome-json"}
AGGREGATE = ("dumps", "static_profile", ".svg", ".txt", ".md")
READERS = {"kineto": KinetoReader, "mxnet": MXNetReader, "megengine": MegEngineReader,
           "chrome-json": ChromeReader}


def timeline_samples() -> list[Path]:
    if not SAMPLES.is_dir():
        return []
    out = []
    for folder in DIALECT:
        for p in sorted((SAMPLES / folder).rglob("*")):
            if p.is_file() and not any(a in p.name for a in AGGREGATE):
                out.append(p)
    return out


FILES = timeline_samples()
needs_samples = pytest.mark.skipif(not FILES, reason="../shared/samples is not there")


@needs_samples
@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SAMPLES)))
def test_sample_is_detected_converted_and_accounted_for(path):
    src = open_source(path)
    expected = DIALECT[path.relative_to(SAMPLES).parts[0]]
    fmt = formats.detect(src.head, path)
    assert fmt.name == expected
    if expected == "composer":
        cls = ComposerTorchReader if src.head.lstrip()[:1] == b"{" else ComposerReader
    else:
        cls = READERS[expected]
    r = cls(src)
    trace = r.read()
    assert r.n_events > 0
    assert sum(r.used.values()) + r.dropped == r.n_events
    dropped_in_warnings = sum(w.count for w in trace.diagnostics.warnings
                              if w.code.value in ("dropped-event", "unknown-phase", "unmatched-end",
                                                  "unresolved-flow"))
    assert dropped_in_warnings >= r.dropped         # every event not kept is in a warning's count
    nest(trace)
    for write in (chrome_json.write, perfetto.write):
        out = io.BytesIO()
        write(trace, out)
        assert out.tell() > 0


def test_from_overrides_detection():
    fix = Path(__file__).parent / "fixtures" / "kineto" / "kineto_docs_after_fix_trace.json"
    generic = traceconv.load(fix, "chrome-json")
    assert generic.meta.source_format == "chrome-json"
    assert not any(p.name == "GPU 0" for p in generic.processes)       # no Kineto renaming
    assert any(p.name == "GPU 0" for p in traceconv.load(fix).processes)


def test_cli_prints_the_warnings_and_strict_refuses(tmp_path):
    from traceconv_cli.app import app
    fix = Path(__file__).parent / "fixtures" / "composer" / "composer_profiler" / "ep0-ba3-rank0.json.gz"
    runner = CliRunner()
    res = runner.invoke(app, ["convert", str(fix), "-o", str(tmp_path / "o.pftrace")])
    assert res.exit_code == 0, res.output
    text = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert "(composer)" in text
    assert "unmatched-end" in text and "profiling window" in text
    res = runner.invoke(app, ["convert", str(fix), "-o", str(tmp_path / "s.pftrace"), "--strict"])
    assert res.exit_code == 2
    assert not (tmp_path / "s.pftrace").exists()
