"""The kernel of the cluster capture and its GPU test: a small ``tl.dot`` matmul, one scope per K
step, that Triton launches as thread-block clusters of ``num_ctas`` CTAs (sm_90 and later).

Triton's launcher (``triton/backends/nvidia/driver.py``) launches ``gridX * num_ctas`` CTAs in x
with a cluster of ``(num_ctas, 1, 1)``: each program of the grid is one cluster, whose CTAs
share its tiles. So, for a 1-D grid, the hardware CTA c is in cluster c // num_ctas with rank
c % num_ctas, and the cluster's id is the program's id.
"""

from __future__ import annotations

import triton
import triton.language as tl

import proton_ik.language as pl

M, N, K = 256, 256, 256
BLOCK_M, BLOCK_N, BLOCK_K = 128, 64, 64
NUM_WARPS = 4


@triton.jit
def cluster_matmul_kernel(
    a,
    b,
    c,
    N: tl.constexpr,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # K a constexpr: the K loop's trip count is known, so each unit's segment holds its K / BLOCK_K
    # entries (``lowering.bound``), and the session stays small.
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rows = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        with pl.scope("k_step"):
            ks = k + tl.arange(0, BLOCK_K)
            x = tl.load(a + rows[:, None] * K + ks[None, :])
            y = tl.load(b + ks[:, None] * N + cols[None, :])
            acc = tl.dot(x, y, acc)
    tl.store(c + rows[:, None] * N + cols[None, :], acc)


def grid(meta=None) -> tuple[int]:
    """The programs: one per output tile (and so one cluster per tile)."""
    return (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)


def launch(a, b, c, num_ctas: int) -> None:
    cluster_matmul_kernel[grid()](
        a, b, c, N=N, K=K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        num_warps=NUM_WARPS, num_ctas=num_ctas,
    )  # fmt: skip
