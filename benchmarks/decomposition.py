"""Where the default mode's overhead comes from (issue 10): every suite kernel timed plain and in
the cumulative parts of the default mode, interleaved, each as % over plain:

1. markers only: the order the scopes impose on the compiler, with no clock and no store;
2. prologue and epilogue: 1, and the unit's segment, headers and start and end clocks;
3. full records: the default mode as it ships.

The parts are compiled by ``scope_parts.py``; the timing is the overhead section's
(``overhead.compare``). What 1 costs is inherent to measuring a scope at all; 2 and 3 are ours.
"""

from __future__ import annotations

from typing import Any

from benchmarks import kernels
from benchmarks.harness import Context, geomean, pct
from benchmarks.overhead import compare
from benchmarks.variants import Variant, part_variants
from proton_ik.mode import Mode

ROUNDS = 5  # at most: the suite x 4 variants x 5 rounds takes about half a minute on an H100


def variants() -> list[Variant]:
    """plain, then each part of the default mode, then the default mode itself."""
    mode = Mode()
    return [Variant("plain", None), *part_variants(mode), Variant("proton_ik", "proton_ik", str(mode))]


def measure(ctx: Context) -> dict[str, Any]:
    """The run's "decomposition" section."""
    parts = variants()
    rounds = min(ctx.rounds, ROUNDS)
    results = compare(ctx, kernels.suite(ctx.args.quick, ctx.num_sms), parts, rounds)
    summary = {}
    for variant in parts[1:]:
        ratios = [
            r["timing"][variant.label]["median_ms"] / r["timing"]["plain"]["median_ms"]
            for r in results.values()
            if variant.label in r.get("timing", {}) and "plain" in r["timing"]
        ]
        summary[variant.label] = {"geomean_overhead_pct": pct(geomean(ratios)), "kernels": len(ratios)}
    return {
        "mode": str(Mode()),
        "variants": [v.__dict__ for v in parts],
        "rounds": rounds,
        "kernels": results,
        "summary": summary,
    }
