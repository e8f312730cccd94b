"""What the PTX of events, marks, values and predicates stores, on the CPU.

A real sm_90 compile of a kernel with every kind of record runs in ``test_ptx_stores``'s
interpreter for every thread of a grid. The instrumentation reads three kinds of the kernel's
own registers, which the test sets per CTA: predicates (true in odd CTAs, false in even ones),
the event's index register and the value register. A false predicate must write nothing and
count nothing: the unit's entries are then exactly its unpredicated records, in order, and the
ring slots after them keep the poison.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import triton
import triton.language as tl

import proton_ik.language as pl
from proton_ik.contract.layout import MAGIC, RECORD_BYTES, SLOT_BYTES, BufferLayout, Granularity
from proton_ik.contract.tags import TAG_INDEX_MASK, RecordKind, ValueType, make_tag, payload_tag
from proton_ik.mode import Mode

sys.path.insert(0, str(Path(__file__).parent))
import test_ptx_stores as interpreter

HANDOFF = pl.event("handoff", instances=4)
GRID = (4, 1, 1)
NUM_WARPS = 2
INDEX_BASE, INDEX_STEP = 5, 700  # the index register of CTA c holds 5 + 700 * c: above 2047 from c = 3
VALUE_BASE = 0xC0DE0000


@triton.jit
def records_kernel(x, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    pl.mark("begin")
    pl.start_event(HANDOFF, index=pid, predicate=pid < n)
    v = tl.load(x + offs, mask=offs < n)
    pl.mark("tile", value=pid * 3, predicate=pid != n)
    pl.end_event(HANDOFF, index=2)
    pl.mark("never", predicate=False)
    with pl.scope("store", predicate=pid > 1):
        tl.store(x + offs, v + 1.0, mask=offs < n)


def _compiled(compile_kernel, mode: Mode):
    kernel = compile_kernel(
        records_kernel,
        {"x": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        {"BLOCK": 256},
        mode=mode,
        num_warps=NUM_WARPS,
    )
    layout = BufferLayout.from_dict(kernel.metadata.proton_ik["layout"])
    ids = {scope["name"]: scope["id"] for scope in kernel.metadata.proton_ik["scopes"]}
    return interpreter.Case(kernel.asm["ptx"], layout, Granularity.WARP, NUM_WARPS, False), ids


@pytest.fixture(scope="module")
def compiled(compile_kernel):
    return _compiled(compile_kernel, Mode())


@pytest.fixture(scope="module")
def compiled_layout_3(compile_kernel):
    return _compiled(compile_kernel, Mode(layout=3))


def kernel_registers(ptx: str) -> dict[str, list[str]]:
    """The kernel's registers that the instrumentation reads, by role, in program order."""
    return {
        "predicate": re.findall(r"setp\.ne\.b32 \t%pik_ev_on, (%\w+), 0;", ptx),
        "index": re.findall(r"shl\.b32 \t%pik_ev_tag, (%\w+), 16;", ptx),
        # a value: in layout 2 the entry's third word, in layout 3 its payload slot's second
        "value": re.findall(
            r"st\.global\.L2::cache_hint\.v4\.b32 \t\[%pik_a\], \{\d+, %pik_c, (%\w+), \d+\}, %pik_pol;", ptx
        )
        + re.findall(r"st\.global\.L2::cache_hint\.v2\.b32 \t\[%pik_a\], \{\d+, (%r\w+)\}", ptx),
    }


def launched(case: interpreter.Case) -> interpreter.Launch:
    """The grid run with the kernel's own registers given by role: each CTA's predicate, event
    index and value."""
    roles = {register: role for role, names in kernel_registers(case.ptx).items() for register in names}
    assert len(roles) == 5, "a register serves two roles: the test cannot set them apart"

    def inputs(cta: int, tid: int) -> dict[str, int]:
        values = {
            "predicate": int(predicate_on(cta)),
            "index": INDEX_BASE + INDEX_STEP * cta,
            "value": VALUE_BASE + cta,
        }
        return {register: values[role] for register, role in roles.items()}

    return interpreter.launch(case, GRID, inputs=inputs)


def predicate_on(cta: int) -> bool:
    return cta % 2 == 1


def expected(ids: dict[str, int], cta: int) -> list[tuple[int, ...]]:
    """Each unit's entries in order: (tag,) for a record, (tag, value, value type) for a value mark."""
    index = (INDEX_BASE + INDEX_STEP * cta) & TAG_INDEX_MASK
    entries: list[tuple[int, ...]] = [(make_tag(ids["begin"], False, RecordKind.MARK),)]
    if predicate_on(cta):
        entries.append((make_tag(ids["handoff"], False, RecordKind.EVENT, index=index),))
        entries.append((make_tag(ids["tile"], False, RecordKind.VALUE), VALUE_BASE + cta, ValueType.INT32))
    entries.append((make_tag(ids["handoff"], True, RecordKind.EVENT, index=2),))
    if predicate_on(cta):
        entries += [(make_tag(ids["store"], False),), (make_tag(ids["store"], True),)]
    return entries


def test_the_ptx_reads_one_register_of_each_role(compiled):
    case, ids = compiled
    registers = kernel_registers(case.ptx)
    # Three runtime predicates (the start, the value mark, the scope's begin and end share one);
    # the constant False emitted nothing.
    assert len(set(registers["predicate"])) == 3 and len(registers["predicate"]) == 4
    assert len(registers["index"]) == 1 and len(registers["value"]) == 1
    assert "never" not in ids


def test_false_predicates_write_nothing_and_count_nothing(compiled):
    case, ids = compiled
    result = launched(case)
    _, unit, slots = interpreter.regions(case, result.memory)
    value_view = slots.view(np.uint32).reshape(*slots.shape, 4)
    for cta in range(GRID[0]):
        want = expected(ids, cta)
        for u in range(case.layout.units):
            header = unit[cta, u]
            assert (int(header["entries"]), int(header["tally"]), int(header["end_magic"])) == (
                len(want),
                len(want),
                MAGIC,
            ), (cta, u)
            clocks = result.threads[cta, u * 32].record_clocks
            assert len(clocks) == len(want)  # a skipped record does not even read the clock
            for i, entry in enumerate(want):
                words = value_view[cta, u, i].tolist()
                assert (words[0], words[1]) == (entry[0], clocks[i]), (cta, u, i)
                if len(entry) == 3:
                    assert tuple(words[2:]) == (entry[1], int(entry[2]))
                else:
                    assert slots[cta, u, i]["second"].tobytes() == bytes([interpreter.POISON]) * RECORD_BYTES
            for empty in range(len(want), case.layout.capacity):
                assert slots[cta, u, empty].tobytes() == bytes([interpreter.POISON]) * 16
    assert result.memory.conflicts == []


def test_capacity_counts_every_record_that_may_be_written(compiled):
    """The bound counts predicated records too (they may be written): 6 entries, 8 slots."""
    case, _ = compiled
    assert case.layout.capacity == 8


def test_in_layout_3_each_record_is_a_slot_and_a_value_two(compiled_layout_3):
    """Layout 3: a record in one 8-byte slot, a value mark's value in the slot after its record
    ({payload tag with the value type, value}); the tally takes three records off a value
    mark's two slots and one off a record's slot."""
    case, ids = compiled_layout_3
    assert case.layout.version == 3
    result = launched(case)
    _, unit, slots = interpreter.regions(case, result.memory)
    words = slots.view(np.uint32).reshape(*slots.shape, 2)
    for cta in range(GRID[0]):
        want = expected(ids, cta)
        values = sum(len(entry) == 3 for entry in want)
        for u in range(case.layout.units):
            header = unit[cta, u]
            assert (int(header["entries"]), int(header["tally"]), int(header["end_magic"])) == (
                len(want) + values,
                len(want) + 2 * values,
                MAGIC,
            ), (cta, u)
            clocks = result.threads[cta, u * 32].record_clocks
            slot = 0
            for i, entry in enumerate(want):
                assert tuple(words[cta, u, slot].tolist()) == (entry[0], clocks[i]), (cta, u, i)
                slot += 1
                if len(entry) == 3:
                    assert tuple(words[cta, u, slot].tolist()) == (payload_tag(entry[2]), entry[1])
                    slot += 1
            for empty in range(slot, case.layout.capacity):
                assert slots[cta, u, empty].tobytes() == bytes([interpreter.POISON]) * SLOT_BYTES
    assert result.memory.conflicts == []
