"""The whole lowering, PTX in and PTX out: collect, assign, check, bound, convert, splice."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from xdsl.dialects.builtin import ModuleOp

from proton_ik.contract.launch_bound import LaunchBound
from proton_ik.contract.layout import VERSION, BufferLayout, min_capacity, ring_capacity
from proton_ik.contract.metadata import Capacity, KernelMetadata, Occupancy, Scope, write_compile_metadata
from proton_ik.contract.sampling import Sampling
from proton_ik.dialect import make_context
from proton_ik.dialect.markers import MARKER_PREFIX
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering import ptx_text, staging, ttir_text
from proton_ik.lowering.assign_scope_ids import AssignScopeIds, scope_table
from proton_ik.lowering.bound import EntryBound, entry_bound, entry_records, recording_loops
from proton_ik.lowering.check_scopes import CheckScopes
from proton_ik.lowering.collect import collect_markers
from proton_ik.lowering.kernel_scope import around_kernel
from proton_ik.lowering.pik_to_pikgpu import ConvertPikToPikGPU, scope_count, unit_count
from proton_ik.lowering.pikgpu_to_ptx import lower_to_ptx
from proton_ik.lowering.sampling_ptx import layout_sampling
from proton_ik.mode import AUTO, DEFAULT_RING_CAPACITY, Mode


def choose_capacity(mode: Mode, bound: EntryBound, units: int, version: int = VERSION) -> Capacity:
    """Ring slots per unit under ``mode``, for a kernel whose units write at most ``bound``.

    With capacity=auto a segment holds the bound rounded up to a power of two, since the PTX
    finds a slot with one AND (``count & (capacity - 1)``): at most twice the bound, and no
    slot is ever overwritten."""
    if mode.aggregate:
        reason = "aggregate=on: per-scope statistics per unit, sized by the scope count, not by trip counts"
        return Capacity(0, "aggregate", None, reason)
    if mode.capacity != AUTO:
        return Capacity(
            mode.capacity, "option", bound.entries, f"capacity={mode.capacity} is set in the mode"
        )
    ring = f"a ring of {DEFAULT_RING_CAPACITY} slots keeps the newest"
    if bound.entries is None and bound.launch is not None:
        return Capacity(
            DEFAULT_RING_CAPACITY,
            "launch",
            None,
            f"{bound.reason}: each launch sizes its segments to hold every record ({ring} where the "
            "launch path does not pass the kernel's arguments)",
        )
    if bound.entries is None:
        return Capacity(DEFAULT_RING_CAPACITY, "ring", None, f"{bound.reason}; {ring}")
    entries = ring_capacity(bound.entries, version)
    try:
        BufferLayout(units=units, capacity=entries, version=version)
    except ValueError as error:
        # The layout is the one place that knows its limits (the 32-bit CTA stride).
        return Capacity(DEFAULT_RING_CAPACITY, "ring", bound.entries, f"{bound.reason}, but {error}; {ring}")
    return Capacity(entries, "bound", bound.entries, bound.reason)


@dataclass
class Instrumented:
    ptx: str
    layout: BufferLayout
    scopes: tuple[Scope, ...]
    pik: ModuleOp
    capacity: Capacity
    occupancy: Occupancy | None = None  # occupancy=keep: set by ``occupancy.keep``
    launch_bound: LaunchBound | None = None  # segments sized at each launch from this bound


def instrument(
    ptx: str,
    mode: Mode,
    num_warps: int,
    ttir: str | None = None,
    staging_fits: Callable[[int], bool] | None = None,
) -> Instrumented | None:
    """Instrument a kernel's PTX, or return None if it has no scopes (then the PTX is untouched;
    under ``unscoped=kernel`` such a kernel gets one scope around its body instead).

    ``ttir`` is the kernel's TTIR text where the compile had one: it bounds the entries of
    scopes inside loops with a constant trip count, which the PTX alone cannot.
    ``staging_fits(units)``: whether that many units' stages fit the kernel's shared memory
    (``staging.fits``). A kernel whose units write at most a stage of pairs stages them there."""
    collected = _collected(ptx, mode, ttir)
    if collected is None:
        return None
    ptx, module = collected
    context = make_context()
    AssignScopeIds().apply(context, module)
    CheckScopes().apply(context, module)
    module.verify()
    scopes = tuple(Scope(**cast(dict[str, Any], scope)) for scope in scope_table(module))
    pik_text = module.clone()
    sampling = _sampling(ptx, mode, num_warps)
    version = layout_version(mode, ptx, module)
    bound = entry_bound(ptx, entry_records(module, mode.pairs, version), ttir, version)
    units = len(sampling.unit_ids) or unit_count(mode.granularity, num_warps)
    capacity = choose_capacity(mode, bound, units, version)
    convert = _converter(mode, module, num_warps, sampling, capacity, version)
    convert.apply(context, module)
    module.verify()
    return Instrumented(
        lower_to_ptx(module, ptx, _staged(capacity, units, version, staging_fits)),
        convert.layout(),
        scopes,
        pik_text,
        capacity,
        launch_bound=bound.launch if capacity.source == "launch" else None,
    )


# Tensor-core instructions: a kernel that issues them is bound by them, not by the records' bytes.
_TENSOR_CORE = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:wgmma|mma|tcgen05)\.", re.MULTILINE)
# The kernel's own global memory traffic, which the records' bytes compete with.
_GLOBAL_MEMORY = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:(?:ld|st|red|atom)\.(?:[\w:]+\.)*global\b|cp\.async\b)")


def layout_version(mode: Mode, ptx: str, module: ModuleOp) -> int:
    """The buffer layout a kernel writes: the mode's, or, with ``layout=auto``, version 3 where
    a record is stored inside a loop that moves global memory, in a kernel that issues no
    tensor-core instruction; version 2 elsewhere. Version 3's half bytes paid in such loops
    (add_rms_norm on an H100: +2.1% to +0.5%), where the records' traffic shares the memory
    system with the kernel's; its longer pair end cost more than it saved in K loops of
    tensor-core matmuls and attention, and in short kernels (docs/PERFORMANCE.md, issue 28).
    A loop that moves no memory pays the longer pair end for nothing."""
    if mode.layout != AUTO:
        return int(mode.layout)
    if mode.aggregate:  # no ring: nothing for the slots to save
        return VERSION
    if isinstance(mode.capacity, int) and mode.capacity < min_capacity(3):
        return VERSION  # a ring of one: the one layout that has it
    if _TENSOR_CORE.search(ptx):
        return VERSION
    loops = recording_loops(ptx, entry_records(module, mode.pairs, VERSION))
    return 3 if any(_GLOBAL_MEMORY.match(line) for loop in loops for line in loop) else VERSION


def may_instrument(ptx: str, mode: Mode) -> bool:
    """Whether ``instrument`` may instrument ``ptx`` (False: it surely compiles plain), read
    without parsing it: a marker in it, or ``unscoped=kernel``."""
    return MARKER_PREFIX in ptx or mode.unscoped == "kernel"


def _collected(ptx: str, mode: Mode, ttir: str | None) -> tuple[str, ModuleOp] | None:
    """The PTX to instrument and its ``pik`` module of markers; None where it has no scope (and
    ``unscoped=kernel`` gives it none). Warns of the TTIR's scopes that the PTX lost."""
    module = collect_markers(ptx)
    if ttir is not None:
        warn_of_scopes_lost_or_emptied(ptx_text.kernel_name(ptx), ttir, module)
    if any(True for _ in module.body.block.ops):
        return ptx, module
    wrapped = around_kernel(ptx) if mode.unscoped == "kernel" else None
    return None if wrapped is None else (wrapped, collect_markers(wrapped))


def _sampling(ptx: str, mode: Mode, num_warps: int) -> Sampling:
    try:
        return layout_sampling(mode, num_warps)
    except ValueError as error:
        raise ValueError(f"proton_ik: kernel '{ptx_text.kernel_name(ptx)}': {error}") from None


def _converter(
    mode: Mode, module: ModuleOp, num_warps: int, sampling: Sampling, capacity: Capacity, version: int
) -> ConvertPikToPikGPU:
    return ConvertPikToPikGPU(
        mode.granularity.value,
        capacity.entries,
        num_warps,
        pair_scopes=mode.pairs,
        aggregate_scopes=scope_count(module) if mode.aggregate else 0,
        cta_stride=sampling.cta_stride,
        cta_ids=sampling.cta_ids,
        unit_ids=sampling.unit_ids,
        launch_sized=capacity.source == "launch",
        layout_version=version,
    )


def _staged(capacity: Capacity, units: int, version: int, staging_fits: Callable[[int], bool] | None) -> bool:
    """Whether the pairs go through shared memory: every slot the code lets a unit write fits
    its stage and its ring, and the stages fit the kernel's shared memory."""
    most = capacity.bound  # the most slots the code lets a unit write
    return (
        staging_fits is not None
        and most is not None
        and staging.stages(most, version)
        and most <= capacity.entries
        and staging_fits(units)
    )


def warn_of_scopes_lost_or_emptied(kernel: str, ttir: str, module: ModuleOp) -> None:
    """Warn of each name the trace would get wrong with no word said. Triton's warp
    specialization of a loop (``tl.range(..., warp_specialize=True)``) is the known cause: it
    removes the markers inside the loop, and leaves the markers after it outside the warps that
    run the loop and what follows it, so that a scope around or after the loop measures nothing.
    Any other name whose markers the TTIR holds and the PTX lacks was removed by Triton or LLVM."""
    kept = {op.scope.data for op in module.body.block.ops if isinstance(op, RecordOp)}
    try:
        found = ttir_text.markers(ttir)
    except ValueError:  # TTIR this reader does not follow: nothing to compare against
        return
    why: dict[str, tuple[ttir_text.TtirMarker, str]] = {}
    for marker in found:
        if marker.name in why:
            continue
        if marker.name not in kept and marker.warp_specialized_loop is not None:
            why[marker.name] = (
                marker,
                f"is not recorded: Triton's warp specialization of the loop at {marker.warp_specialized_loop} "
                "(tl.range(..., warp_specialize=True)) removed its markers. Profile this kernel without "
                "warp_specialize=True",
            )
        elif marker.name not in kept:
            why[marker.name] = (
                marker,
                "is not recorded: Triton or LLVM removed its markers after the TTIR stage (is its code reachable?)",
            )
        elif marker.after_warp_specialized_loop is not None:
            why[marker.name] = (
                marker,
                f"cannot be trusted: Triton moves the loop at {marker.after_warp_specialized_loop} "
                "(tl.range(..., warp_specialize=True)) and the code after it into warp-specialized "
                "partitions and leaves the scope's markers outside them, so a scope around or after "
                "that loop reads about 0 cycles. Profile this kernel without warp_specialize=True",
            )
    for name, (marker, reason) in why.items():
        where = f" ({marker.line})" if marker.line else ""
        warnings.warn(f"proton_ik: kernel '{kernel}': '{name}'{where} {reason}.", stacklevel=2)


def kernel_metadata(result: Instrumented, mode: Mode, num_warps: int) -> KernelMetadata:
    """What goes into the compiled kernel's metadata, for the runtime and the viewer."""
    return KernelMetadata(
        layout=result.layout,
        scopes=result.scopes,
        warps_per_unit=mode.granularity.warps_per_unit(num_warps),
        num_warps=num_warps,
        mode=str(mode),
        capacity=result.capacity,
        occupancy=result.occupancy,
        launch_bound=result.launch_bound,
    )


def update_metadata(metadata: dict, result: Instrumented, mode: Mode, num_warps: int) -> None:
    write_compile_metadata(metadata, kernel_metadata(result, mode, num_warps))
