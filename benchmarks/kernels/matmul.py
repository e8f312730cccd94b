"""Matmuls: a 4096^3 fp16 ``tl.dot`` matmul with a scope per K step, and a persistent matmul
over host-side TMA descriptors with a scope per tile and per K step."""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from benchmarks import scopes
from benchmarks.kernels.problem import Launch, Problem, strided_count, uniform


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        with scopes.scope("k_step"):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def matmul_tma_persistent_kernel(
    a_desc, b_desc, c_desc, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
):  # fmt: skip
    """C = A @ B.T with host-side TMA descriptors (B is stored N x K), one CTA per SM, tiles in
    grouped order, after Triton's tutorial 09."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    num_pid_in_group = GROUP_M * num_pid_n
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_SMS):
        with scopes.scope("tile"):
            first_pid_m = (tile_id // num_pid_in_group) * GROUP_M
            group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
            pid_m = first_pid_m + (tile_id % group_size_m)
            pid_n = (tile_id % num_pid_in_group) // group_size_m
            offs_am = pid_m * BLOCK_M
            offs_bn = pid_n * BLOCK_N
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for ki in range(k_tiles):
                with scopes.scope("k_step"):
                    offs_k = ki * BLOCK_K
                    a = a_desc.load([offs_am, offs_k])
                    b = b_desc.load([offs_bn, offs_k])
                    acc = tl.dot(a, b.T, acc)
            c_desc.store([offs_am, offs_bn], acc.to(tl.float16))


def matmul(quick: bool) -> Problem:
    m = n = k = 1024 if quick else 4096
    bm, bn, bk = 128, 128, 64
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), 1, 1)

    def make_launch() -> Launch:
        import torch

        scale = k**-0.25  # keeps the outputs near unit variance
        a = torch.randn(m, k, device="cuda", dtype=torch.float16) * scale
        b = torch.randn(k, n, device="cuda", dtype=torch.float16) * scale
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        values = {"a_ptr": a, "b_ptr": b, "c_ptr": c, "M": m, "N": n, "K": k}
        strides = {
            "stride_am": a.stride(0),
            "stride_ak": a.stride(1),
            "stride_bk": b.stride(0),
            "stride_bn": b.stride(1),
            "stride_cm": c.stride(0),
            "stride_cn": c.stride(1),
        }
        return Launch(problem.ordered_args({**values, **strides}), grid, [c], lambda: [a @ b])

    problem = Problem(
        name="matmul",
        fn=matmul_kernel,
        kind="tl.dot, compute-bound",
        scopes="k_step: one per K iteration, inside the K loop",
        size=f"{m}x{n}x{k} fp16, {bm}x{bn}x{bk} tiles, 8 warps, 3 stages",
        constexprs={"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
        options={"num_warps": 8, "num_stages": 3},
        signature={
            "a_ptr": "*fp16",
            "b_ptr": "*fp16",
            "c_ptr": "*fp16",
            "M": "i32",
            "N": "i32",
            "K": "i32",
            "stride_am": "i32",
            "stride_ak": "i32",
            "stride_bk": "i32",
            "stride_bn": "i32",
            "stride_cm": "i32",
            "stride_cn": "i32",
        },
        grid=grid,
        make_launch=make_launch,
        records_per_warp=uniform(grid, 2 * triton.cdiv(k, bk)),
        tolerance=(2e-2, 1e-2),
    )
    return problem


def matmul_tma_persistent(quick: bool, num_sms: int) -> Problem:
    m = n = k = 1024 if quick else 4096
    bm, bn, bk = 128, 128, 64
    num_tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    programs = min(num_sms, num_tiles)
    grid = (programs, 1, 1)
    k_tiles = triton.cdiv(k, bk)

    def make_launch() -> Launch:
        import torch
        from triton.tools.tensor_descriptor import TensorDescriptor

        scale = k**-0.25
        a = torch.randn(m, k, device="cuda", dtype=torch.float16) * scale
        b = torch.randn(n, k, device="cuda", dtype=torch.float16) * scale
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        values = {
            "a_desc": TensorDescriptor.from_tensor(a, [bm, bk]),
            "b_desc": TensorDescriptor.from_tensor(b, [bn, bk]),
            "c_desc": TensorDescriptor.from_tensor(c, [bm, bn]),
            "M": m,
            "N": n,
            "K": k,
        }
        return Launch(problem.ordered_args(values), grid, [c], lambda: [a @ b.T])

    def records(warps: int) -> np.ndarray:
        tiles = strided_count(np.arange(programs), num_tiles, programs)
        return np.repeat((tiles * (2 + 2 * k_tiles))[:, None], warps, axis=1)

    problem = Problem(
        name="matmul_tma_persistent",
        fn=matmul_tma_persistent_kernel,
        kind="TMA descriptors (host), persistent",
        scopes="tile: one per output tile; k_step: one per K iteration inside it",
        size=f"{m}x{n}x{k} fp16, {bm}x{bn}x{bk} tiles, {programs} CTAs, 8 warps, 3 stages",
        constexprs={"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "NUM_SMS": programs},
        options={"num_warps": 8, "num_stages": 3},
        signature={
            "a_desc": f"tensordesc<fp16[{bm}, {bk}]>",
            "b_desc": f"tensordesc<fp16[{bn}, {bk}]>",
            "c_desc": f"tensordesc<fp16[{bm}, {bn}]>",
            "M": "i32",
            "N": "i32",
            "K": "i32",
        },
        grid=grid,
        make_launch=make_launch,
        records_per_warp=records,
        tolerance=(2e-2, 1e-2),
    )
    return problem
