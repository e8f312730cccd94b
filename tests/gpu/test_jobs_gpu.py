"""Sessions in real jobs, on the GPU: a ``torchrun`` job of two ranks with NCCL collectives
between profiled kernels (a session file per rank, records exact, the merged trace holding both,
the ranks' clocks aligned), and a worker killed with SIGKILL (every launch flushed before the
kill readable)."""

from __future__ import annotations

import shutil
import statistics
import sys
from pathlib import Path

import pytest

import proton_ik

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
from benchmarks.job_rank import BLOCK, IN_FLIGHT, SCOPES, STEPS, WARPS, N  # noqa: E402
from benchmarks.jobs import marker_gaps, run_rank, torchrun  # noqa: E402

EVENTS_PER_CTA = WARPS * SCOPES
# The test's bound on the misalignment of two GPUs of one host, marker against marker: loose, as
# the all_reduce's own end skew is in it; the benchmark's target is 2 us.
ALIGNED_WITHIN_NS = 20_000


def _run(args: list[str], tmp_path: Path) -> list[dict]:
    lines, failure = run_rank(args, tmp_path)
    return lines if lines else pytest.fail(failure)


def test_a_torchrun_job_writes_an_exact_session_per_rank_aligned_in_one_trace(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    out = tmp_path / "job"
    ranks = _run(torchrun(out), tmp_path)
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    assert sorted(Path(r["session"]).name for r in ranks) == ["dist.rank0.pik", "dist.rank1.pik"]
    for rank in ranks:
        assert rank["launches"] == 2 * STEPS
        expected = {
            str(launch): (N // BLOCK if launch % 2 == 0 else 1) * EVENTS_PER_CTA
            for launch in range(2 * STEPS)
        }
        assert rank["counts"] == expected
        assert len(rank["clock_pairs"]) == 2
    merged = proton_ik.merge([out], tmp_path / "dist.pftrace")
    from proton_ik.viewer.readback.packets import read_packets

    roots = [
        p.track_descriptor.name
        for p in read_packets(merged)
        if p.HasField("track_descriptor") and not p.track_descriptor.HasField("parent_uuid")
    ]
    assert [name.split(":")[0] for name in roots] == ["rank 0", "rank 1"]
    first, second = sorted(ranks, key=lambda r: r["rank"])

    gaps = marker_gaps(first, second)
    median = statistics.median(gaps)
    print(
        f"cross-GPU alignment: marker start gaps {gaps} ns, median {median} ns; first-record begin "
        f"gaps (through the clock fit) {marker_gaps(first, second, 'marker_begins_host_ns')} ns; "
        f"markers queued at {[r['markers_queued_ns'] for r in ranks]} ns after the sleep"
    )
    assert abs(median) <= ALIGNED_WITHIN_NS


def test_a_worker_killed_after_a_flush_leaves_every_flushed_launch_readable(tmp_path):
    out = tmp_path / "killed"
    lines = _run([sys.executable, "-m", "benchmarks.job_rank", str(out), "--kill-after", "50"], tmp_path)
    assert lines == [{"flushed": 50, "launched": 50 + IN_FLIGHT}]
    (partial,) = out.glob("killed.pik.*.partial")
    from proton_ik.cli import main

    with pytest.warns(UserWarning, match="recovered"):
        from proton_ik.viewer.session_file import read_session

        session = read_session(partial)
    # Every flushed launch; those in flight at the kill may or may not have reached the file.
    assert 50 <= len(session.launches) <= 50 + IN_FLIGHT
    assert main(["show", str(partial)]) == 0
    shutil.rmtree(out)
