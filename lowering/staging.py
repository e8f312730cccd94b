"""Short kernels' scope pairs staged in shared memory, copied to the buffer once, at the exit.

On short CTAs every store of ours costs: with each unit's few entries stored into shared memory
and copied to the buffer by one ``cp.async.bulk`` at the unit's exit, gelu's overhead went from
+4.1% to +2.7% and layer_norm's from +5.4% to +4.0% on an H100 (docs/PERFORMANCE.md, issue 10).
So where the kernel's code lets a unit write at most the slots of ``STAGE_BYTES`` (``bound``),
and every record is in a scope pair, the writer lane stores each pair into slot ``count`` of
the unit's 128 bytes of shared memory (``pik_stage``, one static array for the CTA, aligned and
padded to ``STAGE_ALIGN``) instead of the buffer (``slots_ptx.Ring`` with ``staged``), and the
epilogue copies the ``count`` slots to the unit's first ring slots with one bulk copy, rounded
up to the copy's 16 bytes, then waits until the copy has read them, as the CTA's shared memory
must outlive it (the write itself lands before the kernel completes, as a TMA store's does).
The rounding copies at most one slot more than was written, inside the ring: a staged unit's
bound is a whole number of pairs, two slots each in layout version 3, so its capacity is even.

Only pairs: a single record stores the clock it has just read, inside its scope, and a shared
store holds its source registers longer than a global one, so the kernel's next clock read can
wait on it inside the scope (a short spin read 36 to 38 cycles long against 14). A pair's store
comes after its end, outside the scope. Not in loops without a bound: a copy every eight entries
cost what the stores did, or more (docs/PERFORMANCE.md).

The buffer's bytes are what they were, slot for slot (``contract.layout``), so nothing
downstream changes.

The triton hook stages only on sm_90 and later (``cp.async.bulk``), where the kernel's shared
memory and the stages fit the SM's limit for one CTA and keep its resident CTAs per SM
(``fits``). ``stage=off`` in the mode turns it off.
"""

from __future__ import annotations

from proton_ik.contract.layout import slot_bytes
from proton_ik.lowering.occupancy import SM_LIMITS, residency
from proton_ik.lowering.registers import (
    COUNT,
    RECORDS,
    STAGE,
    STAGE_COPY,
    STAGE_SLOT,
    WRITER,
)

STAGE_BYTES = 128  # shared memory per unit: 8 pairs of 16 bytes at most
STAGE_SYMBOL = "pik_stage"
# The driver places a kernel's dynamic shared memory after the static array of ours, and TMA's
# swizzled tiles need the 1024-byte alignment they had at its start (a TMA matmul returned wrong
# results behind 512 bytes of ours): the array is aligned to and padded to a multiple of this.
STAGE_ALIGN = 1024
# A CTA's shared memory without the opt-in, which Triton's launcher asks for only when the
# kernel's own (dynamic) shared memory exceeds it: ours is static and must not cross it alone.
_WITHOUT_OPT_IN = 48 * 1024
_COPY_UNIT = 16  # cp.async.bulk copies a multiple of 16 bytes


def stages(bound: int | None, version: int) -> bool:
    """Whether a kernel whose code lets a unit write at most ``bound`` slots of layout
    ``version`` (None: no bound) is one whose slots all fit a stage."""
    return bound is not None and bound * slot_bytes(version) <= STAGE_BYTES


def fits(shared: int, num_warps: int, units: int, capability: int) -> bool:
    """Whether ``units`` stages (``array_bytes``) fit beside the kernel's ``shared`` bytes: within
    the SM's shared memory for one CTA (and within 48 KiB where the kernel's own is), and with as
    many resident CTAs per SM as without them. False before sm_90 (no ``cp.async.bulk``) and
    where the SM's limits are unknown."""
    limits = SM_LIMITS.get(capability)
    if limits is None or capability < 90:
        return False
    staged = shared + array_bytes(units)
    if staged > limits.max_shared_per_cta or shared <= _WITHOUT_OPT_IN < staged:
        return False
    # Without the registers (unknown before ptxas): the CTAs that warps, CTA slots and shared
    # memory allow. Registers can only allow fewer, so equal counts here keep the real one.
    return residency(0, num_warps, staged, limits).ctas >= residency(0, num_warps, shared, limits).ctas


def array_bytes(units: int) -> int:
    """The static shared array of ``units`` stages, padded to ``STAGE_ALIGN``."""
    return -(-units * STAGE_BYTES // STAGE_ALIGN) * STAGE_ALIGN


def shared_array(units: int) -> list[str]:
    """The module's declaration of the stages (its registers are ``registers.STAGING``)."""
    return [f".shared .align {STAGE_ALIGN} .b8 {STAGE_SYMBOL}[{array_bytes(units)}];"]


def prologue(unit_slot: str) -> list[str]:
    """The unit's stage, after the prologue has found its unit slot."""
    return [
        f"\tmov.u32 \t{STAGE}, {STAGE_SYMBOL};",
        f"\tmad.lo.u32 \t{STAGE}, {unit_slot}, {STAGE_BYTES}, {STAGE};",
    ]


def epilogue(slot_bytes: int) -> list[str]:
    """Copy the unit's staged slots (of ``slot_bytes``) to its first ring slots, once the
    epilogue has computed ``RECORDS`` and ``WRITER``, and wait until the copy has read them."""
    rounded = (
        []
        if slot_bytes % _COPY_UNIT == 0
        else [
            f"\tadd.s32 \t{STAGE_SLOT}, {STAGE_SLOT}, {_COPY_UNIT - 1};",
            f"\tand.b32 \t{STAGE_SLOT}, {STAGE_SLOT}, {0xFFFFFFFF ^ (_COPY_UNIT - 1):#x};",
        ]
    )
    return [
        "\t// pik stage: the unit's slots, copied to the buffer",
        f"\tsetp.ne.and.u32 \t{STAGE_COPY}, {COUNT}, 0, {WRITER};",
        f"\tshl.b32 \t{STAGE_SLOT}, {COUNT}, {slot_bytes.bit_length() - 1};",
        *rounded,
        f"\t@{STAGE_COPY} fence.proxy.async.shared::cta;",  # the stage's stores, seen by the bulk copy
        f"\t@{STAGE_COPY} cp.async.bulk.global.shared::cta.bulk_group \t[{RECORDS}], [{STAGE}], {STAGE_SLOT};",
        f"\t@{STAGE_COPY} cp.async.bulk.commit_group;",
        f"\t@{STAGE_COPY} cp.async.bulk.wait_group.read \t0;",
    ]
