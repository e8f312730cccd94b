"""The report: results.json in, BENCHMARKS.md out, one function per section; and the summary
table run.py prints last.

Pure functions of the results dict (as results.json holds it), so a saved run renders again
byte for byte: ``python -m benchmarks.run --report-only``. Nothing here needs torch or a GPU.
"""

from __future__ import annotations

from typing import Any

from benchmarks.report import (
    accuracy,
    buffers,
    compiled,
    counts,
    decomposition,
    event_cost,
    header,
    host,
    jobs,
    occupancy,
    overhead,
    record_cost,
    targets,
)


def render(results: dict[str, Any]) -> str:
    """BENCHMARKS.md for ``results``: every section that ran, in order."""
    lines = [
        *header.markdown(results),
        "",
        *targets.markdown(results),
        "",
        *overhead.suite(results),
        *overhead.markdown(results),
        *overhead.sampling(results),
        *occupancy.markdown(results),
        *decomposition.markdown(results),
        *record_cost.markdown(results),
        *event_cost.markdown(results),
        *accuracy.markdown(results),
        *counts.markdown(results),
        *host.markdown(results),
        *record_cost.breakdown(results),
        *buffers.markdown(results.get("buffers", {})),
        *compiled.markdown(results),
        *jobs.markdown(results),
        *failed_sections(results),
    ]
    return "\n".join(lines) + "\n"


def failed_sections(results: dict[str, Any]) -> list[str]:
    """'## Sections that failed', with each one's error; empty when none failed."""
    failed = {name: r["error"] for name, r in results.items() if isinstance(r, dict) and "error" in r}
    if not failed:
        return []
    return ["", "## Sections that failed", ""] + [f"- {name}: {e}" for name, e in failed.items()]


def summary(results: dict[str, Any]) -> str:
    """The table run.py prints last: the headline numbers of every section that ran."""
    lines = [
        "",
        "=" * 100,
        f"proton_ik benchmark on {results['environment']['device']} "
        f"({results['environment']['date_utc']}{', --quick' if results['quick'] else ''})",
        "",
    ]
    if results.get("overhead", {}).get("kernels"):
        lines += overhead.overhead_table(results)
    lines += occupancy.summary(results)
    lines += decomposition.summary(results)
    lines += record_cost.summary(results)
    lines += event_cost.summary(results)
    lines += accuracy.summary(results)
    lines += host.summary(results)
    lines += buffers.summary(results.get("buffers", {}))
    failed = [name for name, r in results.items() if isinstance(r, dict) and "error" in r]
    if failed:
        lines.append(f"FAILED sections: {', '.join(failed)} (see above)")
    return "\n".join(lines)
