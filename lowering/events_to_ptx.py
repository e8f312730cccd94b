"""The part of ``convert-pikgpu-to-ptx`` for the ops of ``pikgpu_operands``: event records with
an index register, value marks, and guards.

- ``pikgpu.store_event``: the tag's index bits from the index register (``shl``, ``and``,
  ``or``), then a single record's store by the unit's writer lane (``slots_ptx.single``);
- ``pikgpu.store_value``: the record and its value (``slots_ptx.value_mark``), one record;
- ``pikgpu.guard``: the site's lines behind a test of the predicate register and a branch around
  them, so that where it is 0 nothing is stored and no count moves.

As for every record, an end's clock is read first and a start's last, so that the record's own
arithmetic stays outside what it measures (``slots_ptx``).
"""

from __future__ import annotations

from collections.abc import Iterable

from xdsl.ir import Operation

from proton_ik.contract.tags import TAG_INDEX_MASK, TAG_INDEX_SHIFT
from proton_ik.dialect.pikgpu_operands import GuardOp, RegisterOp, StoreEventOp, StoreValueOp
from proton_ik.lowering import slots_ptx
from proton_ik.lowering.registers import EVENT_ON, EVENT_TAG

PASS_NAME = "convert-pikgpu-to-ptx"


def skip_label(site: int) -> str:
    return f"$pik_skip_{site}"


def _register(value) -> str:
    owner = value.owner
    if not isinstance(owner, RegisterOp):
        raise ValueError(f"{PASS_NAME}: an operand must come from a pikgpu.register, got {owner}")
    return owner.register.data


def store_event(op: StoreEventOp, ring: slots_ptx.Ring) -> list[str]:
    tag = [
        f"\tshl.b32 \t{EVENT_TAG}, {_register(op.index)}, {TAG_INDEX_SHIFT};",
        f"\tand.b32 \t{EVENT_TAG}, {EVENT_TAG}, {TAG_INDEX_MASK << TAG_INDEX_SHIFT};",
        f"\tor.b32 \t{EVENT_TAG}, {EVENT_TAG}, {op.tag.value.data};",
    ]
    return ["\t// pik event record", *slots_ptx.single(ring, EVENT_TAG, op.is_end, tag)]


def store_value(op: StoreValueOp, ring: slots_ptx.Ring) -> list[str]:
    lines = slots_ptx.value_mark(ring, op.tag.value.data, _register(op.value), op.type_code)
    return ["\t// pik value record", *lines]


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


def plan_sites(ops: Iterable[Operation], sites: dict[int, list[str]], ring: slots_ptx.Ring) -> bool:
    """Add the lines of these ops' sites to ``sites`` (site -> PTX lines, as planned for the
    other ops), stored into ``ring``, and guard the guarded ones; True if any op was ours (then
    the kernel declares ``registers.EVENTS``)."""
    ours = False
    guards: list[GuardOp] = []
    for op in ops:
        if isinstance(op, StoreEventOp | StoreValueOp):
            if op.site is None:
                raise ValueError(f"{PASS_NAME}: {op.name} without a site: {op}")
            lower = store_event if isinstance(op, StoreEventOp) else store_value
            sites[op.site.value.data] = lower(op, ring)  # type: ignore[arg-type]
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
