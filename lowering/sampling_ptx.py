"""Sampling in the lowering: which CTAs and units record (``ctas=``, ``warps=``), from the mode to
the layout (``contract.sampling``) and into the prologue of ``convert-pikgpu-to-ptx``.

The prologue finds this thread's CTA slot and unit slot (its CTA's and its unit's rank among
the sampled ones). Every store of the trace already waits on a predicate set once in the
prologue: the writer lane's ``registers.WRITER`` (records, the unit header) and thread 0's
``registers.HEADER_WRITER`` (the CTA header, set in the epilogue). Sampling ands the tests into them (``restrict_writer``,
``restrict_header``), so an unsampled unit runs the
same instructions and stores nothing: a record costs what it did.

- a stride ``S``: slot ``cta / S``, sampled where ``cta % S == 0`` (ptxas divides by a
  constant with a multiply);
- a list of ``k`` ids: one compare and one predicated move per id, from slot ``k`` (none) to
  the index of the id that matches; sampled where the slot is below ``k``.
"""

from __future__ import annotations

from proton_ik.contract.sampling import Sampling
from proton_ik.lowering.registers import CTA_SAMPLED, CTA_SLOT, ID_MATCH, UNIT_SLOT
from proton_ik.mode import Mode


def layout_sampling(mode: Mode, num_warps: int) -> Sampling:
    """The sampling of a kernel of ``num_warps`` warps compiled under ``mode``: its units are
    the units of the warps ``mode.warps`` names (a warpgroup by its first warp)."""
    late = [w for w in mode.warps if w >= num_warps]
    if late:
        raise ValueError(
            f"warps={','.join(map(str, mode.warps))} names warp(s) {late}, but the kernel has "
            f"{num_warps} warps (0 to {num_warps - 1}); sample warps it has, or compile it with "
            "more warps"
        )
    per_unit = mode.granularity.warps_per_unit(num_warps)
    ctas = mode.ctas
    return Sampling(
        cta_stride=ctas if isinstance(ctas, int) else 1,
        cta_ids=() if isinstance(ctas, int) else ctas,
        unit_ids=tuple(w // per_unit for w in mode.warps),
    )


def sampled(sampling: Sampling) -> bool:
    """Whether only some CTAs or units record: then the kernel declares ``registers.SAMPLING``."""
    return not (sampling.every_cta and sampling.every_unit)


def _rank(ids: tuple[int, ...], value: str, slot: str) -> list[str]:
    """``slot`` = the index of ``value`` in ``ids``, or ``len(ids)`` where it is not listed."""
    lines = [f"\tmov.u32 \t{slot}, {len(ids)};"]
    for index, listed in enumerate(ids):
        lines += [
            f"\tsetp.eq.u32 \t{ID_MATCH}, {value}, {listed};",
            f"\t@{ID_MATCH} mov.u32 \t{slot}, {index};",
        ]
    return lines


def cta_slot(sampling: Sampling, cta: str) -> tuple[list[str], str]:
    """The prologue's lines that find the CTA slot of linear CTA id ``cta`` and whether the CTA is
    sampled (``CTA_SAMPLED``), and the register that holds the slot."""
    if sampling.every_cta:
        return [], cta
    if sampling.cta_ids:
        ids = sampling.cta_ids
        return [
            "\t// pik sampling: the CTA's rank among the listed CTAs",
            *_rank(ids, cta, CTA_SLOT),
            f"\tsetp.lt.u32 \t{CTA_SAMPLED}, {CTA_SLOT}, {len(ids)};",
        ], CTA_SLOT
    stride = sampling.cta_stride
    return [
        f"\t// pik sampling: every {stride}th CTA",
        f"\trem.u32 \t{CTA_SLOT}, {cta}, {stride};",
        f"\tsetp.eq.u32 \t{CTA_SAMPLED}, {CTA_SLOT}, 0;",
        f"\tdiv.u32 \t{CTA_SLOT}, {cta}, {stride};",
    ], CTA_SLOT


def unit_slot(sampling: Sampling, unit: str) -> tuple[list[str], str]:
    """The lines that find the unit slot of ``unit`` (``len(unit_ids)`` for a unit not sampled),
    and the register that holds it."""
    ids = sampling.unit_ids
    if not ids:
        return [], unit
    return [
        "\t// pik sampling: the unit's rank among the sampled units",
        *_rank(ids, unit, UNIT_SLOT),
    ], UNIT_SLOT


def restrict_writer(sampling: Sampling, writer: str) -> list[str]:
    """After the prologue has set ``writer`` (the unit's writer lane) and the CTA's test: only
    sampled units of sampled CTAs store records and unit headers."""
    lines = []
    if not sampling.every_cta:
        lines.append(f"\tand.pred \t{writer}, {writer}, {CTA_SAMPLED};")
    if not sampling.every_unit:
        lines.append(f"\tsetp.lt.and.u32 \t{writer}, {UNIT_SLOT}, {len(sampling.unit_ids)}, {writer};")
    return lines


def restrict_header(sampling: Sampling, header: str) -> list[str]:
    """After the epilogue has set ``header`` (thread 0) and the CTA's test: only sampled CTAs
    write their header."""
    return [] if sampling.every_cta else [f"\tand.pred \t{header}, {header}, {CTA_SAMPLED};"]
