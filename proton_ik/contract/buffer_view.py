"""A profile buffer seen through the layout, in place: its CTA headers, unit headers and ring
slots as strided numpy arrays over its bytes, with no copy and no decoding. A raw buffer
(``raw_view``) and the session file's trimmed form (``trimmed.trimmed_view``) are both seen as a
``BufferView``; the decoder reads views, and the trimmed form is written from one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from proton_ik.contract.layout import (
    CTA_HEADER_BYTES,
    CTA_HEADER_DTYPE,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    BufferLayout,
)


@dataclass(frozen=True)
class BufferView:
    """A buffer's headers and ring slots, wherever its bytes keep them: in place in a raw buffer
    (``raw_view``), or packed one after another in a trimmed one (``trimmed.trimmed_view``). The
    decoder reads views, so a trimmed buffer is never rebuilt into the raw one."""

    cta_headers: np.ndarray  # CTA_HEADER_DTYPE, one per CTA slot
    unit_headers: np.ndarray  # UNIT_HEADER_DTYPE, shape (CTA slots, units)
    slots: np.ndarray  # the layout's ``slot_dtype``, 1-D
    slot0: np.ndarray  # int64, shape (CTA slots, units): index in ``slots`` of each unit's slot 0

    @property
    def num_ctas(self) -> int:
        return len(self.cta_headers)

    def ctas(self, start: int, stop: int) -> BufferView:
        """CTA slots ``start`` to ``stop`` (a piece of a large launch)."""
        return BufferView(
            self.cta_headers[start:stop], self.unit_headers[start:stop], self.slots, self.slot0[start:stop]
        )

    def reach(self, capacity: int) -> tuple[int, int]:
        """The range of ``slots`` that this view's units can read: a piece copies no more."""
        if not self.slot0.size:
            return 0, 0
        return int(self.slot0.min()), min(len(self.slots), int(self.slot0.max()) + capacity)


def raw_view(buffer: np.ndarray, layout: BufferLayout) -> BufferView:
    """A raw buffer (``num_ctas * layout.cta_bytes`` uint8) seen in place: no bytes are copied."""
    raw = np.ascontiguousarray(buffer, dtype=np.uint8).reshape(-1)
    if raw.size % layout.cta_bytes:
        raise ValueError(
            f"a profile buffer of {raw.size} bytes is not a whole number of {layout.cta_bytes}-byte "
            "CTA regions: the buffer and the kernel metadata do not belong together"
        )
    num_ctas = raw.size // layout.cta_bytes
    return BufferView(
        cta_headers=_view(raw, (num_ctas,), CTA_HEADER_DTYPE, 0, (layout.cta_bytes,)),
        unit_headers=_view(
            raw,
            (num_ctas, layout.units),
            UNIT_HEADER_DTYPE,
            CTA_HEADER_BYTES,
            (layout.cta_bytes, layout.unit_bytes),
        ),
        slots=raw.view(layout.slot_dtype),
        slot0=_raw_slot0(num_ctas, layout),
    )


@functools.lru_cache(maxsize=256)
def _raw_slot0(num_ctas: int, layout: BufferLayout) -> np.ndarray:
    """Each unit's slot 0 in a raw buffer of ``num_ctas`` CTAs, read-only: the launches of a
    kernel share one (a session of many small launches made it anew twice a launch)."""
    # Headers (64 and 48 bytes) and slots all start on slot boundaries (layout.py), so the whole
    # buffer is an array of slots, and each unit's slot 0 is an index into it.
    units = np.arange(layout.units, dtype=np.int64)
    first = (layout.unit_offset(0) + UNIT_HEADER_BYTES + units * layout.unit_bytes) // layout.slot_bytes
    ctas = np.arange(num_ctas, dtype=np.int64)[:, None] * (layout.cta_bytes // layout.slot_bytes)
    slot0 = ctas + first
    slot0.flags.writeable = False
    return slot0


def _view(
    raw: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, offset: int, strides: tuple[int, ...]
) -> np.ndarray:
    """The buffer's bytes seen in place as a strided array of ``dtype`` (no copy)."""
    if raw.size == 0:
        return np.zeros(shape, dtype)
    return np.ndarray(shape, dtype, raw, offset, strides)
