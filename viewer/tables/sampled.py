"""Which CTAs and warps of a launch recorded, in words, for the launch table, traces and summary."""

from __future__ import annotations

import math
from collections.abc import Sequence

from proton_ik.contract.sampling import Sampling


def sampled_text(
    sampling: Sampling, grid: Sequence[int] | None, warps_per_unit: int, num_warps: int | None
) -> str | None:
    """``"CTAs 0, 4, 8, ... (16 of 64); warps 0, 2 of 4"``; None where every CTA and unit recorded.
    ``grid``: the launch's %nctaid, where a CTA header gave it."""
    if sampling.every_cta and sampling.every_unit:
        return None
    parts = []
    if not sampling.every_cta:
        stride = sampling.cta_stride
        ctas = _listed(sampling.cta_ids) if sampling.cta_ids else f"0, {stride}, {2 * stride}, ..."
        text = f"CTAs {ctas}"
        if grid:
            total = math.prod(int(g) for g in grid)
            text += f" ({sampling.cta_slots(total)} of {total})"
        parts.append(text)
    if not sampling.every_unit:
        first_warps = [unit * warps_per_unit for unit in sampling.unit_ids]
        if warps_per_unit == 1:
            text = f"warps {_listed(first_warps)}"
        else:
            text = "warpgroups of warps " + ", ".join(f"{w}-{w + warps_per_unit - 1}" for w in first_warps)
        parts.append(text + (f" of {num_warps}" if num_warps else ""))
    return "; ".join(parts)


def _listed(ids: Sequence[int]) -> str:
    return ", ".join(map(str, ids))
