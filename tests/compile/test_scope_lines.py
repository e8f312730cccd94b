"""A scope's file and line, as the kernel metadata gives them: the line of the annotation call,
also where LLVM moves other code before the scope's begin (a loop whose body calls ``tl.erf``
had its ``tile`` scope named at the loop's last line), and where it rotates the loop so that an
end comes before the begin."""

from __future__ import annotations

from pathlib import Path

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import proton_ik
import proton_ik.language as pl

TARGET = GPUTarget("cuda", 90, 32)


@triton.jit
def gelu_tiles(
    h_ptr, out_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ERF: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    with pl.scope("row_block"):
        for n0 in range(0, N, BLOCK_N):
            with pl.scope("tile"):
                cols = n0 + tl.arange(0, BLOCK_N)
                mask = (rows < M)[:, None] & (cols < N)[None, :]
                offsets = rows[:, None] * stride_m + cols[None, :]
                with pl.scope("load"):
                    h = tl.load(h_ptr + offsets, mask=mask, other=0.0)
                if ERF:
                    g = 0.5 * h * (1.0 + tl.erf(h * 0.7071067811865476))
                else:
                    g = 0.5 * h * (1.0 + tl.exp(h * 0.7071067811865476))
                tl.store(out_ptr + offsets, g, mask=mask)


SIGNATURE = {
    "h_ptr": "*fp32",
    "out_ptr": "*fp32",
    "M": "i32",
    "N": "i32",
    "stride_m": "i32",
    "BLOCK_M": "constexpr",
    "BLOCK_N": "constexpr",
    "ERF": "constexpr",
}


def _line_of(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    (number,) = [index + 1 for index, line in enumerate(lines) if text in line and "_line_of" not in line]
    return number


@pytest.mark.parametrize("erf", [False, True], ids=["exp", "erf"])
def test_each_scope_names_the_line_of_its_with_statement(erf):
    source = ASTSource(gelu_tiles, SIGNATURE, {"BLOCK_M": 16, "BLOCK_N": 64, "ERF": erf})
    with proton_ik.instrumented() as mode:
        binary = triton.compile(
            source, target=TARGET, options={"num_warps": 4, "instrumentation_mode": mode.knob}
        )
    found = {s["name"]: (s.get("file"), s["line"]) for s in binary.metadata.proton_ik["scopes"]}
    here = Path(__file__).name
    assert found == {
        "row_block": (here, _line_of('with pl.scope("row_block")')),
        "tile": (here, _line_of('with pl.scope("tile")')),
        "load": (here, _line_of('with pl.scope("load")')),
    }


def test_a_file_whose_name_inline_asm_would_misread_still_compiles_and_names_itself(tmp_path):
    """The marker is inline asm, where "$1" names an operand: a file name holding "$" is not put
    in it, and the scope still names its line, and its file from the PTX."""
    import importlib.util

    path = tmp_path / "price$1.py"
    path.write_text(
        "import triton\nimport triton.language as tl\nimport proton_ik.language as pl\n\n\n"
        "@triton.jit\ndef kernel(x_ptr, BLOCK: tl.constexpr):\n"
        "    offsets = tl.arange(0, BLOCK)\n"
        '    with pl.scope("read"):\n'
        "        x = tl.load(x_ptr + offsets)\n"
        "    tl.store(x_ptr + offsets, x + 1)\n"
    )
    spec = importlib.util.spec_from_file_location("price_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = ASTSource(module.kernel, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 128})
    with proton_ik.instrumented() as mode:
        binary = triton.compile(
            source, target=TARGET, options={"num_warps": 4, "instrumentation_mode": mode.knob}
        )
    (scope,) = binary.metadata.proton_ik["scopes"]
    assert (scope["name"], scope["line"]) == ("read", 9)
    assert scope.get("file") in (None, "price$1.py")
