"""A transformer block as torch.compile runs it (issue 22): attention through a scoped user
kernel, everything else (layer norms, residuals, GELU, the matmuls' epilogues) through the
kernels Inductor writes itself.

The attention kernel annotates with ``proton_ik.language`` directly, as a user would: under
torch.compile, Inductor compiles it from a copy of its source, which is what is measured here.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import proton_ik.language as pl

BATCH, SEQ, WIDTH, HEADS = 4, 1024, 512, 8
HEAD_DIM = WIDTH // HEADS
BLOCK_M, BLOCK_N, ATTENTION_WARPS = 64, 64, 4


@triton.jit
def block_attention_kernel(
    Q, K, V, Out, stride_b, stride_h, stride_s, N_CTX, SM_SCALE: tl.constexpr,
    HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Non-causal flash attention over [batch, heads, seq, head_dim] tensors of one layout."""
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    base = (off_bh // HEADS).to(tl.int64) * stride_b + (off_bh % HEADS).to(tl.int64) * stride_h
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * stride_s + offs_d[None, :])
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = SM_SCALE * 1.44269504  # a constexpr: Inductor would pass a float argument as fp64
    for start_n in range(0, N_CTX, BLOCK_N):
        with pl.scope("kv_block"):
            k = tl.load(K + base + (start_n + offs_n)[None, :] * stride_s + offs_d[:, None])
            qk = tl.dot(q, k)
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(V + base + (start_n + offs_n)[:, None] * stride_s + offs_d[None, :])
            acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])
            m_i = m_ij
    with pl.scope("epilogue"):
        tl.store(
            Out + base + offs_m[:, None] * stride_s + offs_d[None, :], (acc / l_i[:, None]).to(tl.float16)
        )


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    batch, heads, seq, head_dim = q.shape
    out = torch.empty_like(q)
    block_attention_kernel[(seq // BLOCK_M, batch * heads)](
        q, k, v, out, q.stride(0), q.stride(1), q.stride(2), seq, SM_SCALE=head_dim**-0.5,
        HEADS=heads, HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=ATTENTION_WARPS,
    )  # fmt: skip
    return out


class TransformerBlock(torch.nn.Module):
    def __init__(self, width: int = WIDTH, heads: int = HEADS):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        qkv = self.qkv(self.norm1(x)).view(batch, seq, 3, self.heads, width // self.heads)
        q, k, v = (qkv[:, :, i].transpose(1, 2).contiguous() for i in range(3))
        a = attention(q, k, v).transpose(1, 2).reshape(batch, seq, width)
        x = x + self.proj(a)
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


def make_block() -> tuple[TransformerBlock, torch.Tensor]:
    """The block in fp16 on the GPU and its input, the same every time (a fixed seed)."""
    torch.manual_seed(0)
    block = TransformerBlock().cuda().half().eval()
    x = torch.randn(BATCH, SEQ, WIDTH, device="cuda", dtype=torch.float16)
    return block, x


def kv_blocks_per_warp() -> int:
    """kv_block scopes each warp of the attention kernel records: one per KV block."""
    return SEQ // BLOCK_N
