"""The packets of a ``.pftrace``, read as a stream: one packet at a time in file order, with
compressed bundles inflated as they are read, so that memory holds one packet (and one bundle's
compressed bytes) whatever the file's size. A stream that is not a trace's packets raises
``SessionFileError``."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from google.protobuf.message import DecodeError
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

from proton_ik.viewer.readback.checks import NOT_A_TRACE
from proton_ik.viewer.session_file import SessionFileError

MAX_PACKET_BYTES = 32 << 20  # no packet proton_ik writes comes near this


def read_packets(path: str | Path) -> list[TracePacket]:
    """Every packet in file order, with compressed bundles inflated in place."""
    return list(iter_packets(path))


def iter_packets(path: str | Path) -> Iterator[TracePacket]:
    """Every packet in file order, read one at a time, with compressed bundles inflated as they
    are read: memory holds one packet (and one bundle's compressed bytes), whatever the file's size."""
    path = Path(path)
    try:
        with open(path, "rb") as file:
            yield from _packets(path, _reader(file), nested=False)
    except FileNotFoundError:
        raise SessionFileError(f"{path} does not exist; check the path") from None
    except IsADirectoryError:
        raise SessionFileError(f"{path} is a folder, not a trace file") from None


_CHUNK = 1 << 20


class _Stream:
    """Bytes pulled in chunks from a file or an inflater, served in the sizes a parser asks for."""

    def __init__(self, pull: Callable[[int], bytes]):
        self.pull = pull
        self.buffer = b""
        self.position = 0

    def read(self, size: int) -> bytes:
        if len(self.buffer) - self.position < size:
            parts, held = [self.buffer[self.position :]], len(self.buffer) - self.position
            while held < size:
                chunk = self.pull(max(_CHUNK, size - held))
                if not chunk:
                    break
                parts.append(chunk)
                held += len(chunk)
            self.buffer, self.position = b"".join(parts), 0
        out = self.buffer[self.position : self.position + size]
        self.position += len(out)
        return out


def _reader(file: BinaryIO) -> Callable[[int], bytes]:
    return _Stream(file.read).read


def _inflating(data: bytes) -> Callable[[int], bytes]:
    """A read function over a zlib stream, inflating a chunk at a time."""
    inflater = zlib.decompressobj()
    pending = [data]

    def pull(size: int) -> bytes:
        if inflater.unconsumed_tail:
            return inflater.decompress(inflater.unconsumed_tail, size)
        return inflater.decompress(pending.pop(), size) if pending else b""

    return _Stream(pull).read


def _packets(path: Path, read: Callable[[int], bytes], *, nested: bool) -> Iterator[TracePacket]:
    """The packets of a ``Trace`` message: field 1, length-delimited, repeated."""
    what = "a compressed bundle" if nested else "the file"
    try:
        while True:
            tag = _tag(read, path, what)
            if tag is None:
                return
            if tag != 0x0A:  # field 1 (packet), length-delimited
                raise SessionFileError(f"{path} {NOT_A_TRACE}: {what} holds a field other than packets")
            length = _varint(read, path, what)
            if length > MAX_PACKET_BYTES:
                raise SessionFileError(
                    f"{path} {NOT_A_TRACE}: {what} declares a packet of {length:,} bytes "
                    f"(over the {MAX_PACKET_BYTES:,} a proton_ik trace can hold)"
                )
            data = read(length)
            if len(data) != length:
                raise SessionFileError(
                    f"{path}: {what} ends inside a packet: the trace is truncated, write it again"
                )
            packet = TracePacket()
            packet.ParseFromString(data)
            if packet.HasField("compressed_packets"):
                if nested:
                    raise SessionFileError(f"{path} {NOT_A_TRACE}: a compressed bundle holds another")
                yield from _packets(path, _inflating(packet.compressed_packets), nested=True)
            else:
                yield packet
    except (DecodeError, zlib.error, RecursionError) as error:
        raise SessionFileError(f"{path} {NOT_A_TRACE} ({type(error).__name__}: {error})") from None


def _tag(read: Callable[[int], bytes], path: Path, what: str) -> int | None:
    """A field's key, a varint; None at a clean end of the stream."""
    lead = read(1)
    return _varint(read, path, what, lead) if lead else None


def _varint(read: Callable[[int], bytes], path: Path, what: str, lead: bytes = b"") -> int:
    """A protobuf varint; ``lead``: its first byte, where the caller has read it."""
    value = 0
    for shift in range(0, 64, 7):
        byte = lead if shift == 0 and lead else read(1)
        if not byte:
            raise SessionFileError(
                f"{path}: {what} ends inside a packet: the trace is truncated, write it again"
            )
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
    raise SessionFileError(f"{path} {NOT_A_TRACE}: {what} holds a malformed length")
