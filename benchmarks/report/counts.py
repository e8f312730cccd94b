"""Records per warp in our trace against the count the scope structure gives."""

from __future__ import annotations

from typing import Any

from benchmarks.report.format import fmt, table


def markdown(results: dict[str, Any]) -> list[str]:
    """'## Records per warp in our trace against the scope structure'; empty when it did not run."""
    lines: list[str] = []
    counts = results.get("counts", {})
    if counts and "error" not in counts:  # a failed section is listed under "Sections that failed"
        lines += ["", "## Records per warp in our trace against the scope structure (--quick sizes)", ""]
        rows = [
            [
                name,
                fmt(c.get("expected_total")),
                fmt(c.get("trace_total")),
                fmt(c.get("decoded_records")),
                fmt(c.get("exact")),
                fmt(c.get("overwritten")),
                fmt(c.get("same_multiset")),
                c.get("error", "")[:120],
            ]
            for name, c in counts.items()
        ]
        lines += table(
            [
                "kernel",
                "expected records",
                "records in events",
                "decoded records",
                "exact per (CTA, warp)",
                "overwritten by a ring",
                "same multiset",
                "error",
            ],
            rows,
        )
    return lines
