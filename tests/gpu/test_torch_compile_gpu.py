"""torch.compile on the GPU: scoped user kernels compile and record exactly, Inductor's own
kernels record on request, a compiled program follows the session in and out, and memcheck is
clean."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

import proton_ik

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import compiled_kernels  # noqa: E402  (beside this file; --import-mode=importlib adds no path)
from profiling import memcheck_clean, profiled  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _exact_per_warp(events, scopes: tuple[str, ...], ctas: int, warps: int) -> None:
    per_warp = events.groupby(["cta", "warp", "scope"]).size().unstack(fill_value=0)
    assert len(per_warp) == ctas * warps
    for name in scopes:
        assert (per_warp[name] == 1).all(), name


def _clean(result) -> None:
    stats = result.trace.launches
    assert int(stats["overwritten"].sum()) == 0
    assert int(stats["unmatched_begin"].sum()) == 0 and int(stats["unmatched_end"].sum()) == 0


@pytest.mark.parametrize("fullgraph", [True, False])
@pytest.mark.parametrize("traced_in_session", [True, False])
def test_scoped_user_kernel_records_under_torch_compile(tmp_path, fullgraph, traced_in_session):
    x = torch.randn(64 * compiled_kernels.BLOCK + 3, device="cuda")
    expected = compiled_kernels.scaled(x)
    compiled = torch.compile(compiled_kernels.scaled, fullgraph=fullgraph)
    if not traced_in_session:
        assert torch.equal(compiled(x), expected)  # traced, compiled and run plain first
    out, result = profiled(tmp_path, "user", lambda: compiled(x))
    assert torch.equal(out, expected)
    assert result.launches == 1
    _exact_per_warp(result.events, compiled_kernels.SCALED_SCOPES, ctas=65, warps=4)
    _clean(result)
    _, eager = profiled(tmp_path, "eager", lambda: compiled_kernels.scaled(x))
    events, eager_events = result.trace.async_events, eager.trace.async_events
    assert len(events) == len(eager_events) > 0 and (events["status"] == "matched").all()
    assert (events["event"] == "handoff").all()
    assert len(result.trace.values) == len(eager.trace.values) == 65 * 4  # a mark with a value
    assert len(result.trace.marks) == len(eager.trace.marks) == 33 * 4  # even CTAs, by predicate
    # Inductor's copy names the user's file and lines, as the eager kernel does.
    where = ["scope", "file", "line"]
    assert result.events[where].drop_duplicates().astype(str).sort_values(where).values.tolist() == (
        eager.events[where].drop_duplicates().astype(str).sort_values(where).values.tolist()
    )
    assert torch.equal(compiled(x), expected)  # plain again: no profile allocator is set now


def test_tensor_descriptor_kernel_records_under_torch_compile(tmp_path):
    x = torch.randn(512, 64, device="cuda")
    expected = compiled_kernels.descriptor_scaled(x)
    compiled = torch.compile(compiled_kernels.descriptor_scaled, fullgraph=True)
    out, result = profiled(tmp_path, "descriptor", lambda: compiled(x))
    assert torch.equal(out, expected)
    assert result.launches == 1
    _exact_per_warp(result.events, ("tma_load", "tma_store"), ctas=512 // 64, warps=4)
    _clean(result)


def test_autotuned_user_kernel_records_under_torch_compile(tmp_path):
    x = torch.randn(1 << 20, device="cuda")
    expected = compiled_kernels.autotuned(x)
    compiled = torch.compile(compiled_kernels.autotuned, fullgraph=True)
    compiled(x)  # autotunes and runs plain
    out, result = profiled(tmp_path, "autotuned", lambda: compiled(x))
    assert torch.equal(out, expected)
    launches = result.trace.launches
    assert len(launches) == 1  # the config Inductor settled on, recompiled once, launched once
    warps = int(result.events["warp"].nunique())
    ctas = x.numel() // (512 if warps == 4 else 1024)
    _exact_per_warp(result.events, ("tuned",), ctas=ctas, warps=warps)
    _clean(result)


def test_plain_session_plain_alternate_in_one_process(tmp_path):
    x = torch.randn(8 * compiled_kernels.BLOCK, device="cuda")
    expected = compiled_kernels.scaled(x)
    compiled = torch.compile(compiled_kernels.scaled)
    for round_ in range(2):
        assert torch.equal(compiled(x), expected)
        out, result = profiled(tmp_path, f"round{round_}", lambda: [compiled(x) for _ in range(3)][-1])
        assert torch.equal(out, expected)
        assert result.launches == 3
        assert len(result.events) == 3 * 8 * 4 * len(compiled_kernels.SCALED_SCOPES)
    # Compiled inside a session, run after it: plain (an instrumented binary would find no allocator).
    proton_ik.start("inside", out_dir=tmp_path)
    late = torch.compile(lambda t: compiled_kernels.scaled(t) - 1.0)
    late(x)
    torch.cuda.synchronize()
    assert proton_ik.finalize().launches == 1
    assert torch.equal(late(x), expected - 1.0)


def test_inductor_kernels_record_on_request(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    block = compiled_kernels.Block().cuda()
    x = torch.randn(2048, 1024, device="cuda")
    compiled = torch.compile(block)
    with torch.no_grad():
        expected = compiled(x)
        with profile(activities=[ProfilerActivity.CUDA]) as cupti:
            out, result = profiled(
                tmp_path, "inductor", lambda: compiled(x), mode="instrumentation:unscoped=kernel"
            )
    assert torch.equal(out, expected)
    triton_launches = [e.name for e in cupti.events() if e.device_type.name == "CUDA" and "triton" in e.name]
    launches = result.trace.launches
    assert sorted(launches["kernel"]) == sorted(triton_launches)
    events = result.events
    for launch, kernel in zip(launches["launch"], launches["kernel"], strict=True):
        mine = events[events["launch"] == launch]
        assert (mine["scope"] == kernel).all()
        per_warp = mine.groupby(["cta", "warp"]).size()
        assert (per_warp == 1).all()
        units = launches.loc[launches["launch"] == launch, "units"].iloc[0]
        assert len(per_warp) == units
    _clean(result)
    assert (events["dur_cycles"] > 0).all()


def test_cpp_wrapper_kernels_run_plain_with_a_warning(tmp_path):
    """Compiled, then again from the FX graph cache (which compiles no kernel): warned both times."""
    x = torch.randn(8 * compiled_kernels.BLOCK, device="cuda")
    expected = compiled_kernels.scaled(x)
    for attempt in ("first", "cached"):
        torch._dynamo.reset()
        with torch._inductor.config.patch(cpp_wrapper=True):
            compiled = torch.compile(compiled_kernels.scaled, fullgraph=True)
            with pytest.warns(UserWarning, match="cpp_wrapper = False"):
                out, result = profiled(tmp_path / attempt, f"cpp_{attempt}", functools.partial(compiled, x))
        assert torch.equal(out, expected)
        assert result.launches == 0


def test_cuda_graph_trees_of_reduce_overhead_are_refused_with_what_to_do(tmp_path):
    """CUDA graph trees check every live tensor of their pool, and the profile buffers captured
    into it fail that check: a graph recorded in a session is refused, naming the options."""
    x = torch.randn(8 * compiled_kernels.BLOCK, device="cuda")
    compiled = torch.compile(compiled_kernels.scaled, mode="reduce-overhead")
    proton_ik.start("graphs", out_dir=tmp_path)
    try:
        with pytest.raises(RuntimeError, match=r"mode='reduce-overhead'.*cudagraphs = False"):
            for _ in range(4):  # warm-up runs, then the recording
                compiled(x)
    finally:
        proton_ik.finalize()


def test_compute_sanitizer_memcheck_is_clean_on_a_compiled_program(tmp_path):
    env = {
        "PROTON_IK_OUT": str(tmp_path),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        # The target imports proton_ik and compiled_kernels (beside it) as a user's program would.
        "PYTHONPATH": os.pathsep.join(
            [str(HERE.parent.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    memcheck_clean("compiled_sanitize_target.py", "compiled records ok", env, timeout=900)


def test_a_program_compiled_in_a_session_and_cached_runs_plain_in_the_next_process(tmp_path):
    """Inductor's FX graph cache (with its bundle of statically launched kernels) between runs:
    a first process compiles inside a session, then runs plain; the next loads the cache, runs
    plain, then records. Nothing compiled to record leaks into a plain run, in either process."""
    import json
    import subprocess

    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),
        "PYTHONPATH": os.pathsep.join(
            [str(HERE.parent.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    runs = []
    for order in ("session_first", "plain_first", "session_first"):
        done = subprocess.run(
            [sys.executable, str(HERE / "cache_target.py"), order, str(tmp_path)],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for run in runs:
        assert run["session_close"] and run["plain_close"], run
        assert run["launches"] >= 1, run
