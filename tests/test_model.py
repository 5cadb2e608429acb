"""The packed args column behaves as the list of rows it stands for, in memory or spilled to a file."""

from __future__ import annotations

import pickle
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceconv.model import args as model_args
from traceconv.model import ArgsColumn

rows = st.lists(st.one_of(st.none(), st.binary(min_size=1, max_size=12)), max_size=60)


@given(rows, rows, st.data())
def test_args_column_is_its_rows(a, b, data):
    col = ArgsColumn(a)
    other = ArgsColumn(b)
    col.extend(other)                                   # packed into packed
    want = a + b
    assert list(col) == want and len(col) == len(want)
    assert [col[i] for i in range(-len(want), len(want))] == want + want   # negative indices too
    buf, off = col.packed()
    assert [buf[off[i]:off[i + 1]].tobytes() or None for i in range(len(want))] == want
    idx = data.draw(st.lists(st.integers(0, max(len(want) - 1, 0)), max_size=80)) if want else []
    assert list(col.take(idx)) == [want[i] for i in idx]
    packed = ArgsColumn()
    packed.extend_packed(np.frombuffer(b"".join(r or b"" for r in want), np.uint8),
                         [len(r or b"") for r in want])
    assert list(packed) == want


@pytest.fixture
def spill_at_once(monkeypatch):
    """Every args column moves to its file at its first byte, and writes out every 16 bytes."""
    monkeypatch.setattr(model_args, "SPILL_BYTES", 0)
    monkeypatch.setattr(model_args, "SPILL_FLUSH", 16)
    monkeypatch.setattr(model_args, "FORGET_ROWS", 4)


@given(rows, rows, st.data())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_spilled_column_is_its_rows(spill_at_once, a, b, data):
    col = ArgsColumn(a)
    assert col.spilled == any(a)
    col.extend(ArgsColumn(b))
    want = a + b
    assert list(col) == want
    col.forget()                                        # pages dropped: the rows read back the same
    assert [col[i] for i in range(len(want))] == want
    buf, off = col.packed()
    assert buf.flags.writeable                          # the kernels' array type
    assert [buf[off[i]:off[i + 1]].tobytes() or None for i in range(len(want))] == want
    del buf, off                                        # (views pin the buffers: no growing under them)
    col.append(b'{"late":1}')                           # grows after being mapped
    assert col[len(want)] == b'{"late":1}' and list(col)[:-1] == want
    idx = data.draw(st.lists(st.integers(0, len(want)), max_size=30))
    assert list(col.take(idx)) == [(want + [b'{"late":1}'])[i] for i in idx]
    back = pickle.loads(pickle.dumps(col))              # merge's workers send traces back pickled
    assert list(back) == want + [b'{"late":1}']


def test_a_column_that_cannot_spill_stays_in_memory(spill_at_once, monkeypatch):
    def no_room(*_a, **_k):
        raise OSError(28, "No space left on device")
    col = ArgsColumn([b'{"a":1}', None])
    assert col.spilled
    monkeypatch.setattr(model_args, "_write_at", no_room)
    col.extend([b'{"b":22}'] * 5)                       # the next flush fails: back to memory
    assert not col.spilled
    assert list(col) == [b'{"a":1}', None] + [b'{"b":22}'] * 5
    monkeypatch.setattr(tempfile, "TemporaryFile", no_room)
    fresh = ArgsColumn([b'{"c":3}'] * 3)                # no file at all: never spills
    assert not fresh.spilled and list(fresh) == [b'{"c":3}'] * 3


@given(st.lists(rows, max_size=5))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_spilled_column_takes_big_batches_straight_to_its_file(spill_at_once, monkeypatch, batches):
    """extend_packed on a spilled column writes a batch of DIRECT_BYTES or more straight to the
    file (no copy kept in memory); mixed with small batches and appends, the rows are the same."""
    monkeypatch.setattr(model_args, "DIRECT_BYTES", 8)
    col = ArgsColumn([b'{"first":0}'])
    want = [b'{"first":0}']
    for k, batch in enumerate(batches):
        col.extend_packed(np.frombuffer(b"".join(r or b"" for r in batch), np.uint8),
                          [len(r or b"") for r in batch])
        want += batch
        if k % 2:
            col.append(b'{"x":1}')
            want.append(b'{"x":1}')
        assert col.spilled and not len(col._data) > model_args.SPILL_FLUSH
    assert list(col) == want


def test_a_big_batch_that_cannot_be_written_stays_in_memory(spill_at_once, monkeypatch):
    monkeypatch.setattr(model_args, "DIRECT_BYTES", 8)
    col = ArgsColumn([b'{"a":1}'])
    assert col.spilled
    monkeypatch.setattr(model_args, "_write_at", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "full")))
    rows_ = [b'{"big":"' + b"x" * 40 + b'"}', None, b'{"c":3}']
    col.extend_packed(np.frombuffer(b"".join(r or b"" for r in rows_), np.uint8), [len(r or b"") for r in rows_])
    assert not col.spilled
    assert list(col) == [b'{"a":1}'] + rows_


def test_fold_tracks_moves_events_and_renumbers():
    from traceconv.model import Trace, TrackKind
    t = Trace("test")
    p = t.process(1, "p")
    th = t.thread(p, 1, "main")
    a = t.new_track(TrackKind.ASYNC, "a", p)
    b = t.new_track(TrackKind.ASYNC, "b", p)
    t.add_slice(a.id, 0, 5, "x")
    t.add_slice(b.id, 1, 2, "y")
    t.add_instant(a.id, 3, "i")
    with pytest.raises(ValueError):
        t.fold_tracks({a.id: b.id, b.id: th.track})
    t.fold_tracks({a.id: th.track})
    assert [x.name for x in t.tracks if x.kind is TrackKind.ASYNC] == ["b"] and [x.id for x in t.tracks] == list(range(len(t.tracks)))
    assert list(t.slices.track) == [th.track, t.tracks[-1].id] and list(t.instants.track) == [th.track]
