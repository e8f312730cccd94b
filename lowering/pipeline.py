"""The whole lowering, PTX in and PTX out: collect, assign, check, convert, splice."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp

from proton_ik.dialect import make_context
from proton_ik.layout import CTA_ALIGN, BufferLayout
from proton_ik.lowering.assign_scope_ids import AssignScopeIds, scope_table
from proton_ik.lowering.check_scopes import CheckScopes
from proton_ik.lowering.collect import collect_markers
from proton_ik.lowering.pik_to_pikgpu import ConvertPikToPikGPU
from proton_ik.lowering.pikgpu_to_ptx import lower_to_ptx
from proton_ik.mode import Mode

METADATA_KEY = "proton_ik"


@dataclass
class Instrumented:
    ptx: str
    layout: BufferLayout
    scopes: list[dict[str, object]]
    pik: ModuleOp


def instrument(ptx: str, mode: Mode, num_warps: int) -> Instrumented | None:
    """Instrument a kernel's PTX, or return None if it has no scopes (then the PTX is untouched)."""
    module = collect_markers(ptx)
    if not any(True for _ in module.body.block.ops):
        return None
    context = make_context()
    AssignScopeIds().apply(context, module)
    CheckScopes().apply(context, module)
    module.verify()
    scopes = scope_table(module)
    pik_text = module.clone()
    convert = ConvertPikToPikGPU(mode.granularity.value, mode.capacity, num_warps, pair_scopes=mode.pairs)
    convert.apply(context, module)
    module.verify()
    return Instrumented(lower_to_ptx(module, ptx), convert.layout(), scopes, pik_text)


def kernel_metadata(result: Instrumented, mode: Mode, num_warps: int) -> dict[str, object]:
    """What goes into the compiled kernel's metadata JSON, for the runtime and the viewer."""
    return {
        "mode": str(mode),
        "num_warps": num_warps,
        "warps_per_unit": mode.granularity.warps_per_unit(num_warps),
        "layout": result.layout.to_dict(),
        "scopes": result.scopes,
    }


def update_metadata(metadata: dict, result: Instrumented, mode: Mode, num_warps: int) -> None:
    metadata["profile_scratch_size"] = result.layout.cta_bytes
    metadata["profile_scratch_align"] = CTA_ALIGN
    metadata[METADATA_KEY] = kernel_metadata(result, mode, num_warps)
