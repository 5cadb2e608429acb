"""Args spilled to a file (what a big trace's columns do past ``model.args.SPILL_BYTES``) give the very same
outputs, byte for byte, as args held in memory: for conversions of real inputs to every output
format, and for a merge that filters (``ArgsColumn.take``) and appends ranks (``extend``); and a file that cannot be
written (a full disk) brings the column back to memory, every row kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceconv
from traceconv.model import args as model_args

FIX = Path(__file__).parent / "fixtures"
INPUTS = [FIX / "kineto" / "hta_critical_path_simple_add_trace.json.gz",
          FIX / "kineto" / "hta_df_index_resolver_gpu_memory_events_EXCERPT.json.gz",
          FIX / "kineto" / "kineto_docs_after_fix_trace.json"]
RANKS = sorted((FIX / "multirank" / "hta_trace_filter_2ranks").glob("*.json*"))


def spilling(monkeypatch, on: bool) -> None:
    monkeypatch.setattr(model_args, "SPILL_BYTES", 0 if on else -1)
    monkeypatch.setattr(model_args, "SPILL_FLUSH", 64)
    monkeypatch.setattr(model_args, "FORGET_ROWS", 8)


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_spilled_args_convert_to_the_same_bytes(path, tmp_path, monkeypatch):
    out = {}
    for on in (False, True):
        spilling(monkeypatch, on)
        trace = traceconv.load(path)
        assert trace.slices.args.spilled == on
        for ext in ("pftrace", "json"):
            dst = tmp_path / f"{on}.{ext}"
            traceconv.save(trace, dst)
            out[on, ext] = dst.read_bytes()
    assert out[True, "pftrace"] == out[False, "pftrace"]
    assert out[True, "json"] == out[False, "json"]


def test_a_merge_with_spilled_args_writes_the_same_bytes(tmp_path, monkeypatch):
    assert len(RANKS) == 2
    out = {}
    for on in (False, True):
        spilling(monkeypatch, on)
        for ext in ("pftrace", "json"):
            dst = tmp_path / f"{on}.{ext}"
            traceconv.merge(RANKS, dst, min_dur="5us")
            out[on, ext] = dst.read_bytes()
    assert out[True, "pftrace"] == out[False, "pftrace"]
    assert out[True, "json"] == out[False, "json"]


@pytest.mark.parametrize("fails_at", [1, 2, 5])
def test_a_file_that_cannot_be_written_brings_the_column_back_to_memory(monkeypatch, fails_at):
    # a disk that fills up: the fails_at-th write of the spilled text and every one after it raise
    # ENOSPC; the column goes back to memory with every row, as appended, and stays there
    import errno
    import numpy as np

    spilling(monkeypatch, True)
    writes = []
    real = model_args.os.pwrite

    def pwrite(fd, data, pos):
        writes.append(pos)
        if len(writes) >= fails_at:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, pos)

    monkeypatch.setattr(model_args.os, "pwrite", pwrite)
    rows = [None if i % 7 == 0 else b'{"i":%d,"pad":"%s"}' % (i, b"x" * (i % 50)) for i in range(3000)]
    col = model_args.ArgsColumn()
    for lo in range(0, 1000, 100):                       # appended one by one (flushed in pieces)
        col.extend(rows[lo:lo + 100])
    for lo in range(1000, 3000, 500):                    # and in big packed batches (written directly)
        batch = [r or b"" for r in rows[lo:lo + 500]]
        col.extend_packed(np.frombuffer(b"".join(batch), np.uint8), [len(r) for r in batch])
    assert len(writes) >= fails_at and not col.spilled
    assert list(col) == rows
    data, off = col.packed()
    assert bytes(data) == b"".join(r or b"" for r in rows) and len(off) == len(rows) + 1


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(min_size=1, max_size=40)), max_size=60),
       st.lists(st.integers(0, 59), max_size=80), st.sampled_from([1, 3, 64]), st.sampled_from([1, 7, 100]),
       st.booleans())
def test_take_gathers_any_rows_in_batches_of_rows_and_bytes(rows, picks, take_rows, take_bytes, spill):
    """``ArgsColumn.take`` gathers its rows a batch at a time, each at most TAKE_ROWS rows and
    TAKE_BYTES of text (MegEngine's longer args: 8,192 rows were 26 MB of temporaries) and at
    least one row: the rows asked for, in that order, repeated ones too, whatever the limits."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(model_args, "TAKE_ROWS", take_rows)
        mp.setattr(model_args, "TAKE_BYTES", take_bytes)
        mp.setattr(model_args, "SPILL_BYTES", 0 if spill else -1)
        col = model_args.ArgsColumn()
        for r in rows:
            col.append(r)
        idx = [p for p in picks if p < len(rows)]
        got = col.take(idx)
        assert [got[i] for i in range(len(got))] == [rows[i] for i in idx]
