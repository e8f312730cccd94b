"""7. Host time added per launch, launch only: loops of launches of a short kernel with pointer
arguments (``short_add``) and with TensorDescriptor arguments (``descriptor_add``), and of a
short kernel whose segments are sized at each launch, either way (``sized_sum``,
``sized_descriptor_sum``), plain, under proton_ik and under Triton's Proton, in interleaved
rounds; one synchronize after each loop, outside its time.

    python -m benchmarks.buffers.launch_only [--launches N] [--rounds R] [--profile DIR]

run alone prints the table, and with ``--profile`` writes a cProfile of one proton_ik loop of
each kernel (``DIR/<kernel>.txt``, sorted by own time): where each added microsecond goes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.buffers.host import HOST_VARIANTS, check_instrumented, variant_session
from benchmarks.buffers.rounds import interleaved_rounds
from benchmarks.buffers.settings import Settings, median, rounds_summary
from benchmarks.harness import fresh
from benchmarks.kernels import elementwise
from benchmarks.kernels.problem import Launch, Problem

LAUNCH_ONLY_LAUNCHES = 2000
# proton_ik's pool here: large enough that no loop reaches the drain mark, so that the loop times
# the launch path alone (the sized kernels' 2000 launches take 384 MiB, past the default pool's
# mark). ``sustained`` measures launches while the drain runs.
LAUNCH_ONLY_POOL_BYTES = 2 << 30
# Proton synchronizes and copies after every launch (milliseconds each): its loops are this long,
# as its cost a launch does not depend on the loop's length, and 2000 of them take 10 s a round.
PROTON_LAUNCHES = 200


def launch_only(settings: Settings) -> dict[str, Any]:
    """Per kernel (pointer and descriptor arguments): rounds of plain, proton_ik and Proton."""
    return launch_only_with(
        settings, 200 if settings.quick else LAUNCH_ONLY_LAUNCHES, max(settings.rounds, 5)
    )


def launch_only_problems() -> list[Problem]:
    """Pointer and descriptor arguments, each in a straight-line kernel and in one sized at launch."""
    return [
        elementwise.short_add(),
        elementwise.descriptor_add(),
        elementwise.sized_sum(),
        elementwise.sized_descriptor_sum(),
    ]


def launch_only_with(settings: Settings, launches: int, rounds: int) -> dict[str, Any]:
    return {
        problem.name: _kernel_rounds(problem, settings, launches, rounds)
        for problem in launch_only_problems()
    }


def _kernel_rounds(problem: Problem, settings: Settings, launches: int, rounds: int) -> dict[str, Any]:
    launch = problem.make_launch()

    def run(variant: str, directory: Path) -> dict[str, Any]:
        loop = min(launches, PROTON_LAUNCHES) if variant == "proton" else launches
        return launch_round(variant, problem, launch, loop, directory)

    per_round = interleaved_rounds("launch only", problem, settings, rounds, HOST_VARIANTS, run)
    return summarize(problem, per_round, launches)


def launch_round(
    variant: str,
    problem: Problem,
    launch: Launch,
    launches: int,
    directory: Path,
    profile: Path | None = None,
) -> dict[str, Any]:
    """One timed loop of ``variant`` after one untimed launch that compiles or loads the kernel."""
    fn = fresh(problem.fn)
    options: dict[str, Any] = {"pool_bytes": LAUNCH_ONLY_POOL_BYTES} if variant == "proton_ik" else {}
    with variant_session(variant, directory, "launch_only", formats=(), **options) as run:
        compiled = fn[launch.grid](*launch.args, **problem.options)
        torch.cuda.synchronize()
        check_instrumented(variant, compiled)
        kernel, args, options = fn[launch.grid], launch.args, problem.options
        profiler = cProfile.Profile() if profile is not None else None
        if profiler is not None:
            profiler.enable()
        start = time.perf_counter()
        for _ in range(launches):
            kernel(*args, **options)
        seconds = time.perf_counter() - start
        if profiler is not None:
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
            profile.write_text(text.getvalue())
        torch.cuda.synchronize()
        outputs_equal = all(
            torch.equal(out, ref) for out, ref in zip(launch.outputs, launch.reference(), strict=True)
        )
    found: dict[str, Any] = {"us_per_launch": 1e6 * seconds / launches, "outputs_equal": outputs_equal}
    if run is not None:
        found["recorded_launches"] = int(run.result.launches)  # the untimed first launch included
    return found


def summarize(problem: Problem, per_round: dict[str, list[dict[str, Any]]], launches: int) -> dict[str, Any]:
    """Medians over rounds; added = median over rounds of (variant - plain) in the same round."""
    ok = {v: [r for r in rounds if "error" not in r] for v, rounds in per_round.items()}
    added: dict[str, float | None] = {}
    for variant in HOST_VARIANTS[1:]:
        diffs = [
            v["us_per_launch"] - p["us_per_launch"]
            for v, p in zip(per_round[variant], per_round["plain"], strict=True)
            if "error" not in v and "error" not in p
        ]
        added[variant] = median(diffs) if diffs else None
    return {
        "kernel": problem.name,
        "size": problem.size,
        "arguments": ", ".join(f"{name}: {kind}" for name, kind in problem.signature.items()),
        "launches": launches,
        "rounds": len(per_round["plain"]),
        "us_per_launch": {
            v: rounds_summary([r["us_per_launch"] for r in rounds]) for v, rounds in ok.items()
        },
        "added_us": added,
        "outputs_equal": all(r["outputs_equal"] for rounds in ok.values() for r in rounds),
        "proton_ik_recorded_launches": [r["recorded_launches"] for r in ok["proton_ik"]],
        "errors": {v: [r["error"] for r in rounds if "error" in r][:2] for v, rounds in per_round.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", type=int, default=LAUNCH_ONLY_LAUNCHES)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", type=Path, help="write a cProfile of one proton_ik loop per kernel here")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="launch_only_"))
    try:
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
            for problem in launch_only_problems():
                launch = problem.make_launch()
                for variant in ("plain", "proton_ik"):
                    where = args.profile / f"{problem.name}_{variant}.txt"
                    launch_round(variant, problem, launch, args.launches, scratch / variant, profile=where)
        settings = Settings(False, 0, scratch, args.rounds)
        for name, found in launch_only_with(settings, args.launches, args.rounds).items():
            us = {v: found["us_per_launch"][v]["median"] for v in found["us_per_launch"]}
            print(name, {v: round(x, 2) for v, x in us.items()}, "added", found["added_us"], found["errors"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
