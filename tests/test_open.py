"""``traceconv open``, for real: a subprocess serving on a test port, fetched over HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from timeline import read_perfetto

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "examples" / "mlagents_timers.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*args: str) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen([sys.executable, "-m", "traceconv", "open", *args, "--no-browser"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline()
    url = p.stdout.readline().strip()
    assert first.startswith("serving"), first + p.stderr.read()
    return p, url


def get(url: str, origin: str | None = "https://ui.perfetto.dev"):
    req = urllib.request.Request(url, headers={"Origin": origin} if origin else {})
    return urllib.request.urlopen(req, timeout=10)


def test_serves_the_converted_file_once_with_cors(tmp_path):
    port = free_port()
    p, url = start(str(EXAMPLE), "--port", str(port))
    try:
        assert url == f"https://ui.perfetto.dev/#!/?url=http://127.0.0.1:{port}/mlagents_timers.pftrace"
        file_url = url.split("url=", 1)[1]
        with pytest.raises(urllib.error.HTTPError) as e:
            get(f"http://127.0.0.1:{port}/etc/passwd")
        assert e.value.code == 404
        with pytest.raises(urllib.error.HTTPError) as e:
            get(f"http://127.0.0.1:{port}/")
        assert e.value.code == 404
        with get(file_url) as r:
            body = r.read()
            assert r.headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
            assert r.headers["Cache-Control"] == "no-cache"
        assert p.wait(timeout=10) == 0, "it stops after the file was fetched"
    finally:
        p.kill()
    (tmp_path / "got.pftrace").write_bytes(body)
    assert len(read_perfetto(tmp_path / "got.pftrace").slices) == 25


def test_a_perfetto_trace_is_served_as_is_with_another_origin(tmp_path):
    import traceconv
    traceconv.convert(EXAMPLE, tmp_path / "run.pftrace")
    src = tmp_path / "run.trace"          # a Perfetto trace is recognised by its content
    src.write_bytes((tmp_path / "run.pftrace").read_bytes())
    port = free_port()
    p, url = start(str(src), "--port", str(port), "--origin", "http://localhost:10000/some/path")
    try:
        assert url.startswith("http://localhost:10000/#!/?url=")
        with get(url.split("url=", 1)[1], origin=None) as r:
            assert r.read() == src.read_bytes()
            assert r.headers["Access-Control-Allow-Origin"] == "http://localhost:10000"
        assert p.wait(timeout=10) == 0
    finally:
        p.kill()


def test_port_taken_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "traceconv", "open", str(EXAMPLE), "--no-browser",
                            "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
