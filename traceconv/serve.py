"""Serve one trace file to ui.perfetto.dev, as Perfetto's own ``open_trace_in_ui`` does.

* binds 127.0.0.1 only, port 9001 by default: the only port the Perfetto UI's
  Content-Security-Policy lets it fetch from;
* answers ``GET /<file name>`` (and ``HEAD``) with the file, ``Access-Control-Allow-Origin`` set
  to the UI's origin and ``Cache-Control: no-cache``; ``OPTIONS`` (a CORS preflight, including
  Chrome's Private Network Access one) with 204 and the CORS headers; every other path gets 404,
  every other method 405; nothing else on the machine is ever served;
* serves several connections at a time, each with a timeout (an idle or stalled client is
  dropped after ``timeout`` seconds and blocks nobody);
* stops once the whole file has been sent to one client (a fetch aborted midway does not
  count), or on Ctrl-C / SIGTERM (the caller's ``finally`` removes its temporary file).

The deep link the UI understands: ``https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/<name>``.
"""

from __future__ import annotations

import errno
import threading
import urllib.parse
from pathlib import Path
from typing import Callable

from .errors import TraceconvError

DEFAULT_ORIGIN = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001
DEFAULT_TIMEOUT = 30.0          # seconds a connection may stay idle or stalled
HOST = "127.0.0.1"
CHUNK = 1 << 20
ALLOWED = "GET, HEAD, OPTIONS"


def check_port(port: int) -> None:
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise TraceconvError(f"{{opt:port}} {port} is not a TCP port: choose one in 1..65535 "
                             f"(the Perfetto UI fetches from {DEFAULT_PORT})")


def normalize_origin(origin: str) -> str:
    """``scheme://host[:port]`` of a URL (the path is dropped), as the CORS header needs."""
    u = urllib.parse.urlsplit(origin)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise TraceconvError(f"{{opt:origin}} must be an http(s) URL such as {DEFAULT_ORIGIN}, not '{origin}'")
    return f"{u.scheme}://{u.netloc}"


def deep_link(origin: str, port: int, name: str) -> str:
    return f"{origin}/#!/?url=http://{HOST}:{port}/{urllib.parse.quote(name)}"


def serve_once(path: str | Path, *, port: int = DEFAULT_PORT, origin: str = DEFAULT_ORIGIN,
               on_ready: Callable[[str], None] | None = None, timeout: float = DEFAULT_TIMEOUT) -> int:
    """Serve ``path`` until one client has received all of it.  ``on_ready`` gets the deep link.
    Returns the number of complete fetches (1)."""
    import http.server          # here, not at the top: the CLI imports this module for its defaults

    class _Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        block_on_close = False

        def handle_error(self, request: object, client_address: object) -> None:
            pass                # a client that went away is not an error worth a traceback

    check_port(port)
    path = Path(path)
    origin = normalize_origin(origin)
    wanted = "/" + urllib.parse.quote(path.name)
    size = path.stat().st_size
    done = threading.Event()
    fetched = {"complete": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            self.timeout = timeout          # BaseHTTPRequestHandler sets it on the socket
            super().setup()

        def _cors(self) -> None:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Vary", "Origin")

        def _headers(self, code: int, length: int, extra: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self._cors()
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Content-Length", str(length))
            if code == 200:
                self.send_header("Content-Type", "application/octet-stream")
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()

        def _ours(self) -> bool:
            return urllib.parse.urlsplit(self.path).path == wanted

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if not self._ours():
                self._headers(404, 0)
                return
            self._headers(200, size)
            sent = 0
            try:
                with open(path, "rb") as f:
                    while chunk := f.read(CHUNK):
                        self.wfile.write(chunk)
                        sent += len(chunk)
                self.wfile.flush()
            except OSError:                 # reset, broken pipe, timeout: not a complete fetch
                self.close_connection = True
                return
            if sent == size:
                fetched["complete"] += 1
                done.set()
                self.close_connection = True

        def do_HEAD(self) -> None:  # noqa: N802
            self._headers(200 if self._ours() else 404, size if self._ours() else 0)

        def do_OPTIONS(self) -> None:  # noqa: N802
            extra = {"Access-Control-Allow-Methods": ALLOWED, "Allow": ALLOWED,
                     "Access-Control-Max-Age": "600"}
            asked = self.headers.get("Access-Control-Request-Headers")
            if asked:
                extra["Access-Control-Allow-Headers"] = asked
            if self.headers.get("Access-Control-Request-Private-Network", "").lower() == "true":
                extra["Access-Control-Allow-Private-Network"] = "true"
            self._headers(204, 0, extra)

        def _not_allowed(self) -> None:
            self._headers(405, 0, {"Allow": ALLOWED})
            self.close_connection = True    # a body we did not read may follow

        do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed  # noqa: N815

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            except (OSError, ValueError):    # timeouts and resets while reading a request
                self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    try:
        server = _Server((HOST, port), Handler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise TraceconvError(f"port {port} on {HOST} is already in use (another trace being served, "
                                 "or a trace_processor?): stop it, or use {opt:port} (the Perfetto UI only "
                                 "fetches from port 9001 unless its CSP is relaxed)") from None
        raise TraceconvError(f"cannot listen on {HOST}:{port}: {e.strerror or e}") from None
    server.timeout = 0.2                    # handle_request() returns this often to check ``done``
    try:
        if on_ready:
            on_ready(deep_link(origin, server.server_address[1], path.name))
        while not done.is_set():
            server.handle_request()
    finally:
        server.server_close()
    return fetched["complete"]


__all__ = ["serve_once", "deep_link", "normalize_origin", "check_port", "DEFAULT_ORIGIN", "DEFAULT_PORT",
           "DEFAULT_TIMEOUT", "HOST"]
