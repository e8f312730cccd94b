"""Which queued launches the drain thread copies together (``Drain._take``): launches copied
whole, behind the oldest, up to ``COPY_BATCH_BYTES``, while the drain has reason to take them;
a ring launch, a launch not recorded and a launch whose event is not recorded yet stop a batch.
And how its writer thread writes what waits (``Drain._write``): at once, chunks back after.
The drain is built without a device: only its queues, its reasons to take and its pool are set."""

from __future__ import annotations

import collections
from types import SimpleNamespace

import numpy as np
import pytest

from proton_ik.runtime.drain import COPY_BATCH_BYTES, Drain
from proton_ik.runtime.pool import PoolChunk
from proton_ik.runtime.queued_launch import QueuedLaunch

MIB = 1 << 20
DENSE = SimpleNamespace(dense=True, layout=SimpleNamespace(aggregate=False))
RING = SimpleNamespace(dense=False, layout=SimpleNamespace(aggregate=False))
AGGREGATE = SimpleNamespace(dense=False, layout=SimpleNamespace(aggregate=True))
EVENT = object()


def _drain(*launches: QueuedLaunch) -> Drain:
    drain = object.__new__(Drain)
    drain._waiting = collections.deque(launches)
    drain._paused = drain._room_wanted = False
    drain._taken = drain._busy = 0
    drain._flush_upto = len(launches)  # a flush asked for every launch queued
    drain._drain_at = 1 << 40
    drain.pool = SimpleNamespace(used=0)
    return drain


def _launch(kernel=DENSE, size: int = MIB, *, recorded: bool = True, event=EVENT) -> QueuedLaunch:
    return QueuedLaunch(PoolChunk(0, size, 0), 0 if recorded else None, kernel, launched=event)  # type: ignore[arg-type]


def _batches(drain: Drain) -> list[int]:
    sizes = []
    while drain._waiting and drain._should_take():
        sizes.append(len(drain._take()))
    return sizes


def test_short_launches_copied_whole_go_together_up_to_the_bound():
    count = COPY_BATCH_BYTES // (64 << 10) + 3
    drain = _drain(*(_launch(size=64 << 10) for _ in range(count)))
    assert _batches(drain) == [count - 3, 3]
    assert drain._busy == count


def test_launches_of_the_bound_or_more_go_one_at_a_time():
    assert _batches(_drain(*(_launch(size=COPY_BATCH_BYTES) for _ in range(3)))) == [1, 1, 1]
    assert _batches(_drain(*(_launch(size=3 * MIB) for _ in range(5)))) == [2, 2, 1]


@pytest.mark.parametrize(
    ("launches", "batches"),
    [
        ([_launch(), _launch(), _launch(RING), _launch()], [2, 1, 1]),  # a ring launch is copied alone
        ([_launch(), _launch(recorded=False), _launch()], [1, 1, 1]),  # one not recorded: waited for
        ([_launch(AGGREGATE), _launch(), _launch(AGGREGATE)], [3]),  # statistics are copied whole
    ],
)
def test_what_is_not_copied_whole_stops_a_batch(launches, batches):
    assert _batches(_drain(*launches)) == batches


def test_a_launch_whose_event_is_not_recorded_yet_stays_queued():
    drain = _drain(_launch(), _launch(), _launch(event=None), _launch())
    assert _batches(drain) == [2]
    assert len(drain._waiting) == 2


def test_a_batch_takes_no_more_than_the_drain_has_reason_to():
    drain = _drain(*(_launch(size=64 << 10) for _ in range(6)))
    drain._flush_upto = 0  # no flush, no room wanted, the pool below its mark: nothing is due
    assert _batches(drain) == []
    drain._room_wanted = True
    assert len(drain._take()) == 6


def _writer(copied: list, sink) -> tuple[Drain, list]:
    """A drain whose writer has ``copied`` queued, then its end; what happened, in order."""
    import queue
    import threading

    happened: list = []
    drain = object.__new__(Drain)
    drain._to_write = queue.SimpleQueue()
    for item in [*copied, None]:
        drain._to_write.put(item)
    drain._cond = threading.Condition(threading.Lock())
    drain._busy, drain._taken, drain._room_wanted, drain._error = len(copied), 0, True, None
    drain._free_events = []
    drain.pool = SimpleNamespace(release=lambda chunk: happened.append(("release", chunk.offset)))
    drain.sink = lambda launches: (
        happened.append(("write", [meta["launch"] for meta, _, _ in launches])),
        sink(),
    )
    return drain, happened


def _copied(number: int, *, recorded: bool = True, owns_event: bool = False):
    from proton_ik.runtime.queued_launch import CopiedLaunch

    launch = QueuedLaunch(
        PoolChunk(number, 64, 0), number if recorded else None, DENSE, owns_event=owns_event
    )
    launch.launched = f"event {number}"
    if not recorded:
        return CopiedLaunch(launch)
    return CopiedLaunch(launch, {"launch": number}, np.zeros(64, dtype=np.uint8), False)


def test_the_writer_writes_what_waits_at_once_and_gives_the_chunks_back_after():
    drain, happened = _writer(
        [_copied(0), _copied(1, recorded=False), _copied(2, owns_event=True)], lambda: None
    )
    drain._write()
    # one write of the recorded launches, then every chunk back, the one not recorded too
    assert happened == [("write", [0, 2]), ("release", 0), ("release", 1), ("release", 2)]
    assert (drain._taken, drain._busy, drain._room_wanted) == (3, 0, False)
    assert drain._free_events == ["event 2"]  # the launch that owned its event gave it back


def test_a_failed_write_is_kept_and_the_chunks_still_go_back():
    def fail():
        raise OSError("disk full")

    drain, happened = _writer([_copied(0), _copied(1)], fail)
    drain._write()
    assert isinstance(drain._error, OSError)
    assert happened == [("write", [0, 1]), ("release", 0), ("release", 1)]
    assert drain._taken == 2
