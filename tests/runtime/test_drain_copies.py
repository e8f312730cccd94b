"""How a batch of launches copied whole leaves the device (``Drain._copy_out``): launches whose
chunks lie one after another in one copy and one clearing of their span; any other launch alone,
its headers cleared. Checked on CPU tensors: what reaches the host, what is cleared, and that
nothing outside the batch's chunks is touched."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest

from proton_ik.contract.layout import CTA_HEADER_BYTES, UNIT_HEADER_BYTES, BufferLayout
from proton_ik.runtime.drain import Drain
from proton_ik.runtime.pool import PoolChunk
from proton_ik.runtime.queued_launch import CopiedLaunch, QueuedLaunch

torch = pytest.importorskip("torch")

ALIGN = 256
LAYOUT = BufferLayout(units=4, capacity=4)
CTAS = 3
SIZE = CTAS * LAYOUT.cta_bytes
ROUNDED = -(-SIZE // ALIGN) * ALIGN
ARENA = 8 * ROUNDED
KERNEL = SimpleNamespace(dense=True, layout=LAYOUT, name="k", num_warps=4, profile={})
RING = SimpleNamespace(dense=False, layout=LAYOUT, name="k", num_warps=4, profile={})


class _SideStream:
    def __init__(self) -> None:
        self.waited: list[object] = []

    def wait_event(self, event: object) -> None:
        self.waited.append(event)

    def synchronize(self) -> None:
        pass


def _drain() -> Drain:
    drain = object.__new__(Drain)
    generator = torch.Generator().manual_seed(0)
    drain.arena = torch.randint(1, 256, (ARENA,), dtype=torch.uint8, generator=generator)
    drain.host_arena = torch.zeros(ARENA, dtype=torch.uint8)
    drain._host_bytes = drain.host_arena.numpy()
    cuda = SimpleNamespace(stream=lambda stream: contextlib.nullcontext())  # no device: no streams
    drain._torch = SimpleNamespace(cuda=cuda, as_strided=torch.as_strided)
    drain.side_stream = _SideStream()
    drain.pool = SimpleNamespace(align=ALIGN)
    drain.copied_bytes = 0
    return drain


def _copied(number: int, offset: int, kernel=KERNEL, event: object = "event") -> CopiedLaunch:
    chunk = PoolChunk(offset, SIZE, 0)
    return CopiedLaunch(QueuedLaunch(chunk, number, kernel, num_ctas=CTAS, launched=event))  # type: ignore[arg-type]


def _headers(arena: np.ndarray, offset: int) -> np.ndarray:
    """The CTA and unit header bytes of a launch's chunk."""
    at = offset + np.arange(CTAS)[:, None] * LAYOUT.cta_bytes
    header = at + np.arange(CTA_HEADER_BYTES)
    units = at[..., None] + CTA_HEADER_BYTES + (np.arange(LAYOUT.units) * LAYOUT.unit_bytes)[:, None]
    return np.concatenate([arena[header].ravel(), arena[units + np.arange(UNIT_HEADER_BYTES)].ravel()])


def test_adjacent_launches_leave_in_one_copy_and_one_clearing():
    drain = _drain()
    before = drain.arena.numpy().copy()
    batch = [_copied(n, n * ROUNDED) for n in range(3)]
    drain._copy_out(batch)
    arena = drain.arena.numpy()
    for n, copied in enumerate(batch):
        window = slice(n * ROUNDED, n * ROUNDED + SIZE)
        assert copied.meta["launch"] == n and copied.meta["num_ctas"] == CTAS and not copied.trimmed
        assert np.array_equal(copied.data, before[window])
    assert not arena[: 2 * ROUNDED + SIZE].any()  # the span: headers and slots
    assert np.array_equal(arena[2 * ROUNDED + SIZE :], before[2 * ROUNDED + SIZE :])  # nothing past it
    assert drain.copied_bytes == 3 * SIZE
    assert drain.side_stream.waited == ["event"]  # launches of a stream share its event


def test_a_gap_or_a_ring_launch_ends_a_run():
    drain = _drain()
    # 0 and 1 adjacent; 3 after a chunk not in the batch; then a ring launch; then 6 after it
    batch = [_copied(0, 0), _copied(1, ROUNDED), _copied(3, 3 * ROUNDED), _copied(4, 4 * ROUNDED, RING)]
    batch.append(_copied(5, 5 * ROUNDED))
    runs = drain._adjacent_runs(batch)
    assert [[c.launch.number for c in run] for run in runs] == [[0, 1], [3], [4], [5]]


def test_a_launch_alone_has_its_headers_cleared_and_its_slots_kept():
    drain = _drain()
    before = drain.arena.numpy().copy()
    batch = [_copied(0, 0), _copied(2, 2 * ROUNDED, event="other")]
    drain._copy_out(batch)
    arena = drain.arena.numpy()
    for copied in batch:
        offset = copied.launch.chunk.offset
        assert np.array_equal(copied.data, before[offset : offset + SIZE])
        assert not _headers(arena, offset).any()
    second = slice(2 * ROUNDED, 2 * ROUNDED + SIZE)
    assert (
        np.count_nonzero(arena[second])
        == np.count_nonzero(before[second]) - _headers(before, 2 * ROUNDED).size
    )
    assert np.array_equal(arena[ROUNDED : 2 * ROUNDED], before[ROUNDED : 2 * ROUNDED])  # between them
    assert drain.side_stream.waited == ["event", "other"]
