"""Segments sized at each launch: a kernel whose loops run a number of times computed from its
arguments and grid (``contract.launch_bound``) gets, at each launch, a capacity that holds every
record of its busiest unit, rounded up to a power of two.

The launch's kernel is a variant of the loaded kernel (``KernelInfo``) whose layout and
capacity are that launch's, made once per capacity: everything downstream (the drain, the
session file, the viewer) sees an ordinary kernel of that layout. The buffer address handed to
Triton carries log2(capacity) in its low bits (``contract.layout.CAPACITY_SHIFT_MASK``), which
the kernel reads and clears.

Where the launch path passes no arguments, or they give no bound, or the bound would not fit
the pool, the launch gets a ring, and its capacity's reason says why.

Also here: the buffer of a kernel that samples CTAs (``buffer_request``), only its sampled
CTAs' regions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from proton_ik.contract.layout import min_capacity, ring_capacity
from proton_ik.contract.metadata import Capacity
from proton_ik.runtime.loaded import KERNELS, KernelInfo


def argument_positions(compiled: Any, count: int, wanted: Sequence[str]) -> dict[str, int] | None:
    """Where each parameter in ``wanted`` sits among ``count`` launch arguments: Triton's JIT
    passes every parameter, Inductor's launchers the ones that are not constexprs. None where
    the arguments match neither."""
    source = getattr(compiled, "src", None)
    names = list(getattr(getattr(source, "fn", None), "arg_names", None) or ())
    if len(names) != count:
        signature = getattr(source, "signature", None) or {}
        names = [name for name in names if signature.get(name) != "constexpr"]
    if len(names) != count or not set(wanted) <= set(names):
        return None
    return {name: names.index(name) for name in wanted}


SIZES_REMEMBERED = 4096  # per kernel: distinct (arguments, grid) whose variant is kept


def sized_kernel(kernel: KernelInfo, capacity: int, source: str, reason: str) -> KernelInfo:
    """The variant of a launch-sized kernel whose segments hold ``capacity`` slots, made once."""
    key = (capacity, source, reason)
    variant = kernel.variants.get(key)
    if variant is None:
        metadata = kernel.metadata
        layout = dataclasses.replace(metadata.layout, capacity=capacity)
        sized = dataclasses.replace(
            metadata,
            layout=layout,
            capacity=Capacity(capacity, source, None, reason),  # type: ignore[arg-type]
        )
        variant = KernelInfo(kernel.name, kernel.num_warps, layout.cta_bytes, sized, sized.to_dict())
        kernel.variants[key] = variant
    return variant


def _ring(kernel: KernelInfo, why: str, capacity: int | None = None) -> KernelInfo:
    capacity = capacity or kernel.layout.capacity
    bound = kernel.metadata.launch_bound
    assert bound is not None
    return sized_kernel(
        kernel, capacity, "ring", f"{bound.reason}, but {why}; a ring of {capacity} slots keeps the newest"
    )


def untagged(kernel: KernelInfo) -> KernelInfo:
    """The launch's kernel where the launch path announced nothing, so that the allocator could
    not tell the kernel its capacity: the kernel read the smallest ring from the address."""
    return _ring(
        kernel,
        "this launch path did not announce the launch to proton_ik (it called a launch_metadata "
        "bound before the session started), so the launch had no capacity to read",
        min_capacity(kernel.layout.version),
    )


def launch_kernel(
    kernel: KernelInfo, compiled: Any, grid: Sequence[int], args: Sequence[Any], ctas: int, max_bytes: int
) -> KernelInfo:
    """The kernel variant of one launch of ``ctas`` CTAs, whose buffer may take ``max_bytes``:
    the bound evaluated at the launch's arguments and grid (``launch_buffer`` remembers it)."""
    bound = kernel.metadata.launch_bound
    assert bound is not None and kernel.bound_entries is not None
    positions = kernel.positions.get(len(args), False)
    if positions is False:
        positions = kernel.positions[len(args)] = argument_positions(compiled, len(args), bound.arguments)
    if positions is None:
        return _ring(
            kernel,
            f"the launch passed {len(args)} arguments, which proton_ik cannot match to the kernel's "
            f"parameters {list(bound.arguments)}",
        )
    return _sized(kernel, grid, {name: args[at] for name, at in positions.items()}, ctas, max_bytes)


# What a launch-sized kernel's launch gets: (the variant it runs as, its CTAs, its buffer's bytes,
# its address's tag)
SizedBuffer = tuple[KernelInfo, int, int, int]


def launch_buffer(kernel: KernelInfo, upcoming: Upcoming, size: int, max_bytes: int) -> SizedBuffer:
    """The buffer of a launch of a launch-sized ``kernel`` that Triton asked ``size`` bytes for (a
    region for each CTA of the grid), whose buffer may take ``max_bytes``. Remembered per (the
    request, the grid, the bound's arguments): a program repeats its launches' sizes, and
    evaluating the bound and the buffer's bytes costs microseconds a launch, where this lookup
    costs a fraction of one."""
    _, grid, compiled, args = upcoming
    key = _sizes_key(kernel, size, max_bytes, grid, args)
    try:
        found = None if key is None else kernel.sized_launches.get(key)
    except TypeError:  # an argument or a grid that cannot be a key: evaluated every time
        found = key = None
    if found is not None:
        return found
    ctas = size // kernel.cta_bytes
    variant = launch_kernel(kernel, compiled, grid, args, ctas, max_bytes)
    found = (
        variant,
        ctas,
        variant.layout.sampling.buffer_bytes(ctas, variant.cta_bytes),
        pointer_tag(variant),
    )
    key = key or _sizes_key(kernel, size, max_bytes, grid, args)  # the first launch found the positions
    if key is not None:
        if len(kernel.sized_launches) >= SIZES_REMEMBERED:
            kernel.sized_launches.clear()  # sizes that keep changing: start over rather than grow
        with contextlib.suppress(TypeError):  # a key that cannot be hashed: not remembered
            kernel.sized_launches[key] = found
    return found


def _sizes_key(kernel: KernelInfo, size: int, max_bytes: int, grid: Any, args: Sequence[Any]) -> tuple | None:
    """What a launch's buffer depends on; None before the bound's arguments are found among
    ``args``, or where they are not."""
    positions = kernel.positions.get(len(args))
    if positions is None:  # not found yet, or not among these arguments ({}: the bound reads none)
        return None
    return (size, max_bytes, grid, *[args[at] for at in positions.values()])


def _sized(
    kernel: KernelInfo, grid: Sequence[int], values: dict[str, Any], ctas: int, max_bytes: int
) -> KernelInfo:
    """The kernel variant that the bound's evaluation at these arguments calls for."""
    bound = kernel.metadata.launch_bound
    assert bound is not None and kernel.bound_entries is not None
    entries = kernel.bound_entries(grid, values)
    if entries is None:
        return _ring(
            kernel,
            "this launch's arguments give no bound (a step that is not positive, a divisor that may "
            "be 0, or arithmetic that wraps)",
        )
    needed = capacity = ring_capacity(entries, kernel.layout.version)
    sampling = kernel.layout.sampling
    while capacity > min_capacity(kernel.layout.version) and not _fits(kernel, capacity, ctas, max_bytes):
        capacity //= 2
    if capacity < needed:
        return _ring(
            kernel,
            f"at this launch a unit writes up to {entries} slots, more than the device pool holds for "
            f"{sampling.cta_slots(ctas)} CTAs (raise pool_bytes)",
            capacity,
        )
    return sized_kernel(
        kernel,
        capacity,
        "launch",
        f"{bound.reason}: sized at the launch to {capacity} slots per unit, which hold every record",
    )


def _fits(kernel: KernelInfo, capacity: int, ctas: int, max_bytes: int) -> bool:
    try:
        layout = dataclasses.replace(kernel.layout, capacity=capacity)
    except ValueError:  # over the 32-bit CTA stride
        return False
    return layout.sampling.buffer_bytes(ctas, layout.cta_bytes) <= max_bytes


def pointer_tag(kernel: KernelInfo) -> int:
    """What a launch-sized kernel's buffer address carries in its low bits: log2(capacity)."""
    return kernel.layout.capacity.bit_length() - 1


def grid_ctas(grid: Any) -> int | None:
    """The CTAs of a launch grid of 1 to 3 extents; None for a grid this cannot read (then
    Triton's request stands)."""
    try:
        extents = [int(extent) for extent in grid]
    except (TypeError, ValueError):
        return None
    if not 1 <= len(extents) <= 3 or min(extents) < 0:
        return None
    return math.prod(extents)


# What ``launch_metadata`` announces of the launch about to be made: (function, grid, the
# CompiledKernel, the launch's arguments)
Upcoming = tuple[int, Any, Any, tuple]


def buffer_request(size: int, upcoming: Upcoming | None) -> tuple[int | None, int]:
    """The launch's CTAs, where known, and the bytes its buffer needs, for Triton's request of
    ``size`` bytes when ``upcoming`` (function, grid) announced the launch: only the sampled
    CTAs' regions where the launching kernel samples CTAs and Triton asked for a region for each
    CTA of that grid; anything else (a cluster launch, a kernel not ours) gets all ``size``
    bytes, as Triton asked."""
    kernel = KERNELS.get(upcoming[0]) if upcoming is not None else None
    if kernel is None or upcoming is None or kernel.every_cta:
        return None, size
    ctas = grid_ctas(upcoming[1])
    if ctas is None or size != ctas * kernel.cta_bytes:
        return None, size
    return ctas, kernel.layout.sampling.buffer_bytes(ctas, kernel.cta_bytes)
