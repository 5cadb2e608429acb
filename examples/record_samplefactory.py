"""A Sample-Factory-style loop under the drop-in Timing: the same log text, plus the real timeline.

    python examples/record_samplefactory.py run.pftrace
"""

import sys
import time

import traceconv.record as rec
from traceconv.record.samplefactory import Timing   # was: from sample_factory.utils.timing import Timing


def main(out: str) -> None:
    rec.start(out)
    timing = Timing("Learner 0 profile")
    with timing.timeit("main_loop"):
        for _ in range(5):
            with timing.add_time("prepare_batch"):
                time.sleep(0.001)
            with timing.add_time("train"):
                with timing.add_time("update"):
                    time.sleep(0.002)
    print(timing)                                  # "Learner 0 profile tree view:" ... as SF logs it
    rec.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "run.pftrace")
