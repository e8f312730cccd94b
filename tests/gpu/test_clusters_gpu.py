"""Thread-block clusters on a GPU (Hopper and later): a matmul launched with ``num_ctas=2``
records, in every CTA's header, the cluster Triton's launch put it in and its rank there, and
each cluster comes out whole; without clusters, each CTA is a cluster of its own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from proton_ik.viewer.readback import read_packets
from proton_ik.viewer.tracks import CLUSTER_TRACK

sys.path.insert(0, str(Path(__file__).parent))
import cluster_kernels as ck
from profiling import profiled

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def hopper():
    if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("thread-block clusters need sm_90 or later")


@pytest.mark.parametrize("num_ctas", [1, 2])
def test_each_ctas_cluster_and_rank_are_exact(tmp_path, num_ctas):
    a = torch.randn(ck.M, ck.K, device="cuda", dtype=torch.float16)
    b = torch.randn(ck.K, ck.N, device="cuda", dtype=torch.float16)

    def run():
        c = torch.empty(ck.M, ck.N, device="cuda", dtype=torch.float32)
        ck.launch(a, b, c, num_ctas)
        return c

    plain = run()
    out, result = profiled(tmp_path, f"clusters{num_ctas}", run, formats=("pftrace",))
    assert torch.equal(plain, out)
    trace = result.trace
    assert trace.problems == []
    programs = ck.grid()[0]
    # Triton launches gridX * num_ctas CTAs in x, clusters of (num_ctas, 1, 1): CTA c is rank
    # c % num_ctas of cluster c // num_ctas, the program of that id.
    ctas = trace.units.groupby("cta")[["cluster", "cluster_rank"]].agg(["min", "max"])
    assert ctas.index.tolist() == list(range(programs * num_ctas))
    for field in ("cluster", "cluster_rank"):
        assert (ctas[field, "min"] == ctas[field, "max"]).all()  # every unit of a CTA agrees
    assert (ctas["cluster", "min"] == ctas.index // num_ctas).all()
    assert (ctas["cluster_rank", "min"] == ctas.index % num_ctas).all()
    clusters = trace.clusters
    assert clusters["cluster"].tolist() == list(range(programs))
    assert (clusters["size"] == num_ctas).all()
    assert all(
        ctas_ == tuple(range(c * num_ctas, (c + 1) * num_ctas))
        for c, ctas_ in zip(clusters["cluster"], clusters["ctas"], strict=True)
    )
    # Every unit ran each K step's scope.
    assert len(trace.events) == programs * num_ctas * ck.NUM_WARPS * (ck.K // ck.BLOCK_K)
    # The trace draws the clusters track only where a cluster holds several CTAs.
    packets = read_packets(result.paths["pftrace"])
    drawn = [
        p for p in packets if p.HasField("track_descriptor") and p.track_descriptor.name == CLUSTER_TRACK
    ]
    assert bool(drawn) == (num_ctas > 1)
