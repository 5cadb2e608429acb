"""What metadata events (``ph: "M"``) say of processes and threads: their names, sort indexes and
labels, kept as they come and given to the trace once every thread is known (a name may come
before its thread's first event, or after it, or for a thread that has no event at all)."""

from __future__ import annotations

from typing import Any, Callable

from ...errors import WarningCode
from ...model import Thread, Trace


class Names:
    """The names, sort indexes and labels of a Chrome JSON document's processes and threads, by
    the raw pid or (pid, tid) the events use."""

    def __init__(self) -> None:
        self.procs: dict[Any, str] = {}
        self.proc_sort: dict[Any, int] = {}
        self.labels: dict[Any, list[str]] = {}       # (a dialect may add to them: Composer's ranks)
        self.threads: dict[tuple[Any, Any], str] = {}
        self.thread_sort: dict[tuple[Any, Any], int] = {}

    def take(self, name: str | None, args: dict[str, Any], pid: Any, tid: Any) -> bool:
        """Keep what the metadata event ``name`` with ``args`` says; False if it is none of these."""
        if name == "process_name" and isinstance(args.get("name"), str):
            self.procs[pid] = args["name"]
        elif name == "thread_name" and isinstance(args.get("name"), str):
            self.threads[(pid, tid)] = args["name"]
        elif name == "process_sort_index" and isinstance(args.get("sort_index"), int):
            self.proc_sort[pid] = args["sort_index"]
        elif name == "thread_sort_index" and isinstance(args.get("sort_index"), int):
            self.thread_sort[(pid, tid)] = args["sort_index"]
        elif name == "process_labels" and isinstance(args.get("labels"), str):
            labels = self.labels.setdefault(pid, [])
            for lab in args["labels"].split(","):
                if lab and lab not in labels:
                    labels.append(lab)
        else:
            return False
        return True

    def apply(self, trace: Trace, threads: dict[tuple[Any, Any], Any],
              warn: Callable[[WarningCode, str, int], None]) -> None:
        """Name and order the trace's processes, and the threads the reader made (``threads``: by
        (pid, tid), a :class:`Thread` or what stands for another track: anything with ``track``);
        what names a process or thread that has no events is counted in a note."""
        procs = {p.raw_pid: p for p in trace.processes if p.raw_pid is not None}
        unused = 0
        for pid, name in self.procs.items():
            p = procs.get(pid)
            if p is None:
                unused += 1
                continue
            p.name = name
            trace.process_track(p).name = name
        for pid, idx in self.proc_sort.items():
            p = procs.get(pid)
            if p is not None:
                p.sort_index = idx
            else:
                unused += 1
        for pid, labels in self.labels.items():
            p = procs.get(pid)
            if p is not None:
                for lab in labels:
                    if lab not in p.labels:
                        p.labels.append(lab)
            else:
                unused += 1
        for key, name in self.threads.items():
            th = threads.get(key)
            if th is None:
                unused += 1
            elif isinstance(th, Thread):
                trace.set_thread_name(th, name)
            else:
                trace.tracks[th.track].name = name
        for key, idx in self.thread_sort.items():
            th = threads.get(key)
            if th is None:
                unused += 1
            elif isinstance(th, Thread):
                th.sort_index = idx
            else:
                trace.tracks[th.track].sort_index = idx
        if unused:
            warn(WarningCode.NOTE, "names/sort indexes of processes or threads that have no events "
                 "were not kept", unused)


def name_remapped(trace: Trace) -> None:
    """Processes and threads whose id had to be renumbered, and that have no name, are named after
    the original id."""
    for p in trace.processes:
        if not p.name and isinstance(p.raw_pid, int) and p.pid != p.raw_pid:
            p.name = f"pid {p.raw_pid}"
            trace.process_track(p).name = p.name
    for th in trace.threads:
        if not th.name and isinstance(th.raw_tid, int) and th.tid != th.raw_tid:
            trace.set_thread_name(th, f"tid {th.raw_tid}")
