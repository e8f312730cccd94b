"""Store only what a launch wrote: the headers and each unit's kept ring entries.

A profile buffer is sized for full rings, but most units write a few entries: a 1000-launch
session of a small kernel is gigabytes raw and megabytes trimmed. ``trim`` keeps the CTA
headers, the unit headers and, per unit, entries ``0 .. min(entries, capacity) - 1`` (the
slots a ring of that many entries has written); ``inflate`` puts them back at their offsets in
a zeroed buffer, which decodes exactly like the raw one.
"""

from __future__ import annotations

import numpy as np

from proton_ik.layout import (
    CTA_HEADER_BYTES,
    ENTRY_BYTES,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    BufferLayout,
    field_offset,
)

_ENTRIES = field_offset(UNIT_HEADER_DTYPE, "entries")


def _kept(unit_headers: np.ndarray, layout: BufferLayout) -> np.ndarray:
    entries = unit_headers[..., _ENTRIES : _ENTRIES + 4].copy().view("<u4")[..., 0].astype(np.int64)
    return np.minimum(entries, layout.capacity)


def _regions(layout: BufferLayout, num_ctas: int) -> tuple[np.ndarray, np.ndarray]:
    """Byte offsets of every CTA header and every unit header in the raw buffer."""
    ctas = np.arange(num_ctas, dtype=np.int64) * layout.cta_bytes
    units = ctas[:, None] + np.array([layout.unit_offset(u) for u in range(layout.units)], dtype=np.int64)
    return ctas, units


def _entry_offsets(units: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Byte offset of each kept entry, unit by unit."""
    flat_units, flat_kept = units.reshape(-1), kept.reshape(-1)
    owner = np.repeat(np.arange(len(flat_units)), flat_kept)
    slot = np.arange(len(owner)) - np.repeat(np.cumsum(flat_kept) - flat_kept, flat_kept)
    return flat_units[owner] + UNIT_HEADER_BYTES + slot * ENTRY_BYTES


def _gather(raw: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    return raw[starts.reshape(-1, 1) + np.arange(width)].reshape(-1)


def trim(buffer: np.ndarray, layout: BufferLayout) -> np.ndarray:
    """The bytes of ``buffer`` that hold anything: CTA headers, unit headers, kept entries."""
    raw = np.asarray(buffer, dtype=np.uint8).reshape(-1)
    num_ctas = raw.size // layout.cta_bytes
    ctas, units = _regions(layout, num_ctas)
    unit_headers = _gather(raw, units, UNIT_HEADER_BYTES).reshape(num_ctas, layout.units, UNIT_HEADER_BYTES)
    kept = _kept(unit_headers, layout)
    return np.concatenate(
        [
            _gather(raw, ctas, CTA_HEADER_BYTES),
            unit_headers.reshape(-1),
            _gather(raw, _entry_offsets(units, kept), ENTRY_BYTES),
        ]
    )


def inflate(stored: np.ndarray, layout: BufferLayout, num_ctas: int) -> np.ndarray:
    """The raw buffer that ``trim`` came from, with zeros where nothing was kept."""
    stored = np.asarray(stored, dtype=np.uint8).reshape(-1)
    ctas, units = _regions(layout, num_ctas)
    header_bytes = num_ctas * CTA_HEADER_BYTES
    unit_bytes = num_ctas * layout.units * UNIT_HEADER_BYTES
    if stored.size < header_bytes + unit_bytes:
        raise ValueError(
            f"a trimmed buffer of {stored.size} bytes cannot hold the headers of {num_ctas} CTAs "
            f"of {layout.units} units"
        )
    unit_headers = stored[header_bytes : header_bytes + unit_bytes].reshape(num_ctas, layout.units, -1)
    offsets = _entry_offsets(units, _kept(unit_headers, layout))
    if stored.size != header_bytes + unit_bytes + offsets.size * ENTRY_BYTES:
        raise ValueError(
            f"a trimmed buffer of {stored.size} bytes does not match the entry counts in its own unit headers"
        )
    raw = np.zeros(num_ctas * layout.cta_bytes, dtype=np.uint8)
    raw[(ctas.reshape(-1, 1) + np.arange(CTA_HEADER_BYTES)).reshape(-1)] = stored[:header_bytes]
    raw[(units.reshape(-1, 1) + np.arange(UNIT_HEADER_BYTES)).reshape(-1)] = stored[
        header_bytes : header_bytes + unit_bytes
    ]
    raw[(offsets.reshape(-1, 1) + np.arange(ENTRY_BYTES)).reshape(-1)] = stored[header_bytes + unit_bytes :]
    return raw
