"""5. Finalize: records per second of ``proton_ik.finalize()``: a session of about 26M records,
and the shapes issue 24 names (5 launches of 1M records, 20,000 launches of 128 records, and the
5 launches on one core)."""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import torch

from benchmarks.buffers.sessions import file_bytes, ik_session
from benchmarks.buffers.settings import Settings
from benchmarks.harness import fresh
from benchmarks.kernels import elementwise
from benchmarks.kernels.problem import Problem

MANY_LAUNCHES = 20_000  # of one_scope, 128 records each


def finalize_rate(settings: Settings) -> dict[str, Any]:
    """finalize of a session of ``finalize_launches`` launches of four_scopes (1,048,576 records
    each), and, under ``shapes``, of issue 24's sessions. The drain is flushed first and timed
    apart: flush + finalize is what finalize costs when called straight after the launches."""
    four_scopes = elementwise.four_scopes()
    result = _finalize(settings, four_scopes, settings.finalize_launches, "finalize")
    shapes = [
        (four_scopes, 5, False),
        (elementwise.one_scope(), MANY_LAUNCHES // 10 if settings.quick else MANY_LAUNCHES, False),
        (four_scopes, 5, True),
    ]
    result["shapes"] = []
    for problem, launches, one_core in shapes:
        try:
            measured = _finalize(settings, problem, launches, f"finalize_{problem.name}", one_core)
        except Exception as error:  # the other shapes are still measured
            measured = {"kernel": problem.name, "launches": launches, "error": f"{error!r}"[:500]}
        result["shapes"].append({**measured, "one_core": one_core})
    return result


def _finalize(
    settings: Settings, problem: Problem, n: int, name: str, one_core: bool = False
) -> dict[str, Any]:
    """A session of ``n`` launches of ``problem``, flushed, then finalized (``one_core``: the
    whole session, its threads and its render, on one core of those this process may use)."""
    launch = problem.make_launch()
    directory = settings.scratch / name
    fn = fresh(problem.fn)
    allowed = os.sched_getaffinity(0)
    if one_core:  # before start: the drain's threads take the affinity of the thread that starts them
        os.sched_setaffinity(0, {min(allowed)})
    try:
        with ik_session(name, directory) as run:
            for _ in range(n):
                fn[launch.grid](*launch.args, **problem.options)
            torch.cuda.synchronize()
            began = time.perf_counter()
            run.flush()
            flush_s = time.perf_counter() - began
        sizes = file_bytes(run.result)
    finally:
        os.sched_setaffinity(0, allowed)
        shutil.rmtree(directory, ignore_errors=True)
    records = int(run.result.records)
    events = records // 2  # every record of these kernels is in a matched pair
    return {
        "kernel": problem.name,
        "launches": n,
        "records": records,
        "records_expected": n * int(problem.records_per_warp(problem.options["num_warps"]).sum()),
        "flush_s": flush_s,
        "finalize_s": run.finalize_s,
        "finalize_seconds_reported": float(run.result.finalize_seconds),
        "records_per_s": records / (flush_s + run.finalize_s),
        "formats": sorted(run.result.paths),
        "file_bytes": sizes,
        "bytes_per_event": {kind: size / events for kind, size in sizes.items()} if events else {},
    }
