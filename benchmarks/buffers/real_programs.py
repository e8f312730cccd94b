"""6. What real programs do: a CUDA graph replayed, and an autotuned kernel, each checked against
what should have been recorded."""

from __future__ import annotations

import shutil
from typing import Any

import numpy as np
import torch
import triton

from benchmarks.buffers.sessions import ik_session, launch_table, output_error
from benchmarks.buffers.settings import Settings
from benchmarks.harness import fresh
from benchmarks.kernels import elementwise

GRAPH_REPLAYS = 10
AUTOTUNE_CALLS = 3


def graph_replays(settings: Settings) -> dict[str, Any]:
    """One instrumented launch captured in a CUDA graph and replayed GRAPH_REPLAYS times."""
    problem = elementwise.short_add()
    launch = problem.make_launch()
    fn = fresh(problem.fn)
    directory = settings.scratch / "graph"
    expected = int(problem.records_per_warp(problem.options["num_warps"]).sum())
    try:
        with ik_session("graph", directory) as run:
            fn[launch.grid](*launch.args, **problem.options)  # compiles and loads outside the capture
            torch.cuda.synchronize()
            for out in launch.outputs:
                out.zero_()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn[launch.grid](*launch.args, **problem.options)
            for _ in range(GRAPH_REPLAYS):
                graph.replay()
            torch.cuda.synchronize()
        table = launch_table(run)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    missing = [column for column in ("graph", "replay") if column not in table.columns]
    replays = table.iloc[0:0] if missing else table[table["graph"].notna()]
    found = {
        "replays_made": GRAPH_REPLAYS,
        "launch_rows": len(table),
        "missing_columns": missing,
        "replay_rows": len(replays),
        "replay_indices": sorted(int(v) for v in replays["replay"]) if not missing else [],
        "records_per_replay": [int(v) for v in replays["records"]],
        "records_expected": expected,
        "overwritten": int(table["overwritten"].sum()),
        "output_error": output_error(launch, problem.tolerance),
    }
    found["exact"] = (
        not missing
        and found["replay_indices"] == list(range(GRAPH_REPLAYS))
        and all(r == expected for r in found["records_per_replay"])
        and found["overwritten"] == 0
        and not found["output_error"]
    )
    return found


def autotune_choice(settings: Settings) -> dict[str, Any]:
    """An autotuned add (two configs far apart in speed), tuned outside a session and inside one."""
    n = settings.autotune_elements
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(n, meta["BLOCK"]),)

    outside = elementwise.tuned_add()
    outside[grid](x, y, out, n)
    torch.cuda.synchronize()
    inside = elementwise.tuned_add()
    directory = settings.scratch / "autotune"
    try:
        with ik_session("autotune", directory) as run:
            for _ in range(AUTOTUNE_CALLS):
                inside[grid](x, y, out, n)
            torch.cuda.synchronize()
        table = launch_table(run)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    chosen = _config(inside.best_config)
    expected = triton.cdiv(n, chosen["BLOCK"]) * chosen["num_warps"] * 2  # one scope: one pair per warp
    # Each config the autotuner times is recorded once, its config marked autotune=benchmark
    # (runtime.autotune); the user's calls are the other rows.
    configs = [str(v) for v in table["config"]] if "config" in table.columns else [""] * len(table)
    benchmarked = [c.endswith("autotune=benchmark") for c in configs]
    user_records = [int(v) for v, bench in zip(table["records"], benchmarked, strict=True) if not bench]
    found = {
        "calls": AUTOTUNE_CALLS,
        "config_outside": _config(outside.best_config),
        "config_inside": chosen,
        "timings_outside_ms": _timings(outside),
        "timings_inside_ms": _timings(inside),
        "launch_rows": len(table),
        "records_per_launch": [int(v) for v in table["records"]],
        "records_expected": expected,
        "user_records": user_records,
        "benchmark_rows": sum(benchmarked),
        "configs_tried": len(elementwise.tuned_add_configs()),
        "config_column": configs,
        "output_error": "" if torch.equal(out, x + y) else "out != x + y",
    }
    found["same_config"] = found["config_outside"] == chosen
    found["exact"] = (
        len(user_records) == AUTOTUNE_CALLS
        and all(r == expected for r in user_records)
        and found["benchmark_rows"] == found["configs_tried"]
        and not found["output_error"]
    )
    return found


def _config(config: Any) -> dict[str, Any]:
    return {**{str(k): v for k, v in config.kwargs.items()}, "num_warps": int(config.num_warps)}


def _timings(tuner: Any) -> dict[str, float]:
    """Each config's benchmark time (ms, the median do_bench reports), as the autotuner saw it."""
    timings = getattr(tuner, "configs_timings", None) or {}
    return {str(config): float(np.ravel(value)[0]) for config, value in timings.items()}
