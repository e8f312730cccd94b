"""Row softmax: a reduction, persistent over rows, one scope per row."""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from benchmarks import scopes
from benchmarks.kernels.problem import Launch, Problem, strided_count


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        with scopes.scope("row"):
            x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
            x = x - tl.max(x, axis=0)
            numerator = tl.exp(x)
            y = numerator / tl.sum(numerator, axis=0)
            tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(quick: bool, num_sms: int) -> Problem:
    n_rows, n_cols = (4096 if quick else 32768), 4096
    programs = min(n_rows, 4 * num_sms)
    grid = (programs, 1, 1)

    def make_launch() -> Launch:
        import torch

        x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.float16)
        y = torch.empty_like(x)
        values = {"out_ptr": y, "in_ptr": x, "in_row_stride": x.stride(0), "out_row_stride": y.stride(0)}
        return Launch(
            problem.ordered_args({**values, "n_rows": n_rows, "n_cols": n_cols}),
            grid,
            [y],
            lambda: [torch.softmax(x.float(), dim=-1).half()],
        )

    def records(warps: int) -> np.ndarray:
        rows = strided_count(np.arange(programs), n_rows, programs)
        return np.repeat((2 * rows)[:, None], warps, axis=1)

    problem = Problem(
        name="softmax",
        fn=softmax_kernel,
        kind="row reduction, persistent over rows",
        scopes="row: one per row, inside the row loop",
        size=f"{n_rows} x {n_cols} fp16, {programs} CTAs",
        constexprs={"BLOCK": triton.next_power_of_2(n_cols)},
        options={"num_warps": 8},
        signature={
            "out_ptr": "*fp16",
            "in_ptr": "*fp16",
            "in_row_stride": "i32",
            "out_row_stride": "i32",
            "n_rows": "i32",
            "n_cols": "i32",
        },
        grid=grid,
        make_launch=make_launch,
        records_per_warp=records,
        tolerance=(1e-3, 1e-2),
    )
    return problem
