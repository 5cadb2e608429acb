"""Begin/end pairs into slices (rust/src/stacks.rs behind traceconv/readers/chrome/stacks.py): the
compiled pairing against the Python loop it replaced, and what a slice is made of."""

from __future__ import annotations

import json

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import traceconv
from traceconv._native import _core
from traceconv.readers.chrome import reader

NEVER = 2**31 - 1


def match_reference(rows: list[tuple[int, int, int, int, int, int]], last: int) -> dict:
    """The pairing as the reader's ``_match_begins`` stated it in Python (rows: ts, seq, kind,
    key, name, cat; 0 is no name)."""
    order = sorted(range(len(rows)), key=lambda r: (rows[r][0], rows[r][1]))
    stacks: dict[int, list[int]] = {}
    out: dict = {"begin": [], "end": [], "end_ts": [], "end_seq": [], "unmatched_end": 0, "cut_short": 0,
                 "left_open": 0}

    def close(b: int, e: int, ts: int, seq: int) -> None:
        for k, v in zip(("begin", "end", "end_ts", "end_seq"), (b, e, ts, seq)):
            out[k].append(v)

    for r in order:
        ts, seq, kind, key, name, cat = rows[r]
        stack = stacks.setdefault(key, [])
        if kind == 0:
            stack.append(r)
            continue
        k = len(stack) - 1
        if name or cat:
            while k >= 0 and not ((not name or rows[stack[k]][4] == name) and (not cat or rows[stack[k]][5] == cat)):
                k -= 1
        if k < 0:
            out["unmatched_end"] += 1
            continue
        while len(stack) > k + 1:
            close(stack.pop(), -1, ts, seq)
            out["cut_short"] += 1
        close(stack.pop(), r, ts, seq)
    for stack in stacks.values():
        for b in stack:
            close(b, -1, max(last, rows[b][0]), NEVER)
            out["left_open"] += 1
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 1), st.integers(0, 2), st.integers(-3, 2),
                          st.integers(0, 2)), max_size=40), st.integers(-5, 10))
def test_pairing_matches_the_python_reference(events, last):
    """Ties in time keep the input order; an end closes the innermost open begin of its name and
    category, cutting short those above it; pending names (negative ids) compare as any other."""
    rows = [(ts, seq, kind, key, name, cat) for seq, (ts, kind, key, name, cat) in enumerate(events)]
    cols = [np.array([r[i] for r in rows], t) for i, t in
            enumerate((np.int64, np.int64, np.uint8, np.int32, np.int32, np.int32))]
    got = _core.stacks.match(*cols, last, NEVER)
    want = match_reference(rows, last)
    for k, w in want.items():
        g = got[k]
        assert (g.tolist() if hasattr(g, "tolist") else g) == w, k


def _slices(text: str, tmp_path, monkeypatch) -> tuple[list[tuple], int]:
    """The slices of a trace of these events, and how many events the general decoder read."""
    general = []
    convert = reader.ChromeReader._convert_events

    def spy(self, events, seq0, seqs=None):
        general.extend(events)
        return convert(self, events, seq0, seqs)

    monkeypatch.setattr(reader.ChromeReader, "_convert_events", spy)
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + text + "]}", encoding="utf-8")
    tr = traceconv.load(p)
    s, names = tr.slices, tr.strings
    return sorted((names[s.name[i]], s.ts[i], s.dur[i], s.args[i]) for i in range(len(s.ts))), len(general)


def test_a_slice_takes_its_begins_args_its_ends_or_both_merged(tmp_path, monkeypatch):
    """The begin's args (their text kept); the end's when the begin has none; both merged, the
    end's keys last, when both have some -- an end's empty object too (the scanner compacts it
    to nothing, yet the rows still merge, re-written as orjson writes them).  The same through
    the general decoder (a rare key, `id2`, sends every row there)."""
    ev = [
        '{"ph": "B", "name": "a", "ts": 1, "pid": 1, "tid": 1, "args": {"x": 1, "y": 1.50}}',
        '{"ph": "E", "ts": 2, "pid": 1, "tid": 1}',
        '{"ph": "B", "name": "b", "ts": 3, "pid": 1, "tid": 1}',
        '{"ph": "E", "ts": 4, "pid": 1, "tid": 1, "args": {"z": [1, 2]}}',
        '{"ph": "B", "name": "c", "ts": 5, "pid": 1, "tid": 1, "args": {"x": 1, "y": 2}}',
        '{"ph": "E", "ts": 6, "pid": 1, "tid": 1, "args": {"y": 3, "w": "v"}}',
        '{"ph": "B", "name": "d", "ts": 7, "pid": 1, "tid": 1, "args": {"y": 1.50}}',
        '{"ph": "E", "ts": 8, "pid": 1, "tid": 1, "args": { }}',
    ]
    want = [("a", 1000, 1000, b'{"x":1,"y":1.50}'), ("b", 3000, 1000, b'{"z":[1,2]}'),
            ("c", 5000, 1000, b'{"x":1,"y":3,"w":"v"}'), ("d", 7000, 1000, b'{"y":1.5}')]
    assert _slices(",".join(ev), tmp_path, monkeypatch) == (want, 0)            # the scanner's
    general = [e.replace('"ph":', '"id2": 0, "ph":') for e in ev]
    got, decoded = _slices(",".join(general), tmp_path, monkeypatch)
    assert decoded == len(ev)
    # (the general decoder keeps the args' spaces; a merge is written as orjson writes it)
    assert [(n, t, d, json.loads(a)) for n, t, d, a in got] == [(n, t, d, json.loads(a)) for n, t, d, a in want]
    assert got[0][3] == b'{"x": 1, "y": 1.50}' and got[3][3] == b'{"y":1.5}'


def test_pairs_across_the_scanner_and_the_general_decoder(tmp_path, monkeypatch):
    """A begin read by the scanner and its end by the general decoder (an escaped name) pair on one
    stack: names compare by their text, whichever path interned them."""
    ev = [{"ph": "B", "name": "é", "ts": 1, "pid": 1, "tid": 2},
          {"ph": "B", "name": "inner", "ts": 2, "pid": 1, "tid": 2},
          {"ph": "E", "name": "é", "ts": 5, "pid": 1, "tid": 2}]
    text = json.dumps(ev, ensure_ascii=False)
    text = text[:text.rindex('"é"')] + '"\\u00e9"' + text[text.rindex('"é"') + 3:]
    got, decoded = _slices(text[1:-1], tmp_path, monkeypatch)
    assert decoded == 1                                         # the end alone
    assert [g[:3] for g in got] == [("inner", 2000, 3000), ("é", 1000, 4000)]
    tr = traceconv.load(tmp_path / "t.json")
    cut = [w.count for w in tr.diagnostics.warnings if w.code.value == "unmatched-begin"]
    assert cut == [1]                                           # inner, cut short by é's end


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
                     | st.text(), lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3),
                     max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(), _JSON, max_size=5))
def test_orjsons_text_of_a_merged_object_is_what_compact_args_keeps(merged):
    """Merged args are written as orjson writes them, without compact_args: what compact_args
    keeps of orjson's own text is that text unchanged (one line, read back as it was; infinite
    floats and lone surrogates cannot come out of orjson.loads), and nothing for `{}`."""
    from traceconv.readers.chrome.reader import compact_args

    text = orjson.dumps(merged)
    assert compact_args(text) == ((text if merged else None), False)
