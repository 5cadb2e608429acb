"""The compiled event scanner (``traceconv._core.scan``, rust/src/scan/) through its Python binding.

Every fuzz case's bytes also go straight to the scanner, cut into random blocks as the reader's
producer thread feeds it, its rows to ``split`` (as the reader sorts them), its instants' args to
``memory_values`` (held to the Python way it stands in for), and the bytes to
``value_end``/``skip_ws``/``deep_spans``: each call must return (a status for text that is not
JSON) or raise ValueError for arguments out of range.  Any other exception -- above all pyo3's
``PanicException``, a Rust panic, which derives from BaseException -- is a failure.

And to ``validate``'s column pass over the scanner (:func:`traceconv.validate._scan_columns`),
held to the whole-document decoding it stands in for: the same count of events out of order,
clocks and examples, or None (it leaves the document to that decoding).
"""

from __future__ import annotations

import gzip
import io
import random
import traceback

import numpy as np

from traceconv import _core
from traceconv import validate
from traceconv.readers.chrome.kineto import _MemoryEvents
from traceconv.readers.chrome.stream import _ChunkFailure, _find_events, repair_utf8

S = _core.scan
STATUSES = (S.MORE, S.END, S.FULL, S.BAD)


def feed(data: bytes, rng: random.Random) -> None:
    """Scan ``data`` from its first ``[`` (or 0) in random blocks; raise AssertionError on a
    contract breach."""
    start = data.find(b"[") + 1
    strings = S.Strings()
    carry = b""
    after = False           # whether the carry starts right after an event (told to the scanner)
    at = start
    while at <= len(data):
        step = rng.choice([1, 7, 64, 4096, len(data) + 1])
        buf = carry + data[at:at + step]
        at += step
        pos = 0
        while True:
            cols, new_pos, status, _ = S.scan(buf, pos, rng.choice([1, 3, 1 << 16]), strings, after)
            assert status in STATUSES, status
            assert pos <= new_pos <= len(buf) or status == S.BAD, (pos, new_pos, len(buf))
            n = len(cols["flags"])
            after = after or n > 0
            if n:
                k = S.split(cols["flags"], cols["ph"], cols["name"], cols["cat"], cols["ts"], cols["dur"],
                            cols["pid"], cols["tid"], cols["id"], cols["s"], cols["bp"], cols["bind"], cols["flow"],
                            cols["args"],
                            cols["args_off"], np.arange(len(strings), dtype=np.int32), 0, rng.random() < 0.5,
                            S.Counters(), rng.random() < 0.5)
                parts = sum(len(k[p + "rows"]) for p in ("x_", "f_", "i_", "b_", "c_")) + len(k["rest"])
                assert parts == n, (parts, n)
                assert len(k["c_ts"]) == len(k["c_ids"]) == len(k["c_value"]) >= len(k["c_rows"])
                for p in ("x_", "i_", "b_"):
                    assert int(k[p + "lens"].sum()) == len(k[p + "args"]), p
                memory(k, rng)
            pos = new_pos
            if status != S.FULL:
                break
        if status in (S.END, S.BAD):
            return
        carry = buf[pos:]
        if at >= len(data):
            return


def memory(k: dict, rng: random.Random) -> None:
    """A batch's instants, as if all were [memory] events, to ``memory_values``: None, or what the
    Python way reads (``_MemoryEvents.add_any``)."""
    lens = k["i_lens"]
    rows = np.flatnonzero((lens > 0) & (np.array([rng.random() < 0.8 for _ in range(len(lens))], bool)))
    got = S.memory_values(k["i_args"], lens, rows, k["i_pid"])
    if got is None:
        return
    ends = np.cumsum(lens)
    text = bytes(k["i_args"])
    raw = [text[e - n:e] for e, n in zip(ends[rows].tolist(), lens[rows].tolist())]
    fast, ref = _MemoryEvents(), _MemoryEvents()
    fast.add_values(rows, *got)
    ref.add_any(rows.tolist(), k["i_pid"][rows].tolist(), raw)
    assert fast.places == ref.places and fast.place == ref.place and fast.no_total == ref.no_total
    assert [v.tobytes() for v in fast.values] == [v.tobytes() for v in ref.values]


EXACT_US = 2**40    # below it a time's double (µs) orders times 1 ns apart as their ns do


def column_pass(data: bytes, rng: random.Random) -> str | None:
    """What :func:`validate._scan_columns` got wrong on ``data``, if anything."""
    # (blocks of every size, but at most ~256 of them: each is a hand-over between threads)
    block = max(rng.choice([7, 64, 4096, 1 << 20]), len(data) // 256)
    got = validate._scan_columns(io.BytesIO(data), set(validate._Scan.CODES), block=block)
    if got is None:
        return None
    text = repair_utf8(data)[0]
    raw = validate._decode_events(text)
    if raw is None:
        # a document broken after its event array (the reader reads it; validate's decoding of
        # the whole document failed and gave no examples): the array alone is the reference
        try:
            found = _find_events(text)
        except _ChunkFailure:
            found = None
        end = S.value_end(text, found[2] - 1) if found is not None else -2
        raw = validate._decode_events(text[found[2] - 1:end]) if found is not None and end > 0 else None
        if raw is None:
            return "it read a document whose event array the whole-document decoding cannot"
    times = [t for e in raw if e.ph != "M" and (t := validate._num(e.ts)) is not None]
    if got.starts != validate.clock_starts(times):
        return f"clocks starting at {got.starts} against {validate.clock_starts(times)}"
    # (past EXACT_US the decoding's doubles tie times the columns' ns tell apart: not compared)
    if all(abs(t) < EXACT_US for t in times) and got.late != validate.out_of_order(raw):
        return f"{got.late} events out of order against {validate.out_of_order(raw)}"
    want = validate._Scan(raw).examples
    if validate._Scan(got.picked, got.starts).examples != want:
        return f"examples differ from {want}"
    return None


def check(data: bytes, rng: random.Random) -> tuple[str, str] | None:
    """(failure class, detail) if the binding broke its contract on ``data``, else None."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except Exception:  # noqa: BLE001 - a damaged stream: its bytes as they are
            pass
    try:
        feed(data, rng)
        for _ in range(4):
            i = rng.randrange(len(data) + 2)
            v = S.value_end(data, i)
            assert v in (-1, -2) or i < v <= len(data), (i, v)
            assert S.skip_ws(data, i) <= len(data)
        S.deep_spans(data, rng.randrange(70))
    except BaseException as e:  # noqa: BLE001 - a PanicException is a BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return f"scanner binding: {type(e).__name__}", traceback.format_exc()
    try:
        wrong = column_pass(data, rng)
    except Exception as e:  # noqa: BLE001 - any exception is a failure of the pass
        return f"validate column pass: {type(e).__name__}", traceback.format_exc()
    return ("validate column pass: differs from decoding every event", wrong) if wrong else None
