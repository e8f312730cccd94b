"""Per-record cost, and where one record's cycles go."""

from __future__ import annotations

from typing import Any

from benchmarks.kernels.micro import RECORD_COST_ITERS, RECORD_COST_UNROLL
from benchmarks.report.format import fmt, table


def markdown(results: dict[str, Any]) -> list[str]:
    """'## Per-record cost'; empty when the section did not run."""
    lines: list[str] = []
    record = results.get("record", {})
    if record.get("variants"):
        lines += [
            "",
            "## Per-record cost",
            "",
            f"Empty scopes in a loop (unrolled x{RECORD_COST_UNROLL}), grid {record['grid']}, "
            f"{record['warps_per_cta']} warps. Clock: each warp's own %clock64 around the loop; device: "
            f"do_bench time x nvidia-smi clock ({fmt(record.get('smi_mhz_used'), '.0f')} MHz).",
            "",
        ]
        rows = []
        for label, by_n in record["variants"].items():
            for n, row in by_n.items():
                if n == "0":
                    continue
                rows.append(
                    [
                        label,
                        n,
                        str(row["records_per_warp"]),
                        fmt(row.get("cycles_per_record")),
                        fmt(row.get("device_ns_per_record"), ".2f"),
                        fmt(row.get("device_cycles_per_record")),
                    ]
                )
        lines += table(
            [
                "variant",
                "L",
                "records/warp",
                "cycles/record (clock)",
                "ns/record (device)",
                "cycles/record (device)",
            ],
            rows,
        )
    return lines


def breakdown(results: dict[str, Any]) -> list[str]:
    """'## Where one record's cycles go'; empty when the section did not run or failed."""
    lines: list[str] = []
    breakdown = results.get("breakdown", {})
    if breakdown and "error" not in breakdown:
        lines += [
            "",
            "## Where one record's cycles go",
            "",
            "`benchmarks/record_variants.py`: each variant changes one thing in the PTX emitted for single "
            "records (or, where it says pairs, for pair entries), in a loop of empty scopes (132 CTAs x 4 "
            "warps); cycles per record from the warps' own clocks. See docs/PERFORMANCE.md.",
            "",
        ]
        lines += table(
            ["variant", "cycles/record"],
            [
                [
                    name,
                    fmt(r.get("cycles_per_record"), ".1f")
                    if "error" not in r
                    else f"failed: {r['error'][:80]}",
                ]
                for name, r in breakdown.items()
            ],
        )
    return lines


def summary(results: dict[str, Any]) -> list[str]:
    """The per-record cost line of the table printed last."""
    lines: list[str] = []
    record = results.get("record", {}).get("variants", {})
    last = str(RECORD_COST_ITERS[-1])
    if record:
        lines += [
            "",
            "per-record cost (cycles, clock, L="
            + last
            + "): "
            + ", ".join(
                f"{label} {fmt(rows.get(last, {}).get('cycles_per_record'))}"
                for label, rows in record.items()
            ),
        ]
    return lines
