"""A ``Problem``: one kernel at one size, with the exact records each warp writes per launch.

torch is imported only inside the input builders, so the kernel modules import on a machine without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Launch:
    """One launch's inputs: every kernel parameter in order (constexpr values included), the
    tensors the kernel writes, and a function computing their reference values with torch."""

    args: tuple
    grid: tuple[int, int, int]
    outputs: list[Any]
    reference: Callable[[], list[Any]]


@dataclass(frozen=True)
class Problem:
    """One kernel at one size."""

    name: str
    fn: Any  # a JITFunction (Triton DSL) or a GluonJITFunction
    kind: str
    scopes: str  # where the scopes are, as the report prints it
    size: str
    constexprs: dict[str, Any]
    options: dict[str, int]  # num_warps, num_stages, maxnreg
    signature: dict[str, str]  # types of the runtime arguments, for a compile without a GPU
    grid: tuple[int, int, int]
    make_launch: Callable[[], Launch]
    # records each warp writes in one launch, shape (CTAs, warps per CTA), given the compiled
    # kernel's warps per CTA (warp specialization adds warps to num_warps)
    records_per_warp: Callable[[int], np.ndarray]
    tolerance: tuple[float, float]  # (atol, rtol) against the torch reference

    def ordered_args(self, values: dict[str, Any]) -> tuple:
        """The kernel's arguments in parameter order; ``values`` holds the runtime ones."""
        values = {**values, **self.constexprs}
        names = list(self.fn.arg_names)
        if set(values) != set(names):
            raise ValueError(
                f"{self.name}: arguments {sorted(values)} do not match the kernel's parameters {names}"
            )
        return tuple(values[name] for name in names)


def uniform(grid: tuple[int, int, int], per_warp: int) -> Callable[[int], np.ndarray]:
    """``records_per_warp`` of a kernel whose every warp writes ``per_warp`` records."""
    ctas = grid[0] * grid[1] * grid[2]
    return lambda warps: np.full((ctas, warps), per_warp, dtype=np.int64)


def strided_count(start: np.ndarray, stop: int, step: int) -> np.ndarray:
    """len(range(s, stop, step)) for every s in ``start``."""
    return np.maximum(0, -(-(stop - start) // step))
