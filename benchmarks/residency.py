"""How many CTAs of a kernel one SM holds at once: CUDA's occupancy rule, for sm_90.

The rule has one home, ``proton_ik.lowering.occupancy`` (``occupancy=keep`` uses it to cap
registers); the benchmarks report what it finds for the kernels they time:

- Registers are allocated per warp, ``regs x 32`` rounded up to 256, from each of the SM's four
  sub-partitions (16384 registers each): a sub-partition holds ``16384 // per-warp`` warps.
- At most 64 warps and 32 CTAs per SM.
- Shared memory: the CTA's (Triton's ``metadata.shared``) plus 1 KiB that the driver reserves
  per CTA, rounded up to 128 bytes, out of 228 KiB per SM; at most 227 KiB per CTA.

Pure arithmetic: no GPU, no torch.
"""

from __future__ import annotations

from proton_ik.lowering.occupancy import SM_LIMITS, Residency, residency
from proton_ik.lowering.occupancy import SmLimits as SMLimits

__all__ = ["SM90", "Residency", "SMLimits", "resident_ctas"]

SM90 = SM_LIMITS[90]


def resident_ctas(registers: int, warps: int, shared: int, sm: SMLimits = SM90) -> Residency:
    """Resident CTAs per SM of a kernel using ``registers`` per thread, ``warps`` per CTA and
    ``shared`` bytes of shared memory per CTA (0 CTAs: the kernel cannot launch)."""
    return residency(registers, warps, shared, sm)
