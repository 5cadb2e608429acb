"""``python -m tests.fuzz --minutes 10 [--seed N] [--out DIR] [--plain]``: a fuzz campaign.

Alternates structure-aware cases (hypothesis, one importer after another) with byte-level mutations
of the fixtures and merges of two or three such ranks (Kineto, Composer, Chrome JSON; one of them
sometimes mutated, sometimes the same rank twice), runs each through the CLI to .pftrace and .json
(``traceconv convert``, or ``traceconv merge`` of the ranks' folder; see :mod:`tests.fuzz.runner`),
prints a summary, and writes each failing input (with what went wrong, in ``<input>.txt``) under
``--out``/<failure class>/.  Exit 1 if anything failed.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed as hseed, settings

from . import scanner
from .merges import merge_options, merge_ranks
from .mutate import mutated
from .runner import MERGE_SUFFIX, Outcome, Result, Runner, merge_case, save_failure
from .strategies import IMPORTERS, Case


def campaign(minutes: float, seed: int, out: Path, plain: bool = False, log=print,
             kinds: list[str] | None = None, mutate_share: float = 0.5, merge_share: float = 0.1,
             inspect_share: float = 0.25) -> dict:
    deadline = time.monotonic() + minutes * 60
    t0 = time.monotonic()
    rng = random.Random(seed)
    stats: dict = {"cases": 0, "runs": 0, "by_kind": collections.Counter(), "rc": collections.Counter(),
                   "failures": collections.Counter(), "examples": {}}
    kinds = kinds or list(IMPORTERS)

    def record(o: Outcome, note: str) -> None:
        broke = scanner.check(o.case.data, rng)      # the same bytes straight into the compiled scanner
        if broke is not None:
            o.results.append(Result("binding", 0, 0.0, broke[0], broke[1]))
        stats["cases"] += 1
        stats["by_kind"][o.case.kind] += 1
        for r in o.results:
            stats["runs"] += 1
            stats["rc"][r.rc] += 1
            if r.failure:
                stats["failures"][r.failure] += 1
                if stats["failures"][r.failure] <= 5:
                    p = save_failure(out, o.case, r, note)
                    stats["examples"].setdefault(r.failure, str(p))
                    if stats["failures"][r.failure] == 1:
                        log(f"  NEW {r.failure}: {p}")

    with Runner(timeout=60, plain=plain) as runner:
        batch = 0
        while time.monotonic() < deadline:
            batch += 1
            draw = rng.random()
            if draw < mutate_share:
                case, note = mutated(rng)
                record(runner.run(case, inspect=rng.random() < inspect_share), note)
            elif draw < mutate_share + merge_share:

                @settings(max_examples=2, phases=[Phase.generate], database=None, deadline=None,
                          suppress_health_check=list(HealthCheck))
                @hseed(seed * 1_000_003 + batch)
                @given(merge_ranks(rng))
                def one_merge(ranks: list[Case]) -> None:
                    if time.monotonic() < deadline:
                        opts = merge_options(rng)
                        record(runner.run(merge_case(ranks, opts)),
                               f"hypothesis merge seed {seed} batch {batch}: {' '.join(opts)}")

                one_merge()
            else:
                kind = kinds[batch % len(kinds)]

                @settings(max_examples=3, phases=[Phase.generate], database=None, deadline=None,
                          suppress_health_check=list(HealthCheck))
                @hseed(seed * 1_000_003 + batch)
                @given(IMPORTERS[kind])
                def one(case: Case) -> None:
                    if time.monotonic() < deadline:
                        case.kind = kind
                        record(runner.run(case, inspect=rng.random() < inspect_share),
                               f"hypothesis {kind} seed {seed} batch {batch}")

                one()
            if batch % 20 == 0:
                log(f"[{(time.monotonic() - t0) / 60:5.1f} min] {stats['cases']} cases, "
                    f"{sum(stats['failures'].values())} failing runs in {len(stats['failures'])} classes")
    stats["minutes"] = (time.monotonic() - t0) / 60
    return stats


def replay(paths: list[Path], log=print) -> dict:
    """Run saved inputs (files, or folders of them: every file but the .txt notes) again."""
    files: list[Path] = []
    for p in paths:
        files += sorted(f for f in p.rglob("*") if f.is_file() and f.suffix != ".txt") if p.is_dir() else [p]
    t0 = time.monotonic()
    stats: dict = {"cases": 0, "runs": 0, "by_kind": collections.Counter(), "rc": collections.Counter(),
                   "failures": collections.Counter(), "examples": {}}
    seen: set[bytes] = set()
    with Runner(timeout=60) as runner:
        for f in files:
            data = f.read_bytes()
            if data in seen:
                continue
            seen.add(data)
            name = f.name
            suffix = next((s for s in (MERGE_SUFFIX, ".pt.trace.json", ".chrome_timeline.json", ".json.gz", ".json", ".txt",
                                       ".log", ".gz") if name.endswith(s)), f.suffix)
            o = runner.run(Case(f.parent.name, suffix, data), inspect="both")
            stats["cases"] += 1
            stats["by_kind"]["replay"] += 1
            for r in o.results:
                stats["runs"] += 1
                stats["rc"][r.rc] += 1
                if r.failure:
                    stats["failures"][r.failure] += 1
                    stats["examples"].setdefault(r.failure, str(f))
                    log(f"  FAIL {r.failure}: {f}")
    stats["minutes"] = (time.monotonic() - t0) / 60
    return stats


def summary(stats: dict, out: Path) -> str:
    lines = [f"fuzz: {stats['cases']} cases ({stats['runs']} CLI runs) in {stats['minutes']:.1f} min",
             "  by importer: " + ", ".join(f"{k} {n}" for k, n in sorted(stats["by_kind"].items())),
             "  exit codes: " + ", ".join(f"{k}: {n}" for k, n in sorted(stats["rc"].items()))]
    if stats["failures"]:
        lines.append(f"  {sum(stats['failures'].values())} failing runs in {len(stats['failures'])} classes "
                     f"(inputs under {out}):")
        for k, n in stats["failures"].most_common():
            lines.append(f"    {n:5d}  {k}  e.g. {stats['examples'].get(k, '')}")
    else:
        lines.append("  no failures")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("fuzz-failures"),
                    help="folder for failing inputs (default: ./fuzz-failures)")
    ap.add_argument("--plain", action="store_true",
                    help="a fresh `python -m traceconv` per run instead of forks of a warm CLI (slower)")
    ap.add_argument("--only", action="append", choices=sorted(IMPORTERS), help="structure-aware cases of these only")
    ap.add_argument("--mutate-share", type=float, default=0.5, help="share of cases that mutate fixtures")
    ap.add_argument("--merge-share", type=float, default=0.1, help="share of batches that merge ranks")
    ap.add_argument("--inspect-share", type=float, default=0.25,
                    help="share of converted cases also run through summary and validate")
    ap.add_argument("--replay", type=Path, nargs="+", help="run these saved inputs (files or folders) again")
    a = ap.parse_args(argv)
    if a.replay:
        stats = replay(a.replay, log=lambda s: print(s, flush=True))
        print(summary(stats, a.out.resolve()), flush=True)
        return 1 if stats["failures"] else 0
    a.out.mkdir(parents=True, exist_ok=True)
    print(f"fuzz: seed {a.seed}, {a.minutes} min, failing inputs go to {a.out.resolve()}", flush=True)
    stats = campaign(a.minutes, a.seed, a.out, a.plain, log=lambda s: print(s, flush=True), kinds=a.only,
                     mutate_share=a.mutate_share, merge_share=a.merge_share,
                     inspect_share=a.inspect_share)
    print(summary(stats, a.out.resolve()), flush=True)
    return 1 if stats["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
