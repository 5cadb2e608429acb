"""The events that open and close slices on a stack -- ``B``/``E`` on a thread (and MXNet's
``b``/``e``), async ``b``/``e`` and ``S``/``F`` of an id, frames' ``(``/``)`` -- kept as columns
while a file is read, paired once every one is (by the compiled core, rust/src/stacks.rs, which
states the rule), then added to the model as slices in bulk.

The scanner's rows come in a batch at a time (:meth:`Stacks.add_rows`), the general decoder's one
at a time (:meth:`Stacks.add`).  What a slice is made of is what the reader's ``_close`` made of a
pair before the pairing moved here: its begin's name, category and args; an end's args instead
when the begin has none, or both merged into one object (the end's keys last) when both have some.
"""

from __future__ import annotations

from array import array
from typing import Any, Callable

import numpy as np
import orjson

from ..._native import _core
from ...model import ArgsColumn, Trace
from ...model.args import TAKE_ROWS

STACKS = _core.stacks


class Stacks:
    """The begins and ends of a file, as columns (a row each)."""

    def __init__(self, trace: Trace, compact: Callable[[Any], tuple[bytes | None, bool]]) -> None:
        self.trace = trace
        self.compact = compact      # args text -> (what the model keeps, whether it changed)
        self.ts = array("q")
        self.seq = array("q")       # the event's input position (ties in time keep it)
        self.kind = array("b")      # 0 begin, 1 end
        self.key = array("i")       # the stack (:meth:`key_id`)
        # string ids of the model; a name the model does not have yet gets a negative id here, and
        # is interned when its slice is made, in the order slices are made (as it always was)
        self.name = array("i")
        self.cat = array("i")
        self.args = ArgsColumn()    # what the model keeps of each row's args
        self.changed = array("b")   # ... had to be changed (wrapped, or rebuilt) from the text
        self.has_args = array("b")  # the event had an args member (its text not empty)
        self.text: dict[int, bytes] = {}    # the args text of the general decoder's rows that had some
        self.binds: dict[int, tuple] = {}   # begins with a bind_id: (its id, flow_in, flow_out)
        self.keys: dict[Any, int] = {}
        self._pending: dict[str, int] = {}
        self.pairs: Any = None      # the scanner's (pid, tid) pairs (SCAN.Pairs) ...
        self.pair_key = np.zeros(0, np.int32)   # ... and each one's stack

    def __len__(self) -> int:
        return len(self.ts)

    def key_id(self, key: Any) -> int:
        k = self.keys.get(key)
        if k is None:
            k = self.keys[key] = len(self.keys)
        return k

    def _string(self, s: str | None) -> int:
        if not s:
            return 0
        i = self.trace.strings._ids.get(s)
        if i is not None:
            return i
        p = self._pending.get(s)
        if p is None:
            p = self._pending[s] = -1 - len(self._pending)
        return p

    def add(self, ts: int, seq: int, kind: int, key: Any, name: str | None, cat: str | None, args: Any,
            bind: tuple | None = None) -> None:
        """One begin (``kind`` 0) or end (1) on stack ``key``, its args as raw text."""
        row = len(self.ts)
        self.ts.append(ts)
        self.seq.append(seq)
        self.kind.append(kind)
        self.key.append(self.key_id(key))
        self.name.append(self._string(name))
        self.cat.append(self._string(cat))
        kept, changed = self.compact(args)
        self.args.append(kept)
        self.changed.append(changed)
        self.has_args.append(len(args) > 0)
        if len(args):
            self.text[row] = bytes(args)
        if bind is not None and kind == 0:
            self.binds[row] = bind

    def add_rows(self, ts: np.ndarray, seq: np.ndarray, ends: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                 big: np.ndarray, name: np.ndarray, cat: np.ndarray, args: np.ndarray, lens: np.ndarray,
                 has_args: np.ndarray, bind: np.ndarray, flow: np.ndarray) -> None:
        """The scanner's ``B``/``E`` rows of a batch (``ends``: the row is an end), on the stacks of
        their (pid, tid) threads (``big``: which are unsigned 64-bit ids, see ``SCAN.Pairs``);
        ``args``/``lens`` their args, compacted by the scanner; ``bind``/``flow`` their v2 flows
        (``flow``: 1 flow_in, 2 flow_out, 4 a bind_id)."""
        row0 = len(self.ts)
        for j in np.flatnonzero((flow & 4 != 0) & ~np.asarray(ends, bool)).tolist():
            self.binds[row0 + j] = (int(bind[j]), bool(flow[j] & 1), bool(flow[j] & 2))
        if self.pairs is None:
            self.pairs = _core.scan.Pairs()
        ids, new = self.pairs.ids(pid, tid, big)
        if new:
            self.pair_key = np.concatenate([self.pair_key, np.array([self.key_id(("t", p, t)) for p, t in new],
                                                                    np.int32)])
        self.ts.frombytes(np.ascontiguousarray(ts, np.int64).tobytes())
        self.seq.frombytes(np.ascontiguousarray(seq, np.int64).tobytes())
        self.kind.frombytes(np.ascontiguousarray(ends, np.int8).tobytes())
        self.key.frombytes(self.pair_key[ids].tobytes())
        self.name.frombytes(np.ascontiguousarray(name, np.int32).tobytes())
        self.cat.frombytes(np.ascontiguousarray(cat, np.int32).tobytes())
        self.args.extend_packed(args, lens)
        self.changed.frombytes(bytes(len(ts)))
        self.has_args.frombytes(np.ascontiguousarray(has_args, np.int8).tobytes())

    def match(self, last: int, never: int) -> dict[str, Any]:
        """The slices (see rust/src/stacks.rs): ``begin``, ``end``, ``end_ts``, ``end_seq`` per slice
        in the order they close, and the counts ``unmatched_end``, ``cut_short``, ``left_open``."""
        name, cat = (self._resolved(np.frombuffer(c, np.int32)) for c in (self.name, self.cat))
        return STACKS.match(np.frombuffer(self.ts, np.int64), np.frombuffer(self.seq, np.int64),
                            np.frombuffer(self.kind, np.uint8), np.frombuffer(self.key, np.int32),
                            name, cat, last, never)

    def _resolved(self, ids: np.ndarray) -> np.ndarray:
        """A copy of string ids, with the pending ones the model has interned since as its ids."""
        a = ids.copy()
        if self._pending:
            have = self.trace.strings._ids
            now = np.array([have.get(s, p) for s, p in self._pending.items()], np.int32)  # by -1 - p
            pending = a < 0
            a[pending] = now[-1 - a[pending]]
        return a

    def names(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The model's ids of the names and categories of ``rows`` (begins, in the order their
        slices are made): the pending ones interned now, name then category, slice by slice."""
        nm, ct = (self._resolved(np.frombuffer(c, np.int32)[rows]) for c in (self.name, self.cat))
        both = np.stack([nm, ct], 1).ravel()
        neg = both < 0
        if neg.any():
            ids, first = np.unique(both[neg], return_index=True)
            text = {p: s for s, p in self._pending.items()}
            intern = self.trace.strings.intern
            model = np.zeros(len(ids), np.int32)
            for j in np.argsort(first, kind="stable").tolist():
                model[j] = intern(text[int(ids[j])])
            both[neg] = model[np.searchsorted(ids, both[neg])]
            nm, ct = both[0::2], both[1::2]
        return nm, ct

    def slice_args(self, begin: np.ndarray, end: np.ndarray) -> tuple[ArgsColumn, np.ndarray]:
        """Each slice's args (its begin's; its end's when the begin has none; both merged when
        both have some), and whether each was changed from its text."""
        has = np.frombuffer(self.has_args, np.int8)
        end_has = np.zeros(len(end), bool)
        closed = end >= 0
        end_has[closed] = has[end[closed]] > 0
        begin_has = has[begin] > 0
        src = np.where(end_has & ~begin_has, end, begin)
        changed = np.frombuffer(self.changed, np.int8)[src].astype(bool)
        # (the merged texts copied into one buffer as they are made: each bytes object orjson makes
        # holds the block it was made in, pages apart, and 82k of them kept took 345 MB; MegEngine's
        # buffer is ~20 MB, and a column of their own that spills measured no lower a peak)
        merged, lens = bytearray(), []
        data, off = self.args.packed()
        view = memoryview(data)
        both = np.flatnonzero(end_has & begin_has)
        text = self.text
        base = len(self.args)
        # (TAKE_ROWS pairs at a time: their rows and offsets as Python ints, 20 MB for MegEngine's
        # 82k at once; and a spilled column's pages read so far dropped after each, 48 MB of them)
        for lo in range(0, len(both), TAKE_ROWS):
            part = both[lo:lo + TAKE_ROWS]
            rows_b, rows_e = begin[part], end[part]
            for j, b, e, b0, b1, e0, e1 in zip(part.tolist(), rows_b.tolist(), rows_e.tolist(), off[rows_b].tolist(),
                                                off[rows_b + 1].tolist(), off[rows_e].tolist(),
                                                off[rows_e + 1].tolist()):
                try:
                    x = orjson.loads(text.get(b) or view[b0:b1] or b"{}")
                    y = orjson.loads(text.get(e) or view[e0:e1] or b"{}")
                except orjson.JSONDecodeError:
                    continue                    # the begin's, as they were
                if type(x) is dict and type(y) is dict:
                    # what compact_args makes of orjson's own text: the same text, unchanged (it is
                    # one line, and what it holds orjson reads back as it was), none for `{}`
                    kept = orjson.dumps({**x, **y}) if x or y else b""
                    changed[j] = False
                    src[j] = base + len(lens)
                    merged += kept
                    lens.append(len(kept))
            self.args.forget()
        del view
        del data, off
        if lens:
            self.args.extend_packed(merged, lens)
        del merged, lens
        self.args.forget()
        return self.args.take(src), changed
