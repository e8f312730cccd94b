"""Decode launches' profile buffers: bytes in, numpy arrays out.

Every offset, dtype and constant comes from ``proton_ik.layout``. Nothing here loops over
records, units or launches: the buffers are viewed in place with strided structured arrays, and
records are gathered and their clocks extended with whole-array operations. Buffers of several
launches of one layout (or pieces of a large one) decode together as one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from proton_ik.layout import (
    CTA_HEADER_BYTES,
    CTA_HEADER_DTYPE,
    ENTRY_DTYPE,
    MAGIC,
    TAG_END_BIT,
    TAG_KIND_MASK,
    TAG_KIND_SHIFT,
    TAG_PAIR_BIT,
    TAG_SCOPE_MASK,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    VERSION,
    BufferLayout,
    records_written,
)

CLOCK_LOW_MASK = (1 << 32) - 1
# A unit that never reached its epilogue may hold a count that was never written; a count this
# large is garbage, not a real number of records.
PLAUSIBLE_COUNT = 1 << 31


@dataclass(frozen=True)
class CtaTable:
    """One row per CTA slot of the buffer (slot i belongs to linear CTA id i)."""

    launch: np.ndarray  # int64, which of the buffers decoded together holds it
    slot: np.ndarray  # int64, within its launch
    ran: np.ndarray  # bool: the header carries MAGIC
    valid: np.ndarray  # bool: ran, and the header agrees with the kernel's layout and slot
    cta: np.ndarray  # int64, linear CTA id from the header
    smid: np.ndarray  # int64
    nctaid: np.ndarray  # int64, shape (n, 3)


@dataclass(frozen=True)
class UnitTable:
    """One row per unit of every valid CTA, in launch, CTA and unit order."""

    launch: np.ndarray  # int64, as in CtaTable
    cta: np.ndarray  # int64
    smid: np.ndarray  # int64
    unit: np.ndarray  # int64
    start_clock: np.ndarray  # int64, %clock64 at kernel start
    start_time: np.ndarray  # int64, %globaltimer ns at kernel start
    end_clock: np.ndarray  # int64, meaningful where finished
    end_time: np.ndarray  # int64, meaningful where finished
    entries: np.ndarray  # int64, ring entries written (garbage where not decoded)
    kept_entries: np.ndarray  # int64, entries still in the ring and decoded
    count: np.ndarray  # int64, records written (garbage where not decoded)
    kept: np.ndarray  # int64, records still in the ring and decoded
    overwritten: np.ndarray  # int64, count - kept where decoded
    finished: np.ndarray  # bool: the unit reached its epilogue
    decoded: np.ndarray  # bool: finished, or its count is plausible

    def __len__(self) -> int:
        return len(self.cta)


@dataclass(frozen=True)
class RecordTable:
    """One row per decoded record, grouped by unit and in time order within it."""

    unit_row: np.ndarray  # int64, row in the UnitTable
    index: np.ndarray  # int64, record number within the unit, counting overwritten ones
    tag: np.ndarray  # uint32
    kind: np.ndarray  # int64, a layout.RecordKind value
    scope: np.ndarray  # int64, scope id
    is_end: np.ndarray  # bool
    clock: np.ndarray  # int64, full %clock64
    paired: np.ndarray  # bool: written with its partner as one pair entry

    def __len__(self) -> int:
        return len(self.unit_row)


@dataclass(frozen=True)
class DecodedLaunch:
    layout: BufferLayout
    ctas: CtaTable
    units: UnitTable
    records: RecordTable
    problems: tuple[str, ...]


@dataclass(frozen=True)
class DecodedLaunches:
    """Buffers of one layout decoded together: one set of tables, each row tagged with its buffer
    (``launch``)."""

    layout: BufferLayout
    ctas: CtaTable
    units: UnitTable
    records: RecordTable
    counts: np.ndarray  # int64, per buffer: the PROBLEM_COUNTS

    @property
    def problems(self) -> list[tuple[str, ...]]:
        """What went wrong, per buffer."""
        return [describe_problems(row, self.layout) for row in self.counts.tolist()]


# What the decoder counts per buffer, to tell what went wrong: CTA slots, then those without a
# header, with a header that disagrees, units unfinished, unfinished without a usable count, and
# units whose records are more than 2**32 cycles apart. Counts of pieces of one launch add up.
PROBLEM_COUNTS = ("ctas", "never_ran", "disagree", "unfinished", "skipped", "gaps")


def decode_buffer(buffer: np.ndarray, layout: BufferLayout) -> DecodedLaunch:
    """Decode a launch's buffer (``num_ctas * layout.cta_bytes`` uint8) into CTA, unit and record tables."""
    decoded = decode_buffers([buffer], layout)
    return DecodedLaunch(layout, decoded.ctas, decoded.units, decoded.records, decoded.problems[0])


def decode_buffers(
    buffers: Sequence[np.ndarray], layout: BufferLayout, first_ctas: Sequence[int] | None = None
) -> DecodedLaunches:
    """Decode the buffers of several launches of one layout at once: many small launches cost
    about what one large one does. A buffer may also be a piece of a launch's buffer, whole CTA
    regions from CTA ``first_ctas[i]`` on (0 by default): a large launch decodes piece by piece."""
    raws = [np.ascontiguousarray(buffer, dtype=np.uint8).reshape(-1) for buffer in buffers]
    for raw in raws:
        if raw.size % layout.cta_bytes:
            raise ValueError(
                f"a profile buffer of {raw.size} bytes is not a whole number of {layout.cta_bytes}-byte "
                "CTA regions: the buffer and the kernel metadata do not belong together"
            )
    raw = raws[0] if len(raws) == 1 else np.concatenate(raws)
    num_ctas = np.array([raw.size // layout.cta_bytes for raw in raws], dtype=np.int64)
    first = np.zeros(len(raws), np.int64) if first_ctas is None else np.asarray(first_ctas, np.int64)
    ctas = _decode_ctas(raw, layout, num_ctas, first)
    units = _decode_units(raw, layout, ctas)
    records, units = _decode_records(raw, layout, ctas, units)
    return DecodedLaunches(layout, ctas, units, records, _problem_counts(ctas, units, records, len(raws)))


def _decode_ctas(raw: np.ndarray, layout: BufferLayout, num_ctas: np.ndarray, first: np.ndarray) -> CtaTable:
    total = int(num_ctas.sum())
    header = _view(raw, (total,), CTA_HEADER_DTYPE, 0, (layout.cta_bytes,))
    launch = np.repeat(np.arange(len(num_ctas), dtype=np.int64), num_ctas)
    slot = np.arange(total, dtype=np.int64) - (np.cumsum(num_ctas) - num_ctas - first)[launch]
    ran = header["magic"] == MAGIC
    valid = (
        ran
        & (header["version"] == VERSION)
        & (header["units"] == layout.units)
        & (header["capacity"] == layout.capacity)
        & (header["cta"] == slot)
    )
    nctaid = np.stack([header["nctaid_x"], header["nctaid_y"], header["nctaid_z"]], axis=1)
    return CtaTable(
        launch=launch,
        slot=slot,
        ran=ran,
        valid=valid,
        cta=header["cta"].astype(np.int64),
        smid=header["smid"].astype(np.int64),
        nctaid=nctaid.astype(np.int64),
    )


def _decode_units(raw: np.ndarray, layout: BufferLayout, ctas: CtaTable) -> UnitTable:
    headers = _view(
        raw,
        (len(ctas.slot), layout.units),
        UNIT_HEADER_DTYPE,
        CTA_HEADER_BYTES,
        (layout.cta_bytes, layout.unit_bytes),
    )[ctas.valid].reshape(-1)
    valid_slots = ctas.slot[ctas.valid]
    cta = np.repeat(valid_slots, layout.units)
    launch = np.repeat(ctas.launch[ctas.valid], layout.units)
    entries = headers["entries"].astype(np.int64)
    count = records_written(entries, headers["singles"].astype(np.int64))
    finished = headers["end_magic"] == MAGIC
    decoded = finished | ((entries < PLAUSIBLE_COUNT) & (count >= 0))
    kept_entries = np.where(decoded, np.minimum(entries, layout.capacity), 0)
    # Records kept are known once the kept entries are read (a pair holds two): see below.
    return UnitTable(
        launch=launch,
        cta=cta,
        smid=np.repeat(ctas.smid[ctas.valid], layout.units),
        unit=np.tile(np.arange(layout.units, dtype=np.int64), len(valid_slots)),
        start_clock=headers["start_clock"].astype(np.int64),
        start_time=headers["start_time"].astype(np.int64),
        end_clock=headers["end_clock"].astype(np.int64),
        end_time=headers["end_time"].astype(np.int64),
        entries=entries,
        kept_entries=kept_entries,
        count=count,
        kept=kept_entries,
        overwritten=np.zeros_like(count),
        finished=finished,
        decoded=decoded,
    )


def _decode_records(
    raw: np.ndarray, layout: BufferLayout, ctas: CtaTable, units: UnitTable
) -> tuple[RecordTable, UnitTable]:
    slots = _view(
        raw,
        (len(ctas.slot), layout.units, layout.capacity),
        ENTRY_DTYPE,
        CTA_HEADER_BYTES + UNIT_HEADER_BYTES,
        (layout.cta_bytes, layout.unit_bytes, ENTRY_DTYPE.itemsize),
    )
    # Entry i of a unit sits in slot i % capacity; the ring keeps the newest `kept_entries`.
    entry_unit = np.repeat(np.arange(len(units), dtype=np.int64), units.kept_entries)
    first = np.cumsum(units.kept_entries) - units.kept_entries
    entry_index = (
        (units.entries - units.kept_entries)[entry_unit] + np.arange(len(entry_unit)) - first[entry_unit]
    )
    cta_row = np.repeat(np.flatnonzero(ctas.valid), layout.units)  # each unit's CTA slot in the buffer
    picked = slots[cta_row[entry_unit], units.unit[entry_unit], entry_index & (layout.capacity - 1)]
    paired = ((picked["first"]["tag"] >> TAG_PAIR_BIT) & 1).astype(bool)

    # Entries were written in time order, each when its last record was taken (a pair's end),
    # so those clocks extend to 64 bits like a plain sequence: backwards from a finished unit's
    # end clock (read after its last record), forwards from an unfinished one's start clock.
    last_low = np.where(paired, picked["second"]["clock"], picked["first"]["clock"])
    anchor = np.where(units.finished, units.end_clock, units.start_clock)
    last_clock = extend_clocks(last_low, entry_unit, anchor, units.finished)
    # A pair's begin came before its end, by less than 2**32 cycles.
    begin_clock = last_clock - ((last_low - picked["first"]["clock"].astype(np.int64)) & CLOCK_LOW_MASK)

    first_clock = np.where(paired, begin_clock, last_clock)
    unit_row = np.concatenate([entry_unit, entry_unit[paired]])
    tag = np.concatenate([picked["first"]["tag"], picked["second"]["tag"][paired]]) & ~np.uint32(
        1 << TAG_PAIR_BIT
    )
    clock = np.concatenate([first_clock, last_clock[paired]])
    from_pair = np.concatenate([paired, np.ones(int(paired.sum()), dtype=bool)])
    if paired.any():
        # Time order within each unit: a pair's begin may precede entries written before it.
        written = np.concatenate([2 * np.arange(len(entry_unit)), 2 * np.flatnonzero(paired) + 1])
        order = np.lexsort((written, clock, unit_row))
        unit_row, tag, clock, from_pair = unit_row[order], tag[order], clock[order], from_pair[order]

    kept = np.bincount(unit_row, minlength=len(units)).astype(np.int64)
    overwritten = np.where(units.decoded, units.count - kept, 0)
    start = np.cumsum(kept) - kept
    index = overwritten[unit_row] + np.arange(len(unit_row), dtype=np.int64) - start[unit_row]
    records = RecordTable(
        unit_row=unit_row,
        index=index,
        tag=tag,
        kind=((tag >> TAG_KIND_SHIFT) & TAG_KIND_MASK).astype(np.int64),
        scope=(tag & TAG_SCOPE_MASK).astype(np.int64),
        is_end=((tag >> TAG_END_BIT) & 1).astype(bool),
        clock=clock,
        paired=from_pair,
    )
    return records, dataclasses.replace(units, kept=kept, overwritten=overwritten)


def _view(
    raw: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, offset: int, strides: tuple[int, ...]
) -> np.ndarray:
    """The buffer's bytes seen in place as a strided array of ``dtype`` (no copy)."""
    if raw.size == 0:
        return np.zeros(shape, dtype)
    return np.ndarray(shape, dtype, raw, offset, strides)


def extend_clocks(low: np.ndarray, group: np.ndarray, anchor: np.ndarray, from_end: np.ndarray) -> np.ndarray:
    """Full 64-bit clocks from their low 32 bits.

    ``low`` holds each group's values in the order they were read, groups contiguous; ``group``
    indexes ``anchor`` (a full clock per group) and ``from_end``. Going backwards from an anchor
    read after the last value, each value is the latest clock not after its successor with those
    low bits; going forwards from an anchor read before the first, the earliest not before its
    predecessor. Exact while consecutive reads are less than 2**32 cycles apart.
    """
    low = low.astype(np.int64)
    n = len(low)
    if n == 0:
        return low
    first = np.flatnonzero(np.diff(group, prepend=-1))  # each group's first value
    last = np.append(first[1:], n) - 1
    # Each value's distance from its group's first value: the running sum of the forward steps.
    step = (low - np.roll(low, 1)) & CLOCK_LOW_MASK
    step[first] = 0
    walk = np.cumsum(step)
    walk -= np.repeat(walk[first], np.diff(np.append(first, n)))
    # The first value in full, from the anchor: forwards to it, or backwards from the last one.
    owner = group[first]
    anchor_low = anchor[owner] & CLOCK_LOW_MASK
    forwards = anchor[owner] + ((low[first] - anchor_low) & CLOCK_LOW_MASK)
    backwards = anchor[owner] - ((anchor_low - low[last]) & CLOCK_LOW_MASK) - walk[last]
    start = np.where(from_end[owner], backwards, forwards)
    return np.repeat(start, np.diff(np.append(first, n))) + walk


def _problem_counts(ctas: CtaTable, units: UnitTable, records: RecordTable, buffers: int) -> np.ndarray:
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
            f"{VERSION}, {layout.units} units of {layout.capacity} entries, CTA id = slot); skipped"
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
