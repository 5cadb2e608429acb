"""Scan the events of a Chrome Trace Event JSON array into columns, at compiled speed.

:func:`scan` reads the text of a ``traceEvents`` array one event object at a time and writes, per
event, the fields the readers need -- phase, name, category, ``ts``/``dur`` as exact integer ns,
``pid``/``tid``/``id`` as integers, the ``s`` and ``bp`` letters, and where the args object's
text is -- into preallocated columns.  Names and
categories are interned into a :class:`Strings` table that lives as long as the file's reading.

It handles the common, plain shape of an event.  An event with anything else -- a field of
another type (a string ``pid``, a float ``tid``), escapes in a name, ``ts`` with an exponent or
more than three decimals, an args value that is not an object or holds ``\\u`` escapes or
exponents, a repeated or unusual key (``id2``, ``bind_id``, ``flow_in``, ``flow_out``) -- is
marked ``SLOW``: the reader decodes that event's text (``start``/``end``) with the general
decoder instead.  Nothing is dropped here, and nothing is guessed.

The args objects are only checked here (as JSON, and for what makes an event SLOW); :func:`compact`
copies out the ones the reader keeps, without the whitespace between their tokens, on the reader's
own thread -- so the two threads share the work.

The text may end in the middle of an event: the scan stops before it and says where, so that the
caller can read on and start again there.  Text that is not JSON stops the scan with ``BAD``.
"""

from __future__ import annotations

import re

import numpy as np

from . import inline, jit, same_bytes

# status returned by scan()
MORE = 0       # the text ended (possibly inside an event): call again from `pos` with more text
END = 1        # the array's closing ']' was read; `pos` is just after it
FULL = 2       # the output columns are full: consume them and call again from `pos`
GROW = 3       # the string table is full: grow it and call again from `pos`
BAD = -1       # not the JSON of an array of objects at `pos`

# flags
F_NAME, F_CAT, F_TS, F_DUR, F_PID, F_TID, F_ID, F_ARGS, F_S, F_BP, F_PH = (1 << i for i in range(11))
SLOW = 1 << 15

_WS = np.zeros(256, np.bool_)
for _c in b" \t\r\n":
    _WS[_c] = True

_MAX_US = 4_000_000_000_000_000     # as traceconv.readers.chrome.reader.MAX_US


class Columns:
    """Preallocated per-event outputs of :func:`scan`; ``cap`` events at a time."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.start = np.zeros(cap, np.int64)    # the event's '{' in the text
        self.end = np.zeros(cap, np.int64)      # just after its '}'
        self.flags = np.zeros(cap, np.int32)
        self.ph = np.zeros(cap, np.uint8)
        self.name = np.zeros(cap, np.int32)     # Strings ids (-1: absent)
        self.cat = np.zeros(cap, np.int32)
        self.ts = np.zeros(cap, np.int64)       # ns
        self.dur = np.zeros(cap, np.int64)
        self.pid = np.zeros(cap, np.int64)
        self.tid = np.zeros(cap, np.int64)
        self.id = np.zeros(cap, np.int64)
        self.s = np.zeros(cap, np.uint8)
        self.bp = np.zeros(cap, np.uint8)
        self.a0 = np.zeros(cap, np.int64)       # the args object's text: text[a0:a1] (a0 == a1: none)
        self.a1 = np.zeros(cap, np.int64)


class Strings:
    """An interning table of byte strings (names, categories): open addressing over FNV-1a
    hashes, with the bytes compared on every hit, so equal ids mean equal bytes."""

    def __init__(self, slots: int = 1 << 12, store: int = 1 << 16) -> None:
        self.table = np.full(slots, -1, np.int32)
        self.hash = np.zeros(slots // 2, np.uint64)
        self.off = np.zeros(slots // 2 + 1, np.int64)
        self.store = np.zeros(store, np.uint8)
        self.count = np.zeros(1, np.int64)

    def __len__(self) -> int:
        return int(self.count[0])

    def get(self, i: int) -> bytes:
        return self.store[self.off[i]:self.off[i + 1]].tobytes()

    def grow(self) -> None:
        """Make room after :func:`scan` said ``GROW``: twice the slots if the table is half full,
        else twice the bytes (a string longer than the free bytes: grown until it fits, each step
        doubling, so the table stays within twice the text it holds)."""
        n = len(self)
        table_full = 2 * (n + 1) > len(self.table)
        slots = len(self.table) * 2 if table_full else len(self.table)
        store = max(len(self.store) * (1 if table_full else 2), 2 * int(self.off[n]) + (1 << 16))
        h = np.zeros(slots // 2, np.uint64)
        h[:n] = self.hash[:n]
        off = np.zeros(slots // 2 + 1, np.int64)
        off[:n + 1] = self.off[:n + 1]
        st = np.zeros(store, np.uint8)
        st[:off[n]] = self.store[:off[n]]
        self.hash, self.off, self.store = h, off, st
        self.table = np.full(slots, -1, np.int32)
        _rehash(self.table, self.hash, n)


@jit
def _rehash(table, hashes, n):
    mask = np.uint64(len(table) - 1)
    for i in range(n):
        j = hashes[i] & mask
        while table[j] >= 0:
            j = (j + np.uint64(1)) & mask
        table[j] = i


@inline
def _intern(b, lo, hi, table, hashes, off, store, count):
    """Id of b[lo:hi] in the table, adding it if new; -1 if the table is full."""
    h = np.uint64(14695981039346656037)
    for k in range(lo, hi):
        h = (h ^ np.uint64(b[k])) * np.uint64(1099511628211)
    mask = np.uint64(len(table) - 1)
    j = h & mask
    ln = hi - lo
    while True:
        e = table[j]
        if e < 0:
            break
        if hashes[e] == h and off[e + 1] - off[e] == ln and same_bytes(store, off[e], b, lo, ln):
            return e
        j = (j + np.uint64(1)) & mask
    n = count[0]
    if 2 * (n + 1) > len(table) or off[n] + ln > len(store):
        return -1
    table[j] = n
    hashes[n] = h
    o = off[n]
    for k in range(ln):
        store[o + k] = b[lo + k]
    off[n + 1] = o + ln
    count[0] = n + 1
    return n


@inline
def _ws(b, i, n):
    while i < n and (b[i] == 32 or b[i] == 10 or b[i] == 13 or b[i] == 9):
        i += 1
    return i


@inline
def _string_end(b, i, n):
    """b[i] is '"': (index after the closing quote, flags) -- flags 1: has escapes, 2: has a \\u
    escape, 4: has a raw control character (not JSON); index -1 if the text ends first."""
    i += 1
    fl = 0
    while i < n:
        c = b[i]
        if c == 34:
            return i + 1, fl
        if c == 92:
            fl |= 1
            if i + 1 < n and b[i + 1] == 117:
                fl |= 2
            i += 2
            continue
        if c < 32:
            fl |= 4
        i += 1
    return -1, fl


@inline
def _number_end(b, i, n):
    """A JSON number at b[i]: (index after it, flags) -- 1: has a fraction, 2: has an exponent;
    index -1 if the text ends first, -2 if it is not a number."""
    j = i
    if j < n and b[j] == 45:
        j += 1
    d0 = j
    while j < n and 48 <= b[j] <= 57:
        j += 1
    if j == d0:
        return (-1 if j >= n else -2), 0
    fl = 0
    if j < n and b[j] == 46:
        fl |= 1
        j += 1
        d1 = j
        while j < n and 48 <= b[j] <= 57:
            j += 1
        if j == d1:
            return (-1 if j >= n else -2), 0
    if j < n and (b[j] == 101 or b[j] == 69):
        fl |= 2
        j += 1
        if j < n and (b[j] == 43 or b[j] == 45):
            j += 1
        d2 = j
        while j < n and 48 <= b[j] <= 57:
            j += 1
        if j == d2:
            return (-1 if j >= n else -2), 0
    if j >= n:
        return -1, fl          # the number may go on in the next piece of text
    return j, fl


@jit
def _walk(b, i, n, out, o, copy):
    """Check the JSON value at b[i] (after whitespace) and, if ``copy``, write it into out[o:]
    without the whitespace between its tokens.  Returns (index after it in b, index after it in
    out, flags): 1 escapes, 2 \\u escapes, 8 an exponent, 16 a number of 100+ characters, 32 a raw
    control character in a string; index -1 if the text ends first, -2 if
    it is not JSON (or is nested deeper than 63)."""
    stack = np.uint64(0)        # bit d: the container at depth d+1 is an object
    depth = 0
    fl = 0
    # what may come next: 0 a value, 1 a key or '}' (just after '{'), 2 a key (after ','),
    # 3 ':' , 4 ',' or the container's end, 5 a value or ']' (just after '[')
    want = 0
    while True:
        while i < n and (b[i] == 32 or b[i] == 10 or b[i] == 13 or b[i] == 9):
            i += 1
        if i >= n:
            return -1, o, fl
        c = b[i]
        if want == 3:
            if c != 58:
                return -2, o, fl
            if copy:
                out[o] = c
                o += 1
            i += 1
            want = 0
            continue
        if want == 4:
            is_obj = depth > 0 and ((stack >> np.uint64(depth - 1)) & np.uint64(1)) == np.uint64(1)
            if c == 44:
                want = 2 if is_obj else 0
            elif (c == 125 and is_obj) or (c == 93 and not is_obj):
                depth -= 1
                want = 4
            else:
                return -2, o, fl
            if copy:
                out[o] = c
                o += 1
            i += 1
            if depth == 0 and want == 4:
                return i, o, fl
            continue
        if (want == 1 and c == 125) or (want == 5 and c == 93):     # {} or []
            depth -= 1
            if copy:
                out[o] = c
                o += 1
            i += 1
            want = 4
            if depth == 0:
                return i, o, fl
            continue
        if (want == 1 or want == 2) and c != 34:
            return -2, o, fl
        # a value (or a key, which is a string)
        if c == 34:
            if copy:
                # find the end and copy in one pass
                j = -1
                f = 0
                k = i + 1
                out[o] = 34
                o2 = o + 1
                while k < n:
                    ch = b[k]
                    out[o2] = ch
                    o2 += 1
                    k += 1
                    if ch == 34:
                        j = k
                        break
                    if ch == 92:
                        f |= 1
                        if k < n:
                            nx = b[k]
                            if nx == 117:
                                f |= 2
                            out[o2] = nx
                            o2 += 1
                            k += 1
                    elif ch < 32:
                        f |= 4
                if j < 0:
                    return -1, o, fl
                o = o2
            else:
                j, f = _string_end(b, i, n)
                if j < 0:
                    return -1, o, fl
            fl |= (f & 3) | (32 if f & 4 else 0)
            i = j
            if want == 1 or want == 2:
                want = 3
                continue
        elif c == 123 or c == 91:
            if depth >= 63:
                return -2, o, fl      # deeper than the stack: the general decoder reads such a file
            if c == 123:
                stack |= np.uint64(1) << np.uint64(depth)
            else:
                stack &= ~(np.uint64(1) << np.uint64(depth))
            depth += 1
            if copy:
                out[o] = c
                o += 1
            i += 1
            want = 1 if c == 123 else 5
            continue
        elif c == 45 or 48 <= c <= 57:
            j, f = _number_end(b, i, n)
            if j < 0:
                return j, o, fl
            if f & 2:
                fl |= 8
            if j - i >= 100:
                fl |= 16
            if copy:
                for k in range(i, j):
                    out[o] = b[k]
                    o += 1
            i = j
        elif c == 116 or c == 102 or c == 110:     # true false null
            ln = 4 if c != 102 else 5
            if i + ln > n:
                return -1, o, fl
            if c == 116:
                ok = b[i + 1] == 114 and b[i + 2] == 117 and b[i + 3] == 101
            elif c == 102:
                ok = b[i + 1] == 97 and b[i + 2] == 108 and b[i + 3] == 115 and b[i + 4] == 101
            else:
                ok = b[i + 1] == 117 and b[i + 2] == 108 and b[i + 3] == 108
            if not ok:
                return -2, o, fl
            if copy:
                for k in range(i, i + ln):
                    out[o] = b[k]
                    o += 1
            i += ln
        else:
            return -2, o, fl
        if depth == 0:
            return i, o, fl
        want = 4


@inline
def _us_to_ns(b, i, j):
    """A JSON number b[i:j] of µs → (ok, ns): exact for integers and up to 3 decimals, within
    ±MAX_US; anything else is not ok (the general decoder handles it)."""
    k = i
    neg = False
    if b[k] == 45:
        neg = True
        k += 1
    v = 0
    nd = 0
    while k < j and 48 <= b[k] <= 57:
        v = v * 10 + (b[k] - 48)
        nd += 1
        k += 1
        if nd > 16:
            return False, 0
    frac = 0
    nf = 0
    if k < j and b[k] == 46:
        k += 1
        while k < j and 48 <= b[k] <= 57:
            if nf == 3:
                return False, 0
            frac = frac * 10 + (b[k] - 48)
            nf += 1
            k += 1
    if k != j or v >= _MAX_US:
        return False, 0
    while nf < 3:
        frac *= 10
        nf += 1
    ns = v * 1000 + frac
    return True, (-ns if neg else ns)


@inline
def _int(b, i, j):
    """A JSON integer b[i:j] of at most 18 digits → (ok, value)."""
    k = i
    neg = False
    if b[k] == 45:
        neg = True
        k += 1
    if k >= j or j - k > 18:
        return False, 0
    v = 0
    while k < j:
        c = b[k]
        if c < 48 or c > 57:
            return False, 0
        v = v * 10 + (c - 48)
        k += 1
    return True, (-v if neg else v)


# keys the scanner knows
K_OTHER, K_PH, K_NAME, K_CAT, K_TS, K_DUR, K_PID, K_TID, K_ID, K_ARGS, K_S, K_BP, K_RARE = range(13)


@jit
def _scan(b, pos, n, start, end, flags, ph, name, cat, ts, dur, pid, tid, eid, sc, bp, a0, a1, nowhere,
          table, hashes, off, store, count, cap):
    """See :func:`scan`.  Returns (events written, pos, status)."""
    e = 0
    while True:
        # between events: whitespace, a comma, or the array's end
        i = _ws(b, pos, n)
        if i >= n:
            return e, pos, MORE
        c = b[i]
        if c == 44:                      # ','
            i = _ws(b, i + 1, n)
            if i >= n:
                return e, pos, MORE
            c = b[i]
        if c == 93:                      # ']'
            return e, i + 1, END
        if c != 123:                     # '{'
            return e, i, BAD
        if e >= cap:
            return e, i, FULL
        ev_start = i
        fl = 0
        ar0 = 0
        ar1 = 0
        nm = -1
        ct = -1
        i += 1
        ok_event = True     # False: stop here (need more text / bad / grow)
        status = MORE
        while True:
            i = _ws(b, i, n)
            if i >= n:
                ok_event = False
                break
            c = b[i]
            if c == 125:                 # '}'
                i += 1
                break
            if c == 44:
                i += 1
                continue
            if c != 34:
                ok_event = False
                status = BAD
                break
            k0 = i + 1
            j, sf = _string_end(b, i, n)
            if j < 0:
                ok_event = False
                break
            k1 = j - 1
            if sf != 0:
                fl |= SLOW               # an escaped key: leave the event to the general decoder
            i = _ws(b, j, n)
            if i >= n:
                ok_event = False
                break
            if b[i] != 58:               # ':'
                ok_event = False
                status = BAD
                break
            i = _ws(b, i + 1, n)
            if i >= n:
                ok_event = False
                break
            c = b[i]
            v0 = i
            # which key (compared byte by byte here: a helper taking the array would cost two
            # atomic reference-count operations per call)
            kl = k1 - k0
            key = K_OTHER
            if sf == 0 and kl > 0 and kl <= 8:
                c0 = b[k0]
                c1 = b[k0 + 1] if kl > 1 else 0
                c2 = b[k0 + 2] if kl > 2 else 0
                c3 = b[k0 + 3] if kl > 3 else 0
                if kl == 1:
                    if c0 == 115:
                        key = K_S
                elif kl == 2:
                    if c0 == 112 and c1 == 104:
                        key = K_PH
                    elif c0 == 116 and c1 == 115:
                        key = K_TS
                    elif c0 == 105 and c1 == 100:
                        key = K_ID
                    elif c0 == 98 and c1 == 112:
                        key = K_BP
                elif kl == 3:
                    if c0 == 99 and c1 == 97 and c2 == 116:
                        key = K_CAT
                    elif c0 == 100 and c1 == 117 and c2 == 114:
                        key = K_DUR
                    elif c0 == 112 and c1 == 105 and c2 == 100:
                        key = K_PID
                    elif c0 == 116 and c1 == 105 and c2 == 100:
                        key = K_TID
                    elif c0 == 105 and c1 == 100 and c2 == 50:
                        key = K_RARE                                      # id2
                elif kl == 4:
                    if c0 == 110 and c1 == 97 and c2 == 109 and c3 == 101:
                        key = K_NAME
                    elif c0 == 97 and c1 == 114 and c2 == 103 and c3 == 115:
                        key = K_ARGS
                elif kl == 7:
                    if (c0 == 98 and c1 == 105 and c2 == 110 and c3 == 100 and b[k0 + 4] == 95
                            and b[k0 + 5] == 105 and b[k0 + 6] == 100):
                        key = K_RARE                                      # bind_id
                    elif (c0 == 102 and c1 == 108 and c2 == 111 and c3 == 119 and b[k0 + 4] == 95
                          and b[k0 + 5] == 105 and b[k0 + 6] == 110):
                        key = K_RARE                                      # flow_in
                elif kl == 8:
                    if (c0 == 102 and c1 == 108 and c2 == 111 and c3 == 119 and b[k0 + 4] == 95
                            and b[k0 + 5] == 111 and b[k0 + 6] == 117 and b[k0 + 7] == 116):
                        key = K_RARE                                      # flow_out
            # the value: handled by key; anything unexpected makes the event SLOW
            if key == K_ARGS:
                if fl & F_ARGS:
                    fl |= SLOW
                fl |= F_ARGS
                if c == 123:
                    # checked here, copied out (without whitespace) by compact() for the rows kept
                    j, _o, vf = _walk(b, i, n, nowhere, 0, False)
                    if j < 0:
                        ok_event = False
                        status = MORE if j == -1 else BAD
                        break
                    if vf & (2 | 8 | 16 | 32):
                        fl |= SLOW
                    ar0 = i
                    ar1 = j
                    i = j
                    continue
                fl |= SLOW
            elif c == 34 and (key == K_NAME or key == K_CAT or key == K_PH or key == K_S or key == K_BP):
                j, sf = _string_end(b, i, n)
                if j < 0:
                    ok_event = False
                    break
                if sf != 0:
                    fl |= SLOW
                    i = j
                    continue
                lo = i + 1
                hi = j - 1
                if key == K_NAME or key == K_CAT:
                    sid = _intern(b, lo, hi, table, hashes, off, store, count)
                    if sid < 0:
                        ok_event = False
                        status = GROW
                        break
                    if key == K_NAME:
                        if fl & F_NAME:
                            fl |= SLOW
                        fl |= F_NAME
                        nm = sid
                    else:
                        if fl & F_CAT:
                            fl |= SLOW
                        fl |= F_CAT
                        ct = sid
                else:
                    f = F_PH if key == K_PH else (F_S if key == K_S else F_BP)
                    if fl & f or hi - lo != 1:
                        fl |= SLOW
                    fl |= f
                    ch = b[lo] if hi - lo == 1 else 0
                    if f == F_PH:
                        ph[e] = ch
                    elif f == F_S:
                        sc[e] = ch
                    else:
                        bp[e] = ch
                i = j
                continue
            elif (c == 45 or 48 <= c <= 57) and (key == K_TS or key == K_DUR or key == K_PID or key == K_TID
                                                 or key == K_ID):
                j, nf = _number_end(b, i, n)
                if j < 0:
                    ok_event = False
                    status = MORE if j == -1 else BAD
                    break
                if key == K_TS or key == K_DUR:
                    good, v = _us_to_ns(b, i, j)
                    if key == K_TS:
                        f = F_TS
                        if good:
                            ts[e] = v
                    else:
                        f = F_DUR
                        if good:
                            dur[e] = v
                else:
                    good, v = _int(b, i, j)
                    if key == K_PID:
                        f = F_PID
                        pid[e] = v
                    elif key == K_TID:
                        f = F_TID
                        tid[e] = v
                    else:
                        f = F_ID
                        eid[e] = v
                if not good or fl & f:
                    fl |= SLOW
                fl |= f
                i = j
                continue
            elif key != K_OTHER:
                fl |= SLOW                # a known key with a value of another type, or a rare one
            # skip the value
            j, _o, vf = _walk(b, v0, n, nowhere, 0, False)
            if j < 0:
                ok_event = False
                status = MORE if j == -1 else BAD
                break
            if vf & 32:
                fl |= SLOW
            i = j
        if not ok_event:
            return e, ev_start, status
        start[e] = ev_start
        end[e] = i
        flags[e] = fl
        name[e] = nm
        cat[e] = ct
        a0[e] = ar0
        a1[e] = ar1
        if not (fl & F_PH):
            ph[e] = 0
        e += 1
        pos = i


def scan(text: np.ndarray, pos: int, cols: Columns, strings: Strings) -> tuple[int, int, int]:
    """Scan events from ``text[pos:]`` into ``cols`` (from row 0) and ``strings``.

    Returns ``(events, pos, status)``: the rows written, where to go on, and why it stopped
    (:data:`MORE`, :data:`END`, :data:`FULL`, :data:`GROW`, :data:`BAD`).  Row ``r``'s args object
    is ``text[cols.a0[r]:cols.a1[r]]``, checked as JSON; :func:`compact` copies out the rows kept.
    """
    return _scan(text, pos, len(text), cols.start, cols.end, cols.flags, cols.ph, cols.name, cols.cat,
                 cols.ts, cols.dur, cols.pid, cols.tid, cols.id, cols.s, cols.bp, cols.a0, cols.a1, _NOWHERE,
                 strings.table, strings.hash, strings.off, strings.store, strings.count, cols.cap)


@jit
def _compact(b, a0, a1, rows, out, lens):
    o = 0
    for k in range(len(rows)):
        r = rows[k]
        i = a0[r]
        j = a1[r]
        s = o
        instr = False
        while i < j:
            c = b[i]
            if instr:
                out[o] = c
                o += 1
                if c == 92:
                    out[o] = b[i + 1]
                    o += 1
                    i += 2
                    continue
                if c == 34:
                    instr = False
                i += 1
                continue
            i += 1
            if c == 32 or c == 10 or c == 13 or c == 9:
                continue
            out[o] = c
            o += 1
            if c == 34:
                instr = True
        if o - s == 2:          # {}: no args
            o = s
        lens[k] = o - s
    return o


def compact(text: np.ndarray, cols: Columns, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The args objects of ``rows`` (already checked by :func:`scan`) without the whitespace between
    their tokens, back to back, and each one's length (0: none, or ``{}``)."""
    lens = np.zeros(len(rows), np.int64)
    out = np.empty(int((cols.a1[rows] - cols.a0[rows]).sum()), np.uint8)
    used = _compact(text, cols.a0, cols.a1, rows.astype(np.int64), out, lens)
    return out[:used], lens


@jit
def _skip_ws(b, i):
    return _ws(b, i, len(b))


def skip_ws(buf: np.ndarray, i: int) -> int:
    """The index of the first non-whitespace byte at or after ``i`` (``len(buf)`` if none)."""
    return int(_skip_ws(buf, i))


_NOWHERE = np.zeros(1, np.uint8)


def value_end(buf: np.ndarray, i: int) -> int:
    """The index just after the JSON value at ``buf[i]``: -1 if the bytes end first, -2 if it is
    not JSON."""
    return int(_walk(buf, i, len(buf), _NOWHERE, 0, False)[0])


# ---------------------------------------------------------------- deep values, invalid UTF-8

@jit
def _deep_spans(b, limit, starts, ends):
    """The containers of JSON text ``b`` that open deeper than ``limit`` levels (outermost only):
    their [start, end) in starts/ends (as many as fit); returns how many there are.  A container
    the text ends inside ends at the text's end."""
    n = len(b)
    depth = 0
    k = 0
    i = 0
    instr = False
    open_at = -1
    while i < n:
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
        elif c == 123 or c == 91:
            depth += 1
            if depth == limit + 1:
                open_at = i
        elif c == 125 or c == 93:
            if depth == limit + 1 and open_at >= 0:
                if k < len(starts):
                    starts[k] = open_at
                    ends[k] = i + 1
                k += 1
                open_at = -1
            if depth > 0:
                depth -= 1
        i += 1
    if open_at >= 0:
        if k < len(starts):
            starts[k] = open_at
            ends[k] = n
        k += 1
    return k


def flatten_deep(data: bytes, limit: int) -> tuple[bytes, int]:
    """``data`` (JSON text) with every value nested deeper than ``limit`` levels replaced by a JSON
    string of its own text, so that no decoder recurses past ``limit``; and how many were replaced.
    Returns ``data`` itself when nothing is that deep."""
    import orjson

    buf = np.frombuffer(data, np.uint8)
    cap = 64
    while True:
        starts = np.zeros(cap, np.int64)
        ends = np.zeros(cap, np.int64)
        k = int(_deep_spans(buf, limit, starts, ends))
        if k <= cap:
            break
        cap = k
    if not k:
        return data, 0
    parts = []
    at = 0
    for s, e in zip(starts[:k].tolist(), ends[:k].tolist()):
        parts.append(data[at:s])
        parts.append(orjson.dumps(data[s:e].decode("utf-8", "replace")))
        at = e
    parts.append(data[at:])
    return b"".join(parts), k


def utf8_incomplete_tail(b: bytes) -> int:
    """Where a UTF-8 sequence cut by the end of ``b`` starts (``len(b)`` if none is cut)."""
    n = len(b)
    for back in range(1, min(4, n) + 1):
        c = b[n - back]
        if c < 0x80:
            return n
        if c >= 0xC0:                      # a lead byte: does its sequence fit?
            need = 2 if c < 0xE0 else 3 if c < 0xF0 else 4
            return n - back if back < need else n
    return n


UTF8_STEP = 4 << 20     # repair_utf8 checks a large text this many bytes at a time


def repair_utf8(data: bytes) -> tuple[bytes, int]:
    """``data`` with every byte that is not part of valid UTF-8 replaced by ``?`` (the length and
    every offset stay as they were), and how many bytes were replaced.  Valid text is returned as
    it is (the same object), at the cost of one check, :data:`UTF8_STEP` bytes at a time (no
    decoded copy of a large text is ever made)."""
    n = len(data)
    if n <= UTF8_STEP:
        return _repair_piece(bytes(data))
    mv = memoryview(data)
    parts: list[bytes] | None = None
    bad = 0
    carry = b""
    i = 0
    while i < n:
        start = i - len(carry)
        piece = carry + bytes(mv[i:i + UTF8_STEP])
        i += UTF8_STEP
        carry = b""
        if i < n:
            cut = utf8_incomplete_tail(piece)
            piece, carry = piece[:cut], piece[cut:]
        fixed, k = _repair_piece(piece)
        if k and parts is None:
            parts = [bytes(mv[:start])]
        if parts is not None:
            parts.append(fixed)
        bad += k
    return (b"".join(parts) if parts is not None else data), bad


def _repair_piece(data: bytes) -> tuple[bytes, int]:
    if data.isascii():
        return data, 0
    try:
        data.decode("utf-8")
        return data, 0
    except UnicodeDecodeError:
        pass
    fixed, bad = _ESCAPED.subn("?", data.decode("utf-8", "surrogateescape"))
    return fixed.encode("utf-8"), bad


_ESCAPED = re.compile("[\udc80-\udcff]")      # what surrogateescape makes of each invalid byte
