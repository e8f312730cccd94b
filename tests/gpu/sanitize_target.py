"""Run under compute-sanitizer memcheck: instrumented kernels whose rings wrap many times,
each given a profile buffer of exactly the requested size (no pool, no caching allocator)."""

from __future__ import annotations

import kernels
import torch
from triton.runtime._allocation import set_profile_allocator

import proton_ik

buffers = []


def exact(size: int, alignment: int, stream: int):
    buffer = torch.empty(size, dtype=torch.uint8, device="cuda")
    buffers.append(buffer)
    return buffer


set_profile_allocator(exact)
x = torch.randn(16 * 512, device="cuda")
out = torch.empty_like(x)
n = 1 << 20
a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
with proton_ik.instrumented("instrumentation:capacity=4"):
    kernels.loop_kernel[(16,)](x, out, ITERS=100, BLOCK=512, num_warps=4)
    kernels.add_kernel[(n // 1024,)](a, b, torch.empty_like(a), n, BLOCK=1024)
torch.cuda.synchronize()
print("records ok", len(buffers))
