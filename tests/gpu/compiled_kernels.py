"""User kernels as torch.compile meets them: every import style of proton_ik.language, a helper
with a scope of its own, an event handle held in a global, TensorDescriptor arguments, and an
autotuned kernel; and a model block whose kernels Inductor writes itself."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import proton_ik.language as pl
import proton_ik.language as prof
from proton_ik.language import enter_scope, exit_scope, scope

HANDOFF = pl.event("handoff", instances=2)
BLOCK = 1024


@triton.jit
def doubled(x):
    with prof.scope("helper"):
        y = x * 2.0
    return y


@triton.jit
def scaled_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with scope("load"):
        x = tl.load(x_ptr + offsets, mask=offsets < n)
    pl.start_event(HANDOFF, index=0)
    enter_scope("compute")
    y = doubled(x) + 1.0
    exit_scope("compute")
    pl.end_event(HANDOFF, index=0)
    pl.mark("tile", value=tl.program_id(0))
    pl.mark("even_tile", predicate=tl.program_id(0) % 2 == 0)
    tl.store(out_ptr + offsets, y, mask=offsets < n)


def scaled(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    scaled_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
    return out


SCALED_SCOPES = ("load", "compute", "helper")  # each once per warp, with one event and two marks


@triton.jit
def descriptor_kernel(in_desc, out_desc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    m = tl.program_id(0) * BLOCK_M
    with pl.scope("tma_load"):
        tile = in_desc.load([m, 0])
    with pl.scope("tma_store"):
        out_desc.store([m, 0], tile * 3.0)


def descriptor_scaled(x: torch.Tensor) -> torch.Tensor:
    from triton.tools.tensor_descriptor import TensorDescriptor

    out = torch.empty_like(x)
    block_m, block_n = 64, x.shape[1]
    source = TensorDescriptor.from_tensor(x, [block_m, block_n])
    target = TensorDescriptor.from_tensor(out, [block_m, block_n])
    descriptor_kernel[(x.shape[0] // block_m,)](source, target, BLOCK_M=block_m, BLOCK_N=block_n)
    return out


@triton.autotune(
    configs=[triton.Config({"BLOCK": 512}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=8)],
    key=["n"],
)
@triton.jit
def autotuned_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("tuned"):
        x = tl.load(x_ptr + offsets, mask=offsets < n)
        tl.store(out_ptr + offsets, x * x, mask=offsets < n)


def autotuned(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    autotuned_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
    return out


class Block(torch.nn.Module):
    """Linear, LayerNorm, GELU: Inductor writes its own Triton kernels for all but the matmul."""

    def __init__(self, width: int = 1024):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.norm(self.linear(x) + x))
