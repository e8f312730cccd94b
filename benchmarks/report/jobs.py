"""Sessions in jobs (issue 23): a killed session's readable launches, and the cross-GPU
alignment of a two-rank job's merged timeline."""

from __future__ import annotations

from typing import Any

from benchmarks.report.format import fmt, table

ALIGNED_NS = 2000  # the target: the merged timeline within 2 us across GPUs
KILLED_GOAL = (
    "a killed session (SIGKILL after a flush): 100% of the launches drained before the kill readable"
)
ALIGNED_GOAL = "cross-GPU alignment error of a two-rank job's merged timeline (an all_reduce's end seen by both): <= 2 us"


def _row(goal: str, measured: str, met: bool | None, why_not: str) -> dict[str, Any]:
    key = "jobs_killed" if goal == KILLED_GOAL else "jobs_aligned"
    return {"key": key, "goal": goal, "measured": measured, "met": met, "why_not": "" if met else why_not}


def _unmeasured(goal: str, step: dict[str, Any]) -> dict[str, Any]:
    if "error" in step:
        return _row(goal, "-", None, f"failed: {step['error'][:200]}")
    return _row(goal, "-", None, step.get("skipped", "not measured in this run"))


def target_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    jobs = results.get("jobs", {})
    killed, aligned = jobs.get("killed", {}), jobs.get("alignment", {})
    rows = []
    if "readable" in killed:
        met = killed["readable"] >= killed["flushed"]
        rows.append(
            _row(
                KILLED_GOAL,
                f"{killed['readable']} launches readable; {killed['flushed']} flushed before the kill, "
                f"{killed['launched']} launched",
                met,
                f"only {killed['readable']} of the {killed['flushed']} flushed launches could be read",
            )
        )
    else:
        rows.append(_unmeasured(KILLED_GOAL, killed))
    if "median_gap_ns" in aligned:
        median = aligned["median_gap_ns"]
        rows.append(
            _row(
                ALIGNED_GOAL,
                f"median {median / 1000:+.2f} us, worst step {aligned['max_abs_gap_ns'] / 1000:.2f} us "
                f"({len(aligned['gaps_ns'])} steps)",
                abs(median) <= ALIGNED_NS,
                f"the ranks' marker starts differ by {median / 1000:+.2f} us at the median",
            )
        )
    else:
        rows.append(_unmeasured(ALIGNED_GOAL, aligned))
    return rows


def markdown(results: dict[str, Any]) -> list[str]:
    """'## Jobs'; empty when the section did not run."""
    jobs = results.get("jobs", {})
    if not jobs or "error" in jobs:
        return []
    aligned = jobs.get("alignment", {})
    lines = ["", "## Jobs: a killed worker, and two ranks on one timeline", ""]
    lines += [
        "A worker flushes, makes more launches, and is killed with SIGKILL; its partial session file is "
        "read back. Two ranks of `torchrun` (benchmarks/job_rank.py) each queue steps of a profiled kernel, "
        "an all_reduce and a one-CTA marker kernel while their GPUs sleep; the gap is rank 1's marker start "
        "less rank 0's, each on its own %globaltimer moved onto the host clock by its session's clock pairs.",
        "",
    ]
    if "gaps_ns" in aligned:
        rows = [[str(step), fmt(gap / 1000, "+.2f")] for step, gap in enumerate(aligned["gaps_ns"])]
        lines += table(["step", "rank 1 - rank 0 marker start (us)"], rows)
    return lines
