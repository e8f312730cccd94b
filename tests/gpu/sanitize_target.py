"""Run under compute-sanitizer memcheck: instrumented kernels whose rings wrap many times,
each given a profile buffer of exactly the requested size (no pool, no caching allocator)."""

from __future__ import annotations

import kernels
import torch
from triton.runtime._allocation import set_profile_allocator

from proton_ik import Mode
from proton_ik.lowering import triton_hook

buffers = []


def exact(size: int, alignment: int, stream: int):
    buffer = torch.empty(size, dtype=torch.uint8, device="cuda")
    buffers.append(buffer)
    return buffer


triton_hook.install(Mode.parse("instrumentation:capacity=4"))
set_profile_allocator(exact)
x = torch.randn(16 * 512, device="cuda")
out = torch.empty_like(x)
kernels.loop_kernel[(16,)](x, out, ITERS=100, BLOCK=512, num_warps=4)
n = 1 << 20
a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
kernels.add_kernel[(n // 1024,)](a, b, torch.empty_like(a), n, BLOCK=1024)
torch.cuda.synchronize()
print("records ok", len(buffers))
