"""``proton-ik demo``: profile a bundled matmul on the GPU, or render a bundled capture without one."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import triton
import triton.language as tl

import proton_ik
import proton_ik.language as pl

DEMO_MODE = "instrumentation"  # the default mode: nothing to choose before a first run
BUNDLED_CAPTURE = "demo.pik"
DEMO_STEM = "proton_ik_demo"  # the demo's files: NAME.pik, NAME.pftrace, NAME.json


@triton.jit
def matmul_kernel(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        with pl.scope("k_step"):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
            y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
            acc = tl.dot(x, y, acc)
    with pl.scope("epilogue"):
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def launch_demo(size: int = 1024, launches: int = 2) -> None:
    """Run the demo matmul ``launches`` times and check its result."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    grid = (size // 128, size // 128)
    for _ in range(launches):
        matmul_kernel[grid](
            a, b, c, size, size, size, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3
        )
    error = (c.float() - a.float() @ b.float()).abs().max().item()
    if error > 1.0:
        raise RuntimeError(f"the demo matmul is wrong under instrumentation: max error {error}")


def run_on_gpu(out_dir: Path) -> proton_ik.Result:
    # The demo's own files: a second run replaces them rather than adding proton_ik_demo.1.*
    proton_ik.start(DEMO_STEM, mode=DEMO_MODE, out_dir=out_dir, overwrite=True)
    try:
        launch_demo()
    finally:
        result = proton_ik.finalize()
    return result


def bundled_capture() -> Path:
    return Path(str(resources.files("proton_ik") / "data" / BUNDLED_CAPTURE))
