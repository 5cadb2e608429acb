"""Event arrays are read by the compiled scanner, a block of text at a time: the result must be the
very same timeline as reading the whole document with the general decoder, for every real timeline
sample, with one block and with tiny blocks (so that every file is cut many times, inside events,
strings, numbers and args too)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import traceconv
from traceconv.readers.chrome import paths, reader as chrome, stream
from traceconv.model.layout import nest

from timeline import assert_same_timeline, from_model

FIX = Path(__file__).parent / "fixtures"
FILES = sorted(p for d in ("kineto", "composer", "mxnet_trace", "megengine_timeline", "chrome_json", "multirank")
               for p in (FIX / d).rglob("*") if p.is_file() and p.suffix in (".json", ".gz"))


def read(path: Path, chunk: int | None, monkeypatch):
    """chunk None: the whole-document decoder (the reference); else the scanner, in blocks of chunk."""
    monkeypatch.setattr(paths, "FAST", chunk is not None)
    monkeypatch.setattr(paths, "CHUNK_BYTES", chunk or 1 << 62)
    t = traceconv.load(path)
    nest(t)
    return t


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_chunked_reading_gives_the_same_timeline(path, monkeypatch):
    whole = read(path, None, monkeypatch)
    for chunk in (1 << 62, 1500, 7):
        chunked = read(path, chunk, monkeypatch)
        assert_same_timeline(from_model(whole), from_model(chunked))
        assert {(w.code, w.message, w.count) for w in whole.diagnostics.warnings} == \
               {(w.code, w.message, w.count) for w in chunked.diagnostics.warnings}
        assert whole.meta.as_dict() == chunked.meta.as_dict()


def test_blocks_cut_anywhere(tmp_path, monkeypatch):
    """Text that looks like the boundary between two events, inside a name and inside nested args,
    comes through whole whatever the block size."""
    text = (b'[{"ph":"X","name":"a},{b","ts":1,"dur":1,"pid":1,"tid":1,"args":{"x":[{"k":1},{"k":2}]}},'
            b'{"ph":"X","name":"c","ts":2,"dur":1,"pid":1,"tid":1}]')
    src = tmp_path / "t.json"
    src.write_bytes(text)
    for block in (1, 2, 7, 1 << 20):
        t = read(src, block, monkeypatch)
        assert [t.strings[i] for i in t.slices.name] == ["a},{b", "c"]
        assert t.slices.args[0] == b'{"x":[{"k":1},{"k":2}]}' and t.slices.args[1] is None
        assert list(t.slices.ts) == [1000, 2000]


@pytest.mark.parametrize("defect", ["}{", "} \n {", "},]", "[,{"])
def test_a_missing_or_stray_comma_is_refused_wherever_the_text_is_cut(tmp_path, monkeypatch, defect):
    """No comma between two events, one before the array's end or one before its first event: the
    stream refuses the text wherever a block or a scan call starts or ends (the scanner is told
    whether it goes on after an event), so the document is read by the repairing path, as decoding
    it whole does: the same timeline and warnings with blocks cut at each byte of the defect (past
    the first 2,000 events, which are read at once) and with scan calls of 1 to 5 events.  (Until
    2026-11-28 a missing comma where a block started, and a comma before the first event, were read
    as valid.)"""
    events = [f'{{"ph":"X","name":"e{i % 7}","ts":{i},"dur":1,"pid":1,"tid":1}}' for i in range(6000)]
    text = '{"traceEvents": [\n' + ",\n".join(events) + "\n]}"
    if defect == "[,{":
        text = text.replace("[\n{", "[\n,{", 1)
        at = text.index("[") + 1
    elif defect == "},]":
        text = text.replace("}\n]}", "},\n]}")
        at = text.rindex("},")
    else:
        cut = text.index(events[5001]) - 2          # the comma between events 5000 and 5001
        assert text[cut:cut + 2] == ",\n"
        text = text[:cut - 1] + defect + text[cut + 3:]
        at = cut - 1
    src = tmp_path / "t.json"
    src.write_text(text)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    whole = read(src, None, monkeypatch)
    want = (from_model(whole), {(w.code, w.message, w.count) for w in whole.diagnostics.warnings})
    assert "note" in {w.code.value for w in whole.diagnostics.warnings}      # (repaired)
    assert len(whole.slices) == 6000
    # 1 KiB blocks, the document moved by leading whitespace so that a block ends at each byte of
    # the defect (and just before and after it); then one block, scan calls of 1 to 5 events
    runs = [((-o) % 1024, 1024, stream.SCAN_ROWS) for o in range(at - 1, at + len(defect) + 2)]
    runs += [(0, 1 << 62, rows) for rows in (1, 2, 3, 5)]
    for pad, block, rows in runs:
        src.write_text(" " * pad + text)
        monkeypatch.setattr(stream, "SCAN_ROWS", rows)
        t = read(src, block, monkeypatch)
        assert_same_timeline(want[0], from_model(t))
        assert {(w.code, w.message, w.count) for w in t.diagnostics.warnings} == want[1], (pad, block, rows)


def test_a_block_scanned_from_a_wrong_guess_leaves_no_trace(tmp_path, monkeypatch):
    """A block is scanned beside the one before it, from where an event seems to start (``}, {``);
    the scan is used only if the event cut between the two blocks ends there.  Inside args, an
    object that looks like an event (name "zzz", cat "yyy") makes a scan from a wrong guess intern
    strings that real events use later: the reader cuts the table back, so the names, categories
    and the model's strings (in first-seen order) are those of a read in one block, for blocks of
    every size from 40 to 400 bytes (after the first 2,000 events, which are read at once)."""
    fake = '{"name":"zzz","cat":"yyy","ph":"X","ts":5,"dur":1,"pid":1,"tid":1}'
    events = [f'{{"ph":"X","name":"f","ts":{i},"dur":1,"pid":2,"tid":2}}' for i in range(2100)]
    events += [f'{{"ph":"X","name":"e{i}","cat":"c{i % 3}","ts":{10 * i},"dur":1,"pid":1,"tid":1,'
               f'"args":{{"x":[{{"k":1}}, {fake}]}}}}' for i in range(12)]
    events += ['{"ph":"X","name":"zzz","cat":"yyy","ts":500,"dur":1,"pid":1,"tid":1}',
               '{"ph":"X","name":"last","ts":600,"dur":1,"pid":1,"tid":1}']
    src = tmp_path / "t.json"
    src.write_text('{"traceEvents": [\n' + ",\n".join(events) + "\n]}")
    one = read(src, 1 << 62, monkeypatch)
    want = ([one.strings[i] for i in one.slices.name], [one.strings[i] for i in one.slices.cat], list(one.strings))
    assert want[0] == ["f"] * 2100 + [f"e{i}" for i in range(12)] + ["zzz", "last"]
    for block in range(40, 401, 7):
        t = read(src, block, monkeypatch)
        assert ([t.strings[i] for i in t.slices.name], [t.strings[i] for i in t.slices.cat], list(t.strings)) == want
        assert t.slices.args[2100] == one.slices.args[2100]


@pytest.mark.parametrize("gz", [False, True])
def test_the_keys_after_a_long_array_come_back_whole(tmp_path, monkeypatch, gz):
    """The array ends in a block while the next block is already taken from the stream to be
    scanned beside it: that block's text belongs to the keys after the array (a long otherData
    here, then the Kineto time base), and must come back whole, whatever the block size, from a
    file that can be read backwards and from a .gz that cannot."""
    other = {"x": "y" * 3000, "n": 7}
    events = ",".join(f'{{"ph":"X","name":"e{i}","ts":{i},"dur":1,"pid":1,"tid":1}}' for i in range(6000))
    doc = ('{"traceEvents":[' + events + '],"displayTimeUnit":"ns","otherData":' + json.dumps(other)
           + ',"baseTimeNanoseconds":1700000000000000000,"schemaVersion":1}').encode()
    src = tmp_path / ("t.pt.trace.json" + (".gz" if gz else ""))
    src.write_bytes(gzip.compress(doc) if gz else doc)
    for block in (300, 1000, 4096):
        t = read(src, block, monkeypatch)
        assert t.meta.extra["otherData"] == other, block
        assert t.slices.ts[0] == 1_700_000_000_000_000_000 and len(t.slices) == 6000


@pytest.mark.parametrize("seam", [1, 40, 1 << 16])
def test_events_cut_between_blocks_whatever_the_seam(seam, monkeypatch):
    """The event cut by a block's end is scanned from its two pieces joined with the start of the
    next block (SEAM_BYTES of it); an event longer than that, or the array's end, takes the whole
    block.  Either way the same timeline as the whole-document decoder's."""
    monkeypatch.setattr(stream, "SEAM_BYTES", seam)
    for path in [p for p in FILES if p.parent.name in ("kineto", "composer")][:4]:
        whole = read(path, None, monkeypatch)
        for chunk in (1500, 333):
            chunked = read(path, chunk, monkeypatch)
            assert_same_timeline(from_model(whole), from_model(chunked))
            assert {(w.code, w.message, w.count) for w in whole.diagnostics.warnings} == \
                   {(w.code, w.message, w.count) for w in chunked.diagnostics.warnings}


def test_a_document_the_chunks_cannot_read_falls_back(tmp_path, monkeypatch):
    """A truncated file (no closing bracket) is read by the repairing whole-document path."""
    src = FIX / "mxnet_trace" / "generated_mxnet191_continuous_dump_midrun_TRUNCATED.json"
    monkeypatch.setattr(paths, "FAST", False)
    whole = traceconv.load(src)
    monkeypatch.setattr(paths, "FAST", True)
    monkeypatch.setattr(paths, "CHUNK_BYTES", 1000)
    chunked = traceconv.load(src)
    assert len(whole.slices) == len(chunked.slices) > 0
    assert any(w.code.value == "truncated-input" for w in chunked.diagnostics.warnings)


def test_own_gzipped_output_is_scanned_again_in_memory(tmp_path, monkeypatch):
    """traceconv's own Chrome JSON names itself in keys after the events; through gzip the stream
    learns that only at the end, reads it again in memory (with every key first) and gives the
    same timeline, without the whole-document decoder.  A truncated file goes straight to the
    repairing decoder, without a second scan."""
    src = FIX / "kineto" / "kineto_docs_after_fix_trace.json"
    trace = read(src, 1 << 20, monkeypatch)
    traceconv.save(trace, tmp_path / "own.json.gz")
    calls = []
    real_decode = paths.decode
    monkeypatch.setattr(paths, "decode", lambda *a, **k: calls.append(1) or real_decode(*a, **k))
    back = read(tmp_path / "own.json.gz", 1 << 20, monkeypatch)
    assert calls == []
    assert_same_timeline(from_model(trace), from_model(back))

    scans = []
    real_chunked = chrome.ChromeReader._read_chunked
    monkeypatch.setattr(chrome.ChromeReader, "_read_chunked",
                        lambda self, data: scans.append(1) or real_chunked(self, data))
    read(FIX / "mxnet_trace" / "generated_mxnet191_continuous_dump_midrun_TRUNCATED.json", 1 << 20, monkeypatch)
    assert calls == [1] and scans == []


@pytest.mark.parametrize("at", [10, 2500])
def test_an_event_longer_than_many_blocks_is_scanned_in_linear_time(tmp_path, monkeypatch, at):
    """An event of 1 MB read in blocks of 4 kB (as one of hundreds of MB in blocks of 1 MB), among
    the first 2,000 events (read at once to judge the time base) or after them (the block
    scanner's): its text is scanned again only when it has doubled, so the scanner reads a few
    times the file, not the event again for each of its ~256 blocks (128 MB on the code before:
    a 64 MB event in 1 MB blocks took 8.3 s, 0.78 s now).  The event and its neighbours come
    through whole."""
    big = "x" * (1 << 20)
    events = [{"ph": "X", "name": f"e{i}", "ts": i, "dur": 1, "pid": 1, "tid": 1} for i in range(3000)]
    events.insert(at, {"ph": "X", "name": "big", "ts": 5000, "dur": 2, "pid": 1, "tid": 1, "args": {"s": big}})
    src = tmp_path / "long_event.json"
    src.write_text(json.dumps({"traceEvents": events}))
    scanned = [0]

    def counted(text, pos, cap, strings, after=False):
        scanned[0] += len(text) - pos
        return real(text, pos, cap, strings, after)

    real = stream._scan
    monkeypatch.setattr(stream, "_scan", counted)
    monkeypatch.setattr(paths, "_scan", counted)
    t = read(src, 4096, monkeypatch)
    assert scanned[0] < 8 * src.stat().st_size
    names = [t.strings[i] for i in t.slices.name]
    assert len(names) == 3001 and names.index("big") == at
    assert names[:at] == [f"e{i}" for i in range(at)] and names[at + 1:] == [f"e{i}" for i in range(at, 3000)]
    assert t.slices.args[at] == json.dumps({"s": big}, separators=(",", ":")).encode()
    assert t.slices.dur[at] == 2000 and t.slices.ts[at] == 5_000_000


def test_a_merge_worker_scans_one_block_at_a_time(monkeypatch):
    """``load(..., threads=False)`` (what a merge's ranks are read with, the engine's workers
    already keeping every core busy) scans with one thread, not two, at the priority of the
    others, and reads the same timeline, warnings and metadata, blocks cut anywhere; a plain
    load keeps its two scanning threads, below the converting thread's priority."""
    from traceconv.merging import ranks

    pools: list[tuple[int, int]] = []
    real_pool = stream.SCAN.Pool

    def counted(threads, nice=0):
        pools.append((threads, nice))
        return real_pool(threads, nice)

    monkeypatch.setattr(stream.SCAN, "Pool", counted)
    monkeypatch.setattr(stream, "cores_to_spare", lambda: True)
    path = FIX / "kineto" / "streams_memcpy_memset.pt.trace.json.gz"
    for chunk in (1 << 62, 1500, 7):
        both = read(path, chunk, monkeypatch)
        assert pools == [(2, stream.SCAN_NICE)] and stream.SCAN_NICE > 0
        pools.clear()
        one = ranks.load_rank(path, None, frozenset(), 0).trace
        nest(one)
        assert pools == [(1, 0)]
        pools.clear()
        assert_same_timeline(from_model(both), from_model(one))
        assert {(w.code, w.message, w.count) for w in both.diagnostics.warnings} == \
               {(w.code, w.message, w.count) for w in one.diagnostics.warnings}
        assert both.meta.as_dict() == one.meta.as_dict()


def test_an_error_reading_the_blocks_is_raised_by_get_after_the_blocks_before_it():
    """The stream runs on the caller's thread: an error from the blocks' iterator (a gzip stream
    broken late) comes out of ``get`` itself, once the rows of the blocks before the ones read
    ahead (``SCAN_DEPTH``) are handed over."""
    events = b",".join(b'{"ph":"X","name":"e%d","pid":1,"tid":1,"ts":%d,"dur":1}' % (i, i) for i in range(300))

    def blocks():
        for at in range(0, 10_000, 500):        # 20 blocks, then the error
            yield events[at:at + 500]
        raise OSError("broken gzip stream")

    scanner = stream.BlockScanner(blocks(), stream.SCAN.Strings())
    rows = 0
    try:
        with pytest.raises(OSError, match="broken gzip stream"):
            while True:
                item = scanner.get()
                assert item[0] == "rows"
                rows += sum(n for _, _, n, _, _ in item[1])
        # the whole events of the blocks before the error, not one past them (each event one `}`)
        assert 0 < rows <= events[:10_000].count(b"}") < 300
    finally:
        scanner.close()
    assert scanner.get() == ("truncated",)      # the stream is over, not started again


def test_scanning_threads_keep_their_priority_beside_other_busy_tasks(monkeypatch):
    """The two scanning threads run below the converting thread only when the machine has cores
    to spare: no other task runnable now (``/proc/loadavg``'s running count is this process's
    own) and the last minute's load average below the cores; else (beside busy processes, which
    would starve them) at its priority, reading the same timeline."""
    assert stream.spare("0.52 0.40 0.31 1/80 4242", 1, 2)
    assert stream.spare("1.90 1.00 0.31 3/80 4242", 3, 2)
    assert not stream.spare("0.52 0.40 0.31 3/80 4242", 1, 2)       # two other tasks want a core
    assert not stream.spare("2.00 0.40 0.31 1/80 4242", 1, 2)       # the last minute was busy
    pools: list[tuple[int, int]] = []
    real_pool = stream.SCAN.Pool
    monkeypatch.setattr(stream.SCAN, "Pool", lambda threads, nice=0: pools.append((threads, nice))
                        or real_pool(threads, nice))
    path = FIX / "kineto" / "streams_memcpy_memset.pt.trace.json.gz"
    got = {}
    for free in (True, False):
        monkeypatch.setattr(stream, "cores_to_spare", lambda: free)
        got[free] = from_model(read(path, 1500, monkeypatch))
    assert pools == [(2, stream.SCAN_NICE), (2, 0)]
    assert_same_timeline(got[True], got[False])


def test_text_in_memory_that_starts_blank_is_scanned_in_blocks(monkeypatch):
    """Text given to the reader (the in-memory path) may start with whitespace: it is still
    scanned in blocks, not left to the whole-document decoder, and reads as the file does."""
    src = FIX / "kineto" / "kineto_docs_after_fix_trace.json"
    monkeypatch.setattr(paths, "CHUNK_BYTES", 1500)
    decoded = []
    real_decode = paths.decode
    monkeypatch.setattr(paths, "decode", lambda *a, **k: decoded.append(1) or real_decode(*a, **k))
    blank = chrome.ChromeReader(None, b" \n\t\r\n" + src.read_bytes()).read()
    assert decoded == []
    monkeypatch.setattr(paths, "FAST", False)
    whole = chrome.ChromeReader(None, src.read_bytes()).read()
    assert decoded == [1]
    nest(blank)
    nest(whole)
    assert len(blank.slices) == len(whole.slices) > 0
    assert_same_timeline(from_model(whole), from_model(blank))


def test_the_header_is_looked_at_each_time_it_doubles_not_each_block(monkeypatch):
    """Where the event array starts was looked for after every block, the whole head each time:
    a header of H bytes cost O(H^2 / block) (2 MB of header in 64-byte blocks: 33k looks).  It is
    now looked for each time the head doubles, and finds the same place."""
    doc = b'{"big": "' + b"x" * 300_000 + b'", "traceEvents": [{"ph": "X", "name": "a", "ts": 1}]}'
    looks = []
    real = stream._find_events
    monkeypatch.setattr(stream, "_find_events", lambda head: looks.append(len(head)) or real(head))
    blocks = [doc[i:i + 64] for i in range(0, len(doc), 64)]
    head, found = stream._head_events(iter(blocks))
    assert found is not None and head[found[2]:].startswith(b'{"ph": "X"') and doc.startswith(head)
    assert found[0] == {"big": "x" * 300_000} and len(looks) <= 16, len(looks)
    head, found = stream._head_events(iter([doc[:100]]))          # the text ends first
    assert found is None and head == doc[:100]
