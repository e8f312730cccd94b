"""Flash-attention forward, causal and non-causal, with a scope per KV block."""

from __future__ import annotations

from typing import Any

import numpy as np
import triton
import triton.language as tl

from benchmarks import scopes
from benchmarks.kernels.problem import Launch, Problem


@triton.jit
def _attn_fwd_inner(
    acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vk, start_m, qk_scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr, offs_m, offs_n, N_CTX,
):  # fmt: skip
    # STAGE 1: the blocks left of the diagonal; 2: the diagonal block (masked); 3: all (non-causal)
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    else:
        lo, hi = 0, N_CTX
    for start_n in range(lo, hi, BLOCK_N):
        with scopes.scope("kv_block"):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            k = tl.load(k_ptrs + start_n * stride_kn)
            qk = tl.dot(q, k)
            if STAGE == 2:
                mask = offs_m[:, None] >= (start_n + offs_n[None, :])
                qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
                m_ij = tl.maximum(m_i, tl.max(qk, 1))
                qk -= m_ij[:, None]
            else:
                m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
                qk = qk * qk_scale - m_ij[:, None]
            p = tl.math.exp2(qk)
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            v = tl.load(v_ptrs + start_n * stride_vk)
            acc = tl.dot(p.to(tl.float16), v, acc)
            m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def attention_fwd_kernel(
    Q, K, V, Out, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vk, stride_vn,
    stride_oz, stride_oh, stride_om, stride_on,
    H, N_CTX,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr,
):  # fmt: skip
    """Flash-attention forward after Triton's tutorial 06, without TMA, fp8 or the backward pass.
    STAGE is 3 for causal attention (off-diagonal blocks, then the diagonal one) and 1 otherwise."""
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    q_offset = off_z.to(tl.int64) * stride_qz + off_h.to(tl.int64) * stride_qh
    k_offset = off_z.to(tl.int64) * stride_kz + off_h.to(tl.int64) * stride_kh
    v_offset = off_z.to(tl.int64) * stride_vz + off_h.to(tl.int64) * stride_vh
    o_offset = off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + q_offset + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk)
    k_ptrs = K + k_offset + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kk
    v_ptrs = V + v_offset + offs_n[:, None] * stride_vk + offs_d[None, :] * stride_vn

    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # 1 / ln(2): the inner loop uses exp2
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner(
            acc,
            l_i,
            m_i,
            q,
            k_ptrs,
            v_ptrs,
            stride_kn,
            stride_vk,
            start_m,
            qk_scale,
            BLOCK_M,
            BLOCK_N,
            4 - STAGE,
            offs_m,
            offs_n,
            N_CTX,
        )
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner(
            acc,
            l_i,
            m_i,
            q,
            k_ptrs,
            v_ptrs,
            stride_kn,
            stride_vk,
            start_m,
            qk_scale,
            BLOCK_M,
            BLOCK_N,
            2,
            offs_m,
            offs_n,
            N_CTX,
        )
    acc = acc / l_i[:, None]
    o_ptrs = Out + o_offset + offs_m[:, None] * stride_om + offs_d[None, :] * stride_on
    tl.store(o_ptrs, acc.to(Out.type.element_ty))


# the axes of each attention tensor's strides, as the kernel's parameters name them
ATTENTION_STRIDE_AXES = {"q": "zhmk", "k": "zhnk", "v": "zhkn", "o": "zhmn"}


def attention(quick: bool, causal: bool) -> Problem:
    z, h, n_ctx, d = (1, 4, 1024, 128) if quick else (4, 32, 4096, 128)
    bm, bn = 128, 64
    grid = (n_ctx // bm, z * h, 1)

    def make_launch() -> Launch:
        import torch

        q, k, v = (torch.randn(z, h, n_ctx, d, device="cuda", dtype=torch.float16) * 0.5 for _ in range(3))
        o = torch.empty_like(q)
        sm_scale = d**-0.5
        values: dict[str, Any] = {
            "Q": q,
            "K": k,
            "V": v,
            "Out": o,
            "sm_scale": sm_scale,
            "H": h,
            "N_CTX": n_ctx,
        }
        for prefix, t in (("q", q), ("k", k), ("v", v), ("o", o)):
            axes = ATTENTION_STRIDE_AXES[prefix]
            values.update({f"stride_{prefix}{axis}": s for axis, s in zip(axes, t.stride(), strict=True)})

        def reference() -> list[Any]:
            return [
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)
            ]

        return Launch(problem.ordered_args(values), grid, [o], reference)

    def records(warps: int) -> np.ndarray:
        start_m = np.arange(grid[0] * grid[1]) % grid[0]  # linear CTA id = x + y * nx
        blocks = (start_m + 1) * (bm // bn) if causal else np.full(start_m.shape, n_ctx // bn)
        return np.repeat((2 * blocks)[:, None], warps, axis=1)

    strides = {f"stride_{p}{axis}": "i32" for p, axes in ATTENTION_STRIDE_AXES.items() for axis in axes}
    problem = Problem(
        name="attention_causal" if causal else "attention",
        fn=attention_fwd_kernel,
        kind="flash-attention forward, " + ("causal" if causal else "non-causal"),
        scopes="kv_block: one per KV block, inside the KV loop(s)",
        size=f"Z={z} H={h} N={n_ctx} D={d} fp16, BLOCK_M={bm} BLOCK_N={bn}, 8 warps, 3 stages",
        constexprs={"HEAD_DIM": d, "BLOCK_M": bm, "BLOCK_N": bn, "STAGE": 3 if causal else 1},
        options={"num_warps": 8, "num_stages": 3},
        signature={
            "Q": "*fp16",
            "K": "*fp16",
            "V": "*fp16",
            "Out": "*fp16",
            "sm_scale": "fp32",
            **strides,
            "H": "i32",
            "N_CTX": "i32",
        },
        grid=grid,
        make_launch=make_launch,
        records_per_warp=records,
        tolerance=(1e-2, 0.0),
    )
    return problem
