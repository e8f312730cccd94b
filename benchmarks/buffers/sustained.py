"""8. Sustained launches: loops of launches long enough that the pool's drain runs during them
(about three default pools' worth of buffers), plain and under proton_ik with its default
pool, in interleaved rounds. What a launch costs once its records must leave the device as fast
as the launches make them, and the rate at which the drain moves them to the session file.
``launch_only`` measures the launch path alone, with a pool the loop does not fill. Proton is
left out: it synchronizes after every launch (``launch_only`` measures it).

    python -m benchmarks.buffers.sustained [--launches N] [--rounds R]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.buffers.host import check_instrumented, variant_session
from benchmarks.buffers.rounds import interleaved_rounds
from benchmarks.buffers.settings import Settings, median, rounds_summary
from benchmarks.harness import fresh
from benchmarks.kernels import elementwise
from benchmarks.kernels.problem import Launch, Problem

SUSTAINED_LAUNCHES = 12_000  # short_add's 128 KiB a launch: three default pools (512 MiB)
VARIANTS = ("plain", "proton_ik")


def sustained(settings: Settings) -> dict[str, Any]:
    """Per kernel (straight-line, and sized at launch): rounds of plain and proton_ik."""
    return sustained_with(settings, 1_000 if settings.quick else SUSTAINED_LAUNCHES, max(settings.rounds, 3))


def sustained_with(settings: Settings, launches: int, rounds: int) -> dict[str, Any]:
    return {
        problem.name: _kernel_rounds(problem, settings, launches, rounds)
        for problem in (elementwise.short_add(), elementwise.sized_sum())
    }


def _kernel_rounds(problem: Problem, settings: Settings, launches: int, rounds: int) -> dict[str, Any]:
    launch = problem.make_launch()

    def run(variant: str, directory: Path) -> dict[str, Any]:
        return sustained_round(variant, problem, launch, launches, directory)

    return summarize(
        problem, interleaved_rounds("sustained", problem, settings, rounds, VARIANTS, run), launches
    )


def sustained_round(
    variant: str, problem: Problem, launch: Launch, launches: int, directory: Path
) -> dict[str, Any]:
    """One timed loop after one untimed launch; for proton_ik, what the drain moved during it."""
    fn = fresh(problem.fn)
    with variant_session(variant, directory, "sustained", formats=()) as run:
        compiled = fn[launch.grid](*launch.args, **problem.options)
        torch.cuda.synchronize()
        check_instrumented(variant, compiled)
        kernel, args, options = fn[launch.grid], launch.args, problem.options
        copied_before = run.copied_bytes() if run is not None else 0
        start = time.perf_counter()
        for _ in range(launches):
            kernel(*args, **options)
        seconds = time.perf_counter() - start
        copied = (run.copied_bytes() - copied_before) if run is not None else 0
        waits = run.pool_waits() if run is not None else (0, 0.0)
        torch.cuda.synchronize()
        outputs_equal = all(
            torch.equal(out, ref) for out, ref in zip(launch.outputs, launch.reference(), strict=True)
        )
    found: dict[str, Any] = {"us_per_launch": 1e6 * seconds / launches, "outputs_equal": outputs_equal}
    if run is not None:
        found.update(
            recorded_launches=int(run.result.launches),
            copied_during_loop_bytes=copied,
            drain_gb_per_s=copied / seconds / 1e9,
            pool_waits=waits[0],
            pool_waited_s=waits[1],
            finalize_s=run.finalize_s,
        )
    return found


def summarize(problem: Problem, per_round: dict[str, list[dict[str, Any]]], launches: int) -> dict[str, Any]:
    """Medians over rounds; added = median over rounds of (proton_ik - plain) in the same round."""
    ok = {v: [r for r in rounds if "error" not in r] for v, rounds in per_round.items()}
    diffs = [
        ik["us_per_launch"] - plain["us_per_launch"]
        for ik, plain in zip(per_round["proton_ik"], per_round["plain"], strict=True)
        if "error" not in ik and "error" not in plain
    ]
    ours = ok["proton_ik"]
    return {
        "kernel": problem.name,
        "size": problem.size,
        "launches": launches,
        "rounds": len(per_round["plain"]),
        "us_per_launch": {
            v: rounds_summary([r["us_per_launch"] for r in rounds]) for v, rounds in ok.items()
        },
        "added_us": median(diffs) if diffs else None,
        "drain_gb_per_s": median([r["drain_gb_per_s"] for r in ours]) if ours else None,
        "copied_during_loop_mib": median([r["copied_during_loop_bytes"] / 2**20 for r in ours])
        if ours
        else None,
        "pool_waits": [r["pool_waits"] for r in ours],
        "pool_waited_s": median([r["pool_waited_s"] for r in ours]) if ours else None,
        "finalize_s": median([r["finalize_s"] for r in ours]) if ours else None,
        "outputs_equal": all(r["outputs_equal"] for rounds in ok.values() for r in rounds),
        "errors": {v: [r["error"] for r in rounds if "error" in r][:2] for v, rounds in per_round.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", type=int, default=SUSTAINED_LAUNCHES)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="sustained_"))
    try:
        settings = Settings(False, 0, scratch, args.rounds)
        for name, found in sustained_with(settings, args.launches, args.rounds).items():
            us = {v: round(found["us_per_launch"][v]["median"], 2) for v in found["us_per_launch"]}
            print(
                name,
                us,
                "added",
                found["added_us"],
                "drain GB/s",
                found["drain_gb_per_s"],
                "waits",
                found["pool_waits"],
                found["errors"],
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
