"""4. End to end on the large grid: launches of ``four_scopes`` with the hooks on, against plain
launches and against a pinned copy of the bytes the launches wrote."""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.buffers.host import check_instrumented
from benchmarks.buffers.sessions import ik_session
from benchmarks.buffers.settings import STEP_BUDGET_S, Settings, median, out_of_budget, rounds_summary
from benchmarks.harness import fresh
from benchmarks.kernels import elementwise
from benchmarks.kernels.problem import Launch, Problem
from proton_ik import DEFAULT_POOL_BYTES
from proton_ik.contract.layout import CTA_HEADER_BYTES, UNIT_HEADER_BYTES, slot_bytes


def end_to_end(settings: Settings) -> dict[str, Any]:
    """Rounds of: plain launches, profiled launches (hooks on), a pinned copy of the bytes the
    profiled launches wrote. No synchronize inside the loops; one at the end."""
    problem = elementwise.four_scopes()
    launch = problem.make_launch()
    n = settings.e2e_launches
    rounds: list[dict[str, Any]] = []
    began = time.perf_counter()
    for index in range(settings.e2e_rounds):
        if out_of_budget(began, index, minimum=1):
            settings.log(f"  end to end: stopped after {index} rounds ({STEP_BUDGET_S:.0f} s budget)")
            break
        plain_ms = plain_loop_ms(problem, launch, n)
        directory = settings.scratch / "end_to_end" / str(index)
        profiled = profiled_loop(problem, launch, n, directory)
        shutil.rmtree(directory, ignore_errors=True)
        copy = copy_ms(profiled["written_bytes_per_launch"])
        write, write_one = write_ms(int(profiled["copied_bytes_per_launch"]), n, directory.parent)
        rounds.append(
            {"plain_ms": plain_ms, **profiled, "copy_ms": copy, "write_ms": write, "write_one_ms": write_one}
        )
        settings.log(
            f"  end to end round {index + 1}: plain {plain_ms:.3f} ms, profiled "
            f"{profiled['flushed_ms']:.3f} ms (loop {profiled['loop_ms']:.3f}), copy {copy:.3f} ms, "
            f"file write {write:.3f} ms per launch (one window again and again: {write_one:.3f} ms); "
            f"finalize {profiled['finalize_s']:.1f} s"
        )
    return summarize_e2e(problem, rounds, n)


def plain_loop_ms(problem: Problem, launch: Launch, launches: int) -> float:
    """Milliseconds per launch of ``launches`` plain launches and one synchronize."""
    fn = fresh(problem.fn)
    compiled = fn[launch.grid](*launch.args, **problem.options)
    torch.cuda.synchronize()
    check_instrumented("plain", compiled)
    kernel, args = fn[launch.grid], launch.args
    start = time.perf_counter()
    for _ in range(launches):
        kernel(*args, **problem.options)
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - start) / launches


def profiled_loop(problem: Problem, launch: Launch, launches: int, directory: Path) -> dict[str, Any]:
    """``launches`` launches under proton_ik and one synchronize (loop_ms), then the drain
    flushed so that every record is on the host (flushed_ms); finalize is not timed."""
    fn = fresh(problem.fn)
    # Only the session file: rendering 100 launches of 1M records each would take minutes a
    # round, and finalize is measured on its own (``finalize_rate``).
    with ik_session("end_to_end", directory, formats=()) as run:
        compiled = fn[launch.grid](*launch.args, **problem.options)
        torch.cuda.synchronize()
        run.flush()  # the untimed first launch leaves the pool empty
        copied = run.copied_bytes()
        kernel, args = fn[launch.grid], launch.args
        start = time.perf_counter()
        for _ in range(launches):
            kernel(*args, **problem.options)
        torch.cuda.synchronize()
        looped = time.perf_counter()
        run.flush()
        flushed = time.perf_counter()
        copied = run.copied_bytes() - copied
    layout = compiled.metadata.proton_ik["layout"]
    ctas = math.prod(launch.grid)
    records = int(problem.records_per_warp(compiled.metadata.num_warps).sum())
    return {
        "loop_ms": 1e3 * (looped - start) / launches,
        "flushed_ms": 1e3 * (flushed - start) / launches,
        "copied_bytes_per_launch": copied / launches,
        # four_scopes writes short pairs only, one slot each (an entry in version 2): slots = records / 2
        "written_bytes_per_launch": ctas * CTA_HEADER_BYTES
        + ctas * int(layout["units"]) * UNIT_HEADER_BYTES
        + records // 2 * slot_bytes(int(layout["version"])),
        "device_bytes_per_launch": ctas * int(layout["cta_bytes"]),
        "launches_recorded": int(run.result.launches),
        "launches_expected": launches + 1,
        "finalize_s": run.finalize_s,
    }


def copy_ms(nbytes: int, repeats: int = 20) -> float:
    """Milliseconds of one device-to-host copy of ``nbytes`` into pinned memory (CUDA events)."""
    source = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    target = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    target.copy_(source, non_blocking=True)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        target.copy_(source, non_blocking=True)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def write_ms(nbytes: int, launches: int, directory: Path) -> tuple[float, float]:
    """Milliseconds per launch of a sequential write of what the profiled loop wrote, into a file
    in ``directory`` (the session's folder), flushed to the operating system as the session file
    is (no fsync): ``launches`` writes of ``nbytes``, one after the other into one file, each from
    the next window of a pinned source as large as the drain's pool, the total over
    ``launches``. The drain's windows are new bytes from the device, never in the CPU's cache,
    and its file grows by all of them, so this write does both (docs/PERFORMANCE.md, "The
    drain's file write, measured as the drain writes").

    Also, for comparison, the median of 20 writes of one window, the same bytes each time into a
    file that grows by 20 windows only (the measure before: a source in the CPU's cache, and
    fewer dirty pages waiting for the disk)."""
    window = max(nbytes, 1)
    windows = max(1, DEFAULT_POOL_BYTES // window)
    source = torch.empty(window * windows, dtype=torch.uint8, pin_memory=True).numpy()
    source[:] = 1  # touched, as the pool's mirror is
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "write_bandwidth.bin"
    try:
        with open(path, "wb", buffering=0) as file:
            start = time.perf_counter()
            for index in range(launches):
                at = (index % windows) * window
                file.write(memoryview(source[at : at + window]))
            walked = 1e3 * (time.perf_counter() - start) / launches
        times = []
        with open(path, "wb", buffering=0) as file:
            for _ in range(20):
                start = time.perf_counter()
                file.write(memoryview(source[:window]))
                times.append(1e3 * (time.perf_counter() - start))
    finally:
        path.unlink(missing_ok=True)
    return walked, median(times)


def summarize_e2e(problem: Problem, rounds: list[dict[str, Any]], launches: int) -> dict[str, Any]:
    def column(key: str) -> list[float]:
        return [float(r[key]) for r in rounds]

    plain, flushed, copy, write = (
        median(column("plain_ms")),
        median(column("flushed_ms")),
        median(column("copy_ms")),
        median(column("write_ms")),
    )
    written = rounds[0]["written_bytes_per_launch"] if rounds else 0
    copied = median(column("copied_bytes_per_launch"))
    return {
        "kernel": problem.name,
        "size": problem.size,
        "launches": launches,
        "rounds": len(rounds),
        "per_round": rounds,
        "plain_ms": rounds_summary(column("plain_ms")),
        "loop_ms": rounds_summary(column("loop_ms")),
        "flushed_ms": rounds_summary(column("flushed_ms")),
        "copy_ms": rounds_summary(column("copy_ms")),
        "write_ms": rounds_summary(column("write_ms")),
        "write_one_ms": rounds_summary(column("write_one_ms")),
        "written_bytes_per_launch": written,
        "copied_bytes_per_launch": copied,
        "device_bytes_per_launch": rounds[0]["device_bytes_per_launch"] if rounds else 0,
        "copy_gb_per_s": written / copy / 1e6 if copy else float("nan"),
        "drain_gb_per_s": copied / flushed / 1e6 if flushed else float("nan"),
        "x_plain": flushed / plain,
        "x_copy": flushed / copy,
        "write_gb_per_s": copied / write / 1e6 if write else float("nan"),
        # the issue-23 bound: the larger of plain and moving the bytes off the device and into the file
        "x_bound": flushed / max(plain, copy + write) if copy + write else float("nan"),
        "loop_x_plain": median(column("loop_ms")) / plain,
        "launches_exact": all(r["launches_recorded"] == r["launches_expected"] for r in rounds),
    }
