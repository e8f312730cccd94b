"""A bounded device pool for profile buffers: one arena, handed out as a ring.

Launches take chunks in order and give them back in the same order, once their records are
copied off the device, so a ring (head and tail offsets) is all the bookkeeping needed. When
the ring is full, ``allocate`` waits for the oldest copy to finish: memory stays bounded and no
record is dropped.

``make_ring`` gives the compiled ring (``runtime.compiled``) where it is built, and ``RingPool``
otherwise: the same ring in Python, its reference.
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proton_ik.contract.layout import CTA_ALIGN
from proton_ik.runtime import compiled


class PoolTooSmall(RuntimeError):
    @classmethod
    def for_launch(cls, size: int, capacity: int) -> PoolTooSmall:
        return cls(
            f"one launch needs {size} bytes of profile buffer but the pool holds {capacity}; "
            "pass a larger pool_bytes to proton_ik.start(), or a smaller capacity in the mode"
        )


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
            raise PoolTooSmall.for_launch(size, self.capacity)
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
        return allocate_waiting(self, size, wait_for_oldest)

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


def allocate_waiting(pool: Any, size: int, wait_for_oldest: Callable[[], bool]) -> Any:
    """A chunk of ``size`` bytes from ``pool``; while its ring is full, ``wait_for_oldest()``
    frees space."""
    while True:
        chunk = pool.try_allocate(size)
        if chunk is not None:
            return chunk
        if not wait_for_oldest():
            raise RuntimeError("the profile buffer pool is full and nothing is in flight to free it")


def make_ring(capacity: int, align: int = CTA_ALIGN) -> Any:
    """The compiled ring where it is built, else ``RingPool``: the same offsets, chunks with the
    same fields, the same ``try_allocate``, ``allocate``, ``release`` and counters."""
    built = compiled.launch_path()
    if built is None:
        return RingPool(capacity, align)
    return _compiled_ring(built)(capacity - capacity % align, align, PoolTooSmall.for_launch)


@functools.cache
def _compiled_ring(built: Any) -> type:
    class CompiledRing(built.Ring):
        __slots__ = ()

        def allocate(self, size: int, wait_for_oldest: Callable[[], bool]) -> Any:
            return allocate_waiting(self, size, wait_for_oldest)

        @property
        def in_use(self) -> int:
            return self.used  # read whole: the ring changes only under the GIL

    return CompiledRing
