"""Run one input (or, for a merge case, the folder of its ranks) through the real CLI and check
the contract.

The contract, for every input and each output format (.pftrace and .json) of ``traceconv convert``
(or ``traceconv merge``, and its merge archive, .tar), written gzipped for a quarter of the inputs (by
their bytes' hash; an archive never):

* exit 0 and an output that trace_processor loads with no crash and no error/data-loss stat (a JSON
  output must also parse with orjson: strict UTF-8, no NaN/Infinity), holding as many slices as the
  CLI said it wrote; or
* exit 2 and exactly one line on stderr, ``traceconv: error: <file>: ...``, and no output file;
* never a traceback, a signal, a timeout, or memory past the cap (``RLIMIT_AS`` =
  max(1 GiB, 50 x the input's decompressed size)); no temporary file left in the output's folder
  or in ``$TMPDIR``.

An inspected input also goes through ``summary`` and ``validate``, with ``--format json`` or as the
tables a terminal shows (half the inputs each, by their bytes' hash: the tables go through rich,
which reads ``[...]`` in a name as markup): JSON, or a table, on stdout when the input converts
(validate: exit 0, or 1 for problems found), one error line and exit 2 when it does not; the same
never-list.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import orjson

from . import ROOT, perfetto_oracle as tp, readback
from .strategies import Case

GIB = 1 << 30
OUTPUTS = (".pftrace", ".json")
MERGE_OUTPUTS = (".tar",)        # a merge's too: a Perfetto merge archive (trace_processor opens it whole)
_WROTE = re.compile(r"^wrote .*?: (\d+) slices?(?:, (\d+) instants?)?", re.M)   # ("1 slice, 1 instant")
MERGE_SUFFIX = ".merge.tar"     # a merge case: its ranks' files in one tar (kept whole when it fails)
MERGE_ARGV = "merge.argv"       # ... and the merge's options, in the same tar
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def cap_for(data: bytes) -> int:
    size = len(data)
    if data[:2] == b"\x1f\x8b":
        try:
            size = max(size, len(gzip.decompress(data)))
        except Exception:  # noqa: BLE001 - a damaged stream: its compressed size will do
            pass
    return max(GIB, 50 * size)


@dataclass
class Result:
    output: str                     # ".pftrace", ".json" or (a merge) ".tar"
    rc: int
    secs: float
    failure: str | None = None      # the failure class, None if the contract held
    detail: str = ""


@dataclass
class Outcome:
    case: Case
    results: list[Result] = field(default_factory=list)

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.failure]


def _traceback_class(err: str) -> str:
    """``Traceback: <Exception> at <innermost traceconv frame>``."""
    last = [ln for ln in err.strip().splitlines() if ln and not ln.startswith(" ")]
    exc = last[-1].split(":")[0] if last else "?"
    frames = [m for m in _FRAME.finditer(err) if "traceconv" in m.group(1) or "/cli/" in m.group(1)]
    where = "?"
    if frames:
        f = frames[-1]
        p = f.group(1)
        k = p.rfind("traceconv/")
        k = k if k >= 0 else p.rfind("cli/")
        where = f"{p[k:]}:{f.group(3)}"
    return f"traceback {exc} in {where}"


def _crashed(ans: dict, err: str) -> str | None:
    """The failure class of a run that timed out, printed a traceback or died by a signal."""
    if ans["timeout"]:
        return "timeout"
    if "Traceback (most recent call last)" in err:
        return "memory (MemoryError past the cap)" if "MemoryError" in err else _traceback_class(err)
    rc = ans["rc"]
    if rc < 0:
        return "killed by " + (signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc))
    return None


_SUMMARY_HEADER = re.compile(r"┃ +count +┃")
_VALIDATE_HEADER = re.compile(r"┃ +verdict +┃")

def _one_error_line(err: str) -> bool:
    lines = err.strip("\n").split("\n")
    return len(lines) == 1 and lines[0].startswith("traceconv: error: ")


class Runner:
    """A warm CLI (tests/fuzz/server.py) that forks one child per conversion."""

    def __init__(self, workdir: str | os.PathLike[str] | None = None, timeout: float = 60.0,
                 plain: bool = False) -> None:
        self.timeout = timeout
        self.plain = plain
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="traceconv-fuzz-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._n = 0
        self._proc: subprocess.Popen | None = None
        if not plain:
            self._start()

    def _start(self) -> None:
        # (as a module from the checkout's root, as ``python -m traceconv`` runs in --plain: both
        # import this checkout's traceconv first, not whichever one is installed -- a script's
        # folder, tests/fuzz, would come first instead, and a campaign run from a git worktree
        # tested the installed checkout)
        self._proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.server"], cwd=ROOT,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self._proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            raise RuntimeError("the fuzz server did not start")

    def close(self) -> None:
        if self._proc is not None:
            self._proc.stdin.close()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one CLI run

    def _cli(self, argv: list[str], out: Path, err: Path, cap: int, tmpdir: Path, timeout: float) -> dict:
        if self.plain:
            return self._cli_plain(argv, out, err, cap, tmpdir, timeout)
        req = {"argv": argv, "stdout": str(out), "stderr": str(err), "cap": cap, "tmpdir": str(tmpdir),
               "timeout": timeout}
        assert self._proc is not None
        if self._proc.poll() is not None:
            self._start()
        self._proc.stdin.write(json.dumps(req) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:                               # the server itself died: start it again
            self._proc = None
            self._start()
            return {"rc": -signal.SIGKILL, "timeout": False, "maxrss_kb": 0, "secs": 0.0}
        return json.loads(line)

    def _cli_plain(self, argv: list[str], out: Path, err: Path, cap: int, tmpdir: Path, timeout: float) -> dict:
        import resource

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        env = dict(os.environ, TMPDIR=str(tmpdir))
        t0 = time.monotonic()
        with open(out, "wb") as o, open(err, "wb") as e:
            p = subprocess.Popen([sys.executable, "-m", "traceconv", *argv], stdout=o, stderr=e, cwd=ROOT,
                                 env=env, preexec_fn=limit, start_new_session=True)
            try:
                rc = p.wait(timeout)
                to = False
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                rc, to = p.wait(), True
        return {"rc": rc, "timeout": to, "maxrss_kb": 0, "secs": round(time.monotonic() - t0, 3)}

    # -- one case

    def run(self, case: Case, outputs: tuple[str, ...] = OUTPUTS, inspect: bool | str = False) -> Outcome:
        """``traceconv convert`` of the case's input; a merge case (:func:`merge_case`):
        ``traceconv merge`` of the folder of its ranks.  ``inspect``: a converted input is also
        summarised and validated (:meth:`_inspect`), as JSON or as tables by the hash of its bytes;
        ``"both"``: as JSON, then as tables."""
        self._n += 1
        d = self.workdir / f"case{self._n}"
        shutil.rmtree(d, ignore_errors=True)
        (d / "in").mkdir(parents=True)
        options: list[str] = []
        if case.suffix == MERGE_SUFFIX:
            ranks, options = unpack_merge(case.data)
            for name, data in ranks:
                (d / "in" / name).write_bytes(data)
            verb, src = "merge", d / "in"
            cap = 2 * max((cap_for(data) for _, data in ranks), default=GIB)
        else:
            verb, src = "convert", d / "in" / f"input{case.suffix}"
            src.write_bytes(case.data)
            cap = cap_for(case.data)
        timeout = self.timeout + len(case.data) / 1e5
        outcome = Outcome(case)
        try:
            gz = hashlib.sha256(case.data).digest()[1] % 4 == 0       # (the same for a replay)
            for ext in (*outputs, *MERGE_OUTPUTS) if verb == "merge" else outputs:
                outcome.results.append(self._one([verb, str(src), *options], d, ext, cap, timeout,
                                                 gz and ext != ".tar"))
            if inspect and verb == "convert":
                tables = (False, True) if inspect == "both" else (hashlib.sha256(case.data).digest()[0] & 1 == 1,)
                converted = [r.rc for r in outcome.results[:len(outputs)]]
                for table in tables:
                    for cmd in ("summary", "validate"):
                        outcome.results.append(self._inspect(cmd, src, d, cap, timeout, converted, table))
        finally:
            shutil.rmtree(d, ignore_errors=True)
        return outcome

    def _call(self, label: str, argv: list[str], so: Path, se: Path, cap: int, tmpdir: Path,
              timeout: float) -> tuple[Result, str, Callable[..., Result]]:
        """One CLI run: its result (already failed if it timed out, printed a traceback or died by a
        signal), its stderr, and ``fail(class, detail)`` marking the result failed."""
        ans = self._cli(argv, so, se, cap, tmpdir, timeout)
        res = Result(label, ans["rc"], ans["secs"])
        err = se.read_bytes().decode("utf-8", "replace")

        def fail(klass: str, detail: str = "") -> Result:
            res.failure = f"{label} {klass}"
            res.detail = (detail or err)[-4000:]
            return res

        crash = _crashed(ans, err)
        if crash:
            fail(crash, f"no exit after {timeout:.0f} s" if crash == "timeout" else "")
        return res, err, fail

    def _inspect(self, cmd: str, src: Path, d: Path, cap: int, timeout: float, converted: list[int],
                 table: bool = False) -> Result:
        """``traceconv summary|validate <input> --format json`` (``table``: as a table): JSON (a
        table) on stdout and exit 0 (validate: 0, or 1 for problems found), or one error line and
        exit 2, as the conversion did: an input that converts has a summary and a validation, one
        that does not has neither."""
        label = f"{cmd} table" if table else cmd
        tmpdir = d / f"tmp-{label}"
        tmpdir.mkdir()
        so, se = d / f"stdout-{label}", d / f"stderr-{label}"
        argv = [cmd, str(src), "--format", "table" if table else "json"]
        res, err, fail = self._call(label, argv, so, se, cap, tmpdir, timeout)
        if res.failure:
            return res
        rc = res.rc
        if rc == 2 and not _one_error_line(err):
            return fail("exit 2 without one 'traceconv: error:' line")
        if rc not in ((0, 1, 2) if cmd == "validate" else (0, 2)):
            return fail(f"exit {rc}")
        if (rc == 2) != (2 in converted):
            return fail(f"exit {rc} where convert exited {'/'.join(map(str, converted))}")
        if rc != 2 and table:
            # (the table's header, which rich draws even with no rows: summary's columns, validate's;
            # padded to its column's width, "┃  count ┃" when a count takes 6 characters)
            header = _SUMMARY_HEADER if cmd == "summary" else _VALIDATE_HEADER
            if not header.search(so.read_bytes().decode("utf-8", "replace")):
                return fail("no table on stdout", so.read_bytes().decode("utf-8", "replace")[-600:])
        elif rc != 2:
            try:
                orjson.loads(so.read_bytes())
            except orjson.JSONDecodeError as e:
                return fail("--format json output is not JSON", str(e))
        if list(tmpdir.iterdir()):
            return fail("temporary file left behind", repr(sorted(p.name for p in tmpdir.iterdir())))
        return res

    def _one(self, argv: list[str], d: Path, ext: str, cap: int, timeout: float, gz: bool = False) -> Result:
        outdir, tmpdir = d / f"out{ext}", d / f"tmp{ext}"
        outdir.mkdir()
        tmpdir.mkdir()
        target = outdir / f"out{ext}{'.gz' if gz else ''}"
        so, se = d / f"stdout{ext}", d / f"stderr{ext}"
        res, err, fail = self._call(ext, [*argv, "-o", str(target)], so, se, cap, tmpdir, timeout)
        if res.failure:
            return res
        rc = res.rc
        out = so.read_bytes().decode("utf-8", "replace")
        left_tmp = sorted(p.name for p in tmpdir.iterdir())
        listing = sorted(p.name for p in outdir.iterdir())
        if rc == 2:
            if not _one_error_line(err):
                return fail("exit 2 without one 'traceconv: error:' line")
            if listing:
                return fail("output left behind after an error", repr(listing))
            if left_tmp:
                return fail("temporary file left behind after an error", repr(left_tmp))
            return res
        if rc != 0:
            return fail(f"exit {rc}")
        if listing != [target.name]:
            return fail("exit 0 without exactly the output file", repr(listing))
        if left_tmp:
            return fail("temporary file left behind", repr(left_tmp))
        data = target.read_bytes()
        if gz:
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError) as e:
                return fail("gzipped output does not gunzip", str(e))
        if ext == ".json":
            try:
                orjson.loads(data)
            except orjson.JSONDecodeError as e:
                return fail("JSON output is not strict UTF-8 JSON", str(e))
        try:
            rows = tp.run(target, tp.PROBLEMS_SQL, "select count(*) as n from slice")
        except tp.PerfettoCrash as e:
            return fail("trace_processor crash", str(e))
        except Exception as e:  # noqa: BLE001 - e.g. a timeout
            return fail(f"trace_processor failed ({type(e).__name__})", str(e))
        if rows[0]:
            return fail("trace_processor error stat " + ",".join(sorted({r["name"] for r in rows[0]})),
                        repr(rows[0]))
        m = _WROTE.search(out)
        if m:
            want = int(m.group(1)) + int(m.group(2) or 0)
            got = rows[1][0]["n"]
            if got < int(m.group(1)):
                return fail("trace_processor holds fewer slices than written", f"wrote {want}, loaded {got}")
        if ext == ".pftrace":
            # read back as a recording's stop reads its shards: both readers, whole and damaged
            broke = readback.check(data, random.Random(hashlib.sha256(data).digest()))
            if broke is not None:
                return fail(*broke)
        return res


def merge_case(ranks: list[Case], options: list[str] = ()) -> Case:
    """A merge of ``ranks`` (each a rank's file, ``rank<i><suffix>``) with the merge's ``options``
    (``--align none``...), as one case: a tar of the files and of ``merge.argv`` (JSON)."""
    buf = io.BytesIO()
    members = [(f"rank{i}{r.suffix}", r.data) for i, r in enumerate(ranks)]
    members.append((MERGE_ARGV, json.dumps(list(options)).encode()))
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return Case("merge", MERGE_SUFFIX, buf.getvalue())


def unpack_merge(data: bytes) -> tuple[list[tuple[str, bytes]], list[str]]:
    """A merge case's ranks (name, bytes) and options."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        files = [(Path(m.name).name, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]
    options = [json.loads(d) for n, d in files if n == MERGE_ARGV]
    return [(n, d) for n, d in files if n != MERGE_ARGV], (options[0] if options else [])


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:80]


def save_failure(folder: Path, case: Case, res: Result, note: str = "") -> Path:
    """Write the failing input (and what went wrong beside it) under ``folder/<class>/``."""
    digest = hashlib.sha1(case.data).hexdigest()[:12]
    d = folder / slug(res.failure or "?")
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{case.kind}-{digest}{case.suffix}"
    p.write_bytes(case.data)
    p.with_name(p.name + ".txt").write_text(f"{res.failure}\nexit {res.rc}\n{note}\n\n{res.detail}\n")
    return p
