"""A drain with a real ring pool and no device, for the launch-path tests: what the hooks hand
it, kept."""

from __future__ import annotations

from typing import Any

from proton_ik.runtime.pool import RingPool


class FakeDrain:
    device = 0
    base = 1 << 40  # the arena's address: the allocator hands out base + chunk offset

    def __init__(self, pool_bytes: int = 1 << 24):
        self.pool = RingPool(pool_bytes)
        self.submitted: list[Any] = []

    def allocate(self, size):
        return self.pool.try_allocate(size)

    def submit(self, launch, stream):
        self.submitted.append((launch, stream))
