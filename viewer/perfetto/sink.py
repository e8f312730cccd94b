"""The Perfetto writer's output: framed packets written to the file, or gathered into bundles
that worker threads deflate (``TracePacket.compressed_packets``, a zlib stream that trace
processor and the Perfetto UI inflate), with libdeflate or zlib-ng where installed.
"""

from __future__ import annotations

import os
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket
from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

from proton_ik.viewer.arrays import varint_bytes
from proton_ik.viewer.perfetto.wire import TRACE_PACKET


def _deflate() -> tuple[Callable[[bytes, int], bytes], int]:
    """libdeflate's level 1 (the ``deflate`` package, a dependency from Python 3.11): 1.6 to 1.75x
    zlib-ng's level 2, and 2 to 3% smaller (docs/PERFORMANCE.md); else zlib-ng's level 2: 1.6x
    zlib's level 1, and 4% smaller; else zlib's level 1 (level 6 saves about a quarter of the
    size for four times the time). Each writes the zlib stream that Perfetto inflates, and lets
    other threads run while it compresses."""
    try:
        from deflate import zlib_compress
    except ImportError:
        pass
    else:  # it returns a bytearray, which protobuf's bytes fields refuse
        return lambda data, level: bytes(zlib_compress(data, level)), 1
    try:
        from zlib_ng import zlib_ng
    except ImportError:
        return zlib.compress, 1
    return zlib_ng.compress, 2


COMPRESS, COMPRESS_LEVEL = _deflate()
BUNDLE_BYTES = 1 << 20  # uncompressed bytes per compressed bundle


class Sink:
    """Writes framed packets (``Trace.packet`` fields) to the file, or gathers them into bundles
    that worker threads compress while the caller encodes the next chunk."""

    def __init__(self, file: BinaryIO, compress: bool):
        self.file = file
        self.builder = StreamingTraceProtoBuilder(file)
        self.compress = compress
        self.pending: list[bytes | np.ndarray] = []
        self.pending_bytes = 0
        self.workers = min(8, os.cpu_count() or 1)
        self.pool = ThreadPoolExecutor(self.workers) if compress else None
        self.bundles: deque[Future[bytes]] = deque()

    def packet(self, packet: TracePacket) -> None:
        self.framed(TRACE_PACKET + varint_bytes(packet.ByteSize()) + packet.SerializeToString())

    def framed(self, data: bytes | np.ndarray) -> None:
        if not self.compress:
            self.file.write(data)  # type: ignore[arg-type]  # an ndarray is a buffer (numpy stubs: from 3.12)
            return
        self.pending.append(data)
        self.pending_bytes += len(data)
        if self.pending_bytes >= BUNDLE_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        assert self.pool is not None, "only a compressing sink gathers packets"
        payload = b"".join(self.pending)  # type: ignore[arg-type]  # ndarrays are buffers (numpy stubs: from 3.12)
        self.pending, self.pending_bytes = [], 0
        self.bundles.append(self.pool.submit(COMPRESS, payload, COMPRESS_LEVEL))
        while len(self.bundles) > 2 * self.workers:
            self._write_bundle()

    def _write_bundle(self) -> None:
        self.builder.write_packet(TracePacket(compressed_packets=self.bundles.popleft().result()))

    def close(self) -> None:
        """Write what is pending, and wait for the workers."""
        if self.pool is None:
            return
        self.flush()
        while self.bundles:
            self._write_bundle()
        self.pool.shutdown()
