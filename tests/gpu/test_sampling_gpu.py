"""Sampling on the GPU (``ctas=``, ``warps=``): the sampled CTAs and warps record exactly what they
record unsampled, nobody else records anything, the stored launch holds the sampled CTAs only,
and the kernels compute what they compute plain."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import proton_ik
from proton_ik.runtime.pool import PoolTooSmall

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
import kernels  # noqa: E402
from profiling import profiled  # noqa: E402

ITERS, CTAS, BLOCK = 37, 264, 512


def _loop(num_warps: int = 4):
    x = torch.randn(CTAS * BLOCK, device="cuda")
    out = torch.empty_like(x)
    kernels.loop_kernel[(CTAS,)](x, out, ITERS=ITERS, BLOCK=BLOCK, num_warps=num_warps)
    return out


@pytest.mark.parametrize(
    "mode, ctas, warps, num_warps",
    [
        ("instrumentation:ctas=5", [c for c in range(CTAS) if c % 5 == 0], [0, 1, 2, 3], 4),
        ("instrumentation:ctas=0,7,263,300", [0, 7, 263], [0, 1, 2, 3], 4),  # 300: past the grid
        ("instrumentation:ctas=9,", [9], [0, 1, 2, 3], 4),
        ("instrumentation:warps=1,3", list(range(CTAS)), [1, 3], 4),
        ("instrumentation:ctas=2:warps=0,2:pairs=off", list(range(0, CTAS, 2)), [0, 2], 4),
        ("instrumentation:granularity=warpgroup:warps=4", list(range(CTAS)), [4], 8),
        ("instrumentation:granularity=warp_2:warps=2,6", list(range(CTAS)), [2, 6], 8),
    ],
)
def test_only_the_sampled_ctas_and_warps_record_and_each_exactly_its_records(
    tmp_path, mode, ctas, warps, num_warps
):
    torch.manual_seed(0)
    _, result = profiled(tmp_path, "sampled", lambda: _loop(num_warps), mode=mode)
    per_unit = result.events.groupby(["cta", "warp", "scope"]).size().unstack()
    assert sorted({cta for cta, _ in per_unit.index}) == ctas
    assert sorted({warp for _, warp in per_unit.index}) == warps
    assert len(per_unit) == len(ctas) * len(warps)
    assert (per_unit["outer"] == 1).all() and (per_unit["step"] == ITERS).all()
    launches = result.trace.launches
    assert launches["ctas"].tolist() == [len(ctas)]  # the stored launch holds the sampled CTAs only
    assert int(launches["ctas_missing"].sum()) == 0 and int(launches["units_unfinished"].sum()) == 0
    assert int(launches["overwritten"].sum()) == 0
    assert int(launches["unmatched_begin"].sum()) == 0 and int(launches["unmatched_end"].sum()) == 0
    assert launches["problems"].tolist() == [[]]
    assert launches["sampled"].tolist()[0]  # the launch table says who recorded


def test_a_sampled_ring_launch_is_copied_and_counted_exactly(tmp_path):
    """A trip count known only at run time: the ring, copied in two steps, of the sampled CTAs."""
    ctas, iters = 64, 700
    x = torch.randn(ctas * BLOCK, device="cuda")
    out = torch.empty_like(x)
    trips = torch.tensor([iters], device="cuda", dtype=torch.int32)
    _, result = profiled(
        tmp_path,
        "ring",
        lambda: kernels.runtime_loop_kernel[(ctas,)](x, out, trips, BLOCK=BLOCK, num_warps=4),
        mode="instrumentation:ctas=4:warps=0,3",
    )
    steps = result.events[result.events.scope == "step"].groupby(["cta", "warp"]).size()
    assert sorted({cta for cta, _ in steps.index}) == list(range(0, ctas, 4))
    assert sorted({warp for _, warp in steps.index}) == [0, 3]
    launches = result.trace.launches
    assert launches["ctas"].tolist() == [ctas // 4]
    ring = int(launches["capacity"].iloc[0])
    assert (steps == ring - 1).all()
    # Per warp: an "outer" begin and end (single records) around 700 "step" pairs: 1402 records,
    # of which the ring keeps the newest 2 * (ring - 1) + 1; 16 CTAs of 2 sampled warps.
    assert int(launches["overwritten"].sum()) == (ctas // 4) * 2 * (2 * iters + 2 - (2 * (ring - 1) + 1))


def test_a_sampled_launch_takes_only_its_sampled_ctas_regions_from_the_pool(tmp_path):
    """16384 CTAs of add_kernel ask for 8 MiB of profile buffer, a region of 512 bytes each. A
    pool of 1 MiB refuses that launch. With ctas=64 it takes the 256 regions the sampled CTAs
    write, and the kernel writes nothing past them: the rest of a larger (zeroed) pool stays
    zero. A list whose CTAs all lie past the grid takes one region and writes none."""
    n, block, region = 16384 * 1024, 1024, 512
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)

    def launch():
        kernels.add_kernel[(n // block,)](x, y, out, n, BLOCK=block)
        torch.cuda.synchronize()
        session = proton_ik._session
        assert session is not None and session._recorder is not None
        (drain,) = session._recorder.drains.values()
        written_past = int(drain.arena[256 * region :].count_nonzero().item())  # the first chunk: offset 0
        return out.clone(), drain.pool.high_water, written_past

    kernels.add_kernel[(n // block,)](x, y, out, n, BLOCK=block)
    plain = out.clone()
    with (
        pytest.raises(PoolTooSmall, match="needs 8388608 bytes"),
        pytest.warns(UserWarning, match=r"1 launch\(es\) were refused before they ran\. one launch needs"),
    ):
        profiled(tmp_path / "all", "all", launch, pool_bytes=1 << 20)
    (sampled, taken, written_past), result = profiled(
        tmp_path / "sampled", "sampled", launch, pool_bytes=16 << 20, mode="instrumentation:ctas=64"
    )
    assert torch.equal(sampled, plain)
    assert taken == 256 * region and written_past == 0
    per_warp = result.events.groupby(["cta", "warp"]).size()
    assert sorted({cta for cta, _ in per_warp.index}) == list(range(0, n // block, 64))
    assert (per_warp == 3).all() and len(per_warp) == 256 * 4
    assert result.trace.launches["ctas"].tolist() == [256]
    (past, taken, written_past), result = profiled(
        tmp_path / "past", "past", launch, pool_bytes=16 << 20, mode="instrumentation:ctas=20000,30000"
    )
    assert torch.equal(past, sampled) and taken == region and written_past == 0
    assert result.events.empty


def test_sampled_ctas_of_a_3d_grid_are_the_listed_linear_ids(tmp_path):
    nx, ny, nz = 4, 3, 2
    out = torch.zeros(nx * ny * nz, device="cuda", dtype=torch.int32)
    _, result = profiled(
        tmp_path,
        "grid3d",
        lambda: kernels.grid3d_kernel[(nx, ny, nz)](out, NX=nx, NY=ny, num_warps=2),
        mode="instrumentation:ctas=1,6,23",
    )
    assert torch.equal(out.cpu(), torch.arange(nx * ny * nz, dtype=torch.int32))
    per_cta = result.events.groupby("cta").size()
    assert per_cta.index.tolist() == [1, 6, 23] and (per_cta == 2).all()


def test_numerics_are_unchanged_under_sampling(tmp_path):
    n = 1 << 22
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    rows = torch.randn(4096, 1000, device="cuda")

    def run_all():
        added = torch.empty_like(x)
        kernels.add_kernel[(n // 1024,)](x, y, added, n, BLOCK=1024)
        normalized = torch.empty_like(rows)
        kernels.softmax_kernel[(rows.shape[0],)](rows, normalized, rows.shape[1], rows.stride(0), BLOCK=1024)
        return added, normalized

    plain = run_all()
    for mode in ("instrumentation:ctas=3:warps=1,3", "instrumentation:ctas=0,5,4095:occupancy=keep"):
        sampled, result = profiled(
            tmp_path / mode.replace(":", "_").replace(",", "-"), "numerics", run_all, mode=mode
        )
        assert result.launches == 2
        for p, s in zip(plain, sampled, strict=True):
            assert torch.equal(p, s)


def test_graph_replays_of_a_sampled_kernel_record_the_sampled_ctas_each_time(tmp_path):
    n, block = 1 << 20, 1024
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.zeros_like(x)
    proton_ik.start("graph", mode="instrumentation:ctas=8", out_dir=tmp_path)
    try:
        kernels.add_kernel[(n // block,)](x, y, out, n, BLOCK=block)  # compiles; recorded too
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kernels.add_kernel[(n // block,)](x, y, out, n, BLOCK=block)
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    per_launch = result.events.groupby("launch")
    assert len(per_launch) == 4
    for _, events in per_launch:
        assert sorted(events["cta"].unique()) == list(range(0, n // block, 8))
        assert len(events) == (n // block // 8) * 4 * 3


@pytest.mark.parametrize(
    "granularity, num_warps, first_warps",
    [
        ("warp_2", 8, [0, 2, 4, 6]),
        ("warp_4", 8, [0, 4]),
        ("warp_8", 8, [0]),
        ("warpgroup_2", 16, [0, 8]),
    ],
)
def test_units_of_several_warps_record_once_each_by_their_first_warp(
    tmp_path, granularity, num_warps, first_warps
):
    """Proton's warp_2..8 and warp_group_2..8: one unit of that many warps records, exactly."""
    torch.manual_seed(0)
    out, result = profiled(
        tmp_path, granularity, lambda: _loop(num_warps), mode=f"instrumentation:granularity={granularity}"
    )
    torch.manual_seed(0)
    assert torch.equal(out, _loop(num_warps))
    per_unit = result.events.groupby(["cta", "warp", "scope"]).size().unstack()
    assert sorted({warp for _, warp in per_unit.index}) == first_warps
    assert len(per_unit) == CTAS * len(first_warps)
    assert (per_unit["outer"] == 1).all() and (per_unit["step"] == ITERS).all()
    assert int(result.trace.launches["overwritten"].sum()) == 0
