"""The default mode taken apart, so that each part of a scope's cost can be timed on its own.

- ``markers``: the scope calls emit their markers (non-pure inline asm, kept in program order
  with the kernel's side effects by Triton and LLVM) and the lowering is off: the markers reach
  ptxas as PTX comments. What is left is the order the scopes impose on the compiler, with no
  clock read and no store.
- ``frame``: the markers, and the lowering's prologue and epilogue (the unit's segment address,
  the CTA and unit headers, the start and end clocks), with every record dropped.
- the mode itself, with its records, compiles as proton_ik compiles it (not here).

A part named ``frame/<name>`` is the frame changed by one of ``frame_edits.FRAME_EXPERIMENTS``
(no %globaltimer, no header stores, ...): where the frame's cost goes, in docs/PERFORMANCE.md;
``full/<name>``, the mode with its records changed by one of ``frame_edits.RECORD_EXPERIMENTS``.

A part compiles inside ``proton_ik.instrumented(mode)``, so that the markers are emitted, with an
``instrumentation_mode`` knob of its own (``proton_ik_part:frame:instrumentation:...``). Triton's
cache key holds the knob, so a part never shares a binary with the mode; proton_ik's stage hook
lowers only its own knobs, so it leaves the part's PTX alone, and this module's hook does the
part's lowering. Works without a GPU, like ``proton_ik.instrumented``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from triton import knobs

import proton_ik
from proton_ik.dialect import make_context
from proton_ik.dialect.markers import is_marker
from proton_ik.lowering import ptx_text
from proton_ik.lowering.instrument import Instrumented, instrument, update_metadata
from proton_ik.lowering.pik_to_pikgpu import ConvertPikToPikGPU
from proton_ik.lowering.pikgpu_to_ptx import apply_plan, plan_ptx
from proton_ik.mode import AUTO, Mode

__all__ = ["LABELS", "PARTS", "compiling", "frame_only", "knob"]

PARTS = ("markers", "frame")
LABELS = {"markers": "proton_ik[markers only]", "frame": "proton_ik[prologue+epilogue]"}
EXPERIMENT = "frame/"  # a part named "frame/<name>": the frame, changed by FRAME_EXPERIMENTS[name]
RECORDS_EXPERIMENT = "full/"  # "full/<name>": the mode with its records, changed by RECORD_EXPERIMENTS
KNOB_PREFIX = "proton_ik_part"
LOWERED = "%pik_"  # every register the lowering declares starts so


def knob(part: str, mode: Mode) -> str:
    """The ``instrumentation_mode`` a part of ``mode`` compiles under."""
    _lowering(part)
    return f"{KNOB_PREFIX}:{part}:{mode.knob}"  # with the lowering's fingerprint, as the mode's


def _lowering(part: str) -> Callable[[str, Mode, int, dict], str]:
    """How ``part`` lowers a kernel's PTX."""
    from benchmarks.frame_edits import FRAME_EXPERIMENTS, RECORD_EXPERIMENTS

    for prefix, what, edits, lower in (
        (EXPERIMENT, "frame experiment", FRAME_EXPERIMENTS, _frame_ptx),
        (RECORDS_EXPERIMENT, "records experiment", RECORD_EXPERIMENTS, _full_ptx),
    ):
        if part.startswith(prefix):
            name = part.removeprefix(prefix)
            if name not in edits:
                raise ValueError(f"{what} {name!r}: choose from {', '.join(edits)}")
            return _edited(edits[name], lower)
    if part not in PARTS:
        raise ValueError(f"part {part!r}: choose from {', '.join(PARTS)}")
    return _LOWER[part]


def _edited(
    edit: Callable[[str], str], lower: Callable[[str, Mode, int, dict], str]
) -> Callable[[str, Mode, int, dict], str]:
    return lambda ptx, mode, num_warps, metadata: edit(lower(ptx, mode, num_warps, metadata))


def frame_only(ptx: str, result: Instrumented, mode: Mode, num_warps: int) -> str:
    """``ptx`` lowered as ``instrument`` lowered it into ``result``, with every record site left
    empty: the prologue and the epilogue alone."""
    module = result.pik.clone()
    ConvertPikToPikGPU(
        granularity=mode.granularity.value,
        capacity=result.capacity.entries,
        num_warps=num_warps,
        pair_scopes=mode.pairs,
    ).apply(make_context(), module)
    _, params = ptx_text.entry_params(ptx.splitlines())
    plan = plan_ptx(module, params[-1])
    return apply_plan(ptx, dataclasses.replace(plan, sites={site: [] for site in plan.sites}))


def _markers_ptx(ptx: str, mode: Mode, num_warps: int, metadata: dict) -> str:
    if LOWERED in ptx:
        raise RuntimeError(
            "markers only: the PTX holds proton_ik's lowering; compile with options "
            "instrumentation_mode=scope_parts.knob('markers', mode)"
        )
    return ptx


def _frame_ptx(ptx: str, mode: Mode, num_warps: int, metadata: dict) -> str:
    result = instrument(ptx, mode, num_warps)
    if result is None:
        return ptx
    update_metadata(metadata, result, mode, num_warps)
    return frame_only(ptx, result, mode, num_warps)


def _full_ptx(ptx: str, mode: Mode, num_warps: int, metadata: dict) -> str:
    result = instrument(ptx, mode, num_warps)
    if result is None:
        return ptx
    update_metadata(metadata, result, mode, num_warps)
    return result.ptx


_LOWER: dict[str, Callable[[str, Mode, int, dict], str]] = {"markers": _markers_ptx, "frame": _frame_ptx}


class _PartHook:
    """The stage hook while a part compiles: the hook it replaced first (proton_ik's, which
    leaves a part's knob alone), then the part's lowering of the "ptx" stage."""

    def __init__(self, previous: Any, part: str, mode: Mode) -> None:
        self.previous, self.part, self.mode = previous, part, mode

    def __call__(self, backend, stages, options, language, capability) -> None:
        if self.previous is not None:
            self.previous(backend, stages, options, language, capability)
        wanted = knob(self.part, self.mode)
        given = getattr(options, "instrumentation_mode", "")
        if given != wanted:
            raise RuntimeError(
                f"a kernel compiled in scope_parts.compiling({self.part!r}) with instrumentation_mode "
                f"{given!r}: a direct triton.compile() must pass options instrumentation_mode={wanted!r}"
            )
        if "ptx" not in stages:
            return
        make_ptx, lower = stages["ptx"], _lowering(self.part)

        def part_ptx(src, metadata):
            ptx = make_ptx(src, metadata)
            num_warps = int(metadata.get("num_warps") or options.num_warps)
            return lower(ptx, self.mode, num_warps, metadata)

        stages["ptx"] = part_ptx


@contextlib.contextmanager
def compiling(part: str, mode: Mode | None = None) -> Iterator[str]:
    """Kernels compiled inside the block are ``part`` of ``mode`` (the default mode if None); the
    block yields the knob, which a direct ``triton.compile()`` must pass as its
    ``instrumentation_mode`` option (the JIT copies it from Triton's knobs). Without it the compile
    is refused, or, where Triton's cache holds the plain kernel, that kernel comes back."""
    mode = mode or Mode()
    if mode.aggregate:
        raise ValueError(f"{mode}: the parts are those of a trace mode, not of aggregate=on")
    if mode.layout == AUTO:  # the parts' edits read layout 2's lines, whatever the kernel
        mode = dataclasses.replace(mode, layout=2)
    part_knob = knob(part, mode)
    with proton_ik.instrumented(mode):
        previous = knobs.runtime.add_stages_inspection_hook
        knobs.compilation.instrumentation_mode = part_knob
        knobs.runtime.add_stages_inspection_hook = _PartHook(previous, part, mode)
        try:
            yield part_knob
        finally:
            knobs.runtime.add_stages_inspection_hook = previous
            knobs.compilation.instrumentation_mode = mode.knob


def markers_in(ptx: str) -> int:
    """How many scope markers a kernel's PTX holds."""
    return sum(1 for line in ptx.splitlines() if is_marker(line))
