"""``lanes=on`` (``lowering.lane_staging``) on the CPU: what the warp's lanes store, and where.

``test_ptx_stores``'s interpreter runs the instrumentation of a real sm_90 compile for every
thread of a grid, each thread with its own clock. A record's clock is read by the lane that
takes it, so each entry must hold, in its first half, what lane ``2 * i % 32`` of the unit's warp
read at the entry's begin site, and in its second half what the next lane read at its end site;
the tags must be the pair's, the slots the ring's (``i & (capacity - 1)``, the newest kept), the
counts in the unit header exact, and no byte written outside the unit's entries and headers or
by two threads.
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
from proton_ik.contract.layout import ENTRY_BYTES, BufferLayout, Granularity, make_tag
from proton_ik.mode import Mode

sys.path.insert(0, str(Path(__file__).parent))
import test_ptx_stores as interpreter


@triton.jit
def steps_kernel(x, out, n, BLOCK: tl.constexpr, STEPS: tl.constexpr, NESTED: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(x + offs, mask=mask)
    for _ in tl.static_range(STEPS):
        with pl.scope("step"):
            a = a * 3.0 + 1.0
    if NESTED:
        with pl.scope("outer"):
            with pl.scope("inner"):
                a = a + 2.0
            a = a * 0.5
    tl.store(out + offs, a, mask=mask)


SIGNATURE = {
    "x": "*fp32",
    "out": "*fp32",
    "n": "i32",
    "BLOCK": "constexpr",
    "STEPS": "constexpr",
    "NESTED": "constexpr",
}
STEP, OUTER, INNER = 0, 1, 2  # scope ids, numbered as first entered
# Mode, STEPS, NESTED: one tag for all pairs or several, a bound the ring holds or a ring that
# wraps (22 entries in 16 slots), one group store or none.
CASES = {
    "one-tag-bound": (Mode(lanes=True), 20, False),
    "tags-nested-bound": (Mode(lanes=True), 20, True),
    "tags-nested-ring": (Mode(lanes=True, capacity=16), 20, True),
    "few-entries": (Mode(lanes=True, stage=False, capacity=16), 3, False),  # else staged in shared memory
}
_CLOCK_READ = re.compile(r"^\t(?:@%pik_lp )?mov\.u32 \t%pik_(?:lc|c|b\d+), %clock;$")


def records(steps: int, nested: bool) -> list[tuple[int, bool]]:
    """The kernel's records in program order: (scope id, is_end)."""
    out = [(STEP, end) for _ in range(steps) for end in (False, True)]
    if nested:
        out += [(OUTER, False), (INNER, False), (INNER, True), (OUTER, True)]
    return out


def entries_of(recs: list[tuple[int, bool]]) -> list[tuple[int, int]]:
    """(begin record, end record) of each pair, in the order the ends come: nested scopes close
    innermost first."""
    open_begins: list[int] = []
    pairs = []
    for index, (_, is_end) in enumerate(recs):
        if is_end:
            pairs.append((open_begins.pop(), index))
        else:
            open_begins.append(index)
    return pairs


@pytest.fixture(scope="module", params=list(CASES))
def compiled(request, compile_kernel):
    mode, steps, nested = CASES[request.param]
    kernel = compile_kernel(
        steps_kernel,
        SIGNATURE,
        {"BLOCK": 256, "STEPS": steps, "NESTED": nested},
        mode=mode,
        num_warps=2,
    )
    layout = BufferLayout.from_dict(kernel.metadata.proton_ik["layout"])
    case = interpreter.Case(kernel.asm["ptx"], layout, Granularity.WARP, 2, paired=True)
    return case, records(steps, nested)


def test_the_lanes_hold_the_records_and_store_them_to_their_slots(compiled):
    case, recs = compiled
    ptx, layout = case.ptx, case.layout
    assert "%pik_lc" in ptx and "st.global.v4.b32 \t[%pik_a]" not in ptx
    # One clock read at each record's site, in program order (the prologue's start read apart).
    clock_lines = [n for n, line in enumerate(ptx.splitlines(), 1) if _CLOCK_READ.match(line)]
    assert len(clock_lines) == len(recs)
    grid = (2, 1, 1)
    result = interpreter.launch(case, grid)
    _, unit, slots = interpreter.regions(case, result.memory)
    pairs = entries_of(recs)
    for linear in range(2):
        for u in range(layout.units):
            header = unit[linear, u]
            assert (int(header["entries"]), int(header["singles"])) == (len(pairs), 0)
            newest = range(max(0, len(pairs) - layout.capacity), len(pairs))
            for i in newest:
                begin, end = pairs[i]
                scope = recs[begin][0]
                took_begin = result.threads[linear, u * 32 + 2 * i % 32]
                took_end = result.threads[linear, u * 32 + (2 * i + 1) % 32]
                slot = slots[linear, u, i & (layout.capacity - 1)]
                assert (
                    int(slot["first"]["tag"]),
                    int(slot["first"]["clock"]),
                    int(slot["second"]["tag"]),
                    int(slot["second"]["clock"]),
                ) == (
                    make_tag(scope, False, paired=True),
                    took_begin.clock_at[clock_lines[begin]],
                    make_tag(scope, True),
                    took_end.clock_at[clock_lines[end]],
                ), (linear, u, i)
            used = {i & (layout.capacity - 1) for i in newest}
            for empty in sorted(set(range(layout.capacity)) - used):
                assert slots[linear, u, empty].tobytes() == bytes([interpreter.POISON]) * ENTRY_BYTES
    assert result.memory.conflicts == []


def test_only_the_units_own_warp_writes_its_entries(compiled):
    case, _ = compiled
    layout, memory = case.layout, interpreter.launch(case, (3, 1, 1)).memory
    written = memory.writer >= 0
    offsets = np.arange(len(memory.data))
    within = offsets % layout.cta_bytes
    entries_start = layout.unit_offset(0)
    unit_of_byte = (within - entries_start) // layout.unit_bytes
    in_segment = (within >= entries_start) & (unit_of_byte < layout.units)
    warp_of_writer = memory.writer % case.threads // 32
    assert (memory.writer[written] // case.threads == offsets[written] // layout.cta_bytes).all()
    assert (warp_of_writer[written & in_segment] == unit_of_byte[written & in_segment]).all()
    assert memory.conflicts == []


@pytest.mark.parametrize(
    "mode",
    [
        Mode(lanes=True, pairs=False, capacity=32),  # single records: a begin's store is in its scope
        Mode(lanes=True, granularity=Granularity.WARPGROUP, capacity=32),  # one writer per 4 warps
        Mode(lanes=True, capacity=8),  # a ring of 8 cannot take a group of 16 entries
    ],
    ids=["singles", "warpgroup", "small-ring"],
)
def test_lanes_apply_only_where_they_keep_the_bytes(compile_kernel, mode):
    kernel = compile_kernel(
        steps_kernel, SIGNATURE, {"BLOCK": 256, "STEPS": 20, "NESTED": False}, mode=mode, num_warps=4
    )
    assert "%pik_lc" not in kernel.asm["ptx"]
