"""Serve one trace file to ui.perfetto.dev, as Perfetto's own ``open_trace_in_ui`` does.

* binds 127.0.0.1 only, port 9001 by default: the only port the Perfetto UI's
  Content-Security-Policy lets it fetch from;
* answers ``GET /<file name>`` with the file, ``Access-Control-Allow-Origin`` set
  to the UI's origin and ``Cache-Control: no-cache``; every other request gets 404;
  nothing else on the machine is ever served;
* stops once the file has been sent (or on Ctrl-C).

The deep link the UI understands: ``https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/<name>``.
"""

from __future__ import annotations

import errno
import http.server
import shutil
import urllib.parse
from pathlib import Path
from typing import Callable

from .errors import TraceconvError

DEFAULT_ORIGIN = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001
HOST = "127.0.0.1"


def normalize_origin(origin: str) -> str:
    """``scheme://host[:port]`` of a URL (the path is dropped), as the CORS header needs."""
    u = urllib.parse.urlsplit(origin)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise TraceconvError(f"--origin must be an http(s) URL such as {DEFAULT_ORIGIN}, not '{origin}'")
    return f"{u.scheme}://{u.netloc}"


def deep_link(origin: str, port: int, name: str) -> str:
    return f"{origin}/#!/?url=http://{HOST}:{port}/{urllib.parse.quote(name)}"


def serve_once(path: str | Path, *, port: int = DEFAULT_PORT, origin: str = DEFAULT_ORIGIN,
               on_ready: Callable[[str], None] | None = None) -> None:
    """Serve ``path`` until it has been fetched once.  ``on_ready`` gets the deep link."""
    path = Path(path)
    origin = normalize_origin(origin)
    wanted = "/" + urllib.parse.quote(path.name)
    size = path.stat().st_size
    done = {"served": False}

    class Handler(http.server.BaseHTTPRequestHandler):
        def _headers(self, code: int, length: int) -> None:
            self.send_response(code)
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Content-Length", str(length))
            if code == 200:
                self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if urllib.parse.urlsplit(self.path).path != wanted:
                self._headers(404, 0)
                return
            self._headers(200, size)
            with open(path, "rb") as f:
                shutil.copyfileobj(f, self.wfile, 1 << 20)
            done["served"] = True

        def do_POST(self) -> None:  # noqa: N802
            self._headers(404, 0)

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    try:
        server = http.server.HTTPServer((HOST, port), Handler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise TraceconvError(f"port {port} on {HOST} is already in use (another trace being served, "
                                 "or a trace_processor?): stop it, or use --port (the Perfetto UI only "
                                 "fetches from port 9001 unless its CSP is relaxed)") from None
        raise TraceconvError(f"cannot listen on {HOST}:{port}: {e.strerror or e}") from None
    with server:
        if on_ready:
            on_ready(deep_link(origin, server.server_address[1], path.name))
        while not done["served"]:
            server.handle_request()
