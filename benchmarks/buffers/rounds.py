"""Interleaved rounds of timed loops: each round runs every variant once, in turn, so that the
host's drifts fall on all of them alike; a round that fails is recorded as {"error": ...} and the
others go on."""

from __future__ import annotations

import shutil
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.buffers.sessions import end_leftover_session
from benchmarks.buffers.settings import Settings, out_of_budget
from benchmarks.kernels.problem import Problem


def interleaved_rounds(
    step: str,
    problem: Problem,
    settings: Settings,
    rounds: int,
    variants: tuple[str, ...],
    run: Callable[[str, Path], dict[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """Up to ``rounds`` rounds of ``run(variant, directory)`` for each of ``variants`` (fewer
    where the step's budget would run out), each in a scratch folder removed after it; per
    variant, each round's result."""
    per_round: dict[str, list[dict[str, Any]]] = {variant: [] for variant in variants}
    began = time.perf_counter()
    for index in range(rounds):
        if out_of_budget(began, index, minimum=2):
            settings.log(f"  {step}: {problem.name} stopped after {index} rounds")
            break
        for variant in variants:
            directory = settings.scratch / step.replace(" ", "_") / f"{variant}_{index}"
            try:
                per_round[variant].append(run(variant, directory))
            except Exception as error:
                traceback.print_exc()
                end_leftover_session()
                per_round[variant].append({"error": f"{error!r}"[:500]})
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        settings.log(
            f"  {step} {problem.name} round {index + 1}: "
            + "  ".join(f"{v}={per_round[v][-1].get('us_per_launch', float('nan')):.1f}us" for v in variants)
        )
    return per_round
