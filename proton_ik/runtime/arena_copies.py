"""What crosses from a launch's chunk of a drain's device arena to its pinned host mirror, on the
drain's side stream: a ring launch's written slots only (``copy_written``), and the headers
cleared behind every copy (``clear_headers``), so that a unit that never reaches its exit in a
later launch finds no earlier launch's counts or end marker."""

from __future__ import annotations

from typing import Any

import numpy as np

from proton_ik.contract.layout import (
    CTA_HEADER_BYTES,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    BufferLayout,
    field_offset,
)
from proton_ik.contract.trimmed import trimmed_from_gathered

_ENTRIES_FIELD = field_offset(UNIT_HEADER_DTYPE, "entries")


def copy_written(
    arena: Any,
    host_arena: Any,
    host_bytes: np.ndarray,
    side_stream: Any,
    offset: int,
    layout: BufferLayout,
    num_ctas: int,
) -> tuple[np.ndarray, int]:
    """The trimmed form of the first ``num_ctas`` CTA regions of a ring launch at ``offset``,
    copying their counts first, then only what they say; and the bytes copied. ``host_bytes``:
    the host mirror ``host_arena`` as numpy, made once."""
    import torch

    words = arena.view(torch.int32)
    counts = torch.as_strided(
        words,
        (num_ctas, layout.units),
        (layout.cta_bytes // 4, layout.unit_bytes // 4),
        (offset + CTA_HEADER_BYTES + _ENTRIES_FIELD) // 4,
    ).cpu()  # waits for this side-stream copy only
    # As contract.trimmed reads them: unsigned, so a garbage count keeps the whole ring.
    kept = np.minimum(counts.numpy().view(np.uint32).astype(np.int64), layout.capacity)
    slots = int(kept.max(initial=0))
    pieces = [
        torch.as_strided(arena, (num_ctas, CTA_HEADER_BYTES), (layout.cta_bytes, 1), offset),
        torch.as_strided(
            arena,
            (num_ctas, layout.units, UNIT_HEADER_BYTES),
            (layout.cta_bytes, layout.unit_bytes, 1),
            offset + CTA_HEADER_BYTES,
        ),
        torch.as_strided(
            arena,
            (num_ctas, layout.units, slots * layout.slot_bytes),
            (layout.cta_bytes, layout.unit_bytes, 1),
            offset + CTA_HEADER_BYTES + UNIT_HEADER_BYTES,
        ),
    ]
    gathered = torch.cat([piece.reshape(-1) for piece in pieces])
    window = slice(offset, offset + gathered.numel())
    host_arena[window].copy_(gathered, non_blocking=True)
    clear_headers(arena, offset, layout, num_ctas)
    side_stream.synchronize()
    return trimmed_from_gathered(host_bytes[window], layout, num_ctas, kept), gathered.numel()


def clear_headers(arena: Any, offset: int, layout: BufferLayout, num_ctas: int) -> None:
    """Zero the CTA and unit headers of a launch just copied, on the side stream after the copy
    and before its chunk goes back to the pool: a few bytes per unit, not the slots."""
    import torch

    torch.as_strided(arena, (num_ctas, CTA_HEADER_BYTES), (layout.cta_bytes, 1), offset).zero_()
    torch.as_strided(
        arena,
        (num_ctas, layout.units, UNIT_HEADER_BYTES),
        (layout.cta_bytes, layout.unit_bytes, 1),
        offset + CTA_HEADER_BYTES,
    ).zero_()
