"""The runner's jobs section, judged (``benchmarks.report.jobs``): a killed session's readable
launches against those flushed before the kill, and two ranks' marker gaps against 2 us."""

from __future__ import annotations

from benchmarks.report import jobs


def rows(section: dict) -> dict[str, dict]:
    return {row["key"]: row for row in jobs.target_rows({"jobs": section})}


def test_every_flushed_launch_readable_meets_the_target():
    found = rows({"killed": {"flushed": 50, "launched": 70, "readable": 63}, "alignment": {}})
    assert found["jobs_killed"]["met"] is True
    assert found["jobs_killed"]["measured"] == "63 launches readable; 50 flushed before the kill, 70 launched"


def test_a_flushed_launch_lost_fails_the_target_and_says_how_many():
    found = rows({"killed": {"flushed": 50, "launched": 70, "readable": 49}, "alignment": {}})
    assert found["jobs_killed"]["met"] is False
    assert "only 49 of the 50 flushed launches" in found["jobs_killed"]["why_not"]


def test_the_alignment_is_judged_on_the_median_gap():
    aligned = {"gaps_ns": [-4518, -230, 122, 2500], "median_gap_ns": -54.0, "max_abs_gap_ns": 4518}
    assert rows({"killed": {}, "alignment": aligned})["jobs_aligned"]["met"] is True
    late = {**aligned, "median_gap_ns": 45688.0}
    row = rows({"killed": {}, "alignment": late})["jobs_aligned"]
    assert row["met"] is False and "+45.69 us at the median" in row["why_not"]


def test_one_gpu_or_a_failure_is_not_measured_and_says_why():
    found = rows(
        {
            "killed": {"error": "exit 1: boom"},
            "alignment": {"skipped": "needs two GPUs on one host, this one has 1"},
        }
    )
    assert found["jobs_killed"]["met"] is None and found["jobs_killed"]["why_not"] == "failed: exit 1: boom"
    assert found["jobs_aligned"]["why_not"] == "needs two GPUs on one host, this one has 1"


def test_the_report_shows_each_steps_gap():
    results = {
        "jobs": {
            "killed": {},
            "alignment": {"gaps_ns": [-374, 122], "median_gap_ns": -126.0, "max_abs_gap_ns": 374},
        }
    }
    text = "\n".join(jobs.markdown(results))
    assert "## Jobs: a killed worker, and two ranks on one timeline" in text
    assert "| 0 | -0.37 |" in text and "| 1 | +0.12 |" in text
