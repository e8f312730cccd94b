"""The part of ``convert-pik-to-pikgpu`` for records beyond plain scopes: events, marks, values
and predicates.

A record of this kind is one single entry, never paired with another: an event's start and end
may be written by different units, and a predicated record may be skipped while its partner is
not. Each becomes (``pikgpu_operands`` shows the ops):

- a predicate: ``pikgpu.register`` of its register and a ``pikgpu.guard`` of the site;
- an event with a constant index, or none, and a mark: ``pikgpu.read_clock`` and
  ``pikgpu.store_record`` of its tag (kind, id, start or end, the index in the tag's index bits);
- an event with an index register: ``pikgpu.store_event`` of the clock and the index;
- a mark with a value: ``pikgpu.store_value`` of the clock, the value register and its type.

In aggregate mode a unit keeps statistics of its scopes only: a predicated scope record keeps its
guard, and the records of events and marks are dropped with a warning.
"""

from __future__ import annotations

import warnings

from xdsl.ir import Operation

from proton_ik.contract.tags import RecordKind, make_tag
from proton_ik.dialect.pik import RecordOp
from proton_ik.dialect.pikgpu import ReadClockOp, StoreRecordOp
from proton_ik.dialect.pikgpu_operands import GuardOp, RegisterOp, StoreEventOp, StoreValueOp


def is_plain_scope(record: RecordOp) -> bool:
    """A scope record with no predicate: what ``convert-pik-to-pikgpu`` lowers itself (and pairs)."""
    return record.pairable


def _site(record: RecordOp) -> int | None:
    return None if record.site is None else record.site.value.data


def guard(record: RecordOp) -> list[Operation]:
    """The ops that make the record's site conditional on its predicate (none without one)."""
    site = _site(record)
    if record.predicate is None:
        return []
    if site is None:
        raise ValueError(f"convert-pik-to-pikgpu: the predicated {record.what} has no site")
    predicate = RegisterOp(record.predicate.data, site)
    return [predicate, GuardOp(predicate.result, site)]


def lower_trace(record: RecordOp) -> list[Operation]:
    """The ``pikgpu`` ops that store one record that is not a plain scope's, in a trace."""
    site = _site(record)
    scope_id = record.assigned_id
    kind = record.record_kind
    clock = ReadClockOp(site)
    lowered: list[Operation] = [*guard(record)]
    if kind is RecordKind.VALUE:
        assert record.value is not None and record.value_type is not None  # the verifier pairs them
        value = RegisterOp(record.value.data, site)
        tag = make_tag(scope_id, False, kind)
        return [
            *lowered,
            clock,
            value,
            StoreValueOp(clock.clock, value.result, tag, record.value_type.data, site),
        ]
    if record.index_reg is not None:
        index = RegisterOp(record.index_reg.data, site)
        tag = make_tag(scope_id, record.is_end, kind)
        return [*lowered, clock, index, StoreEventOp(clock.clock, index.result, tag, site)]
    constant = 0 if record.index is None else record.index.value.data
    return [
        *lowered,
        clock,
        StoreRecordOp(clock.clock, make_tag(scope_id, record.is_end, kind, index=constant), site),
    ]


def lower_aggregate(record: RecordOp, lowered: Operation) -> list[Operation]:
    """Aggregate mode: a scope record's ``lowered`` op behind its guard; nothing for the records
    of events and marks, which have no statistics (with a warning, once per place)."""
    if record.name_kind == "scope":
        return [*guard(record), lowered]
    warnings.warn(
        f"proton_ik: aggregate=on keeps statistics of scopes only; the {record.what} at "
        f"{record.source_location} is not recorded (record it in a trace: aggregate=off)",
        stacklevel=2,
    )
    return []
