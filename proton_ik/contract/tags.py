"""A record's tag and, in layout version 3, each ring slot's form: how the first 32-bit word of
a record or slot says what it is (``contract.layout`` places the words; this says what they
mean). The lowering builds tags with ``make_tag``, ``compact_tag`` and ``payload_tag``; the
dialect's verifiers and the decoder read them back with the ``tag_*``, ``slot_form`` and
``compact_*`` readers, each of which takes an int or a numpy array of words.
"""

from __future__ import annotations

import enum
from typing import Any

# --- record tag: bit 31 = end, bits 30:28 = kind, bit 27 = paired, bits 26:16 = event instance,
# --- bits 15:0 = name id (a scope's, an event's or a mark's row of the kernel's name table) ----
TAG_END_BIT = 31
TAG_KIND_SHIFT = 28
TAG_PAIR_BIT = 27  # on a begin whose end follows it: the entry's second record (v2), the next slot (v3)
TAG_KIND_MASK = 0x7
TAG_INDEX_SHIFT = 16
TAG_INDEX_MASK = 0x7FF  # an event's instance: a runtime index is stored modulo MAX_EVENT_INSTANCES
TAG_SCOPE_MASK = 0xFFFF
MAX_SCOPES = TAG_SCOPE_MASK + 1
MAX_EVENT_INSTANCES = TAG_INDEX_MASK + 1

# --- version 3's slot forms: the top four bits of a slot's first word --------------------------
# A record's tag has them as its end bit and kind (0 to 3, 8 to 11); the two forms below are
# kinds no record has, with the end bit clear.
FORM_SHIFT = 28
FORM_COMPACT = 0x4  # {compact tag: form, scope id, duration; begin clock}: a whole pair
FORM_PAYLOAD = 0x5  # {payload tag: form, value type; value}: the slot after a value mark's record
COMPACT_DURATION_BITS = 18  # cycles: 262,143, about 130 us at 2 GHz
COMPACT_SCOPE_BITS = FORM_SHIFT - COMPACT_DURATION_BITS  # scope ids 0 to 1023
COMPACT_DURATION_LIMIT = 1 << COMPACT_DURATION_BITS  # a pair this long or longer takes two slots
COMPACT_SCOPES = 1 << COMPACT_SCOPE_BITS


class RecordKind(enum.IntEnum):
    SCOPE = 0  # a scope's begin or end (the end bit)
    EVENT = 1  # an event instance's start or end (the end bit), which any unit of the CTA may write
    MARK = 2  # an instant
    VALUE = 3  # an instant with a 32-bit value: one v2 entry, or its slot and a payload slot (v3)


class ValueType(enum.IntEnum):
    """How a value mark's 32 bits read: the v2 entry's ``value_type`` word, or the low bits of
    the v3 payload slot's tag (``payload_tag``)."""

    INT32 = 0
    UINT32 = 1
    FLOAT32 = 2


def make_tag(
    scope_id: int, is_end: bool, kind: RecordKind = RecordKind.SCOPE, paired: bool = False, index: int = 0
) -> int:
    if not 0 <= scope_id < MAX_SCOPES:
        raise ValueError(f"scope id {scope_id} does not fit the {MAX_SCOPES}-entry tag field")
    if not 0 <= index < MAX_EVENT_INSTANCES:
        raise ValueError(f"event index {index} does not fit the {MAX_EVENT_INSTANCES}-instance tag field")
    return (
        (int(is_end) << TAG_END_BIT)
        | (int(kind) << TAG_KIND_SHIFT)
        | (int(paired) << TAG_PAIR_BIT)
        | (index << TAG_INDEX_SHIFT)
        | scope_id
    )


# Reading a tag: each of these takes an int or an array of tags (numpy uint32), as make_tag's
# reverse; the dialect's verifiers and the decoder read tags through them.
def tag_kind(tag: Any) -> Any:
    """The record kind (``RecordKind``'s value)."""
    return (tag >> TAG_KIND_SHIFT) & TAG_KIND_MASK


def tag_is_end(tag: Any) -> Any:
    """1 for a scope's end or an event's end, 0 otherwise."""
    return (tag >> TAG_END_BIT) & 1


def tag_paired(tag: Any) -> Any:
    """1 on the first record of an entry whose second record is its end."""
    return (tag >> TAG_PAIR_BIT) & 1


def tag_index(tag: Any) -> Any:
    """An event record's instance."""
    return (tag >> TAG_INDEX_SHIFT) & TAG_INDEX_MASK


def tag_name_id(tag: Any) -> Any:
    """The scope's, event's or mark's row of the kernel's name table."""
    return tag & TAG_SCOPE_MASK


def tag_without_pair(tag: Any) -> Any:
    """The tag with its pair bit cleared: the record as a single entry would carry it."""
    return tag & (0xFFFFFFFF ^ (1 << TAG_PAIR_BIT))


def slot_form(word: Any) -> Any:
    """A version 3 slot's form, from its first word: ``FORM_COMPACT``, ``FORM_PAYLOAD``, or a
    record's end bit and kind."""
    return (word >> FORM_SHIFT) & 0xF


def compact_tag(scope_id: int) -> int:
    """The first word of a one-slot pair of ``scope_id``, before the writer adds the duration."""
    if not 0 <= scope_id < COMPACT_SCOPES:
        raise ValueError(f"scope id {scope_id} does not fit a one-slot pair's {COMPACT_SCOPES} scope ids")
    return (FORM_COMPACT << FORM_SHIFT) | (scope_id << COMPACT_DURATION_BITS)


def compact_scope(word: Any) -> Any:
    """A one-slot pair's scope id."""
    return (word >> COMPACT_DURATION_BITS) & (COMPACT_SCOPES - 1)


def compact_duration(word: Any) -> Any:
    """A one-slot pair's duration in cycles: its end clock less its begin clock."""
    return word & (COMPACT_DURATION_LIMIT - 1)


def payload_tag(value_type: int) -> int:
    """The first word of a value mark's payload slot."""
    return (FORM_PAYLOAD << FORM_SHIFT) | int(value_type)
