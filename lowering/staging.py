"""Short kernels' scope pairs staged in shared memory, copied to the buffer once, at the exit.

On short CTAs every store of ours costs: with each unit's few entries stored into shared memory
and copied to the buffer by one ``cp.async.bulk`` at the unit's exit, gelu's overhead went from
+4.1% to +2.7% and layer_norm's from +5.4% to +4.0% on an H100 (docs/PERFORMANCE.md, issue 10).
So where the kernel's code lets a unit write at most ``STAGE_ENTRIES`` entries (``bound``), and
every entry is a scope pair, the writer lane stores each pair into slot ``count`` of the unit's
128 bytes of shared memory (``pik_stage``, one static array for the CTA, aligned and padded to
``STAGE_ALIGN``) instead of the buffer, and the epilogue copies the
``count`` entries to the unit's first ring slots with one bulk copy, then waits until the copy
has read them, as the CTA's shared memory must outlive it (the write itself lands before the
kernel completes, as a TMA store's does).

Only pairs: a single record stores the clock it has just read, inside its scope, and a shared
store holds its source registers longer than a global one, so the kernel's next clock read can
wait on it inside the scope (a short spin read 36 to 38 cycles long against 14). A pair's store
comes after its end, outside the scope. Not in loops without a bound: a copy every eight entries
cost what the stores did, or more (docs/PERFORMANCE.md).

The buffer's bytes are what they were, entry for entry (``contract.layout``), so nothing
downstream changes. Each pair store, its slot and its count, in the form ``pikgpu_to_ptx`` emits
them, is found and redirected; a site of another form is an error, never a silent direct store.

The triton hook stages only on sm_90 and later (``cp.async.bulk``), where the kernel's shared
memory and the stages fit the SM's limit for one CTA and keep its resident CTAs per SM
(``fits``). ``stage=off`` in the mode turns it off.
"""

from __future__ import annotations

import re

from proton_ik.contract.layout import ENTRY_BYTES
from proton_ik.lowering.occupancy import SM_LIMITS, residency
from proton_ik.lowering.registers import (
    ADDRESS,
    COUNT,
    RECORD_POLICY,
    RECORDS,
    STAGE,
    STAGE_COPY,
    STAGE_SLOT,
    TEMP,
    WRITER,
)

STAGE_ENTRIES = 8  # the most entries a staged unit writes
STAGE_BYTES = STAGE_ENTRIES * ENTRY_BYTES  # shared memory per unit
STAGE_SYMBOL = "pik_stage"
# The driver places a kernel's dynamic shared memory after the static array of ours, and TMA's
# swizzled tiles need the 1024-byte alignment they had at its start (a TMA matmul returned wrong
# results behind 512 bytes of ours): the array is aligned to and padded to a multiple of this.
STAGE_ALIGN = 1024
# A CTA's shared memory without the opt-in, which Triton's launcher asks for only when the
# kernel's own (dynamic) shared memory exceeds it: ours is static and must not cross it alone.
_WITHOUT_OPT_IN = 48 * 1024

# The lines of a pair's store, as ``pikgpu_to_ptx`` plans them (``frame_ptx.slot``, ``stores_ptx``).
_SLOT = re.compile(rf"^\tand\.b32 \t{TEMP}, {COUNT}, \d+;$")
_ADDRESS = f"\tmad.wide.u32 \t{ADDRESS}, {TEMP}, {ENTRY_BYTES}, {RECORDS};"
_STORE = re.compile(
    rf"^\t@{WRITER} st\.global\.L2::cache_hint\.v4\.b32 \t\[{ADDRESS}\], (?P<values>\{{[^}}]*\}}), {RECORD_POLICY};$"
)
_COUNT = f"\tadd.s32 \t{COUNT}, {COUNT}, 1;"


def stages(bound: int | None) -> bool:
    """Whether a kernel whose code lets a unit write at most ``bound`` entries (None: no bound)
    is one whose entries all fit a stage."""
    return bound is not None and bound <= STAGE_ENTRIES


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


def staged_pair(lines: list[str], site: int) -> list[str]:
    """A planned pair end's lines with its store sent to the stage: slot ``count``, which the
    bound keeps below ``STAGE_ENTRIES``. Lines without an entry store come back as they were."""
    stores = [i for i, line in enumerate(lines) if _STORE.match(line)]
    if not stores:
        return lines
    slots = [i for i, line in enumerate(lines) if _SLOT.match(line)]
    addresses = [i for i, line in enumerate(lines) if line == _ADDRESS]
    counts = [i for i, line in enumerate(lines) if line == _COUNT]
    if not (len(stores) == len(slots) == len(addresses) == len(counts) == 1):
        raise ValueError(f"staging: the pair ending at PTX line {site} is not of a form it knows: {lines}")
    out = [line for i, line in enumerate(lines) if i != slots[0]]
    at = out.index(_ADDRESS)
    out[at] = f"\tmad.lo.u32 \t{STAGE_SLOT}, {COUNT}, {ENTRY_BYTES}, {STAGE};"
    store = out.index(lines[stores[0]])
    out[store] = _STORE.sub(rf"\t@{WRITER} st.shared.v4.b32 \t[{STAGE_SLOT}], \g<values>;", lines[stores[0]])
    return out


def epilogue() -> list[str]:
    """Copy the unit's staged entries to its first ring slots, once the epilogue has computed
    ``RECORDS`` and ``WRITER``, and wait until the copy has read them."""
    return [
        "\t// pik stage: the unit's entries, copied to the buffer",
        f"\tsetp.ne.and.u32 \t{STAGE_COPY}, {COUNT}, 0, {WRITER};",
        f"\tshl.b32 \t{STAGE_SLOT}, {COUNT}, {ENTRY_BYTES.bit_length() - 1};",
        f"\t@{STAGE_COPY} fence.proxy.async.shared::cta;",  # the stage's stores, seen by the bulk copy
        f"\t@{STAGE_COPY} cp.async.bulk.global.shared::cta.bulk_group \t[{RECORDS}], [{STAGE}], {STAGE_SLOT};",
        f"\t@{STAGE_COPY} cp.async.bulk.commit_group;",
        f"\t@{STAGE_COPY} cp.async.bulk.wait_group.read \t0;",
    ]
