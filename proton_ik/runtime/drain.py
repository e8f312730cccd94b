"""Asynchronous drain: profile buffers leave the device with no synchronization per launch.

After each instrumented launch, the side stream waits for the launch (an event), copies its
chunk into pinned host memory and records a second event. A background thread waits for
those events in launch order, gives the device chunk back to the pool, and hands the host
bytes to the sink (the session file), so neither device nor host memory grows with launches.
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
    host: Any  # pinned torch.Tensor, or None
    done: Any  # torch.cuda.Event


class Drain:
    def __init__(self, pool: RingPool, arena, sink: Sink):
        import torch

        self._torch = torch
        self.pool = pool
        self.arena = arena
        self.sink = sink
        self.side_stream = torch.cuda.Stream(device=arena.device)
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
        launched.record(torch.cuda.ExternalStream(stream, device=self.arena.device))
        self.side_stream.wait_event(launched)
        host = None
        with torch.cuda.stream(self.side_stream):
            if meta is not None:
                host = torch.empty(chunk.size, dtype=torch.uint8, pin_memory=True)
                host.copy_(self.arena[chunk.offset : chunk.offset + chunk.size], non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.side_stream)
        with self._pending_lock:
            self._pending += 1
        self._queue.put(_InFlight(meta, chunk, host, done))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                item.done.synchronize()
                self.pool.release(item.chunk)
                if item.meta is not None:
                    self.sink(item.meta, item.host.numpy())
            except BaseException as error:  # surfaced to the user at the next wait or close
                self._error = self._error or error
                self.pool.release(item.chunk)
            finally:
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
