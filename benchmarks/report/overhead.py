"""The suite (scopes and records per warp) and the kernel overhead, with the numerics check."""

from __future__ import annotations

from typing import Any

from benchmarks.report.format import fmt, table, timing_cells
from proton_ik.mode import DEFAULT_RING_CAPACITY


def suite(results: dict[str, Any]) -> list[str]:
    """'## Suite: scopes and records per warp per launch'; empty when overhead did not run."""
    lines: list[str] = []
    kernels_ = results.get("overhead", {}).get("kernels", {})
    if kernels_:
        lines += ["## Suite: scopes and records per warp per launch", ""]
        rows = []
        for name, e in kernels_.items():
            if "records_per_warp" not in e:
                continue
            r = e["records_per_warp"]
            rows.append(
                [
                    name,
                    e["kind"],
                    e["size"],
                    e["scopes"],
                    f"{e['grid']} x {e['warps_per_cta']} warps",
                    f"{r['min']} / {fmt(r['mean'])} / {r['max']}",
                    f"{e['records_per_launch']:,}",
                ]
            )
        lines += table(
            ["kernel", "type", "size", "scopes", "grid", "records/warp min/mean/max", "records/launch"], rows
        )
        capacity = DEFAULT_RING_CAPACITY
        over = [
            name for name, e in kernels_.items() if e.get("records_per_warp", {}).get("max", 0) > capacity
        ]
        if over:
            lines += [
                "",
                f"In {', '.join(over)}, some warps write more than {capacity} records per launch, more than "
                f"the ring of {capacity} entries that capacity=auto gives a kernel whose records its code "
                "does not bound may hold when their scopes do not pair: the ring keeps the newest ones, "
                "and the trace counts the rest as overwritten.",
            ]
    return lines


def markdown(results: dict[str, Any]) -> list[str]:
    """'## Kernel overhead (instrumented / plain - 1)' and the numerics check."""
    lines: list[str] = []
    kernels_ = results.get("overhead", {}).get("kernels", {})
    if kernels_:
        lines += ["", "## Kernel overhead (instrumented / plain - 1)", ""]
        lines += overhead_table(results)
        bad = [
            f"{name} [{label}]: {check['error']}"
            for name, e in kernels_.items()
            for label, check in e.get("numerics", {}).items()
            if check["error"]
        ]
        errors = [
            f"{name} [{label}]: {msg}" for name, e in kernels_.items() for label, msg in e["errors"].items()
        ]
        not_bitwise = [
            f"{name} [{label}] (max abs diff {check['max_abs_diff_vs_plain']:.3g})"
            for name, e in kernels_.items()
            for label, check in e.get("numerics", {}).items()
            if label != "plain" and not check.get("bitwise_equal_to_plain", True)
        ]
        lines += ["", "Numerics: every variant checked against torch and against the plain kernel."]
        lines += [f"- wrong output: {b}" for b in bad] + [f"- failed: {e}" for e in errors]
        lines += [f"- not bitwise equal to plain (within tolerance): {b}" for b in not_bitwise]
        if not (bad or errors or not_bitwise):
            lines.append("- all outputs correct and bitwise equal to the plain kernel's.")
    return lines


def overhead_table(results: dict[str, Any]) -> list[str]:
    """Overhead per kernel and variant, with the spread of the rounds, and the geometric means."""
    variants = results["variants"]
    overhead = results.get("overhead", {})
    kernels_ = overhead.get("kernels", {})
    labels = [v["label"] for v in variants[1:]]
    ik_labels = [v["label"] for v in variants if v["profiler"] == "proton_ik"]
    header = ["kernel", "plain ms (spread)"] + [f"{label} %" for label in labels]
    header += [f"{label} vs best Proton %" for label in ik_labels] + ["records/warp (mean)"]
    rows = []
    for name, entry in kernels_.items():
        row = [name, *timing_cells(entry, labels)]
        row += [
            fmt(entry.get("overhead_pct", {}).get(f"{label} vs best proton"), "+.1f") for label in ik_labels
        ]
        row.append(fmt(entry.get("records_per_warp", {}).get("mean")))
        rows.append(row)
    summary = overhead.get("summary", {})
    row = ["**geomean**", ""] + [
        fmt(summary.get(label, {}).get("geomean_overhead_pct"), "+.1f") for label in labels
    ]
    row += [fmt(summary.get(f"{label} vs best proton", {}).get("geomean_pct"), "+.1f") for label in ik_labels]
    rows.append([*row, ""])
    return table(header, rows)


def sampling(results: dict[str, Any]) -> list[str]:
    """'### Sampling modes' under the kernel overhead (the "sampling" section): each sampled
    kernel's overhead and profile bytes per launch under each sampling mode, beside the default
    mode. A run before several kernels were sampled holds one kernel's entry at the top level."""
    lines = ["", "### Sampling modes (issue 10)", ""]
    found = results.get("sampling")
    if not found:
        return [*lines, "Not measured in this run (`python -m benchmarks.run --only sampling`)."]
    if "error" in found:
        return [*lines, f"Failed in this run: {found['error'][:300]}"]
    modes = found["modes"]
    per_kernel = found["kernels"] if "kernels" in found else {found["kernel"]: found}
    notes = [f"- `{text}` skipped: {m['skipped']}" for text, m in modes.items() if "skipped" in m]
    labels = list(dict.fromkeys(["proton_ik", *(m["label"] for m in modes.values() if "label" in m)]))
    rows = []
    for kernel, entry in per_kernel.items():
        notes += [f"- {kernel} {label} failed: {error}" for label, error in entry.get("errors", {}).items()]
        timing = entry.get("timing", {})
        for label in labels if timing else []:
            mode = next((text for text, m in modes.items() if m.get("label") == label), "default mode")
            value = entry.get("overhead_pct", {}).get(label)
            spread = timing.get(label, {}).get("spread_pct")
            measured = f"{fmt(value, '+.1f')} ({fmt(spread)}%)" if value is not None else "FAIL"
            rows.append(
                [
                    kernel,
                    label,
                    f"`{mode}`",
                    measured,
                    fmt(entry.get("profile_bytes_per_launch", {}).get(label)),
                    fmt(entry.get("profile_bytes_written", {}).get(label)),
                ]
            )
    if not rows:
        return [*lines, f"{', '.join(per_kernel) or 'No kernel'}: no sampling mode was timed.", "", *notes]
    lines += [
        "Timed with plain in the overhead section's way. Allocated: the profile buffer proton_ik's "
        "allocator hands one launch (the sampled CTAs' regions; Triton's launcher asks for CTAs x the "
        "per-CTA size); written: the regions the launch writes and the runtime copies.",
        "",
        *table(
            ["kernel", "variant", "mode", "overhead % (spread)", "bytes allocated", "bytes written"], rows
        ),
    ]
    return lines + (["", *notes] if notes else [])
