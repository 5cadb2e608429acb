"""Generate large, realistic PyTorch profiler (Kineto) traces for benchmarks.

Seeded and deterministic.  The mix follows what real GPU training traces hold
(see ../shared/samples/kineto): ``ProfilerStep#N`` user annotations, nested
``cpu_op`` trees with shapes, ``cuda_runtime`` launches, kernels and memcpys on
several streams of the rank's GPU, ``ac2g`` flows from launch to kernel and
``fwdbwd`` flows from forward to backward ops, ``python_function`` events (some
overlapping cpu_ops without nesting, as real traces do), ``[memory]`` instants,
NCCL collective kernels (``ncclDevKernel_AllReduce...``) with collective args, and
Kineto's metadata events.  Written in Kineto's own JSON layout (relative
fractional µs + ``baseTimeNanoseconds``), one event per line.

    python benchmarks/generate.py --events 1000000 -o big.pt.trace.json
    python benchmarks/generate.py --events 250000 --ranks 8 -o rank{rank}.pt.trace.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import random
from pathlib import Path

BASE_NS = 1_790_857_026_000_000_000       # a quarter boundary, as Kineto floors baseTimeNanoseconds
OPS = ["aten::linear", "aten::matmul", "aten::mm", "aten::add", "aten::relu", "aten::layer_norm",
       "aten::softmax", "aten::dropout", "aten::cat", "aten::view", "aten::empty", "aten::copy_"]
KERNELS = ["ampere_sgemm_128x64_tn", "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>",
           "void at::native::(anonymous namespace)::layer_norm_kernel<float>", "volta_sgemm_64x64_nn",
           "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"]
PYFUNCS = ["train.py(88): train_step", "torch/nn/modules/module.py(1532): _call_impl",
           "torch/nn/modules/linear.py(116): forward", "torch/optim/adam.py(142): step"]


def fmt(ns: int) -> str:
    """Kineto's fmtTs: µs with exactly three decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}"


class Gen:
    def __init__(self, seed: int, rank: int, world: int, offset_ns: int) -> None:
        self.r = random.Random(seed * 1000 + rank)
        self.seed = seed
        self.offset = offset_ns                       # this rank's clock error
        self.step_start_shared = 4_410_382_541_000
        self.rank, self.world = rank, world
        self.pid = 10_000 + rank * 7
        self.tid = self.pid
        self.bwd_tid = self.pid + 3
        self.gpu = rank % 8
        self.t = 4_410_382_541_000 + offset_ns       # ns relative to BASE_NS
        self.corr = 0
        self.ext = 0
        self.flow = 0
        self.events: list[str] = []
        self.collective_seq = 0

    def x(self, cat: str, name: str, pid: int, tid: int, ts: int, dur: int, args: str) -> None:
        self.events.append(
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},\n'
            f'    "ts": {fmt(ts)}, "dur": {fmt(dur)},\n    "args": {{\n      {args}\n    }}\n  }}')

    def flow_pair(self, cat: str, fid: int, src: tuple[int, int, int], dst: tuple[int, int, int]) -> None:
        for ph, (pid, tid, ts), bp in (("s", src, ""), ("f", dst, ', "bp": "e"')):
            self.events.append(f'  {{\n    "ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {tid}, "ts": {fmt(ts)},\n'
                               f'    "cat": "{cat}", "name": "{cat}"{bp}\n  }}')

    def memory(self, ts: int, nbytes: int, total: int) -> None:
        self.events.append(
            f'  {{\n    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",\n'
            f'    "pid": {self.pid}, "tid": {self.tid},\n    "ts": {fmt(ts)},\n    "args": {{\n'
            f'      "Total Reserved": {total * 2}, "Total Allocated": {total}, "Bytes": {nbytes}, '
            f'"Addr": {94000000000000 + self.r.randrange(1 << 30)}, "Device Type": 1, "Device Id": {self.gpu}\n'
            f'    }}\n  }}')

    def op_tree(self, start: int, depth: int, fwd: list[tuple[int, int, int]]) -> int:
        """A cpu_op with children; returns its end."""
        r = self.r
        name = r.choice(OPS)
        self.ext += 1
        seq = self.ext
        t = start + r.randrange(200, 900)
        child_end = t
        if depth < 2:
            for _ in range(r.randrange(0, 3)):
                child_end = self.op_tree(child_end + r.randrange(100, 500), depth + 1, fwd)
        launch_end = child_end
        if depth > 0 and r.random() < 0.6:
            # a launch and its kernel
            self.corr += 1
            lt = child_end + r.randrange(100, 400)
            ld = r.randrange(2_000, 6_000)
            self.x("cuda_runtime", "cudaLaunchKernel", self.pid, self.tid, lt, ld,
                   f'"cbid": 211, "correlation": {self.corr}, "External id": {seq}')
            stream = r.choice((7, 13, 17))
            kt = lt + r.randrange(5_000, 30_000)
            kd = r.randrange(3_000, 90_000)
            self.x("kernel", r.choice(KERNELS), self.gpu, stream, kt, kd,
                   f'"queued": 0, "device": {self.gpu}, "context": 1, "stream": {stream}, '
                   f'"correlation": {self.corr}, "registers per thread": 72, "shared memory": 16384, '
                   f'"blocks per SM": 1.21, "warps per SM": 9.7, "grid": [120, 1, 1], "block": [256, 1, 1], '
                   f'"est. achieved occupancy %": 25')
            self.flow_pair("ac2g", self.corr, (self.pid, self.tid, lt), (self.gpu, stream, kt))
            launch_end = lt + ld
        end = launch_end + r.randrange(300, 2_000)
        dims = f"[[{r.randrange(1, 64)}, {r.randrange(1, 4096)}], [{r.randrange(1, 4096)}, {r.randrange(1, 4096)}]]"
        self.x("cpu_op", name, self.pid, self.tid, start, end - start,
               f'"External id": {seq},"Record function id": 0, "Ev Idx": {seq}, "Sequence number": {seq}, '
               f'"Fwd thread id": 0, "Input Dims": {dims}, "Input type": ["float", "float"], '
               f'"Input Strides": [[4096, 1], [4096, 1]], "Concrete Inputs": ["", ""]')
        if depth == 0:
            fwd.append((self.pid, self.tid, start))
        if r.random() < 0.3:
            # python_function around the op; every 20th overlaps its end without nesting
            ps = start - r.randrange(50, 300)
            pe = end + r.randrange(50, 300) if r.random() > 0.05 else end - r.randrange(10, 100)
            self.x("python_function", r.choice(PYFUNCS), self.pid, self.tid, ps, pe - ps,
                   f'"Python parent id": {self.ext + 100000}, "Python id": {self.ext + 200000}, "Python thread": 0')
        if r.random() < 0.2:
            self.memory(end - 50, r.choice((512, 4096, 1 << 20)), r.randrange(1 << 20, 1 << 32))
        return end

    def collective(self, start: int, end: int) -> int:
        """An all-reduce: a c10d op on the CPU and its NCCL kernel, which starts when this rank
        gets there and ends at ``end`` (the same moment on every rank, up to a little jitter)."""
        self.collective_seq += 1
        self.corr += 1
        self.ext += 1
        self.x("cpu_op", "c10d::allreduce_", self.pid, self.tid, start, 40_000,
               f'"External id": {self.ext}, "Collective name": "allreduce", "In msg nelems": 4194304, '
               f'"Out msg nelems": 4194304, "Group size": {self.world}, "dtype": "Float", '
               f'"Process Group Name": "0", "Process Group Description": "default_pg", "Seq": {self.collective_seq}')
        kt = start + 50_000
        end += self.r.randrange(-2_000, 2_001)          # ranks see the end within a few µs
        self.x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
               self.gpu, 20, kt, end - kt,
               f'"queued": 0, "device": {self.gpu}, "context": 1, "stream": 20, "correlation": {self.corr}, '
               f'"Collective name": "allreduce", "In msg nelems": 4194304, "Group size": {self.world}, '
               f'"Process Group Name": "0", "Seq": {self.collective_seq}')
        self.flow_pair("ac2g", self.corr, (self.pid, self.tid, start + 10), (self.gpu, 20, kt))
        return end

    def step(self, n: int) -> None:
        r = self.r
        start = self.t
        fwd: list[tuple[int, int, int]] = []
        t = start + 1_000
        for _ in range(r.randrange(20, 40)):
            t = self.op_tree(t, 0, fwd) + r.randrange(200, 2_000)
        # backward ops on the autograd thread, each linked to its forward op
        bt = t
        for src in fwd[: len(fwd) // 2]:
            self.flow += 1
            d = r.randrange(5_000, 40_000)
            self.ext += 1
            self.x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", self.pid, self.bwd_tid, bt, d,
                   f'"External id": {self.ext}, "Sequence number": {self.ext}, "Fwd thread id": 1')
            self.flow_pair("fwdbwd", 1_000_000 + self.flow, src, (self.pid, self.bwd_tid, bt))
            bt += d + r.randrange(500, 3_000)
        # every rank's step ends with the same all-reduce; it completes when the slowest rank
        # arrives, at a time all ranks share (drawn from the run's, not the rank's, random stream)
        shared = random.Random(self.seed * 7919 + n)
        sync_end = self.step_start_shared + self.offset + shared.randrange(10_000_000, 12_000_000)
        end = self.collective(max(bt + 1_000, sync_end - 1_000_000), sync_end) + 2_000
        self.x("user_annotation", f"ProfilerStep#{n}", self.pid, self.tid, start, end - start,
               f'"External id": {self.ext + 1},"Record function id": 0, "Ev Idx": 0')
        self.t = end + r.randrange(1_000, 10_000)
        self.step_start_shared = sync_end - self.offset + 100_000

    def header(self) -> str:
        return (
            '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {\n      "id": %d, "name": "NVIDIA H100 80GB HBM3", '
            '"totalGlobalMem": 84929216512,\n      "computeMajor": 9, "computeMinor": 0,\n'
            '      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n      "regsPerBlock": 65536, '
            '"warpSize": 32,\n      "sharedMemPerBlock": 49152, "numSms": 132\n    }\n  ],\n'
            '  "distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d, "pg_count": 1},\n'
            '  "record_shapes": 1,\n  "with_stack": 1,\n  "profile_memory": 1,\n'
            '  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": %d,\n  "traceEvents": [\n'
            % (self.gpu, self.rank, self.world, BASE_NS))

    def metadata(self) -> list[str]:
        out = []
        for name, pid, tid, args in (
                ("process_name", self.pid, 0, '"name": "python3.11"'),
                ("process_labels", self.pid, 0, '"labels": "CPU"'),
                ("process_sort_index", self.pid, 0, f'"sort_index": {self.pid}'),
                ("thread_name", self.pid, self.tid, f'"name": "thread {self.tid} (python3.11)"'),
                ("thread_name", self.pid, self.bwd_tid, '"name": "pt_autograd_0"'),
                ("process_name", self.gpu, 0, '"name": "python3.11"'),
                ("process_labels", self.gpu, 0, f'"labels": "GPU {self.gpu}"'),
                ("process_sort_index", self.gpu, 0, f'"sort_index": {16777216 + self.gpu}')):
            out.append(f'  {{"name": "{name}", "ph": "M", "ts": {fmt(self.t)}, "pid": {pid}, "tid": {tid},\n'
                       f'    "args": {{\n      {args}\n    }}\n  }}')
        for stream in (7, 13, 17, 20):
            out.append(f'  {{"name": "thread_name", "ph": "M", "ts": {fmt(self.t)}, "pid": {self.gpu}, '
                       f'"tid": {stream},\n    "args": {{\n      "name": "stream {stream} "\n    }}\n  }}')
        return out


def generate(events: int, seed: int = 0, rank: int = 0, world: int = 1, offset_ns: int = 0) -> bytes:
    """A Kineto trace of about ``events`` events (flow pairs count as two)."""
    g = Gen(seed, rank, world, offset_ns)
    g.events.extend(g.metadata())
    n = 0
    while len(g.events) < events:
        g.step(n)
        n += 1
    span_end = g.t
    g.events.append(f'  {{\n    "ph": "X", "cat": "Trace", "ts": {fmt(4_410_382_541_000 + offset_ns)}, '
                    f'"dur": {fmt(span_end - 4_410_382_541_000 - offset_ns)},\n    "pid": "Spans", "tid": "PyTorch Profiler",\n'
                    f'    "name": "PyTorch Profiler (0)",\n    "args": {{\n      "Op count": 0\n    }}\n  }}')
    g.events.append(f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", '
                    f'"ts": {fmt(span_end + 1000)}\n  }}')
    return (g.header() + ",\n".join(g.events) +
            f'\n  ],\n  "traceName": "rank{rank}.pt.trace.json"\n}}\n').encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--skew-us", type=int, default=0, help="clock offset between consecutive ranks")
    ap.add_argument("-o", "--output", required=True, help="file name; {rank} is replaced for --ranks > 1")
    a = ap.parse_args()
    for rank in range(a.ranks):
        data = generate(a.events, a.seed, rank, a.ranks, rank * a.skew_us * 1000)
        path = Path(a.output.format(rank=rank))
        if path.name.endswith(".gz"):
            data = gzip.compress(data, compresslevel=6)
        path.write_bytes(data)
        print(f"{path}: {len(data) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
