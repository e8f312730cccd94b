"""5. Finalize: records per second of ``proton_ik.finalize()`` for a session of about 26M records."""

from __future__ import annotations

import shutil
import time
from typing import Any

import torch

from benchmarks.buffers.sessions import file_bytes, ik_session
from benchmarks.buffers.settings import Settings
from benchmarks.harness import fresh
from benchmarks.kernels import elementwise


def finalize_rate(settings: Settings) -> dict[str, Any]:
    """finalize of a session of ``finalize_launches`` launches of four_scopes (1,048,576 records
    each). The drain is flushed first and timed apart: flush + finalize is what finalize costs
    when called straight after the launches."""
    problem = elementwise.four_scopes()
    launch = problem.make_launch()
    n = settings.finalize_launches
    directory = settings.scratch / "finalize"
    fn = fresh(problem.fn)
    try:
        with ik_session("finalize", directory) as run:
            for _ in range(n):
                fn[launch.grid](*launch.args, **problem.options)
            torch.cuda.synchronize()
            began = time.perf_counter()
            run.flush()
            flush_s = time.perf_counter() - began
        sizes = file_bytes(run.result)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    records = int(run.result.records)
    events = records // 2  # four_scopes: every record is in a matched pair
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
