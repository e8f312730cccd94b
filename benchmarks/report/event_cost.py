"""Events, marks and values against scopes (issue 11): results["events"], from
benchmarks/event_cost.py."""

from __future__ import annotations

from typing import Any

from benchmarks.report.format import fmt, table

OURS = "proton_ik"
BASELINE = "scope"


def _longest(variant: dict[str, Any]) -> dict[str, Any]:
    """A kernel variant's row at the most iterations measured."""
    iters = variant.get("iters", {})
    return iters[max(iters, key=int)] if iters else {}


def per_record(events: dict[str, Any], kernel: str, label: str = OURS, key: str = "cycles_per_record"):
    """``key`` of ``kernel`` under ``label`` at the most iterations, or None."""
    variant = events.get("kernels", {}).get(kernel, {}).get("variants", {}).get(label)
    return _longest(variant).get(key) if variant else None


def against_scope(events: dict[str, Any], kernel: str, key: str = "cycles_per_record") -> float | None:
    """``kernel``'s cost per record over the scope kernel's, in the default mode."""
    ours, scope = per_record(events, kernel, key=key), per_record(events, BASELINE, key=key)
    return ours / scope if ours is not None and scope else None


def markdown(results: dict[str, Any]) -> list[str]:
    """'## Events, marks and values against scopes (issue 11)'; empty when the section did not
    run or failed (a failed section is listed with the others)."""
    events = results.get("events", {})
    if not events.get("kernels"):
        return []
    longest = max(
        (int(n) for k in events["kernels"].values() for v in k["variants"].values() for n in v["iters"]),
        default=0,
    )
    lines = [
        "",
        "## Events, marks and values against scopes (issue 11)",
        "",
        f"The per-record cost section's loop (unrolled x{events['unroll']}), grid {events['grid']}, "
        f"{events['warps_per_cta']} warps, with {events['records_per_iter']} records per warp and iteration "
        f"in every kernel, at L={longest} iterations against L=0, in proton_ik's default mode. Clock: each "
        "warp's own %clock64 around the loop; device: do_bench time x nvidia-smi clock "
        f"({fmt(events.get('smi_mhz_used'), '.0f')} MHz), median of {events['rounds']} interleaved rounds; "
        "x scope: cycles per record over the scope kernel's.",
        "",
    ]
    rows = []
    for name, kernel in events["kernels"].items():
        ours = kernel["variants"].get(OURS, {})
        row = _longest(ours)
        plain = kernel["variants"].get("plain", {})
        rows.append(
            [
                name,
                kernel["what"],
                fmt(row.get("records_per_warp")),
                fmt(row.get("cycles_per_record")),
                fmt(against_scope(events, name), ".2f"),
                fmt(row.get("device_cycles_per_record")),
                fmt(against_scope(events, name, "device_cycles_per_record"), ".2f"),
                fmt(row.get("device_ns_per_record"), ".2f"),
                fmt(_longest(plain).get("cycles_per_record")),
                f"{fmt(plain.get('registers'))} / {fmt(ours.get('registers'))}",
            ]
        )
    lines += table(
        [
            "kernel",
            "each iteration",
            "records/warp",
            "cycles/record (clock)",
            "x scope (clock)",
            "cycles/record (device)",
            "x scope (device)",
            "ns/record (device)",
            "plain cycles/record (clock)",
            "registers plain / proton_ik",
        ],
        rows,
    )
    lines += [f"- {what} failed to compile: {error}" for what, error in events.get("errors", {}).items()]
    return lines


def summary(results: dict[str, Any]) -> list[str]:
    """The events line of the table printed last."""
    events = results.get("events", {})
    if not events.get("kernels"):
        return []
    shown = []
    for name in events["kernels"]:
        ratio = "" if name == BASELINE else f" ({fmt(against_scope(events, name), '.2f')}x)"
        shown.append(f"{name} {fmt(per_record(events, name))}{ratio}")
    return ["", "events against scopes (cycles/record, clock, proton_ik): " + ", ".join(shown)]
