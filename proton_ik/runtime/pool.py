"""A bounded device pool for profile buffers: one arena, handed out as a ring.

Launches take chunks in order and give them back in the same order, once their records are
copied off the device, so a ring (head and tail offsets) is all the bookkeeping needed. When
the ring is full, ``allocate`` waits for the oldest copy to finish: memory stays bounded and no
record is dropped.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass

from proton_ik.contract.layout import CTA_ALIGN


class PoolTooSmall(RuntimeError):
    pass


@dataclass(slots=True)
class PoolChunk:
    offset: int
    size: int
    skip: int  # bytes left unused at the end of the arena to wrap this chunk to offset 0
    released: bool = False


class RingPool:
    """Offsets into an arena of ``capacity`` bytes. Thread-safe: the drain releases chunks."""

    def __init__(self, capacity: int, align: int = CTA_ALIGN):
        self.capacity = capacity - capacity % align
        self.align = align
        self._head = 0  # next free byte
        # Bytes between tail and head, skips included; written under the lock, read without it
        # as a hint of when to drain, never for allocating (``in_use`` reads it under the lock)
        self.used = 0
        self._live: collections.deque[PoolChunk] = collections.deque()
        self._lock = threading.Lock()
        self.high_water = 0
        self.handed_out = 0  # bytes of every chunk handed out so far: what a pool holding all would need

    def _round(self, size: int) -> int:
        return -(-max(size, 1) // self.align) * self.align

    def try_allocate(self, size: int) -> PoolChunk | None:
        align = self.align
        need = -(-size // align) * align if size > 0 else align  # self._round, inline: once a launch
        if need > self.capacity:
            raise PoolTooSmall(
                f"one launch needs {size} bytes of profile buffer but the pool holds {self.capacity}; "
                "pass a larger pool_bytes to proton_ik.start(), or a smaller capacity in the mode"
            )
        capacity = self.capacity
        with self._lock:
            used = self.used
            head = self._head if used else 0  # an empty ring starts over: no need to skip to the end
            skip = capacity - head if head + need > capacity else 0
            used += skip + need
            if used > capacity:
                return None
            offset = 0 if skip else head
            self._head = (offset + need) % capacity
            self.used = used
            chunk = PoolChunk(offset, size, skip)
            self._live.append(chunk)
            self.handed_out += need
            if used > self.high_water:
                self.high_water = used
            return chunk

    def allocate(self, size: int, wait_for_oldest: Callable[[], bool]) -> PoolChunk:
        """A chunk of ``size`` bytes; while the ring is full, ``wait_for_oldest()`` frees space."""
        while True:
            chunk = self.try_allocate(size)
            if chunk is not None:
                return chunk
            if not wait_for_oldest():
                raise RuntimeError("the profile buffer pool is full and nothing is in flight to free it")

    def release(self, chunk: PoolChunk) -> None:
        """Give a chunk back; space is reclaimed in allocation order."""
        with self._lock:
            chunk.released = True
            while self._live and self._live[0].released:
                oldest = self._live.popleft()
                self.used -= oldest.skip + self._round(oldest.size)

    @property
    def in_use(self) -> int:
        with self._lock:
            return self.used
