"""What went wrong in decoded buffers: counted per buffer as they decode together (the counts of
pieces of one launch add up), and told in words per launch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from proton_ik.contract.layout import BufferLayout
from proton_ik.viewer.decode.clock_extension import CLOCK_LOW_MASK

if TYPE_CHECKING:
    from proton_ik.viewer.decode.buffers import CtaTable, RecordTable, UnitTable

# What the decoder counts per buffer, to tell what went wrong: CTA slots, then those without a
# header, with a header that disagrees, units unfinished, unfinished without a usable count, and
# units whose records are more than 2**32 cycles apart.
PROBLEM_COUNTS = ("ctas", "never_ran", "disagree", "unfinished", "skipped", "gaps")


def problem_counts(ctas: CtaTable, units: UnitTable, records: RecordTable, buffers: int) -> np.ndarray:
    """The PROBLEM_COUNTS of each buffer."""

    def per_buffer(rows: np.ndarray, flags: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(rows if flags is None else rows[flags], minlength=buffers)

    # Rebuilt backwards, a gap of 2**32 cycles or more shows up as a first record implausibly
    # far (2**32 or more) after the unit's start.
    first = np.cumsum(units.kept) - units.kept
    has_records = units.finished & (units.kept > 0)
    lead = records.clock[first[has_records]] - units.start_clock[has_records]
    gapped = np.zeros(len(units), dtype=bool)
    gapped[has_records] = (lead < 0) | (lead > CLOCK_LOW_MASK)
    return np.stack(
        [
            per_buffer(ctas.launch),
            per_buffer(ctas.launch, ~ctas.ran),
            per_buffer(ctas.launch, ctas.ran & ~ctas.valid),
            per_buffer(units.launch, ~units.finished),
            per_buffer(units.launch, ~units.decoded),
            per_buffer(units.launch, gapped),
        ],
        axis=1,
    ).astype(np.int64)


def describe_problems(counts: Sequence[int], layout: BufferLayout) -> tuple[str, ...]:
    """What went wrong in a launch, from its PROBLEM_COUNTS."""
    ctas, never_ran, disagree, unfinished, skipped, gaps = counts
    found = []
    if never_ran:
        found.append(f"{never_ran} of {ctas} CTAs have no header (they never ran, or did not write it)")
    if disagree:
        found.append(
            f"{disagree} CTAs have a header that disagrees with the kernel metadata (layout version "
            f"{layout.version}, {layout.units} units of {layout.capacity} slots, the CTA id its slot belongs to); skipped"
        )
    if unfinished:
        found.append(f"{unfinished} units did not reach their epilogue")
    if skipped:
        found.append(f"{skipped} unfinished units have no usable record count; their records were skipped")
    if gaps:
        found.append(
            f"{gaps} units have records more than 2**32 cycles apart; their earlier records' clocks "
            "are off by multiples of 2**32"
        )
    return tuple(found)
