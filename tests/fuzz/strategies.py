"""Structure-aware inputs for every importer, as hypothesis strategies.

Each strategy draws a :class:`Case`: the bytes of one input file that the importer's sniffer
claims (so the case reaches that importer, not the "unknown format" error), built from the shape
the producer writes and salted with the values that broke readers before: numbers out of any range
(negative, 2^62 µs, 9.3e18, 2^70, 1e400, ``NaN``/``Infinity``), invalid UTF-8 inside names, keys
and after the event array, strings past 64 KiB, values nested thousands deep, null/{}/[] args.

JSON is written by :func:`dump` so that it can hold what no JSON library writes: :class:`Raw`
bytes are copied as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st


@dataclass(frozen=True)
class Raw:
    """Bytes written verbatim into the JSON text (a bare NaN, 1e400, invalid UTF-8...)."""
    data: bytes


@dataclass
class Case:
    kind: str          # the importer the input is shaped for (a format name)
    suffix: str        # the file name's ending
    data: bytes

    def __repr__(self) -> str:
        return f"Case({self.kind!r}, {len(self.data)} bytes)"


def _dump_str(s: str) -> bytes:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif o < 0x20 or 0xD800 <= o <= 0xDFFF:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out).encode("utf-8")


def dump(v: Any) -> bytes:
    """JSON text of ``v`` (dicts, lists, str, int, float, bool, None, :class:`Raw`)."""
    if isinstance(v, Raw):
        return v.data
    if v is None:
        return b"null"
    if v is True:
        return b"true"
    if v is False:
        return b"false"
    if isinstance(v, int):
        return str(v).encode()
    if isinstance(v, float):
        if math.isnan(v):
            return b"NaN"
        if math.isinf(v):
            return b"Infinity" if v > 0 else b"-Infinity"
        return repr(v).encode()
    if isinstance(v, str):
        return _dump_str(v)
    if isinstance(v, dict):
        return b"{" + b",".join((k.data if isinstance(k, Raw) else _dump_str(str(k))) + b":" + dump(x)
                                for k, x in v.items()) + b"}"
    if isinstance(v, (list, tuple)):
        return b"[" + b",".join(dump(x) for x in v) + b"]"
    raise TypeError(type(v))


# ------------------------------------------------------------------------------ nasty atoms

BAD_UTF8 = [b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80", b"\x80"]


def deep(n: int, kind: str = "list") -> Raw:
    """A value nested ``n`` deep."""
    if kind == "list":
        return Raw(b"[" * n + b"1" + b"]" * n)
    return Raw(b'{"a":' * n + b"1" + b"}" * n)


huge_numbers = st.sampled_from([
    Raw(b"NaN"), Raw(b"Infinity"), Raw(b"-Infinity"), Raw(b"1e400"), Raw(b"-1e400"), Raw(b"9.3e18"),
    Raw(b"4611686018427387904"), Raw(b"1180591620717411303424"), Raw(b"-9223372036854775809"),
    Raw(b"9223372036854775807"), Raw(b"-9223372036854775808"), Raw(b"1e26"), Raw(b"-1"), Raw(b"-1e18"),
    Raw(b"1e-400"), Raw(b"0.0"), Raw(b"-0.0"), Raw(b"1.5e308"), Raw(b"18446744073709551616"),
    Raw(b"123456789012345678901234567890"), Raw(b"1E+19"),
    Raw(b"1" + b"0" * 400),          # an integer beyond a double's range (float() raises OverflowError)
])
_BEYOND_DOUBLE = Raw(b"1" + b"0" * 400)

# mostly plausible values, so that most cases get past the parser to the code behind it; one in
# three or so is out of range
numbers = st.one_of(
    st.integers(0, 10**7),
    st.integers(0, 10**4),
    st.floats(0, 1e7, allow_nan=False),
    st.floats(0, 1e3, allow_nan=False),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    huge_numbers,
)
# mostly plausible, sometimes out of range
times = st.one_of(st.integers(0, 5_000_000), st.integers(0, 5_000_000), st.floats(0, 5e6, allow_nan=False),
                  st.integers(1_600_000_000_000_000, 1_800_000_000_000_000), numbers)


@st.composite
def bad_string(draw: Any) -> Raw:
    """A JSON string holding invalid UTF-8."""
    pre = draw(st.text(max_size=6)).encode("utf-8")
    bad = draw(st.sampled_from(BAD_UTF8))
    return Raw(_dump_str("")[:1] + pre.replace(b'"', b"").replace(b"\\", b"") + bad + b'"')


@st.composite
def long_string(draw: Any) -> str:
    n = draw(st.sampled_from([65_535, 65_536, 65_537, 70_000, 200_000]))
    return draw(st.sampled_from("ax\u00e9\u4e2d")) * n


_PLAIN_NAMES = st.sampled_from(["aten::add", "forward", "step", "cudaLaunchKernel", "a", "b", "", "GEMM"])
# what rich (the CLI's tables) would read as markup: a closing tag with nothing open crashed summary
_MARKUP_NAMES = st.sampled_from(["[/]", "[bold]x[/bold]", "[memory]", "k<float[4]>", "[red]", "a\\[b]", "[/x]"])
names = st.one_of(
    _PLAIN_NAMES, _PLAIN_NAMES, _PLAIN_NAMES, _PLAIN_NAMES,
    _MARKUP_NAMES,
    st.text(max_size=12),
    bad_string(),
    long_string(),
)

keys = st.one_of(st.sampled_from(["x", "Python id", "External id", "Sequence number", "shape"]),
                 st.text(max_size=8))

leaves = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=10), bad_string(),
                   st.just({}), st.just([]))


@st.composite
def args_value(draw: Any) -> Any:
    """An args object: ordinary, or null/{}/[], or with a deep, non-finite, bad-UTF-8 value or key."""
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return draw(st.sampled_from([None, {}, [], Raw(b"{}"), Raw(b"null")]))
    base = draw(st.dictionaries(keys, st.recursive(leaves, lambda c: st.one_of(
        st.lists(c, max_size=3), st.dictionaries(keys, c, max_size=3)), max_leaves=6), max_size=4))
    if choice == 1:
        base["deep"] = deep(draw(st.integers(900, 5000)), draw(st.sampled_from(["list", "dict"])))
    elif choice == 2:
        base[Raw(bytes(draw(bad_string()).data))] = 1
    elif choice == 3:
        base["n"] = draw(huge_numbers)
    return base


PHASES = ["X", "X", "X", "B", "E", "i", "I", "C", "M", "s", "t", "f", "b", "e", "n", "P", "O", "N", "D",
          "R", "S", "T", "F", "?", ""]


@st.composite
def chrome_event(draw: Any, cats: list[str] | None = None) -> dict:
    ph = draw(st.sampled_from(PHASES))
    ev: dict[Any, Any] = {"ph": ph, "name": draw(names), "pid": draw(st.one_of(
        st.integers(0, 5), st.integers(-(2**40), 2**70), st.sampled_from(["CPU functions", "a"]))),
        "tid": draw(st.one_of(st.integers(0, 5), st.integers(-(2**40), 2**70), st.text(max_size=4)))}
    if draw(st.integers(0, 9)):
        ev["ts"] = draw(times)
    if ph == "X" or draw(st.integers(0, 6)) == 0:
        ev["dur"] = draw(times)
    if draw(st.booleans()):
        ev["cat"] = draw(st.one_of(st.sampled_from(cats or ["cat"]), names))
    if draw(st.booleans()):
        ev["args"] = draw(args_value())
    if ph in "stfbenSTFPOND" or draw(st.integers(0, 9)) == 0:
        ev["id"] = draw(st.one_of(st.integers(0, 4), numbers, st.text(max_size=4)))
    if ph == "f" and draw(st.booleans()):
        ev["bp"] = "e"
    if ph in ("X", "B", "E", "b") and draw(st.integers(0, 4)) == 0:     # v2 flows
        ev["bind_id"] = draw(st.one_of(st.integers(0, 3), st.integers(2**63 - 2, 2**64), st.text(max_size=3), numbers))
        for k in ("flow_in", "flow_out"):
            if draw(st.booleans()):
                ev[k] = draw(st.one_of(st.booleans(), st.booleans(), st.just(1), st.none()))
    if ph in "iI" and draw(st.booleans()):
        ev["s"] = draw(st.sampled_from(["t", "p", "g", "x"]))
    if ph == "M":
        ev["name"] = draw(st.sampled_from(["process_name", "thread_name", "process_sort_index",
                                           "thread_sort_index", "process_labels"]))
        ev["args"] = draw(st.one_of(st.fixed_dictionaries({"name": names}),
                                    st.fixed_dictionaries({"sort_index": numbers}), args_value()))
    if ph == "C":
        ev["args"] = draw(st.dictionaries(keys, numbers, max_size=3))
    if draw(st.integers(0, 15)) == 0:          # an invalid UTF-8 top-level key of an event
        ev[Raw(draw(bad_string()).data)] = 1
    return ev


@st.composite
def deep_stack(draw: Any) -> list[dict]:
    """Events nested past the 512 levels trace_processor keeps on a track (stat
    slice_max_depth_exceeded): complete events each inside the one before (a deep recursion), or
    begins never ended (ended at the trace's end, one inside the other)."""
    n = draw(st.integers(505, 620))
    t0 = draw(st.integers(0, 1000))
    if draw(st.booleans()):
        return [{"ph": "X", "name": "down", "pid": 1, "tid": 7, "ts": t0 + i, "dur": 4 * n - 2 * i} for i in range(n)]
    return [{"ph": "B", "name": "open", "pid": 1, "tid": 7, "ts": t0 + i} for i in range(n)]


def _tail(draw: Any) -> bytes:
    """What follows the event array: usually nothing, sometimes garbage or invalid UTF-8."""
    k = draw(st.integers(0, 7))
    if k == 0:
        return b"," + draw(bad_string()).data + b":1"
    if k == 1:
        return b',"x":' + draw(st.sampled_from(BAD_UTF8))
    if k == 2:
        return b',"displayTimeUnit":"ns"'
    return b""


@st.composite
def trace_object(draw: Any, header: dict, cats: list[str], extra_events: list | None = None,
                 top_array: bool = False) -> bytes:
    evs = list(extra_events or []) + draw(st.lists(chrome_event(cats), min_size=0, max_size=25))
    if draw(st.integers(0, 15)) == 0:
        evs += draw(deep_stack())
    if top_array:
        return dump(evs)
    head = b"{" + b"".join((k.data if isinstance(k, Raw) else _dump_str(k)) + b":" + dump(v) + b","
                           for k, v in header.items())
    body = b'"traceEvents":' + dump(evs)
    text = head + body + _tail(draw) + b"}"
    if draw(st.integers(0, 12)) == 0:          # cut short
        text = text[: draw(st.integers(len(head) + 16, max(len(head) + 16, len(text) - 1)))]
    return text


# ------------------------------------------------------------------------------ importers

KINETO_CATS = ["cpu_op", "cuda_runtime", "kernel", "gpu_memcpy", "python_function", "user_annotation",
               "ac2g", "fwdbwd", "cpu_instant_event", "gpu_user_annotation"]


@st.composite
def kineto(draw: Any) -> Case:
    header = {"schemaVersion": draw(st.one_of(st.just(1), numbers)),
              "deviceProperties": draw(st.one_of(st.just([]), st.just([{"id": 0, "name": "H100"}]),
                                                 st.lists(st.dictionaries(keys, leaves, max_size=2), max_size=2))),
              "distributedInfo": draw(st.one_of(st.just({"backend": "nccl", "rank": 0, "world_size": 2}),
                                                st.fixed_dictionaries({"rank": numbers, "world_size": numbers}),
                                                st.none())),
              "baseTimeNanoseconds": draw(st.one_of(st.just(1_700_000_000_000_000_000), numbers))}
    if draw(st.booleans()):
        header[Raw(draw(bad_string()).data)] = 1        # an invalid UTF-8 top-level key
    first = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 2}
    # [memory] events, whose args become counters (a value beyond a double crashed them once)
    value = st.one_of(numbers, huge_numbers, leaves, st.just(_BEYOND_DOUBLE))
    memory = [{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
               "ts": draw(times), "args": draw(st.dictionaries(st.sampled_from(
                   ["Device Type", "Device Id", "Total Allocated", "Total Reserved", "Bytes"]), value))}
              for _ in range(draw(st.integers(0, 3)))]
    return Case("kineto", ".pt.trace.json", draw(trace_object(header, KINETO_CATS, [first, *memory])))


@st.composite
def chrome(draw: Any) -> Case:
    top_array = draw(st.booleans())
    first = {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1}
    data = draw(trace_object({"displayTimeUnit": draw(st.sampled_from(["ms", "ns"]))}, ["cat", "x"], [first],
                             top_array=top_array))
    return Case("chrome-json", ".json", data)


@st.composite
def composer(draw: Any) -> Case:
    meta = [{"name": "global_rank", "ph": "M", "pid": 0, "args": {"value": draw(st.one_of(st.just(0), numbers))}},
            {"name": "clock_sync_timestamp_us", "ph": "M", "pid": 0,
             "args": {"value": draw(st.one_of(st.just(1_700_000_000_000_000), numbers))}},
            {"name": "callback/x/event/epoch", "cat": "", "ph": "B", "pid": 0, "tid": 0, "ts": draw(times)},
            {"name": "callback/x/event/epoch", "cat": "", "ph": "E", "pid": 0, "tid": 0, "ts": draw(times)}]
    return Case("composer", ".json", draw(trace_object({}, ["dataloader", "event", "algorithm"], meta,
                                                       top_array=True)))


@st.composite
def mxnet_trace(draw: Any) -> Case:
    meta = {"ph": "M", "args": {"name": draw(st.one_of(st.just("cpu/0"), names))}, "pid": 0, "name": "process_name"}
    data = draw(trace_object({}, ["MXNET_C_API", "operator", "Device Storage", "category"], [meta]))
    # the sniffer wants its exact spelling of the process_name event
    data = data.replace(b'{"ph":"M","args":{"name":', b'{"ph": "M", "args": {"name": ', 1)
    return Case("mxnet", ".json", data)


@st.composite
def megengine_timeline(draw: Any) -> Case:
    meta = {"name": "Metadata", "ph": "M", "pid": 1, "tid": 1,
            "args": {"localTime": draw(st.one_of(st.just("1700000000000000000"), st.text(max_size=4),
                                                 numbers.map(lambda n: Raw(b'"' + dump(n) + b'"'))))}}
    return Case("megengine", ".chrome_timeline.json",
                draw(trace_object({}, ["OpDispatch", "KernelLaunch", "TensorLink", "TensorProp"], [meta])))


@st.composite
def timer_node(draw: Any, depth: int = 0) -> dict:
    node: dict[Any, Any] = {"total": draw(st.one_of(st.floats(0, 100, allow_nan=False), numbers)),
                            "count": draw(st.one_of(st.integers(0, 100), numbers)),
                            "self": draw(st.one_of(st.floats(0, 10, allow_nan=False), numbers))}
    if draw(st.integers(0, 4)) == 0:
        node["is_parallel"] = True
    if depth < 3 and draw(st.booleans()):
        node["children"] = draw(st.dictionaries(names, timer_node(depth + 1), max_size=3))
    return node


@st.composite
def mlagents(draw: Any) -> Case:
    root = {"name": draw(names), **draw(timer_node())}
    root["gauges"] = draw(st.dictionaries(names, st.fixed_dictionaries(
        {"value": numbers, "min": numbers, "max": numbers, "count": numbers}), max_size=2))
    root["metadata"] = draw(st.dictionaries(keys, leaves, max_size=3))
    if draw(st.integers(0, 5)) == 0:            # a tree nested far too deep
        n = draw(st.integers(900, 3000))
        root["children"] = Raw(b'{"a":{"total":1,"count":1,"self":0,"children":' * n + b"null" + b"}}" * n)
    return Case("mlagents", ".json", dump(root))


def _sf_num(draw: Any) -> str:
    return draw(st.one_of(st.floats(0, 1000, allow_nan=False).map(lambda f: f"{f:.4f}"),
                          st.sampled_from(["1e26", "nan", "inf", "-1.0000", "1" * 400, "0.0000", "x", "-0"])))


@st.composite
def sample_factory(draw: Any) -> Case:
    def stamp() -> str:
        if draw(st.integers(0, 8)) == 0:
            return draw(st.sampled_from(["[2022-13-45 99:99:99,563]", "[0000-00-00 00:00:00,000]",
                                         "[9999-12-31 23:59:59,999]", "[1970-01-01 00:00:00,000]"]))
        return f"[2022-11-25 01:{draw(st.integers(0, 59)):02d}:{draw(st.integers(0, 59)):02d},563][15762]"
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 4))
        if kind <= 1:
            lines.append(f"{stamp()} {draw(st.sampled_from(['Learner 0', 'Batcher 0', 'RolloutWorker_w0']))} profile tree view:")
            depth = 0
            for _ in range(draw(st.integers(1, 8))):
                depth = draw(st.integers(0, depth + 1))
                key = draw(st.sampled_from(["train", "update", "forward", "bptt", "env_step", "clip"]))
                lines.append("  " * depth + f"{key}: {_sf_num(draw)}")
            if draw(st.integers(0, 6)) == 0:      # a tree nested 1,000+ deep
                lines += ["  " * d + f"k{d}: 1.0000" for d in range(draw(st.integers(1000, 2500)))]
        elif kind == 2:
            kv = ", ".join(f"{k}: {_sf_num(draw)}" for k in draw(st.lists(
                st.sampled_from(["init", "work", "forward", "reset", "env_step"]), min_size=1, max_size=4)))
            lines.append(f"{stamp()} Gpu worker timing: {kv}")
        elif kind == 3:
            lines.append(f"{stamp()} Collected {{0: {draw(st.integers(0, 10**6))}}}, FPS: {_sf_num(draw)}.")
        else:
            lines.append(f"{stamp()} Fps is (10 sec: {_sf_num(draw)}, 60 sec: {_sf_num(draw)}). Total num "
                         f"frames: {draw(st.integers(0, 10**6))}.")
    text = "\n".join(lines) + "\n"
    data = text.encode("utf-8")
    if draw(st.integers(0, 6)) == 0:
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from(BAD_UTF8)) + data[at:]
    return Case("sample-factory", ".txt", data)


@st.composite
def mxnet_stats_json(draw: Any) -> Case:
    stat = st.fixed_dictionaries({"Count": st.one_of(st.integers(0, 100), numbers), "Total": numbers,
                                  "Min": numbers, "Max": numbers, "Avg": numbers})
    doc = {"Time": draw(st.dictionaries(st.sampled_from(["operator", "MXNET_C_API"]),
                                        st.dictionaries(names, stat, max_size=3), max_size=2)),
           "Memory": {}, "Unit": {"Time": "ms", "Memory": "kB"}}
    return Case("mxnet-stats", ".json", dump(doc))


@st.composite
def mxnet_stats_table(draw: Any) -> Case:
    def num() -> str:
        return draw(st.one_of(st.floats(0, 1000, allow_nan=False).map(lambda f: f"{f:.4f}"),
                              st.sampled_from(["1e400", "1180591620717411303424", "nan", "inf", "-5.0000", "1e26"])))
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        nm = draw(st.one_of(st.sampled_from(["FullyConnected", "Convolution", "_backward_Activation"]),
                            long_string(), st.text(alphabet="abc", min_size=1, max_size=8)))
        cnt = draw(st.one_of(st.integers(0, 1000).map(str), st.sampled_from(["1180591620717411303424", "-1"])))
        rows.append(f"{nm:<30}{cnt:>11}{num():>17}{num():>17}{num():>17}{num():>17}")
    text = ("\nProfile Statistics:\n\tNote the difference in units for different entries.\n"
            "operator\n=================\n"
            "Name                          Total Count        Time (ms)    Min Time (ms)    Max Time (ms)    Avg Time (ms)\n"
            "----                          -----------        ---------    -------------    -------------    -------------\n"
            + "\n".join(rows) + "\n")
    return Case("mxnet-stats", ".txt", text.encode("utf-8"))


@st.composite
def megengine_static(draw: Any) -> Case:
    n = draw(st.integers(1, 4))
    t = st.one_of(st.floats(0, 10, allow_nan=False), numbers)
    ops = {str(i): {"id": str(i), "name": draw(names), "type": draw(st.sampled_from(["Conv", "Elemwise", "x"])),
                    "input": [], "output": []} for i in range(n)}
    times_ = {str(i): {"start": draw(t), "kern": draw(t), "end": draw(t)} for i in range(n)}
    doc = {"graph_exec": {"operator": ops, "var": {}, "mem_chunk": {}, "comp_seq": list(ops)},
           "profiler": {"device": {'CompNode("cpu0:0" from "xpux:0")': times_},
                        "host": {"1755": {'comp_node_dispatch:CompNode("cpu:default" from "cpu:default")': times_["0"]}},
                        "opr_footprint": {str(i): {"computation": draw(t), "memory": draw(t),
                                                   "in_shapes": draw(st.one_of(st.just([]), st.just([[1, 2]]))),
                                                   "param": draw(args_value())} for i in range(n)},
                        "opr_internal_pf": {}}}
    return Case("megengine-static", ".json", dump(doc))


@st.composite
def scanner(draw: Any) -> Case:
    """Bytes where the compiled event scanner (rust/src/scan/) reads them: a Kineto trace with
    hypothesis-drawn bytes spliced into its event array (inside an event, a name, an args object,
    or between events), sometimes repeated so the damage lands past the first scanned block."""
    base = draw(kineto()).data
    at = base.find(b'"traceEvents":[')
    if at < 0:
        return Case("scanner", ".pt.trace.json", base)
    lo = at + len(b'"traceEvents":[')
    junk = draw(st.one_of(st.binary(max_size=24), st.sampled_from(
        [b'{', b'}', b'"', b'\\', b'\\u', b'[' * 70, b'1e999', b'-', b',,', b'\xff', b'\x00', b'"args":{'])))
    k = draw(st.integers(lo, len(base)))
    data = base[:k] + junk + base[k:]
    if draw(st.integers(0, 4)) == 0:              # past the first 2000 events: the producer thread's part
        evs = b"".join(b'{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":%d,"dur":2},' % (3 * k)
                       for k in range(2500))
        data = data[:lo] + evs + data[lo:]
    return Case("scanner", ".pt.trace.json", data)


_PFTRACE_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.text(max_size=10),
                            st.floats(allow_nan=True, allow_infinity=True), st.just({}), st.just([]))
_PFTRACE_ARGS = st.dictionaries(keys, st.recursive(
    _PFTRACE_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=6), max_size=4)


def _drawn_timeline(draw: Any) -> Any:
    """A timeline as traceconv's own outputs hold it: slices that nest, overlap and repeat on a few
    threads (overlap lanes), instants, counters, flows, args of every JSON kind (NaN, huge
    integers, empty containers), and what traceconv's metadata keeps beside the events: summary
    roles of tracks and a merged trace's process ranks."""
    from traceconv.model import Trace, TrackKind
    t = Trace("drawn")
    threads = [t.thread(t.process(p, draw(_PLAIN_NAMES | _MARKUP_NAMES), pid=p), tid, draw(st.text(max_size=6)))
               for p, tid in ((1, 1), (1, 2), (7, 3))]
    for _ in range(draw(st.integers(0, 25))):
        th = draw(st.sampled_from(threads))
        name = draw(_PLAIN_NAMES | _MARKUP_NAMES | st.text(max_size=12) | long_string())
        ts, dur = draw(st.integers(0, 10**6) | st.integers(0, 2**62)), draw(st.integers(0, 10**5))
        cat, args = draw(st.none() | st.sampled_from(["cpu_op", "kernel", ""])), draw(st.none() | _PFTRACE_ARGS)
        if draw(st.booleans()):
            t.add_slice(th.track, ts, dur, name, cat, args)
        else:
            t.add_instant(th.track, ts, name, cat, args)
    mem = t.track(TrackKind.COUNTER, draw(st.text(max_size=6)), t.processes[0], unit=draw(st.none() | st.just("bytes")))
    for k in range(draw(st.integers(0, 4))):
        t.add_counter(mem.id, 100 * k, draw(st.floats(allow_nan=True, allow_infinity=True)))
    if len(t.slices):
        for _ in range(draw(st.integers(0, 4))):
            t.add_flow(*draw(st.tuples(*[st.integers(0, len(t.slices) - 1)] * 2)))
    for th in threads:
        t.tracks[th.track].summary = draw(st.sampled_from([None, None, "mirror", "profiler"]))
    if draw(st.booleans()):
        for p in t.processes:
            p.args["rank"] = draw(st.integers(0, 3))
    return t


@st.composite
def perfetto(draw: Any) -> Case:
    """A .pftrace traceconv wrote (the input ``traceconv summary run.pftrace`` reads back): a drawn
    timeline (:func:`_drawn_timeline`), sometimes with bytes flipped, cut or spliced in."""
    import tempfile
    from pathlib import Path

    import traceconv
    t = _drawn_timeline(draw)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "t.pftrace"
        traceconv.save(t, out)
        data = bytearray(out.read_bytes())
    for _ in range(draw(st.sampled_from([0, 0, 1, 3]))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        how = draw(st.sampled_from(["flip", "cut", "splice"]))
        if how == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "cut":
            del data[at:at + draw(st.integers(1, 40))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=12))
    return Case("perfetto", ".pftrace", bytes(data))


@st.composite
def own_json(draw: Any) -> Case:
    """Chrome JSON traceconv wrote (read back by ``summary``, ``merge``, ``convert``): a drawn
    timeline (:func:`_drawn_timeline`), its metadata's marks (overlap lanes' threads, summary
    roles, process ranks) sometimes replaced by drawn JSON, which the reader must use where it
    names the trace's threads and count where it does not."""
    import tempfile
    from pathlib import Path

    import orjson

    import traceconv
    t = _drawn_timeline(draw)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "t.json"
        traceconv.save(t, out)
        doc = orjson.loads(out.read_bytes())
    own = doc["metadata"]["traceconv"]
    ints = st.integers(-2, 8) | st.integers(2_000_000_000, 2_000_000_004) | st.integers(0, 2**64 - 1)
    junk = st.recursive(st.none() | st.booleans() | ints | st.text(max_size=4) | st.sampled_from(["mirror", "profiler"]),
                        lambda inner: st.lists(inner, max_size=4), max_leaves=12)
    for key in ("lanes", "summary_roles", "process_ranks"):
        if draw(st.integers(0, 3)) == 0:
            own[key] = draw(junk)
        elif key in own and own[key] and draw(st.integers(0, 3)) == 0:
            entries = list(own[key])
            entries[draw(st.integers(0, len(entries) - 1))] = draw(junk)
            own[key] = entries
    return Case("own-json", ".json", orjson.dumps(doc))


IMPORTERS = {
    "mlagents": mlagents(), "sample-factory": sample_factory(), "mxnet-stats-json": mxnet_stats_json(),
    "mxnet-stats-table": mxnet_stats_table(), "mxnet": mxnet_trace(), "kineto": kineto(),
    "composer": composer(), "megengine": megengine_timeline(), "megengine-static": megengine_static(),
    "chrome-json": chrome(), "scanner": scanner(), "perfetto": perfetto(), "own-json": own_json(),
}


def any_input() -> st.SearchStrategy[Case]:
    return st.one_of(*IMPORTERS.values())
