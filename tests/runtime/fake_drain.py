"""A drain with no device, for the launch-path tests: the real ring, ``submit``, sealing and
route (so the compiled launch path queues launches here as it does on a GPU), events that are
plain objects, and no threads: what the hooks hand it stays queued."""

from __future__ import annotations

import collections
import threading
from typing import Any

from proton_ik.runtime.drain import DRAIN_AT, Drain
from proton_ik.runtime.pool import make_ring


class FakeDrain(Drain):
    device = 0
    base = 1 << 40  # the arena's address: the allocator hands out base + chunk offset

    def __init__(self, pool_bytes: int = 1 << 30):  # no super().__init__: no device, no threads
        self.pool = make_ring(pool_bytes)
        self._drain_at = DRAIN_AT * self.pool.capacity
        self._unevented: dict[int, list[Any]] = {}
        self._sealing = threading.Lock()
        self._waiting: collections.deque[Any] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._idle = False
        self.events = 0  # events recorded after launches
        self.route = self._route()

    def allocate(self, size):
        return self.pool.try_allocate(size)

    def _event(self):
        self.events += 1
        return object()

    def _record_event(self, event, stream) -> None:
        """Recorded on no device."""

    def stream(self, handle: int):
        return handle

    @property
    def submitted(self) -> list[tuple[Any, int]]:
        """Each launch queued so far, with its stream."""
        return [(launch, launch.stream) for launch in self._waiting]
