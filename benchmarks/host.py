"""Host side: a loop of launches of a short kernel, unprofiled, under proton_ik and under Proton,
wall clock from start to finalize with the trace written; trace bytes per million events and
finalize seconds per million records."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton.profiler as proton

import proton_ik
from benchmarks.harness import Context, fresh, ik_session, log, proton_trace_events
from benchmarks.kernels import elementwise
from benchmarks.kernels.micro import HOST_ELEMENTS
from benchmarks.kernels.problem import Launch, Problem

HOST_LAUNCHES = 1000
HOST_BUDGET_S = 120.0  # a profiled host loop stops early past this; the report says how far it got


def host_loop(fn, args: tuple, grid: tuple[int, int, int], options: dict, launches: int) -> int:
    """Launch ``fn`` up to ``launches`` times, stopping early past the host budget."""
    start = time.perf_counter()
    for i in range(launches):
        fn[grid](*args, **options)
        if i % 50 == 49 and time.perf_counter() - start > HOST_BUDGET_S:
            return i + 1
    return launches


def timed_session(
    problem: Problem,
    launch: Launch,
    launches: int,
    start: Callable[[], Any],
    finalize: Callable[[], Any],
) -> tuple[dict[str, Any], Any]:
    """Wall clock of start, the launch loop (synchronized) and finalize, for a fresh JIT wrapper."""
    fn = fresh(problem.fn)
    began = time.perf_counter()
    start()
    try:
        done = host_loop(fn, launch.args, launch.grid, problem.options, launches)
        torch.cuda.synchronize()
    finally:
        looped = time.perf_counter()
        result = finalize()
    ended = time.perf_counter()
    timing = {
        "launches": done,
        "wall_s": ended - began,
        "loop_s": looped - began,
        "finalize_s": ended - looped,
        "per_launch_ms": 1e3 * (ended - began) / done,
    }
    return timing, result


def measure(ctx: Context) -> dict[str, Any]:
    """1000 launches of a short kernel, unprofiled, under proton_ik and under Proton, wall clock
    from start to finalize (trace written); trace bytes and finalize cost per million."""
    launches = 100 if ctx.args.quick else HOST_LAUNCHES
    problem = elementwise.gelu(HOST_ELEMENTS)
    launch = problem.make_launch()
    events_per_launch = int(problem.records_per_warp(problem.options["num_warps"]).sum()) // 2
    directory = ctx.scratch / "host"
    (directory / "proton").mkdir(parents=True, exist_ok=True)

    def ik_start(name: str) -> Callable[[], Any]:
        return lambda: ik_session(name, directory / name)

    def proton_start(name: str) -> Callable[[], Any]:
        return lambda: proton.start(str(directory / "proton" / name), backend="instrumentation", data="trace")

    # Warm Triton's disk cache for all three with one launch each, so that no timed loop compiles.
    timed_session(problem, launch, 1, lambda: None, lambda: None)
    timed_session(problem, launch, 1, ik_start("warm"), proton_ik.finalize)
    timed_session(problem, launch, 1, proton_start("warm"), proton.finalize)

    results: dict[str, Any] = {"launches": launches, "events_per_launch": events_per_launch}
    plain, _ = timed_session(problem, launch, launches, lambda: None, lambda: None)
    results["plain"] = plain
    log(f"  host unprofiled: {plain['wall_s']:.3f}s for {plain['launches']} launches")

    def versus_plain(timing: dict[str, Any]) -> float:
        return timing["per_launch_ms"] / plain["per_launch_ms"]

    try:
        timing, result = timed_session(problem, launch, launches, ik_start("host"), proton_ik.finalize)
        events = len(result.events)
        sizes = {k: Path(v).stat().st_size for k, v in result.paths.items() if Path(v).is_file()}
        results["proton_ik"] = {
            **timing,
            "ratio_vs_plain": versus_plain(timing),
            "events": events,
            "records": int(result.records),
            "trace_bytes": sizes,
            "bytes_per_million_events": {k: b / (events / 1e6) for k, b in sizes.items()} if events else {},
            "finalize_s_reported": float(result.finalize_seconds),
            "finalize_s_per_million_records": timing["finalize_s"] / (result.records / 1e6)
            if result.records
            else None,
        }
        log(f"  host proton_ik: {timing}, {events} events, files {sizes}")
    except Exception as error:
        results["proton_ik"] = {"error": repr(error)[:500]}
        log(f"  host proton_ik FAILED: {error!r}"[:400])
        traceback.print_exc()

    try:
        timing, _ = timed_session(problem, launch, launches, proton_start("host"), proton.finalize)
        trace = sorted((directory / "proton").glob("host*.chrome_trace"))
        size = trace[-1].stat().st_size if trace else 0
        events = len(proton_trace_events(directory / "proton" / "host"))
        results["proton"] = {
            **timing,
            "ratio_vs_plain": versus_plain(timing),
            "events": events,
            "trace_bytes": {"chrome_trace": size},
            "bytes_per_million_events": {"chrome_trace": size / (events / 1e6)} if events else {},
            "finalize_s_per_million_records": timing["finalize_s"] / (2 * events / 1e6) if events else None,
            "note": "Proton synchronizes, copies and parses after every launch (in loop_s); finalize only writes",
        }
        log(f"  host Proton: {timing}, {events} events, trace {size} bytes")
    except Exception as error:
        results["proton"] = {"error": repr(error)[:500]}
        log(f"  host Proton FAILED: {error!r}"[:400])
        traceback.print_exc()
    return results
