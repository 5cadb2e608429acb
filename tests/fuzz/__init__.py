"""traceconv's fuzz harness: structure-aware inputs for every importer (:mod:`.strategies`) and
byte-level mutations of the fixtures (:mod:`.mutate`), each run through the real CLI in a capped
subprocess and checked against the contract in :mod:`.runner`.

``python -m tests.fuzz --minutes 10 [--seed N] [--out DIR]`` runs a campaign; tests/test_fuzz.py
runs a short deterministic one.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_TESTS = str(ROOT / "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

import perfetto_oracle  # noqa: E402

__all__ = ["ROOT", "perfetto_oracle"]
