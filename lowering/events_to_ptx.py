"""The part of ``convert-pikgpu-to-ptx`` for the ops of ``pikgpu_operands``: event records with
an index register, value marks, and guards.

- ``pikgpu.store_event``: the tag's index bits from the index register (``shl``, ``and``,
  ``or``), then one 8-byte store by the unit's writer lane, as for a single record;
- ``pikgpu.store_value``: one 16-byte store of ``{tag, clock, value, value type}``
  (``layout.VALUE_ENTRY_DTYPE``), counted as a single record;
- ``pikgpu.guard``: the site's lines behind a test of the predicate register and a branch around
  them, so that where it is 0 nothing is stored and no count moves.

As for every record, an end's clock is read first and a start's last, so that the record's own
arithmetic stays outside what it measures. Registers and offsets are as in ``pikgpu_to_ptx``:
``COUNT`` and ``SINGLES`` count, ``ADDRESS`` is the entry's address, ``WRITER`` the writer
(``registers``).
"""

from __future__ import annotations

from collections.abc import Iterable

from xdsl.ir import Operation

from proton_ik.contract.layout import (
    ENTRY_DTYPE,
    TAG_INDEX_MASK,
    TAG_INDEX_SHIFT,
    VALUE_ENTRY_DTYPE,
)
from proton_ik.dialect.pikgpu_operands import GuardOp, RegisterOp, StoreEventOp, StoreValueOp
from proton_ik.lowering import frame_ptx, stores_ptx
from proton_ik.lowering.registers import CLOCK, COUNT, EVENT_ON, EVENT_TAG, SINGLES

PASS_NAME = "convert-pikgpu-to-ptx"


def skip_label(site: int) -> str:
    return f"$pik_skip_{site}"


def _register(value) -> str:
    owner = value.owner
    if not isinstance(owner, RegisterOp):
        raise ValueError(f"{PASS_NAME}: an operand must come from a pikgpu.register, got {owner}")
    return owner.register.data


_CLOCK = f"\tmov.u32 \t{CLOCK}, %clock;"
_COUNT_SINGLE = [f"\tadd.s32 \t{COUNT}, {COUNT}, 1;", f"\tadd.s32 \t{SINGLES}, {SINGLES}, 1;"]


def store_event(op: StoreEventOp, mask: str, policy: bool) -> list[str]:
    tag = [
        f"\tshl.b32 \t{EVENT_TAG}, {_register(op.index)}, {TAG_INDEX_SHIFT};",
        f"\tand.b32 \t{EVENT_TAG}, {EVENT_TAG}, {TAG_INDEX_MASK << TAG_INDEX_SHIFT};",
        f"\tor.b32 \t{EVENT_TAG}, {EVENT_TAG}, {op.tag.value.data};",
    ]
    work = tag + frame_ptx.slot(mask)
    body = [_CLOCK, *work] if op.is_end else [*work, _CLOCK]
    store = stores_ptx.entry_store(ENTRY_DTYPE, {"first.tag": EVENT_TAG, "first.clock": CLOCK}, policy)
    return ["\t// pik event record", *body, store, *_COUNT_SINGLE]


def store_value(op: StoreValueOp, mask: str, policy: bool) -> list[str]:
    values = {
        "tag": op.tag.value.data,
        "clock": CLOCK,
        "value": _register(op.value),
        "value_type": op.type_code,
    }
    return [
        "\t// pik value record",
        *frame_ptx.slot(mask),
        _CLOCK,
        stores_ptx.entry_store(VALUE_ENTRY_DTYPE, values, policy),
        *_COUNT_SINGLE,
    ]


def guarded(lines: list[str], predicate: str, site: int) -> list[str]:
    """``lines`` run only where ``predicate`` (a 32-bit register) is not 0."""
    return [
        "\t// pik guard: nothing is recorded here where the predicate is 0",
        f"\tsetp.ne.b32 \t{EVENT_ON}, {predicate}, 0;",
        f"\t@!{EVENT_ON} bra \t{skip_label(site)};",
        *lines,
        f"{skip_label(site)}:",
    ]


def is_entry(op: Operation) -> bool:
    """Whether ``op`` stores an entry: an event's record or a value mark."""
    return isinstance(op, StoreEventOp | StoreValueOp)


def plan_sites(ops: Iterable[Operation], sites: dict[int, list[str]], mask: str, policy: bool = True) -> bool:
    """Add the lines of these ops' sites to ``sites`` (site -> PTX lines, as planned for the
    other ops), and guard the guarded ones; True if any op was ours (then the kernel declares
    ``registers.EVENTS``). ``policy``: the stores carry the records' L2 policy (``stores_ptx``)."""
    ours = False
    guards: list[GuardOp] = []
    for op in ops:
        if isinstance(op, StoreEventOp | StoreValueOp):
            if op.site is None:
                raise ValueError(f"{PASS_NAME}: {op.name} without a site: {op}")
            lower = store_event if isinstance(op, StoreEventOp) else store_value
            sites[op.site.value.data] = lower(op, mask, policy)  # type: ignore[arg-type]
            ours = True
        elif isinstance(op, GuardOp):
            guards.append(op)
            ours = True
    for op in guards:
        site = op.site.value.data
        if site not in sites:
            raise ValueError(f"{PASS_NAME}: pikgpu.guard of site {site}, where nothing is recorded")
        sites[site] = guarded(sites[site], _register(op.predicate), site)
    return ours
