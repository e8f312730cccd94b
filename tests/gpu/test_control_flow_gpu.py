"""Scopes in the control flow of real kernels, profiled in the default mode through the public
API: outputs bit for bit equal to the plain kernel's, and exactly the scopes each warp ran."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))
import control_flow_kernels as kernels  # noqa: E402
from profiling import profiled  # noqa: E402

WARPS = 4
CROSS_SM_NS = 100  # allowance for comparing times of CTAs on different SMs


def plain_and_profiled(tmp_path, name: str, run: Callable[[], list]) -> tuple[list, list, object]:
    """``run()``'s outputs unprofiled and profiled, and the finalized session."""
    plain = run()
    torch.cuda.synchronize()
    instrumented, result = profiled(tmp_path, name, run)
    return plain, instrumented, result


def scopes_per_warp(result) -> dict[tuple[int, int, str], int]:
    counts = result.events.groupby(["cta", "warp", "scope"]).size()
    return {(int(cta), int(warp), str(scope)): int(n) for (cta, warp, scope), n in counts.items()}


def expected_counts(per_cta: dict[int, dict[str, int]]) -> dict[tuple[int, int, str], int]:
    return {
        (cta, warp, scope): n
        for cta, scopes in per_cta.items()
        for warp in range(WARPS)
        for scope, n in scopes.items()
        if n
    }


def assert_clean(result, launches: int = 1) -> None:
    """Nothing overwritten or left unmatched, and every scope ends after it begins."""
    stats = result.trace.launches
    assert len(stats) == launches
    for column in ("overwritten", "unmatched_begin", "unmatched_end"):
        assert int(stats[column].sum()) == 0, column
    events = result.events
    assert (events["end_cycles"] >= events["begin_cycles"]).all()


def test_ctas_that_return_early_record_nothing(tmp_path):
    n, block = 50 * 1024 + 300, 1024
    active = -(-n // block)
    x = torch.randn(n, device="cuda")

    def run():
        out = torch.zeros(n, device="cuda")
        kernels.early_exit_kernel[(active + 7,)](x, out, n, BLOCK=block, num_warps=WARPS)
        return [out]

    plain, instrumented, result = plain_and_profiled(tmp_path, "early_exit", run)
    assert torch.equal(plain[0], instrumented[0])
    assert torch.equal(instrumented[0], x * 2.0)
    assert scopes_per_warp(result) == expected_counts({c: {"load": 1, "store": 1} for c in range(active)})
    assert_clean(result)


def test_a_spin_lock_inside_a_scope(tmp_path):
    ctas, block = 96, 1024
    x = torch.randint(-1000, 1000, (ctas * block,), device="cuda", dtype=torch.int32)

    def run():
        total = torch.zeros(1, device="cuda", dtype=torch.int32)
        lock = torch.zeros(1, device="cuda", dtype=torch.int32)
        arrivals = torch.zeros(1, device="cuda", dtype=torch.int32)
        kernels.locked_sum_kernel[(ctas,)](x, total, lock, arrivals, BLOCK=block, num_warps=WARPS)
        return [total, lock, arrivals]

    plain, instrumented, result = plain_and_profiled(tmp_path, "spin_lock", run)
    for p, i in zip(plain, instrumented, strict=True):
        assert torch.equal(p, i)
    assert int(instrumented[0].item()) == int(x.sum().item())
    assert int(instrumented[2].item()) == ctas
    assert scopes_per_warp(result) == expected_counts({c: {"acquire": 1, "update": 1} for c in range(ctas)})
    assert_clean(result)
    # The lock serializes the updates: no two CTAs' "update" scopes overlap in time. CTAs on
    # different SMs are aligned by %globaltimer (32 ns steps); a hand-off of the lock takes an
    # atomic's round trip through L2, far longer than the allowance.
    updates = result.events[result.events.scope == "update"].groupby("cta")
    spans = sorted(zip(updates["begin_ns"].min(), updates["end_ns"].max(), strict=True))
    assert all(end <= next_begin + CROSS_SM_NS for (_, end), (next_begin, _) in itertools.pairwise(spans))


def test_a_software_pipelined_loop(tmp_path):
    n_rows, n_cols, block, ctas = 1000, 1000, 1024, 132
    x = torch.randn(n_rows, n_cols, device="cuda")

    def run():
        out = torch.empty(ctas, block, device="cuda")
        kernels.pipelined_rows_kernel[(ctas,)](x, out, n_rows, n_cols, BLOCK=block, num_warps=WARPS)
        return [out]

    plain, instrumented, result = plain_and_profiled(tmp_path, "pipelined", run)
    assert torch.equal(plain[0], instrumented[0])
    rows = kernels.pipelined_rows_per_cta(n_rows, ctas)
    assert scopes_per_warp(result) == expected_counts({c: {"row": rows[c]} for c in range(ctas)})
    assert_clean(result)


def test_unrolled_scopes_and_a_scope_in_each_arm_of_a_branch(tmp_path):
    ctas, block, inner = 33, 1024, 3
    x = torch.randn(ctas * block, device="cuda")

    def run():
        out = torch.empty_like(x)
        kernels.branchy_kernel[(ctas,)](x, out, BLOCK=block, INNER=inner, num_warps=WARPS)
        return [out]

    plain, instrumented, result = plain_and_profiled(tmp_path, "branchy", run)
    assert torch.equal(plain[0], instrumented[0])
    expected = {
        c: {"outer": 1, "inner": inner, "even": int(c % 2 == 0), "odd": int(c % 2 == 1)} for c in range(ctas)
    }
    assert scopes_per_warp(result) == expected_counts(expected)
    assert_clean(result)
    # Each inner scope lies inside its warp's outer scope.
    events = result.events
    outer = events[events.scope == "outer"].set_index(["cta", "warp"])
    inner_events = events[events.scope == "inner"].join(outer, on=["cta", "warp"], rsuffix="_outer")
    assert (inner_events["begin_cycles"] >= inner_events["begin_cycles_outer"]).all()
    assert (inner_events["end_cycles"] <= inner_events["end_cycles_outer"]).all()


def test_a_while_loop_with_a_trip_count_per_cta(tmp_path):
    ctas, block = 64, 1024
    x = torch.randn(ctas * block, device="cuda")
    limits = torch.tensor([kernels.while_limit(c) for c in range(ctas)], device="cuda", dtype=torch.int32)

    def run():
        out = torch.empty_like(x)
        kernels.while_kernel[(ctas,)](x, out, limits, BLOCK=block, num_warps=WARPS)
        return [out]

    plain, instrumented, result = plain_and_profiled(tmp_path, "while_loop", run)
    assert torch.equal(plain[0], instrumented[0])
    assert scopes_per_warp(result) == expected_counts(
        {c: {"step": kernels.while_limit(c)} for c in range(ctas)}
    )
    assert_clean(result)
    assert "step" in str(result.summary())


def test_a_warp_specialized_loop_runs_and_its_compile_names_the_scopes_it_takes(tmp_path):
    """Triton's warp specialization drops the markers in the loop and leaves those around and
    after it outside its partitions: the kernel still computes what it computes plain, the
    compile warns of each such scope, and the trace is whole (every unit finished)."""
    import triton

    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    m = n = k = 1024
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)

    def run():
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        kernels.warp_specialized_matmul[(m // 128, n // 128)](
            a, b, c, m, n, k, BM=128, BN=128, BK=64, WS=True, num_warps=4
        )
        return [c]

    plain = run()
    torch.cuda.synchronize()
    with pytest.warns(UserWarning) as caught:
        instrumented, result = profiled(tmp_path, "warp_specialized", run)
    assert torch.equal(plain[0], instrumented[0])
    named = {str(w.message).split("'")[3] for w in caught if "warp_specialize=True" in str(w.message)}
    assert named == {"k_step", "mainloop", "epilogue"}
    stats = result.trace.launches
    assert int(stats["units_unfinished"].sum()) == 0 and int(stats["unmatched_begin"].sum()) == 0
    assert set(result.events.scope) == {"setup", "mainloop", "epilogue"}
