"""The compiled Perfetto encoder (``traceconv._core.encode``, rust/src/encode/) against the writer's
Python reference.

Args rows are generated as JSON *text* (escapes or raw UTF-8, "\\/", whitespace, numbers written in
every legal shape, repeated keys), so that the encoder's JSON reader (serde_json) meets what real
files hold; every row
is encoded by the kernel and by the Python reference (``PythonArgs``: msgspec + orjson +
``value_fields``), both decoded with ``perfetto_trace_pb2`` and compared field by field -- which
oneof field, and floats bit for bit.  A row the kernel leaves to Python must be one the module
docstring says it leaves.
"""

from __future__ import annotations

import json
import math
import struct
import types
from collections import Counter

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import traceconv
from traceconv import _core
from traceconv.model import Trace
from traceconv.model.layout import nest
from traceconv.writers import perfetto as pw

enc = _core.encode

from timeline import assert_outputs_agree, assert_same_timeline, from_model, read_perfetto, sample_files


# ---------------------------------------------------------------- JSON text generation

class Num:
    """A number written as this exact JSON text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Num({self.text!r})"


class Obj:
    """A JSON object as (key, value) pairs: keys may repeat."""

    def __init__(self, pairs: list) -> None:
        self.pairs = pairs

    def __repr__(self) -> str:
        return f"Obj({self.pairs!r})"


EDGE_INTS = [0, 1, -1, 127, 128, -128, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1,
             2**64 - 1, 2**64, 10**19, 10**20, -(10**19), 10**30]
digits = st.one_of(st.text("0123456789", min_size=1, max_size=5), st.text("0123456789", min_size=1, max_size=24))


@st.composite
def number_text(draw) -> Num:
    """A JSON number in any legal shape: sign, leading/trailing zeros, fraction, exponent."""
    sign = draw(st.sampled_from(["", "-"]))
    whole = draw(st.one_of(st.just("0"), digits.map(lambda d: d.lstrip("0") or "0")))
    frac = draw(st.one_of(st.just(""), digits.map(lambda d: "." + d)))
    exp = draw(st.one_of(st.just(""), st.builds(lambda e, s, n: e + s + str(n), st.sampled_from("eE"),
                                                st.sampled_from(["", "+", "-"]),
                                                st.one_of(st.integers(0, 30), st.integers(0, 400)))))
    return Num(sign + whole + frac + exp)


surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
text = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(codec="utf-8"), max_size=40),
    st.text(st.sampled_from('"\\/\b\f\n\r\t\x00\x1f é中🚀\U0010ffff'), max_size=8),
    st.text(max_size=300),
)


def sometimes(often, rarely, one_in: int):
    """``rarely`` one time in ``one_in``, else ``often``."""
    return st.integers(1, one_in).flatmap(lambda i: rarely if i == 1 else often)


strings = sometimes(text, st.builds(lambda a, s, b: a + s + b, st.text(max_size=3), surrogates, st.text(max_size=3)),
                    4)       # now and then a lone surrogate (left to Python)
easy = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.sampled_from(EDGE_INTS[:13]), number_text(),
    text, st.sampled_from([Num("0.1"), Num("1e22"), Num("1e23"), Num("123456789012345e-22"), Num("-0.0"),
                           Num("-0"), Num("0e999"), Num("1.5"), Num("2.5e-3"), Num("100000000000000000000e-1")]),
)
hard = st.one_of(st.sampled_from(EDGE_INTS[13:]), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                 strings, st.sampled_from([Num("1.5e300"), Num("4.9e-324"), Num("1.000000000000000000000"),
                                           Num("1e400"), Num("-1e400"), Num("NaN"), Num("-Infinity"),
                                           Num("1" + "0" * 400)]))
scalars = sometimes(easy, hard, 12)
keys = sometimes(text, strings, 8)
def unique(pairs):
    return st.lists(pairs, max_size=6, unique_by=lambda kv: kv[0])


def nested(leaves, names):
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=6), unique(st.tuples(names, inner)).map(Obj)), max_leaves=30)


# rows the kernel must encode itself, and rows with anything at all
easy_rows = unique(st.tuples(st.one_of(text, st.sampled_from(["id", "Input Dims", "x"])), nested(easy, text))).map(Obj)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), unique(st.tuples(keys, inner)).map(Obj),
        st.lists(st.tuples(st.sampled_from(["a", "b", "k"]), inner), max_size=3).map(Obj),   # may repeat
    ),
    max_leaves=30,
)
rows = st.one_of(
    easy_rows,
    unique(st.tuples(keys, values)).map(Obj),
    st.lists(st.tuples(st.sampled_from(["id", "x"]), values), max_size=3).map(Obj),                  # may repeat
)


@st.composite
def styles(draw) -> dict:
    return {"ascii": draw(st.booleans()), "slash": draw(st.booleans()), "upper": draw(st.booleans()),
            "ws": draw(st.sampled_from(["", " ", "\n\t ", "\r\n"]))}


def _has_surrogate(s: str) -> bool:
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in s)


def dump_str(s: str, style: dict) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "/" and style["slash"]:
            out.append("\\/")
        elif ch in "\b\f\n\r\t":
            out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif o < 0x20 or (o >= 0x80 and style["ascii"]) or 0xD800 <= o <= 0xDFFF:
            units = [o] if o < 0x10000 else [0xD800 + ((o - 0x10000) >> 10), 0xDC00 + ((o - 0x10000) & 0x3FF)]
            out.extend(("\\u%04X" if style["upper"] else "\\u%04x") % u for u in units)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def dump(v, style: dict) -> str:
    ws = style["ws"]
    if isinstance(v, Obj):
        return "{" + ws + ("," + ws).join(dump_str(k, style) + ws + ":" + ws + dump(x, style)
                                           for k, x in v.pairs) + ws + "}"
    if isinstance(v, list):
        return "[" + ws + ("," + ws).join(dump(x, style) for x in v) + ws + "]"
    if isinstance(v, str):
        return dump_str(v, style)
    if isinstance(v, Num):
        return v.text
    return json.dumps(v)


# ---------------------------------------------------------------- what the kernel leaves to Python

def _num_left(f: float, negative: bool) -> bool:
    """A number the encoder leaves to Python: beyond the double range (serde_json refuses it), or a
    negative zero (serde_json reads ``-0`` and ``-0.0`` alike; orjson makes the first an int)."""
    return math.isinf(f) or (f == 0 and negative)


def left_to_python(v) -> bool:
    """The rows the module docstring of rust/src/encode/mod.rs says it leaves to the Python encoder."""
    if isinstance(v, Obj):
        keys = [k for k, _ in v.pairs]
        return (len(set(keys)) < len(keys) or any(_has_surrogate(k) for k in keys)
                or any(left_to_python(x) for _, x in v.pairs))
    if isinstance(v, list):
        return any(left_to_python(x) for x in v)
    if isinstance(v, str):
        return _has_surrogate(v)
    if isinstance(v, Num):
        if v.text.lstrip("-") in ("NaN", "Infinity"):
            return True
        return _num_left(float(v.text), v.text.startswith("-"))
    if isinstance(v, bool) or v is None:
        return False
    if isinstance(v, int):
        try:
            return _num_left(float(v), False)
        except OverflowError:
            return True
    if isinstance(v, float):
        return _num_left(v, math.copysign(1, v) < 0)
    raise TypeError(v)


# ---------------------------------------------------------------- decoding for comparison

def _canon(a, names: dict[int, bytes], strings: dict[int, bytes]):
    """A DebugAnnotation's value as (field, value) trees: interned names and strings resolved,
    doubles as their bits."""
    which = a.WhichOneof("value")
    if a.dict_entries:
        return ("dict", [((names[e.name_iid] if e.name_iid else e.name.encode("utf-8", "surrogatepass")),
                          _canon(e, names, strings)) for e in a.dict_entries])
    if a.array_values:
        return ("array", [_canon(x, names, strings) for x in a.array_values])
    if which == "string_value_iid":
        return ("string_value", strings[a.string_value_iid])
    if which == "string_value":
        return ("string_value", a.string_value.encode("utf-8", "surrogatepass"))
    if which == "double_value":
        return ("double_value", struct.pack("<d", a.double_value))
    if which is None:                   # null, {} and []: a name and no value
        return ("none", None)
    return (which, getattr(a, which))


def decode(encoded: bytes, names: dict[int, bytes], strings: dict[int, bytes]) -> list:
    te = pb.TrackEvent.FromString(encoded)
    assert len(te.ListFields()) <= 1, "annotation bytes hold nothing but debug_annotations"
    return [((names[a.name_iid] if a.name_iid else a.name.encode("utf-8", "surrogatepass")),
             _canon(a, names, strings)) for a in te.debug_annotations]


def _packed(texts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    data = np.frombuffer(bytearray(b"".join(texts)), np.uint8) if any(texts) else np.zeros(0, np.uint8)
    off = np.zeros(len(texts) + 1, np.int64)
    np.cumsum([len(t) for t in texts], out=off[1:])
    return data, off


def kernel_and_reference(texts: list[bytes], intern_all: bool):
    """(encoder bytes or None when left to Python, reference bytes, names, strings) per row."""
    data, off = _packed(texts)
    table = enc.ArgsTable(True)
    table.collect(data, off)
    count, _ = table.value_stats()
    if intern_all:                       # every string value as an iid, to exercise that path too
        table.set_value_iids(np.arange(1, len(count) + 1))
    iids, kdata, koff = table.keys()
    names = {int(iids[j]): bytes(kdata[koff[j]:koff[j + 1]]) for j in range(len(iids))}
    iids, vdata, voff = table.string_values()
    strings = {int(iids[j]): bytes(vdata[voff[j]:voff[j + 1]]) for j in range(len(iids))}
    assert len(strings) == (len(count) if intern_all else 0)
    out, out_off, flags = table.encode_args(data, off, np.arange(len(texts), dtype=np.int64),
                                            piece_rows=2 if intern_all else 1 << 40)
    python = pw.PythonArgs({b: i for i, b in names.items()})
    result = []
    for j, t in enumerate(texts):
        try:
            ref = python(t) if t else b""
        except (ValueError, TypeError, orjson.JSONDecodeError) as e:      # what the old writer raised too
            ref = e
        got = None if flags[j] else bytes(out[out_off[j]:out_off[j + 1]])
        result.append((got, ref))
    return result, names, strings


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(rows, styles()), min_size=1, max_size=6), st.booleans())
def test_kernel_annotations_decode_to_the_python_reference(batch, intern_all):
    objs, texts = [], []
    for obj, style in batch:
        if any(_has_surrogate(s) for s in _strings_of(obj)):
            style = {**style, "ascii": True}          # a lone surrogate can only be written escaped
        objs.append(obj)
        texts.append(dump(obj, style).encode("utf-8"))
    results, names, strings = kernel_and_reference(texts, intern_all)
    for obj, text, (got, ref) in zip(objs, texts, results):
        expect_python = left_to_python(obj)
        assert (got is None) == expect_python, (text, got)
        assert not isinstance(ref, Exception), (text, ref)     # the Python encoder takes any row
        if got is None:
            decode(ref, names, strings)                        # and what it writes decodes
            continue
        assert decode(got, names, strings) == decode(ref, names, strings), text
        # and the same values as Python's own JSON parser (float(text) for every double)
        assert _plain(decode(got, names, strings)) == _plain_json(text), text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_predicted_rows_are_the_bytes_of_the_full_read(data):
    """Both passes check a row against what the rows before it predict
    (rust/src/encode/args/predict.rs ``Pred``: the shapes of rows, each key's last value) before reading it.  Rows of a few shapes with values
    from small pools (so keys and values repeat, and sometimes do not; a value may hold the text of a
    key that follows, ``,"k":``): pass 1 must find the same keys, string values and counts, and pass 2
    give every row the bytes and the flag it gets read whole (``predict=False``), each pass on one
    thread and on two."""
    names = st.one_of(st.sampled_from(["a", "b", "id", "Input Dims"]), keys)
    shapes = data.draw(st.lists(st.lists(names, min_size=1, max_size=5), min_size=1, max_size=3))
    pools = {}
    for k in {k for shape in shapes for k in shape}:
        tricky = st.sampled_from([f',"{k2}":' for shape in shapes for k2 in shape]
                                 + [Num("1"), Num("2"), Num("12"), Num("-0"), "x", "y", [1], [2], {"x": 1}, {"y": 1}])
        pools[k] = data.draw(st.lists(sometimes(tricky, values, 3), min_size=1, max_size=3))
    style = {**data.draw(styles()), "ws": data.draw(st.sampled_from(["", "", "", " "]))}
    objs = [Obj([(k, data.draw(st.sampled_from(pools[k]))) for k in data.draw(st.sampled_from(shapes))])
            for _ in range(data.draw(st.integers(1, 8)))]
    texts = []
    for obj in objs:
        if any(_has_surrogate(x) for x in _strings_of(obj)):
            style = {**style, "ascii": True}
        texts.append(dump(obj, style).encode("utf-8"))
    picks = np.array(data.draw(st.lists(st.integers(0, len(texts) - 1), min_size=1, max_size=24)), np.int64)
    # pass 1 over the rows in that order (in two calls: predictions carry over), with and without
    # predictions, and with each call's rows in two halves on two threads (the second half's table
    # merged after each call): the same keys in the same order, the same string values and counts
    arr, off = _packed([texts[r] for r in picks.tolist()])
    cut = data.draw(st.integers(0, len(picks)))
    tables = []
    for predict, parallel_rows in ((True, 1 << 40), (False, 1 << 40), (True, 2)):
        table = enc.ArgsTable(True, predict)
        table.collect(arr, off[:cut + 1], parallel_rows)
        table.collect(arr, off[cut:], parallel_rows)
        tables.append(table)
    for what in ("keys", "value_stats", "string_values"):
        want = getattr(tables[1], what)()
        for t in (tables[0], tables[2]):
            assert all(np.array_equal(x, y) for x, y in zip(getattr(t, what)(), want)), what
    table, full, _ = tables
    count, _ = table.value_stats()
    if data.draw(st.booleans()):
        for t in tables:
            t.set_value_iids(np.arange(1, len(count) + 1))
    # pass 2: each row's bytes and flag those of the full read, also with the rows in pieces of 2
    # and 1, each with predictions of its own (as the writer's pieces have)
    rows = np.arange(len(picks), dtype=np.int64)
    want = full.encode_args(arr, off, rows)
    for piece_rows in (1 << 40, 2, 1):
        got = table.encode_args(arr, off, rows, piece_rows=piece_rows)
        for x, y in zip(got, want):
            assert np.array_equal(x, y), [texts[r] for r in picks.tolist()]


def test_predictions_do_not_hide_a_repeated_key_or_a_changed_value():
    """Rows ``a,b`` and ``b,a`` in turn, values that change under a key and values that hold the
    text of the next key: the row ``a,b,a`` goes to Python (which keeps the last value), and both
    passes give what they give reading every row whole (``predict=False``)."""
    texts = [b'{"a":1,"b":2}', b'{"b":2,"a":1}', b'{"a":1,"b":2,"a":3}', b'{"a":1,"b":2,"c":"x,\\"b\\":"}',
             b'{"a":3,"b":2}', b'{"a":1,"b":"s"}', b'{"a":1,"b":"t"}', b'{"a":1,"b":2,"c":",\\"b\\":"}',
             b'{"a":12,"b":2}', b'{"a":[1],"b":2}', b'{"a":[2],"b":2}', b'{"a":1 ,"b":2}']
    picks = [0, 1, 0, 1, 2, 3, 0, 2, 4, 0, 4, 5, 6, 5, 6, 7, 3, 8, 0, 9, 10, 9, 11, 0]
    arr, off = _packed([texts[r] for r in picks])
    got = []
    for predict in (True, False):
        table = enc.ArgsTable(True, predict)
        table.collect(arr, off)
        table.set_value_iids(np.arange(1, len(table.value_stats()[0]) + 1))
        got.append((table.keys(), table.value_stats(), table.encode_args(arr, off, np.arange(len(picks)))))
    flags = got[0][2][2]
    assert [i for i, f in enumerate(flags) if f] == [4, 7]
    for x, y in zip(got[0], got[1]):
        assert all(np.array_equal(a, b) for a, b in zip(x, y))


def test_a_value_that_differs_in_one_byte_is_read_again():
    """The predictions compare texts eight bytes at a time, the last eight overlapping the word
    before them (``starts`` in predict.rs): a key or a value of any length from 1 to 24 bytes that
    differs from the one before it in one byte, at any place, must be read again.  Both passes give
    what they give reading every row whole, and each row's pass-2 bytes are its own."""
    texts = []
    for n in range(1, 25):
        base = "v" * n
        for j in range(n):
            other = base[:j] + "w" + base[j + 1:]
            key = "k" * n
            other_key = key[:j] + "q" + key[j + 1:]
            texts += [b'{"%s":"%s","z":%d}' % (key.encode(), v.encode(), n) for v in (base, other, base)]
            texts += [b'{"%s":1,"z":2}' % k.encode() for k in (key, other_key, key)]
    arr, off = _packed(texts)
    rows = np.arange(len(texts), dtype=np.int64)
    got = []
    for predict in (True, False):
        table = enc.ArgsTable(True, predict)
        table.collect(arr, off, 1 << 40)
        table.set_value_iids(np.zeros(len(table.value_stats()[0]), np.int64))
        got.append((table, table.encode_args(arr, off, rows)))
    (table, enc_p), (full, enc_f) = got
    assert table.predicted_rows > 0
    for what in ("keys", "value_stats"):
        assert all(np.array_equal(x, y) for x, y in zip(getattr(table, what)(), getattr(full, what)()))
    for x, y in zip(enc_p, enc_f):
        assert np.array_equal(x, y)


def test_rows_of_known_shapes_are_taken_as_predicted():
    """Predictions are what keeps the passes fast, so check they are taken: Kineto-like rows of
    five shapes, whose first keys are one another's prefixes or of one length (``"External id"``,
    ``"External"``, ``"Extern"``, ``"Sequence"`` beside ``"External"``), interleaved.  Each shape's
    first row is read whole; from the second on a row is taken as predicted, and the table is the
    one of the full read.  A first key with an escaped quote or none at all is never predicted."""
    shapes = [b'{"External id":%d,"Record function id":0,"Ev Idx":%d}',
              b'{"External id":%d,"cbid":211,"correlation":%d}',
              b'{"External":%d,"device":0,"stream":%d}',
              b'{"Extern":%d,"queued":0,"context":%d}',
              b'{"Sequence":%d,"x":"y","z":%d}']
    texts = [shapes[i % 5] % (i, i * 7) for i in range(1000)]
    texts += [b'{"a\\"b":1}', b'{}', b'{"Extern":1}']
    arr, off = _packed(texts)
    table, full = enc.ArgsTable(True, True), enc.ArgsTable(True, False)
    table.collect(arr, off, 1 << 40)
    full.collect(arr, off, 1 << 40)
    assert table.predicted_rows == 995
    assert full.predicted_rows == 0
    for what in ("keys", "value_stats"):
        assert all(np.array_equal(x, y) for x, y in zip(getattr(table, what)(), getattr(full, what)()))


def _strings_of(v):
    if isinstance(v, Obj):
        for k, x in v.pairs:
            yield k
            yield from _strings_of(x)
    elif isinstance(v, list):
        for x in v:
            yield from _strings_of(x)
    elif isinstance(v, str):
        yield v


EMPTY_IN_LIST = [("", None)]            # {} or [] as a list's element: one nameless entry, no value


def _plain(decoded: list) -> list:
    """Decoded annotations as plain values: objects as lists of (key, value) tuples, doubles as
    their bits, booleans tagged (True == 1 in Python)."""
    def val(c):
        field, v = c
        if field == "dict":
            return [(k.decode("utf-8"), val(x)) for k, x in v]
        if field == "array":
            return [val(x) for x in v]
        if field == "string_value":
            return v.decode("utf-8")
        if field == "double_value":
            return ("f", v)
        if field == "bool_value":
            return ("b", v)
        if field == "none":
            return None
        return v
    return [(k.decode("utf-8"), val(c)) for k, c in decoded]


class _Pairs(list):
    pass


def _plain_json(text: bytes) -> list:
    """The same, from Python's own JSON parser (``float(text)`` for every double)."""
    def val(v, in_list=False):
        if isinstance(v, (_Pairs, list)) and not v:
            return EMPTY_IN_LIST if in_list else None             # {} and []: no value, as null
        if isinstance(v, _Pairs):
            return [(k, val(x)) for k, x in v]
        if isinstance(v, list):
            return [val(x, True) for x in v]
        if isinstance(v, bool):
            return ("b", v)
        if isinstance(v, float):
            return ("f", struct.pack("<d", v))
        if isinstance(v, int) and not -(2**63) <= v <= 2**64 - 1:
            return ("f", struct.pack("<d", float(v)))            # beyond 64 bits: the nearest double, as orjson
        return v
    return [(k, val(x)) for k, x in json.loads(text, object_pairs_hook=_Pairs)]


# ---------------------------------------------------------------- fixed cases

@pytest.mark.parametrize("text, field, value", [
    (b'{"a":0}', "int_value", 0),
    (b'{"a":-1}', "int_value", -1),
    (b'{"a":-9223372036854775808}', "int_value", -(2**63)),
    (b'{"a":9223372036854775807}', "int_value", 2**63 - 1),
    (b'{"a":9223372036854775808}', "uint_value", 2**63),
    (b'{"a":18446744073709551615}', "uint_value", 2**64 - 1),
    (b'{"a":1.5}', "double_value", 1.5),
    (b'{"a":1.2345678901234567}', "double_value", 1.2345678901234567),     # 17 significant digits
    (b'{"a":1e-23}', "double_value", 1e-23),
    (b'{"a":18446744073709551616}', "double_value", 2.0**64),                # beyond uint64: a float, as orjson
    (b'{"a":-9223372036854775809}', "double_value", -(2.0**63)),
    (b'{"a":0.00026199999999998447}', "double_value", 0.00026199999999998447),
    (b'{"a":1e22}', "double_value", 1e22),
    (b'{"a":1e23}', "double_value", 1e23),
    (b'{"a":0.1}', "double_value", 0.1),
    (b'{"a":"\\ud83d\\ude80 \\/ \\u00e9"}', "string_value", "\U0001f680 / \u00e9"),
    (b'{"a":true}', "bool_value", True),
    (b'{"a":null}', None, None),           # no value field: trace_processor shows no arg, as for JSON
    (b'{"a":{}}', None, None),
    (b'{"a":[]}', None, None),
    (b'{"a" : [ ] }', None, None),
])
def test_kernel_values(text, field, value):
    (got, ref), = kernel_and_reference([text], False)[0]
    a = pb.TrackEvent.FromString(got).debug_annotations[0]
    assert a.WhichOneof("value") == field
    if field is None:
        assert not a.dict_entries and not a.array_values and a.name_iid
        assert got == ref
        return
    assert getattr(a, field) == value
    if field == "double_value":
        assert struct.pack("<d", a.double_value) == struct.pack("<d", float(text[5:-1]))
    assert got == ref


@pytest.mark.parametrize("text", [
    b'{"a":1e400}',                       # beyond the double range
    b'{"a":-1e400}',
    b'{"a":NaN}',
    b'{"a":-0}',                          # serde_json reads -0 and -0.0 alike; orjson -0 as an int
    b'{"a":-0.0}',
    b'{"a":"\\ud800"}',                   # a lone surrogate
    b'{"\\udc00":1}',
    b'{"a":1,"a":2}',                     # a repeated key: the last value wins, as in Python
    b'{"a":{"b":1,"b":2}}',
    b'{"a":01}',                          # not JSON
    b'{"a":[1,]}',
    b'{"a":1} x',
    b'[1]',
    b'{"a":"\xff"}',                      # not UTF-8
    b'{"\xc3":1}',
    b'{"a":"\xed\xa0\x80"}',              # an encoded surrogate
])
def test_rows_left_to_python(text):
    ((got, ref),), _, _ = kernel_and_reference([text], False)
    assert got is None and not isinstance(ref, Exception)


def test_raw_control_characters_in_strings_are_kept(tmp_path):
    """Not JSON (serde_json and orjson want them escaped), but the numba encoder took a raw tab or
    newline in a string as it was: the Python encoder reads such rows with Python's own parser
    (strict=False) and writes them as their args, with no warning."""
    text = b'{"a":"x\ty","b":[1,"l\nm"],"c":{"d":18446744073709551616}}'
    ((got, ref),), names, strings = kernel_and_reference([text], False)
    assert got is None
    assert _plain(decode(ref, names, strings)) == [("a", "x\ty"), ("b", [1, "l\nm"]), ("c", [("d", ("f", struct.pack("<d", 2.0**64)))])]
    t = Trace("test")
    th = t.thread(t.process(1, "p"), 1, "t")
    t.add_slice(th.track, 0, 5, "s", None, text)
    traceconv.save(t, tmp_path / "c.pftrace")
    assert not t.diagnostics.warnings
    assert orjson.loads(read_perfetto(tmp_path / "c.pftrace").slices[0].args)["a"] == "x\ty"


@pytest.mark.parametrize("text, n", [
    (b'{"a":[null,1,{},[],2]}', 1),
    (b'{"a":{"x":null,"y":{},"z":[]},"b":null}', 2),
    (b'{"a":[[],[[]],[{}]],"b":{"c":{"d":null}}}', 2),
])
def test_null_and_empty_containers_have_no_value_at_any_depth(text, n):
    """No legacy_json_value anywhere (trace_processor aborts on one of null, {} or []): an entry with
    no value, which it skips, numbering an array's other elements as its JSON importer does."""
    ((got, ref),), names, strings = kernel_and_reference([text], False)
    assert got is not None and decode(got, names, strings) == decode(ref, names, strings)
    assert b"null" not in got and b"{}" not in got and b"[]" not in got
    assert _plain(decode(got, names, strings)) == _plain_json(text)
    te = pb.TrackEvent.FromString(got)

    def walk(a):
        assert not a.HasField("legacy_json_value")
        for x in list(a.dict_entries) + list(a.array_values):
            walk(x)
    for a in te.debug_annotations:
        walk(a)
    assert len(te.debug_annotations) == n


def _depth_row(d: int) -> bytes:
    return b'{"d":' + b"[" * d + b"1" + b"]" * d + b',"after":2}'


@pytest.mark.parametrize("d", [1, 58, 59, 60, 64, 65, 66, 1000, 100_000])
def test_rows_nested_past_the_limit(d):
    """The kernel takes rows up to its stack's depth; the Python encoder any depth, without
    recursion: containers beyond argtext.MAX_DEPTH (64) become a string of their JSON text."""
    from traceconv.writers import argtext
    text = _depth_row(d)
    (got, ref), = kernel_and_reference([text], False)[0]
    assert (got is None) == (d >= enc.MAX_DEPTH), d
    if got is not None:
        assert got == ref
    a, after = pb.TrackEvent.FromString(ref).debug_annotations     # pb2 decodes it: < 100 levels
    assert after.int_value == 2
    levels = 0
    while len(a.array_values) == 1:
        a = a.array_values[0]
        levels += 1
    assert levels == min(d, argtext.MAX_DEPTH)
    if d <= argtext.MAX_DEPTH:
        assert a.int_value == 1
    else:
        k = d - argtext.MAX_DEPTH
        assert a.string_value == "[" * k + "1" + "]" * k
    python = pw.PythonArgs({})
    python(text)
    assert python.counts["deep"] == (1 if d > argtext.MAX_DEPTH else 0)


@pytest.mark.parametrize("text, want, kind", [
    (b'{"a":"x\\\\ud800y"}', {"a": "x\\ud800y"}, None),                 # an escaped backslash: no surrogate
    (b'{"a":"x\\ud800y"}', {"a": "x\ufffdy"}, "surrogate"),
    (b'{"\\udc00":1}', {"\ufffd": 1}, "surrogate"),
    (b'{"a":"\\ud83d\\ude80"}', {"a": "\U0001f680"}, None),
    (b'{"a":1e400,"b":-1e999}', {"a": 1.7976931348623157e308, "b": -1.7976931348623157e308}, "huge"),
    (b'{"a":1' + b"0" * 400 + b'}', {"a": 1.7976931348623157e308}, "huge"),
    (b'{"a":NaN,"b":Infinity,"c":-Infinity}', {"a": "NaN", "b": "Infinity", "c": "-Infinity"}, "nonjson"),
    (b'{"a":1', {"args": '{"a":1'}, "invalid"),
    (b'[1,2]', {"args": "[1,2]"}, "invalid"),
    (b'{"a":"x\xffy"}', {"a": "x\ufffdy"}, "utf8"),
    (b'{"a":1,"a":2,"":3}', {"a": 2, "": 3}, None),
    (b'{"a":-0,"b":-0.0,"c":1e308,"d":18446744073709551616}', {"a": 0, "b": -0.0, "c": 1e308, "d": 2.0**64}, None),
])
def test_rows_no_client_loads_as_they_are(text, want, kind):
    """What argtext.clean makes of them: the Python encoder's input, and the JSON writer's output."""
    from collections import Counter
    from traceconv.writers import argtext
    counts = Counter()
    got = argtext.clean(text, counts)
    assert got == want and repr(got) == repr(want)               # repr: -0.0 is not 0.0
    assert {k for k, n in counts.items() if n} == ({kind} if kind else set())
    assert orjson.loads(argtext.dumps(got)) == want                 # the JSON writer's text parses
    assert repr(orjson.loads(argtext.dumps(got))) == repr(want)
    python = pw.PythonArgs({})
    ann = python(text)
    assert python.counts == counts
    decoded = {a.name: a for a in pb.TrackEvent.FromString(ann).debug_annotations}
    assert list(decoded) == list(want)


@pytest.mark.parametrize("text, flags", [
    (b'{"a":1}', 0),
    (b'{"a":"NaN Infinity 1e400 \\\\ud800"}', 0),                     # inside a string: nothing
    (b'{"a":"\\ud800"}', enc.SCREEN_SURROGATE),
    (b'{"a":"\\uDE80"}', enc.SCREEN_SURROGATE),
    (b'{"a":"\\u00e9"}', 0),
    (b'{"a":NaN}', enc.SCREEN_SUSPECT),
    (b'{"a":-Infinity}', enc.SCREEN_SUSPECT),
    (b'{"a":1e400}', enc.SCREEN_SUSPECT),
    (b'{"a":1.5E+308}', enc.SCREEN_SUSPECT),
    (b'{"a":1e99,"b":true,"c":false,"d":null}', 0),
    (b'{"a":' + b"9" * 300 + b'}', enc.SCREEN_SUSPECT | enc.SCREEN_LONG),
    (b'{"a":0.00003300000000000525}', enc.SCREEN_LONG),           # 20+ digits: Perfetto misreads
    (b'{"a":18446744073709551615}', enc.SCREEN_LONG),
    (b'{"a":1234567890123456789,"b":0.123456789012345678e-5}', 0),     # 19 digits
    (b'{"a":"00000000000000000000000"}', 0),
    ('{"é中🚀":"é中🚀\U0010ffff"}'.encode(), 0),                        # well-formed UTF-8
    (b'{"a":"\xff"}', enc.SCREEN_SUSPECT),                           # not UTF-8
    (b'{"a":"\xc3"}', enc.SCREEN_SUSPECT),                           # cut
    (b'{"a":"\xed\xa0\x80"}', enc.SCREEN_SUSPECT),                 # an encoded surrogate
    (b'{"a":"\xe0\x80\x80"}', enc.SCREEN_SUSPECT),                 # overlong
    (b'{"a":1\xc3\xa9}', enc.SCREEN_SUSPECT),                       # outside a string
    (_depth_row(64), 0),
    (_depth_row(65), enc.SCREEN_DEEP),
    (b'{"a":"' + b"[" * 100 + b'"}', 0),
])
def test_screen_finds_the_rows_a_json_output_cannot_copy(text, flags):
    data, off = _packed([text, b"", b'{"x":1}'])
    assert enc.screen_args(data, off, 64).tolist() == [flags, 0, 0]


def test_nested_names_are_interned_and_long_values_get_long_lengths():
    big = "x" * 300
    text = orjson.dumps({"outer": {"inner": [big, {"deep": big}], "n": list(range(100))}})
    (got, ref), = kernel_and_reference([text], False)[0]
    a = pb.TrackEvent.FromString(got).debug_annotations[0]
    assert a.name_iid and a.dict_entries[0].name_iid and not a.dict_entries[0].name
    assert a.dict_entries[0].array_values[1].dict_entries[0].name_iid
    assert len(a.dict_entries[1].array_values) == 100


# ---------------------------------------------------------------- whole outputs

def test_python_rows_and_kernel_rows_in_one_output(tmp_path):
    """Rows the kernel leaves alone (long floats, big ints, repeated keys) beside rows it encodes."""
    t = Trace("test")
    th = t.thread(t.process(1, "p"), 1, "t")
    rows = [b'{"x": 1, "s": "float"}', b'{"x": 0.30000000000000004}', b'{"x": 123456789012345678901234567890}',
            b'{"x": 1, "x": 2}', b'{"y": {"z": [1, 2.5, "float"]}}', b'{"only python": 1.2345678901234567}',
            None, b'{"s": "float", "t": "\\u00e9"}']
    for i, r in enumerate(rows * 3):
        t.add_slice(th.track, i * 10, 5, f"s{i % 3}", "cat", r)
        t.add_instant(th.track, i * 10 + 7, "i", None, r)
    m = assert_outputs_agree(t, tmp_path)
    got = read_perfetto(tmp_path / "o.pftrace")
    assert sorted(orjson.loads(s.args).get("x", 0) for s in got.slices if "x" in s.args)[-1] == 1.2345678901234568e29
    assert len(m.slices) == len(got.slices) == 24


def test_packets_with_long_annotations(tmp_path):
    t = Trace("test")
    th = t.thread(t.process(1, "p"), 1, "t")
    for i in range(50):
        t.add_slice(th.track, i * 10, 5, "s", None, {"big": "y" * (3000 if i % 7 == 0 else 10), "i": i})
    assert_outputs_agree(t, tmp_path)


def test_interned_data_precedes_every_use(tmp_path):
    """On a real Kineto trace: every interned entry is defined before the first event, once, and
    every id an event uses -- names, categories, annotation names at any depth, string values -- is
    defined."""
    src = max((p for p in sample_files() if p.name.endswith((".pt.trace.json", ".pt.trace.json.gz"))),
              key=lambda p: p.stat().st_size, default=None)
    if src is None:
        pytest.skip("no Kineto fixture")
    traceconv.save(traceconv.load(src), tmp_path / "k.pftrace")
    tr = pb.Trace.FromString((tmp_path / "k.pftrace").read_bytes())
    first_event = next(i for i, p in enumerate(tr.packet) if p.HasField("track_event"))
    defined: dict[str, Counter] = {k: Counter() for k in ("names", "cats", "ann", "str")}
    for i, p in enumerate(tr.packet):
        if p.HasField("interned_data"):
            assert i < first_event, "interned data after the first event"
            assert p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            assert p.ByteSize() < (1 << 20) + 1024
            d = p.interned_data
            defined["names"].update(e.iid for e in d.event_names)
            defined["cats"].update(e.iid for e in d.event_categories)
            defined["ann"].update(e.iid for e in d.debug_annotation_names)
            defined["str"].update(e.iid for e in d.debug_annotation_string_values)
    assert all(c and max(c.values()) == 1 for k, c in defined.items() if k != "str"), "an id defined twice"
    used: dict[str, set] = {k: set() for k in defined}

    def walk(a):
        if a.name_iid:
            used["ann"].add(a.name_iid)
        if a.HasField("string_value_iid"):
            used["str"].add(a.string_value_iid)
        for e in list(a.dict_entries) + list(a.array_values):
            walk(e)

    for p in tr.packet[first_event:]:
        assert not p.HasField("interned_data")
        te = p.track_event
        if te.name_iid:
            used["names"].add(te.name_iid)
        used["cats"].update(te.category_iids)
        for a in te.debug_annotations:
            walk(a)
    for k in used:
        assert used[k] <= set(defined[k]), k
    assert used["names"] == set(defined["names"]) and used["cats"] == set(defined["cats"])
    assert any(len(e.dict_entries) for p in tr.packet for e in p.track_event.debug_annotations) or used["ann"]


# ---------------------------------------------------------------- incremental timestamps

def test_timestamps_are_deltas_on_the_sequence_clock(tmp_path):
    t = Trace("test")
    th = t.thread(t.process(1, "p"), 1, "t")
    t0 = 1_763_700_000_123_456_789
    for i in range(100):
        t.add_slice(th.track, t0 + i * 1000, 500 + i, "s")
    traceconv.save(t, tmp_path / "d.pftrace")
    tr = pb.Trace.FromString((tmp_path / "d.pftrace").read_bytes())
    first = next(p for p in tr.packet if p.trusted_packet_sequence_id == pw.EVENTS_SEQ_ID)  # (the events' sequence)
    assert first.first_packet_on_sequence and first.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    assert first.trace_packet_defaults.timestamp_clock_id == pw.SEQ_CLOCK
    clocks = {c.clock_id: c for c in first.clock_snapshot.clocks}
    boot, seq = clocks[pb.BuiltinClock.BUILTIN_CLOCK_BOOTTIME], clocks[pw.SEQ_CLOCK]
    assert seq.is_incremental and not boot.is_incremental and boot.timestamp == seq.timestamp == t0
    assert not seq.unit_multiplier_ns                    # ns
    events = [p for p in tr.packet if p.HasField("track_event")]
    assert all(not p.HasField("timestamp_clock_id") for p in events)
    assert all(p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE for p in events)
    assert max(p.timestamp for p in events) < 2000          # deltas, not epoch times
    assert t0 + sum(p.timestamp for p in events) == t0 + 99 * 1000 + 599
    assert sorted(s.ts for s in read_perfetto(tmp_path / "d.pftrace").slices) == [t0 + i * 1000 for i in range(100)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 10**6), st.sampled_from("sic")), min_size=1,
                max_size=40))
def test_absolute_times_come_back_exactly(tmp_path_factory, events):
    """Deltas on the sequence clock, resolved the way trace_processor does, give back every
    absolute time of the model (any magnitude, ties, zero durations)."""
    tmp = tmp_path_factory.mktemp("t")
    t = Trace("test")
    p = t.process(1, "p")
    th = t.thread(p, 1, "t")
    from traceconv.model import TrackKind
    c = t.track(TrackKind.COUNTER, "c", p)
    for ts, dur, kind in events:
        if kind == "s":
            t.add_slice(th.track, ts, dur, "s", None, {"d": dur})
        elif kind == "i":
            t.add_instant(th.track, ts, "i")
        else:
            t.add_counter(c.id, ts, dur / 3)
    traceconv.save(t, tmp / "o.pftrace")          # (Chrome JSON's µs text has its own limits: not tested here)
    got = read_perfetto(tmp / "o.pftrace")
    assert_same_timeline(from_model(t), got)
    assert Counter(s.ts for s in got.slices) == Counter(ts for ts, _, k in events if k == "s")
    assert Counter(i[3] for i in got.instants) == Counter(ts for ts, _, k in events if k == "i")
    assert Counter(x[2] for x in got.counters) == Counter(ts for ts, _, k in events if k == "c")


@pytest.mark.parametrize("piece", [4096, 97, 1])
def test_two_threads_write_the_same_bytes_as_one(tmp_path, monkeypatch, piece):
    """On two threads pass 2 cuts a step in pieces (each with its own predictions) that the
    threads take in turn, each piece's rows encoded and its packets made by one task; rows left to
    the Python encoder (here: nested past the compiled encoder's depth, in some pieces and not in
    others) are encoded between the two, and their pieces' packets made after.  The output is the
    same, byte for byte, with pieces of any size."""
    t = Trace("test")
    th = t.thread(t.process(1, "p"), 1, "t")
    deep: dict = {"leaf": 1}
    for _ in range(pw._enc.MAX_DEPTH + 2):
        deep = {"d": deep}
    for i in range(3000):
        t.add_slice(th.track, i * 10, 5, f"s{i % 7}", "c", {"i": i, "s": ["float", "", "x" * (i % 200)],
                                                               "f": i / 4, "n": {"k": i % 3}} if i % 5 else
                    deep if i in (500, 1495, 2490) else None)
        t.add_instant(th.track, i * 10 + 1, "m", None, {"Bytes": i} if i % 2 else {"Bytes": 0.1 * i})
    monkeypatch.setattr(pw, "PARALLEL_ROWS", 16)
    monkeypatch.setattr(pw, "PIECE_EVENTS", piece)
    monkeypatch.setattr(pw, "_STEP", 1000)
    left: list[bytes] = []                    # the rows left to Python
    real = pw.PythonArgs.__call__
    monkeypatch.setattr(pw.PythonArgs, "__call__", lambda self, raw: left.append(raw) or real(self, raw))
    monkeypatch.setattr(pw.os, "cpu_count", lambda: 2)
    traceconv.save(t, tmp_path / "two.pftrace")
    assert len(left) == 3 and all(raw.startswith(b'{"d":{"d":') for raw in left)
    monkeypatch.setattr(pw.os, "cpu_count", lambda: 1)
    traceconv.save(t, tmp_path / "one.pftrace")
    assert (tmp_path / "two.pftrace").read_bytes() == (tmp_path / "one.pftrace").read_bytes()
    assert_outputs_agree(t, tmp_path)


def test_the_steps_share_two_buffers_only_when_written_to_a_file(monkeypatch, tmp_path):
    """A file's writer is done with a step's bytes when write() returns, so the encoder hands the
    steps' packets out through two buffers in turn (a step's bytes are written on another thread
    while the next step fills the other one); a file object that may keep what it is given (here:
    it keeps every view) gets each step's bytes in a buffer of their own.  Both are the same bytes."""
    t = Trace("test")
    th = t.thread(t.process(1, "p"), 1, "t")
    for i in range(3000):
        t.add_slice(th.track, i * 10, 5, f"s{i % 7}", "c", {"i": i, "s": "x" * (i % 50)})
    nest(t)
    monkeypatch.setattr(pw, "_STEP", 500)
    monkeypatch.setattr(pw.os, "cpu_count", lambda: 2)     # (the writer's second thread: on any machine)
    handed: list = []                         # the buffer each step's packets came in (kept alive)

    class Encoder:                            # the compiled encoder, watched
        def __init__(self, *a, **k):
            self.enc = real(*a, **k)

        def run(self, *a):
            buf, n = self.enc.run(*a)
            handed.append(buf)
            return buf, n

    real = pw._enc.EventEncoder
    monkeypatch.setattr(pw, "_enc", types.SimpleNamespace(**{**vars(pw._enc), "EventEncoder": Encoder}))

    class Keeper:
        def __init__(self):
            self.kept: list = []

        def write(self, b):
            self.kept.append(b)
            return len(b)

    keeper = Keeper()
    pw.write(t, keeper)
    steps = len(handed)
    assert steps >= 12 and len({id(v.obj) for v in keeper.kept if isinstance(v, memoryview)}) == steps
    with open(tmp_path / "out.pftrace", "wb") as f:
        pw.write(t, f)
    to_file = handed[steps:]
    assert len(to_file) == steps and len({id(b) for b in to_file}) <= 4      # (each grown at most once)
    assert all(a is not b for a, b in zip(to_file, to_file[1:])), "a buffer filled while its write may go on"
    assert (tmp_path / "out.pftrace").read_bytes() == b"".join(bytes(v) for v in keeper.kept)


@pytest.mark.parametrize("f, text", [
    (0.00026199999999998447, "2.6199999999998447e-04"),     # 20 digits written plainly: exponent form
    (3.300000000000525e-05, "3.300000000000525e-05"),
    (0.1, "0.1"), (1e22, "1e+22"), (-0.0, "-0.0"), (123456.75, "123456.75"),
    (1.7976931348623157e308, "1.7976931348623157e+308"), (5e-324, "5e-324"),
])
def test_rewritten_floats_are_the_same_double_in_fewer_than_20_digits(f, text):
    from traceconv.writers import argtext
    got = argtext.dumps({"a": f}).decode()
    assert got == '{"a":%s}' % text
    assert orjson.loads(got)["a"] == f and sum(c.isdigit() for c in text.partition("e")[0]) < 20
