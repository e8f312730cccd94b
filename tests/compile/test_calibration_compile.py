"""The calibration kernel compiles under every granularity (a session calibrates under its own
mode at start: a granularity of more warps than the kernel has would refuse to start)."""

from __future__ import annotations

import pytest

from proton_ik.contract.layout import Granularity
from proton_ik.mode import Mode
from proton_ik.runtime.calibrate import EMPTY_SCOPES, _empty_scopes, calibration_warps


@pytest.mark.parametrize("granularity", list(Granularity))
def test_the_calibration_kernel_compiles_under_every_granularity(compile_kernel, granularity):
    mode = Mode(granularity=granularity, capacity=2 * EMPTY_SCOPES)
    warps = calibration_warps(mode)
    assert warps % mode.granularity.warps_per_unit(warps) == 0
    kernel = compile_kernel(
        _empty_scopes,
        {"out": "*i32", "REPEATS": "constexpr"},
        {"REPEATS": EMPTY_SCOPES},
        mode=mode,
        num_warps=warps,
    )
    assert kernel.metadata.proton_ik["warps_per_unit"] == mode.granularity.warps_per_unit(warps)
