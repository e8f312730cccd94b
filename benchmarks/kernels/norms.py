"""Row normalizations, memory-bound, with a scope per phase: LayerNorm forward (one row per CTA)
and a fused residual add + RMSNorm (persistent over rows), each with load, reduce, normalize and
store scopes where a kernel author would put them."""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from benchmarks import scopes
from benchmarks.kernels.problem import Launch, Problem, strided_count, uniform

EPS = 1e-5
PHASES = ("load", "reduce", "normalize", "store")


@triton.jit
def layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, row_stride, n_cols, eps, BLOCK: tl.constexpr):
    """y = (x - mean) / sqrt(var + eps) * w + b over one row of x, in fp32."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    with scopes.scope("load"):
        x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    with scopes.scope("reduce"):
        mean = tl.sum(x, axis=0) / n_cols
        centered = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
    with scopes.scope("normalize"):
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = centered * rstd * w + b
    with scopes.scope("store"):
        tl.store(y_ptr + row * row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def add_rms_norm_kernel(
    x_ptr, residual_ptr, h_ptr, y_ptr, w_ptr, row_stride, n_rows, n_cols, eps, BLOCK: tl.constexpr
):
    """h = x + residual (the new residual stream) and y = h / rms(h) * w, row by row, persistent:
    a transformer block's add-and-norm."""
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        offsets = row * row_stride + cols
        with scopes.scope("load"):
            x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
            residual = tl.load(residual_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
            h = x + residual
        with scopes.scope("reduce"):
            rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / n_cols + eps)
        with scopes.scope("normalize"):
            y = h * rstd * w
        with scopes.scope("store"):
            tl.store(h_ptr + offsets, h.to(h_ptr.dtype.element_ty), mask=mask)
            tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def layer_norm(quick: bool) -> Problem:
    # One row per CTA, 8 warps: Proton's global buffer (128 KiB per 8-warp CTA) stays under the
    # 2 GiB at which it faults (harness.PROTON_GLOBAL_MAX_BYTES).
    n_rows, n_cols = (1024 if quick else 8192), 8192
    grid = (n_rows, 1, 1)

    def make_launch() -> Launch:
        import torch

        x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.float16)
        w = torch.rand(n_cols, device="cuda", dtype=torch.float16) + 0.5
        b = torch.randn(n_cols, device="cuda", dtype=torch.float16)
        y = torch.empty_like(x)
        values = {"x_ptr": x, "y_ptr": y, "w_ptr": w, "b_ptr": b, "row_stride": x.stride(0)}

        def reference() -> list:
            return [torch.nn.functional.layer_norm(x.float(), (n_cols,), w.float(), b.float(), EPS).half()]

        return Launch(problem.ordered_args({**values, "n_cols": n_cols, "eps": EPS}), grid, [y], reference)

    problem = Problem(
        name="layer_norm",
        fn=layer_norm_kernel,
        kind="LayerNorm forward, memory-bound",
        scopes="load, reduce, normalize, store: one of each per CTA (one row)",
        size=f"{n_rows} x {n_cols} fp16, one row per CTA, 8 warps",
        constexprs={"BLOCK": triton.next_power_of_2(n_cols)},
        options={"num_warps": 8},
        signature={
            "x_ptr": "*fp16",
            "y_ptr": "*fp16",
            "w_ptr": "*fp16",
            "b_ptr": "*fp16",
            "row_stride": "i32",
            "n_cols": "i32",
            "eps": "fp32",
        },
        grid=grid,
        make_launch=make_launch,
        records_per_warp=uniform(grid, 2 * len(PHASES)),
        tolerance=(1e-2, 1e-2),
    )
    return problem


def add_rms_norm(quick: bool, num_sms: int) -> Problem:
    n_rows, n_cols = (4096 if quick else 32768), 4096
    programs = min(n_rows, 4 * num_sms)
    grid = (programs, 1, 1)

    def make_launch() -> Launch:
        import torch

        x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.float16)
        residual = torch.randn_like(x)
        w = torch.rand(n_cols, device="cuda", dtype=torch.float16) + 0.5
        h, y = torch.empty_like(x), torch.empty_like(x)
        values = {"x_ptr": x, "residual_ptr": residual, "h_ptr": h, "y_ptr": y, "w_ptr": w}

        def reference() -> list:
            total = x.float() + residual.float()
            rstd = torch.rsqrt(total.pow(2).mean(dim=-1, keepdim=True) + EPS)
            return [total.half(), (total * rstd * w.float()).half()]

        args = {**values, "row_stride": x.stride(0), "n_rows": n_rows, "n_cols": n_cols, "eps": EPS}
        return Launch(problem.ordered_args(args), grid, [h, y], reference)

    def records(warps: int) -> np.ndarray:
        rows = strided_count(np.arange(programs), n_rows, programs)
        return np.repeat((2 * len(PHASES) * rows)[:, None], warps, axis=1)

    problem = Problem(
        name="add_rms_norm",
        fn=add_rms_norm_kernel,
        kind="residual add + RMSNorm, memory-bound, persistent over rows",
        scopes="load, reduce, normalize, store: one of each per row, inside the row loop",
        size=f"{n_rows} x {n_cols} fp16, {programs} CTAs, 8 warps",
        constexprs={"BLOCK": triton.next_power_of_2(n_cols)},
        options={"num_warps": 8},
        signature={
            "x_ptr": "*fp16",
            "residual_ptr": "*fp16",
            "h_ptr": "*fp16",
            "y_ptr": "*fp16",
            "w_ptr": "*fp16",
            "row_stride": "i32",
            "n_rows": "i32",
            "n_cols": "i32",
            "eps": "fp32",
        },
        grid=grid,
        make_launch=make_launch,
        records_per_warp=records,
        tolerance=(1e-2, 1e-2),
    )
    return problem
