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


# -- robustness: idle connections, aborted fetches, HEAD/OPTIONS, SIGTERM, bad ports ----------------

import os  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

from traceconv import serve  # noqa: E402
from traceconv.errors import TraceconvError  # noqa: E402


def raw_request(port: int, text: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(text.encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data:
                break
        return data


def test_idle_connection_blocks_nobody_and_head_options_have_cors():
    port = free_port()
    p, url = start(str(EXAMPLE), "--port", str(port))
    try:
        idle = socket.create_connection(("127.0.0.1", port), timeout=10)    # says nothing
        head = raw_request(port, "HEAD /mlagents_timers.pftrace HTTP/1.1\r\nHost: x\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"Access-Control-Allow-Origin: https://ui.perfetto.dev" in head
        pre = raw_request(port, "OPTIONS /mlagents_timers.pftrace HTTP/1.1\r\nHost: x\r\n"
                                "Origin: https://ui.perfetto.dev\r\nAccess-Control-Request-Method: GET\r\n"
                                "Access-Control-Request-Headers: range\r\n"
                                "Access-Control-Request-Private-Network: true\r\n\r\n")
        assert pre.startswith(b"HTTP/1.1 204")
        for h in (b"Access-Control-Allow-Origin: https://ui.perfetto.dev", b"Access-Control-Allow-Methods: GET, HEAD",
                  b"Access-Control-Allow-Headers: range", b"Access-Control-Allow-Private-Network: true"):
            assert h in pre, pre
        assert p.poll() is None, "HEAD and OPTIONS are not the fetch"
        with get(url.split("url=", 1)[1]) as r:
            body = r.read()
        assert p.wait(timeout=10) == 0
        idle.close()
    finally:
        p.kill()
    assert body[:1] == b"\x0a" and len(body) > 1000


def test_aborted_fetch_does_not_count_and_prints_no_traceback(tmp_path, capfd):
    big = tmp_path / "big.pftrace"
    big.write_bytes(os.urandom(32 << 20))        # far more than the socket buffers hold
    port = free_port()
    result: list = []
    t = threading.Thread(target=lambda: result.append(serve.serve_once(big, port=port, timeout=5)), daemon=True)
    t.start()
    for _ in range(200):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            break
        except OSError:
            time.sleep(0.02)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(b"GET /big.pftrace HTTP/1.1\r\nHost: x\r\n\r\n")
    assert s.recv(1024).startswith(b"HTTP/1.1 200")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")   # RST
    s.close()
    time.sleep(0.5)
    assert t.is_alive(), "an aborted fetch is not a fetch: still serving"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/big.pftrace", timeout=30) as r:
        assert r.read() == big.read_bytes()
    t.join(timeout=10)
    assert not t.is_alive() and result == [1]
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err and "BrokenPipe" not in captured.err and "Reset" not in captured.err


def test_a_stalled_connection_times_out(tmp_path):
    f = tmp_path / "t.pftrace"
    f.write_bytes(b"\x0a\x00")
    port = free_port()
    t = threading.Thread(target=serve.serve_once, args=(f,), kwargs={"port": port, "timeout": 0.5}, daemon=True)
    t.start()
    time.sleep(0.3)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /t.pftrace HTTP/1.1\r\n")          # and never finishes the request
        t0 = time.monotonic()
        assert s.recv(100) == b"", "the server closed the stalled connection"
        assert time.monotonic() - t0 < 5
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/t.pftrace", timeout=10) as r:
        assert r.read() == b"\x0a\x00"
    t.join(timeout=10)
    assert not t.is_alive()


def test_sigterm_removes_the_temporary_trace(tmp_path):
    port = free_port()
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    p = subprocess.Popen([sys.executable, "-m", "traceconv", "open", str(EXAMPLE), "--no-browser", "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().startswith("serving")
        made = list(tmp_path.glob("traceconv-*/*.pftrace"))
        assert len(made) == 1, "the converted trace is in a temporary folder"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 143
        assert "Traceback" not in p.stderr.read()
        assert list(tmp_path.iterdir()) == [], "the temporary folder is gone"
    finally:
        p.kill()


@pytest.mark.parametrize("port", ["70000", "0", "-1"])
def test_port_out_of_range_is_one_line(port):
    with pytest.raises(TraceconvError):
        serve.check_port(int(port))
    r = subprocess.run([sys.executable, "-m", "traceconv", "open", str(EXAMPLE), "--no-browser", "--port", port],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"traceconv: error: --port {port} is not a TCP port: choose one in 1..65535 " \
                               "(the Perfetto UI fetches from 9001)"
