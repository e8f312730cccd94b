"""A scope that Triton's compile takes from the trace, or empties, is named in a warning, never
lost or misread without a word. Triton's warp specialization of a loop (``tl.range(...,
warp_specialize=True)``) removes the markers inside it and leaves those around and after it
outside the warps that run it (measured on an H100: such scopes read 0 cycles); the same kernel
without it keeps every scope."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

from proton_ik.mode import Mode

GPU_TESTS = Path(__file__).parents[1] / "gpu"
sys.path.insert(0, str(GPU_TESTS))
from control_flow_kernels import warp_specialized_matmul  # noqa: E402  (its GPU test runs it)

SIGNATURE = {
    "a_ptr": "*fp16",
    "b_ptr": "*fp16",
    "c_ptr": "*fp16",
    "M": "i32",
    "N": "i32",
    "K": "i32",
    "BM": "constexpr",
    "BN": "constexpr",
    "BK": "constexpr",
    "WS": "constexpr",
}


def _line_of(text: str) -> str:
    """``file:line`` of the first line of the kernel's file that holds ``text``."""
    path = GPU_TESTS / "control_flow_kernels.py"
    lines = path.read_text().splitlines()
    return f"{path.name}:{next(i for i, line in enumerate(lines, 1) if text in line)}"


@pytest.mark.parametrize("warp_specialize", [True, False])
def test_scopes_a_warp_specialized_loop_takes_or_empties_are_named(compile_kernel, warp_specialize: bool):
    constexprs = {"BM": 128, "BN": 128, "BK": 64, "WS": warp_specialize}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = compile_kernel(
            warp_specialized_matmul, SIGNATURE, constexprs, mode=Mode(), num_warps=4, num_stages=3
        )
    named = {
        str(w.message).split("'")[3]: str(w.message)
        for w in caught
        if str(w.message).startswith("proton_ik: kernel 'warp_specialized_matmul': ")
    }
    recorded = {scope["name"] for scope in kernel.metadata.proton_ik["scopes"]}
    if not warp_specialize:
        assert named == {}
        assert recorded == {"setup", "mainloop", "k_step", "epilogue"}
        return
    loop = _line_of("for k in tl.range")
    assert set(named) == {"k_step", "mainloop", "epilogue"}  # "setup" comes before the loop
    step = _line_of('with pl.scope("k_step")')
    assert named["k_step"].startswith(
        f"proton_ik: kernel 'warp_specialized_matmul': 'k_step' ({step}) is not recorded: "
        f"Triton's warp specialization of the loop at {loop} (tl.range(..., warp_specialize=True)) removed"
    )
    for name, text in (("mainloop", 'pl.exit_scope("mainloop")'), ("epilogue", 'with pl.scope("epilogue")')):
        assert named[name].startswith(
            f"proton_ik: kernel 'warp_specialized_matmul': '{name}' ({_line_of(text)}) cannot be trusted: Triton moves "
            f"the loop at {loop}"
        )
        assert named[name].endswith("Profile this kernel without warp_specialize=True.")
    assert recorded == {"setup", "mainloop", "epilogue"}
