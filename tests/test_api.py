"""The user-facing API on a machine with no GPU: compile-time hooks, clear errors, the pool."""

from __future__ import annotations

import warnings

import pytest
import triton
import triton.language as tl
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import proton_ik
import proton_ik.language as pl
from proton_ik import compile_mode
from proton_ik.runtime.pool import PoolTooSmall, RingPool


@triton.jit
def scaled(x, out, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("scale"):
        tl.store(out + offsets, tl.load(x + offsets) * 2)


@pytest.fixture(autouse=True)
def _no_session_left():
    yield
    if proton_ik._session is not None:
        proton_ik.finalize()
    assert compile_mode.active_mode() is None and knobs.compilation.instrumentation_mode == ""


def _start(*args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = proton_ik.start(*args, **kwargs)
    return session, caught


def test_start_without_a_gpu_warns_and_still_compiles_instrumented(tmp_path, monkeypatch):
    monkeypatch.setattr("proton_ik.session.why_no_gpu", lambda: "no CUDA GPU here")  # on a GPU too
    session, caught = _start("compile_only", out_dir=tmp_path)
    assert any("no CUDA GPU" in str(w.message) for w in caught)
    assert knobs.compilation.instrumentation_mode == session.mode.knob
    source = ASTSource(
        scaled, signature={"x": "*fp32", "out": "*fp32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 256}
    )
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32))
    assert kernel.metadata.profile_scratch_size > 0
    assert [s["name"] for s in kernel.metadata.proton_ik["scopes"]] == ["scale"]
    result = proton_ik.finalize()
    assert result.launches == 0 and result.paths == {} and result.events.empty
    # What the README's snippet prints and reads, with nothing run: words and columns, not None.
    assert str(result.summary()) == "proton_ik: no launches were captured"
    assert {"kernel", "launch", "cta", "warp", "scope", "dur_ns"} <= set(result.events.columns)


def test_start_twice_names_the_running_session_and_where_it_started(tmp_path):
    _start("first", out_dir=tmp_path)
    with pytest.raises(
        RuntimeError, match=r"session 'first' is already running \(started at test_api.py:\d+\)"
    ):
        proton_ik.start("second", out_dir=tmp_path)


@pytest.mark.parametrize(
    "action", [proton_ik.finalize, proton_ik.activate, proton_ik.deactivate, proton_ik.flush]
)
def test_actions_without_a_session_say_to_start_one(action):
    with pytest.raises(RuntimeError, match=r"needs a running session: call proton_ik.start\(\) first"):
        action()


def test_deactivate_compiles_plain_until_activate(tmp_path):
    session, _ = _start("toggle", out_dir=tmp_path)
    proton_ik.deactivate()
    assert compile_mode.active_mode() is None and knobs.compilation.instrumentation_mode == ""
    proton_ik.activate()
    assert compile_mode.active_mode() == session.mode


def _compile_only(monkeypatch, name, tmp_path, **kwargs):
    """A session that compiles and runs nothing, on a GPU machine too."""
    monkeypatch.setattr("proton_ik.session.why_no_gpu", lambda: "no CUDA GPU here")
    session, _ = _start(name, out_dir=tmp_path, **kwargs)
    return session


def test_instrumented_with_the_sessions_mode_changes_nothing(tmp_path, monkeypatch):
    session = _compile_only(monkeypatch, "same", tmp_path, mode="instrumentation:capacity=64")
    with proton_ik.instrumented("instrumentation:capacity=64") as mode:
        assert mode == session.mode and compile_mode.active_mode() is session.mode
    assert compile_mode.active_mode() is session.mode
    assert knobs.compilation.instrumentation_mode == session.mode.knob


def test_instrumented_with_another_mode_in_a_session_is_refused(tmp_path, monkeypatch):
    session = _compile_only(monkeypatch, "other", tmp_path)
    with (
        pytest.raises(
            RuntimeError,
            match=r"proton_ik.instrumented\(mode='instrumentation:granularity=cta:.*'\): session 'other' "
            r"\(started at test_api.py:\d+\) compiles under 'instrumentation:granularity=warp:.*'.*"
            r"call proton_ik.finalize\(\) before the block",
        ),
        proton_ik.instrumented("instrumentation:granularity=cta"),
    ):
        pytest.fail("the block ran")
    assert compile_mode.active_mode() is session.mode


def test_instrumented_in_a_paused_session_is_refused(tmp_path, monkeypatch):
    _compile_only(monkeypatch, "paused", tmp_path)
    proton_ik.deactivate()
    paused = r"session 'paused' .* is paused by proton_ik.deactivate\(\)"
    with pytest.raises(RuntimeError, match=paused), proton_ik.instrumented():
        pytest.fail("the block ran")
    assert compile_mode.active_mode() is None


def test_start_inside_instrumented_is_refused_and_the_block_still_restores(tmp_path, monkeypatch):
    monkeypatch.setattr("proton_ik.session.why_no_gpu", lambda: "no CUDA GPU here")
    with proton_ik.instrumented("instrumentation:capacity=64") as mode:
        with pytest.raises(
            RuntimeError,
            match=r"proton_ik.start\('inside'\) at test_api.py:\d+: kernels already compile under "
            r"'instrumentation:granularity=warp:capacity=64:pairs=on', in a proton_ik.instrumented\(\) "
            r"block; start the session outside the block",
        ):
            proton_ik.start("inside", out_dir=tmp_path)
        assert proton_ik._session is None and compile_mode.active_mode() is mode
    assert compile_mode.active_mode() is None


def test_bad_arguments_are_refused_before_anything_is_installed(tmp_path):
    with pytest.raises(ValueError, match=r"backend='cupti': proton_ik profiles inside kernels only"):
        proton_ik.start("x", backend="cupti", out_dir=tmp_path)
    with pytest.raises(ValueError, match="capacity=3: ring slots per unit must be a power of two"):
        proton_ik.start("x", mode="instrumentation:capacity=3", out_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown trace format 'svg'"):
        proton_ik.start("x", formats=("svg",), out_dir=tmp_path)
    assert proton_ik._session is None


def test_triton_profiler_call_sites_work_unchanged(tmp_path):
    _start("swap", context="shadow", data="trace", hook=None, out_dir=tmp_path)
    proton_ik.finalize()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with proton_ik.profile("block", out_dir=tmp_path) as context:
            assert compile_mode.active_mode() is not None
    assert context.result is not None and context.result.name == "block"


def test_the_ring_pool_hands_out_in_order_wraps_and_reclaims_oldest_first():
    pool = RingPool(1024, align=128)
    first, second = pool.try_allocate(300), pool.try_allocate(300)
    assert (first.offset, second.offset) == (0, 384)
    assert pool.try_allocate(300) is None  # 768 used, a 384-byte chunk needs a wrap: no room yet
    pool.release(second)  # out of order: nothing is reclaimed before the oldest goes
    assert pool.in_use == 768
    pool.release(first)
    assert pool.in_use == 0
    assert pool.try_allocate(900).offset == 0  # an empty ring starts over
    pool.release(pool._live[0])
    third, fourth = pool.try_allocate(512), pool.try_allocate(256)
    assert (third.offset, fourth.offset) == (0, 512)
    pool.release(third)
    wrapped = pool.try_allocate(384)  # 256 free at the end is too little: it wraps to 0
    assert wrapped.offset == 0 and pool.in_use == 256 + 256 + 384


def test_a_full_pool_waits_for_the_oldest_copy_and_a_too_large_launch_is_refused():
    pool = RingPool(1024, align=128)
    held = pool.try_allocate(1000)
    waits = []

    def wait_for_oldest() -> bool:
        waits.append(True)
        pool.release(held)
        return True

    chunk = pool.allocate(512, wait_for_oldest)
    assert waits == [True] and chunk.size == 512
    with pytest.raises(PoolTooSmall, match="pass a larger pool_bytes"):
        pool.allocate(4096, wait_for_oldest)


def test_a_gpu_without_pytorch_is_told_what_to_install(monkeypatch):
    import os
    import sys

    from proton_ik.session import why_no_gpu

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    driver = "/proc/driver/nvidia/version"
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda path: path == driver or real_exists(path))
    assert "pip install torch" in why_no_gpu()
    monkeypatch.setattr(os.path, "exists", lambda path: path != driver and real_exists(path))
    assert why_no_gpu() == "no CUDA GPU here (and no PyTorch)"


def test_flush_in_a_session_that_runs_nothing_does_nothing(tmp_path, monkeypatch):
    _compile_only(monkeypatch, "flushed", tmp_path)
    proton_ik.flush()
    assert list(tmp_path.iterdir()) == []


def test_overwrite_takes_a_bool(tmp_path):
    with pytest.raises(ValueError, match="overwrite='yes'"):
        proton_ik.start("run", out_dir=tmp_path, overwrite="yes")
