"""Merge cases: two or three ranks of one run, and the options ``traceconv merge`` gets (the
runner packs them into one case, :func:`.runner.merge_case`)."""

from __future__ import annotations

import random

from hypothesis import strategies as st

from .mutate import mutated
from .strategies import IMPORTERS, Case

MERGE_KINDS = ("kineto", "composer", "chrome-json")        # what ranks of one run are written as


def merge_ranks(rng: random.Random) -> st.SearchStrategy[list[Case]]:
    """Two or three ranks drawn from the trace importers' strategies; one of them sometimes a
    mutated fixture, or the first rank again (the same pids and threads twice)."""
    ranks = st.lists(st.sampled_from(MERGE_KINDS).flatmap(lambda k: IMPORTERS[k]), min_size=2, max_size=3)
    twist = rng.random()
    if twist < 0.25:
        return ranks.map(lambda rs: [*rs, mutated(rng)[0]])
    if twist < 0.4:
        return ranks.map(lambda rs: [*rs, rs[0]])
    return ranks


def merge_options(rng: random.Random) -> list[str]:
    """A merge's options: mostly ``--align none`` (generated ranks rarely carry a time base the
    other modes need, which is one error line each), sometimes a window, a shortest slice, ranks
    kept or a category left out."""
    opts = ["--align", rng.choice(["none"] * 3 + ["auto", "wallclock", "barrier", "collectives"])]
    if rng.random() < 0.2:
        opts += ["--window", rng.choice(["0s:1ms", "10us:1s", "ProfilerStep#1", "a", "1s:0s"])]
    if rng.random() < 0.2:
        opts += ["--min-dur", rng.choice(["0ns", "1ns", "5us", "1s"])]
    if rng.random() < 0.15:
        opts += ["--ranks", rng.choice(["0", "1-2", "0,2", "5"])]
    if rng.random() < 0.15:
        opts += ["--drop-cat", rng.choice(["cpu_op", "kernel", "python_function", "a"])]
    return opts
