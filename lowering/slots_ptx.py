"""What each record stores, and where, in either layout version (``contract.layout``): the
lines of ``convert-pikgpu-to-ptx`` for a single record, a scope pair's end, an event's record
and a value mark.

A ``Ring`` says where the unit's slots are (its ring in the buffer, or, for a short kernel's
pairs, its stage in shared memory: ``staging``) and how a slot's address is found. ``COUNT``
counts the slots written; slot ``COUNT`` goes to ring position ``COUNT & mask``, so no store
ever leaves the unit's segment. ``TALLY`` keeps what the header needs to count records exactly:
twice the slots less the records (``layout.records_written``).

Version 3's pair end reads its clock, takes the duration from the begin's clock, and tests it
once: where it fits (``COMPACT_DURATION_LIMIT``) one 8-byte store of ``{compact tag +
duration, begin clock}``; else a branch to the pair's long form, out of line, which writes the
begin's record and the end's in two slots (``PairEnd``). A scope whose id does not fit a
compact tag always takes the two slots, in line, with no test.

As for every record, an end's clock is read first and a begin's last, so that the record's own
arithmetic stays outside what it measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from proton_ik.contract.layout import ENTRY_DTYPE, PAYLOAD_DTYPE, SLOT_DTYPE, VALUE_ENTRY_DTYPE, slot_bytes
from proton_ik.contract.tags import (
    COMPACT_DURATION_LIMIT,
    COMPACT_SCOPES,
    compact_tag,
    payload_tag,
    tag_name_id,
)
from proton_ik.lowering import stores_ptx
from proton_ik.lowering.registers import (
    ADDRESS,
    CLOCK,
    COUNT,
    LONG_PAIR,
    PAIR_WORD,
    RECORD_POLICY,
    RECORDS,
    STAGE,
    STAGE_SLOT,
    TALLY,
    TEMP,
    WRITER,
)

_CLOCK = f"\tmov.u32 \t{CLOCK}, %clock;"


def _add(register: str, amount: int) -> str:
    return f"\tadd.s32 \t{register}, {register}, {amount};"


@dataclass(frozen=True)
class Ring:
    """Where a site's slots go: the unit's ring in the buffer (``mask``: the slot mask operand;
    ``policy``: the stores carry the records' L2 policy, ``stores_ptx``), or its stage in shared
    memory (``staged``), which the code's bound keeps from wrapping."""

    version: int
    mask: str
    policy: bool = True
    staged: bool = False

    def address(self) -> list[str]:
        """The address of slot ``COUNT``: ``STAGE_SLOT`` in the stage, else ``ADDRESS``."""
        size = slot_bytes(self.version)
        if self.staged:
            return [f"\tmad.lo.u32 \t{STAGE_SLOT}, {COUNT}, {size}, {STAGE};"]
        return [
            f"\tand.b32 \t{TEMP}, {COUNT}, {self.mask};",
            f"\tmad.wide.u32 \t{ADDRESS}, {TEMP}, {size}, {RECORDS};",
        ]

    def store(self, dtype: np.dtype, values: dict[str, object]) -> str:
        """The writer lane's vector store of ``values`` into the fields of ``dtype`` they name, at
        the address ``address`` found."""
        offset, shape, operands = stores_ptx.vector(dtype, values)
        base = STAGE_SLOT if self.staged else ADDRESS
        at = f"[{base}+{offset}]" if offset else f"[{base}]"
        if self.staged:
            return f"\t@{WRITER} st.shared.{shape} \t{at}, {operands};"
        if not self.policy:
            return f"\t@{WRITER} st.global.{shape} \t{at}, {operands};"
        return f"\t@{WRITER} st.global.L2::cache_hint.{shape} \t{at}, {operands}, {RECORD_POLICY};"


def single(ring: Ring, tag: object, is_end: bool, tag_lines: Sequence[str] = ()) -> list[str]:
    """A single record of ``tag`` (an immediate, or a register that ``tag_lines`` compute): one
    slot, or one v2 entry."""
    if ring.version >= 3:
        store = ring.store(SLOT_DTYPE, {"tag": tag, "clock": CLOCK})
    else:
        store = ring.store(ENTRY_DTYPE, {"first.tag": tag, "first.clock": CLOCK})
    stores = [store, _add(COUNT, 1), _add(TALLY, 1)]
    work = [*tag_lines, *ring.address()]
    body = [_CLOCK, *work] if is_end else [*work, _CLOCK]
    return [*body, *stores]


def long_label(site: int) -> str:
    return f"$pik_long_{site}"


def join_label(site: int) -> str:
    return f"$pik_join_{site}"


@dataclass(frozen=True)
class PairEnd:
    """A pair end's lines at its site, and, in version 3, its long form's lines, which go out
    of line (after the kernel's body, before the epilogue: ``pikgpu_to_ptx``)."""

    lines: list[str]
    long_form: list[str]


def pair_end(ring: Ring, begin_tag: int, end_tag: int, begin: str, site: int) -> PairEnd:
    """A scope pair's end at PTX line ``site``, whose begin's clock waits in register ``begin``.

    Version 3: the duration, then one test. Where it fits, one slot: ``{compact tag + duration,
    begin clock}``. Where it does not, a branch to the long form, out of line: the begin's record
    and the end's in two slots, each found from the count (so a pair that wraps the ring stays
    in it), the tally of the two records that take two slots, and a branch back. The common
    path is the short one, and pays only for the test and the branch not taken."""
    if ring.version < 3:
        values = {"first.tag": begin_tag, "first.clock": begin, "second.tag": end_tag, "second.clock": CLOCK}
        return PairEnd([_CLOCK, *ring.address(), ring.store(ENTRY_DTYPE, values), _add(COUNT, 1)], [])
    scope = tag_name_id(begin_tag)
    if scope >= COMPACT_SCOPES:
        return PairEnd([_CLOCK, *_two_slots(ring, begin_tag, end_tag, begin)], [])
    return PairEnd(
        [
            _CLOCK,
            f"\tsub.s32 \t{PAIR_WORD}, {CLOCK}, {begin};",
            f"\tsetp.ge.u32 \t{LONG_PAIR}, {PAIR_WORD}, {COMPACT_DURATION_LIMIT};",
            f"\t@{LONG_PAIR} bra \t{long_label(site)};",
            f"\tor.b32 \t{PAIR_WORD}, {PAIR_WORD}, {compact_tag(scope)};",
            *ring.address(),
            ring.store(SLOT_DTYPE, {"tag": PAIR_WORD, "clock": begin}),
            _add(COUNT, 1),
            f"{join_label(site)}:",
        ],
        [
            f"{long_label(site)}:",
            *_two_slots(ring, begin_tag, end_tag, begin),
            f"\tbra \t{join_label(site)};",
        ],
    )


def _two_slots(ring: Ring, begin_tag: int, end_tag: int, begin: str) -> list[str]:
    """The begin's record and the end's in slots ``COUNT`` and ``COUNT + 1``, the count past
    both, and the tally of two slots that hold two records."""
    return [
        *ring.address(),
        ring.store(SLOT_DTYPE, {"tag": begin_tag, "clock": begin}),
        _add(COUNT, 1),
        *ring.address(),
        ring.store(SLOT_DTYPE, {"tag": end_tag, "clock": CLOCK}),
        _add(COUNT, 1),
        _add(TALLY, 2),
    ]


def value_mark(ring: Ring, tag: int, value: str, value_type: int) -> list[str]:
    """A value mark: its record and its 32-bit value (register ``value``) of ``ValueType``
    ``value_type``; one record."""
    if ring.version < 3:
        values = {"tag": tag, "clock": CLOCK, "value": value, "value_type": value_type}
        return [
            *ring.address(),
            _CLOCK,
            ring.store(VALUE_ENTRY_DTYPE, values),
            _add(COUNT, 1),
            _add(TALLY, 1),
        ]
    return [
        *ring.address(),
        _CLOCK,
        ring.store(SLOT_DTYPE, {"tag": tag, "clock": CLOCK}),
        _add(COUNT, 1),
        *ring.address(),
        ring.store(PAYLOAD_DTYPE, {"tag": payload_tag(value_type), "value": value}),
        _add(COUNT, 1),
        _add(TALLY, 3),
    ]
