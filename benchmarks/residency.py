"""How many CTAs of a kernel one SM holds at once: CUDA's occupancy rule, for sm_90.

The rule is the one of CUDA's occupancy calculator (``cuda_occupancy.h``): the resident CTAs are
the fewest that the registers, the warp slots, the CTA slots and the shared memory allow.

- Registers are allocated per warp, ``regs x 32`` rounded up to 256, from each of the SM's four
  sub-partitions (16384 registers each): a sub-partition holds ``16384 // per-warp`` warps.
- At most 64 warps and 32 CTAs per SM.
- Shared memory: the CTA's (Triton's ``metadata.shared``) plus 1 KiB that the driver reserves
  per CTA, rounded up to 128 bytes, out of 228 KiB per SM; at most 227 KiB per CTA.

Pure arithmetic: no GPU, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SM90", "Residency", "SMLimits", "resident_ctas"]


@dataclass(frozen=True)
class SMLimits:
    """One SM's resources, as the occupancy rule counts them."""

    name: str
    registers: int = 65536
    sub_partitions: int = 4
    register_unit: int = 256  # registers are allocated per warp in multiples of this
    max_registers_per_thread: int = 255
    warp_size: int = 32
    max_warps: int = 64
    max_ctas: int = 32
    shared_bytes: int = 228 * 1024
    reserved_shared_per_cta: int = 1024
    shared_unit: int = 128
    max_shared_per_cta: int = 227 * 1024


SM90 = SMLimits("sm_90")


@dataclass(frozen=True)
class Residency:
    """The CTAs one SM holds, and what each resource alone would allow."""

    ctas: int
    by_registers: int
    by_warps: int
    by_ctas: int
    by_shared: int

    @property
    def limited_by(self) -> str:
        """The resources that set ``ctas``, as the report names them: 'registers', 'warps'..."""
        limits = {
            "registers": self.by_registers,
            "warps": self.by_warps,
            "CTA slots": self.by_ctas,
            "shared memory": self.by_shared,
        }
        return ", ".join(name for name, allowed in limits.items() if allowed == self.ctas)


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def resident_ctas(registers: int, warps: int, shared: int, sm: SMLimits = SM90) -> Residency:
    """Resident CTAs per SM of a kernel using ``registers`` per thread, ``warps`` per CTA and
    ``shared`` bytes of shared memory per CTA (0 CTAs: the kernel cannot launch)."""
    if registers < 0 or warps < 1 or shared < 0:
        raise ValueError(f"registers={registers}, warps={warps}, shared={shared}: need >= 0, >= 1, >= 0")
    per_warp = _round_up(registers * sm.warp_size, sm.register_unit)
    per_sub_partition = sm.registers // sm.sub_partitions
    # The hardware checks a CTA's registers as if its warps were spread over all sub-partitions.
    fits = per_warp * _round_up(warps, sm.sub_partitions) <= sm.registers
    if registers > sm.max_registers_per_thread or not fits:
        by_registers = 0
    elif per_warp == 0:
        by_registers = sm.max_ctas
    else:
        by_registers = (per_sub_partition // per_warp) * sm.sub_partitions // warps
    allocated = _round_up(shared + sm.reserved_shared_per_cta, sm.shared_unit)
    by_shared = 0 if shared > sm.max_shared_per_cta else sm.shared_bytes // allocated
    by_warps = sm.max_warps // warps
    ctas = min(by_registers, by_warps, sm.max_ctas, by_shared)
    return Residency(ctas, by_registers, by_warps, sm.max_ctas, by_shared)
