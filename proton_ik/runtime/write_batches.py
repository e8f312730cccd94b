"""Copied launches taken for the session file a batch at a time.

The drain's writer thread writes what the drain thread copied off the device. Where launches come
faster than one write and flush each (a finalize that drains a thousand short launches at once),
it takes every copied launch already waiting, up to a bound, writes them all and flushes the
file once: a flush waits for the file's own thread, and 1000 flushes of 45 kB launches took
0.72 s of an H200 host's finalize, where writing their bytes takes 15 ms (docs/PERFORMANCE.md,
"The last flush of many short launches"). Where launches come one at a time, a batch is one
launch, flushed as before.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import TypeVar

BATCH_LAUNCHES = 256  # launches written between two flushes of the session file, at most
BATCH_BYTES = 64 << 20  # and their bytes: their chunks go back to the pool only after the flush

Item = TypeVar("Item")


def next_batch(
    waiting: queue.SimpleQueue[Item | None],
    size: Callable[[Item], int],
    *,
    launches: int = BATCH_LAUNCHES,
    limit_bytes: int = BATCH_BYTES,
) -> tuple[list[Item], bool]:
    """The next item of ``waiting`` (waiting for it), then those already queued behind it, while
    the batch holds fewer than ``launches`` items and ``limit_bytes`` by ``size``; and whether
    the queue's end (None) was reached, after the batch's items."""
    first = waiting.get()
    if first is None:
        return [], True
    batch, held = [first], size(first)
    while len(batch) < launches and held < limit_bytes:
        try:
            item = waiting.get_nowait()
        except queue.Empty:
            break
        if item is None:
            return batch, True
        batch.append(item)
        held += size(item)
    return batch, False
