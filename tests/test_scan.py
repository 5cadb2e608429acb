"""The compiled event scanner (``traceconv._core.scan``, rust/src/scan/) against a reference.

The reference is the rule set of the numba scanner it replaced, stated here in plain Python over a
model of the JSON text: hypothesis draws events as trees of typed nodes (strings with or without
escapes, number tokens as text, literals, arrays, objects), renders them with random whitespace,
and computes the row each event must give -- which fields, which flags, SLOW or not, the ns of
``ts``/``dur``, the args object without whitespace, the order names and categories are interned
in -- and whether the text must stop the scan (nesting deeper than 63).  The scanner is fed the
text cut into random blocks, as the reader's block stream feeds it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceconv import _core

S = _core.scan
MAX_US = 4_000_000_000_000_000
FLAG = {"name": S.F_NAME, "cat": S.F_CAT, "ts": S.F_TS, "dur": S.F_DUR, "pid": S.F_PID, "tid": S.F_TID,
        "id": S.F_ID, "args": S.F_ARGS, "s": S.F_S, "bp": S.F_BP, "ph": S.F_PH}
RARE = {"id2"}
BIG = {"pid": S.F_PID_U64, "tid": S.F_TID_U64, "id": S.F_ID_U64}


# ---------------------------------------------------------------- a model of JSON text

@dataclass
class Str:
    s: str
    style: str          # "plain" (no escape), "esc" (escapes, no \u), "u" (\u escapes)

    def render(self, ws: str) -> str:
        if self.style == "plain":
            return '"' + self.s + '"'
        if self.style == "u":       # always at least one \u escape
            return '"\\u0041' + json.dumps(self.s, ensure_ascii=True)[1:]
        return json.dumps(self.s, ensure_ascii=False)


@dataclass
class Num:
    text: str

    def render(self, ws: str) -> str:
        return self.text


@dataclass
class Lit:
    text: str

    def render(self, ws: str) -> str:
        return self.text


@dataclass
class Arr:
    items: list

    def render(self, ws: str) -> str:
        return "[" + ws + ("," + ws).join(v.render(ws) for v in self.items) + ws + "]"


@dataclass
class Obj:
    pairs: list        # (Str key, node)

    def render(self, ws: str) -> str:
        return "{" + ws + ("," + ws).join(k.render(ws) + ws + ":" + ws + v.render(ws) for k, v in self.pairs) \
            + ws + "}"


def depth(v) -> int:
    if isinstance(v, Arr):
        return 1 + max((depth(x) for x in v.items), default=0)
    if isinstance(v, Obj):
        return 1 + max((depth(x) for _, x in v.pairs), default=0)
    return 0


def walk_flags(v) -> tuple[bool, bool, bool]:
    """(a \\u escape, an exponent, a number of 100+ characters) anywhere in v, keys included."""
    if isinstance(v, Str):
        return v.style == "u", False, False
    if isinstance(v, Num):
        return False, "e" in v.text.lower(), len(v.text) >= 100
    kids = v.items if isinstance(v, Arr) else [x for kv in v.pairs for x in kv] if isinstance(v, Obj) else []
    out = [False, False, False]
    for k in kids:
        out = [a or b for a, b in zip(out, walk_flags(k))]
    return tuple(out)  # type: ignore[return-value]


plain_text = st.text(st.characters(blacklist_characters='"\\', blacklist_categories=("Cs", "Cc")), max_size=6)
esc_text = st.tuples(plain_text, st.sampled_from(['"', "\\", "\n", "\t"]), plain_text).map("".join)
u_text = st.tuples(plain_text, st.sampled_from(["é", "\u2603", "\U0001F600", "\x01"]), plain_text).map("".join)


def strings():
    return st.one_of(plain_text.map(lambda s: Str(s, "plain")), esc_text.map(lambda s: Str(s, "esc")),
                     u_text.map(lambda s: Str(s, "u")))


def number_text():
    ints = st.integers(-(10**20), 10**20).map(str)
    decs = st.tuples(st.integers(-(10**17), 10**17), st.integers(0, 10**5), st.integers(1, 5)).map(
        lambda t: f"{'-' if t[0] < 0 else ''}{abs(t[0])}.{str(t[1]).zfill(t[2])[-t[2]:]}")
    small = st.tuples(st.integers(-(10**6), 10**6), st.integers(0, 999)).map(lambda t: f"{t[0]}.{t[1]:03d}")
    exps = st.tuples(st.integers(-999, 999), st.sampled_from(["e", "E", "e+", "e-", "E-"]), st.integers(0, 400)).map(
        lambda t: f"{t[0]}{t[1]}{t[2]}")
    edge = st.sampled_from(["0", "-0", "-0.5", "3999999999999999.999", "4000000000000000", "-3999999999999999",
                            "1234567890123456", "12345678901234567", "999999999999999999", "1000000000000000000",
                            "0.1", "1.000", "1.0000", "9" * 120, "1" + "0" * 99, "-" + "1" * 98])
    return st.one_of(ints, decs, small, exps, edge)


leaves = st.one_of(strings(), number_text().map(Num), st.sampled_from(["true", "false", "null"]).map(Lit))
values = st.recursive(leaves, lambda kids: st.one_of(st.lists(kids, max_size=3).map(Arr),
                                                     st.lists(st.tuples(strings(), kids), max_size=3).map(Obj)),
                      max_leaves=8)


def nested(d: int):
    """An args object whose deepest container is at level d (the object itself: level 1)."""
    v = Arr([Num("1")])
    for _ in range(d - 2):
        v = Arr([v])
    return Obj([(Str("deep", "plain"), v)])


KEYS = ["ph", "name", "cat", "ts", "dur", "pid", "tid", "id", "args", "s", "bp", "id2", "bind_id",
        "flow_in", "flow_out", "other", "x", "names"]


@st.composite
def member(draw):
    key = draw(st.sampled_from(KEYS))
    kstyle = "plain" if draw(st.integers(0, 12)) else "u"        # an escaped key now and then
    knode = Str(key, kstyle)
    choice = draw(st.integers(0, 9))
    if key in ("ph", "s", "bp") and choice < 7:
        v = Str(draw(st.sampled_from(["X", "i", "s", "t", "f", "e", "g", "", "XY"])),
                draw(st.sampled_from(["plain"] * 4 + ["u"])))
    elif key in ("name", "cat") and choice < 7:
        v = draw(strings())
    elif key in ("ts", "dur", "pid", "tid", "id") and choice < 7:
        v = Num(draw(number_text()))
    elif key == "args" and choice < 8:
        if draw(st.integers(0, 15)) == 0:
            v = nested(draw(st.integers(60, 66)))
        else:
            v = Obj(draw(st.lists(st.tuples(strings(), values), max_size=4)))
    elif choice == 9 and draw(st.booleans()):
        v = Arr([nested(draw(st.integers(60, 66)))])     # a deep value under another key
    else:
        v = draw(values)
    return knode, v


@st.composite
def events(draw):
    evs = draw(st.lists(st.lists(member(), max_size=9), min_size=1, max_size=6))
    ws = draw(st.sampled_from(["", " ", "\n  ", "\t\r\n"]))
    return evs, ws


# ---------------------------------------------------------------- the reference rules

def us_to_ns(text: str):
    if "e" in text.lower():
        return None
    neg = text.startswith("-")
    ip, _, fp = text.lstrip("-").partition(".")
    if len(ip) > 16 or len(fp) > 3 or int(ip) >= MAX_US:
        return None
    ns = int(Decimal(text.lstrip("-")) * 1000)
    return -ns if neg else ns


def int64(text: str):
    """A 64-bit integer's text: (its bits as an int64, whether it is past int64), or None."""
    d = text[1:] if text.startswith("-") else text
    if not d.isdigit() or len(d) > 20 or not -2**63 <= int(text) < 2**64:
        return None
    v = int(text)
    return (v - 2**64, True) if v >= 2**63 else (v, False)


def expected_row(members, table: list[str]):
    """The row of one event (a dict), or "BAD"; interns into ``table``."""
    row = dict(flags=0, ph=0, name=-1, cat=-1, ts=0, dur=0, pid=0, tid=0, id=0, s=0, bp=0, bind=0, flow=0, args=b"")
    fl = 0

    def intern(s: str) -> int:
        if s not in table:
            table.append(s)
        return table.index(s)

    for knode, v in members:
        key = knode.s if knode.style == "plain" else None
        if knode.style != "plain":
            fl |= S.SLOW
        if key == "args" and isinstance(v, Obj):
            if fl & S.F_ARGS:
                fl |= S.SLOW
            fl |= S.F_ARGS
            if depth(v) > 63:
                return "BAD"
            if any(walk_flags(v)):
                fl |= S.SLOW
            compact = v.render("").encode()
            row["args"] = b"" if compact == b"{}" else compact
            continue
        if key in ("name", "cat", "ph", "s", "bp") and isinstance(v, Str):
            if v.style != "plain":
                fl |= S.SLOW
                continue
            f = FLAG[key]
            if key in ("name", "cat"):
                row[key] = intern(v.s)
                if fl & f:
                    fl |= S.SLOW
            else:
                if fl & f or len(v.s.encode()) != 1:
                    fl |= S.SLOW
                row[key] = v.s.encode()[0] if len(v.s.encode()) == 1 else 0
            fl |= f
            continue
        if key in ("ts", "dur", "pid", "tid", "id") and isinstance(v, Num):
            if key in ("ts", "dur"):
                got = us_to_ns(v.text)
            else:
                got, big = int64(v.text) or (None, False)
                if got is not None:
                    fl = fl | BIG[key] if big else fl & ~BIG[key]
            if got is None or fl & FLAG[key]:
                fl |= S.SLOW
            if got is not None:
                row[key] = got
            fl |= FLAG[key]
            continue
        if key == "bind_id":          # v2 flows: an int64, else the general decoder's
            got = int64(v.text) if isinstance(v, Num) else None
            if fl & S.F_BIND or got is None or got[1]:
                fl |= S.SLOW
            if got is not None and not got[1]:
                row["bind"] = got[0]
            fl |= S.F_BIND
            if not isinstance(v, Num) and depth(v) > 63:
                return "BAD"
            continue
        if key in ("flow_in", "flow_out"):
            f, bit = (S.F_FLOW_IN, 1) if key == "flow_in" else (S.F_FLOW_OUT, 2)
            if fl & f or not (isinstance(v, Lit) and v.text in ("true", "false")):
                fl |= S.SLOW
            if isinstance(v, Lit) and v.text in ("true", "false"):
                row["flow"] = row["flow"] | bit if v.text == "true" else row["flow"] & ~bit
            fl |= f
            if depth(v) > 63:
                return "BAD"
            continue
        if key == "args":
            if fl & S.F_ARGS:
                fl |= S.SLOW
            fl |= S.F_ARGS | S.SLOW
        elif key in FLAG or key in RARE:
            fl |= S.SLOW
        if depth(v) > 63:
            return "BAD"
    row["flags"] = fl
    if not fl & S.F_PH:
        row["ph"] = 0
    return row


def scan_in_blocks(text: bytes, cuts: list[int]):
    """Feed ``text`` to the scanner in blocks ending at ``cuts``, as the reader's block stream does:
    (rows, strings in id order, last status)."""
    strings = S.Strings()
    rows: list[dict] = []
    names: list[str] = []
    carry = b""
    after = False           # whether the carry starts right after an event (not the array's start)
    status = S.MORE
    bounds = sorted(set(c for c in cuts if 0 < c < len(text))) + [len(text)]
    at = 0
    for b in bounds:
        buf = carry + text[at:b]
        at = b
        pos = 0
        while True:
            cols, pos, status, new = S.scan(buf, pos, 3, strings, after)
            after = after or len(cols["flags"]) > 0
            names += new
            for r in range(len(cols["flags"])):
                lo, hi = cols["args_off"][r], cols["args_off"][r + 1]
                row = {k: int(cols[k][r]) for k in ("flags", "ph", "name", "cat", "ts", "dur", "pid", "tid",
                                                    "id", "s", "bp", "bind", "flow")}
                row["args"] = cols["args"][lo:hi].tobytes()
                row["text"] = buf[cols["start"][r]:cols["end"][r]]
                rows.append(row)
            if status != S.FULL:
                break
        if status in (S.END, S.BAD):
            return rows, names, status
        carry = buf[pos:]
    return rows, names, status


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events(), st.lists(st.integers(0, 4000), max_size=6))
def test_scan_matches_the_reference_rules(evs_ws, cuts):
    evs, ws = evs_ws
    texts = [Obj(m).render(ws) for m in evs]
    text = ("[" + ws + ("," + ws).join(texts) + ws + "]").encode()
    table: list[str] = []
    want = []
    bad = False
    for m in evs:
        r = expected_row(m, table)
        if r == "BAD":
            bad = True
            break
        want.append(r)
    rows, names, status = scan_in_blocks(text[1:], cuts)
    assert status == (S.BAD if bad else S.END)
    assert len(rows) == len(want)
    for got, w, src, m in zip(rows, want, texts, evs):
        assert got["text"] == src.encode()
        for k in w:
            if k in ("ts", "dur", "pid", "tid", "id", "s", "bp") and not got["flags"] & FLAG[k]:
                continue            # a field the row does not have: its column is not read
            if k in ("ts", "dur", "pid", "tid", "id", "bind", "flow") and w["flags"] & S.SLOW:
                continue            # not read either (a SLOW row is decoded from its text)
            assert got[k] == w[k], (k, src)
        if got["flags"] & S.F_ARGS and not got["flags"] & S.SLOW:
            # the compact args hold what the event's (last) args object holds
            kept = [v for k, v in m if k.style == "plain" and k.s == "args" and isinstance(v, Obj)][-1]
            assert json.loads(got["args"] or b"{}") == json.loads(kept.render(ws))
    if not bad:
        assert names == table


def test_ts_dur_as_exact_ns():
    text = b'{"ph":"X","ts":1.5,"dur":0.001},{"ts":-2.250,"dur":3999999999999999.999},{"ts":1e3},' \
           b'{"ts":1.2345},{"ts":12345678901234567}]'
    cols, pos, status, _ = S.scan(text, 0, 100, S.Strings())
    assert status == S.END and pos == len(text)
    assert cols["ts"][:2].tolist() == [1500, -2250]
    assert cols["dur"][:2].tolist() == [1, 3_999_999_999_999_999_999]
    assert [bool(f & S.SLOW) for f in cols["flags"]] == [False, False, True, True, True]


def test_events_cut_by_the_block_end_are_scanned_again_with_more_text():
    text = b'{"name":"abc","ph":"X","ts":1,"dur":2} , {"name":"de'
    cols, pos, status, new = S.scan(text, 0, 100, S.Strings())
    assert status == S.MORE and len(cols["flags"]) == 1 and new == ["abc"]
    assert text[pos:] == b' , {"name":"de'          # right after the last event read
    assert S.scan(b' ', 0, 100, S.Strings())[2] == S.MORE
    assert S.scan(b'{"ts":1', 0, 100, S.Strings())[1:3] == (0, S.MORE)


def test_events_need_a_comma_between_them_and_none_elsewhere():
    """A comma comes between two events and nowhere else: ``{}{}``, ``[,{}]``, ``{},]`` and ``[,]``
    are BAD (the reader and ``validate`` then take the repairing path, as decoding the whole
    document refuses them; a fuzz campaign of 2026-11-28, seed 20261200, found ``validate``'s column
    pass reading ``},{}\\n {``).  A call is told whether it starts ``after`` an event (where an
    earlier call stopped, having read one) or not (after the ``[``, or at a ``{`` whose comma is
    behind it), so the rule holds across calls too, where a block or a batch ends."""
    ev = b'{"ph":"X","name":"a","ts":1,"dur":1}'
    cases = {ev + ev + b"]": (1, S.BAD), ev + b" \n " + ev + b"]": (1, S.BAD), b"{}" + ev + b"]": (1, S.BAD),
             ev + b",]": (1, S.BAD), ev + b" , ]": (1, S.BAD), b",]": (0, S.BAD), b" , " + ev + b"]": (0, S.BAD),
             ev + b"," + ev + b"]": (2, S.END), ev + b" ,\n " + ev + b" ]": (2, S.END), b"]": (0, S.END),
             b" ]": (0, S.END)}
    for text, (rows, status) in cases.items():
        cols, pos, got, _ = S.scan(text, 0, 100, S.Strings())
        assert (len(cols["flags"]), got) == (rows, status), text
    after = {b"," + ev + b"]": (1, S.END), b" , " + ev + b"," + ev + b"]": (2, S.END), b"]": (0, S.END),
             ev + b"]": (0, S.BAD), b" " + ev + b"]": (0, S.BAD), b",]": (0, S.BAD), b" , ]": (0, S.BAD)}
    for text, (rows, status) in after.items():
        cols, pos, got, _ = S.scan(text, 0, 100, S.Strings(), True)
        assert (len(cols["flags"]), got) == (rows, status), text
    # a FULL or MORE call stops right after the last event it read; the next goes on after it
    text = ev + b"," + ev + b"," + ev + b"]"
    cols, pos, got, _ = S.scan(text, 0, 1, S.Strings())
    assert got == S.FULL and pos == len(ev)
    assert S.scan(text, pos, 100, S.Strings(), True)[2] == S.END
    assert S.scan(text, pos, 100, S.Strings())[2] == S.BAD          # (told it is the array's start)
    for cut in (len(ev), len(ev) + 1, len(ev) + 3):      # at the end of an event, past its comma, in the next event
        cols, pos, got, _ = S.scan(text[:cut], 0, 100, S.Strings())
        assert (len(cols["flags"]), got, pos) == (1, S.MORE, len(ev))
        assert S.scan(text, pos, 100, S.Strings(), True)[2] == S.END
    # no call passes over a missing comma where it ends or starts
    text = ev + b" " + ev + b"]"
    for cap in (1, 2):
        cols, pos, got, _ = S.scan(text, 0, cap, S.Strings())
        assert got == S.BAD or S.scan(text, pos, 100, S.Strings(), True)[2] == S.BAD
    for cut in range(len(ev), len(text)):
        cols, pos, got, _ = S.scan(text[:cut], 0, 100, S.Strings())
        assert got == (S.MORE if cut <= len(ev) + 1 else S.BAD)
        assert got == S.BAD or S.scan(text, pos, 100, S.Strings(), True)[2] == S.BAD


def test_cap_gives_full_and_the_position_to_go_on_from():
    text = b'{"ts":1},{"ts":2},{"ts":3}]'
    st_ = S.Strings()
    cols, pos, status, _ = S.scan(text, 0, 2, st_)
    assert status == S.FULL and len(cols["ts"]) == 2 and text[pos:] == b',{"ts":3}]'
    cols, pos, status, _ = S.scan(text, pos, 2, st_, True)
    assert status == S.END and cols["ts"].tolist() == [3000] and pos == len(text)


# ---------------------------------------------------------------- the pool's threads

def scans_of_a_block(text: bytes, pos: int, cap: int, strings, after: bool) -> tuple:
    """A block's scan as the stream made it with Python's threads: ``scan`` called until it stops
    short of ``cap``: (the table's size before, [(columns, rows, new strings)], pos, status, after)."""
    before, got = len(strings), []
    while True:
        cols, pos, status, new = S.scan(text, pos, cap, strings, after)
        got.append((cols, len(cols["flags"]), new))
        after = after or len(cols["flags"]) > 0
        if status != S.FULL:
            return before, got, pos, status, after


def assert_same_scan(got: tuple, want: tuple) -> None:
    assert got[0] == want[0] and got[2:] == want[2:]
    assert len(got[1]) == len(want[1])
    for (c, n, new), (wc, wn, wnew) in zip(got[1], want[1]):
        assert n == wn and new == wnew and c.keys() == wc.keys()
        for k in wc:
            assert c[k].dtype == wc[k].dtype and c[k].tolist() == wc[k].tolist(), k


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events(), st.integers(1, 4), st.integers(0, 3), st.booleans())
def test_a_pool_scans_a_block_as_scan_calls_do(evs_ws, cap, skip, seen):
    """Pool.submit scans a block to its end on the pool's threads, Pool.scan on the caller's:
    both give what ``scan`` called batch after batch gives, from the array's start or from an
    event on (``after``), into tables already holding strings or not."""
    evs, ws = evs_ws
    texts = [Obj(m).render(ws) for m in evs]
    text = (ws + ("," + ws).join(texts) + ws + "]").encode()
    pos = 0
    after = False
    if skip and len(texts) > 1:         # from the comma after the first event on
        pos, after = len((ws + texts[0]).encode()), True
    pool = S.Pool(2)
    try:
        tables = [S.Strings() for _ in range(4)]
        if seen:
            for t in tables:
                S.scan(b'{"name":"x","cat":"y"}]', 0, 10, t)
        want_table = S.Strings()
        if seen:
            S.scan(b'{"name":"x","cat":"y"}]', 0, 10, want_table)
        want = scans_of_a_block(text, pos, cap, want_table, after)
        jobs = [pool.submit(text, pos, cap, t, after) for t in tables[:3]]
        for job in reversed(jobs):      # (taken in any order)
            assert_same_scan(job.result(), want)
        assert_same_scan(pool.scan(text, pos, cap, tables[3], after), want)
        assert [tables[0].get(i) for i in range(len(tables[0]))] == \
            [want_table.get(i) for i in range(len(want_table))]
    finally:
        pool.close()


def test_a_pool_stopped_or_closed():
    """After stop() a block's scan ends before its first batch with BAD (the stream's close); a
    result is handed over once; a closed pool takes no more blocks."""
    text = b'{"ts":1},{"ts":2},{"ts":3}]'
    pool = S.Pool(1)
    job = pool.submit(text, 0, 2, S.Strings(), False)
    before, got, pos, status, after = job.result()
    assert status == S.END and [n for _, n, _ in got] == [2, 1] and pos == len(text) and after
    with pytest.raises(ValueError, match="handed over already"):
        job.result()
    pool.stop()
    assert pool.submit(text, 0, 2, S.Strings(), False).result() == (0, [], 0, S.BAD, False)
    assert pool.scan(text, 0, 2, S.Strings(), False)[1:] == ([], 0, S.BAD, False)
    pool.close()
    with pytest.raises(ValueError, match="closed"):
        pool.submit(text, 0, 2, S.Strings(), False)


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="threads' nice values are read from Linux's /proc")
def test_a_pools_threads_run_nice_steps_below_their_maker():
    """Pool(threads, nice): its threads (named traceconv-scan-N) run ``nice`` steps below the
    thread that made the pool, and at its priority with nice 0."""
    def scanning_threads() -> list[int]:
        got = []
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            if stat[stat.index("(") + 1:stat.rindex(")")].startswith("traceconv-scan"):
                got.append(int(stat[stat.rindex(")") + 2:].split()[16]))     # field 19: nice
        return got

    base = os.getpriority(os.PRIO_PROCESS, 0)
    for nice in (0, 7):
        pool = S.Pool(2, nice)
        try:
            want = [min(base + nice, 19)] * 2
            for _ in range(200):                # (each thread sets its own as it starts)
                if scanning_threads() == want:
                    break
                time.sleep(0.005)
            assert scanning_threads() == want
        finally:
            pool.close()
        assert scanning_threads() == []


@pytest.mark.parametrize("text", [b'{"a":1,}]', b'{"a" 1}]', b'{"a":01}]', b'[1]', b'{"a":"\x01"}]',
                                  b'{"a":tru}]', b'{"a":"\\q"}]', b'x', b'{"a":1}x', b'{"a":"\xff"}]'])
def test_text_that_is_not_json_stops_the_scan(text):
    cols, pos, status, _ = S.scan(text, 0, 100, S.Strings())
    assert status == S.BAD


def test_nesting_deeper_than_63_levels_stops_the_scan():
    def ev(d):
        return b'{"args":' + b'{"a":' + b"[" * (d - 1) + b"1" + b"]" * (d - 1) + b"}}]"
    assert S.MAX_DEPTH == 63
    assert S.scan(ev(63), 0, 10, S.Strings())[2] == S.END
    assert S.scan(ev(64), 0, 10, S.Strings())[2] == S.BAD
    assert S.scan(b'{"x":' + b"[" * 64 + b"]" * 64 + b"}]", 0, 10, S.Strings())[2] == S.BAD
    assert S.scan(b'{"x":' + b"[" * 63 + b"]" * 63 + b"}]", 0, 10, S.Strings())[2] == S.END
    # thousands deep: a status, not a stack overflow
    assert S.scan(b'{"args":{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}}]", 0, 10, S.Strings())[2] == S.BAD


def test_names_longer_than_64_kib_take_what_they_hold():
    """#8: a 70 KB name once doubled the numba table's slots until memory ran out.  The table now
    holds each distinct string once, its own length."""
    strings = S.Strings()
    names = [chr(ord("a") + k) * (100_000 + k) for k in range(20)]
    text = b",".join(b'{"ph":"X","name":"%s","ts":1,"dur":1}' % n.encode() for n in names * 3) + b"]"
    cols, pos, status, new = S.scan(text, 0, 1000, strings)
    assert status == S.END and len(cols["flags"]) == 60 and new == names
    assert len(strings) == 20 and strings.nbytes() == sum(map(len, names))
    assert strings.get(19) == names[19]
    with pytest.raises(ValueError):
        strings.get(20)


def test_each_rows_args_come_without_the_whitespace_between_tokens():
    text = b'{"args":{ "a" : 1 }},{"args":{}},{"args":{"b":[1, 2], "c" : " x y "}}]'
    cols, _, status, _ = S.scan(text, 0, 10, S.Strings())
    data, off = cols["args"].tobytes(), cols["args_off"].tolist()
    assert status == S.END
    assert [data[off[r]:off[r + 1]] for r in range(3)] == [b'{"a":1}', b"", b'{"b":[1,2],"c":" x y "}']


# ---------------------------------------------------------------- value_end, skip_ws, deep_spans

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                           | st.text(max_size=5),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3),
                           max_leaves=10)


@settings(max_examples=200, deadline=None)
@given(json_values, st.sampled_from([None, 1, 2]), st.sampled_from([b"", b" ", b"\n\t"]))
def test_value_end_finds_where_a_value_ends(v, indent, lead):
    text = lead + json.dumps(v, indent=indent).encode()
    assert S.value_end(text + b" , 1", 0) == len(text)
    for k in range(len(lead), len(text)):
        assert S.value_end(text[:k], 0) == -1, text[:k]       # cut short: more text may complete it
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        assert S.value_end(text, 0) == -1                      # a number reaching the end may go on
    assert S.skip_ws(text, 0) == len(lead)


def test_value_end_of_text_that_is_not_json():
    for bad in (b"[1,]", b"{1:2}", b"nul ", b"[1 2]", b"01 ", b'"\\x"'):
        assert S.value_end(bad, 0) == -2, bad
    assert S.value_end(b"[" * 64 + b"]" * 64, 0) == -2
    assert S.value_end(b"[" * 63 + b"]" * 63, 0) == 63 * 2
    assert S.value_end(b"[1]", 10) == -1
    assert S.skip_ws(b"  ", 0) == 2 and S.skip_ws(b"a", 5) == 1


def deep_spans_reference(b: bytes, limit: int) -> list[tuple[int, int]]:
    """The numba kernel's loop, as it was."""
    out = []
    depth = 0
    i = 0
    instr = False
    open_at = -1
    while i < len(b):
        c = b[i]
        if instr:
            if c == 92:
                i += 2
                continue
            if c == 34:
                instr = False
            i += 1
            continue
        if c == 34:
            instr = True
        elif c in b"{[":
            depth += 1
            if depth == limit + 1:
                open_at = i
        elif c in b"}]":
            if depth == limit + 1 and open_at >= 0:
                out.append((open_at, i + 1))
                open_at = -1
            if depth > 0:
                depth -= 1
        i += 1
    if open_at >= 0:
        out.append((open_at, len(b)))
    return out


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60).map(lambda b: bytes(b'[]{}"\\ a,'[x % 9] for x in b)), st.integers(0, 4))
def test_deep_spans_match_the_reference(text, limit):
    assert S.deep_spans(text, limit) == deep_spans_reference(text, limit)


# ---------------------------------------------------------------- never a panic

@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 250), st.integers(0, 5))
def test_any_bytes_give_a_status_never_an_exception(data, pos, cap):
    strings = S.Strings()
    cols, p, status, new = S.scan(data, pos, cap, strings)
    assert status in (S.MORE, S.END, S.FULL, S.BAD)
    assert len(cols["flags"]) <= cap and len(cols["args_off"]) == len(cols["flags"]) + 1
    assert p <= max(len(data), pos)
    S.value_end(data, pos)
    S.skip_ws(data, pos)
    S.deep_spans(data, cap)


def _not_json(text: str) -> None:
    raise ValueError(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40), st.binary(max_size=40) | st.from_regex(rb"\A[ -~]{0,12}\Z"))
def test_any_bytes_inside_an_event_array(a, b):
    """Any bytes in a name or an args value: the scanner ends in one of its states (no panic), and
    where the name is plain text and the value is JSON, it reads the one event, named ``a``."""
    import json
    text = b'{"ph":"X","name":"' + a + b'","ts":1,"dur":2,"args":{"k":' + b + b"}}]"
    strings = S.Strings()
    cols, pos, status, new = S.scan(text, 0, 10, strings)
    assert status in (S.MORE, S.END, S.FULL, S.BAD)
    S.value_end(text, 0)
    try:
        name = a.decode("utf-8")
        json.loads(b, parse_constant=_not_json)     # NaN, Infinity: Python's, not JSON
    except ValueError:
        return
    if any(c in name for c in '"\\') or any(ord(c) < 0x20 for c in name):
        return
    assert status == S.END and pos == len(text) and len(cols["flags"]) == 1
    assert strings.get(int(cols["name"][0])) == name


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(-3, 3), st.integers(-2**40, 2**40) | st.integers(-3, 3)),
                         max_size=30), max_size=5))
def test_pairs_give_each_pair_one_id_in_first_seen_order(batches):
    """scan.Pairs: the reader's (pid, tid) table.  Each call gives every row its pair's id, and the
    pairs it added in id order; ids are stable across calls (a dict gives the same)."""
    pairs = _core.scan.Pairs()
    ref: dict[tuple[int, int], int] = {}
    for batch in batches:
        pid = np.array([p for p, _ in batch], np.int64)
        tid = np.array([t for _, t in batch], np.int64)
        ids, new = pairs.ids(pid, tid)
        expect_new = []
        for pt in batch:
            if pt not in ref:
                ref[pt] = len(ref)
                expect_new.append(pt)
        assert ids.tolist() == [ref[pt] for pt in batch]
        assert new == expect_new
        assert len(pairs) == len(ref)
    with pytest.raises(ValueError):
        pairs.ids(np.zeros(2, np.int64), np.zeros(3, np.int64))


def test_unsigned_64_bit_ids_keep_their_value_and_stay_apart_from_negative_ones():
    """MXNet's hashed thread and process ids reach 2^64 - 1: the scanner keeps their bits in its int64
    columns and says so in the flags, the pair table keeps them apart from the negative id with the
    same bits and gives them back as their value."""
    u = 11247825113443385629            # and u - 2^64, the negative id with its bits
    text = (f'{{"ph":"X","pid":{u},"tid":{u - 2**64},"ts":1,"dur":1}},'
            f'{{"ph":"X","pid":{u - 2**64},"tid":18446744073709551615,"ts":1,"dur":1}},'
            '{"ph":"X","pid":18446744073709551616,"tid":1,"ts":1,"dur":1},'
            '{"ph":"X","pid":-9223372036854775808,"tid":-0,"ts":1,"dur":1}]').encode()
    cols, _, _, _ = S.scan(text, 0, 10, S.Strings(), False)
    fl = cols["flags"]
    assert [bool(f & S.F_PID_U64) for f in fl] == [True, False, False, False]
    assert [bool(f & S.F_TID_U64) for f in fl] == [False, True, False, False]
    assert fl[2] & S.SLOW and not fl[3] & S.SLOW            # past 64 bits: the general decoder's
    assert cols["pid"][0] == cols["pid"][1] == u - 2**64 and cols["tid"][1] == -1
    big = np.array([(f & S.F_PID_U64 != 0) | (f & S.F_TID_U64 != 0) << 1 for f in fl[:2]], np.uint8)
    ids, new = S.Pairs().ids(cols["pid"][:2], cols["tid"][:2], big)
    assert ids.tolist() == [0, 1]
    assert new == [(u, u - 2**64), (u - 2**64, 2**64 - 1)]


# counters' args texts: what split takes (numbers a double holds as Python reads them) and what it
# leaves to the general decoder (other values, `{}`, a key twice, exponents, integers past 64 bits)
COUNTER_ARGS = [b'{"a":1}', b'{"a":1.5,"b":-0}', b'{"b":-0.0,"a":2}', b'{"v":0.1,"w":123456789012345678}',
                b'{"v":18446744073709551615}', b'{"v":-9223372036854775808}', b'{"v":18446744073709551616}',
                b'{"v":1e3}', b'{"a":"1"}', b'{"a":true}', b'{}', b'{"a":1,"a":2}', b'{"a\\"b":7}',
                b'{"a":[1]}', b'{"a":null}']


def counter_members(text: bytes) -> list | None:
    """A counter's members as ``scan.split`` reads them, stated with Python's json: every value an
    integer of at most 64 bits or a decimal without exponent (as a double), no key twice."""
    def bad(_: str) -> None:
        raise ValueError
    try:
        pairs = json.loads(text.decode("utf-8"), object_pairs_hook=list, parse_constant=bad,
                           parse_float=lambda t: bad(t) if "e" in t or "E" in t else float(t),
                           parse_int=lambda t: float(int(t)) if -2**63 <= int(t) < 2**64 else bad(t))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(pairs, list) or not pairs or len({k for k, _ in pairs}) != len(pairs):
        return None
    if not all(type(v) is float for _, v in pairs):
        return None
    return pairs


def split_reference(c: dict, smap: np.ndarray, base: int, tid_zero: bool, thread_be: bool) -> dict:
    """What ``scan.split`` gives, as the reader computed it with NumPy before the kernel (the masks
    of ``ChromeReader._take_rows``)."""
    flags, ph = c["flags"], c["ph"]
    name_id = np.where(c["name"] >= 0, smap[np.maximum(c["name"], 0)], 0) if len(smap) else np.zeros(len(flags), np.int32)
    cat_id = np.where(c["cat"] >= 0, smap[np.maximum(c["cat"], 0)], 0) if len(smap) else np.zeros(len(flags), np.int32)
    need = S.F_TS | S.F_DUR | S.F_PH
    x = ((flags & (S.SLOW | need)) == need) & (ph == ord("X")) & (c["dur"] >= 0)
    if ((flags & S.F_BIND != 0) & (ph == ord("X")) & ~x).any():
        x &= flags & S.F_BIND == 0           # (a bound X left to the general decoder: all of them)
    need = S.F_TS | S.F_ID | S.F_PH
    f = ((flags & (S.SLOW | need | S.F_ID_U64)) == need) & np.isin(ph, list(b"stf"))
    need = S.F_TS | S.F_PH
    i = ((flags & (S.SLOW | need | S.F_ID | S.F_PID_U64 | S.F_TID_U64)) == need) & np.isin(ph, list(b"iIR"))
    b = ((flags & (S.SLOW | need)) == need) & np.isin(ph, list(b"BEbe" if thread_be else b"BE")) & ~x
    text = [c["args"][c["args_off"][r]:c["args_off"][r + 1]].tobytes() for r in range(len(flags))]
    members = [counter_members(t) if ok else None for t, ok in
               zip(text, ((flags & (S.SLOW | need | S.F_ID | S.F_ARGS)) == need | S.F_ARGS) & (ph == ord("C")))]
    cnt = np.array([m is not None for m in members], bool)
    if (~cnt & (ph == ord("C")) & ~(x | f | i | b)).any():
        cnt[:] = False                       # (a counter left to the general decoder: all of them)
    out: dict = {"rest": np.flatnonzero(~(x | f | i | b | cnt))}
    pid = np.where(flags & S.F_PID, c["pid"], 0)
    tid = np.where(flags & S.F_TID, c["tid"], 0 if tid_zero else pid)
    big_pid = (((flags & S.F_PID) != 0) & ((flags & S.F_PID_U64) != 0)).astype(np.uint8)
    big_tid = np.where(flags & S.F_TID, (flags & S.F_TID_U64) != 0, 0 if tid_zero else big_pid).astype(np.uint8)
    big = big_pid | big_tid << 1
    for pre, m in (("x_", x), ("f_", f), ("i_", i), ("b_", b)):
        rows = np.flatnonzero(m)
        out[pre + "rows"] = rows
        out[pre + "ts"] = c["ts"][rows] + base
        out[pre + "pid"], out[pre + "tid"] = pid[rows], tid[rows]
        out[pre + "name"], out[pre + "cat"] = name_id[rows], cat_id[rows]
        out[pre + "big"] = big[rows]
        if pre in ("x_", "b_"):
            has = flags[rows] & S.F_BIND != 0
            out[pre + "bind"] = np.where(has, c["bind"][rows], 0)
            out[pre + "flow"] = np.where(has, c["flow"][rows] & 3 | 4, 0)
        if pre != "f_":
            out[pre + "args"] = b"".join(c["args"][c["args_off"][r]:c["args_off"][r + 1]].tobytes() for r in rows)
            out[pre + "lens"] = np.diff(c["args_off"])[rows]
    out["x_val"], out["f_val"] = c["dur"][x], c["id"][f]
    out["f_letter"] = ph[f]
    out["f_bp_e"] = ((flags[f] & S.F_BP) != 0) & (c["bp"][f] == ord("e"))
    out["i_letter"] = np.where(flags[i] & S.F_S, c["s"][i], ord("t"))
    out["b_letter"] = ph[b]
    out["b_has_args"] = (flags[b] & S.F_ARGS) != 0
    combos: dict = {}
    out["c_rows"], out["c_new"] = np.flatnonzero(cnt), []
    ts, ids, value = [], [], []
    for r in out["c_rows"].tolist():
        for key, v in members[r]:
            combo = (int(pid[r]) % 2**64 if big_pid[r] else int(pid[r]), int(name_id[r]), key)
            if combo not in combos:
                combos[combo] = len(combos)
                out["c_new"].append(combo)
            ts.append(c["ts"][r] + base)
            ids.append(combos[combo])
            value.append(v)
    out["c_ts"], out["c_ids"], out["c_value"] = np.array(ts, np.int64), np.array(ids, np.int64), np.array(value)
    ends = {"x_": out["x_ts"] + out["x_val"], "f_": out["f_ts"], "i_": out["i_ts"], "b_": out["b_ts"],
            "c_": out["c_ts"]}
    for pre, e in ends.items():
        out[pre + "top"] = int(e.max()) if len(e) else -(2**63)
    return out


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_split_matches_the_numpy_reference(data):
    """scan.split sorts a batch's rows into X, flow, instant and begin/end parts (and the rest) in one pass:
    the same rows, places, ids, args and latest times as the NumPy masks it replaced."""
    n = data.draw(st.integers(0, 40))
    ints = lambda lo, hi, t: np.array(data.draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), t)  # noqa: E731
    bits = [S.F_NAME, S.F_CAT, S.F_TS, S.F_DUR, S.F_PID, S.F_TID, S.F_ID, S.F_ARGS, S.F_S, S.F_BP, S.F_PH, S.SLOW,
            S.F_PID_U64, S.F_TID_U64, S.F_ID_U64, S.F_BIND, S.F_FLOW_IN, S.F_FLOW_OUT]
    flags = np.array([sum(b for b in bits if data.draw(st.booleans()) or b in (S.F_TS, S.F_PH) and
                          data.draw(st.booleans())) for _ in range(n)], np.int32)
    nstr = data.draw(st.integers(0, 5))
    texts = data.draw(st.lists(st.one_of(st.binary(max_size=6), st.sampled_from(COUNTER_ARGS)), min_size=n, max_size=n))
    lens = np.array([len(t) for t in texts], np.int64)
    c = {"flags": flags, "ph": np.array(data.draw(st.lists(st.sampled_from(list(b"XstfiIRBEbeMC\0")), min_size=n,
                                                           max_size=n)), np.uint8),
         "name": ints(-1, nstr - 1, np.int32), "cat": ints(-1, nstr - 1, np.int32),
         "ts": ints(-10**15, 10**15, np.int64), "dur": ints(-5, 10**9, np.int64),
         "pid": ints(-3, 2**40, np.int64), "tid": ints(-3, 9, np.int64), "id": ints(-2**62, 2**62, np.int64),
         "s": np.array(data.draw(st.lists(st.sampled_from(list(b"gpt\0")), min_size=n, max_size=n)), np.uint8),
         "bp": np.array(data.draw(st.lists(st.sampled_from(list(b"e\0x")), min_size=n, max_size=n)), np.uint8),
         "bind": ints(-2**63, 2**63 - 1, np.int64), "flow": ints(0, 3, np.uint8),
         "args_off": np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)}
    c["args"] = np.frombuffer(b"".join(texts), np.uint8)
    smap = np.array(data.draw(st.lists(st.integers(0, 100), min_size=nstr, max_size=nstr)), np.int32)
    base = data.draw(st.integers(0, 2**61))
    tid_zero, thread_be = data.draw(st.booleans()), data.draw(st.booleans())
    got = S.split(c["flags"], c["ph"], c["name"], c["cat"], c["ts"], c["dur"], c["pid"], c["tid"], c["id"],
                  c["s"], c["bp"], c["bind"], c["flow"], c["args"], c["args_off"], smap, base, tid_zero, S.Counters(),
                  thread_be)
    want = split_reference(c, smap, base, tid_zero, thread_be)
    for k, w in want.items():
        g = got[k]
        if k in ("x_args", "i_args", "b_args"):
            assert g.tobytes() == w, k
        elif k.endswith("top") or k == "c_new":
            assert g == w, k
        else:
            assert g.tolist() == w.tolist(), k


def test_split_refuses_columns_that_do_not_fit():
    z8, z32, z64 = np.zeros(2, np.uint8), np.zeros(2, np.int32), np.zeros(2, np.int64)
    with pytest.raises(ValueError):            # args_off one short
        S.split(z32, z8, z32, z32, z64, z64, z64, z64, z64, z8, z8, z64, z8, z8, z64, np.zeros(1, np.int32), 0, False,
                S.Counters(), False)
    flags = np.full(2, S.F_TS | S.F_PH, np.int32)
    ph = np.array(list(b"ii"), np.uint8)
    with pytest.raises(ValueError):            # a string with no model id
        S.split(flags, ph, np.array([3, 0], np.int32), z32, z64, z64, z64, z64, z64, z8, z8, z64, z8, z8,
                np.zeros(3, np.int64), np.zeros(1, np.int32), 0, False, S.Counters(), False)
    with pytest.raises(ValueError):            # args outside the data
        S.split(flags, ph, z32, z32, z64, z64, z64, z64, z64, z8, z8, z64, z8, z8, np.array([0, 5, 9]),
                np.zeros(1, np.int32), 0, False, S.Counters(), False)


@pytest.mark.parametrize("key", ["name", "cat", "ph", "s", "bp"])
def test_a_number_beyond_a_double_where_a_string_belongs_is_slow_not_bad(key):
    """serde_json reads a number such as 1e309 as a double only to fail ("number out of range"): as
    the value of name, cat, ph, s or bp it made the whole stream BAD (found by hypothesis in
    test_scan_matches_the_reference_rules).  The scanner leaves such a value unread: the event is
    SLOW (decoded on its own), and the events around it are read as ever."""
    text = ('{"ph": "X", "name": "a", "ts": 1, "dur": 2}, {"ts": 3, "%s": 1e309}, '
            '{"ph": "X", "name": "b", "ts": 4, "dur": 1}]' % key).encode()
    cols, pos, status, new = S.scan(text, 0, 10, S.Strings())
    assert status == S.END and pos == len(text)
    flags = [int(f) for f in cols["flags"]]
    assert len(flags) == 3 and flags[1] & S.SLOW and not (flags[0] | flags[2]) & S.SLOW
    assert new == ["a", "b"]


def _python_says_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# surrogates, overlong forms, code points past U+10FFFF, cut sequences, stray continuation bytes
_UTF8_EDGES = [b"\xed\xa0\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98",
               b"\x80", b"\xc3\xa9", b"\xf0\x9f\x98\x80", b"\xef\xbf\xbf", b"\x00", b"a"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=6), st.sampled_from(_UTF8_EDGES)), max_size=12))
def test_is_utf8_agrees_with_python_strict_decoding(pieces):
    # the reading thread's check (rust/src/scan/text.rs `is_utf8`, without the GIL) decides which
    # blocks repair_utf8 leaves alone, as Python's strict decoder did
    b = b"".join(pieces)
    assert _core.scan.is_utf8(b) is _python_says_utf8(b)
