"""Where the default mode's overhead comes from: its parts timed against plain (issue 10)."""

from __future__ import annotations

from typing import Any

from benchmarks.report.format import fmt, table, timing_cells

TITLE = "## Where the overhead comes from: markers, prologue and epilogue, records (issue 10)"


def markdown(results: dict[str, Any]) -> list[str]:
    """The section: each part's overhead per kernel, beside its registers and resident CTAs."""
    found = results.get("decomposition")
    lines = ["", TITLE, ""]
    if not found:
        return [*lines, "Not measured in this run (`python -m benchmarks.run --only decomposition`)."]
    if "error" in found:
        return [*lines, f"Failed in this run: {found['error'][:300]}"]
    labels = [v["label"] for v in found["variants"][1:]]
    occupancy = results.get("occupancy", {}).get("kernels", {})
    lines += [
        f"The default mode (`{found['mode']}`) in cumulative parts, each timed against plain in "
        f"{found['rounds']} interleaved rounds: {labels[0]} keeps the markers in the PTX as comments, so "
        "it measures the order that scopes impose on the compiler with no clock read and no store; "
        f"{labels[1]} adds the prologue and epilogue (segment address, headers, start and end clocks) "
        f"with no records; {labels[2]} is the mode as it ships. % over plain (spread of the rounds); "
        "registers and resident CTAs per SM from the occupancy section, in the same order.",
        "",
    ]
    rows = []
    for name, entry in found["kernels"].items():
        row = [name, *timing_cells(entry, labels)]
        kernel = occupancy.get(name, {}).get("variants", {})
        ordered = [kernel.get(label) for label in ["plain", *labels]]
        row.append(" / ".join(str(r["registers"]) if r else "-" for r in ordered))
        row.append(" / ".join(str(r["ctas"]) if r else "-" for r in ordered))
        rows.append(row)
    summary = found.get("summary", {})
    rows.append(
        ["**geomean**", ""]
        + [fmt(summary.get(label, {}).get("geomean_overhead_pct"), "+.1f") for label in labels]
        + ["", ""]
    )
    header = ["kernel", "plain ms (spread)", *(f"{label} %" for label in labels)]
    lines += table([*header, "registers", "CTAs per SM"], rows)
    problems = [
        f"{name} [{label}]: {message}"
        for name, entry in found["kernels"].items()
        for label, message in entry.get("errors", {}).items()
    ]
    problems += [
        f"{name} [{label}]: wrong output: {check['error']}"
        for name, entry in found["kernels"].items()
        for label, check in entry.get("numerics", {}).items()
        if check["error"]
    ]
    return lines + (["", *(f"- failed: {p}" for p in problems)] if problems else [])


def summary(results: dict[str, Any]) -> list[str]:
    """The line of the table printed last."""
    found = results.get("decomposition", {}).get("summary", {})
    if not found:
        return []
    return [
        "overhead by part (geomean): "
        + ", ".join(f"{label} {fmt(s.get('geomean_overhead_pct'), '+.1f')}%" for label, s in found.items())
    ]
