"""The packed args column behaves as the list of rows it stands for."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

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
