"""Sampling (``ctas=``, ``warps=``) on the CPU: real sm_90 compiles run in ``test_ptx_stores``'s
PTX interpreter for every thread of a grid, against the same kernel compiled without sampling.

What must hold: an unsampled CTA or unit stores nothing; a sampled one stores exactly the bytes
it stores without sampling (its readings are the same: every thread reads its clocks as often),
only at its slot: CTA region ``s`` for the ``s``-th sampled CTA, unit segment ``j`` for the
``j``-th sampled unit; nothing is written past the sampled CTAs' regions; and the viewer decodes
those regions into the sampled CTAs' and units' records, with their own CTA and unit ids.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from xdsl.utils.exceptions import VerifyException

from proton_ik.contract.layout import CTA_HEADER_BYTES, CTA_HEADER_DTYPE, Granularity, field_offset
from proton_ik.contract.sampling import Sampling
from proton_ik.dialect import parse_module
from proton_ik.dialect.pikgpu import SegmentSetupOp
from proton_ik.mode import Mode
from proton_ik.viewer.decode import decode_buffer

sys.path.insert(0, str(Path(__file__).parent))
import test_ptx_stores as interpreter

GRID = (2, 3, 2)  # 12 CTAs, x, y and z all above 1
CTAS = int(np.prod(GRID))
THREADS_PER_WARP = 32

# name: (sampled mode, the same mode unsampled, warps); CTA 20 of the list is past the grid.
CASES = {
    "cta-stride": (Mode(ctas=5), Mode(), 4),
    "cta-list": (Mode(ctas=(1, 4, 11, 20)), Mode(), 4),
    "one-cta": (Mode(ctas=(7,)), Mode(), 4),
    "warps": (Mode(warps=(1, 3)), Mode(), 4),
    "warpgroup": (
        Mode(granularity=Granularity.WARPGROUP, capacity=4, warps=(4,)),
        Mode(granularity=Granularity.WARPGROUP, capacity=4),
        8,
    ),
    "warp_4": (
        Mode(granularity=Granularity.WARP_4, capacity=4, warps=(4,)),
        Mode(granularity=Granularity.WARP_4, capacity=4),
        8,
    ),
    "both-singles-ring": (
        Mode(pairs=False, capacity=2, ctas=(0, 5, 6), warps=(0, 2)),
        Mode(pairs=False, capacity=2),
        4,
    ),
    "cta-granularity": (
        Mode(granularity=Granularity.CTA, capacity=8, ctas=4),
        Mode(granularity=Granularity.CTA, capacity=8),
        4,
    ),
    # layout 3's 8-byte slots (what layout=auto gives a loop of no tensor-core instruction)
    "layout-3-both": (Mode(layout=3, ctas=(0, 5, 6), warps=(0, 2)), Mode(layout=3), 4),
    "layout-3-singles-warpgroup": (
        Mode(layout=3, pairs=False, granularity=Granularity.WARPGROUP, capacity=2, warps=(4,)),
        Mode(layout=3, pairs=False, granularity=Granularity.WARPGROUP, capacity=2),
        8,
    ),
}


def sampled_ctas(mode: Mode) -> list[int]:
    ctas = mode.ctas
    return [c for c in range(CTAS) if (c % ctas == 0 if isinstance(ctas, int) else c in ctas)]


def sampled_units(mode: Mode, num_warps: int) -> list[int]:
    per_unit = mode.granularity.warps_per_unit(num_warps)
    units = num_warps // per_unit
    return [w // per_unit for w in mode.warps] if mode.warps else list(range(units))


@pytest.fixture(scope="module", params=list(CASES))
def pair(request, compile_kernel):
    """(case name, sampled compile and launch, unsampled compile and launch)."""
    sampled_mode, full_mode, warps = CASES[request.param]
    runs = []
    for mode in (sampled_mode, full_mode):
        case = interpreter.compile_case(compile_kernel, mode, warps)
        runs.append((mode, case, interpreter.launch(case, GRID)))
    return request.param, runs[0], runs[1]


def test_the_layout_holds_only_the_sampled_units(pair):
    _, (mode, case, _), (_, full, _) = pair
    units = sampled_units(mode, case.num_warps)
    assert case.layout.units == len(units)
    assert case.layout.unit_bytes == full.layout.unit_bytes
    assert case.layout.sampling.unit_of_slot(np.arange(len(units))).tolist() == units
    assert case.layout.sampling.cta_slots(CTAS) == len(sampled_ctas(mode))


def test_unsampled_ctas_and_units_store_nothing(pair):
    _, (mode, case, result), _ = pair
    memory = result.memory
    written = memory.writer >= 0
    writer_cta, writer_tid = np.divmod(memory.writer[written], case.threads)
    per_unit = case.threads_per_unit
    assert set(writer_cta.tolist()) == set(sampled_ctas(mode))
    writers = {(tid // per_unit, tid % per_unit) for tid in writer_tid.tolist()}
    assert {unit for unit, _ in writers} <= set(sampled_units(mode, case.num_warps)) | {0}
    assert {lane for _, lane in writers} == {0}  # each unit's writer lane, or thread 0
    held = len(sampled_ctas(mode)) * case.layout.cta_bytes
    assert not written[held:].any(), "a store past the sampled CTAs' regions"
    assert memory.conflicts == []


def test_sampled_units_store_what_they_store_without_sampling(pair):
    """Byte for byte, at their slots; the CTA header differs only in its unit count."""
    _, (mode, case, result), (_, full, full_result) = pair
    layout, full_layout = case.layout, full.layout
    sampled = result.memory.data.reshape(-1, layout.cta_bytes)
    plain = full_result.memory.data.reshape(-1, full_layout.cta_bytes)
    units_field = field_offset(CTA_HEADER_DTYPE, "units")
    for slot, cta in enumerate(sampled_ctas(mode)):
        header, full_header = sampled[slot, :CTA_HEADER_BYTES].copy(), plain[cta, :CTA_HEADER_BYTES].copy()
        assert header.view(CTA_HEADER_DTYPE)["units"][0] == layout.units
        header[units_field : units_field + 4] = full_header[units_field : units_field + 4]
        assert header.tobytes() == full_header.tobytes(), cta
        for j, unit in enumerate(sampled_units(mode, case.num_warps)):
            segment = sampled[slot, layout.unit_offset(j) : layout.unit_offset(j + 1)]
            full_segment = plain[cta, full_layout.unit_offset(unit) : full_layout.unit_offset(unit + 1)]
            assert segment.tobytes() == full_segment.tobytes(), (cta, unit)


def test_the_viewer_decodes_the_sampled_regions_as_the_sampled_ctas_and_units(pair):
    _, (mode, case, result), (_, full, full_result) = pair
    ctas = sampled_ctas(mode)
    held = result.memory.data[: len(ctas) * case.layout.cta_bytes]
    decoded = decode_buffer(held, case.layout)
    everything = decode_buffer(full_result.memory.data, full.layout)
    assert decoded.problems == ()
    assert decoded.ctas.valid.all() and decoded.ctas.cta.tolist() == ctas
    units = sampled_units(mode, case.num_warps)
    assert decoded.units.cta.tolist() == np.repeat(ctas, len(units)).tolist()
    assert decoded.units.unit.tolist() == units * len(ctas)
    keep = np.isin(everything.units.cta, ctas) & np.isin(everything.units.unit, units)
    for name in ("start_clock", "end_clock", "start_time", "end_time", "count", "kept", "overwritten"):
        assert getattr(decoded.units, name).tolist() == getattr(everything.units, name)[keep].tolist(), name
    rows = np.flatnonzero(keep)
    records = np.isin(everything.records.unit_row, rows)
    for name in ("tag", "clock", "index", "paired"):
        assert getattr(decoded.records, name).tolist() == getattr(everything.records, name)[records].tolist()


def test_sampled_kernels_assemble_and_say_so_in_their_metadata(compile_kernel):
    """Through Triton's own ptxas, to a cubin; the metadata names the sampling."""
    mode = Mode(ctas=(0, 5, 9), warps=(0, 2))
    kernel = compile_kernel(
        interpreter.add_kernel, interpreter.ADD_SIGNATURE, {"BLOCK": 1024}, mode=mode, num_warps=4
    )
    assert kernel.asm["cubin"]
    layout = kernel.metadata.proton_ik["layout"]
    assert layout["sampling"] == {"cta_ids": [0, 5, 9], "unit_ids": [0, 2]}
    assert layout["units"] == 2
    assert kernel.metadata.proton_ik["mode"] == str(mode)


def test_a_warp_the_kernel_lacks_is_refused_with_the_kernel_named(compile_kernel):
    with pytest.raises(
        Exception, match=r"kernel 'add_kernel': warps=5 names warp\(s\) \[5\], but the kernel has 4"
    ):
        compile_kernel(
            interpreter.add_kernel,
            interpreter.ADD_SIGNATURE,
            {"BLOCK": 1024},
            mode=Mode(warps=(5,)),
            num_warps=4,
        )


def test_triton_keys_sampled_and_plain_compiles_apart():
    """The mode string is Triton's instrumentation_mode, part of its cache key."""
    modes = [Mode(), Mode(ctas=4), Mode(ctas=(4,)), Mode(warps=(0,)), Mode(occupancy="free")]
    assert len({mode.knob for mode in modes}) == len(modes)
    assert all(Mode.from_knob(mode.knob) == mode for mode in modes)


def test_the_setup_op_carries_the_sampling_through_its_text():
    """IR text in, IR text out: the sampling survives printing and parsing, and verifies."""
    text = (
        'builtin.module {\n  pikgpu.segment_setup {granularity = "warp", units = 2 : i64, capacity = 4 : i64, '
        "cta_bytes = 384 : i64, layout_version = 2 : i64, cta_ids = array<i64: 0, 5, 9>, "
        "unit_ids = array<i64: 1, 3>}\n  pikgpu.finalize\n}"
    )
    module = parse_module(text)
    (setup, _) = module.body.block.ops
    assert isinstance(setup, SegmentSetupOp)
    assert setup.layout.sampling == Sampling(cta_ids=(0, 5, 9), unit_ids=(1, 3))
    assert "cta_ids = array<i64: 0, 5, 9>, unit_ids = array<i64: 1, 3>" in str(module)
    with pytest.raises(VerifyException, match="listed once each, in increasing order"):
        parse_module(text.replace("0, 5, 9", "5, 0, 9"))
