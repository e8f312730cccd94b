"""The trimmed form of a launch's buffer, as the session file stores it: only what the launch
wrote, the headers and each unit's kept ring slots. Its writers (the session writer's ``trim``
and the drain, which gathers the same bytes on the device) and its reader (the viewer) agree on
it here.

A profile buffer is sized for full rings, but most units write a few slots: a 1000-launch
session of a small kernel is gigabytes raw and megabytes trimmed. ``trim`` keeps the CTA
headers, the unit headers and, per unit, slots ``0 .. min(entries, capacity) - 1`` (the slots a
ring of that many has written; ``entries`` counts slots), one after another, each of the
layout's ``slot_bytes``. ``trimmed_view`` reads that form in
place for the decoder; ``inflate`` puts it back at its offsets in a zeroed buffer, which decodes
exactly like the raw one.
"""

from __future__ import annotations

import numpy as np

from proton_ik.contract.buffer_view import BufferView, raw_view
from proton_ik.contract.layout import (
    CTA_HEADER_BYTES,
    CTA_HEADER_DTYPE,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    BufferLayout,
)


def _kept(unit_headers: np.ndarray, layout: BufferLayout) -> np.ndarray:
    """Slots a unit has written: all of them once its ring wrapped."""
    return np.minimum(unit_headers["entries"].astype(np.int64), layout.capacity)


def _owners(kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each kept slot, unit by unit: its unit (flat index) and its ring position."""
    flat = kept.reshape(-1)
    owner = np.repeat(np.arange(len(flat)), flat)
    return owner, np.arange(len(owner)) - np.repeat(np.cumsum(flat) - flat, flat)


def header_bytes(layout: BufferLayout, num_ctas: int) -> int:
    """Bytes of a trimmed buffer before its slots: its CTA and unit headers."""
    return num_ctas * (CTA_HEADER_BYTES + layout.units * UNIT_HEADER_BYTES)


def trim(buffer: np.ndarray, layout: BufferLayout) -> np.ndarray:
    """The bytes of ``buffer`` that hold anything: CTA headers, unit headers, kept slots."""
    view = raw_view(buffer, layout)
    owner, slot = _owners(_kept(view.unit_headers, layout))
    slots = view.slots[view.slot0.reshape(-1)[owner] + slot]
    return np.concatenate(
        [
            np.ascontiguousarray(view.cta_headers).view(np.uint8),
            np.ascontiguousarray(view.unit_headers).reshape(-1).view(np.uint8),
            slots.view(np.uint8),
        ]
    )


def trimmed_view(
    stored: np.ndarray, layout: BufferLayout, num_ctas: int, *, headers_only: bool = False
) -> BufferView:
    """A trimmed buffer seen in place; with ``headers_only``, ``stored`` may end after the headers."""
    stored = np.asarray(stored, dtype=np.uint8).reshape(-1)
    ctas_end = num_ctas * CTA_HEADER_BYTES
    units_end = header_bytes(layout, num_ctas)
    if stored.size < units_end:
        raise ValueError(
            f"a trimmed buffer of {stored.size} bytes cannot hold the headers of {num_ctas} CTAs "
            f"of {layout.units} units"
        )
    unit_headers = stored[ctas_end:units_end].view(UNIT_HEADER_DTYPE).reshape(num_ctas, layout.units)
    kept = _kept(unit_headers, layout)
    if headers_only:
        slots = np.zeros(0, layout.slot_dtype)
    elif stored.size != units_end + int(kept.sum()) * layout.slot_bytes:
        raise ValueError(
            f"a trimmed buffer of {stored.size} bytes does not match the slot counts in its own unit headers"
        )
    else:
        slots = stored[units_end:].view(layout.slot_dtype)
    return BufferView(
        cta_headers=stored[:ctas_end].view(CTA_HEADER_DTYPE),
        unit_headers=unit_headers,
        slots=slots,
        slot0=(np.cumsum(kept) - kept.reshape(-1)).reshape(kept.shape),
    )


def inflate(stored: np.ndarray, layout: BufferLayout, num_ctas: int) -> np.ndarray:
    """The raw buffer that ``trim`` came from, with zeros where nothing was kept."""
    view = trimmed_view(stored, layout, num_ctas)
    raw = np.zeros(num_ctas * layout.cta_bytes, dtype=np.uint8)
    target = raw_view(raw, layout)
    target.cta_headers[...] = view.cta_headers
    target.unit_headers[...] = view.unit_headers
    owner, slot = _owners(_kept(view.unit_headers, layout))
    target.slots[target.slot0.reshape(-1)[owner] + slot] = view.slots
    return raw


def trimmed_from_gathered(
    gathered: np.ndarray, layout: BufferLayout, num_ctas: int, kept: np.ndarray
) -> np.ndarray:
    """The trimmed form of a ring launch, from what the drain gathered on the device: every CTA
    header, every unit header, then each unit's first ``max(kept)`` ring slots. ``kept`` holds
    each unit's written slots, min(entries, capacity), in CTA then unit order."""
    slots = int(kept.max(initial=0))
    headers = num_ctas * (CTA_HEADER_BYTES + layout.units * UNIT_HEADER_BYTES)
    rings = gathered[headers:].reshape(num_ctas * layout.units, slots, layout.slot_bytes)
    written = rings[np.arange(slots) < kept.reshape(-1, 1)]
    return np.concatenate([gathered[:headers], written.reshape(-1)])
