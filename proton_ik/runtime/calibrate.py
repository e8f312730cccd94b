"""Measure what an empty scope costs on this device, so the viewer can shift it out of every scope.

A single begin record's clock read comes before its own store and count updates, which
therefore land inside the scope; a paired begin is a bare clock read, so only the two clock
reads themselves do. Timing empty scopes (a begin followed at once by its end) measures exactly
that, for each kind, on the device at hand and for the mode at hand.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import triton
import triton.language as tl
from triton.runtime._allocation import set_profile_allocator

import proton_ik.language as pl
from proton_ik import compile_mode
from proton_ik.contract.metadata import METADATA_KEY, KernelMetadata
from proton_ik.mode import Mode

EMPTY_SCOPES = 64


@triton.jit
def _empty_scopes(out, REPEATS: tl.constexpr):
    for _ in tl.static_range(REPEATS):
        pl.enter_scope("empty")
        pl.exit_scope("empty")
    tl.store(out + tl.program_id(0), 0)


def time_shifts(mode: Mode) -> dict[str, int]:
    """The empty-scope cost of single records and of pairs, in cycles, for the viewer. Timed as a
    trace: an aggregate begin and end read the clock as a pair's do, so the pair's cost is theirs.
    And unsampled: sampling changes no record's instructions, and the calibration kernel's one
    CTA (of 4 warps, or one unit of a granularity of more) must record whatever the mode samples."""
    mode = dataclasses.replace(mode, aggregate=False, ctas=1, warps=())
    return {
        "single": empty_scope_cycles(dataclasses.replace(mode, pairs=False)),
        "pair": empty_scope_cycles(dataclasses.replace(mode, pairs=True)),
    }


def calibration_warps(mode: Mode) -> int:
    """The calibration kernel's warps: 4, or one unit of a granularity of more (warpgroup_8: 32)."""
    return max(4, mode.granularity.fixed_warps or 4)


def empty_scope_cycles(mode: Mode) -> int:
    """Median cycles between the begin and end records of an empty scope, on the current GPU."""
    import torch

    from proton_ik.viewer.decode import decode_buffer
    from proton_ik.viewer.pairing import pair_records

    buffers: list = []

    def allocate(size: int, alignment: int, stream: int):
        buffers.append(torch.zeros(size, dtype=torch.uint8, device="cuda"))
        return buffers[-1]

    calibration_mode = dataclasses.replace(mode, capacity=2 * EMPTY_SCOPES)
    set_profile_allocator(allocate)
    try:
        with compile_mode.compiling(calibration_mode):
            out = torch.zeros(1, dtype=torch.int32, device="cuda")
            kernel = _empty_scopes[(1,)](out, REPEATS=EMPTY_SCOPES, num_warps=calibration_warps(mode))
            torch.cuda.synchronize()
    finally:
        set_profile_allocator(None)
    layout = KernelMetadata.from_dict(getattr(kernel.metadata, METADATA_KEY), "the calibration kernel").layout
    decoded = decode_buffer(buffers[-1].cpu().numpy(), layout)
    pairs, _ = pair_records(decoded.records, decoded.units)
    durations = np.asarray(pairs.end_clock, dtype=np.int64) - np.asarray(pairs.begin_clock, dtype=np.int64)
    # The first scopes of a warp also pay for cold instruction fetch: take the median.
    return int(np.median(durations)) if durations.size else 0
