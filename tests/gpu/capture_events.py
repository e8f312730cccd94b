"""Capture the event session that the CPU tests decode, and measure how far apart the clocks of
one SM's sub-partitions run (the skew that ``pairing.async_events.CLOCK_SKEW_CYCLES`` allows for).

Run on a GPU machine from the repository root: ``python tests/gpu/capture_events.py OUT_DIR``.
It writes ``events.pik``: ``barrier_kernel``, 8 CTAs x 4 warps, 6 iterations, each starting
instance i % 2 of "handoff" in every warp, a barrier, and its end in every warp (a few kB); and
prints, as JSON, the skew: per release of a barrier, each warp's clock against the earliest,
by sub-partition (warp % 4), and the most that a warp's start of a "handoff" instance came after
another warp's end of it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

import proton_ik

sys.path.insert(0, str(Path(__file__).parent))
import kernels

SUB_PARTITIONS = 4


def profiled(out_dir: Path, name: str, launch) -> proton_ik.Result:
    proton_ik.start(name, out_dir=out_dir / "work", formats=())
    launch()
    torch.cuda.synchronize()
    return proton_ik.finalize()


def release_skew(out_dir: Path) -> dict:
    ctas, warps, iters = 4 * torch.cuda.get_device_properties(0).multi_processor_count, 8, 32
    out = torch.zeros(ctas, dtype=torch.int32, device="cuda")
    result = profiled(
        out_dir, "released", lambda: kernels.released_kernel[(ctas,)](out, ITERS=iters, num_warps=warps)
    )
    marks = result.trace.marks.sort_values(["cta", "warp", "cycles"])
    marks["release"] = marks.groupby(["cta", "warp"]).cumcount()
    clocks = marks.pivot_table(index=["cta", "release"], columns="warp", values="cycles").to_numpy()
    after_first = clocks - clocks.min(axis=1, keepdims=True)
    by_partition = {
        str(p): np.percentile(after_first[:, p::SUB_PARTITIONS], [50, 99, 100]).tolist()
        for p in range(SUB_PARTITIONS)
    }
    return {
        "releases": len(clocks),
        "warps": warps,
        "cycles after the earliest warp, by sub-partition: p50, p99, max": by_partition,
    }


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    ctas, warps, iters, block = 8, 4, 6, 512
    x = torch.randn(ctas * block, device="cuda")
    out = torch.empty_like(x)
    result = profiled(
        out_dir,
        "events",
        lambda: kernels.barrier_kernel[(ctas,)](x, out, ITERS=iters, BLOCK=block, num_warps=warps),
    )
    target = out_dir / "events.pik"
    shutil.copy(result.paths["session"], target)
    events = result.trace.async_events
    late = events.groupby(["cta", "start_record"]).apply(
        lambda group: group["start_cycles"].max() - group["end_cycles"].min()
    )
    report = {
        "events.pik": {"bytes": target.stat().st_size, "events": len(events)},
        "latest start after an end of its instance, cycles": int(late.max()),
        "barrier release": release_skew(out_dir),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
