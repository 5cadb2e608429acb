"""Outputs to any target, for real: standard output, a terminal, a symlink, a FIFO with a reader,
/dev/null, /dev/full, a full and a read-only file system (tmpfs, when mounting is allowed), a
SIGTERM sent to a running ``traceconv convert``; and the exit codes of each outcome."""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import os
import pty
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
import pytest

import traceconv
from traceconv.errors import TraceconvError
from traceconv.io import atomic_output

import perfetto_oracle as tp
from timeline import read_chrome_json, read_perfetto

SOCCER = Path(__file__).parent / "fixtures" / "mlagents" / "python_SoccerTwos_run_logs_timers.json"
SLICES = 25
EXIT_ENVIRONMENT = 3                    # traceconv.errors.EXIT_ENVIRONMENT, spelled out


def run(*args, cwd=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceconv", *map(str, args)], capture_output=True,
                          cwd=cwd, timeout=120, **kw)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr.decode(), stderr.decode()
    return lines[0]


# -- standard output ------------------------------------------------------------------------------

def test_dash_writes_perfetto_to_stdout_and_no_file_named_dash(tmp_path):
    r = run("convert", SOCCER, "-o", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert list(tmp_path.iterdir()) == [], "no file named '-' (or anything else) was written"
    assert b"wrote <stdout> (perfetto)" in r.stderr, "the summary goes to stderr, not into the trace"
    (tmp_path / "got.pftrace").write_bytes(r.stdout)
    assert len(read_perfetto(tmp_path / "got.pftrace").slices) == SLICES


@tp.requires_trace_processor
def test_what_a_fifo_reader_gets_loads_in_trace_processor(tmp_path):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    traceconv.convert(SOCCER, fifo, to_format="perfetto")
    reader.join(timeout=30)
    (tmp_path / "got.pftrace").write_bytes(got[0])
    tp.assert_loads(tmp_path / "got.pftrace")
    assert tp.query(tmp_path / "got.pftrace", "select count(*) as n from slice") == [{"n": SLICES}]


def test_dash_with_to_chrome_json_is_json_on_stdout(tmp_path):
    r = run("convert", SOCCER, "-o", "-", "--to", "chrome-json", "-q", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == b""
    doc = orjson.loads(r.stdout)
    assert sum(1 for e in doc["traceEvents"] if e["ph"] == "X") == SLICES
    assert list(tmp_path.iterdir()) == []


def test_dev_stdout_is_written_through_not_replaced(tmp_path):
    with open(tmp_path / "redirected.json", "wb") as f:
        r = subprocess.run([sys.executable, "-m", "traceconv", "convert", str(SOCCER), "-o", "/dev/stdout",
                            "--to", "chrome-json", "-q"], stdout=f, stderr=subprocess.PIPE, timeout=120)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert len(read_chrome_json(tmp_path / "redirected.json").slices) == SLICES


def test_binary_output_to_a_terminal_is_refused_json_is_not(tmp_path):
    for to, code in (("perfetto", 2), ("chrome-json", 0)):
        master, slave = pty.openpty()
        shown: list[bytes] = []

        def drain() -> None:            # the terminal's reader: a full pty buffer would block the writer
            while True:
                try:
                    chunk = os.read(master, 1 << 16)
                except OSError:         # EIO once the last writer has closed the slave
                    return
                if not chunk:
                    return
                shown.append(chunk)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            r = subprocess.run([sys.executable, "-m", "traceconv", "convert", str(SOCCER), "-o", "-", "--to", to],
                               stdout=slave, stderr=subprocess.PIPE, timeout=120)
        finally:
            os.close(slave)
            reader.join(timeout=30)
            os.close(master)
        assert r.returncode == code, (to, r.stderr)
        if not code:                    # the JSON reached the terminal whole
            assert b'"traceEvents"' in b"".join(shown)
        if code:
            line = one_line(r.stderr)
            assert line.startswith("traceconv: error: <stdout>: refusing to write a binary Perfetto trace "
                                   "to a terminal"), line


def test_a_reader_that_goes_away_is_exit_141_without_traceback(tmp_path):
    big = make_big_input(tmp_path, 20_000)
    p = subprocess.Popen([sys.executable, "-m", "traceconv", "convert", str(big), "-o", "-", "--to", "json", "-q"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.read(100)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141, err
    assert b"Traceback" not in err and b"Exception ignored" not in err


# -- files that are not regular -------------------------------------------------------------------

def test_symlink_is_followed_and_its_target_replaced(tmp_path):
    real = tmp_path / "data" / "run.pftrace"
    real.parent.mkdir()
    real.write_bytes(b"old")
    os.chmod(real, 0o640)
    link = tmp_path / "latest.pftrace"
    link.symlink_to(real)
    traceconv.convert(SOCCER, link)
    assert link.is_symlink() and os.readlink(link) == str(real), "the link is still a link"
    assert len(read_perfetto(real).slices) == SLICES
    assert stat.S_IMODE(real.stat().st_mode) == 0o640, "the replaced file keeps its permissions"
    assert leftovers(tmp_path) == [] and leftovers(real.parent) == []


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "target.json")
    traceconv.convert(SOCCER, link)
    assert link.is_symlink() and len(read_chrome_json(tmp_path / "target.json").slices) == SLICES


def test_symlink_to_an_input_is_refused(tmp_path):
    src = tmp_path / "timers.json"
    shutil.copy(SOCCER, src)
    link = tmp_path / "out.json"
    link.symlink_to(src)
    with pytest.raises(TraceconvError, match="refusing to overwrite an input"):
        traceconv.convert(src, link)
    assert src.read_bytes() == SOCCER.read_bytes()


def test_an_input_under_another_name_is_refused(tmp_path):
    """The output is an input when it is the same file (a hard link, another spelling of the path)
    or, for an input that does not exist, the same path once resolved; another input is not."""
    from traceconv.io import check_output
    src = tmp_path / "timers.json"
    shutil.copy(SOCCER, src)
    os.link(src, tmp_path / "hard.json")
    (tmp_path / "sub").mkdir()
    for out, inputs in [(tmp_path / "hard.json", [src]),
                        (tmp_path / "sub" / ".." / "timers.json", [src]),
                        (tmp_path / "missing.json", [tmp_path / "sub" / ".." / "missing.json"]),
                        (tmp_path / "timers.json", [tmp_path / "other.json", src])]:
        with pytest.raises(TraceconvError, match="refusing to overwrite an input"):
            check_output(out, inputs)
    check_output(tmp_path / "new.json", [src, tmp_path / "hard.json"])      # not an input: no error
    check_output(tmp_path / "hard.json", [tmp_path / "missing.json"])
    assert src.read_bytes() == SOCCER.read_bytes()


def test_fifo_is_written_through_to_its_reader(tmp_path):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    r = run("convert", SOCCER, "-o", fifo, "--to", "perfetto", "-q")
    reader.join(timeout=30)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO is still a FIFO"
    (tmp_path / "got.pftrace").write_bytes(got[0])
    assert len(read_perfetto(tmp_path / "got.pftrace").slices) == SLICES
    assert leftovers(tmp_path) == []


def test_dev_null_stays_a_device(tmp_path):
    before = os.stat("/dev/null")
    assert stat.S_ISCHR(before.st_mode)
    r = run("convert", SOCCER, "-o", "/dev/null", "--to", "json", "-q")
    assert r.returncode == 0, r.stderr
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino


def test_symlink_to_a_device_is_written_through(tmp_path):
    link = tmp_path / "sink.json"
    link.symlink_to("/dev/null")
    traceconv.convert(SOCCER, link)
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


# -- the environment refuses ----------------------------------------------------------------------

def test_dev_full_is_one_line_exit_3():
    r = run("convert", SOCCER, "-o", "/dev/full", "--to", "json")
    assert r.returncode == EXIT_ENVIRONMENT
    assert one_line(r.stderr) == "traceconv: error: /dev/full: cannot write: No space left on device"


@pytest.fixture
def tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only); skipped where mounting is not allowed."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_is_one_line_exit_3_and_leaves_nothing(tmpfs):
    out = tmpfs / "big.json"
    r = run("convert", SOCCER, "-o", out)           # ~20 KB: fits; then fill the disk
    assert r.returncode == 0, r.stderr
    (tmpfs / "filler").write_bytes(b"\0" * (64 * 1024 - out.stat().st_size - 4096 * 2))
    before = out.read_bytes()
    r = run("convert", SOCCER, "-o", out)
    assert r.returncode == EXIT_ENVIRONMENT, r.stderr
    assert one_line(r.stderr) == f"traceconv: error: {out}: cannot write: No space left on device"
    assert out.read_bytes() == before, "the old output is untouched, not half-replaced"
    assert leftovers(tmpfs) == []


def test_read_only_file_system_is_one_line_exit_3(tmpfs):
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    r = run("convert", SOCCER, "-o", tmpfs / "x.pftrace")
    assert r.returncode == EXIT_ENVIRONMENT
    assert one_line(r.stderr) == f"traceconv: error: {tmpfs / 'x.pftrace'}: cannot write: Read-only file system"


@pytest.mark.parametrize("name", ["out.pftrace", "out.pftrace.gz", "out.json", "out.json.gz"])
def test_a_write_error_midway_is_a_traceconv_error_and_no_temporary_file(tmp_path, monkeypatch, name):
    """ENOSPC from the file object itself (as a disk filling up mid-write gives it), on the writers'
    writing thread (io.WriteBehind) after two of its writes went through: it reaches the caller
    as the same one line, through gzip too, and that thread writes nothing after it."""
    import io as _io

    class Full(_io.BufferedWriter):
        behind = 0                            # writes that went through on the writing thread
        failed = 0

        def write(self, b):
            if threading.current_thread() is not threading.main_thread():
                if Full.behind == 2:
                    Full.failed += 1
                    raise OSError(28, "No space left on device")
                Full.behind += 1
            return super().write(b)

    monkeypatch.setattr(os, "cpu_count", lambda: 2)                   # (the writing thread: on any machine)
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, mode="r", *a, **k: Full(_io.FileIO(fd, "wb")))
    monkeypatch.setattr("traceconv.writers.perfetto._STEP", 64)       # (many steps, each a write)
    monkeypatch.setattr("traceconv.writers.chrome_json._CHUNK", 16)
    monkeypatch.setattr("traceconv.io.GZIP_LEVEL", 0)                 # (gzip hands each write on)
    src = make_big_input(tmp_path, 2000)
    out = tmp_path / name
    with pytest.raises(TraceconvError) as e:
        traceconv.convert(src, out)
    monkeypatch.setattr(os, "fdopen", real_fdopen)
    assert e.value.exit_code == EXIT_ENVIRONMENT and str(e.value) == f"{out}: cannot write: No space left on device"
    assert (Full.behind, Full.failed) == (2, 1), "nothing written on that thread after the failed write"
    assert list(tmp_path.iterdir()) == [src]


def test_write_behind_writes_in_order_and_raises_a_failed_write_in_the_caller(monkeypatch):
    """Each write begins on the thread as it is handed over, in order; write() returns once the one
    before is done; a failed write is raised by the next call (or where the block ends), nothing
    is written after it, and an error the caller is raising already is not hidden by it."""
    from traceconv.io import WriteBehind
    monkeypatch.setattr(os, "cpu_count", lambda: 2)       # (its thread: on any machine)

    class Sink:
        def __init__(self, fail_at=None):
            self.got, self.fail_at, self.threads = [], fail_at, set()

        def write(self, b):
            self.threads.add(threading.get_ident())
            if len(self.got) == self.fail_at:
                raise OSError(28, "No space left on device")
            time.sleep(0.002)
            self.got.append(bytes(b))

    ok = Sink()
    with WriteBehind(ok) as w:
        for k in range(20):
            w.write(b"%d," % k)
    assert b"".join(ok.got) == b"".join(b"%d," % k for k in range(20))
    assert ok.threads and threading.get_ident() not in ok.threads
    same = Sink()
    with WriteBehind(same, threaded=False) as w:
        w.write(b"a")
        assert same.got == [b"a"] and same.threads == {threading.get_ident()}
    bad = Sink(fail_at=3)
    with pytest.raises(OSError, match="No space"):
        with WriteBehind(bad) as w:
            for k in range(20):
                w.write(b"%d," % k)
    assert bad.got == [b"0,", b"1,", b"2,"] and k <= 5
    hidden = Sink(fail_at=0)
    with pytest.raises(RuntimeError, match="the writer's own"):
        with WriteBehind(hidden) as w:
            w.write(b"x")
            raise RuntimeError("the writer's own error")


def test_permission_denied_is_one_line_exit_3(tmp_path, monkeypatch):
    """(Root ignores file modes, so the refusal is simulated where the temporary file is made.)"""
    import tempfile

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(TraceconvError) as e:
        traceconv.convert(SOCCER, tmp_path / "o.json")
    assert e.value.exit_code == EXIT_ENVIRONMENT
    assert str(e.value) == f"{tmp_path / 'o.json'}: cannot write: Permission denied"


def test_atomic_output_never_leaves_a_half_written_file(tmp_path):
    out = tmp_path / "o.json"
    out.write_bytes(b"previous")
    with pytest.raises(RuntimeError):
        with atomic_output(out) as f:
            f.write(b"half")
            raise RuntimeError("the writer failed")
    assert out.read_bytes() == b"previous" and leftovers(tmp_path) == []


# -- signals ----------------------------------------------------------------------------------------

def make_big_input(folder: Path, n: int) -> Path:
    """A Chrome JSON trace of ``n`` nested slices with args (a few MB)."""
    events = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}]
    for i in range(n):
        events.append({"ph": "X", "pid": 1, "tid": 1 + i % 4, "ts": i * 10, "dur": 8, "name": f"step {i % 97}",
                       "cat": "c", "args": {"i": i, "text": "x" * 40}})
    p = folder / "big.json"
    p.write_text(json.dumps({"traceEvents": events}))
    return p


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    return make_big_input(tmp_path_factory.mktemp("big"), 300_000)


def _freeze(p: subprocess.Popen) -> bool:
    """SIGSTOP ``p`` and wait until the kernel has stopped it (False if it ended first): what the
    test then sees on disk is where the process is, however late the test itself ran."""
    p.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state in ("T", "t"):
            return True
        if state in ("Z", "X"):
            return False
        time.sleep(0.001)
    raise AssertionError("the process did not stop")


def _stop_by_sigterm(p: subprocess.Popen) -> tuple[int, str]:
    p.send_signal(signal.SIGTERM)           # pending until it runs again
    p.send_signal(signal.SIGCONT)
    code = p.wait(timeout=60)
    return code, p.stderr.read().decode()


def test_sigterm_while_writing_cleans_up_and_exits_143(tmp_path, big):
    """Frozen while its temporary output exists (between creating it and renaming it into place),
    then SIGTERM: exit 143, one line, and neither the temporary file nor an output left.  (Sent
    without the freeze, a signal that came late, after the rename, failed the test in loaded CI.)"""
    outdir = tmp_path / "out"
    outdir.mkdir()
    out = outdir / "big.json.gz"                      # gzip makes the writing phase last
    for _ in range(5):
        p = subprocess.Popen([sys.executable, "-m", "traceconv", "convert", str(big), "-o", str(out), "-q"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while not leftovers(outdir) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        if _freeze(p) and leftovers(outdir) and not out.exists():
            break                                     # caught while writing
        p.kill()
        p.wait()
        p.stderr.close()
        for f in outdir.iterdir():
            f.unlink()
    else:
        pytest.fail("never caught the process while it wrote its output")
    code, err = _stop_by_sigterm(p)
    assert code == 143, err
    assert err.strip() == "traceconv: stopped by SIGTERM (nothing half-written left behind)"
    assert list(outdir.iterdir()) == [], "no .tmp file and no output left"


def _fds(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []


def _opened(pid: int) -> list[str]:
    """What the process's descriptors point at (a descriptor closed meanwhile is left out)."""
    out = []
    for fd in _fds(pid):
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return out


def test_sigterm_while_reading_exits_143(tmp_path, big):
    """Frozen while it reads (the input open, no output begun), at three moments, then SIGTERM."""
    caught = 0
    for _ in range(10):         # caught three times: just after the input is opened, and a little later
        if caught == 3:
            break
        k = caught
        p = subprocess.Popen([sys.executable, "-m", "traceconv", "convert", str(big), "-o",
                              str(tmp_path / "o.pftrace"), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60          # until it has the input open: the handlers are installed
        while p.poll() is None and time.monotonic() < deadline and str(big) not in _opened(p.pid):
            time.sleep(0.002)
        time.sleep(0.01 * k)
        if not (_freeze(p) and str(big) in _opened(p.pid) and list(tmp_path.iterdir()) == []):
            p.kill()                              # it ran past reading before the test looked
            p.wait()
            p.stderr.close()
            for f in tmp_path.iterdir():
                f.unlink()
            continue
        caught += 1
        code, err = _stop_by_sigterm(p)
        assert code == 143, err[-2000:]
        assert list(tmp_path.iterdir()) == []
    assert caught >= 1, "never caught the process while it read"


def test_a_stop_signal_as_the_temporary_output_is_created_leaves_nothing(tmp_path, monkeypatch):
    """A signal landing inside ``mkstemp``, after the file exists but before its name is returned
    (what the command line's handler does then: raise unless held), must not leave the file."""
    from traceconv.errors import Stopped, hold_signal
    real = tempfile.mkstemp

    def mkstemp_then_signal(*a, **k):
        made = real(*a, **k)
        if not hold_signal(signal.SIGTERM):
            raise Stopped(signal.SIGTERM)
        return made

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp_then_signal)
    with pytest.raises(Stopped) as e:
        with atomic_output(tmp_path / "o.json") as f:
            f.write(b"never reached")
    assert e.value.exit_code == 143
    assert list(tmp_path.iterdir()) == []


def test_a_stop_signal_waits_for_a_step_that_must_not_be_cut():
    """Loading the compiled core (and NumPy's C API with it) must not be cut by a signal handler:
    rust-numpy turns an exception raised into it into a panic (once: exit 1 instead of 143).  The
    handler keeps the signal for the end of such a step, which then stops."""
    from traceconv.errors import Stopped, hold_signal, signals_held
    assert not hold_signal(signal.SIGTERM)              # outside: the handler raises at once
    done = []
    with pytest.raises(Stopped) as e:
        with signals_held():
            assert hold_signal(signal.SIGTERM)
            done.append("the step ran to its end")
    assert done and e.value.exit_code == 143
    assert not hold_signal(signal.SIGTERM)


def test_another_threads_held_step_does_not_hold_the_main_threads_signals():
    """Python runs signal handlers in the main thread only: a block held in another thread (a
    library caller writing from a thread) must not delay a stop of the main thread."""
    from traceconv.errors import hold_signal, signals_held
    inside, leave = threading.Event(), threading.Event()

    def step() -> None:
        with signals_held():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=step)
    t.start()
    try:
        assert inside.wait(10)
        assert not hold_signal(signal.SIGTERM)          # the main thread's handler raises at once
    finally:
        leave.set()
        t.join()


def test_an_internal_error_is_exit_70_with_its_traceback(tmp_path):
    code = ("import sys, traceconv\n"
            "traceconv.convert = lambda *a, **k: 1 / 0\n"
            "from traceconv_cli.app import main\n"
            f"sys.argv = ['traceconv', 'convert', {str(SOCCER)!r}, '-o', {str(tmp_path / 'o.json')!r}]\n"
            "main()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 70
    assert "ZeroDivisionError" in r.stderr and "internal error (a bug)" in r.stderr


@pytest.mark.parametrize("kernel", [True, False], ids=["copy_file_range", "no kernel copy"])
def test_write_pieces_appends_bytes_and_file_heads_in_order_into_any_output(tmp_path, monkeypatch, kernel):
    from traceconv import io as tio
    a, b = tmp_path / "a", tmp_path / "b"
    da, db = bytes(range(256)) * 4000, b"xyz" * 70_000
    a.write_bytes(da + b"not this")
    b.write_bytes(db)
    pieces = [b"head", (str(a), len(da)), b"mid", (str(b), len(db)), b"", (str(a), 10)]
    want = b"head" + da + b"mid" + db + da[:10]
    if not kernel:                                     # (another file system: copied by hand)
        def refuse(*_a):
            raise OSError(errno.EXDEV, "cross-device")
        monkeypatch.setattr(os, "copy_file_range", refuse)
    monkeypatch.setattr(tio, "COPY_BYTES", 1000)
    with open(tmp_path / "out", "wb") as f:            # a plain file: the kernel copies (or by hand)
        f.write(b"<")
        tio.write_pieces(f, pieces)
        f.write(b">")
    assert (tmp_path / "out").read_bytes() == b"<" + want + b">"
    with atomic_output(tmp_path / "o.gz") as f:       # gzip: read and written, 1000 bytes at a time
        tio.write_pieces(f, pieces)
    assert gzip.decompress((tmp_path / "o.gz").read_bytes()) == want
    for target in (tmp_path / "short", tmp_path / "short.gz"):
        with pytest.raises(TraceconvError, match="cannot write"), atomic_output(target) as f:
            tio.write_pieces(f, [b"head", (str(b), len(db) + 100)])     # the file is shorter than said
        assert not target.exists()
