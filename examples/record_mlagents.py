"""An ML-Agents-style script under the drop-in timers: the usual timers.json, plus the real timeline.

    python examples/record_mlagents.py out/      # out/timers.json and out/run.pftrace
"""

import sys
import time
from pathlib import Path

import traceconv.record as rec
# the one changed line (was: from mlagents_envs.timers import ...)
from traceconv.record.mlagents import hierarchical_timer, set_gauge, timed, write_timing_tree


class Trainer:
    @timed
    def advance(self, step):
        with hierarchical_timer("env_step"):
            time.sleep(0.001 * (1 + step % 3))
        with hierarchical_timer("update_policy"):
            time.sleep(0.0005)
        set_gauge("Environment.CumulativeReward.mean", float(step))


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rec.start(out / "run.pftrace")
    t = Trainer()
    with hierarchical_timer("TrainerController.start_learning"):
        for step in range(10):
            t.advance(step)
    write_timing_tree(str(out / "timers.json"))  # what ML-Agents' learn.py writes
    rec.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results"))
