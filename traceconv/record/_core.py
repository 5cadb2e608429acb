"""The recorder: the hot path (spans, instants, counters) and its per-thread buffers.

Everything here is written for the cost of one span: ``span()`` checks one global, makes one small
object, reads the monotonic clock twice and appends one tuple to the calling thread's own list.
No model object, no lock, no string work happens per event: the tuples are turned into model
columns and written by :mod:`traceconv.record._sink` when a buffer fills, on :func:`flush`, or at
:func:`stop` (and at interpreter exit).

Times are ``time.perf_counter_ns()`` (on Linux ``CLOCK_MONOTONIC``, shared by every process of the
machine); at :func:`start` the recorder reads the wall clock between two reads of it and keeps the
pair (the *anchor*), which turns every monotonic time into Unix ns.  Child processes inherit the
anchor (through the fork, or the environment), so every shard of a run uses the same offset and
their timelines line up to the nanosecond on one machine.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import secrets
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

_clock = time.perf_counter_ns

SPAN, FSPAN, INSTANT, COUNTER = 0, 1, 2, 3
ENV = "TRACECONV_RECORD"
ENV_PARENT = "TRACECONV_RECORD_PARENT"      # "pid;shard dir;format extension;buffer" for child processes
ENV_ANCHOR = "TRACECONV_RECORD_ANCHOR"      # "unix_ns;monotonic_ns;boot id"
OFF_VALUES = ("", "0", "off", "false", "no", "none")

# ---- module state read by the hot path (rebound, never mutated, so a stale reference is harmless)
_rec: "Recorder | None" = None
_tls = threading.local()
_cap = 1 << 16
_disabled = False
_thread_lock = threading.Lock()
_off_for_good = os.environ.get("TRACECONV_RECORD", "x").strip().lower() in ("0", "off", "false", "no", "none")

F = TypeVar("F", bound=Callable[..., Any])


# ---------------------------------------------------------------- clock anchor

def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def measure_anchor() -> tuple[int, int]:
    """(unix ns, monotonic ns) read as close together as this machine allows: the tightest of a
    few wall-clock reads between two monotonic reads."""
    best = None
    for _ in range(8):
        a = _clock()
        w = time.time_ns()
        b = _clock()
        if best is None or b - a < best[0]:
            best = (b - a, w, (a + b) // 2)
    return best[1], best[2]


def _inherited_anchor() -> tuple[int, int] | None:
    text = os.environ.get(ENV_ANCHOR)
    if not text:
        return None
    try:
        w, m, boot = text.split(";", 2)
        if boot and boot != _boot_id():
            return None              # another machine (or a reboot): its monotonic clock is not ours
        return int(w), int(m)
    except ValueError:
        return None


# ---------------------------------------------------------------- per-thread buffers

class ThreadInfo:
    __slots__ = ("tid", "name", "events", "ident")

    def __init__(self, tid: int, name: str, ident: int) -> None:
        self.tid, self.name, self.ident = tid, name, ident
        self.events: list[tuple] = []


def _register_thread() -> list:
    """The calling thread's event list, made on its first event."""
    rec = _rec
    th = threading.current_thread()
    info = ThreadInfo(threading.get_native_id(), th.name, threading.get_ident())
    if rec is not None:
        with _thread_lock:
            rec.threads.append(info)
    _tls.ev = info.events
    _tls.info = info
    return info.events


def _full(buf: list) -> None:
    rec = _rec
    if rec is not None:
        rec.buffer_full(buf)


# ---------------------------------------------------------------- spans

class _Null:
    """What ``span()`` returns when nothing records: one shared object whose ``__enter__`` and
    ``__exit__`` are C functions, so that ``with span(...)`` costs less than an empty Python
    context manager (two Python calls): ``__enter__`` is ``itertools.repeat(NULL_SPAN).__next__``
    (called with no argument -- a builtin method is not a descriptor, so ``with`` does not pass
    the object -- it returns NULL_SPAN), ``__exit__`` is ``"".format``, which takes the three
    exception arguments and returns ``""``: false, so an exception goes on as it would."""
    __slots__ = ()

    def set(self, **args: Any) -> None:
        pass

    def flow(self) -> int:
        return new_flow()


NULL_SPAN = _Null()
_Null.__enter__ = itertools.repeat(NULL_SPAN).__next__  # type: ignore[attr-defined]
_Null.__exit__ = "".format  # type: ignore[attr-defined]


class Span:
    """A timed region; made by :func:`span`.  Records one slice on the calling thread when it exits."""
    __slots__ = ("name", "cat", "args", "t0")

    def __init__(self, name: str, cat: str | None, args: dict | None) -> None:
        self.name, self.cat, self.args = name, cat, args

    def __enter__(self) -> "Span":
        self.t0 = _clock()
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> bool:
        t1 = _clock()
        try:
            buf = _tls.ev
        except AttributeError:
            buf = _register_thread()
        buf.append((SPAN, self.t0, t1, self.name, self.cat, self.args))
        if len(buf) >= _cap:
            _full(buf)
        return False

    def set(self, **args: Any) -> None:
        """Add args to the span (while it is open)."""
        if self.args is None:
            self.args = args
        else:
            self.args.update(args)


class FlowSpan(Span):
    """A span that starts and/or ends flows (arrows to/from spans elsewhere, by flow id)."""
    __slots__ = ("fout", "fin")

    def __init__(self, name: str, cat: str | None, args: dict | None, fout: Any, fin: Any) -> None:
        self.name, self.cat, self.args = name, cat, args
        self.fout, self.fin = _ids(fout), _ids(fin)

    def __exit__(self, et: Any, ev: Any, tb: Any) -> bool:
        t1 = _clock()
        try:
            buf = _tls.ev
        except AttributeError:
            buf = _register_thread()
        buf.append((FSPAN, self.t0, t1, self.name, self.cat, self.args, self.fout, self.fin))
        if len(buf) >= _cap:
            _full(buf)
        return False

    def flow(self) -> int:
        """A new flow id starting at this span: pass it to the span that consumes the work."""
        fid = new_flow()
        self.fout = self.fout + (fid,)
        return fid


def _ids(v: Any) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, int):
        return (v,)
    return tuple(int(x) for x in v)


def span(name: str, cat: str | None = None, flow_out: Any = None, flow_in: Any = None, **args: Any) -> Any:
    """``with span("env_step", cat="rollout", frames=4): ...`` -- one slice on this thread.

    ``flow_out`` / ``flow_in``: a flow id (or ids) from :func:`new_flow` that this span starts /
    ends, to draw an arrow from a producer span to its consumer in another thread or process.
    (To time every call of a function, decorate it with :func:`traced`.)  When nothing records it
    returns a shared no-op object.
    """
    if _rec is None:
        return NULL_SPAN
    if flow_out is None and flow_in is None:
        return Span(name, cat, args or None)
    return FlowSpan(name, cat, args or None, flow_out, flow_in)


def traced(fn: Any = None, *, name: str | None = None, cat: str | None = None) -> Any:
    """Decorator: every call of the function is a span named after its ``__qualname__``
    (``@traced``, ``@traced(name="forward", cat="model")``)."""
    if fn is None:
        return lambda f: traced(f, name=name, cat=cat)
    if _off_for_good:
        return fn                    # TRACECONV_RECORD=0: recording can never start, no wrapper
    label = name or getattr(fn, "__qualname__", None) or repr(fn)
    import functools

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        if _rec is None:
            return fn(*a, **kw)
        t0 = _clock()
        try:
            return fn(*a, **kw)
        finally:
            t1 = _clock()
            try:
                buf = _tls.ev
            except AttributeError:
                buf = _register_thread()
            buf.append((SPAN, t0, t1, label, cat, None))
            if len(buf) >= _cap:
                _full(buf)
    return wrapper


def instant(name: str, cat: str | None = None, **args: Any) -> None:
    """A point in time on this thread (``instant("checkpoint", step=1200)``)."""
    if _rec is None:
        return
    t = _clock()
    try:
        buf = _tls.ev
    except AttributeError:
        buf = _register_thread()
    buf.append((INSTANT, t, name, cat, args or None))
    if len(buf) >= _cap:
        _full(buf)


def counter(name: str, value: float, unit: str | None = None) -> None:
    """A sample of the process-wide counter ``name`` (``counter("fps", 18463.7)``)."""
    if _rec is None:
        return
    t = _clock()
    try:
        buf = _tls.ev
    except AttributeError:
        buf = _register_thread()
    buf.append((COUNTER, t, name, value, unit))
    if len(buf) >= _cap:
        _full(buf)


_flow_prefix = secrets.randbits(30) << 32
_flow_count = itertools.count(1)


def new_flow() -> int:
    """A flow id unique across threads and processes (a random per-process prefix and a count)."""
    return _flow_prefix | next(_flow_count)


def name_process(name: str) -> None:
    """The name this process shows under (default: the multiprocessing name or the script's)."""
    rec = _state["rec"]
    if rec is not None:
        rec.process_name = name
        rec.named = True


def name_thread(name: str, thread: threading.Thread | None = None) -> None:
    """The name the calling thread (or ``thread``) shows under (default: its ``threading`` name)."""
    rec = _rec
    if rec is None:
        return
    ident = thread.ident if thread is not None else threading.get_ident()
    if thread is None:
        try:
            _tls.info.name = name
            return
        except AttributeError:
            _register_thread()
            _tls.info.name = name
            return
    with _thread_lock:
        for info in rec.threads:
            if info.ident == ident:
                info.name = name
                return
    rec.pending_thread_names[ident] = name


# ---------------------------------------------------------------- the recorder

class Recorder:
    """One recording: its output, its threads' buffers, its clock anchor."""

    def __init__(self, path: str | os.PathLike[str], *, buffer: int, ring_seconds: float | None,
                 flush_every: float | None, anchor: tuple[int, int], shard: int = 0,
                 shard_dir: Path | None = None, parent: bool = True,
                 process_name: str | None = None) -> None:
        from ._sink import make_sink
        self.path = Path(path)
        self.buffer = buffer
        self.ring_ns = int(ring_seconds * 1e9) if ring_seconds else 0
        self.anchor = anchor
        self.offset = anchor[0] - anchor[1]          # monotonic ns -> Unix ns
        self.pid = os.getpid()
        self.shard = shard
        self.shard_dir = shard_dir
        self.is_parent = parent
        self.named = process_name is not None          # else the default, looked up at each flush
        self.process_name = process_name or _default_process_name()
        self.threads: list[ThreadInfo] = []
        self.pending_thread_names: dict[int, str] = {}
        self.lock = threading.RLock()
        self.dropped = 0               # events dropped by the ring buffer's hard limit
        self.flushes = 0
        self.closed = self.closing = False
        self.sink = make_sink(self)
        self._stop_timer = threading.Event()
        self._timer: threading.Thread | None = None
        if flush_every:
            self._timer = threading.Thread(target=self._every, args=(flush_every,), daemon=True,
                                           name="traceconv-record-flush")
            self._timer.start()

    def _every(self, seconds: float) -> None:
        while not self._stop_timer.wait(seconds):
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - a failing background flush must not kill the program
                pass

    # -- taking the events out of the buffers

    def take(self) -> list[tuple[ThreadInfo, list]]:
        """Every thread's events so far, removed from its buffer (appends that race with this stay)."""
        with _thread_lock:
            threads = list(self.threads)
        out = []
        for info in threads:
            ev = info.events
            chunk = ev[:]                 # both are single operations under the GIL: an append
            del ev[:len(chunk)]           # between them stays in the list for the next flush
            if info.ident in self.pending_thread_names:
                info.name = self.pending_thread_names.pop(info.ident)
            out.append((info, chunk))
        return out

    def buffer_full(self, buf: list) -> None:
        if self.ring_ns:
            self._trim(buf)
        else:
            self.flush()

    def _trim(self, buf: list) -> None:
        """Ring mode, a thread's buffer full: drop its events that ended before the window; if more
        than half the buffer is still left, the oldest of them too (counted in ``dropped``), so
        that the buffer bounds memory and the next trim is ``buffer / 2`` events away."""
        horizon = _clock() - self.ring_ns
        with self.lock:
            n = 0
            for e in buf:
                end = e[2] if e[0] <= FSPAN else e[1]
                if end >= horizon:
                    break
                n += 1
            keep = self.buffer // 2
            if len(buf) - n > keep:
                extra = len(buf) - n - keep
                n += extra
                self.dropped += extra
            del buf[:n]

    def flush(self) -> None:
        """Write what the buffers hold (ring mode: the last window, whole)."""
        with _Busy(), self.lock:
            if self.closed:
                return
            if self.ring_ns:
                horizon = _clock() - self.ring_ns
                for info in list(self.threads):
                    self._trim_to(info.events, horizon)
                with _thread_lock:
                    threads = [(info, info.events[:]) for info in self.threads]
                self.sink.write_window(threads)
            else:
                t0 = _clock()
                if not self.named:            # multiprocessing names its children after the fork
                    self.process_name = _default_process_name()
                self.sink.append(self.take())
                if not self.closing:          # the flush's own cost, on the thread that paid it
                    try:
                        buf = _tls.ev
                    except AttributeError:
                        buf = _register_thread()
                    buf.append((SPAN, t0, _clock(), "traceconv.record flush", "traceconv", None))
            self.flushes += 1

    def _trim_to(self, buf: list, horizon: int) -> None:
        n = 0
        for e in buf:
            end = e[2] if e[0] <= FSPAN else e[1]
            if end >= horizon:
                break
            n += 1
        del buf[:n]

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self._stop_timer.set()
            self.closing = True
            self.flush()
            self.closed = True
            self.sink.close()


def _default_process_name() -> str:
    try:
        import multiprocessing
        name = multiprocessing.current_process().name
        if name != "MainProcess":
            return name
    except Exception:  # noqa: BLE001
        pass
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    return Path(argv0).name if argv0 and argv0 != "-c" else "python"


# ---------------------------------------------------------------- start / stop

# the outputs a recording writes (a longer name before its prefix: .pftrace.gz before .pftrace)
OUTPUT_EXTS = (".pftrace.gz", ".perfetto-trace", ".pftrace", ".json.gz", ".json", ".pb")


def shard_dir_for(path: Path) -> Path:
    name = path.name
    ext = _ext(path)
    if name.endswith(ext):
        name = name[: -len(ext)]
    return path.with_name(name + ".shards")


_SHARD_NAME = re.compile(rf"rank\d+-pid\d+({'|'.join(map(re.escape, OUTPUT_EXTS))})|\.rank\d+")


def clear_shards(shard_dir: Path) -> int:
    """Remove the shards (and rank markers) an earlier recording to the same output left: a new
    recording replaces them as it replaces the output, or its stop would merge the earlier run's
    workers into this run's timeline.  Other files in the folder stay.  Returns how many went."""
    try:
        names = os.listdir(shard_dir)
    except OSError:                     # no folder yet (or not one)
        return 0
    gone = 0
    for n in names:
        if _SHARD_NAME.fullmatch(n):
            try:
                os.unlink(shard_dir / n)
                gone += 1
            except OSError:
                pass
    return gone


def _ext(path: Path) -> str:
    return next((ext for ext in OUTPUT_EXTS if path.name.endswith(ext)), ".pftrace")


def start(path: str | os.PathLike[str] | None = None, *, buffer: int = 1 << 16,
          ring_seconds: float | None = None, flush_every: float | None = None,
          process_name: str | None = None, workers: bool = True) -> "Recorder | None":
    """Start recording into ``path`` (``.pftrace``; ``.json`` / ``.json.gz`` for Chrome JSON).

    * ``buffer``: events per thread held before they are written (the .pftrace grows by one
      self-contained chunk per flush, so memory stays bounded and a crash loses at most this,
      and the spans that wait for the end of a flow they start: see ``_sink.PftraceSink._hold``).
    * ``ring_seconds``: keep only the last N seconds in memory and write them (the whole file,
      replaced) on :func:`flush` and at :func:`stop` -- for always-on recording; ``buffer`` then
      caps the events kept per thread (past it the oldest go, counted in the trace's warnings).
    * ``flush_every``: also flush every N seconds from a background thread.
    * ``workers``: child processes (multiprocessing, subprocesses that import traceconv.record)
      record into ``<name>.shards/`` and :func:`stop` merges them into ``path``.

    Without ``path``, ``$TRACECONV_RECORD`` names it.  ``TRACECONV_RECORD=0`` turns recording
    off: ``start`` then records nothing.  Returns the recorder (None when off).
    """
    env = os.environ.get(ENV)
    if env is not None and env.strip().lower() in OFF_VALUES and env.strip() != "":
        return None
    if path is None:
        if not env or env.strip().lower() in OFF_VALUES:
            raise ValueError(f"traceconv.record.start: give a path or set ${ENV}")
        path = env
    if _rec is not None:
        stop()
    path = Path(path)
    anchor = measure_anchor()
    shard_dir = shard_dir_for(path) if workers else None
    if shard_dir is not None:
        clear_shards(shard_dir)
    rec = Recorder(path, buffer=buffer, ring_seconds=ring_seconds, flush_every=flush_every,
                   anchor=anchor, shard=0, shard_dir=shard_dir, parent=True, process_name=process_name)
    if workers:
        os.environ[ENV_ANCHOR] = f"{anchor[0]};{anchor[1]};{_boot_id()}"
        os.environ[ENV_PARENT] = f"{os.getpid()};{shard_dir};{_ext(path)};{buffer}"
    _install(rec)
    return rec


def _install(rec: Recorder) -> None:
    global _rec, _tls, _cap
    _tls = threading.local()
    _cap = rec.buffer
    _rec = None if _disabled else rec
    _state["rec"] = rec


_state: dict[str, Any] = {"rec": None}


def stop() -> None:
    """Flush and close the recording (also done at interpreter exit); the parent merges the
    shards its workers wrote into its own output."""
    with _Busy():
        _stop()


def _stop_at_exit() -> None:
    """:func:`stop` at interpreter exit, where no thread can start: the recording's last save runs
    on this thread alone, and the shards are merged by a child interpreter (``_sink._merge``)."""
    with _Busy():
        _stop(at_exit=True)


def _stop(at_exit: bool = False) -> None:
    global _rec, _tls
    rec = _state["rec"]
    if rec is None:
        return
    _rec = None
    _state["rec"] = None
    rec.close()
    _tls = threading.local()
    if rec.is_parent:
        # the workers' shards merged in (and the flows that crossed chunks linked, with or without
        # workers).  $TRACECONV_RECORD_PARENT stays: a child started after this still records a
        # shard (merge it with python -m traceconv.record merge) instead of overwriting our output
        from ._sink import merge_shards_into
        merge_shards_into(rec, elsewhere=at_exit)


def flush() -> None:
    """Write what is buffered now."""
    rec = _state["rec"]
    if rec is not None:
        rec.flush()


def recorder() -> "Recorder | None":
    """The active recorder, or None."""
    return _state["rec"]


def recording() -> bool:
    """Whether spans are being recorded now."""
    return _rec is not None


def disable() -> None:
    """Stop recording events (spans become no-ops) without closing the output."""
    global _rec, _disabled
    _disabled = True
    _rec = None


def enable() -> None:
    """Undo :func:`disable`."""
    global _rec, _disabled
    _disabled = False
    _rec = _state["rec"]


# ---------------------------------------------------------------- child processes

def _claim_shard(shard_dir: Path, ext: str) -> tuple[int, Path]:
    shard_dir.mkdir(parents=True, exist_ok=True)
    for k in itertools.count(1):
        p = shard_dir / f"rank{k}-pid{os.getpid()}{ext}"
        try:
            fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            continue
        # the rank is the number of the first free slot: claim it for every pid
        marker = shard_dir / f".rank{k}"
        try:
            mfd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            os.close(fd)
            os.unlink(p)
            continue
        os.close(mfd)
        os.close(fd)
        return k, p
    raise AssertionError("unreachable")


def _start_child(shard_dir: Path, ext: str, buffer: int, anchor: tuple[int, int]) -> None:
    k, p = _claim_shard(shard_dir, ext)
    rec = Recorder(p, buffer=buffer, ring_seconds=None, flush_every=None, anchor=anchor, shard=k,
                   shard_dir=None, parent=False)
    _install(rec)
    _on_exit_in_child()


def _on_exit_in_child() -> None:
    # multiprocessing children leave through os._exit (no atexit): its finalizers run instead;
    # a pool's terminate() sends SIGTERM: flush, then die as the signal would have made us
    try:
        from multiprocessing import util
        util.Finalize(None, stop, exitpriority=100)
        # a multiprocessing child clears the finalizers when it starts running (after this fork
        # hook, or after unpickling its target under spawn); its after-fork hooks run after that
        util.register_after_fork(_state["rec"], _finalize_at_exit)
    except Exception:  # noqa: BLE001
        pass
    try:
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
            _watch_sigterm()
    except (ValueError, OSError):
        pass


def _watch_sigterm() -> None:
    """CPython runs a signal's Python handler on the main thread, between bytecodes.  A SIGTERM that
    lands just before the main thread blocks in a call no signal restarts -- a pool worker waiting
    for its next task, in ``sem_wait`` -- is handled only when that call returns, which may be never,
    and the parent's ``terminate()`` then waits for the worker forever (a CI run hung so, and 2 runs
    in about 50 of the record tests).  The signal also writes its number to the wakeup fd: a thread
    reads it, and when the process is still there a moment later, signals the main thread again,
    which interrupts the call so that the handler runs (another program's wakeup fd is left as it is)."""
    import socket

    r, w = socket.socketpair()
    w.setblocking(False)
    old = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
    if old != -1:
        signal.set_wakeup_fd(old)      # (one was set, by asyncio say: not ours to take)
        r.close()
        w.close()
        return
    main = threading.main_thread().ident

    def watch() -> None:
        while True:
            got = r.recv(64)
            if not got:
                return
            if signal.SIGTERM in got:
                time.sleep(0.1)                            # the handler's moment to run
                signal.pthread_kill(main, signal.SIGTERM)  # wake a blocked call: now it runs

    _watching.append((r, w))           # (kept open for the life of the process)
    threading.Thread(target=watch, name="traceconv-record-sigterm", daemon=True).start()


_watching: list = []


def _finalize_at_exit(_rec_obj: Any) -> None:
    from multiprocessing import util
    util.Finalize(None, stop, exitpriority=100)


_busy = 0                  # flushes / stops under way on the main thread (where handlers run)
_pending_term = False


def _on_sigterm(signum: int, frame: Any) -> None:
    global _pending_term
    if _busy:                 # interrupted a flush or a stop: let it finish, then terminate
        _pending_term = True
        return
    _terminate_now()


def _terminate_now() -> None:
    try:
        stop()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


class _Busy:
    """Marks a flush or stop on the main thread, so that SIGTERM waits for its end."""
    __slots__ = ("main",)

    def __enter__(self) -> None:
        global _busy
        self.main = threading.current_thread() is threading.main_thread()
        if self.main:
            _busy += 1

    def __exit__(self, *exc: Any) -> None:
        global _busy, _pending_term
        if self.main:
            _busy -= 1
            if not _busy and _pending_term:
                _pending_term = False
                _terminate_now()


def _after_fork_in_child() -> None:
    global _rec, _tls, _thread_lock
    parent = _state["rec"]
    _thread_lock = threading.Lock()           # another thread may have held it at the fork
    _tls = threading.local()
    _rec = None
    _state["rec"] = None
    if parent is None:
        return
    # the parent's buffers and lock were copied: forget them, record a shard of our own
    parent._stop_timer.set()
    if parent.is_parent and parent.shard_dir is not None:
        _start_child(parent.shard_dir, _ext(parent.path), parent.buffer, parent.anchor)
    elif not parent.is_parent:
        # a worker's worker: a shard beside its parent's
        _start_child(parent.path.parent, _ext(parent.path), parent.buffer, parent.anchor)


def _from_environment() -> None:
    """At import: a child of a recording process records a shard; else $TRACECONV_RECORD starts."""
    if _state["rec"] is not None:
        return
    env = os.environ.get(ENV)
    if env is not None and env.strip().lower() in OFF_VALUES:
        return
    parent = os.environ.get(ENV_PARENT)
    if parent:
        try:
            ppid, d, ext, buf = parent.split(";")
            if int(ppid) != os.getpid():
                anchor = _inherited_anchor() or measure_anchor()
                _start_child(Path(d), ext, int(buf), anchor)
                return
        except ValueError:
            pass
    if env:
        start(env)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_stop_at_exit)


def iter_threads(rec: Recorder) -> Iterable[ThreadInfo]:
    with _thread_lock:
        return list(rec.threads)
