"""A warm traceconv CLI to fork cases from (the fuzz harness's subprocess).

``python -m tests.fuzz.server`` imports the CLI and loads the compiled kernels once, then reads one
JSON request per line on stdin and answers one JSON line on stdout per request.  Each request runs
``traceconv <argv>`` -- the real CLI's ``main()`` -- in a *forked child* with its own address-space
cap (``RLIMIT_AS``), its own ``TMPDIR``, stdout/stderr sent to files, and a wall-clock timeout after
which the child is killed.  Forking saves the 1-2 s of interpreter start and imports that a fresh
``python -m traceconv`` costs; what runs is the same code with the same exit codes and output.

request:  {"argv": [...], "stdout": PATH, "stderr": PATH, "cap": BYTES, "tmpdir": DIR, "timeout": S}
answer:   {"rc": INT (negative: killed by that signal), "timeout": BOOL, "maxrss_kb": INT, "secs": F}
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time


def _warm() -> None:
    """Import everything a conversion touches (and run one conversion, so nothing is left to load)."""
    import tempfile
    from pathlib import Path

    import traceconv
    from traceconv_cli import app  # noqa: F401

    root = Path(__file__).resolve().parents[2]
    fixture = root / "tests" / "fixtures" / "chrome_json" / "perfetto_flow_events_json_v1.json"
    with tempfile.TemporaryDirectory(prefix="traceconv-fuzz-warm-") as d:
        tr = traceconv.load(fixture)
        traceconv.save(tr, Path(d) / "w.pftrace")
        traceconv.save(tr, Path(d) / "w.json")


def _child(req: dict) -> None:
    """In the forked child: cap, redirect, run the CLI, exit with its code."""
    try:
        os.setpgid(0, 0)
        cap = int(req["cap"])
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        out = os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
        os.environ["TMPDIR"] = req["tmpdir"]
        import tempfile
        tempfile.tempdir = None
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.argv = ["traceconv", *req["argv"]]
        from traceconv_cli.app import main
        code = 0
        try:
            main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - what Python would print for an uncaught exception
            import traceback
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    except BaseException:  # noqa: BLE001
        os._exit(99)


def serve() -> None:
    _warm()
    reply = sys.stdout
    sys.stdout = sys.stderr
    reply.write(json.dumps({"ready": True}) + "\n")
    reply.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(req)
        deadline = t0 + float(req.get("timeout", 60))
        timed_out = False
        while True:
            wpid, status, ru = os.wait4(pid, os.WNOHANG)
            if wpid:
                break
            if time.monotonic() > deadline:
                timed_out = True
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                wpid, status, ru = os.wait4(pid, 0)
                break
            time.sleep(0.005)
        rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        reply.write(json.dumps({"rc": rc, "timeout": timed_out, "maxrss_kb": ru.ru_maxrss,
                                "secs": round(time.monotonic() - t0, 3)}) + "\n")
        reply.flush()


if __name__ == "__main__":
    serve()
