"""Remote inputs and outputs through fsspec, against a real S3-compatible server (moto's server mode
on 127.0.0.1, started here; s3fs finds it through AWS_ENDPOINT_URL as a user's would): the same
bytes and tables as from local files, streamed reads, whole uploads, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import traceconv
from traceconv import remote
from traceconv.errors import TraceconvError
from traceconv.io import atomic_output, open_source

import s3server
from timeline import read_perfetto

FIX = Path(__file__).parent / "fixtures"
GLOO = sorted((FIX / "multirank" / "gloo_2ranks").glob("*.gz"))
SOCCER = FIX / "mlagents" / "python_SoccerTwos_run_logs_timers.json"


@pytest.fixture(scope="module")
def s3():
    server, fs, old = s3server.start_s3()
    yield fs
    s3server.stop_s3(server, old)


def test_convert_s3_to_s3_is_the_local_conversion(s3, tmp_path):
    (url,) = s3server.upload(s3, [GLOO[0]], "conv")
    traceconv.convert(GLOO[0], tmp_path / "local.pftrace")
    res = traceconv.convert(url, "s3://bucket/conv/out/rank0.pftrace")
    assert res.input_format == "kineto" and res.slices > 100
    got = s3.cat_file("bucket/conv/out/rank0.pftrace")
    assert got == (tmp_path / "local.pftrace").read_bytes()
    # and a gzipped Chrome JSON output is gzipped on the way up
    traceconv.convert(url, "s3://bucket/conv/out/rank0.json.gz")
    assert s3.cat_file("bucket/conv/out/rank0.json.gz")[:2] == b"\x1f\x8b"


def test_a_remote_input_is_read_in_blocks_never_whole(s3, monkeypatch):
    (url,) = s3server.upload(s3, [GLOO[1]], "stream")
    reads: list[int] = []
    real = remote.open_read

    class Spy:
        def __init__(self, f):
            self.f = f

        def read(self, n=-1):
            reads.append(n)
            return self.f.read(n)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(remote, "open_read", lambda u, block_size=remote.BLOCK_SIZE: Spy(real(u, block_size)))
    trace = traceconv.load(url)
    assert len(trace.slices) == len(traceconv.load(GLOO[1]).slices)
    assert reads and all(0 < n <= 16 << 20 for n in reads), f"a read of the whole object: {reads}"
    assert remote.open_read(remote.URL(url)).f.blocksize == remote.BLOCK_SIZE


def test_merge_a_remote_glob_into_a_remote_archive_and_trace(s3, tmp_path):
    s3server.upload(s3, GLOO, "run/torch_traces")
    pattern = "s3://bucket/run/torch_traces/rank*.pt.trace.json.gz"
    res = traceconv.merge([pattern], "s3://bucket/run/out/run.pftrace", window="20ms:120ms")
    assert [str(p) for p, _, _ in res.files] == [f"s3://bucket/run/torch_traces/{f.name}" for f in GLOO]
    assert res.dropped["{opt:window}"] > 0
    # the upload is what a local output of the same run holds, byte for byte
    traceconv.merge([pattern], tmp_path / "same.pftrace", window="20ms:120ms")
    (tmp_path / "up.pftrace").write_bytes(s3.cat_file("bucket/run/out/run.pftrace"))
    assert (tmp_path / "up.pftrace").read_bytes() == (tmp_path / "same.pftrace").read_bytes()
    # and the timeline is the one merged from the local copies (only the file names in the metadata differ)
    traceconv.merge(GLOO, tmp_path / "local.pftrace", window="20ms:120ms")
    got, want = read_perfetto(tmp_path / "up.pftrace"), read_perfetto(tmp_path / "local.pftrace")
    assert len(got.slices) == res.slices > 100 and got.slices == want.slices
    traceconv.merge([pattern], "s3://bucket/run/out/run.tar")
    traceconv.merge(GLOO, tmp_path / "run.tar")
    assert s3.cat_file("bucket/run/out/run.tar") == (tmp_path / "run.tar").read_bytes()


def test_a_failed_write_uploads_nothing(s3):
    with pytest.raises(RuntimeError):
        with atomic_output("s3://bucket/half/out.pftrace") as f:
            f.write(b"x" * 1000)
            raise RuntimeError("the writer failed")
    s3.invalidate_cache()
    assert not s3.exists("bucket/half/out.pftrace")


def test_remote_errors_are_one_line(s3):
    with pytest.raises(TraceconvError, match=r"s3://bucket/nothing/here\.json: no such file"):
        traceconv.load("s3://bucket/nothing/here.json")
    with pytest.raises(TraceconvError, match="no file matches this pattern"):
        traceconv.merge(["s3://bucket/nothing/rank*.json"], "/tmp/never.pftrace")
    with pytest.raises(TraceconvError, match="refusing to overwrite an input"):
        (url,) = s3server.upload(s3, [SOCCER], "same")
        traceconv.convert(url, url)


def test_file_urls_are_local_paths(tmp_path):
    src = open_source(f"file://{SOCCER}")
    assert src.path == SOCCER and not src.remote
    traceconv.convert(f"file://{SOCCER}", f"file://{tmp_path}/t.pftrace")
    traceconv.convert(SOCCER, tmp_path / "local.pftrace")
    assert (tmp_path / "t.pftrace").read_bytes() == (tmp_path / "local.pftrace").read_bytes()
    # validate too (it once treated a file:// path as a str and crashed), gzipped: the content's size
    # comes from the gzip trailer
    import gzip
    from traceconv.validate import validate
    gz = tmp_path / "soccer.json.gz"
    gz.write_bytes(gzip.compress(SOCCER.read_bytes()))
    got, want = validate(f"file://{gz}"), validate(SOCCER)
    assert got.path == str(gz) and got.events == want.events > 0
    assert [(f.check, f.count) for f in got.findings] == [(f.check, f.count) for f in want.findings]


def test_a_missing_backend_names_its_package(monkeypatch):
    import fsspec.core

    def no_backend(url, **kw):
        raise ImportError("Install gcsfs to access Google Storage")

    monkeypatch.setattr(fsspec.core, "url_to_fs", no_backend)
    with pytest.raises(TraceconvError) as e:
        traceconv.load("gs://bucket/rank0.json")
    assert str(e.value) == ("gs://bucket/rank0.json: gs:// needs the gcsfs package: "
                            "pip install 'traceconv[remote]' (or pip install gcsfs)")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceconv", *args], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "COLUMNS": "200"})


def test_done_when_summary_of_an_s3_glob_on_dask_is_the_local_table(s3):
    """The issue's test: ``traceconv summary 's3://bucket/run/torch_traces/rank*.pt.trace.json.gz'
    --engine dask`` prints the same table as a local run over the same files."""
    pytest.importorskip("dask.distributed", reason="dask[distributed] is not installed (pip install '.[test]')")
    s3server.upload(s3, GLOO, "run/torch_traces")
    url = "s3://bucket/run/torch_traces/rank*.pt.trace.json.gz"
    remote_run = _cli("summary", url, "--engine", "dask", "--workers", "2", "--top", "0")
    local_run = _cli("summary", *map(str, GLOO), "--top", "0")
    assert remote_run.returncode == 0, remote_run.stderr
    assert local_run.returncode == 0, local_run.stderr
    # the title names the inputs as given (over a few lines); everything under it is the same
    r_title, _, body = remote_run.stdout.partition("\u250f")
    l_title, _, l_body = local_run.stdout.partition("\u250f")
    assert "s3://bucket/run/torch_traces/rank*.pt.trace.json.gz" in r_title.replace("\n", "").replace(" ", "")
    assert body == l_body
    assert "gloo:all_reduce" in body and "slowest rank" in body
    assert "ranks, slowest first (2 ranks" in remote_run.stdout
    # the whole table (every row, every rank's total) read from S3 is the one read from the local copies
    from traceconv.hotspots import summarize_files
    assert summarize_files([url]).to_json() == summarize_files(GLOO).to_json()


def test_validate_and_open_read_remote_files(s3, tmp_path):
    from traceconv.validate import validate
    (url,) = s3server.upload(s3, [GLOO[0]], "val")
    got, want = validate(url), validate(GLOO[0])
    assert got.path == url and got.events == want.events > 100
    assert [(f.check, f.count) for f in got.findings] == [(f.check, f.count) for f in want.findings]
    with traceconv.open_in_ui(url) as local:           # converted here, served from a local file
        assert local.exists() and local.suffix == ".pftrace"
        traceconv.convert(GLOO[0], tmp_path / "c.pftrace")
        assert local.read_bytes() == (tmp_path / "c.pftrace").read_bytes()
    traceconv.convert(GLOO[0], "s3://bucket/val/rank0.pftrace")
    with traceconv.open_in_ui("s3://bucket/val/rank0.pftrace") as local:   # a Perfetto trace: copied whole
        assert local.read_bytes() == (tmp_path / "c.pftrace").read_bytes()
    assert not local.exists(), "the temporary copy is removed"
