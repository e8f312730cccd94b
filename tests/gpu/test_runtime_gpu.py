"""What only a GPU can show: unchanged numerics, exact record counts, timing accuracy, bounded
memory over many launches, memcheck, and complete traces from real runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import proton_ik
from proton_ik.demo import matmul_kernel

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import kernels  # noqa: E402  (beside this file; --import-mode=importlib adds no path)
from profiling import memcheck_clean, profiled  # noqa: E402


def test_numerics_unchanged(tmp_path):
    n = 1 << 22
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    rows = torch.randn(4096, 1000, device="cuda")
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)

    def run_all():
        out_add = torch.empty_like(x)
        kernels.add_kernel[(n // 1024,)](x, y, out_add, n, BLOCK=1024)
        out_softmax = torch.empty_like(rows)
        kernels.softmax_kernel[(rows.shape[0],)](rows, out_softmax, rows.shape[1], rows.stride(0), BLOCK=1024)
        out_mm = torch.empty(1024, 1024, device="cuda", dtype=torch.float16)
        matmul_kernel[(8, 8)](
            a, b, out_mm, 1024, 1024, 1024, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3
        )
        return out_add, out_softmax, out_mm

    plain = run_all()
    instrumented, result = profiled(tmp_path, "numerics", run_all)
    assert result.launches == 3
    for p, i in zip(plain, instrumented, strict=True):
        assert torch.equal(p, i)
    assert torch.allclose(plain[2].float(), a.float() @ b.float(), atol=1.0, rtol=1e-2)


def test_exact_record_counts(tmp_path):
    iters, ctas, num_warps = 37, 264, 4
    x = torch.randn(ctas * 512, device="cuda")
    out = torch.empty_like(x)
    _, result = profiled(
        tmp_path,
        "counts",
        lambda: kernels.loop_kernel[(ctas,)](x, out, ITERS=iters, BLOCK=512, num_warps=num_warps),
    )
    events = result.events
    per_warp = events.groupby(["cta", "warp", "scope"]).size().unstack()
    assert len(per_warp) == ctas * num_warps
    assert (per_warp["outer"] == 1).all()
    assert (per_warp["step"] == iters).all()
    stats = result.trace.launches
    assert int(stats["overwritten"].sum()) == 0
    assert int(stats["unmatched_begin"].sum()) == 0 and int(stats["unmatched_end"].sum()) == 0


def test_ring_keeps_newest_and_counts_the_rest(tmp_path):
    iters, ctas = 100, 8
    x = torch.randn(ctas * 512, device="cuda")
    out = torch.empty_like(x)
    _, result = profiled(
        tmp_path,
        "ring",
        lambda: kernels.loop_kernel[(ctas,)](x, out, ITERS=iters, BLOCK=512, num_warps=4),
        mode="instrumentation:capacity=64",
    )
    stats = result.trace.launches
    # Per warp: a single "outer" begin, `iters` "step" pairs (one entry each), a single end:
    # 2 + iters entries and 2 + 2 * iters records. The ring keeps the newest 64 entries: 63 step
    # pairs and the outer end, whose begin was overwritten.
    assert int(stats["overwritten"].sum()) == ctas * 4 * ((2 + 2 * iters) - (2 * 63 + 1))
    steps = result.events[result.events.scope == "step"].groupby(["cta", "warp"]).size()
    assert (steps == 63).all()
    assert int(stats["lost_to_ring"].sum()) == ctas * 4


def test_pairs_and_single_records_tell_the_same_story(tmp_path):
    iters, ctas = 20, 16
    x = torch.randn(ctas * 512, device="cuda")
    out = torch.empty_like(x)
    traces = {}
    for mode in ("instrumentation:pairs=on", "instrumentation:pairs=off"):
        _, result = profiled(
            tmp_path,
            mode.split(":")[-1].replace("=", "_"),
            lambda: kernels.loop_kernel[(ctas,)](x, out, ITERS=iters, BLOCK=512, num_warps=4),
            mode=mode,
        )
        traces[mode] = result.events.sort_values(["cta", "warp", "begin_cycles"])
    paired, single = traces.values()
    assert len(paired) == len(single) == ctas * 4 * (iters + 1)
    assert (paired.groupby("scope").size() == single.groupby("scope").size()).all()
    assert (
        paired[["cta", "warp", "scope", "depth"]].to_numpy().tolist()
        == single[["cta", "warp", "scope", "depth"]].to_numpy().tolist()
    )


@pytest.mark.parametrize("cycles", [1000, 3000, 10000, 100000])
def test_spin_scope_is_measured_within_two_percent(tmp_path, cycles):
    ctas = 132
    spans = torch.zeros(ctas, dtype=torch.int64, device="cuda")
    _, result = profiled(
        tmp_path, "spin", lambda: kernels.spin_kernel[(ctas,)](spans, CYCLES=cycles, num_warps=1)
    )
    events = result.events.sort_values("cta")
    reference = spans.cpu().numpy()[events.cta.to_numpy()]
    measured = events.dur_cycles.to_numpy()
    error = np.abs(measured - reference) / reference
    assert error.max() < 0.02, f"max relative error {error.max():.4f} at N={cycles}"
    # The ns duration follows the inferred clock, not an assumed 1 GHz.
    rate = events.dur_cycles.to_numpy() / events.dur_ns.to_numpy()
    assert 0.5 < np.median(rate) < 3.0


def test_thousand_launches_stay_in_a_bounded_pool(tmp_path):
    n = 1 << 16
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    pool_bytes = 4 << 20
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()

    def launch_many():
        peak = 0
        for _ in range(1000):
            kernels.add_kernel[(n // 1024,)](x, y, out, n, BLOCK=1024)
            peak = max(peak, torch.cuda.memory_allocated() - before)
        return peak

    peak, result = profiled(tmp_path, "many", launch_many, pool_bytes=pool_bytes)
    assert result.launches == 1000
    assert peak <= pool_bytes + (1 << 20)
    assert result.events.launch.nunique() == 1000
    assert (result.events.groupby("launch").size() == 64 * 4 * 3).all()


def test_complete_trace_files(tmp_path):
    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    _, result = profiled(
        tmp_path,
        "files",
        lambda: kernels.add_kernel[(n // 1024,)](x, y, out, n, BLOCK=1024),
        formats=("pftrace", "json"),
    )
    for key in ("pftrace", "json", "session"):
        assert Path(result.paths[key]).stat().st_size > 0
    chrome = json.loads(Path(result.paths["json"]).read_text())
    slices = [
        e
        for e in chrome["traceEvents"]
        if e.get("ph") == "X" and e.get("name") in ("load", "compute", "store")
    ]
    assert len(slices) == len(result.events) == (n // 1024) * 4 * 3
    again = proton_ik.viewer.load(result.paths["session"])
    assert len(again.events) == len(result.events)


def test_writes_stay_inside_the_buffer(tmp_path):
    """Poison a larger allocation: the kernel may only touch the bytes Triton asked for."""
    from triton.runtime._allocation import set_profile_allocator

    requested = []

    def poisoned(size, alignment, stream):
        buffer = torch.full((size + 4096,), 0xA5, dtype=torch.uint8, device="cuda")
        requested.append((size, buffer))
        return buffer

    x = torch.randn(8 * 512, device="cuda")
    out = torch.empty_like(x)
    set_profile_allocator(poisoned)
    try:
        with proton_ik.instrumented("instrumentation:capacity=8"):
            kernels.loop_kernel[(8,)](x, out, ITERS=50, BLOCK=512, num_warps=4)
        torch.cuda.synchronize()
    finally:
        set_profile_allocator(None)
    size, buffer = requested[-1]
    tail = buffer[size:].cpu().numpy()
    assert (tail == 0xA5).all()


def test_compute_sanitizer_memcheck_is_clean(tmp_path):
    memcheck_clean("sanitize_target.py", "records ok", {"PROTON_IK_OUT": str(tmp_path)})


def test_a_3d_grid_gives_every_cta_its_own_region_in_a_poisoned_buffer(tmp_path):
    """x, y and z all above 1; the whole buffer starts poisoned, so a CTA that wrote into another
    CTA's region, or a region no CTA owns, would show."""
    from triton.runtime._allocation import set_profile_allocator

    from proton_ik.contract.layout import BufferLayout
    from proton_ik.viewer.decode import decode_buffer

    grid = (5, 3, 2)
    ctas = grid[0] * grid[1] * grid[2]
    out = torch.full((ctas,), -1, dtype=torch.int32, device="cuda")
    requested = []

    def poisoned(size, alignment, stream):
        requested.append(torch.full((size + 4096,), 0xA5, dtype=torch.uint8, device="cuda"))
        return requested[-1]

    set_profile_allocator(poisoned)
    try:
        with proton_ik.instrumented():
            compiled = kernels.grid3d_kernel[grid](out, NX=grid[0], NY=grid[1], num_warps=4)
        torch.cuda.synchronize()
    finally:
        set_profile_allocator(None)
    assert out.cpu().tolist() == list(range(ctas))
    layout = BufferLayout.from_dict(compiled.metadata.proton_ik["layout"])
    raw = requested[-1].cpu().numpy()
    size = ctas * layout.cta_bytes
    assert (raw[size:] == 0xA5).all()
    decoded = decode_buffer(raw[:size], layout)
    assert decoded.ctas.valid.all() and decoded.ctas.cta.tolist() == list(range(ctas))
    assert decoded.ctas.nctaid.tolist() == [list(grid)] * ctas
    assert decoded.problems == ()
    # One pair per warp: every unit of every CTA holds exactly its begin and its end.
    per_unit = np.bincount(decoded.records.unit_row, minlength=len(decoded.units))
    assert len(decoded.units) == ctas * 4 and (per_unit == 2).all()


def test_the_demo_runs_as_the_readme_says(tmp_path):
    import shutil

    command = shutil.which("proton-ik")
    argv = (
        [command, "demo"]
        if command
        else [sys.executable, "-c", "from proton_ik.cli import main; main()", "demo"]
    )
    run = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    # 8 x 8 CTAs of 8 warps, 16 K steps and one epilogue each, in 2 launches.
    assert "matmul_kernel: 2 launch(es)" in run.stdout and f"{2 * 64 * 8 * 17} events" in run.stdout
    assert (tmp_path / "proton_ik_demo.pik").stat().st_size > 0
    assert (tmp_path / "proton_ik_demo.pftrace").stat().st_size > 0


@pytest.mark.parametrize("cycles", [100, 300, 600])
def test_short_spins_are_measured_within_twenty_cycles(tmp_path, cycles):
    ctas = 132
    spans = torch.zeros(ctas, dtype=torch.int64, device="cuda")
    _, result = profiled(
        tmp_path, "short", lambda: kernels.spin_kernel[(ctas,)](spans, CYCLES=cycles, num_warps=1)
    )
    events = result.events.sort_values("cta")
    reference = spans.cpu().numpy()[events.cta.to_numpy()]
    error = events.dur_cycles.to_numpy() - reference
    assert abs(np.median(error)) <= 20 and np.percentile(np.abs(error), 95) <= 20, (
        f"N={cycles}: median error {np.median(error):+.0f}, p95 |error| {np.percentile(np.abs(error), 95):.0f}"
    )


def test_the_inferred_sm_clock_matches_nvidia_smi_within_half_a_percent(tmp_path):
    import shutil

    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi is not installed")
    sampler = subprocess.Popen(
        [smi, "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-lms", "20"],
        stdout=subprocess.PIPE,
        text=True,
    )
    spans = torch.zeros(132, dtype=torch.int64, device="cuda")
    try:
        # About a tenth of a second of spinning on every SM: nvidia-smi samples the busy clock.
        _, result = profiled(
            tmp_path, "clock", lambda: kernels.spin_kernel[(132,)](spans, CYCLES=200_000_000, num_warps=1)
        )
    finally:
        sampler.terminate()
        output = sampler.communicate(timeout=30)[0]
    samples = [int(line) for line in output.split() if line.strip().isdigit()]
    busy = max(samples)  # idle samples before and after the kernel read lower
    inferred = float(result.trace.launches["mhz"].iloc[0])
    assert abs(inferred - busy) / busy < 0.005, f"trace {inferred:.1f} MHz, nvidia-smi {busy} MHz"
