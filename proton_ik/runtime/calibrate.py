"""Measure what an empty scope costs on this device, so the viewer can shift it out of every scope.

A begin record's clock read comes before its own store and count update, which therefore land
inside the scope. Timing empty scopes (begin followed at once by end) measures exactly that,
on the device at hand, for the mode at hand.
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl
from triton.runtime._allocation import set_profile_allocator

import proton_ik.language as pl
from proton_ik.layout import BufferLayout
from proton_ik.lowering import triton_hook
from proton_ik.lowering.pipeline import METADATA_KEY
from proton_ik.mode import Mode

EMPTY_SCOPES = 64


@triton.jit
def _empty_scopes(out, REPEATS: tl.constexpr):
    for _ in tl.static_range(REPEATS):
        pl.enter_scope("empty")
        pl.exit_scope("empty")
    tl.store(out + tl.program_id(0), 0)


def empty_scope_cycles(mode: Mode) -> int:
    """Median cycles between the begin and end records of an empty scope, on the current GPU."""
    import torch

    from proton_ik.viewer.decode import decode_buffer
    from proton_ik.viewer.events import pair_records

    buffers: list = []

    def allocate(size: int, alignment: int, stream: int):
        buffers.append(torch.zeros(size, dtype=torch.uint8, device="cuda"))
        return buffers[-1]

    calibration_mode = Mode(granularity=mode.granularity, capacity=max(2 * EMPTY_SCOPES, 2))
    triton_hook.install(calibration_mode)
    set_profile_allocator(allocate)
    try:
        out = torch.zeros(1, dtype=torch.int32, device="cuda")
        kernel = _empty_scopes[(1,)](out, REPEATS=EMPTY_SCOPES, num_warps=4)
        torch.cuda.synchronize()
    finally:
        set_profile_allocator(None)
        triton_hook.uninstall()
    layout = BufferLayout.from_dict(getattr(kernel.metadata, METADATA_KEY)["layout"])
    decoded = decode_buffer(buffers[-1].cpu().numpy(), layout)
    pairs, _ = pair_records(decoded.records, decoded.units)
    durations = np.asarray(pairs.end_clock, dtype=np.int64) - np.asarray(pairs.begin_clock, dtype=np.int64)
    # The first scopes of a warp also pay for cold instruction fetch: take the median.
    return int(np.median(durations)) if durations.size else 0
