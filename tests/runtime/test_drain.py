"""What the drain assembles on the host for a ring launch is exactly the session file's trimmed
form: checked against ``contract.trimmed.trim`` of the whole raw buffer, an independent oracle."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from proton_ik.contract.layout import (
    CTA_HEADER_BYTES,
    READ_VERSIONS,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    BufferLayout,
    field_offset,
    min_capacity,
)
from proton_ik.contract.trimmed import trim, trimmed_from_gathered

ENTRIES = field_offset(UNIT_HEADER_DTYPE, "entries")


def _raw_buffer(layout: BufferLayout, counts: np.ndarray, seed: int) -> np.ndarray:
    """A launch's buffer of random bytes whose unit headers hold ``counts`` slots written."""
    num_ctas = counts.shape[0]
    raw = np.random.default_rng(seed).integers(0, 256, num_ctas * layout.cta_bytes, dtype=np.uint8)
    for cta in range(num_ctas):
        for unit in range(layout.units):
            at = cta * layout.cta_bytes + layout.unit_offset(unit) + ENTRIES
            raw[at : at + 4] = np.array([counts[cta, unit]], dtype="<u4").view(np.uint8)
    return raw


def _gather_like_the_device(raw: np.ndarray, layout: BufferLayout, num_ctas: int, slots: int) -> np.ndarray:
    """What the drain's strided device copies put side by side: CTA headers, unit headers, and
    each unit's first ``slots`` ring slots."""
    ctas = raw.reshape(num_ctas, layout.cta_bytes)
    units = np.stack(
        [ctas[:, layout.unit_offset(u) :][:, : layout.unit_bytes] for u in range(layout.units)], 1
    )
    return np.concatenate(
        [
            ctas[:, :CTA_HEADER_BYTES].reshape(-1),
            units[:, :, :UNIT_HEADER_BYTES].reshape(-1),
            units[:, :, UNIT_HEADER_BYTES : UNIT_HEADER_BYTES + slots * layout.slot_bytes].reshape(-1),
        ]
    )


@settings(max_examples=60, deadline=None)
@given(
    num_ctas=st.integers(1, 5),
    units=st.integers(1, 4),
    capacity_log2=st.integers(0, 4),
    version=st.sampled_from(READ_VERSIONS),
    data=st.data(),
)
def test_the_drains_trimmed_form_is_trim_of_the_raw_buffer(num_ctas, units, capacity_log2, version, data):
    capacity = max(1 << capacity_log2, min_capacity(version))
    layout = BufferLayout(units=units, capacity=capacity, version=version)
    # Slots written: none, a few, a wrapped ring, or garbage from a unit that never started.
    count = st.one_of(st.integers(0, 3 * layout.capacity), st.integers(2**31, 2**32 - 1))
    counts = np.array(data.draw(st.lists(count, min_size=num_ctas * units, max_size=num_ctas * units)))
    counts = counts.reshape(num_ctas, units)
    raw = _raw_buffer(layout, counts, seed=int(counts.sum() % 1000))
    kept = np.minimum(counts.astype(np.int64), layout.capacity)
    gathered = _gather_like_the_device(raw, layout, num_ctas, int(kept.max(initial=0)))
    assert np.array_equal(trimmed_from_gathered(gathered, layout, num_ctas, kept), trim(raw, layout))
