"""The oracle itself: trace_processor's CSV read back typed, crashes caught."""

from __future__ import annotations

import pytest

import traceconv
import perfetto_oracle as tp


def test_csv_blocks_typed():
    out = ('"a","b","c","d"\n"[NULL]","x,y\n\n""z""",1.500000,3\n\n"e"\n\n"f"\n9007199254740993\n')
    assert tp._parse_csv(out) == [
        [{"a": None, "b": 'x,y\n\n"z"', "c": 1.5, "d": 3}],
        [],
        [{"f": 9007199254740993}],
    ]


@tp.requires_trace_processor
def test_loads_the_bundled_example(tmp_path):
    out = tmp_path / "t.pftrace"
    traceconv.convert("examples/mlagents_timers.json", out)
    tp.assert_loads(out)
    first = tp.run(out, "select count(*) as n from slice", "select name, depth from slice where depth = 0")
    assert first[0] == [{"n": 25}]
    assert {"name": "root", "depth": 0} in first[1]


@tp.requires_trace_processor
def test_a_file_it_cannot_read_is_a_crash(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"traceEvents": [')
    with pytest.raises(tp.PerfettoCrash, match="incomplete"):
        tp.assert_loads(bad)
