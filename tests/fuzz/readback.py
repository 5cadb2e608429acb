"""traceconv's own .pftrace read back (``traceconv.readers.pftrace``, what a recording's stop merges):
the compiled reader (``_core.readback``, rust/src/readback.rs) held to its Python reference.

Every .pftrace a campaign's conversions write is read back both ways, as written and with a few
bytes flipped, cut or spliced.  The compiled reader must never raise (a Rust panic is pyo3's
``PanicException``, a BaseException); where it reads a file (it declines what it cannot read
exactly as the reference does), its trace must be the reference's, column for column
(:func:`same_trace`); the reference must not raise either (one error line is the contract, and
``python -m traceconv.record merge`` reads shards with it).
"""

from __future__ import annotations

import random
import traceback

from traceconv import _core
from traceconv.model import Trace
from traceconv.model.args import decode_args
from traceconv.readers import pftrace as reader


def same_trace(a: Trace, b: Trace) -> None:
    """Two readings of one file are the same trace: every column, string, track and warning."""
    assert a.strings.strings == b.strings.strings
    for ta, tb in ((a.slices, b.slices), (a.instants, b.instants)):
        for col in ("ts", "track", "name", "cat") + (("dur",) if ta is a.slices else ()):
            assert getattr(ta, col) == getattr(tb, col), col
        assert [decode_args(x) for x in ta.args] == [decode_args(x) for x in tb.args]
    assert (a.flows.src, a.flows.dst, a.flows.name) == (b.flows.src, b.flows.dst, b.flows.name)
    assert (a.counters.ts, a.counters.track) == (b.counters.ts, b.counters.track)
    assert a.counters.value.tobytes() == b.counters.value.tobytes()
    assert [(p.id, p.pid, p.name, p.labels) for p in a.processes] == [(p.id, p.pid, p.name, p.labels) for p in b.processes]
    assert [(t.id, t.process, t.tid, t.name, t.track) for t in a.threads] == \
        [(t.id, t.process, t.tid, t.name, t.track) for t in b.threads]
    assert [(t.id, t.kind, t.name, t.process, t.thread, t.parent, t.lane, t.unit) for t in a.tracks] == \
        [(t.id, t.kind, t.name, t.process, t.thread, t.parent, t.lane, t.unit) for t in b.tracks]
    # (the same warnings; the reference gives an unmatched end's where it meets it, the compiled
    # reader after the descriptors' and the metadata's)
    assert sorted((w.code, w.message, w.count) for w in a.diagnostics.warnings) == \
        sorted((w.code, w.message, w.count) for w in b.diagnostics.warnings)
    assert (a.meta.rank, a.meta.world_size, a.meta.synthesized, a.meta.clock, a.meta.extra) == \
        (b.meta.rank, b.meta.world_size, b.meta.synthesized, b.meta.clock, b.meta.extra)
    assert (a.fixed_args, a.saturated) == (b.fixed_args, b.saturated) == (0, 0)


def damaged(data: bytes, rng: random.Random) -> bytes:
    """``data`` with 1-4 bytes flipped, runs cut or bytes spliced in."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not b:
            break
        at = rng.randrange(len(b))
        how = rng.choice(("flip", "cut", "splice"))
        if how == "flip":
            b[at] ^= 1 << rng.randrange(8)
        elif how == "cut":
            del b[at:at + rng.randint(1, 40)]
        else:
            b[at:at] = rng.randbytes(rng.randint(1, 12))
    return bytes(b)


def compare(data: bytes) -> tuple[str, str] | None:
    """(failure class, detail) if the two readers of ``data`` part ways, else None."""
    try:
        got = reader._read_compiled(data)
    except BaseException as e:  # noqa: BLE001 - a panic is a BaseException
        return f"readback: the compiled reader raised {type(e).__name__}", traceback.format_exc()
    if got is None:
        return None
    try:
        want = reader._read_reference(data)
    except Exception as e:  # noqa: BLE001
        return f"readback: the reference raised {type(e).__name__}", traceback.format_exc()
    try:
        same_trace(got[0], want[0])
        assert got[1] == want[1], "packets read"
        assert got[2] == want[2], "traceconv's metadata"
    except AssertionError:
        return "readback: the compiled reader's trace differs from the reference's", traceback.format_exc()
    return None


# why the compiled reader may decline a file traceconv wrote whole: args nested as deep as the
# model keeps them (60) go past its 48 levels, and a name with a lone surrogate (from a JSON
# escape) is written as bytes that are not UTF-8
MAY_DECLINE = ("args nested deeper than the compiled reader reads", "text that is not UTF-8")


def check(data: bytes, rng: random.Random, variants: int = 3) -> tuple[str, str] | None:
    """``data`` (a .pftrace traceconv wrote) and ``variants`` damaged copies, each read both ways;
    ``data`` itself by the compiled reader unless for a reason in :data:`MAY_DECLINE`."""
    why = _core.readback.read(data)
    if isinstance(why, str) and why not in MAY_DECLINE:
        return "readback: the compiled reader declined traceconv's own output", why
    if not isinstance(why, str) and reader._read_compiled(data) is None:
        return "readback: the compiled reader declined traceconv's own output", "in Python (its descriptors)"
    for v in [data] + [damaged(data, rng) for _ in range(variants)]:
        broke = compare(v)
        if broke is not None:
            return broke
    return None
