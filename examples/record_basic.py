"""Record a real timeline: spans, a traced function, instants, counters, a flow between threads.

    python examples/record_basic.py run.pftrace     # then open run.pftrace in ui.perfetto.dev
"""

import sys
import threading
import time

import traceconv.record as rec


@rec.traced
def forward(batch):
    time.sleep(0.002)
    return batch * 2


def main(out: str) -> None:
    rec.start(out)                               # or TRACECONV_RECORD=run.pftrace in the environment
    rec.name_process("trainer")
    fid = rec.new_flow()

    def loader():
        rec.name_thread("loader")
        with rec.span("load_batch", cat="io", flow_out=fid):
            time.sleep(0.003)

    th = threading.Thread(target=loader)
    th.start()
    th.join()
    with rec.span("step", cat="train", flow_in=fid, step=0):
        with rec.span("env_step", cat="rollout", frames=4):
            time.sleep(0.001)
        forward(3)
    rec.instant("checkpoint", step=0)
    rec.counter("fps", 18463.7)
    rec.stop()                                   # flush and close; also done at interpreter exit


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "run.pftrace")
