"""Decode launches' profile buffers: bytes in, numpy arrays out.

Every offset, dtype and constant comes from ``proton_ik.contract.layout``. Nothing here loops over
records, units or launches: the buffers are viewed in place with strided structured arrays, and
records are gathered and their clocks extended with whole-array operations. Buffers of several
launches of one layout (or pieces of a large one) decode together as one. Both layout versions
read (``layout.READ_VERSIONS``) go through one path: version 3's 8-byte slots are first read as
version 2's 16-byte entries (``slots.entries_from_slots``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from proton_ik.contract.buffer_view import BufferView, raw_view
from proton_ik.contract.layout import (
    CTA_HEADER_DTYPE,
    MAGIC,
    UNIT_HEADER_DTYPE,
    BufferLayout,
    records_written,
)
from proton_ik.contract.tags import (
    RecordKind,
    tag_index,
    tag_is_end,
    tag_kind,
    tag_name_id,
    tag_paired,
    tag_without_pair,
)
from proton_ik.viewer.decode.clock_extension import CLOCK_LOW_MASK, extend_clocks
from proton_ik.viewer.decode.problems import describe_problems, problem_counts
from proton_ik.viewer.decode.slots import entries_from_slots

# A unit that never reached its epilogue may hold a count that was never written; a count this
# large is garbage, not a real number of records.
PLAUSIBLE_COUNT = 1 << 31


@dataclass(frozen=True)
class CtaTable:
    """One row per CTA slot of the buffer: slot i belongs to linear CTA id i, or, where the
    kernel samples CTAs, to the i-th sampled CTA (``layout.sampling.cta_of_slot``)."""

    launch: np.ndarray  # int64, which of the buffers decoded together holds it
    slot: np.ndarray  # int64, within its launch
    ran: np.ndarray  # bool: the header carries MAGIC
    valid: np.ndarray  # bool: ran, and the header agrees with the kernel's layout and slot
    cta: np.ndarray  # int64, linear CTA id from the header
    smid: np.ndarray  # int64
    nctaid: np.ndarray  # int64, shape (n, 3)
    cluster: np.ndarray  # int64, linear thread-block cluster id; -1 where not recorded
    cluster_rank: np.ndarray  # int64, the CTA's rank in its cluster; -1 where not recorded
    cluster_ctas: np.ndarray  # int64, CTAs in its cluster (1 without clusters); -1 where not recorded


@dataclass(frozen=True)
class UnitTable:
    """One row per unit of every valid CTA, in launch, CTA and unit order."""

    launch: np.ndarray  # int64, as in CtaTable
    cta: np.ndarray  # int64, linear CTA id
    smid: np.ndarray  # int64
    cluster: np.ndarray  # int64, its CTA's cluster, as in CtaTable
    cluster_rank: np.ndarray  # int64, its CTA's rank in the cluster, as in CtaTable
    unit: np.ndarray  # int64, the unit's id in its CTA (not its segment's: units may be sampled)
    start_clock: np.ndarray  # int64, %clock64 at kernel start
    start_time: np.ndarray  # int64, %globaltimer ns at kernel start
    end_clock: np.ndarray  # int64, meaningful where finished
    end_time: np.ndarray  # int64, meaningful where finished
    entries: np.ndarray  # int64, ring slots written (garbage where not decoded)
    kept_entries: np.ndarray  # int64, slots still in the ring and decoded
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
    paired: np.ndarray  # bool: written with its partner as one pair (one entry, one slot or two)
    value: np.ndarray  # uint32, a value mark's 32 bits (0 for other records)
    value_type: np.ndarray  # int64, a value mark's layout.ValueType (0 for other records)

    def __len__(self) -> int:
        return len(self.unit_row)

    @property
    def instance(self) -> np.ndarray:
        """int64, an event record's instance (its ``index=``; 0 for other records)."""
        return tag_index(self.tag).astype(np.int64)


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

    def on_sms(self, holds: Callable[[np.ndarray], np.ndarray]) -> DecodedLaunches:
        """The CTAs, units and records on the SMs that ``holds`` (SM ids in, a mask out) keeps;
        the problem counts as they were."""
        units = holds(self.units.smid)
        records = units[self.records.unit_row]
        unit_row = (np.cumsum(units) - 1)[self.records.unit_row[records]]
        return DecodedLaunches(
            self.layout,
            _rows(self.ctas, holds(self.ctas.smid)),
            _rows(self.units, units),
            dataclasses.replace(_rows(self.records, records), unit_row=unit_row),
            self.counts,
        )


_Table = TypeVar("_Table", CtaTable, UnitTable, RecordTable)


def _rows(table: _Table, keep: np.ndarray) -> _Table:
    """A table of array columns, rows ``keep``."""
    return type(table)(**{f.name: getattr(table, f.name)[keep] for f in dataclasses.fields(table)})


# The fastest SM clock a unit's %globaltimer span is read against (GHz): generous, since a unit
# only has its start clock mended when its span allows 2**32 cycles at this rate.
MAX_SM_CLOCK_GHZ = 4


def decode_buffer(buffer: np.ndarray, layout: BufferLayout) -> DecodedLaunch:
    """Decode a launch's buffer (``num_ctas * layout.cta_bytes`` uint8) into CTA, unit and record tables."""
    decoded = decode_buffers([buffer], layout)
    return DecodedLaunch(layout, decoded.ctas, decoded.units, decoded.records, decoded.problems[0])


def decode_buffers(
    buffers: Sequence[np.ndarray], layout: BufferLayout, first_ctas: Sequence[int] | None = None
) -> DecodedLaunches:
    """Decode the raw buffers of several launches of one layout at once: many small launches cost
    about what one large one does. A buffer may also be a piece of a launch's buffer, whole CTA
    regions from CTA ``first_ctas[i]`` on (0 by default): a large launch decodes piece by piece."""
    return decode_views([raw_view(buffer, layout) for buffer in buffers], layout, first_ctas)


def decode_views(
    views: Sequence[BufferView], layout: BufferLayout, first_ctas: Sequence[int] | None = None
) -> DecodedLaunches:
    """``decode_buffers`` for buffers seen as views, raw or trimmed alike."""
    ctas, units = decode_headers(views, layout, first_ctas)
    return decode_records(views, layout, ctas, units)


def decode_records(
    views: Sequence[BufferView],
    layout: BufferLayout,
    ctas: CtaTable,
    units: UnitTable,
    on_sms: Callable[[np.ndarray], np.ndarray] | None = None,
) -> DecodedLaunches:
    """The views' records, their headers decoded already (``decode_headers``). ``on_sms``: the
    SMs kept (SM ids in, a mask out): the others' records are never read, and their CTAs and
    units are dropped. The problem counts then take the other SMs' units as having kept no
    records: they say nothing true of the launch (``tables.shares``: its share 0 decodes it
    whole and says what went wrong)."""
    if on_sms is not None:
        units = dataclasses.replace(units, kept_entries=np.where(on_sms(units.smid), units.kept_entries, 0))
    records, units = _decode_records(_slots(views, layout), layout, ctas, units)
    decoded = DecodedLaunches(layout, ctas, units, records, problem_counts(ctas, units, records, len(views)))
    return decoded if on_sms is None else decoded.on_sms(on_sms)


def decode_headers(
    views: Sequence[BufferView], layout: BufferLayout, first_ctas: Sequence[int] | None = None
) -> tuple[CtaTable, UnitTable]:
    """The CTA and unit tables alone, from the headers; ``kept`` and ``overwritten`` are known only
    once the records are read (``decode_views``)."""
    num_ctas = np.array([view.num_ctas for view in views], dtype=np.int64)
    first = np.zeros(len(views), np.int64) if first_ctas is None else np.asarray(first_ctas, np.int64)
    cta_headers = _joined([view.cta_headers for view in views], CTA_HEADER_DTYPE)
    unit_headers = _joined([view.unit_headers.reshape(-1) for view in views], UNIT_HEADER_DTYPE)
    ctas = _decode_ctas(cta_headers, layout, num_ctas, first)
    return ctas, _decode_units(unit_headers.reshape(-1, layout.units), layout, ctas)


def _joined(arrays: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    if len(arrays) == 1:
        return arrays[0]
    if not arrays:
        return np.zeros(0, dtype)
    if dtype.names is None:
        return np.concatenate(arrays)
    # As opaque bytes: numpy would otherwise promote a structured dtype field by field, per array.
    opaque = np.dtype(f"V{dtype.itemsize}")
    return np.concatenate([array.view(opaque) for array in arrays]).view(dtype)


@dataclass(frozen=True)
class _Slots:
    """The ring slots of views decoded together, and each CTA slot's units' slot 0 in them."""

    slots: np.ndarray
    slot0: np.ndarray  # shape (CTA slots, units)


def _slots(views: Sequence[BufferView], layout: BufferLayout) -> _Slots:
    if len(views) == 1:
        return _Slots(views[0].slots, views[0].slot0)
    reach = [view.reach(layout.capacity) for view in views]
    sizes = [hi - lo for lo, hi in reach]
    base = np.cumsum([0, *sizes[:-1]])
    return _Slots(
        _joined([view.slots[lo:hi] for view, (lo, hi) in zip(views, reach, strict=True)], layout.slot_dtype),
        _joined(
            [view.slot0 - lo + b for view, (lo, _), b in zip(views, reach, base.tolist(), strict=True)],
            np.dtype(np.int64),
        ).reshape(-1, layout.units),
    )


def _decode_ctas(
    header: np.ndarray, layout: BufferLayout, num_ctas: np.ndarray, first: np.ndarray
) -> CtaTable:
    total = int(num_ctas.sum())
    launch = np.repeat(np.arange(len(num_ctas), dtype=np.int64), num_ctas)
    slot = np.arange(total, dtype=np.int64) - (np.cumsum(num_ctas) - num_ctas - first)[launch]
    ran = header["magic"] == MAGIC
    valid = (
        ran
        & (header["version"] == layout.version)
        & (header["units"] == layout.units)
        & (header["capacity"] == layout.capacity)
        & (header["cta"] == layout.sampling.cta_of_slot(slot))
    )
    nctaid = np.stack([header["nctaid_x"], header["nctaid_y"], header["nctaid_z"]], axis=1)
    # A cluster of 0 CTAs was not recorded: a file from before the fields, or a target before sm_90.
    recorded = (header["cluster_ctas"] > 0) & (header["cluster_rank"] < header["cluster_ctas"])

    def cluster_field(name: str) -> np.ndarray:
        return np.where(recorded, header[name].astype(np.int64), -1)

    return CtaTable(
        launch=launch,
        slot=slot,
        ran=ran,
        valid=valid,
        cta=header["cta"].astype(np.int64),
        smid=header["smid"].astype(np.int64),
        nctaid=nctaid.astype(np.int64),
        cluster=cluster_field("cluster"),
        cluster_rank=cluster_field("cluster_rank"),
        cluster_ctas=cluster_field("cluster_ctas"),
    )


def _valid(ctas: CtaTable) -> np.ndarray | slice:
    """What picks the valid CTAs' rows: where every CTA is (the common case), a view of all of
    them rather than a copy (of the unit headers, a launch's largest table of them)."""
    return slice(None) if ctas.valid.all() else ctas.valid


def _decode_units(unit_headers: np.ndarray, layout: BufferLayout, ctas: CtaTable) -> UnitTable:
    valid = _valid(ctas)
    headers = unit_headers[valid].reshape(-1)
    valid_ctas = ctas.cta[valid]  # a valid header's CTA id is its slot's (``_decode_ctas``)
    cta = np.repeat(valid_ctas, layout.units)
    launch = np.repeat(ctas.launch[valid], layout.units)
    entries = headers["entries"].astype(np.int64)
    count = records_written(entries, headers["tally"].astype(np.int64))
    finished = headers["end_magic"] == MAGIC
    decoded = finished | ((entries < PLAUSIBLE_COUNT) & (count >= 0))
    kept_entries = np.where(decoded, np.minimum(entries, layout.capacity), 0)
    # Records kept are known once the kept slots are read (a pair holds two): see below.
    return UnitTable(
        launch=launch,
        cta=cta,
        smid=np.repeat(ctas.smid[valid], layout.units),
        cluster=np.repeat(ctas.cluster[valid], layout.units),
        cluster_rank=np.repeat(ctas.cluster_rank[valid], layout.units),
        unit=np.tile(layout.sampling.unit_of_slot(np.arange(layout.units)), len(valid_ctas)),
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
    slots: _Slots, layout: BufferLayout, ctas: CtaTable, units: UnitTable
) -> tuple[RecordTable, UnitTable]:
    slot_unit, words = _kept_slots(slots, layout, ctas, units)
    # From here on one path reads both versions: version 3's slots become version 2's entries.
    entry_unit, words = entries_from_slots(slot_unit, words) if layout.version >= 3 else (slot_unit, words)
    unit_row, tag, clock, from_pair, value, value_type = _records_in_order(entry_unit, words, units)
    kept = np.bincount(unit_row, minlength=len(units)).astype(np.int64)
    start = np.cumsum(kept) - kept
    units = dataclasses.replace(units, start_clock=_whole_start_clocks(units, kept, clock[start[kept > 0]]))
    overwritten = np.where(units.decoded, units.count - kept, 0)
    index = overwritten[unit_row] + np.arange(len(unit_row), dtype=np.int64) - start[unit_row]
    records = RecordTable(
        unit_row=unit_row,
        index=index,
        tag=tag,
        kind=tag_kind(tag).astype(np.int64),
        scope=tag_name_id(tag).astype(np.int64),
        is_end=tag_is_end(tag).astype(bool),
        clock=clock,
        paired=from_pair,
        value=value,
        value_type=value_type.astype(np.int64),
    )
    return records, dataclasses.replace(units, kept=kept, overwritten=overwritten)


def _kept_slots(
    slots: _Slots, layout: BufferLayout, ctas: CtaTable, units: UnitTable
) -> tuple[np.ndarray, np.ndarray]:
    """Each slot still in a ring, in the order written: its unit and its 32-bit words (four in
    version 2: first tag and clock, second tag and clock; two in version 3)."""
    # Slot i of a unit sits at ring position i % capacity; the ring keeps the newest `kept_entries`.
    slot_unit = np.repeat(np.arange(len(units), dtype=np.int64), units.kept_entries)
    first = np.cumsum(units.kept_entries) - units.kept_entries
    written = (units.entries - units.kept_entries - first)[slot_unit] + np.arange(len(slot_unit))
    unit_slot0 = slots.slot0[_valid(ctas)].reshape(-1)  # each decoded unit's slot 0
    words = slots.slots.view(np.uint32).reshape(-1, layout.slot_bytes // 4)
    return slot_unit, words[unit_slot0[slot_unit] + (written & (layout.capacity - 1))]


def _records_in_order(
    entry_unit: np.ndarray, words: np.ndarray, units: UnitTable
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The entries' records, in time order within each unit: unit row, tag, whole clock, from a
    pair, and a value mark's value and value type (0 for other records)."""
    first_tag, first_low, second_tag, second_low = words.T
    paired = tag_paired(first_tag) != 0
    # A value mark's entry holds one record and, in its second half, the value and its type.
    is_value = tag_kind(first_tag) == RecordKind.VALUE

    # Entries were written in time order, each when its last record was taken (a pair's end),
    # so those clocks extend to 64 bits like a plain sequence: backwards from a finished unit's
    # end clock (read after its last record), forwards from an unfinished one's start clock.
    last_low = np.where(paired, second_low, first_low)
    anchor = np.where(units.finished, units.end_clock, units.start_clock)
    last_clock = extend_clocks(last_low, entry_unit, anchor, units.finished)
    # A pair's begin came before its end, by less than 2**32 cycles.
    first_clock = np.where(
        paired, last_clock - ((last_low.astype(np.int64) - first_low) & CLOCK_LOW_MASK), last_clock
    )
    # Records in the order written: each entry's first record, then a pair's second.
    unit_row, tag, clock, from_pair = _interleave(
        paired, (entry_unit, entry_unit), (first_tag, second_tag), (first_clock, last_clock), (paired, paired)
    )
    tag = tag_without_pair(tag).astype(np.uint32)
    if is_value.any():
        none = np.zeros(len(paired), np.uint32)
        value, value_type = _interleave(
            paired, (np.where(is_value, second_tag, 0), none), (np.where(is_value, second_low, 0), none)
        )
    else:
        value = value_type = np.zeros(len(unit_row), np.uint32)
    misordered = (clock[1:] < clock[:-1]) & (unit_row[1:] == unit_row[:-1])
    if misordered.any():
        # Time order within each unit: a pair's begin may precede entries written before it.
        # Stable, so records of one clock stay in the order written.
        order = np.lexsort((clock, unit_row))
        unit_row, tag, clock, from_pair = unit_row[order], tag[order], clock[order], from_pair[order]
        value, value_type = value[order], value_type[order]
    return unit_row, tag, clock, from_pair, value, value_type


def _whole_start_clocks(units: UnitTable, kept: np.ndarray, first_clock: np.ndarray) -> np.ndarray:
    """Start clocks whole again for units that ran 2**32 cycles or more. The kernel rebuilds a
    unit's 64-bit start at its exit from the start's low 32 bits (``contract.layout``), so such a
    unit's start comes out whole wraps late, after its own first record. Where the unit's
    %globaltimer span allows that many cycles at any SM clock up to ``MAX_SM_CLOCK_GHZ``, its
    start goes back by the fewest wraps that put it at or before its first record (the records
    extend from the end clock, which is whole). Elsewhere a first record before the start means
    records more than 2**32 cycles apart, which ``problems.problem_counts`` reports."""
    wrap = CLOCK_LOW_MASK + 1
    start = units.start_clock.copy()
    has = kept > 0
    lead = first_clock - start[has]
    may_wrap = (units.end_time - units.start_time)[has] * MAX_SM_CLOCK_GHZ >= wrap
    late = units.finished[has] & may_wrap & (lead < 0)
    rows = np.flatnonzero(has)[late]
    start[rows] -= -(lead[late] // wrap) * wrap
    return start


def _interleave(paired: np.ndarray, *columns: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """Per column, one row per record: each entry's first value, then its second where paired."""
    if paired.all():
        return [np.stack(pair, axis=1).reshape(-1) for pair in columns]
    if not paired.any():
        return [np.ascontiguousarray(first) for first, _ in columns]
    second_at = np.flatnonzero(paired) + np.arange(1, int(paired.sum()) + 1)
    first_at = np.arange(len(paired)) + np.cumsum(paired) - paired
    out = []
    for first, second in columns:
        column = np.empty(len(paired) + len(second_at), dtype=np.result_type(first, second))
        column[first_at] = first
        column[second_at] = second[paired]
        out.append(column)
    return out
