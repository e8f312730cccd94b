"""Buffers that grow with what is recorded, on the GPU: the default mode on a large grid, graph
capture and replays, autotuning, and several streams."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest

import proton_ik
from proton_ik.contract.layout import CTA_HEADER_BYTES, ENTRY_BYTES, UNIT_HEADER_BYTES, BufferLayout

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
import triton  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import kernels  # noqa: E402


def _scope_counts(result):
    return result.events.groupby(["launch", "cta", "warp", "scope"]).size()


def test_default_mode_records_a_large_straight_line_grid_exactly(tmp_path):
    ctas, num_warps, block = 16384, 8, 2048
    n = ctas * block
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    plain = torch.empty_like(x)
    kernels.four_scopes_kernel[(ctas,)](x, plain, n, BLOCK=block, num_warps=num_warps)
    proton_ik.start("large", out_dir=tmp_path)  # no options: the default mode and pool
    try:
        compiled = kernels.four_scopes_kernel[(ctas,)](x, out, n, BLOCK=block, num_warps=num_warps)
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    assert torch.equal(out, plain)
    profile = compiled.metadata.proton_ik
    # Four straight-line scopes, each a begin and its end in one block: four pair entries.
    assert profile["capacity"]["source"] == "bound" and profile["capacity"]["bound"] == 4
    layout = BufferLayout.from_dict(profile["layout"])
    assert layout.capacity == 4
    raw = CTA_HEADER_BYTES + num_warps * (UNIT_HEADER_BYTES + 4 * ENTRY_BYTES)
    assert layout.cta_bytes == -(-raw // 128) * 128
    counts = _scope_counts(result)
    assert len(counts) == ctas * num_warps * 4 and (counts == 1).all()
    stats = result.trace.launches
    assert int(stats["overwritten"].sum()) == 0
    assert sorted(result.paths) == ["pftrace", "session"]  # Chrome JSON only when asked


def test_a_loop_that_outruns_the_ring_is_counted_exactly_in_the_default_mode(tmp_path):
    ctas, num_warps = 64, 4
    x = torch.randn(ctas * 512, device="cuda")
    out = torch.empty_like(x)
    iters = torch.tensor([700], device="cuda", dtype=torch.int32)
    proton_ik.start("ring", out_dir=tmp_path)
    try:
        compiled = kernels.runtime_loop_kernel[(ctas,)](x, out, iters, BLOCK=512, num_warps=num_warps)
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    capacity = compiled.metadata.proton_ik["capacity"]
    assert capacity["source"] == "ring" and capacity["bound"] is None
    ring = capacity["entries"]
    stats = result.trace.launches
    # Per warp: 700 "step" pairs (one entry each) between an "outer" begin and end (single
    # records): 702 entries, 1402 records. The ring keeps the newest `ring` entries.
    kept_records = 2 * (ring - 1) + 1
    assert int(stats["overwritten"].sum()) == ctas * num_warps * (1402 - kept_records)
    steps = result.events[result.events.scope == "step"].groupby(["cta", "warp"]).size()
    assert len(steps) == ctas * num_warps and (steps == ring - 1).all()


def test_graph_capture_and_ten_replays_are_each_recorded(tmp_path):
    n, block = 1 << 20, 1024
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    expected = torch.empty_like(x)
    kernels.add_kernel[(n // block,)](x, y, expected, n, BLOCK=block)  # plain, outside the session
    out = torch.zeros_like(x)
    proton_ik.start("graph", out_dir=tmp_path)
    try:
        kernels.add_kernel[(n // block,)](x, y, out, n, BLOCK=block)  # compiles; recorded too
        torch.cuda.synchronize()
        out.zero_()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kernels.add_kernel[(n // block,)](x, y, out, n, BLOCK=block)
        for _ in range(10):
            graph.replay()
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    assert torch.equal(out, expected)
    launches = result.trace.launches
    assert len(launches) == 11
    replays = launches.dropna(subset=["replay"])
    assert sorted(replays["replay"].astype(int)) == list(range(10))
    counts = result.events.groupby("launch").size()
    assert (counts == (n // block) * 4 * 3).all() and len(counts) == 11
    assert int(launches["overwritten"].sum()) == 0


def test_autotune_picks_the_unprofiled_config_and_records_each_config_once(tmp_path):
    n = 1 << 24
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK"]),)

    unprofiled = kernels.make_tuned_add()
    unprofiled[grid](x, y, out, n)
    profiled = kernels.make_tuned_add()
    proton_ik.start("tuned", out_dir=tmp_path)
    try:
        for _ in range(3):
            profiled[grid](x, y, out, n)
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    assert torch.equal(out, x + y)
    assert profiled.best_config.kwargs == unprofiled.best_config.kwargs
    assert profiled.best_config.num_warps == unprofiled.best_config.num_warps
    launches = result.trace.launches
    # One launch of each config tried (of the autotuner's dozens), then the user's three calls.
    configs = launches["config"].astype(str)
    tried = kernels.tuned_configs()
    assert len(launches) == len(tried) + 3
    assert configs.str.contains("autotune=benchmark").tolist() == [True] * len(tried) + [False] * 3
    counts = result.events.groupby("launch").size().tolist()
    for position, config in enumerate(tried):
        assert f"BLOCK={config.kwargs['BLOCK']} " in configs.iloc[position]
        assert counts[position] == triton.cdiv(n, config.kwargs["BLOCK"]) * config.num_warps
    chosen = profiled.best_config
    assert configs.iloc[len(tried) :].str.contains(f"BLOCK={chosen.kwargs['BLOCK']} ").all()
    assert counts[len(tried) :] == [triton.cdiv(n, chosen.kwargs["BLOCK"]) * chosen.num_warps] * 3


def test_two_streams_keep_their_launches_apart(tmp_path):
    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    outs = [torch.empty_like(x), torch.empty_like(x)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    blocks = [1024, 512]  # different grids tell the launches apart
    proton_ik.start("streams", out_dir=tmp_path)
    try:
        for _ in range(5):
            for stream, out, block in zip(streams, outs, blocks, strict=True):
                with torch.cuda.stream(stream):
                    kernels.add_kernel[(n // block,)](x, y, out, n, BLOCK=block)
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    launches = result.trace.launches
    assert len(launches) == 10
    handles = {stream.cuda_stream: n // block for stream, block in zip(streams, blocks, strict=True)}
    ctas = result.events.groupby("launch")["cta"].nunique()
    for row in launches.itertuples():
        assert handles[int(row.stream)] == ctas[row.launch]
    counts = result.events.groupby("launch").size()
    assert all(counts[row.launch] == handles[int(row.stream)] * 4 * 3 for row in launches.itertuples())


def test_two_devices_keep_their_launches_apart(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    n = 1 << 20
    blocks = {0: 1024, 1: 512}
    inputs = {d: (torch.randn(n, device=f"cuda:{d}"), torch.randn(n, device=f"cuda:{d}")) for d in blocks}
    outs = {d: torch.empty(n, device=f"cuda:{d}") for d in blocks}
    expected = {d: torch.empty(n, device=f"cuda:{d}") for d in blocks}
    for device, block in blocks.items():
        with torch.cuda.device(device):
            kernels.add_kernel[(n // block,)](*inputs[device], expected[device], n, BLOCK=block)
    proton_ik.start("devices", out_dir=tmp_path)
    try:
        for _ in range(3):
            for device, block in blocks.items():
                with torch.cuda.device(device):
                    x, y = inputs[device]
                    kernels.add_kernel[(n // block,)](x, y, outs[device], n, BLOCK=block)
        for device in blocks:
            torch.cuda.synchronize(device)
    finally:
        result = proton_ik.finalize()
    for device in blocks:
        assert torch.equal(outs[device], expected[device])
    launches = result.trace.launches
    assert sorted(launches["device"].astype(int)) == [0, 0, 0, 1, 1, 1]
    counts = result.events.groupby("launch").size()
    for row in launches.itertuples():
        assert counts[row.launch] == (n // blocks[int(row.device)]) * 4 * 3


def test_a_launch_larger_than_the_pool_is_refused_before_it_runs_and_nothing_is_lost(tmp_path):
    n, ctas, num_warps, block = 1 << 16, 16384, 8, 2048
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    small = torch.empty_like(x)
    big_in = torch.randn(ctas * block, device="cuda")
    big_out = torch.zeros_like(big_in)
    proton_ik.start("small_pool", out_dir=tmp_path, pool_bytes=1 << 20)
    try:
        kernels.add_kernel[(n // 1024,)](x, y, small, n, BLOCK=1024)
        with pytest.raises(RuntimeError, match=r"one launch needs (\d+) bytes") as refused:
            kernels.four_scopes_kernel[(ctas,)](
                big_in, big_out, ctas * block, BLOCK=block, num_warps=num_warps
            )
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    # Four pair entries per warp: the exact size the launch needed, from the layout.
    raw = CTA_HEADER_BYTES + num_warps * (UNIT_HEADER_BYTES + 4 * ENTRY_BYTES)
    assert f"needs {ctas * (-(-raw // 128) * 128)} bytes" in str(refused.value)
    assert not big_out.any()  # refused before it ran
    assert result.launches == 1 and len(result.events) == (n // 1024) * 4 * 3


def test_a_capture_proton_ik_cannot_follow_runs_and_is_reported_unrecorded(tmp_path):
    n, block = 1 << 20, 1024
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    expected = torch.empty_like(x)
    kernels.add_kernel[(n // block,)](x, y, expected, n, BLOCK=block)
    out = torch.zeros_like(x)
    proton_ik.start("raw_graph", out_dir=tmp_path)
    try:
        kernels.add_kernel[(n // block,)](x, y, out, n, BLOCK=block)
        torch.cuda.synchronize()
        out.zero_()
        graph = torch._C._CUDAGraph()  # not torch.cuda.CUDAGraph: its capture is not wrapped
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream), pytest.warns(UserWarning, match="not recorded"):
            graph.capture_begin(pool=None, capture_error_mode="global")  # as torch.cuda.graph calls it
            kernels.add_kernel[(n // block,)](x, y, out, n, BLOCK=block)
            graph.capture_end()
        graph.replay()
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    assert torch.equal(out, expected)
    assert result.launches == 1
    warnings = [line for line in str(result.summary()).splitlines() if "were not recorded" in line]
    assert len(warnings) == 1 and "add_kernel" in warnings[0]


def test_two_threads_launching_at_once_are_each_recorded(tmp_path):
    import threading

    n = 1 << 18
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    blocks = [1024, 512]
    outs = [torch.empty_like(x) for _ in blocks]
    kernels.add_kernel[(n // 1024,)](x, y, outs[0], n, BLOCK=1024)  # compiled before the threads
    proton_ik.start("threads", out_dir=tmp_path)
    try:
        for block, out in zip(blocks, outs, strict=True):
            kernels.add_kernel[(n // block,)](x, y, out, n, BLOCK=block)  # compiles in the session
        torch.cuda.synchronize()

        def launch(block, out):
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for _ in range(20):
                    kernels.add_kernel[(n // block,)](x, y, out, n, BLOCK=block)
            stream.synchronize()

        threads = [threading.Thread(target=launch, args=pair) for pair in zip(blocks, outs, strict=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    launches = result.trace.launches
    assert len(launches) == 2 + 40 and launches["launch"].nunique() == 42
    ctas = result.events.groupby("launch")["cta"].nunique()
    counts = result.events.groupby("launch").size()
    assert sorted(ctas.value_counts().to_dict().items()) == [(n // 1024, 21), (n // 512, 21)]
    assert (counts == ctas * 4 * 3).all()


def test_a_finalized_sessions_device_pool_is_freed_at_finalize(tmp_path):
    """One profiled window after another: each session's pool is given back at its finalize,
    not when the garbage collector gets to the session (the device would hold one per window)."""
    x = torch.randn(64 * 2048, device="cuda")
    out = torch.empty_like(x)
    # An earlier test's tensors held in a cycle (a frame kept by a caught exception's traceback)
    # would be freed by a collection inside a window, and read as this test's memory.
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for window in range(3):
        proton_ik.start(f"window{window}", out_dir=tmp_path, pool_bytes=1 << 30, formats=())
        kernels.four_scopes_kernel[(64,)](x, out, x.numel(), BLOCK=2048, num_warps=4)
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() >= before + (1 << 30)  # the pool, while it runs
        result = proton_ik.finalize()
        assert result.launches == 1
        assert torch.cuda.memory_allocated() - before < 1 << 20
