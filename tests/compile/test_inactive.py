"""While no compile mode is set, or a kernel has no scopes, the compiled kernel is the plain one."""

from __future__ import annotations

import re

import pytest
import triton
import triton.language as tl

import proton_ik
import proton_ik.language as pl
from proton_ik.mode import Mode

SIGNATURE = {"x": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}
CONSTANTS = {"BLOCK": 1024}


@triton.jit
def annotated(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    with pl.scope("load"):
        v = tl.load(x + offs, mask=mask)
    pl.enter_scope("compute")
    v = v * 2 + 1
    pl.exit_scope("compute")
    tl.store(out + offs, v, mask=mask)


@triton.jit
def unannotated(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask)
    v = v * 2 + 1
    tl.store(out + offs, v, mask=mask)


def normalized(ptx: str, kernel_name: str) -> list[str]:
    """The PTX without what must differ between two kernels of different names and lines:
    the name, source locations, the debug sections and comment padding."""
    code = ptx.split("\t.section\t.debug")[0]
    lines = []
    for line in code.splitlines():
        if re.match(r"\s*\.(loc|file)\s", line):
            continue
        lines.append(" ".join(line.replace(kernel_name, "KERNEL").split()))
    return lines


@pytest.fixture(scope="module")
def plain_ptx(compile_kernel) -> str:
    return compile_kernel(unannotated, SIGNATURE, CONSTANTS).asm["ptx"]


def test_inactive_scopes_emit_nothing(compile_kernel, plain_ptx: str):
    kernel = compile_kernel(annotated, SIGNATURE, CONSTANTS)
    ptx = kernel.asm["ptx"]
    assert "pik" not in ptx
    assert kernel.metadata.profile_scratch_size == 0
    assert not hasattr(kernel.metadata, "proton_ik")
    assert normalized(ptx, "annotated") == normalized(plain_ptx, "unannotated")


def test_scopes_emit_nothing_again_once_an_instrumented_block_closes(compile_kernel, plain_ptx: str):
    with proton_ik.instrumented():
        inside = compile_kernel(annotated, SIGNATURE, CONSTANTS)
    kernel = compile_kernel(annotated, SIGNATURE, CONSTANTS)
    assert [s["name"] for s in inside.metadata.proton_ik["scopes"]] == ["load", "compute"]
    assert not hasattr(kernel.metadata, "proton_ik")
    assert normalized(kernel.asm["ptx"], "annotated") == normalized(plain_ptx, "unannotated")


def test_the_normalization_still_sees_scopes(compile_kernel, plain_ptx: str):
    kernel = compile_kernel(annotated, SIGNATURE, CONSTANTS, mode=Mode())
    assert normalized(kernel.asm["ptx"], "annotated") != normalized(plain_ptx, "unannotated")


def test_a_kernel_without_scopes_is_untouched_while_active(compile_kernel, plain_ptx: str):
    kernel = compile_kernel(unannotated, SIGNATURE, CONSTANTS, mode=Mode())
    assert kernel.asm["ptx"] == plain_ptx
    assert kernel.metadata.profile_scratch_size == 0
    assert not hasattr(kernel.metadata, "proton_ik")
