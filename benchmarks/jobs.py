"""Sessions in jobs (issue 23): a worker killed with SIGKILL after a flush, with more launches
in flight, and two ranks of a ``torchrun`` job on one timeline, each rank a process of its own
(``benchmarks/job_rank.py``).

The alignment is measured against a known event: each step ends with an all_reduce that both
GPUs leave within the collective's own skew, and a one-CTA marker kernel queued behind it on
each rank. Every step is queued while the GPUs sleep, so that each marker starts when its
all_reduce ends. The gap between the two ranks' marker starts, each on its own %globaltimer
moved onto the host clock by its session's clock pairs, is the merged timeline's error.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

from benchmarks.harness import Context, log

REPOSITORY = Path(__file__).resolve().parents[1]
KILL_AFTER = 50


def torchrun(out: Path) -> list[str]:
    """The command of a two-rank job on this host's GPUs, writing its sessions into ``out``."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "-m",
        "benchmarks.job_rank",
        str(out),
    ]


def run_rank(args: list[str], cwd: Path, timeout: int = 300) -> tuple[list[dict[str, Any]], str]:
    """Run ``benchmarks.job_rank`` (alone, or under torchrun); its JSON lines, and the output's
    tail where it printed none."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return lines, "" if lines else f"exit {done.returncode}: {done.stderr[-800:]}"


def killed(scratch: Path) -> dict[str, Any]:
    """Launches flushed before a SIGKILL, and how many the file left behind holds."""
    from proton_ik.viewer import read_session

    out = scratch / "killed"
    lines, failure = run_rank(
        [sys.executable, "-m", "benchmarks.job_rank", str(out), "--kill-after", str(KILL_AFTER)], scratch
    )
    if not lines:
        return {"error": failure}
    partial = sorted(out.glob("killed.pik.*.partial"))
    if len(partial) != 1:
        return {"error": f"the killed worker left {len(partial)} partial session files"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "was never closed ... recovered N launches": expected
        readable = len(read_session(partial[0]).launches)
    return {**lines[0], "readable": readable}


def marker_gaps(
    first: dict[str, Any], second: dict[str, Any], key: str = "marker_starts_host_ns"
) -> list[int]:
    """Step by step, rank 1's marker time less rank 0's (ns on the host clock), from their lines."""
    return [b - a for a, b in zip(first[key], second[key], strict=True)]


def alignment(scratch: Path) -> dict[str, Any]:
    """Two ranks' marker starts, step by step, on the host clock; skipped with one GPU."""
    import torch

    if torch.cuda.device_count() < 2:
        return {"skipped": f"needs two GPUs on one host, this one has {torch.cuda.device_count()}"}
    out = scratch / "job"
    ranks, failure = run_rank(torchrun(out), scratch)
    if len(ranks) != 2:
        return {"error": failure or f"{len(ranks)} ranks reported"}
    first, second = sorted(ranks, key=lambda r: r["rank"])
    gaps = [
        b - a for a, b in zip(first["marker_starts_host_ns"], second["marker_starts_host_ns"], strict=True)
    ]
    return {
        "gaps_ns": gaps,
        "median_gap_ns": statistics.median(gaps),
        "max_abs_gap_ns": max(abs(gap) for gap in gaps),
        "launches": [r["launches"] for r in (first, second)],
        "clock_pairs": [len(r["clock_pairs"] or []) for r in (first, second)],
    }


def measure(ctx: Context) -> dict[str, Any]:
    scratch = ctx.scratch / "jobs"
    scratch.mkdir(parents=True, exist_ok=True)
    results = {"killed": killed(scratch), "alignment": alignment(scratch)}
    log(f"  jobs: {results}"[:600])
    return results
