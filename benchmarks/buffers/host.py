"""3. Host time added per launch: a loop of launches of ``short_add``, each followed by a
synchronize, plain, under proton_ik and under Proton, in interleaved rounds."""

from __future__ import annotations

import contextlib
import shutil
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from benchmarks.buffers.sessions import (
    PROTON_DATA,
    PROTON_MODE,
    IkRun,
    end_leftover_session,
    ik_session,
    proton_session,
)
from benchmarks.buffers.settings import (
    LOOP_BUDGET_S,
    STEP_BUDGET_S,
    Settings,
    median,
    out_of_budget,
    rounds_summary,
)
from benchmarks.harness import fresh
from benchmarks.kernels import elementwise
from benchmarks.kernels.problem import Launch, Problem
from benchmarks.report.format import fmt

HOST_VARIANTS = ("plain", "proton_ik", "proton")


def host_per_launch(settings: Settings) -> dict[str, Any]:
    """short_add launched and synchronized in a loop: plain, proton_ik and Proton, each round
    in a session of its own (start, the first launch and finalize not timed)."""
    problem = elementwise.short_add()
    launch = problem.make_launch()
    per_round: dict[str, list[dict[str, Any]]] = {variant: [] for variant in HOST_VARIANTS}
    began = time.perf_counter()
    for index in range(settings.rounds):
        if out_of_budget(began, index, minimum=2):
            settings.log(f"  host: stopped after {index} rounds ({STEP_BUDGET_S:.0f} s budget)")
            break
        for variant in HOST_VARIANTS:
            per_round[variant].append(_host_round_or_error(variant, problem, launch, settings, index))
        settings.log(
            f"  host round {index + 1}: "
            + "  ".join(f"{v}={fmt(per_round[v][-1].get('us_per_launch'))}us" for v in HOST_VARIANTS)
        )
    return summarize_host(problem, per_round, settings.host_launches)


def _host_round_or_error(
    variant: str, problem: Problem, launch: Launch, settings: Settings, index: int
) -> dict[str, Any]:
    """One round of one variant; a failure is kept as {"error": ...} and the others go on."""
    directory = settings.scratch / "host" / f"{variant}_{index}"
    try:
        return host_round(variant, problem, launch, settings.host_launches, directory)
    except Exception as error:
        traceback.print_exc()
        end_leftover_session()
        return {"error": f"{error!r}"[:500]}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def host_round(
    variant: str, problem: Problem, launch: Launch, launches: int, directory: Path
) -> dict[str, Any]:
    """One timed loop of ``variant``, after one untimed launch that compiles or loads the kernel."""
    fn = fresh(problem.fn)
    with variant_session(variant, directory) as run:
        compiled = fn[launch.grid](*launch.args, **problem.options)
        torch.cuda.synchronize()
        check_instrumented(variant, compiled)
        copied = 0 if run is None else run.copied_bytes()
        done, seconds = synced_loop(fn, launch, problem.options, launches)
        copied = 0 if run is None else run.copied_bytes() - copied
    found: dict[str, Any] = {"launches": done, "loop_s": seconds, "us_per_launch": 1e6 * seconds / done}
    if run is not None:
        found["recorded_launches"] = int(run.result.launches)  # the untimed first launch included
        found["copied_bytes_in_loop"] = copied
        found["finalize_s"] = run.finalize_s
    return found


@contextlib.contextmanager
def variant_session(
    variant: str, directory: Path, name: str = "host", **ik_options: Any
) -> Iterator[IkRun | None]:
    """A session of ``variant``: proton_ik's (``ik_options`` to ``start``), Proton's, or none."""
    if variant == "proton_ik":
        with ik_session(name, directory, **ik_options) as run:
            yield run
    elif variant == "proton":
        with proton_session(directory):
            yield None
    else:
        yield None


def check_instrumented(variant: str, compiled: Any) -> None:
    meta = compiled.metadata
    if variant == "proton_ik" and not getattr(meta, "proton_ik", None):
        raise RuntimeError("proton_ik: the kernel compiled without proton_ik metadata")
    if variant == "proton" and not meta.profile_scratch_size:
        raise RuntimeError("proton: the kernel compiled without a profile buffer")
    if variant == "plain" and meta.profile_scratch_size:
        raise RuntimeError("plain: the kernel compiled with a profile buffer; a profiler was left active")


def synced_loop(fn: Any, launch: Launch, options: dict, launches: int) -> tuple[int, float]:
    """(launches made, seconds): each launch followed by torch.cuda.synchronize()."""
    kernel, args = fn[launch.grid], launch.args
    start = time.perf_counter()
    for index in range(launches):
        kernel(*args, **options)
        torch.cuda.synchronize()
        if index % 64 == 63 and time.perf_counter() - start > LOOP_BUDGET_S:
            return index + 1, time.perf_counter() - start
    return launches, time.perf_counter() - start


def summarize_host(
    problem: Problem, per_round: dict[str, list[dict[str, Any]]], launches: int
) -> dict[str, Any]:
    """Medians over rounds; added = median over rounds of (variant - plain) in the same round."""
    us = {v: [r["us_per_launch"] for r in rounds if "error" not in r] for v, rounds in per_round.items()}
    added: dict[str, float | None] = {}
    for variant in HOST_VARIANTS[1:]:
        pairs = zip(per_round[variant], per_round["plain"], strict=True)
        diffs = [
            v["us_per_launch"] - p["us_per_launch"] for v, p in pairs if "error" not in v and "error" not in p
        ]
        added[variant] = median(diffs) if diffs else None
    ik = [r for r in per_round["proton_ik"] if "error" not in r]
    return {
        "kernel": problem.name,
        "size": problem.size,
        "records_per_launch": int(problem.records_per_warp(problem.options["num_warps"]).sum()),
        "launches": launches,
        "launches_done": {v: [r.get("launches", 0) for r in rounds] for v, rounds in per_round.items()},
        "errors": {v: [r["error"] for r in rounds if "error" in r][:2] for v, rounds in per_round.items()},
        "rounds": len(per_round["plain"]),
        "us_per_launch": {variant: rounds_summary(values) for variant, values in us.items()},
        "added_us": added,
        "proton_ik_recorded_launches": [r["recorded_launches"] for r in ik],
        "proton_ik_copied_bytes_in_loop": [r["copied_bytes_in_loop"] for r in ik],
        "proton_ik_finalize_s": [r["finalize_s"] for r in ik],
        "proton": {"mode": PROTON_MODE, "data": PROTON_DATA},
    }
