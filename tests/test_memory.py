"""traceconv.memory: what a merge's worker keeps of the memory it frees (glibc only)."""

import ctypes.util
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None,
                                reason="glibc's malloc settings")

PROBE = """
import sys
from traceconv import memory
# glibc's default trim threshold (128 KB), which its dynamic thresholds may have raised while the
# interpreter started: the worker's settings must not depend on that
memory._c().mallopt(memory.M_TRIM_THRESHOLD, 128 << 10)
if sys.argv[1] == "keep":
    memory.keep_freed()
import os
statm = os.open("/proc/self/statm", os.O_RDONLY)
def rss():                         # (small objects only: nothing malloc'd above the block)
    return int(os.pread(statm, 200, 0).split()[1]) * 4096
base = rss()
block = b"x" * (32 << 20)          # malloc'd and written: 32 MB resident
held = rss()
del block
print((held - base) >> 20, (rss() - base) >> 20)
"""


def _held_freed(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout
    held, freed = map(int, out.split())
    return held, freed


def test_a_worker_keeps_a_freed_block_for_the_next_file():
    # in a pool's worker a freed 32 MB block stays for the next rank (neither its own mapping given
    # back, nor the top of the heap trimmed: glibc's trim threshold is 128 KB once the mmap
    # threshold is set by hand)
    held, freed = _held_freed("keep")
    assert held >= 31 and freed >= 31


def test_elsewhere_a_freed_block_goes_back_to_the_system():
    held, freed = _held_freed("plain")
    assert held >= 31 and freed <= 1


STREAM_PROBE = """
import os, sys
from traceconv import memory
memory._c().mallopt(memory.M_TRIM_THRESHOLD, 128 << 10)
memory.stream_start(1 << 20)                 # a file streamed 1 MB at a time
statm = os.open("/proc/self/statm", os.O_RDONLY)
def rss():
    return int(os.pread(statm, 200, 0).split()[1]) * 4096
base = rss()
block = b"x" * int(sys.argv[1])              # malloc'd and written
pin = b"y" * 100_000                          # malloc'd after it: the block is not the heap's top
held = rss()
del block
print((held - base) >> 10, (rss() - base) >> 10)
"""


def _stream_held_freed(size: int) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", STREAM_PROBE, str(size)], capture_output=True, text=True,
                         check=True).stdout
    held, freed = map(int, out.split())
    return held, freed


def test_while_streaming_a_block_stays_for_the_next_and_a_column_leaves_no_hole():
    # a freed block of the stream's size stays in the heap, for the next block to reuse (of its
    # 1,024 KB, a few dozen may be pages the heap already held)
    held, freed = _stream_held_freed(1 << 20)
    assert held >= 900 and freed >= held
    # an array past one and a half blocks (a model's column as it grows) is a mapping of its own:
    # freed, nothing of it stays resident (in the heap it would leave a 2 MB hole behind the pin)
    held, freed = _stream_held_freed(2 << 20)
    assert held >= 2000 and freed <= 200


TOP_PROBE = """
import os, sys
from traceconv import memory
memory._c().mallopt(memory.M_TRIM_THRESHOLD, 128 << 10)
statm = os.open("/proc/self/statm", os.O_RDONLY)
def rss():
    return int(os.pread(statm, 200, 0).split()[1]) * 4096
def held_freed(blocks, size):
    base = rss()
    held = [b"x" * size for _ in range(blocks)]     # malloc'd one after another, then written
    top = rss()
    del held                                        # the heap's top is free: kept, or given back
    return (top - base) >> 20, (rss() - base) >> 20
phase = sys.argv[1]
if phase == "stream":
    memory.stream_start(1 << 20, 279 << 20)         # the bench's 1M trace (279 MB of text)
    print(*held_freed(8, 1 << 20))                  # eight 1 MB blocks of a stream
    memory.stream_end()
    print(*held_freed(8, 1 << 20))
elif phase == "small stream":
    memory.stream_start(1 << 20, 32 << 20)          # 32 MB of text: the heap's top given back past 2 MB
    print(*held_freed(8, 1 << 20))
elif phase == "write":
    with memory.writing(1_424_532):                 # the bench's 1M trace written: a stream of 1.4M events
        print(*held_freed(1, 8 << 20))              # a writer's temporary of 8 MB (a column at 1M slices)
    print(*held_freed(1, 12 << 20))                 # (more than the 8 MB still free at the heap's top)
else:
    with memory.writing(142_000):                   # its 100k trace: blocks from the heap up to 2.3 MB
        print(*held_freed(1, 8 << 20))
"""


def _top_held_freed(phase: str) -> list[tuple[int, int]]:
    out = subprocess.run([sys.executable, "-c", TOP_PROBE, phase], capture_output=True, text=True,
                         check=True).stdout
    return [tuple(map(int, line.split())) for line in out.splitlines()]


def test_while_streaming_the_free_top_of_the_heap_stays_for_the_next_blocks():
    # eight freed blocks at the heap's top stay (glibc's 128 KB trim threshold would give them back
    # at once, for the next blocks to fault in again; with 279 MB of text to come the top goes back
    # only past 16 MB); once the stream is read, they go back
    (held, freed), (held_after, freed_after) = _top_held_freed("stream")
    assert held >= 7 and freed >= 7
    assert held_after >= 7 and freed_after <= 1


def test_while_writing_a_temporary_comes_from_the_heap_and_stays_for_the_next():
    # an 8 MB array freed while writing 1M events stays for the writer's next one; afterwards a block that
    # the heap's free top cannot hold is a mapping of its own (the mmap threshold at 1 MB), given
    # back when freed
    (held, freed), (held_after, freed_after) = _top_held_freed("write")
    assert held >= 7 and freed >= 7
    assert held_after >= 11 and freed_after <= 1


def test_what_is_kept_scales_with_a_small_input():
    # with 32 MB of text to come, eight freed blocks at the heap's top go back (past 2 MB, not 16);
    # writing a trace of 100k events takes no 8 MB temporary from the heap (a mapping of its own,
    # given back when freed)
    [(held, freed)] = _top_held_freed("small stream")
    assert held >= 7 and freed <= 1
    [(held, freed)] = _top_held_freed("small write")
    assert held >= 7 and freed <= 1
