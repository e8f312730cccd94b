"""A scope that Triton's compile takes from the trace, or empties, is named in a warning, never
lost or misread without a word. Triton's warp specialization of a loop (``tl.range(...,
warp_specialize=True)``) removes the markers inside it and leaves those around and after it
outside the warps that run it (measured on an H100: such scopes read 0 cycles); the same kernel
without it keeps every scope."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import triton
import triton.language as tl

import proton_ik.language as pl
from proton_ik.mode import Mode


@triton.jit
def tiled_matmul(
    a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, WS: tl.constexpr
):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [K, 1], [BN, BK])
    with pl.scope("setup"):
        acc = tl.zeros([BM, BN], tl.float32)
    pl.enter_scope("mainloop")
    for k in tl.range(0, tl.cdiv(K, BK), warp_specialize=WS):
        with pl.scope("k_step"):
            a = a_desc.load([pid_m * BM, k * BK])
            b = b_desc.load([pid_n * BN, k * BK])
            acc = tl.dot(a, b.T, acc)
    pl.exit_scope("mainloop")
    with pl.scope("epilogue"):
        rows = pid_m * BM + tl.arange(0, BM)
        cols = pid_n * BN + tl.arange(0, BN)
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(tl.float16))


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
    """``file:line`` of the first line of this file that holds ``text``."""
    lines = Path(__file__).read_text().splitlines()
    return f"{Path(__file__).name}:{next(i for i, line in enumerate(lines, 1) if text in line)}"


@pytest.mark.parametrize("warp_specialize", [True, False])
def test_scopes_a_warp_specialized_loop_takes_or_empties_are_named(compile_kernel, warp_specialize: bool):
    constexprs = {"BM": 128, "BN": 128, "BK": 64, "WS": warp_specialize}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = compile_kernel(tiled_matmul, SIGNATURE, constexprs, mode=Mode(), num_warps=4, num_stages=3)
    named = {
        str(w.message).split("'")[3]: str(w.message)
        for w in caught
        if str(w.message).startswith("proton_ik: kernel 'tiled_matmul': ")
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
        f"proton_ik: kernel 'tiled_matmul': 'k_step' ({step}) is not recorded: "
        f"Triton's warp specialization of the loop at {loop} (tl.range(..., warp_specialize=True)) removed"
    )
    for name, text in (("mainloop", 'pl.exit_scope("mainloop")'), ("epilogue", 'with pl.scope("epilogue")')):
        assert named[name].startswith(
            f"proton_ik: kernel 'tiled_matmul': '{name}' ({_line_of(text)}) cannot be trusted: Triton moves "
            f"the loop at {loop}"
        )
        assert named[name].endswith("Profile this kernel without warp_specialize=True.")
    assert recorded == {"setup", "mainloop", "epilogue"}
