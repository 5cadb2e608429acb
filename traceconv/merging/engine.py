"""Where the per-rank work runs: this machine's process pool (the default, nothing to install), or
a Dask cluster (``pip install 'traceconv[dask]'``): a :class:`LocalCluster` started here, or the
scheduler of an existing one (``tcp://host:8786``).

Both take the same module-level functions and give results in the inputs' order, and both can
*keep* a result where it was made and run a second function on it there (``keep``, then ``then``),
so that only small results travel: the Dask engine keeps it on the worker that made it (a trace
stays where it was read); the local engine keeps it on this machine's disk, pickled in a temporary
folder, until the second function reads it back (a merge with a window: the ranks' offsets are
known only once every rank is read, and memory need not hold every rank until then).
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterator, Sequence

from .. import memory
from ..errors import TraceconvError

ENGINES = ("local", "dask")
Progress = Callable[[int, int, Any], None]


def _taken(get: Callable[[], Any], i: int, n: int, labels: Sequence[Any], progress: Progress | None) -> Any:
    """Item ``i``'s result, ``get()`` (of ``n``; both engines and both of the local engine's
    paths): a user error names the item's label, and the item is reported done."""
    try:
        res = get()
    except TraceconvError as e:
        raise e.with_path(labels[i]) from None
    if progress:
        progress(i + 1, n, labels[i])
    return res


def _keep_one(fn: Callable[..., Any], small: Callable[[Any], Any], file: str, *item: Any) -> Any:
    """``fn(*item)`` pickled to ``file``; returns ``small`` of it (:meth:`LocalEngine.keep`)."""
    res = fn(*item)
    with open(file, "wb") as f:
        pickle.dump(res, f, protocol=pickle.HIGHEST_PROTOCOL)
    return small(res)


def _then_one(fn: Callable[..., Any], file: str, *args: Any) -> Any:
    """``fn`` on what ``file`` kept, the file removed once read (:meth:`LocalEngine.then`)."""
    with open(file, "rb") as f:
        kept = pickle.load(f)
    os.unlink(file)
    return fn(kept, *args)


class LocalEngine:
    """A process pool of ``workers`` processes (default: one per core); in this process when
    there is one worker or one item."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers
        self._kept: list[str] = []          # the folders of kept results (removed on leaving)
        self._runs: list[Iterator[Any]] = []  # the pools that write there or read from there

    def __enter__(self) -> "LocalEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        # the pools first (what runs finished, what waits cancelled: also when the caller stopped
        # midway, a rank refused), then the folders their workers write into
        for run in self._runs:
            run.close()                                 # type: ignore[attr-defined]
        for d in self._kept:
            shutil.rmtree(d, ignore_errors=True)
        self._runs, self._kept = [], []

    def keep(self, fn: Callable[..., Any], small: Callable[[Any], Any], items: Sequence[tuple],
             labels: Sequence[Any] | None = None, progress: Progress | None = None) -> Iterator[tuple[Any, Any]]:
        """``fn(*item)`` in the pool, each result pickled to a file of a temporary folder (removed
        when the engine is left); yields ``(small(result), handle)`` in order, the handle for
        :meth:`then`."""
        d = tempfile.mkdtemp(prefix="traceconv-kept-")
        self._kept.append(d)
        files = [os.path.join(d, f"{i}.pickle") for i in range(len(items))]
        got = self.map(_keep_one, [(fn, small, f, *it) for f, it in zip(files, items)], labels, progress)
        self._runs.append(got)
        return zip(got, files)

    def then(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, tuple]], labels: Sequence[Any] | None = None,
             progress: Progress | None = None) -> Iterator[Any]:
        """``fn(kept, *args)`` for each ``(handle, args)`` in the pool, on the result :meth:`keep`
        kept (its file removed once read); yielded in order."""
        got = self.map(_then_one, [(fn, h, *args) for h, args in jobs], labels, progress)
        self._runs.append(got)
        return got

    def map(self, fn: Callable[..., Any], items: Sequence[tuple], labels: Sequence[Any] | None = None,
            progress: Progress | None = None) -> Iterator[Any]:
        """``fn(*item)`` for each item, yielded in order, with at most workers + 1 results waiting."""
        n = len(items)
        labels = labels if labels is not None else [None] * n
        workers = self.workers or min(os.cpu_count() or 1, n)
        if workers <= 1 or n <= 1:
            for i, it in enumerate(items):
                yield _taken(lambda: fn(*it), i, n, labels, progress)
            return
        with ProcessPoolExecutor(max_workers=workers, initializer=memory.keep_freed) as pool:
            pending: list = []
            nxt = 0
            try:
                for _ in range(n):
                    while nxt < n and len(pending) < workers + 1:
                        pending.append((nxt, pool.submit(fn, *items[nxt])))
                        nxt += 1
                    j, fut = pending.pop(0)
                    yield _taken(fut.result, j, n, labels, progress)
            finally:
                # an error, or the caller closing the generator early: what has not started is
                # cancelled, and leaving the pool waits for what runs
                for _, f2 in pending:
                    f2.cancel()

    def reduce(self, fn: Callable[[Any, Any], Any], values: list[Any]) -> Any:
        """Combine values pairwise, as a tree: ((v0·v1)·(v2·v3))... -- the same tree as Dask's."""
        while len(values) > 1:
            values = [fn(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                      for i in range(0, len(values), 2)]
        return values[0]


class DaskEngine:
    """A Dask cluster: ``scheduler`` (``tcp://host:8786``) or a :class:`LocalCluster` of ``workers``
    single-threaded worker processes (default: one per core) started for this run."""

    name = "dask"

    def __init__(self, scheduler: str | None = None, workers: int | None = None, *,
                 processes: bool = True, client: Any = None) -> None:
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise TraceconvError("the Dask engine needs dask.distributed: pip install 'traceconv[dask]'") from None
        self._own: list[Any] = []
        if client is not None:
            self.client = client
        elif scheduler:
            try:
                self.client = Client(scheduler, timeout="10s")
            except (OSError, TimeoutError) as e:
                raise TraceconvError(f"cannot reach the Dask scheduler {scheduler}: {e}") from None
            self._own.append(self.client)
        else:
            cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                                   processes=processes, dashboard_address=":0", silence_logs=logging.ERROR)
            self.client = Client(cluster)
            self._own += [self.client, cluster]

    def __enter__(self) -> "DaskEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def workers(self) -> int:
        """How many workers the cluster has now (at least 1)."""
        try:
            return max(1, len(self.client.scheduler_info()["workers"]))
        except Exception:  # noqa: BLE001 - a scheduler that does not say
            return 1

    def close(self) -> None:
        for x in self._own:
            try:
                x.close()
            except Exception:  # noqa: BLE001 - closing a cluster that is going away anyway
                pass
        self._own = []

    def _ordered(self, futures: list, labels: Sequence[Any], progress: Progress | None) -> Iterator[Any]:
        n = len(futures)
        try:
            for i, fut in enumerate(futures):
                res = _taken(fut.result, i, n, labels, progress)
                futures[i] = None           # let the cluster forget it
                fut.release()
                yield res
        finally:
            for f in futures:
                if f is not None:
                    f.cancel()

    def map(self, fn: Callable[..., Any], items: Sequence[tuple], labels: Sequence[Any] | None = None,
            progress: Progress | None = None) -> Iterator[Any]:
        labels = labels if labels is not None else [None] * len(items)
        futures = [self.client.submit(fn, *it, pure=False) for it in items]
        return self._ordered(futures, labels, progress)

    def keep(self, fn: Callable[..., Any], small: Callable[[Any], Any], items: Sequence[tuple],
             labels: Sequence[Any] | None = None, progress: Progress | None = None) -> Iterator[tuple[Any, Any]]:
        """``fn(*item)`` on the workers, kept there; yields ``(small(result), handle)`` in order."""
        labels = labels if labels is not None else [None] * len(items)
        held = [self.client.submit(fn, *it, pure=False) for it in items]
        smalls = [self.client.submit(small, h, pure=False) for h in held]
        for i, s in enumerate(self._ordered(smalls, labels, progress)):
            yield s, held[i]

    def then(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, tuple]], labels: Sequence[Any] | None = None,
             progress: Progress | None = None) -> Iterator[Any]:
        """``fn(kept, *args)`` for each ``(handle, args)``, run where the kept result is; yielded in order,
        each handle released once its result is in."""
        labels = labels if labels is not None else [None] * len(jobs)
        futures = [self.client.submit(fn, h, *args, pure=False) for h, args in jobs]
        for h, _ in jobs:
            h.release()
        return self._ordered(futures, labels, progress)

    def reduce(self, fn: Callable[[Any, Any], Any], values: list[Any]) -> Any:
        """Combine futures or values pairwise on the cluster (the same tree as the local engine's)."""
        while len(values) > 1:
            values = [self.client.submit(fn, values[i], values[i + 1], pure=False) if i + 1 < len(values)
                      else values[i] for i in range(0, len(values), 2)]
        v = values[0]
        return v.result() if hasattr(v, "result") else v

    def map_keep(self, fn: Callable[..., Any], items: Sequence[tuple]) -> list[Any]:
        """``fn(*item)`` on the workers, as futures left on the cluster (for :meth:`reduce`)."""
        return [self.client.submit(fn, *it, pure=False) for it in items]


def make_engine(engine: Any = "local", *, scheduler: str | None = None, workers: int | None = None
                ) -> LocalEngine | DaskEngine:
    """``"local"`` (the default), ``"dask"`` (a LocalCluster, or ``scheduler``'s cluster), an engine
    already made, or a ``dask.distributed.Client``."""
    if isinstance(engine, (LocalEngine, DaskEngine)):
        return engine
    if engine is None:
        engine = "dask" if scheduler else "local"
    if isinstance(engine, str):
        if engine == "local":
            if scheduler:
                raise TraceconvError("a Dask {opt:scheduler} needs {opt:engine} dask")
            return LocalEngine(workers)
        if engine == "dask":
            return DaskEngine(scheduler, workers)
        raise TraceconvError(f"unknown {{opt:engine}} '{engine}'; choose one of: {', '.join(ENGINES)}")
    if type(engine).__name__ == "Client":
        return DaskEngine(client=engine)
    raise TraceconvError(f"unknown engine {engine!r}; choose one of: {', '.join(ENGINES)}")
