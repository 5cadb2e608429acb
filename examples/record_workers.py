"""Worker processes record too: each writes a shard on the parent's clock; stop() merges them.

    python examples/record_workers.py run.pftrace   # run.pftrace: the parent and one process per worker
"""

import multiprocessing as mp
import sys
import time

import traceconv.record as rec


def rollout(k, fid):
    with rec.span("rollout", cat="worker", flow_in=fid, k=k):
        time.sleep(0.01)
    return k


def main(out: str) -> None:
    rec.start(out)
    fids = [rec.new_flow() for _ in range(4)]
    with rec.span("dispatch"):
        for f in fids:
            with rec.span("send", flow_out=f):
                pass
    with mp.Pool(2) as pool:
        pool.starmap(rollout, enumerate(fids))
    rec.stop()            # run.shards/ holds one file per process; run.pftrace the merged timeline


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "run.pftrace")
