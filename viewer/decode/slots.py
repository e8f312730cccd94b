"""Layout version 3's ring slots read as version 2's entries: arrays in, arrays out.

A version 3 slot is 8 bytes, and the form of its first word (``contract.tags.slot_form``) says
what it holds: a record, a one-slot pair, the begin of a long pair (the next slot holds its end),
a value mark's record (the next slot holds its payload) or a payload (``contract.layout``).
``entries_from_slots`` turns each unit's kept slots into the four-word entries of version 2, one
per record or pair, so that one code path orders both versions' records and makes their clocks
whole (``buffers._records_in_order``).
"""

from __future__ import annotations

import numpy as np

from proton_ik.contract.tags import (
    FORM_COMPACT,
    FORM_PAYLOAD,
    FORM_SHIFT,
    RecordKind,
    compact_duration,
    compact_scope,
    make_tag,
    slot_form,
    tag_is_end,
    tag_kind,
    tag_paired,
    tag_without_pair,
)

# A one-slot pair's records: these tags with its scope id in their low bits (the name id).
_COMPACT_BEGIN = np.uint32(make_tag(0, False, paired=True))
_COMPACT_END = np.uint32(make_tag(0, True))
_VALUE_TYPE_MASK = np.uint32((1 << FORM_SHIFT) - 1)  # a payload tag's bits below its form


def entries_from_slots(slot_unit: np.ndarray, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Version 2 entries from version 3 slots. ``slot_unit``: each kept slot's unit row, units one
    after another and each unit's slots in the order written; ``words``: their two uint32 words,
    shape (slots, 2). Returns each entry's unit row and its four words, shape (entries, 4):

    - a record: ``{tag, clock, 0, 0}``;
    - a one-slot pair: ``{begin tag with the pair bit, begin clock, end tag, end clock}``;
    - a long pair's begin and the next slot, its end: one pair entry of the two records;
    - a value mark's record and the next slot, its payload: ``{tag, clock, value, value type}``.

    A payload that no value record precedes (the ring overwrote the record) holds no record and is
    dropped. A long pair whose begin the ring overwrote leaves its end as a record of its own;
    a begin with no end after it (never written so) is read as a record of its own too."""
    tag, clock = words[:, 0], words[:, 1]
    form = slot_form(tag)
    is_compact = form == FORM_COMPACT
    is_payload = form == FORM_PAYLOAD
    is_record = ~is_compact & ~is_payload
    is_end = tag_is_end(tag) != 0
    long_begin = is_record & ~is_end & (tag_paired(tag) != 0)
    is_value = is_record & ~is_end & ~long_begin & (tag_kind(tag) == RecordKind.VALUE)

    next_tag, next_clock = _shifted(tag), _shifted(clock)
    next_in_unit = np.zeros(len(slot_unit), dtype=bool)
    next_in_unit[:-1] = slot_unit[1:] == slot_unit[:-1]
    # A long begin takes its end along, a value record its payload. Neither an end nor a payload
    # takes a slot along itself, so no slot is both taken and taking.
    takes_next = next_in_unit & (
        (long_begin & _shifted(is_record & is_end)) | (is_value & _shifted(is_payload))
    )
    taken = np.zeros_like(takes_next)
    taken[1:] = takes_next[:-1]

    zero = np.uint32(0)
    long_pair = long_begin & takes_next
    value = is_value & takes_next
    scope = compact_scope(tag)
    first_tag = np.where(long_begin & ~takes_next, tag_without_pair(tag), tag)
    first_tag = np.where(is_compact, _COMPACT_BEGIN | scope, first_tag)
    second_tag = np.where(long_pair, next_tag, np.where(value, next_clock, zero))
    second_tag = np.where(is_compact, _COMPACT_END | scope, second_tag)
    second_clock = np.where(long_pair, next_clock, np.where(value, next_tag & _VALUE_TYPE_MASK, zero))
    second_clock = np.where(is_compact, clock + compact_duration(tag), second_clock)  # mod 2**32

    keep = ~taken & ~is_payload
    entries = np.stack([first_tag, clock, second_tag, second_clock], axis=1).astype(np.uint32)
    return slot_unit[keep], entries[keep]


def _shifted(column: np.ndarray) -> np.ndarray:
    """``column`` one row up: row i holds row i + 1's value, the last row zero (or False)."""
    out = np.zeros_like(column)
    out[:-1] = column[1:]
    return out
