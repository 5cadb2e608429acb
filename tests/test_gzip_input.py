"""Gzipped inputs are read with ISA-L's gunzip (``isal.igzip``): a .gz gives the very same timeline as
its text, and a damaged .gz is one clear error (never ISA-L's own exception), on the streaming path
(whose reads run in a thread of their own) and on the whole-document path alike."""

from __future__ import annotations

import gzip
import random
import zlib
from pathlib import Path

import pytest
from isal import igzip

import traceconv
from traceconv.readers.chrome import paths as chrome_paths
from traceconv.errors import TraceconvError
from traceconv.io import open_source
from traceconv.model.layout import nest

from timeline import assert_same_timeline, from_model

FIX = Path(__file__).parent / "fixtures"
# files that stand alone (a Composer trace also looks for its torch trace beside it)
GZ = sorted(p for d in ("kineto", "megengine_timeline", "multirank/gloo_2ranks",
                        "multirank/hta_trace_filter_2ranks") for p in (FIX / d).glob("*.gz"))


def load(path: Path, fast: bool, monkeypatch):
    monkeypatch.setattr(chrome_paths, "FAST", fast)
    t = traceconv.load(path)
    nest(t)
    return t


@pytest.mark.parametrize("path", GZ, ids=lambda p: p.name)
def test_a_gz_reads_as_its_text(path, tmp_path, monkeypatch):
    plain = tmp_path / path.name[:-3]
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    with open_source(path).open() as f:
        assert isinstance(f, igzip.IGzipFile)
    for fast in (True, False):
        a, b = load(plain, fast, monkeypatch), load(path, fast, monkeypatch)
        assert_same_timeline(from_model(a), from_model(b))
        assert {(w.code, w.message, w.count) for w in a.diagnostics.warnings} == \
               {(w.code, w.message, w.count) for w in b.diagnostics.warnings}
        assert a.meta.as_dict() == b.meta.as_dict()


def _text(n: int = 20000) -> bytes:
    """About 1.2 MB of Chrome JSON: damage after the first 64 KB is met while streaming, not in the
    head read by ``open_source``."""
    events = (b'{"ph":"X","name":"n%d","ts":%d,"dur":1,"pid":1,"tid":1}' % (i, i) for i in range(n))
    return b'{"traceEvents":[' + b",".join(events) + b"]}"


def _bad_deflate_late(good: bytes) -> bytes:
    """``good`` with one byte flipped past the middle so that the deflate data itself is invalid
    (not only the CRC): ISA-L raises its own error there, stdlib gzip a zlib.error."""
    rnd = random.Random(1)
    for _ in range(5000):
        pos = rnd.randrange(len(good) // 2, len(good) - 100)
        blob = good[:pos] + bytes([good[pos] ^ 0xFF]) + good[pos + 1:]
        try:
            gzip.decompress(blob)
        except zlib.error:
            return blob
        except Exception:
            pass
    raise AssertionError("no flip gave invalid deflate data")


def _damaged() -> dict[str, bytes]:
    good = gzip.compress(_text(), mtime=0)
    return {
        "truncated_mid": good[: len(good) // 2],
        "no_trailer": good[:-8],
        "bad_crc": good[:-8] + b"\0\0\0\0" + good[-4:],
        "bad_deflate_late": _bad_deflate_late(good),
    }


@pytest.mark.parametrize("fast", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("name", ["truncated_mid", "no_trailer", "bad_crc", "bad_deflate_late"])
def test_a_damaged_gz_is_one_clear_error(name, fast, tmp_path, monkeypatch):
    p = tmp_path / f"{name}.json.gz"
    p.write_bytes(_damaged()[name])
    assert len(open_source(p).head) == 64 * 1024          # the head itself reads fine
    monkeypatch.setattr(chrome_paths, "FAST", fast)
    with pytest.raises(TraceconvError, match="corrupt or truncated gzip data"):
        traceconv.load(p)


def test_a_gz_cut_inside_its_head_is_one_clear_error(tmp_path):
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gzip.compress(_text(), mtime=0)[:2000])
    assert 0 < len(open_source(p).head) < 64 * 1024        # salvaged up to the cut
    with pytest.raises(TraceconvError, match="corrupt or truncated gzip data"):
        traceconv.load(p)
