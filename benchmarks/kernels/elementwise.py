"""Elementwise kernels: the suite's GELU, and the straight-line kernels of issue 7
(benchmarks/buffers/): ``four_scopes`` on a 16384-CTA grid, ``short_add`` for host-side costs
and CUDA graphs, ``sized_sum`` for the launch cost of a kernel sized at launch, ``one_scope``
for finalize's many short launches, and ``tuned_add`` for autotuning."""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from benchmarks import scopes
from benchmarks.kernels.problem import Launch, Problem, uniform


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    with scopes.scope("load"):
        x = tl.load(x_ptr + offsets, mask=mask)
    with scopes.scope("compute"):
        # tanh-approximated GELU: 0.5 * (1 + tanh(z)) == sigmoid(2 * z)
        y = x * tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))
    with scopes.scope("store"):
        tl.store(y_ptr + offsets, y, mask=mask)


def gelu(n: int) -> Problem:
    block = 4096
    grid = (n // block, 1, 1)

    def make_launch() -> Launch:
        import torch

        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        return Launch(
            problem.ordered_args({"x_ptr": x, "y_ptr": y, "n_elements": n}),
            grid,
            [y],
            lambda: [torch.nn.functional.gelu(x, approximate="tanh")],
        )

    problem = Problem(
        name="gelu",
        fn=gelu_kernel,
        kind="elementwise, memory-bound",
        scopes="load, compute, store: one of each per CTA",
        size=f"{n:,} fp32, BLOCK={block}",
        constexprs={"BLOCK": block},
        options={"num_warps": 4},
        signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n_elements": "i32"},
        grid=grid,
        make_launch=make_launch,
        records_per_warp=uniform(grid, 6),
        tolerance=(1e-5, 1e-5),
    )
    return problem


# --- issue 7: benchmarks/buffers/ ---------------------------------------------------------


@triton.jit
def four_scopes_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    """(2x + 1)^2, memory-bound. Four straight-line scopes, each a begin and its end in one
    block: every warp writes four pair entries (eight records) per launch, a bound the compiler
    can see."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    with scopes.scope("load"):
        x = tl.load(x_ptr + offsets, mask=mask)
    with scopes.scope("scale"):
        y = x * 2.0 + 1.0
    with scopes.scope("square"):
        z = y * y
    with scopes.scope("store"):
        tl.store(out_ptr + offsets, z, mask=mask)


@triton.jit
def one_scope_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    """out = (2x + 1)^2 in one scope: a short launch of few records, for finalize's many-launch
    shape (issue 24)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    with scopes.scope("all"):
        y = 2.0 * tl.load(x_ptr + offsets, mask=mask) + 1.0
        tl.store(out_ptr + offsets, y * y, mask=mask)


@triton.jit
def short_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    """out = x + y with three straight-line scopes: a short kernel for host-side costs."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    with scopes.scope("load"):
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
    with scopes.scope("add"):
        z = x + y
    with scopes.scope("store"):
        tl.store(out_ptr + offsets, z, mask=mask)


@triton.jit
def descriptor_add_kernel(x_desc, y_desc, out_desc, BLOCK: tl.constexpr):
    """short_add with TensorDescriptor arguments: the launch path of host-side TMA descriptors."""
    offset = tl.program_id(0) * BLOCK
    with scopes.scope("load"):
        x = x_desc.load([offset])
        y = y_desc.load([offset])
    with scopes.scope("add"):
        z = x + y
    with scopes.scope("store"):
        out_desc.store([offset], z)


@triton.jit
def sized_sum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """A row's chunks of BLOCK summed, one CTA a row, a scope a chunk: a loop of
    cdiv(n_cols, BLOCK) steps, so that segments are sized at each launch (issue 24)."""
    row = tl.program_id(0)
    columns = tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for step in range(0, tl.cdiv(n_cols, BLOCK)):
        with scopes.scope("load"):
            offsets = step * BLOCK + columns
            total += tl.load(x_ptr + row * n_cols + offsets, mask=offsets < n_cols, other=0.0)
    with scopes.scope("store"):
        tl.store(out_ptr + row * BLOCK + columns, total)


@triton.jit
def sized_descriptor_sum_kernel(x_desc, out_desc, n_cols, BLOCK: tl.constexpr):
    """sized_sum with 1-D TensorDescriptor arguments: the launch path of a launch-sized kernel
    taking host-side TMA descriptors, as a TMA matmul's K loop is."""
    row = tl.program_id(0)
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for step in range(0, tl.cdiv(n_cols, BLOCK)):
        with scopes.scope("load"):
            total += x_desc.load([row * n_cols + step * BLOCK])
    with scopes.scope("store"):
        out_desc.store([row * BLOCK], total)


@triton.jit
def tuned_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    """out = x + y in one scope; ``tuned_add`` autotunes BLOCK and the warps."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    with scopes.scope("add"):
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + y, mask=mask)


TUNED_ADD_SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32"}


def tuned_add_configs() -> list[triton.Config]:
    """Two configs far apart in speed on a large add: one warp of 64 elements per CTA against
    four warps of 2048, so that the choice does not depend on noise."""
    return [triton.Config({"BLOCK": 64}, num_warps=1), triton.Config({"BLOCK": 2048}, num_warps=4)]


def tuned_add():
    """A fresh autotuned add: a new JIT wrapper and an empty tuning cache each call."""
    fresh_kernel = triton.jit(tuned_add_kernel.fn)
    return triton.autotune(configs=tuned_add_configs(), key=["n_elements"])(fresh_kernel)


def _elementwise(
    name: str, fn: Any, ctas: int, block: int, num_warps: int, inputs: int, scope_names: tuple[str, ...]
) -> Problem:
    """An fp32 elementwise problem of ``ctas`` CTAs with straight-line scopes: 2 records each
    per warp. ``inputs`` is 1 (four_scopes: (2x + 1)^2) or 2 (x + y)."""
    n = ctas * block
    grid = (ctas, 1, 1)

    def make_launch() -> Launch:
        import torch

        tensors = [torch.randn(n, device="cuda") for _ in range(inputs)]
        out = torch.empty_like(tensors[0])
        names = ["x_ptr", "y_ptr"][:inputs]
        values = {**dict(zip(names, tensors, strict=True)), "out_ptr": out, "n_elements": n}

        def reference() -> list[Any]:
            return [(2.0 * tensors[0] + 1.0) ** 2 if inputs == 1 else tensors[0] + tensors[1]]

        return Launch(problem.ordered_args(values), grid, [out], reference)

    signature = {name: "*fp32" for name in ["x_ptr", "y_ptr"][:inputs]}
    problem = Problem(
        name=name,
        fn=fn,
        kind="elementwise, memory-bound",
        scopes=", ".join(scope_names) + ": straight-line, one of each per warp",
        size=f"{n:,} fp32, BLOCK={block}, {ctas} CTAs x {num_warps} warps",
        constexprs={"BLOCK": block},
        options={"num_warps": num_warps},
        signature={**signature, "out_ptr": "*fp32", "n_elements": "i32"},
        grid=grid,
        make_launch=make_launch,
        records_per_warp=uniform(grid, 2 * len(scope_names)),
        tolerance=(1e-5, 1e-6),
    )
    return problem


def four_scopes(ctas: int = 16384) -> Problem:
    """The large grid of issue 7: 16384 CTAs x 8 warps x 4 pairs = 1,048,576 records a launch."""
    return _elementwise(
        "four_scopes", four_scopes_kernel, ctas, 2048, 8, 1, ("load", "scale", "square", "store")
    )


def one_scope(ctas: int = 16) -> Problem:
    """16 CTAs x 4 warps, one scope a warp: 128 records a launch (issue 24's many-launch shape)."""
    return _elementwise("one_scope", one_scope_kernel, ctas, 512, 4, 1, ("all",))


def short_add(ctas: int = 256) -> Problem:
    """A short kernel for host-side costs and CUDA graphs: 256 CTAs x 4 warps, 3 scopes."""
    return _elementwise("short_add", short_add_kernel, ctas, 512, 4, 2, ("load", "add", "store"))


def descriptor_add(ctas: int = 256) -> Problem:
    """short_add taking three 1-D TensorDescriptors (a TMA box holds at most 256 elements):
    256 CTAs x 4 warps, 3 scopes."""
    block = 256
    n = ctas * block
    grid = (ctas, 1, 1)

    def make_launch() -> Launch:
        import torch
        from triton.tools.tensor_descriptor import TensorDescriptor

        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        values = {
            name: TensorDescriptor.from_tensor(tensor, [block])
            for name, tensor in (("x_desc", x), ("y_desc", y), ("out_desc", out))
        }
        return Launch(problem.ordered_args(values), grid, [out], lambda: [x + y])

    descriptor = "tensordesc<fp32[256]>"
    problem = Problem(
        name="descriptor_add",
        fn=descriptor_add_kernel,
        kind="elementwise, TMA descriptors (host)",
        scopes="load, add, store: straight-line, one of each per warp",
        size=f"{n:,} fp32, BLOCK={block}, {ctas} CTAs x 4 warps",
        constexprs={"BLOCK": block},
        options={"num_warps": 4},
        signature={"x_desc": descriptor, "y_desc": descriptor, "out_desc": descriptor},
        grid=grid,
        make_launch=make_launch,
        records_per_warp=uniform(grid, 6),
        tolerance=(1e-5, 1e-6),
    )
    return problem


SIZED_STEPS = 4  # chunks a row: the loop's trip count, known only at launch


def _sized_sum(name: str, fn: Any, descriptors: bool, ctas: int) -> Problem:
    """A launch-sized row sum of ``ctas`` rows of SIZED_STEPS chunks of 256 fp32. The inputs are
    small integers, so that any order of the additions gives torch's sums bitwise."""
    block = 256
    n_cols = SIZED_STEPS * block
    grid = (ctas, 1, 1)

    def make_launch() -> Launch:
        import torch

        x = torch.randint(-8, 8, (ctas, n_cols), device="cuda").float()
        out = torch.empty(ctas * block, device="cuda")
        if descriptors:
            from triton.tools.tensor_descriptor import TensorDescriptor

            values = {
                "x_desc": TensorDescriptor.from_tensor(x.view(-1), [block]),
                "out_desc": TensorDescriptor.from_tensor(out, [block]),
            }
        else:
            values = {"x_ptr": x, "out_ptr": out}
        values["n_cols"] = n_cols
        return Launch(
            problem.ordered_args(values),
            grid,
            [out],
            lambda: [x.view(ctas, SIZED_STEPS, block).sum(1).view(-1)],
        )

    pointers = ("x_desc", "out_desc") if descriptors else ("x_ptr", "out_ptr")
    kind = f"tensordesc<fp32[{block}]>" if descriptors else "*fp32"
    problem = Problem(
        name=name,
        fn=fn,
        kind="row sums, a loop sized at launch" + (", TMA descriptors (host)" if descriptors else ""),
        scopes=f"load in each of the {SIZED_STEPS} steps of a loop of cdiv(n_cols, BLOCK), store once",
        size=f"{ctas} rows x {n_cols:,} fp32, BLOCK={block}, {ctas} CTAs x 4 warps",
        constexprs={"BLOCK": block},
        options={"num_warps": 4},
        signature={**{p: kind for p in pointers}, "n_cols": "i32"},
        grid=grid,
        make_launch=make_launch,
        records_per_warp=uniform(grid, 2 * SIZED_STEPS + 2),
        tolerance=(0.0, 0.0),
    )
    return problem


def sized_sum(ctas: int = 256) -> Problem:
    """A short launch-sized kernel with pointer arguments: 256 CTAs x 4 warps, 5 scopes a warp."""
    return _sized_sum("sized_sum", sized_sum_kernel, False, ctas)


def sized_descriptor_sum(ctas: int = 256) -> Problem:
    """sized_sum taking TensorDescriptors."""
    return _sized_sum("sized_descriptor_sum", sized_descriptor_sum_kernel, True, ctas)


def buffer_problems() -> list[Problem]:
    """The kernels benchmarks/buffers/ adds, for compile_check.py."""
    return [four_scopes(), one_scope(), short_add(), descriptor_add(), sized_sum(), sized_descriptor_sum()]
