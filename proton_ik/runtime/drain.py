"""Asynchronous drain: profile buffers leave the device with no synchronization per launch.

After each instrumented launch, the side stream waits for the launch (an event), copies its
chunk into the same offsets of a pinned host mirror of the device arena, and records a second
event. A background thread waits for those events in launch order, hands the host bytes to the
sink (the session file), then gives the chunk back to the pool. Pinned memory is allocated
once, at start: allocating it per launch costs milliseconds. Neither device nor host memory
grows with the number of launches.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from proton_ik.runtime.pool import Chunk, RingPool

Sink = Callable[[dict[str, Any], np.ndarray], None]


@dataclass
class _InFlight:
    meta: dict[str, Any] | None  # None: free the chunk after the launch, copy nothing
    chunk: Chunk
    done: Any  # torch.cuda.Event


class Drain:
    def __init__(self, pool: RingPool, arena, sink: Sink):
        import torch

        self._torch = torch
        self.pool = pool
        self.arena = arena
        self.sink = sink
        self.side_stream = torch.cuda.Stream(device=arena.device)
        self.host_arena = torch.empty(arena.numel(), dtype=torch.uint8, pin_memory=True)
        self._host_bytes = self.host_arena.numpy()
        self._queue: queue.Queue[_InFlight | None] = queue.Queue()
        self._error: BaseException | None = None
        self._pending = 0
        self._pending_lock = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="proton_ik-drain", daemon=True)
        self._thread.start()

    def submit(self, meta: dict[str, Any] | None, chunk: Chunk, stream: int) -> None:
        """Queue the copy of ``chunk`` after the launch just enqueued on ``stream``; with no
        ``meta``, only give the chunk back once that launch is done."""
        torch = self._torch
        launched = torch.cuda.Event()
        launched.record(self._stream(stream))
        self.side_stream.wait_event(launched)
        window = slice(chunk.offset, chunk.offset + chunk.size)
        with torch.cuda.stream(self.side_stream):
            if meta is not None:
                self.host_arena[window].copy_(self.arena[window], non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.side_stream)
        with self._pending_lock:
            self._pending += 1
        self._queue.put(_InFlight(meta, chunk, done))

    def _stream(self, handle: int):
        # Handle 0 is the legacy default stream; an ExternalStream of 0 does not order the
        # event after work already queued there, so the copy would race the kernel.
        if handle == 0:
            return self._torch.cuda.default_stream(self.arena.device)
        return self._torch.cuda.ExternalStream(handle, device=self.arena.device)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                item.done.synchronize()
                if item.meta is not None:
                    chunk = item.chunk
                    self.sink(item.meta, self._host_bytes[chunk.offset : chunk.offset + chunk.size])
            except BaseException as error:  # surfaced to the user at the next wait or close
                self._error = self._error or error
            finally:
                self.pool.release(item.chunk)
                with self._pending_lock:
                    self._pending -= 1
                    self._pending_lock.notify_all()

    def wait_for_oldest(self) -> bool:
        """Block until one in-flight copy finishes; False if none is in flight."""
        with self._pending_lock:
            if self._pending == 0:
                return False
            before = self._pending
            self._pending_lock.wait_for(lambda: self._pending < before)
        self.raise_if_failed()
        return True

    def flush(self) -> None:
        with self._pending_lock:
            self._pending_lock.wait_for(lambda: self._pending == 0)
        self.raise_if_failed()

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._thread.join()

    def raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"proton_ik: draining profile buffers failed: {self._error}") from self._error
