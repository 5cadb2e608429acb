"""Protobuf wire-format kernels for the Perfetto writer (:mod:`traceconv.writers.perfetto`).

Two jobs, both over numpy arrays:

* **Args transcoding.**  Each event's args are the compact JSON text of an object; a row is turned
  into the bytes of repeated ``TrackEvent.debug_annotations`` fields.  Value mapping (the same as
  the writer's Python reference ``value_fields`` on what ``orjson.loads`` makes of the text):
  ``true``/``false`` -> ``bool_value``; an integer in int64 -> ``int_value`` (a negative one as a
  10-byte two's-complement varint); in (int64, uint64] -> ``uint_value``; a number with a fraction
  or an exponent -> ``double_value``; a string -> ``string_value`` (UTF-8, JSON escapes decoded),
  or ``string_value_iid`` when the caller interned it; a non-empty object -> ``dict_entries``; a
  non-empty array -> ``array_values``; ``null``, ``{}``, ``[]`` -> no value field at all (an empty
  list of entries is no field on the wire; trace_processor shows no arg for it, as its JSON importer
  does for the same values, where a ``legacy_json_value`` of ``null``, ``{}`` or ``[]`` makes it
  abort) -- except ``{}`` or ``[]`` as an element of a list: one ``dict_entries`` with an empty name
  and no value, which, like ``{}`` and ``[]`` in its JSON importer, shows no arg but takes an index
  of the list (``[1,{},2]``: ``l[0]`` = 1, ``l[2]`` = 2; a ``null`` takes none: ``[1,null,2]``:
  ``l[1]`` = 2).  Every key, at every depth, is a ``name_iid``.

  Two passes.  :func:`collect_args` adds every key (a string followed by ``:``) of all rows to a
  table and counts their string values, so that the interned data can be written before the first
  event.  :func:`encode_args` encodes the rows of a step of the event stream and *flags* the ones it
  leaves to the caller's Python reference: a float that needs more than the exact fast path (more
  than 15 significant digits once trailing zeros are dropped, more than 19 written, or a decimal
  exponent beyond +-22), an integer outside [-2^63, 2^64-1] (orjson reads those as floats), a lone
  surrogate escape, bytes that are not UTF-8, a key repeated in one object, nesting deeper than 60, anything that is not
  valid JSON.
* **Packet assembly.**  :class:`EventEncoder` writes whole ``TracePacket`` records of a step of the
  writer's event stream into one byte buffer, handing it over each time it is full.

Doubles: a decimal with at most 15 significant digits is an integer below 2^53, and 10^k is exact
for k <= 22, so one IEEE multiplication or division of the two gives the correctly rounded value --
the same double as Python's ``float(text)``, bit for bit.

Keys and string values live in one open-addressing hash table over their bytes (FNV-1a 64); a
lookup always compares the bytes themselves, never the hash alone.  Tags are the numbers of
:data:`FIELDS`, which the tests check against the Perfetto protos.
"""

from __future__ import annotations

import numpy as np

from . import inline, jit, same_bytes

VARINT, I64, LEN = 0, 1, 2
# (message, field) -> (field number, wire type) of every field these kernels write
FIELDS: dict[tuple[str, str], tuple[int, int]] = {
    ("Trace", "packet"): (1, LEN),
    ("TracePacket", "timestamp"): (8, VARINT),
    ("TracePacket", "trusted_packet_sequence_id"): (10, VARINT),
    ("TracePacket", "sequence_flags"): (13, VARINT),
    ("TracePacket", "track_event"): (11, LEN),
    ("TrackEvent", "type"): (9, VARINT),
    ("TrackEvent", "track_uuid"): (11, VARINT),
    ("TrackEvent", "name_iid"): (10, VARINT),
    ("TrackEvent", "category_iids"): (3, VARINT),
    ("TrackEvent", "debug_annotations"): (4, LEN),
    ("TrackEvent", "double_counter_value"): (44, I64),
    ("TrackEvent", "flow_ids"): (47, I64),
    ("TrackEvent", "terminating_flow_ids"): (48, I64),
    ("DebugAnnotation", "name_iid"): (1, VARINT),
    ("DebugAnnotation", "name"): (10, LEN),
    ("DebugAnnotation", "bool_value"): (2, VARINT),
    ("DebugAnnotation", "uint_value"): (3, VARINT),
    ("DebugAnnotation", "int_value"): (4, VARINT),
    ("DebugAnnotation", "double_value"): (5, I64),
    ("DebugAnnotation", "string_value"): (6, LEN),
    ("DebugAnnotation", "string_value_iid"): (17, VARINT),
    ("DebugAnnotation", "legacy_json_value"): (9, LEN),
    ("DebugAnnotation", "dict_entries"): (11, LEN),
    ("DebugAnnotation", "array_values"): (12, LEN),
    # EventName, EventCategory, DebugAnnotationName and InternedString share this layout
    ("InternedString", "iid"): (1, VARINT),
    ("InternedString", "str"): (2, LEN),
}
# enum values written by hand (checked against the protos in the tests too)
TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4


def _tag(message: str, field: str) -> int:
    number, wire = FIELDS[message, field]
    return number << 3 | wire


T_PACKET = _tag("Trace", "packet")
P_TS = _tag("TracePacket", "timestamp")
P_SEQ = _tag("TracePacket", "trusted_packet_sequence_id")
P_FLAGS = _tag("TracePacket", "sequence_flags")
P_TE = _tag("TracePacket", "track_event")
E_TYPE = _tag("TrackEvent", "type")
E_TRACK = _tag("TrackEvent", "track_uuid")
E_NAME = _tag("TrackEvent", "name_iid")
E_CAT = _tag("TrackEvent", "category_iids")
E_ANN = _tag("TrackEvent", "debug_annotations")
E_DOUBLE = _tag("TrackEvent", "double_counter_value")
E_FLOW = _tag("TrackEvent", "flow_ids")
E_TFLOW = _tag("TrackEvent", "terminating_flow_ids")
A_NAME_IID = _tag("DebugAnnotation", "name_iid")
A_NAME = _tag("DebugAnnotation", "name")
A_BOOL = _tag("DebugAnnotation", "bool_value")
A_UINT = _tag("DebugAnnotation", "uint_value")
A_INT = _tag("DebugAnnotation", "int_value")
A_DOUBLE = _tag("DebugAnnotation", "double_value")
A_STR = _tag("DebugAnnotation", "string_value")
A_STR_IID = _tag("DebugAnnotation", "string_value_iid")
A_JSON = _tag("DebugAnnotation", "legacy_json_value")
A_DICT = _tag("DebugAnnotation", "dict_entries")
A_ARRAY = _tag("DebugAnnotation", "array_values")
S_IID = _tag("InternedString", "iid")
S_STR = _tag("InternedString", "str")

# two-byte tags, as their varint bytes
A_STR_IID0, A_STR_IID1 = (A_STR_IID & 0x7F) | 0x80, A_STR_IID >> 7
E_DOUBLE0, E_DOUBLE1 = (E_DOUBLE & 0x7F) | 0x80, E_DOUBLE >> 7
E_FLOW0, E_FLOW1 = (E_FLOW & 0x7F) | 0x80, E_FLOW >> 7
E_TFLOW0, E_TFLOW1 = (E_TFLOW & 0x7F) | 0x80, E_TFLOW >> 7
assert max(T_PACKET, P_TS, P_SEQ, P_FLAGS, P_TE, E_TYPE, E_TRACK, E_NAME, E_CAT, E_ANN, A_NAME_IID, A_NAME, A_BOOL,
           A_UINT, A_INT, A_DOUBLE, A_STR, A_JSON, A_DICT, A_ARRAY, S_IID, S_STR) < 128
assert 128 <= min(A_STR_IID, E_DOUBLE, E_FLOW, E_TFLOW) and max(A_STR_IID, E_DOUBLE, E_FLOW, E_TFLOW) < 1 << 14

# kernel status codes
OK, FULL, NEED_TABLE = 0, 1, 2
KEY, VALUE = 0, 1         # kinds of table entries: an annotation name, a string value
MAX_DEPTH = 60            # deeper rows go to the Python path
_MAX_KEYS = 1024          # keys per object checked for repeats; larger objects go to the Python path
_DUPS = 16 * _MAX_KEYS
_OBJ, _ARR = 0, 1
PARALLEL_ROWS = 8192      # pass 2 runs on two threads from this many rows in a step
_S_KEY, _S_COLON, _S_VALUE, _S_AFTER = 0, 1, 2, 3
_U64_MAX = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
_I64_MAX = np.uint64(0x7FFF_FFFF_FFFF_FFFF)
_I64_NEG_MAX = np.uint64(0x8000_0000_0000_0000)    # magnitude of INT64_MIN
_FAST_MANTISSA = np.uint64(10**15)
_FNV_OFFSET = np.uint64(0xCBF2_9CE4_8422_2325)
_FNV_PRIME = np.uint64(0x0100_0000_01B3)
_POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)     # all exact
_POW10I = np.array([10**k for k in range(20)], dtype=np.uint64)
_B7F, _B80, _S7 = np.uint64(0x7F), np.uint64(0x80), np.uint64(7)

# Performance note: numba reference-counts every array passed to a compiled function, and every
# array variable that may be reassigned inside a loop, at each call or iteration (two atomic
# operations each), which costs more than lexing a token.  So the per-token and per-event work below
# is written inline in two kernels that never reassign an array: the helpers they call take only
# scalars or are inlined into them at compile time (``@inline``: numba's inline="always", no call
# left), and when a buffer is too small a kernel returns to its caller, which grows it and calls
# again from where it stopped.


@inline
def _find(tmp, p, kind, slots, thash, tkind, toff, tdata):
    """The table entry of the decoded bytes ``tmp[:p]`` of this kind (-1 if none), the slot where
    the probe stopped (where a new entry goes) and the hash.  Every hit is confirmed by comparing
    the bytes.  Inlined (see :func:`_put`)."""
    h = _FNV_OFFSET ^ np.uint64(kind)
    for q in range(p):
        h = (h ^ np.uint64(tmp[q])) * _FNV_PRIME
    mask = len(slots) - 1
    sl = np.int64(h & np.uint64(mask))
    while True:
        e2 = slots[sl]
        if e2 < 0:
            return -1, sl, h
        if thash[e2] == h and (tkind[e2] & 1) == kind and toff[e2 + 1] - toff[e2] == p:
            if same_bytes(tdata, toff[e2], tmp, 0, p):
                return e2, sl, h
        sl = (sl + 1) & mask


@jit
def _vlen(v):
    """Bytes of the varint of ``v`` (uint64)."""
    n = 1
    while v >= _B80:
        v >>= _S7
        n += 1
    return n


@inline
def _put(buf, p, v):
    """Write the varint of ``v`` (uint64) at ``buf[p]``; the index after it.  Inlined into the
    kernels: a call passing ``buf`` would cost two atomic reference-count operations."""
    while v >= _B80:
        buf[p] = np.uint8((v & _B7F) | _B80)
        v >>= _S7
        p += 1
    buf[p] = np.uint8(v)
    return p + 1


@jit
def _grown(buf, used, need):
    """``buf`` with room for ``need`` bytes after ``used`` (a new array when it has not)."""
    if used + need <= len(buf):
        return buf
    out = np.empty(max(2 * len(buf), used + need), np.uint8)
    out[:used] = buf[:used]
    return out


# ---------------------------------------------------------------- byte tables
#
# One open-addressing table for annotation names (KEY) and string values (VALUE):
# (slots, hashes, kinds, data, offsets, counts, iids, next, value, state); state = [entries, bytes,
# keys].  A KEY entry's iid is given when it is added (1, 2, ...); a VALUE entry's is 0 (inline)
# unless the caller interned it.  kinds: bit 0 the kind, bit 1 set when the bytes hold a quote or a
# backslash.  next / value: of a KEY entry, the key that followed it and the string value that was
# under it the last time -- predictions, checked against the bytes before they are used (rows of
# one source repeat their keys in the same order, and often their string values).


def new_table(entries: int = 1024, nbytes: int = 1 << 16) -> tuple:
    size = 1
    while size < 2 * entries:
        size *= 2
    return (np.full(size, -1, np.int64), np.zeros(entries, np.uint64), np.zeros(entries, np.uint8),
            np.zeros(nbytes, np.uint8), np.zeros(entries + 1, np.int64), np.zeros(entries, np.int64),
            np.zeros(entries, np.int64), np.full(entries, -1, np.int64), np.full(entries, -1, np.int64),
            np.zeros(3, np.int64))


@jit
def _table_grown(slots, thash, tkind, tdata, toff, tcount, tiid, tnext, tval, tstate, entries, nbytes):
    """The table's arrays, grown so that ``entries`` more entries of ``nbytes`` more bytes fit."""
    n = tstate[0]
    need = n + entries + 1
    if need > len(thash):
        size = max(2 * len(thash), need)
        h2 = np.zeros(size, np.uint64)
        h2[:n] = thash[:n]
        k2 = np.zeros(size, np.uint8)
        k2[:n] = tkind[:n]
        o2 = np.zeros(size + 1, np.int64)
        o2[:n + 1] = toff[:n + 1]
        c2 = np.zeros(size, np.int64)
        c2[:n] = tcount[:n]
        i2 = np.zeros(size, np.int64)
        i2[:n] = tiid[:n]
        n2 = np.full(size, -1, np.int64)
        n2[:n] = tnext[:n]
        v2 = np.full(size, -1, np.int64)
        v2[:n] = tval[:n]
        thash, tkind, toff, tcount, tiid, tnext, tval = h2, k2, o2, c2, i2, n2, v2
    if 2 * need > len(slots):
        size = len(slots)
        while size < 2 * need:
            size *= 2
        slots = np.full(size, -1, np.int64)
        mask = size - 1
        for ent in range(n):
            j = np.int64(thash[ent] & np.uint64(mask))
            while slots[j] >= 0:
                j = (j + 1) & mask
            slots[j] = ent
    tdata = _grown(tdata, tstate[1], nbytes)
    return slots, thash, tkind, tdata, toff, tcount, tiid, tnext, tval


# ---------------------------------------------------------------- strings


@inline
def _utf8_len(data, i, b):
    """Bytes of the well-formed UTF-8 sequence at ``data[i]`` (a byte >= 0x80), or 0."""
    c = data[i]
    if 0xC2 <= c <= 0xDF:
        n, lo, hi = 2, 0x80, 0xBF
    elif 0xE0 <= c <= 0xEF:
        n = 3
        lo = 0xA0 if c == 0xE0 else 0x80          # no overlong form
        hi = 0x9F if c == 0xED else 0xBF          # no surrogate
    elif 0xF0 <= c <= 0xF4:
        n = 4
        lo = 0x90 if c == 0xF0 else 0x80
        hi = 0x8F if c == 0xF4 else 0xBF
    else:
        return 0
    if i + n > b or not (lo <= data[i + 1] <= hi):
        return 0
    for k in range(2, n):
        if not (0x80 <= data[i + k] <= 0xBF):
            return 0
    return n


@jit
def _decode(data, i, b, tmp):
    """Decode the JSON string whose text starts at ``i`` (after its opening quote) into ``tmp[0:]``.
    Returns (ok, position after the closing quote, length).  Raw bytes are copied as they are;
    a bad escape, a lone surrogate, bytes that are not UTF-8 or a missing closing quote is not ok."""
    s0 = i
    while i < b and data[i] != 34 and data[i] != 92 and data[i] < 128:
        i += 1
    p = i - s0
    for q in range(p):
        tmp[q] = data[s0 + q]
    while i < b:
        c = data[i]
        if c == 34:
            return True, i + 1, p
        if c >= 128:
            n = _utf8_len(data, i, b)
            if n == 0:
                return False, i, p
            for k in range(n):
                tmp[p + k] = data[i + k]
            p += n
            i += n
            continue
        if c != 92:
            tmp[p] = c
            p += 1
            i += 1
            continue
        if i + 1 >= b:
            return False, i, p
        e = data[i + 1]
        if e == 34 or e == 92 or e == 47:
            tmp[p] = e
        elif e == 110:
            tmp[p] = 10
        elif e == 116:
            tmp[p] = 9
        elif e == 114:
            tmp[p] = 13
        elif e == 98:
            tmp[p] = 8
        elif e == 102:
            tmp[p] = 12
        elif e == 117:
            cp = _hex4(data, i + 2, b)
            if cp < 0:
                return False, i, p
            i += 6
            if 0xD800 <= cp <= 0xDBFF:
                if i + 6 > b or data[i] != 92 or data[i + 1] != 117:
                    return False, i, p
                lo = _hex4(data, i + 2, b)
                if lo < 0xDC00 or lo > 0xDFFF:
                    return False, i, p
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                i += 6
            elif 0xDC00 <= cp <= 0xDFFF:
                return False, i, p
            if cp < 0x80:
                tmp[p] = cp
                p += 1
            elif cp < 0x800:
                tmp[p] = 0xC0 | (cp >> 6)
                tmp[p + 1] = 0x80 | (cp & 0x3F)
                p += 2
            elif cp < 0x10000:
                tmp[p] = 0xE0 | (cp >> 12)
                tmp[p + 1] = 0x80 | ((cp >> 6) & 0x3F)
                tmp[p + 2] = 0x80 | (cp & 0x3F)
                p += 3
            else:
                tmp[p] = 0xF0 | (cp >> 18)
                tmp[p + 1] = 0x80 | ((cp >> 12) & 0x3F)
                tmp[p + 2] = 0x80 | ((cp >> 6) & 0x3F)
                tmp[p + 3] = 0x80 | (cp & 0x3F)
                p += 4
            continue
        else:
            return False, i, p
        p += 1
        i += 2
    return False, i, p


@jit
def _hex4(data, i, b):
    if i + 4 > b:
        return -1
    v = 0
    for k in range(4):
        c = data[i + k]
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            return -1
        v = v * 16 + d
    return v


# ---------------------------------------------------------------- pass 1: keys and string values


@jit
def _collect(strings, data, off, r0, table, tmp):
    """Add every key of rows ``r0``... to the table and (with ``strings``) count every string value.
    A string is a key when a ``:`` follows it.  A row whose strings cannot be decoded is left where
    it fails (pass 2 leaves such rows to the Python encoder, which writes unknown keys as names).
    Returns (row, NEED_TABLE) when the table must grow before that row, else (rows, OK)."""
    slots, thash, tkind, tdata, toff, tcount, tiid, tnext, tval, tstate = table
    firstkey = -1
    for r in range(r0, len(off) - 1):
        a = off[r]
        b = off[r + 1]
        n = b - a
        if n == 0:
            continue
        if (tstate[0] + n // 2 + 2 > len(thash) or 2 * (tstate[0] + n // 2 + 2) > len(slots)
                or tstate[1] + n > len(tdata)):
            return r, NEED_TABLE
        prev = -1               # the last key of the row
        i = a
        while True:
            while i < b and data[i] != 34:
                i += 1
            if i >= b:
                break
            i += 1
            # the predictions: the key that followed the previous one last time, then the value
            # that was under the previous key
            ent = -1
            for attempt in range(2):
                if attempt == 0:
                    pe = firstkey if prev < 0 else tnext[prev]
                elif strings and prev >= 0:
                    pe = tval[prev]
                else:
                    break
                if pe < 0 or tkind[pe] & 2:
                    continue
                s0 = toff[pe]
                p = toff[pe + 1] - s0
                if i + p >= b or data[i + p] != 34:
                    continue
                if not same_bytes(data, i, tdata, s0, p):
                    continue
                j = i + p + 1
                while j < b and (data[j] == 32 or data[j] == 10 or data[j] == 13 or data[j] == 9):
                    j += 1
                if (j < b and data[j] == 58) == (tkind[pe] == KEY):
                    ent = pe
                    i += p + 1
                    break
            if ent < 0:
                ok, i, p = _decode(data, i, b, tmp)
                if not ok:
                    break
                j = i
                while j < b and (data[j] == 32 or data[j] == 10 or data[j] == 13 or data[j] == 9):
                    j += 1
                kind = KEY if j < b and data[j] == 58 else VALUE
                if kind == VALUE and not strings:
                    continue
                ent, sl, h = _find(tmp, p, kind, slots, thash, tkind, toff, tdata)
                if ent < 0:
                    ent = tstate[0]
                    nb = tstate[1]
                    slots[sl] = ent
                    thash[ent] = h
                    tkind[ent] = kind
                    for q in range(p):
                        tdata[nb + q] = tmp[q]
                        if tmp[q] == 34 or tmp[q] == 92:
                            tkind[ent] = kind | 2
                    toff[ent + 1] = nb + p
                    tstate[0] = ent + 1
                    tstate[1] = nb + p
                    if kind == KEY:
                        tstate[2] += 1
                        tiid[ent] = tstate[2]
            if (tkind[ent] & 1) == KEY:
                if prev < 0:
                    firstkey = ent
                else:
                    tnext[prev] = ent
                prev = ent
            else:
                tcount[ent] += 1
                if prev >= 0:
                    tval[prev] = ent
    return len(off) - 1, OK


def _longest(off: np.ndarray) -> int:
    return int((off[1:] - off[:-1]).max()) if len(off) > 1 else 0


def collect_args(data: np.ndarray, off: np.ndarray, table: tuple, strings: bool) -> tuple:
    """Pass 1 over one table's args: add every key to ``table`` and (with ``strings``) count every
    string value.  Returns the table (grown if needed)."""
    tmp = np.zeros(_longest(off) + 16, np.uint8)
    r = 0
    while True:
        r, status = _collect(strings, data, off, r, table, tmp)
        if status == OK:
            return table
        ln = int(off[r + 1] - off[r])
        table = (*_table_grown(*table, ln // 2 + 2, ln), table[-1])


# ---------------------------------------------------------------- pass 2: annotations


@jit
def _rows(strings, data, off, rows, j0, table, out, out_off, flags, tmp):
    """Write the annotations of row ``rows[j]``, j = j0..., at ``out[out_off[j]:out_off[j + 1]]`` (row r
    is the JSON object ``data[off[r]:off[r + 1]]``; empty = no args).  Keys come from the table;
    a string value whose entry has an iid is written as that iid.  A row this does not encode --
    see the module docstring -- is left empty with ``flags[j]`` = 1.  ``tmp`` holds the longest row.

    Returns (j, FULL) when ``out`` must grow before row ``rows[j]``, else (rows, OK)."""
    slots, thash, tkind, tdata, toff, tcount, tiid, tnext, tval, tstate = table
    kinds = np.zeros(MAX_DEPTH + 1, np.int64)
    lenpos = np.zeros(MAX_DEPTH + 1, np.int64)
    dupstart = np.zeros(MAX_DEPTH + 1, np.int64)
    dups = np.zeros(_DUPS, np.int64)
    prevkey = np.zeros(MAX_DEPTH + 1, np.int64)      # the last key of the object at each depth, or -1
    firstkey = np.full(MAX_DEPTH + 1, -1, np.int64)  # prediction of an object's first key, per depth
    ctx = np.zeros(MAX_DEPTH + 1, np.int64)          # the key a value at each depth is under, or -1
    oid = np.zeros(MAX_DEPTH + 1, np.int64)          # the object at each depth (a serial number)
    stamp = np.zeros(len(thash), np.int64)           # per key: the last object it was seen in
    serial = 0
    fb = np.zeros(1, np.float64)
    ub = fb.view(np.uint64)
    cap = len(out)
    cur = out_off[j0]
    for j in range(j0, len(rows)):
        r = rows[j]
        a = off[r]
        b = off[r + 1]
        n = b - a
        flags[j] = 0
        if n == 0:
            out_off[j + 1] = cur
            continue
        if cur + 8 * n + 1024 > cap:
            return j, FULL
        full = False
        row_start = cur
        good = False
        i = a
        while i < b and (data[i] == 32 or data[i] == 10 or data[i] == 13 or data[i] == 9):
            i += 1
        if i < b and data[i] == 123:
            i += 1
            while i < b and (data[i] == 32 or data[i] == 10 or data[i] == 13 or data[i] == 9):
                i += 1
            if i < b and data[i] == 125:              # {}
                i += 1
                while i < b and (data[i] == 32 or data[i] == 10 or data[i] == 13 or data[i] == 9):
                    i += 1
                good = i == b
            else:
                depth = 0
                kinds[0] = _OBJ
                dupstart[0] = 0
                prevkey[0] = -1
                ctx[0] = -1
                serial += 1
                oid[0] = serial
                nested = False              # an object inside another: keys checked for repeats the slow way
                duptop = 0
                state = _S_KEY
                while True:
                    while i < b and (data[i] == 32 or data[i] == 10 or data[i] == 13 or data[i] == 9):
                        i += 1
                    if i >= b:
                        break
                    c = data[i]
                    # ---- after a value: close its entry, then ',' or the container's end
                    if state == _S_AFTER:
                        lp = lenpos[depth]
                        ln = cur - lp - 1
                        if ln < 128:
                            out[lp] = ln
                        else:
                            k = _vlen(np.uint64(ln)) - 1
                            for q in range(cur - 1, lp, -1):
                                out[q + k] = out[q]
                            x = np.uint64(ln)
                            while x >= _B80:
                                out[lp] = np.uint8((x & _B7F) | _B80)
                                x >>= _S7
                                lp += 1
                            out[lp] = np.uint8(x)
                            cur += k
                        if c == 44:
                            i += 1
                            state = _S_KEY if kinds[depth] == _OBJ else _S_VALUE
                            continue
                        if c != (125 if kinds[depth] == _OBJ else 93):
                            break
                        i += 1
                        duptop = dupstart[depth]
                        if depth == 0:
                            while i < b and (data[i] == 32 or data[i] == 10 or data[i] == 13 or data[i] == 9):
                                i += 1
                            good = i == b
                            break
                        depth -= 1
                        continue
                    if state == _S_COLON:
                        if c != 58:
                            break
                        i += 1
                        state = _S_VALUE
                        continue
                    # ---- a key, or a value
                    if cur + 64 + 8 * depth > cap:
                        full = True
                        break
                    if state == _S_VALUE and kinds[depth] == _ARR:
                        out[cur] = A_ARRAY
                        lenpos[depth] = cur + 1
                        cur += 2
                    if c == 34:
                        i += 1
                        kind = KEY if state == _S_KEY else VALUE
                        ent = -1
                        # the prediction first: an entry's bytes (with neither quote nor backslash)
                        # followed by the closing quote
                        pe = -1
                        if kind == KEY:
                            pe = firstkey[depth] if prevkey[depth] < 0 else tnext[prevkey[depth]]
                        elif strings and ctx[depth] >= 0:
                            pe = tval[ctx[depth]]
                        src0 = -1
                        if pe >= 0 and tkind[pe] == kind:
                            s0 = toff[pe]
                            p = toff[pe + 1] - s0
                            if i + p < b and data[i + p] == 34 and same_bytes(data, i, tdata, s0, p):
                                ent = pe
                                src0 = s0
                                i += p + 1
                        if ent < 0:
                            ok, i, p = _decode(data, i, b, tmp)
                            if not ok:
                                break
                            if kind == KEY or strings:
                                ent, _sl, _h = _find(tmp, p, kind, slots, thash, tkind, toff, tdata)
                        if kind == KEY:
                            if ent < 0:                     # not seen by pass 1: left to Python
                                break
                            # a key repeated in one object: left to Python (which keeps the last value)
                            start = dupstart[depth]
                            if duptop - start >= _MAX_KEYS or duptop >= _DUPS:
                                break
                            if stamp[ent] == oid[depth]:
                                break
                            if nested:
                                repeated = False
                                for q in range(start, duptop):
                                    if dups[q] == ent:
                                        repeated = True
                                        break
                                if repeated:
                                    break
                            stamp[ent] = oid[depth]
                            dups[duptop] = ent
                            duptop += 1
                            out[cur] = E_ANN if depth == 0 else A_DICT
                            lenpos[depth] = cur + 1
                            out[cur + 2] = A_NAME_IID
                            cur += 3
                            x = np.uint64(tiid[ent])
                            cur = _put(out, cur, x)
                            if prevkey[depth] < 0:
                                firstkey[depth] = ent
                            else:
                                tnext[prevkey[depth]] = ent
                            prevkey[depth] = ent
                            ctx[depth] = ent
                            state = _S_COLON
                            continue
                        if ent >= 0 and ctx[depth] >= 0:
                            tval[ctx[depth]] = ent
                        iid = tiid[ent] if ent >= 0 else 0
                        if iid > 0:
                            out[cur] = A_STR_IID0
                            out[cur + 1] = A_STR_IID1
                            cur += 2
                            x = np.uint64(iid)
                        else:
                            if cur + p + 16 + 8 * depth > cap:
                                full = True
                                break
                            out[cur] = A_STR
                            cur += 1
                            x = np.uint64(p)
                        cur = _put(out, cur, x)
                        if iid == 0:
                            if src0 >= 0:
                                for q in range(p):
                                    out[cur + q] = tdata[src0 + q]
                            else:
                                for q in range(p):
                                    out[cur + q] = tmp[q]
                            cur += p
                        state = _S_AFTER
                        continue
                    if state == _S_KEY:
                        break
                    # ---- a value other than a string
                    if c == 123 or c == 91:
                        close = 125 if c == 123 else 93
                        i += 1
                        while i < b and (data[i] == 32 or data[i] == 10 or data[i] == 13 or data[i] == 9):
                            i += 1
                        if i < b and data[i] == close:      # {} or []: no value field ...
                            i += 1
                            if kinds[depth] == _ARR:            # ... but in a list, one nameless entry
                                out[cur] = A_DICT
                                out[cur + 1] = 2
                                out[cur + 2] = A_NAME
                                out[cur + 3] = 0
                                cur += 4
                            state = _S_AFTER
                        else:
                            if depth + 1 >= MAX_DEPTH:
                                break
                            depth += 1
                            kinds[depth] = _OBJ if c == 123 else _ARR
                            dupstart[depth] = duptop
                            prevkey[depth] = -1
                            ctx[depth] = ctx[depth - 1]
                            if c == 123:
                                nested = True
                                serial += 1
                                oid[depth] = serial
                                state = _S_KEY
                            else:
                                state = _S_VALUE
                        continue
                    if c == 116:
                        if i + 4 > b or data[i + 1] != 114 or data[i + 2] != 117 or data[i + 3] != 101:
                            break
                        i += 4
                        out[cur] = A_BOOL
                        out[cur + 1] = 1
                        cur += 2
                        state = _S_AFTER
                        continue
                    if c == 102:
                        if (i + 5 > b or data[i + 1] != 97 or data[i + 2] != 108 or data[i + 3] != 115
                                or data[i + 4] != 101):
                            break
                        i += 5
                        out[cur] = A_BOOL
                        out[cur + 1] = 0
                        cur += 2
                        state = _S_AFTER
                        continue
                    if c == 110:
                        if i + 4 > b or data[i + 1] != 117 or data[i + 2] != 108 or data[i + 3] != 108:
                            break
                        i += 4                              # null: no value field
                        state = _S_AFTER
                        continue
                    if c != 45 and not (48 <= c <= 57):
                        break
                    # ---- a number: an integer in [-2^63, 2^64 - 1], or a double by the exact fast path
                    neg = c == 45
                    if neg:
                        i += 1
                    if i >= b:
                        break
                    m = np.uint64(0)
                    nd = 0                  # digits in m, after its leading zeros
                    over = False            # m does not hold every digit
                    exp10 = 0
                    c = data[i]
                    if c == 48:
                        i += 1
                    elif 49 <= c <= 57:
                        while i < b and 48 <= data[i] <= 57:
                            d = np.uint64(data[i] - 48)
                            if nd < 19:
                                m = m * np.uint64(10) + d
                                nd += 1
                            elif nd == 19 and m <= (_U64_MAX - d) // np.uint64(10):
                                m = m * np.uint64(10) + d
                                nd += 1
                            else:
                                over = True
                            i += 1
                    else:
                        break
                    is_float = False
                    if i < b and data[i] == 46:
                        is_float = True
                        i += 1
                        if i >= b or not (48 <= data[i] <= 57):
                            break
                        while i < b and 48 <= data[i] <= 57:
                            if nd < 19:
                                m = m * np.uint64(10) + np.uint64(data[i] - 48)
                                if m != 0:
                                    nd += 1
                                exp10 -= 1
                            else:
                                over = True
                            i += 1
                    if i < b and (data[i] == 101 or data[i] == 69):
                        is_float = True
                        i += 1
                        eneg = False
                        if i < b and (data[i] == 43 or data[i] == 45):
                            eneg = data[i] == 45
                            i += 1
                        if i >= b or not (48 <= data[i] <= 57):
                            break
                        ex = 0
                        while i < b and 48 <= data[i] <= 57:
                            if ex < 100000:
                                ex = ex * 10 + (data[i] - 48)
                            i += 1
                        exp10 += -ex if eneg else ex
                    if over or (is_float and nd > 19):
                        break
                    if not is_float:
                        if neg:
                            if m > _I64_NEG_MAX:
                                break
                            out[cur] = A_INT
                            x = (~m) + np.uint64(1)
                        else:
                            out[cur] = A_INT if m <= _I64_MAX else A_UINT
                            x = m
                        cur += 1
                        cur = _put(out, cur, x)
                        state = _S_AFTER
                        continue
                    v = 0.0
                    if m != 0:
                        while m % np.uint64(10) == 0:
                            m //= np.uint64(10)
                            exp10 += 1
                        if m >= _FAST_MANTISSA:
                            break
                        if exp10 > 22:
                            k = exp10 - 22
                            if k > 15 or m >= _FAST_MANTISSA // _POW10I[k]:
                                break
                            m *= _POW10I[k]             # still an exact integer below 10^15
                            exp10 = 22
                        if exp10 < -22:
                            break
                        v = float(m)
                        if exp10 >= 0:
                            v = v * _POW10[exp10]
                        else:
                            v = v / _POW10[-exp10]
                    fb[0] = -v if neg else v
                    x = ub[0]
                    out[cur] = A_DOUBLE
                    for q in range(8):
                        out[cur + 1 + q] = np.uint8((x >> np.uint64(8 * q)) & np.uint64(0xFF))
                    cur += 9
                    state = _S_AFTER
        if full:
            return j, FULL
        if not good:
            cur = row_start
            flags[j] = 1
        out_off[j + 1] = cur
    return len(rows), OK


def encode_args(data: np.ndarray, off: np.ndarray, rows: np.ndarray, table: tuple, strings: bool,
                out: np.ndarray, tmp: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pass 2: the annotations of ``rows``: (buffer -- ``out`` or a larger one --, offsets, flags);
    row ``rows[j]``'s are ``buffer[off[j]:off[j + 1]]``, empty where ``flags[j]`` says the caller must
    encode it.  ``tmp``: room for the longest row."""
    out_off = np.zeros(len(rows) + 1, np.int64)
    flags = np.zeros(len(rows), np.uint8)
    if not len(rows):
        return out, out_off, flags
    if tmp is None:
        tmp = np.zeros(_longest(off) + 16, np.uint8)
    need = int((off[rows + 1] - off[rows]).sum()) + (1 << 16)    # annotations take about their JSON's size
    if len(out) < need:
        out = np.empty(need + need // 2, np.uint8)
    j = 0
    while True:
        j, status = _rows(strings, data, off, rows, j, table, out, out_off, flags, tmp)
        if status == OK:
            return out, out_off, flags
        ln = int(off[rows[j] + 1] - off[rows[j]])
        out = _grown(out, int(out_off[j]), max(len(out), 8 * ln + 1024))


# ---------------------------------------------------------------- packets


@jit
def _encode(time, kind, index, lo, hi, last, js, ji, codes, seq_id, flags_value, uuids,
            s_track, s_name, s_cat, s_fb, i_track, i_name, i_cat, i_fb, c_track, c_bits,
            fo_start, fo_ids, fi_start, fi_ids, s_ann, s_ann_off, i_ann, i_ann_off, fb_data, fb_off, out):
    """Packets of events [lo, hi) into ``out`` until it is full.  ``js``/``ji`` count the slice
    begins / instants of the step already written (their annotations are ``*_ann`` at
    ``*_ann_off[j]``).  Returns (next event, bytes, last time, js, ji, status): OK when all were
    written, FULL when ``out`` is, or minus the size of a packet that does not fit an empty ``out``."""
    k_begin, k_end, k_instant = codes[0], codes[1], codes[2]
    cap = len(out)
    pos = 0
    seq = np.uint64(seq_id)
    flags_u = np.uint64(flags_value)
    head = 1 + 1 + _vlen(seq) + 1 + _vlen(flags_u)       # tags of timestamp, sequence id, flags
    for e in range(lo, hi):
        k = kind[e]
        r = index[e]
        t = time[e]
        delta = np.uint64(t - last)
        alen = 0
        asrc = 0                 # 0: none, 1: slice annotations, 2: instant annotations, 3: Python-encoded
        a0 = 0
        nfo = 0
        nfi = 0
        track = 0
        name = 0
        cat = 0
        if k == k_end:
            uuid = np.uint64(uuids[s_track[r]])
            te_len = 2 + 1 + _vlen(uuid)
            etype = TYPE_SLICE_END
        elif k == k_begin or k == k_instant:
            if k == k_begin:
                track = s_track[r]
                name = s_name[r]
                cat = s_cat[r]
                etype = TYPE_SLICE_BEGIN
                nfo = fo_start[r + 1] - fo_start[r]
                nfi = fi_start[r + 1] - fi_start[r]
                fb = s_fb[r]
                if fb < 0:
                    asrc = 1
                    a0 = s_ann_off[js]
                    alen = s_ann_off[js + 1] - a0
            else:
                track = i_track[r]
                name = i_name[r]
                cat = i_cat[r]
                etype = TYPE_INSTANT
                fb = i_fb[r]
                if fb < 0:
                    asrc = 2
                    a0 = i_ann_off[ji]
                    alen = i_ann_off[ji + 1] - a0
            if fb >= 0:
                asrc = 3
                a0 = fb_off[fb]
                alen = fb_off[fb + 1] - a0
            uuid = np.uint64(uuids[track])
            te_len = 2 + 1 + _vlen(uuid) + 1 + _vlen(np.uint64(name + 1)) + alen + 10 * (nfo + nfi)
            if cat != 0:
                te_len += 1 + _vlen(np.uint64(cat + 1))
        else:
            uuid = np.uint64(uuids[c_track[r]])
            te_len = 2 + 1 + _vlen(uuid) + 2 + 8
            etype = TYPE_COUNTER
        body = head + _vlen(delta) + 1 + _vlen(np.uint64(te_len)) + te_len
        size = 1 + _vlen(np.uint64(body)) + body
        if pos + size > cap:
            return e, pos, last, js, ji, (FULL if pos else -size)
        p = pos
        out[p] = T_PACKET
        p += 1
        p = _put(out, p, np.uint64(body))
        out[p] = P_TS
        p = _put(out, p + 1, delta)
        out[p] = P_SEQ
        p = _put(out, p + 1, seq)
        out[p] = P_FLAGS
        p = _put(out, p + 1, flags_u)
        out[p] = P_TE
        p = _put(out, p + 1, np.uint64(te_len))
        out[p] = E_TYPE
        out[p + 1] = etype
        out[p + 2] = E_TRACK
        p = _put(out, p + 3, uuid)
        if etype == TYPE_COUNTER:
            out[p] = E_DOUBLE0
            out[p + 1] = E_DOUBLE1
            x = c_bits[r]
            for q in range(8):
                out[p + 2 + q] = np.uint8((x >> np.uint64(8 * q)) & np.uint64(0xFF))
            p += 10
        elif etype != TYPE_SLICE_END:
            out[p] = E_NAME
            p = _put(out, p + 1, np.uint64(name + 1))
            if cat != 0:
                out[p] = E_CAT
                p = _put(out, p + 1, np.uint64(cat + 1))
            if asrc == 1:
                for q in range(alen):
                    out[p + q] = s_ann[a0 + q]
            elif asrc == 2:
                for q in range(alen):
                    out[p + q] = i_ann[a0 + q]
            elif asrc == 3:
                for q in range(alen):
                    out[p + q] = fb_data[a0 + q]
            p += alen
            for f in range(fo_start[r], fo_start[r] + nfo):
                out[p] = E_FLOW0
                out[p + 1] = E_FLOW1
                x = fo_ids[f]
                for q in range(8):
                    out[p + 2 + q] = np.uint8((x >> np.uint64(8 * q)) & np.uint64(0xFF))
                p += 10
            for f in range(fi_start[r], fi_start[r] + nfi):
                out[p] = E_TFLOW0
                out[p + 1] = E_TFLOW1
                x = fi_ids[f]
                for q in range(8):
                    out[p + 2 + q] = np.uint8((x >> np.uint64(8 * q)) & np.uint64(0xFF))
                p += 10
            if k == k_begin:
                js += 1
            else:
                ji += 1
        pos = p
        last = t
    return hi, pos, last, js, ji, OK


class EventEncoder:
    """Pass 2: packets of the writer's event stream, a step at a time: ``stream`` is the
    (time, kind, index) arrays of the events to encode, replaced between runs to go on with the
    stream's next part.

    ``codes`` are the stream's kind values for (begin, end, instant, counter); names and categories
    are written as ``id + 1`` (a category id of 0 means none); ``uuids[track]`` is a track's uuid;
    ``slices``/``instants`` are (track, name, category, args data, args offsets).  The rows whose
    args the kernel leaves alone are handed to ``fallback(0 for slices or 1 for instants, rows)``,
    which returns their encoded annotations.  With ``pool`` (a ThreadPoolExecutor), pass 2 runs on
    two threads.
    """

    def __init__(self, *, codes, seq_id, flags, uuids, slices, instants, counters,
                 flows_out, flows_in, table, strings, chunk, last, fallback, pool=None, stream=None):
        self.stream = stream          # (time, kind, index) of the events to encode: set before run()
        self.codes = np.asarray(codes, dtype=np.int64)
        self.seq_id, self.flags, self.uuids = seq_id, flags, uuids
        self.slices, self.instants, self.counters = slices, instants, counters
        self.flows = (*flows_out, *flows_in)
        self.table, self.strings, self.fallback = table, strings, fallback
        # per row, its place among the step's rows the Python encoder did (-1: none); int32 for
        # memory (a million slices: 2.5 MB less), int64 past 2**31 rows
        fb_type = np.int32 if max(len(slices[0]), len(instants[0])) < 2**31 else np.int64
        self.s_fb = np.full(len(slices[0]), -1, fb_type)
        self.i_fb = np.full(len(instants[0]), -1, fb_type)
        self.out = np.zeros(max(chunk, 64), np.uint8)
        # pass 2 on two threads when given a pool (of one thread): each half of a step's rows with its
        # own buffers and its own copy of the table's predictions (the only part of it pass 2 writes)
        self.pool = pool
        self.tables = (table, (*table[:7], table[7].copy(), table[8].copy(), table[9]))
        self.bufs = [[np.zeros(1 << 16, np.uint8), np.zeros(1 << 16, np.uint8), np.zeros(1 << 16, np.uint8)]
                     for _ in range(2)]
        self.tmps = [[np.zeros(_longest(cols[4]) + 16, np.uint8) for _ in range(2)] for cols in (slices, instants)]
        self.last = last

    def _annotations(self, which: int, data: np.ndarray, off: np.ndarray, rows: np.ndarray):
        """encode_args of ``rows``, in two halves at once when there are enough of them."""
        bufs, tmps = self.bufs[which], self.tmps[which]
        if self.pool is None or len(rows) < PARALLEL_ROWS:
            bufs[0], ann_off, left = encode_args(data, off, rows, self.tables[0], self.strings, bufs[0], tmps[0])
            return bufs[0], ann_off, left
        h = len(rows) // 2
        other = self.pool.submit(encode_args, data, off, rows[h:], self.tables[1], self.strings, bufs[1], tmps[1])
        try:
            bufs[0], off_a, left_a = encode_args(data, off, rows[:h], self.tables[0], self.strings, bufs[0], tmps[0])
        finally:
            bufs[1], off_b, left_b = other.result()
        na, nb = int(off_a[-1]), int(off_b[-1])
        if len(bufs[2]) < na + nb:
            bufs[2] = np.empty(na + nb + (na + nb) // 2, np.uint8)
        bufs[2][:na] = bufs[0][:na]
        bufs[2][na:na + nb] = bufs[1][:nb]
        return bufs[2], np.concatenate([off_a, off_b[1:] + na]), np.concatenate([left_a, left_b])

    def run(self, lo: int, hi: int):
        """Yield buffers (memoryviews, valid until the next one) of the packets of events [lo, hi)."""
        time, kind, index = self.stream
        k, ix = kind[lo:hi], index[lo:hi]
        s_track, s_name, s_cat, s_data, s_off = self.slices
        i_track, i_name, i_cat, i_data, i_off = self.instants
        rows_s, rows_i = ix[k == self.codes[0]], ix[k == self.codes[2]]
        s_ann, s_ann_off, s_left = self._annotations(0, s_data, s_off, rows_s)
        i_ann, i_ann_off, i_left = self._annotations(1, i_data, i_off, rows_i)
        left_s, left_i = rows_s[s_left != 0], rows_i[i_left != 0]
        parts = (self.fallback(0, left_s) if len(left_s) else []) + (self.fallback(1, left_i) if len(left_i) else [])
        self.s_fb[left_s] = np.arange(len(left_s))
        self.i_fb[left_i] = np.arange(len(left_s), len(parts))
        fb_data = np.frombuffer(bytearray(b"".join(parts)), np.uint8) if parts else np.zeros(0, np.uint8)
        fb_off = np.zeros(len(parts) + 1, np.int64)
        np.cumsum(np.fromiter((len(x) for x in parts), np.int64, len(parts)), out=fb_off[1:])
        js = ji = 0
        while lo < hi:
            lo, n, self.last, js, ji, status = _encode(
                time, kind, index, lo, hi, self.last, js, ji, self.codes, self.seq_id, self.flags, self.uuids,
                s_track, s_name, s_cat, self.s_fb, i_track, i_name, i_cat, self.i_fb, *self.counters,
                *self.flows, s_ann, s_ann_off, i_ann, i_ann_off, fb_data, fb_off, self.out)
            if n:
                yield memoryview(self.out)[:n]
            if status < 0:                      # one packet larger than the buffer
                self.out = np.zeros(-status, np.uint8)
        self.s_fb[left_s] = -1
        self.i_fb[left_i] = -1


# ---------------------------------------------------------------- interned data


@jit
def interned_entries(tag, iids, data, off):
    """Entries ``tag { 1: iid, 2: bytes }`` (the layout of EventName, EventCategory,
    DebugAnnotationName and InternedString), back to back.  Returns (bytes, end offset of each)."""
    n = len(iids)
    size = 0
    for j in range(n):
        ln = off[j + 1] - off[j]
        inner = 1 + _vlen(np.uint64(iids[j])) + 1 + _vlen(np.uint64(ln)) + ln
        size += _vlen(np.uint64(tag)) + _vlen(np.uint64(inner)) + inner
    buf = np.zeros(size, np.uint8)
    ends = np.zeros(n, np.int64)
    p = 0
    for j in range(n):
        ln = off[j + 1] - off[j]
        inner = 1 + _vlen(np.uint64(iids[j])) + 1 + _vlen(np.uint64(ln)) + ln
        p = _put(buf, p, np.uint64(tag))
        p = _put(buf, p, np.uint64(inner))
        buf[p] = S_IID
        p = _put(buf, p + 1, np.uint64(iids[j]))
        buf[p] = S_STR
        p = _put(buf, p + 1, np.uint64(ln))
        for q in range(ln):
            buf[p + q] = data[off[j] + q]
        p += ln
        ends[j] = p
    return buf, ends


# ---------------------------------------------------------------- rows a writer cannot copy as they are

SCREEN_DEEP, SCREEN_SURROGATE, SCREEN_SUSPECT, SCREEN_LONG = 1, 2, 4, 8


@jit
def screen_args(data, off, max_depth):
    """Per row of args text, the reasons it may not be copied into a JSON output as it is (bits):
    SCREEN_DEEP -- a container more than ``max_depth`` containers deep inside the row's object
    (exact); SCREEN_SURROGATE -- a ``\\u`` escape of a UTF-16 surrogate (exact); SCREEN_SUSPECT --
    something orjson may refuse: a letter outside strings that no JSON literal or exponent has
    (``NaN``, ``Infinity``), an exponent of 3+ digits, a run of 300+ digits, bytes that are not
    UTF-8 (the caller checks);
    SCREEN_LONG -- a number of 20 or more digits before its exponent, which Perfetto's JSON importer
    misreads (its mantissa overflows: ``0.00003300000000000525`` reads as 0.000425)."""
    n = len(off) - 1
    flags = np.zeros(n, np.uint8)
    for r in range(n):
        a = off[r]
        b = off[r + 1]
        f = 0
        depth = 0
        digits = 0
        i = a
        while i < b:
            c = data[i]
            if c == 34:                                     # a string
                i += 1
                while i < b and data[i] != 34:
                    if data[i] == 92:
                        if (i + 2 < b and data[i + 1] == 117 and (data[i + 2] == 100 or data[i + 2] == 68)
                                and i + 3 < b and (56 <= data[i + 3] <= 57 or 97 <= data[i + 3] <= 102
                                                   or 65 <= data[i + 3] <= 70)):
                            f |= SCREEN_SURROGATE
                        i += 2
                    elif data[i] >= 128:                    # UTF-8: a lead byte and its continuations
                        n = _utf8_len(data, i, b)
                        if n == 0:
                            f |= SCREEN_SUSPECT
                            n = 1
                        i += n
                    else:
                        i += 1
                i += 1
                digits = 0
                continue
            if c == 123 or c == 91:
                depth += 1
                if depth > max_depth + 1:
                    f |= SCREEN_DEEP
            elif c == 125 or c == 93:
                depth -= 1
            elif 48 <= c <= 57:
                digits += 1
                if digits >= 20:
                    f |= SCREEN_LONG
                if digits >= 300:
                    f |= SCREEN_SUSPECT
                i += 1
                continue
            elif c == 101 or c == 69:                       # e / E: an exponent's digits
                if digits > 0:
                    j = i + 1
                    if j < b and (data[j] == 43 or data[j] == 45):
                        j += 1
                    k = j
                    while k < b and 48 <= data[k] <= 57:
                        k += 1
                    if k - j >= 3:
                        f |= SCREEN_SUSPECT
            elif c >= 128:
                f |= SCREEN_SUSPECT
            elif (65 <= c <= 90 or 97 <= c <= 122) and c != 116 and c != 114 and c != 117 and c != 102 \
                    and c != 97 and c != 108 and c != 115 and c != 110:
                f |= SCREEN_SUSPECT                         # not a letter of true/false/null
            digits = 0 if c != 46 else digits
            i += 1
        flags[r] = f
    return flags
