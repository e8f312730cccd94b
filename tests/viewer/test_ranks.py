"""Several sessions of one job side by side: each rank's mean per scope, the slowest named."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from proton_ik import viewer
from proton_ik.cli import main
from proton_ik.viewer.ranks import label_of, side_by_side

DATA = Path(__file__).parents[1] / "data"


def test_each_scope_names_its_slowest_rank(tmp_path, as_rank):
    fast = as_rank(DATA / "diff_a.pik", tmp_path / "dist.rank0.pik", 0)
    slow = as_rank(DATA / "diff_b.pik", tmp_path / "dist.rank1.pik", 1)
    summaries = {label_of(viewer.load(p).info, p.name): viewer.load(p).summary() for p in (fast, slow)}
    assert list(summaries) == ["rank 0", "rank 1"]
    table = side_by_side(summaries).set_index("scope")
    for scope in ("compute", "store"):
        means = table.loc[scope, ["rank 0: mean_ns", "rank 1: mean_ns"]].to_numpy(dtype=float)
        assert table.loc[scope, "slowest"] == ("rank 0" if means[0] > means[1] else "rank 1")
        assert np.isclose(table.loc[scope, "slowest_over_fastest"], means.max() / means.min())
    counts = table.loc["compute", ["rank 0: count", "rank 1: count"]]
    assert (counts > 0).all()


def test_show_prints_the_sessions_side_by_side(tmp_path, capsys, as_rank):
    fast = as_rank(DATA / "diff_a.pik", tmp_path / "dist.rank0.pik", 0)
    slow = as_rank(DATA / "diff_b.pik", tmp_path / "dist.rank1.pik", 1)
    assert main(["show", str(fast), str(slow)]) == 0
    out = capsys.readouterr().out
    assert f"== {fast}" in out and f"== {slow}" in out
    side = out.split("== side by side")[1]
    assert "rank 0 mean ns" in side and "rank 1 mean ns" in side and "compute" in side


def test_a_session_of_no_job_is_labelled_by_its_file():
    assert label_of({"name": "run"}, "run.pik") == "run.pik"
    assert label_of({"rank": True}, "run.pik") == "run.pik"
