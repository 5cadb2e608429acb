"""Telling a .pftrace traceconv wrote by its head (the registry's sniffer and claim of the
``perfetto`` format), and the packet framing its reader walks.  Light on purpose: detection asks
:func:`claims` of every input before any other sniffer, so Perfetto's protobuf module is imported
only for a head framed as packets to its end (a JSON text that starts with a newline, the byte a
packet starts with, is not)."""

from __future__ import annotations

from typing import Iterator


def sniff(head: bytes) -> bool:
    """A .pftrace traceconv wrote: traceconv's metadata among the head's packets, or a head of
    nothing but the packets traceconv writes before it (a merge of many ranks describes all their
    tracks first; the reader checks the metadata then)."""
    return _head(head) is not False


def claims(head: bytes) -> bool:
    """A .pftrace traceconv wrote, for certain: packets up to traceconv's metadata (the registry
    asks this before the text formats' sniffers, which could find their markers in its strings)."""
    return _head(head) is True


def _head(head: bytes) -> "bool | None":
    """True: packets up to one holding traceconv's metadata; None: nothing but the packets
    traceconv writes before it; False: anything else."""
    if head[:1] != b"\x0a":
        return False
    raws, end = [], 0
    for raw, end in packets(head):
        raws.append(raw)
    if end < len(head) and _packet_at(head, end) is not True:
        return False         # not packets to its end or to one it cuts (a JSON text starting with "\n")
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    kinds = set()
    for raw in raws:
        try:
            p = pb.TracePacket.FromString(raw)
        except Exception:  # noqa: BLE001 - not a packet: not a trace traceconv wrote
            return False
        if p.HasField("chrome_events"):
            return any(m.name == "traceconv" for m in p.chrome_events.metadata)
        kinds.add(p.WhichOneof("data"))
    return None if kinds and kinds <= {None, "clock_snapshot", "track_descriptor"} else False


def _varint(data: bytes, pos: int) -> tuple[int, int] | None:
    """The varint at ``pos`` and where it ends; None where ``data`` ends inside it, -1 for its value
    past the 10 bytes a varint takes at most."""
    value, shift = 0, 0
    for i in range(pos, min(pos + 10, len(data))):
        b = data[i]
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i + 1
    return None if len(data) < pos + 10 else (-1, pos + 10)


def _packet_at(data: bytes, pos: int) -> "tuple[int, int] | bool":
    """The packet starting at ``pos``: where its bytes start and end; True where ``data`` ends
    inside it (in its length or after it); False where no packet starts there."""
    if pos >= len(data) or data[pos] != 0x0A:
        return False
    length = _varint(data, pos + 1)
    if length is None:
        return True
    size, start = length
    if size < 0:
        return False
    return True if start + size > len(data) else (start, start + size)


def packets(data: bytes) -> Iterator[tuple[bytes, int]]:
    """Each whole ``TracePacket`` of ``data`` (a ``Trace``) and where it ends, up to the first byte
    that is not a packet's key or a packet cut by the end (in its length or after it)."""
    pos = 0
    while isinstance(span := _packet_at(data, pos), tuple):
        start, pos = span
        yield data[start:pos], pos
