"""``proton_ik.instrumented()``: real compiles to sm_90 cubins, instrumented inside the block and
plain outside it, with no session."""

from __future__ import annotations

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import proton_ik
import proton_ik.language as pl
from proton_ik import compile_mode
from proton_ik.contract.layout import ENTRY_BYTES, BufferLayout, Granularity
from proton_ik.mode import Default, Mode

TARGET = GPUTarget("cuda", 90, 32)
NUM_WARPS = 4


@triton.jit
def scaled(x, out, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("load"):
        v = tl.load(x + offsets)
    pl.enter_scope("store")
    tl.store(out + offsets, v * 2)
    pl.exit_scope("store")


def compile_scaled():
    """A direct compile, as a user writes it: no options, so the mode comes from the switch."""
    source = ASTSource(
        scaled, signature={"x": "*fp32", "out": "*fp32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 256}
    )
    return triton.compile(source, target=TARGET, options={"num_warps": NUM_WARPS})


def test_the_block_compiles_instrumented_and_outside_it_plain():
    assert proton_ik._session is None
    with proton_ik.instrumented() as mode:
        inside = compile_scaled()
    after = compile_scaled()
    assert mode == Mode()
    assert inside.asm["cubin"] and after.asm["cubin"]
    assert inside.metadata.proton_ik["mode"] == str(Mode())
    assert [s["name"] for s in inside.metadata.proton_ik["scopes"]] == ["load", "store"]
    assert inside.metadata.profile_scratch_size > 0
    assert not hasattr(after.metadata, "proton_ik")
    assert after.metadata.profile_scratch_size == 0
    assert "pik" not in after.asm["ptx"]


CAPACITY = 32


@pytest.mark.parametrize(
    "given",
    [
        f"instrumentation:capacity={CAPACITY}",
        Mode(capacity=CAPACITY),
        f"default:buffer_size={CAPACITY * ENTRY_BYTES}",
        Default(buffer_size=CAPACITY * ENTRY_BYTES),
    ],
    ids=["string", "Mode", "proton-string", "proton-Default"],
)
def test_the_block_takes_what_start_takes(given: object):
    with proton_ik.instrumented(given) as mode:
        kernel = compile_scaled()
    assert mode == Mode(capacity=CAPACITY)
    assert kernel.metadata.proton_ik["layout"] == BufferLayout(units=NUM_WARPS, capacity=CAPACITY).to_dict()


def test_nested_blocks_compile_under_the_innermost_mode_and_restore_the_outer():
    cta = Mode(granularity=Granularity.CTA, capacity=16)
    with proton_ik.instrumented(f"instrumentation:capacity={CAPACITY}"):
        with proton_ik.instrumented(cta):
            inner = compile_scaled()
        outer = compile_scaled()
    assert inner.metadata.proton_ik["layout"] == BufferLayout(units=1, capacity=16).to_dict()
    assert outer.metadata.proton_ik["layout"] == BufferLayout(units=NUM_WARPS, capacity=CAPACITY).to_dict()


def test_a_bad_mode_is_refused_before_anything_is_switched():
    with pytest.raises(ValueError, match="capacity=3: ring slots per unit must be a power of two"):
        proton_ik.instrumented("instrumentation:capacity=3")
    assert compile_mode.active_mode() is None
