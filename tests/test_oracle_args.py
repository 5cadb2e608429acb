"""Args as Perfetto shows them, in the style of Perfetto's own diff tests: a tiny input
(``fixtures/args/special_args.json``: one slice per kind of value), one SQL query over
trace_processor's ``args`` table, the expected rows.

For every case: the rows of the .pftrace (keys under ``debug.``), the rows of the Chrome JSON
output (keys under ``args.``), and the rows of the raw input file itself, keys compared without
that prefix.  Where the formats cannot agree -- a limit of Perfetto, not of the writers -- the
case says why in :data:`PFTRACE_VS_JSON` / :data:`OUTPUT_VS_RAW`, and its own rows are still
asserted exactly.

The encodings (``writers/perfetto.py`` ``value_fields``, ``rust/src/encode/args.rs``, ``writers/argtext.py``):

=================  ==================================================  ===============================
value              .pftrace DebugAnnotation                            args table (both outputs)
=================  ==================================================  ===============================
null, {}, []       a name and no value                                 no row (as Perfetto's JSON
                                                                       import of the same JSON)
{} / [] in a list  one nameless ``dict_entries`` entry with no value   no row; takes its list index
int in int64       ``int_value``                                       int
(int64, uint64]    ``uint_value``                                      uint, display exact
beyond uint64      ``double_value`` (nearest double, as orjson reads)  real
double             ``double_value``                                    real, bit-exact
beyond double      ``double_value`` +-1.7976931348623157e308 (counted) real
string             ``string_value`` / ``string_value_iid`` (UTF-8)     string
lone surrogate     U+FFFD in the string (counted)                      string with U+FFFD
bool               ``bool_value``                                      bool
nested             ``dict_entries`` / ``array_values``                 ``a.b`` / ``a[0]`` keys
deeper than 64     the container at level 65 as a string of its JSON   string of JSON text
                   text (counted)
NaN / Infinity     the strings "NaN" / "Infinity" (counted)            string
=================  ==================================================  ===============================
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest

import perfetto_oracle as tp
import traceconv
from traceconv.model import Trace
from traceconv.writers import argtext

pytestmark = tp.requires_trace_processor

FIXTURE = Path(__file__).parent / "fixtures" / "args" / "special_args.json"

ARGS_SQL = f"""
select {tp.text("s.name")} as name, {tp.text("a.flat_key")} as flat_key, {tp.text("a.key")} as key,
  a.value_type as type,
  {tp.text("case when a.value_type = 'real' then printf('%!.17g', a.real_value) else a.display_value end")}
    as value
from slice s join args a using(arg_set_id)
where s.category = 'args'
order by s.ts, a.id
"""

# Rows the model holds that no raw JSON file can (not JSON): added to the model only.
EXTRA = [("not_json", b'{"nan":NaN,"inf":Infinity,"ninf":-Infinity,"after":1}')]

DEEP_O = 1000 - argtext.MAX_DEPTH       # levels left in the string of the deep object
DEEP_L = 5000 - argtext.MAX_DEPTH

# (flat_key, key, type, value) per case, keys without their "debug." / "args." prefix
EXPECTED: dict[str, list[tuple[str, str, str, str]]] = {
    "null": [("after", "after", "int", "1")],
    "empty_object": [("after", "after", "int", "1")],
    "empty_list": [("after", "after", "int", "1")],
    # a null in a list takes no index, {} and [] take one; none shows a row
    "empties_inside": [("l", "l[0]", "int", "1"), ("l", "l[3]", "int", "2"), ("o.d", "o.d", "int", "3")],
    "nested": [("o.x", "o.x", "int", "1"), ("o.y.z", "o.y.z", "string", "s"),
               ("l", "l[0]", "int", "1"), ("l", "l[1][0]", "int", "2"), ("l", "l[1][1]", "int", "3"),
               ("l.k", "l[2].k", "string", "v"),
               ("dims", "dims[0][0]", "int", "2"), ("dims", "dims[0][1]", "int", "3"),
               ("dims", "dims[1][0]", "int", "3"), ("dims", "dims[1][1]", "int", "4")],
    "deep_object_1000": [("d" + ".k" * argtext.MAX_DEPTH, "d" + ".k" * argtext.MAX_DEPTH, "string",
                          '{"k":' * DEEP_O + "1" + "}" * DEEP_O),
                         ("after", "after", "int", "1")],
    "deep_list_5000": [("d", "d" + "[0]" * argtext.MAX_DEPTH, "string", "[" * DEEP_L + "1" + "]" * DEEP_L),
                       ("after", "after", "int", "1")],
    "int64": [("zero", "zero", "int", "0"), ("negzero", "negzero", "int", "0"), ("one", "one", "int", "1"),
              ("neg", "neg", "int", "-1"), ("max", "max", "int", "9223372036854775807"),
              ("min", "min", "int", "-9223372036854775808")],
    "beyond_int64": [("u64", "u64", "uint", "18446744073709551615"),
                     ("u64p1", "u64p1", "real", "1.8446744073709552e+19"),
                     ("huge", "huge", "real", "1.2345678901234568e+29")],
    "floats": [("f", "f", "real", "1.5"), ("neg", "neg", "real", "-2.25"),
               ("third", "third", "real", "0.33333333333333331"), ("big", "big", "real", "9.9999999999999995e+307"),
               ("mz", "mz", "real", "0.0"), ("exp", "exp", "real", "1.4999999999999999e-07"),
               ("e22", "e22", "real", "1.0e+22")],
    "subnormal": [("tiny", "tiny", "real", "4.9406564584124654e-324")],
    "long_decimal": [("v", "v", "real", "3.3000000000005247e-05"), ("w", "w", "real", "0.10000000000000001")],
    "strings": [("q", "q", "string", 'a"b'), ("bs", "bs", "string", "c\\d"), ("nl", "nl", "string", "l1\nl2"),
                ("tab", "tab", "string", "\t"), ("u", "u", "string", "é中"), ("raw", "raw", "string", "é中🚀"),
                ("slash", "slash", "string", "/"), ("empty", "empty", "string", "")],
    "surrogate_pair": [("pair", "pair", "string", "🚀"), ("after", "after", "int", "1")],
    "bools": [("t", "t", "bool", "true"), ("f", "f", "bool", "false")],
    # an empty key; a repeated key keeps its last value (as Python, orjson and Perfetto's JSON import)
    "keys": [("", "", "int", "1"), ("d", "d", "int", "2"), ("sp ace", "sp ace", "int", "4")],
    "dotted_key": [("a_b", "a_b", "int", "3")],
    "lone_surrogate": [("s", "s", "string", "a\ufffdb"), ("after", "after", "int", "1")],
    "out_of_range": [("inf", "inf", "real", "1.7976931348623157e+308"),
                     ("ninf", "ninf", "real", "-1.7976931348623157e+308"), ("after", "after", "int", "1")],
    "instant_null": [("x", "x", "int", "1")],
    "not_json": [("nan", "nan", "string", "NaN"), ("inf", "inf", "string", "Infinity"),
                 ("ninf", "ninf", "string", "-Infinity"), ("after", "after", "int", "1")],
}

# Where the .json output's rows differ from the .pftrace's: Perfetto's limits, and what its JSON
# import shows instead.
PFTRACE_VS_JSON = {
    "beyond_int64": ("Perfetto's JSON importer misreads integers beyond int64 (18446744073709551615 -> -1.0); "
                     "the .json keeps the exact digits of one within uint64 for other readers",
                     [("u64", "u64", "real", "-1.0"), ("u64p1", "u64p1", "real", "1.8446744073709552e+19"),
                      ("huge", "huge", "real", "1.2345678901234568e+29")]),
    "subnormal": ("Perfetto's JSON importer reads a subnormal double as 0",
                  [("tiny", "tiny", "real", "0.0")]),
    "long_decimal": ("Perfetto's JSON importer does not round every decimal correctly: the .json's "
                     "3.300000000000525e-05 (the shortest form of the double) reads 1 ulp off",
                     [("v", "v", "real", "3.3000000000005254e-05"), ("w", "w", "real", "0.10000000000000001")]),
    "dotted_key": ("a '.' in a debug annotation's name is shown as '_' (a JSON key's '.' nests)",
                   [("a.b", "a.b", "int", "3")]),
}
# Where the raw input's rows differ from the .json output's.
OUTPUT_VS_RAW = {
    "deep_object_1000": "deeper than 64 levels: the outputs keep the rest as JSON text in a string",
    "deep_list_5000": "deeper than 64 levels: the outputs keep the rest as JSON text in a string",
    "surrogate_pair": "Perfetto's JSON importer drops every arg of an event with an escaped surrogate pair; "
                      "the .json output writes the character as UTF-8",
    "lone_surrogate": "Perfetto's JSON importer drops every arg of an event with a lone surrogate escape",
    "out_of_range": "Perfetto's JSON importer drops every arg of an event with a number beyond the double range",
    "not_json": "not in the raw file (it is not JSON)",
    "beyond_int64": "Perfetto's JSON importer misreads a number of 20+ digits (2^64 reads as 0.0): the .json "
                    "output writes one beyond uint64 as the nearest double",
    "long_decimal": "Perfetto's JSON importer misreads a number of 20+ digits (0.00003300000000000525 reads "
                    "as 0.000425): the .json output writes the double's shortest form",
}


def _fixture_rows() -> list[tuple[str, str, int, bytes]]:
    """(phase, name, ts in µs, args text exactly as in the file) per event line."""
    out = []
    for line in FIXTURE.read_text(encoding="utf-8").splitlines()[1:-1]:
        line = line.rstrip(",")
        name = re.search(r'"name":"([^"]+)"', line).group(1)
        ts = int(re.search(r'"ts":(\d+)', line).group(1))
        args = re.search(r'"args":(\{.*\})\}$', line).group(1).encode("utf-8")
        out.append(("i" if '"ph":"i"' in line else "X", name, ts, args))
    return out


def build() -> Trace:
    t = Trace("args")
    th = t.thread(t.process(1, "p"), 1, "t")
    rows = _fixture_rows()
    for ph, name, ts, args in rows:
        if ph == "i":
            t.add_instant(th.track, ts * 1000, name, "args", args)
        else:
            t.add_slice(th.track, ts * 1000, 5000, name, "args", args)
    last = max(ts for _, _, ts, _ in rows)
    for k, (name, args) in enumerate(EXTRA, 1):
        t.add_slice(th.track, (last + 10 * k) * 1000, 5000, name, "args", args)
    return t


def _by_case(rows: list[dict], prefix: str) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for r in rows:
        fk, key = r["flat_key"], r["key"]
        assert fk.startswith(prefix) and key.startswith(prefix), r
        out.setdefault(r["name"], []).append((fk[len(prefix):], key[len(prefix):], r["type"], r["value"]))
    return out


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    d = tmp_path_factory.mktemp("args")
    trace = build()
    traceconv.save(trace, d / "a.pftrace")
    traceconv.save(trace, d / "a.json")
    with ThreadPoolExecutor(3) as pool:
        runs = {k: pool.submit(tp.run, p, tp.PROBLEMS_SQL, ARGS_SQL)
                for k, p in (("pftrace", d / "a.pftrace"), ("json", d / "a.json"), ("raw", FIXTURE))}
        got = {k: f.result() for k, f in runs.items()}
    for k, (problems, _) in got.items():
        assert not problems, (k, problems)
    return {"pftrace": _by_case(got["pftrace"][1], "debug."), "json": _by_case(got["json"][1], "args."),
            "raw": _by_case(got["raw"][1], "args."), "trace": trace, "dir": d}


CASES = list(EXPECTED)


@pytest.mark.parametrize("case", CASES)
def test_pftrace_args(tables, case):
    assert tables["pftrace"].get(case, []) == EXPECTED[case]


@pytest.mark.parametrize("case", CASES)
def test_json_args(tables, case):
    want = PFTRACE_VS_JSON[case][1] if case in PFTRACE_VS_JSON else EXPECTED[case]
    assert tables["json"].get(case, []) == want


@pytest.mark.parametrize("case", CASES)
def test_raw_input_args(tables, case):
    """What Perfetto makes of the raw file: the .json output's rows, but where the outputs are
    better than the raw file (OUTPUT_VS_RAW)."""
    raw = tables["raw"].get(case, [])
    if case in OUTPUT_VS_RAW:
        assert raw != tables["json"].get(case, [])
        if case in ("surrogate_pair", "lone_surrogate", "out_of_range", "not_json"):
            assert raw == []                    # all the event's args gone
        return
    assert raw == tables["json"].get(case, [])


def test_every_case_is_in_the_fixture(tables):
    names = {n for _, n, _, _ in _fixture_rows()} | {n for n, _ in EXTRA}
    assert names == set(EXPECTED)


def test_changes_are_counted(tables):
    warned = {w.message: w.count for w in tables["trace"].diagnostics.warnings}
    # each writer counts its own: 2 deep rows, 1 lone surrogate, 2 infinities, 3 NaN/Infinity
    assert warned[argtext.DEEP] == 2 * 2
    assert warned[argtext.SURROGATE] == 2 * 1
    assert warned[argtext.HUGE] == 2 * 2
    assert warned[argtext.NON_JSON] == 2 * 3


def test_json_output_parses_with_orjson(tables):
    doc = orjson.loads((tables["dir"] / "a.json").read_bytes())
    args = {e["name"]: e.get("args") for e in doc["traceEvents"] if e.get("cat") == "args"}
    assert args["surrogate_pair"] == {"pair": "🚀", "after": 1}
    assert b"\\ud83d" not in (tables["dir"] / "a.json").read_bytes()      # written as UTF-8
    assert args["lone_surrogate"]["s"] == "a\ufffdb"
    assert args["not_json"] == {"nan": "NaN", "inf": "Infinity", "ninf": "-Infinity", "after": 1}
    assert args["null"] == {"n": None, "after": 1} and args["empty_object"] == {"o": {}, "after": 1}
    assert args["beyond_int64"]["u64"] == 2**64 - 1                       # the exact digits kept


# ---------------------------------------------------------------- the real files of the issue

ALL_ARGS_SQL = f"""
select {tp.text("s.name")} as name, s.ts - (select min(ts) from slice) as ts,
  {tp.text("a.flat_key")} as flat_key, {tp.text("a.key")} as key, a.value_type as type,
  {tp.text("case when a.value_type = 'real' then printf('%!.17g', a.real_value) else a.display_value end")}
    as value
from slice s join args a using(arg_set_id)
"""


@pytest.mark.parametrize("src, key", [
    ("kineto/generated_torch213_cpu_single_worker0.pt.trace.json.gz", "Python parent id"),
    ("megengine/generated_mge1130_static_profile.json", None),
])
def test_real_files_with_null_and_empty_args(src, key, tmp_path):
    """The files of the issue (trace_processor aborted on their .pftrace): both outputs load and
    hold the same args table, row for row."""
    trace = traceconv.load(Path(__file__).parent / "fixtures" / src)
    traceconv.save(trace, tmp_path / "o.pftrace")
    traceconv.save(trace, tmp_path / "o.json")
    if key is not None:
        assert sum(b'"%s":null' % key.encode() in (trace.slices.args[i] or b"")
                   for i in range(len(trace.slices))) >= 1
    with ThreadPoolExecutor(2) as pool:
        p, j = (pool.submit(tp.run, tmp_path / f, tp.PROBLEMS_SQL, ALL_ARGS_SQL).result()
                for f in ("o.pftrace", "o.json"))
    assert p[0] == [] and j[0] == []

    def rows(table, prefix):
        # (legacy_event.*: what trace_processor adds to a .pftrace's global and process instants itself)
        return sorted((r["name"], r["ts"], r["flat_key"].removeprefix(prefix), r["key"].removeprefix(prefix),
                       r["type"], r["value"]) for r in table if not r["flat_key"].startswith("legacy_event."))
    pr, jr = rows(p[1], "debug."), rows(j[1], "args.")
    assert len(pr) > 1000 and len(pr) == len(jr)
    for a, b in zip(pr, jr):
        if a != b and a[4] == b[4] == "real" and a[:4] == b[:4]:
            # Perfetto's JSON importer is not correctly rounded: a last-digit difference
            assert float(a[5]) == pytest.approx(float(b[5]), rel=1e-15, abs=0), (a, b)
            continue
        assert a == b
