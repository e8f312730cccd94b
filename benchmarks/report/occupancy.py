"""Registers, spills and resident CTAs per SM of every kernel and variant (issue 10)."""

from __future__ import annotations

from typing import Any

from benchmarks.report.format import fmt, table

TITLE = "## Registers and resident CTAs per SM (issue 10)"
OURS = "proton_ik"
COMPILED = {
    "jit": "the binaries the overhead section times (the JIT's, for the run's arguments)",
    "sm_90": "kernels compiled for sm_90 from their signatures, with no GPU",
}


def cell(row: dict[str, Any], plain: dict[str, Any] | None) -> str:
    """'92 regs, **5 CTAs**': CTAs in bold when fewer than plain's; spills and shared memory
    shown where there are any, or where they differ from plain's."""
    parts = [f"{row['registers']} regs"]
    if row["spills"]:
        parts.append(f"{row['spills']} spills")
    if plain is None or row["shared"] != plain["shared"]:
        parts.append(f"{fmt(row['shared'] / 1024, '.1f')} KiB shared")
    ctas = ctas_text(row["ctas"])
    parts.append(f"**{ctas}**" if plain is not None and row["ctas"] < plain["ctas"] else ctas)
    return ", ".join(parts)


def ctas_text(ctas: int) -> str:
    return f"{ctas} CTA" if ctas == 1 else f"{ctas} CTAs"


def change(plain: dict[str, Any], row: dict[str, Any]) -> str:
    """'7 -> 5 CTAs (registers: 72 -> 92 regs)': what a variant changed, and what limits it."""
    shared = (
        f", {fmt(plain['shared'] / 1024, '.1f')} -> {fmt(row['shared'] / 1024, '.1f')} KiB shared"
        if row["shared"] != plain["shared"]
        else ""
    )
    return (
        f"{plain['ctas']} -> {ctas_text(row['ctas'])} ({row['limited_by']}: "
        f"{plain['registers']} -> {row['registers']} regs{shared})"
    )


def lost(occupancy: dict[str, Any], label: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Kernel -> (plain's row, ``label``'s row) where ``label`` keeps fewer CTAs per SM than plain."""
    found = {}
    for name, entry in occupancy.get("kernels", {}).items():
        rows = entry.get("variants", {})
        if "plain" in rows and label in rows and rows[label]["ctas"] < rows["plain"]["ctas"]:
            found[name] = (rows["plain"], rows[label])
    return found


def markdown(results: dict[str, Any]) -> list[str]:
    """The section: a table of kernels by variant, and the CTAs each variant costs."""
    occupancy = results.get("occupancy")
    lines = ["", TITLE, ""]
    if not occupancy:
        return [*lines, "Not measured in this run (`python -m benchmarks.run --only occupancy`)."]
    if "error" in occupancy:
        return [*lines, f"Failed in this run: {occupancy['error'][:300]}"]
    rule = occupancy["rule"]
    labels = [v["label"] for v in occupancy["variants"]]
    lines += [
        f"From {COMPILED.get(occupancy['compiled'], occupancy['compiled'])}: registers and spills from "
        "the cubin (cuobjdump), warps and shared memory from the metadata, resident CTAs per SM from "
        f"CUDA's occupancy rule for {rule['name']} (`benchmarks/residency.py`): {rule['registers']:,} "
        f"registers in {rule['sub_partitions']} sub-partitions, allocated per warp in units of "
        f"{rule['register_unit']}; at most {rule['max_warps']} warps and {rule['max_ctas']} CTAs; "
        f"{rule['shared_bytes'] // 1024} KiB of shared memory with {rule['reserved_shared_per_cta']:,} "
        "bytes reserved per CTA. CTAs in bold: fewer than the plain kernel's.",
        "",
    ]
    rows = []
    for name, entry in occupancy["kernels"].items():
        found = entry["variants"]
        plain = found.get("plain")
        row = [name, str(plain["warps"]) if plain else "-", plain["limited_by"] if plain else "-"]
        for label in labels:
            if label in found:
                row.append(cell(found[label], None if label == "plain" else plain))
            else:
                row.append("failed" if label in entry["errors"] else "-")
        rows.append(row)
    lines += [*table(["kernel", "warps", "plain: limited by", *labels], rows), ""]
    for label in labels[1:]:
        fewer = lost(occupancy, label)
        if fewer:
            lines.append(
                f"- {label} loses resident CTAs on {len(fewer)} of {len(rows)} kernels: "
                + "; ".join(f"{name} {change(p, r)}" for name, (p, r) in fewer.items())
            )
    if rows and not any(lost(occupancy, label) for label in labels[1:]):
        lines.append("- No variant loses a resident CTA on any kernel.")
    errors = [
        f"{name} [{label}]: {e}"
        for name, entry in occupancy["kernels"].items()
        for label, e in entry["errors"].items()
    ]
    lines += [f"- failed: {e}" for e in errors]
    if "device_limits" in occupancy:
        verdict = "match" if occupancy.get("rule_matches_device") else "**differ from**"
        disagree = [
            f"{name} [{label}]"
            for name, entry in occupancy["kernels"].items()
            for label, row in entry["variants"].items()
            if not row.get("driver_agrees", True)
        ]
        lines.append(
            f"- The device's limits ({', '.join(f'{k} {v:,}' for k, v in occupancy['device_limits'].items())}) "
            f"{verdict} the rule's. The driver's n_regs and n_spills "
            + (
                f"differ from the cubin's on {', '.join(disagree)}."
                if disagree
                else "equal the cubin's for every kernel."
            )
        )
    return lines


def summary(results: dict[str, Any]) -> list[str]:
    """The line of the table printed last."""
    occupancy = results.get("occupancy", {})
    if not occupancy.get("kernels"):
        return []
    fewer = lost(occupancy, OURS)
    return [
        "resident CTAs per SM lost to the default mode: "
        + (", ".join(f"{name} {p['ctas']}->{r['ctas']}" for name, (p, r) in fewer.items()) or "none")
    ]
