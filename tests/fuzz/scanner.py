"""The compiled event scanner (``traceconv._core.scan``, rust/src/scan/) through its Python binding.

Every fuzz case's bytes also go straight to the scanner, cut into random blocks as the reader's
producer thread feeds it, its rows to ``split`` (as the reader sorts them), and the bytes to
``value_end``/``skip_ws``/``deep_spans``: each call must return (a status for text that is not
JSON) or raise ValueError for arguments out of range.  Any other exception -- above all pyo3's
``PanicException``, a Rust panic, which derives from BaseException -- is a failure.
"""

from __future__ import annotations

import gzip
import random
import traceback

import numpy as np

from traceconv import _core

S = _core.scan
STATUSES = (S.MORE, S.END, S.FULL, S.BAD)


def feed(data: bytes, rng: random.Random) -> None:
    """Scan ``data`` from its first ``[`` (or 0) in random blocks; raise AssertionError on a
    contract breach."""
    start = data.find(b"[") + 1
    strings = S.Strings()
    carry = b""
    at = start
    while at <= len(data):
        step = rng.choice([1, 7, 64, 4096, len(data) + 1])
        buf = carry + data[at:at + step]
        at += step
        pos = 0
        while True:
            cols, new_pos, status, _ = S.scan(buf, pos, rng.choice([1, 3, 1 << 16]), strings)
            assert status in STATUSES, status
            assert pos <= new_pos <= len(buf) or status == S.BAD, (pos, new_pos, len(buf))
            n = len(cols["flags"])
            if n:
                k = S.split(cols["flags"], cols["ph"], cols["name"], cols["cat"], cols["ts"], cols["dur"],
                            cols["pid"], cols["tid"], cols["id"], cols["s"], cols["bp"], cols["args"],
                            cols["args_off"], np.arange(len(strings), dtype=np.int32), 0, rng.random() < 0.5)
                parts = sum(len(k[p + "rows"]) for p in ("x_", "f_", "i_")) + len(k["rest"])
                assert parts == n, (parts, n)
                for p in ("x_", "i_"):
                    assert int(k[p + "lens"].sum()) == len(k[p + "args"]), p
            pos = new_pos
            if status != S.FULL:
                break
        if status in (S.END, S.BAD):
            return
        carry = buf[pos:]
        if at >= len(data):
            return


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
    return None
