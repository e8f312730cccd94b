"""Inductor's static launcher for kernels that record (``proton_ik.inductor_static``), on the CPU:
built by the static launcher's own code from a kernel compiled for sm_90 with a profile buffer,
while a launch hook is set; a launch does what Triton's launcher does around it, in its order,
with the buffer as the kernel's last parameter; anything else goes to Inductor's function."""

from __future__ import annotations

import pickle
import sys
import types
from pathlib import Path

import pytest
import triton
import triton.language as tl
from triton import knobs
from triton.compiler.compiler import CompiledKernel
from triton.runtime import _allocation

import proton_ik.language as pl
from proton_ik import inductor_static
from proton_ik.contract.layout import BufferLayout
from proton_ik.contract.metadata import KernelMetadata
from proton_ik.mode import Mode
from proton_ik.runtime import hooks, loaded

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
from fake_drain import FakeDrain

static = pytest.importorskip("torch._inductor.runtime.static_triton_launcher")
SIGNATURE = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


@triton.jit
def scoped_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("copy"):
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@pytest.fixture(scope="module")
def binaries(compile_kernel, tmp_path_factory):
    """The kernel compiled plain and instrumented, each with the cubin path Inductor sets."""
    folder = tmp_path_factory.mktemp("cubins")
    made = {}
    for label, mode in (("plain", None), ("recording", Mode())):
        kernel = compile_kernel(scoped_kernel, SIGNATURE, {"BLOCK": 256}, mode=mode)
        path = folder / f"{label}.cubin"
        path.write_bytes(kernel.asm["cubin"])
        kernel._cubin_path = str(path)
        made[label] = kernel
    assert made["recording"].metadata.profile_scratch_size > 0
    assert made["plain"].metadata.profile_scratch_size == 0
    return made


class _Launcher:
    """The C++ launcher, as the kernel calls it: what it was asked to launch."""

    def __init__(self, calls: list):
        self.calls = calls

    def _launch_kernel(self, *args):
        self.calls.append(("launch", args))


@pytest.fixture
def hooks_and_allocator():
    calls: list = []

    def enter(metadata):
        calls.append(("enter", metadata))

    def exit_(metadata):
        calls.append(("exit", metadata))

    def allocate(size, alignment, stream):
        calls.append(("allocate", size, alignment, stream))
        return 0x7F0000001000

    knobs.runtime.launch_enter_hook.add(enter)
    knobs.runtime.launch_exit_hook.add(exit_)
    _allocation.set_profile_allocator(allocate)
    try:
        yield calls
    finally:
        knobs.runtime.launch_enter_hook.remove(enter)
        knobs.runtime.launch_exit_hook.remove(exit_)
        _allocation.set_profile_allocator(None)


def _by_device():
    passed_on: list = []

    def original(kernel, device_type="cuda"):
        passed_on.append((kernel, device_type))
        return "inductor's own"

    return inductor_static.recording_kernels(original, static), passed_on


def test_a_recording_kernel_is_built_while_a_hook_is_set_and_launches_as_triton_would(
    binaries, hooks_and_allocator
):
    calls = hooks_and_allocator
    by_device, passed_on = _by_device()
    with pytest.raises(NotImplementedError):  # Inductor's class refuses it: the hooks, the buffer
        static.StaticallyLaunchedCudaKernel(binaries["recording"])
    kernel = by_device(binaries["recording"], "cuda")
    assert isinstance(kernel, static.StaticallyLaunchedCudaKernel) and not passed_on
    kernel.compiled = types.SimpleNamespace(
        launch_metadata=lambda grid, stream, *args: calls.append(("metadata", grid, stream)) or "meta"
    )
    kernel.function = 1234
    kernel.C_impl = _Launcher(calls)
    # The plain kernel's arguments, as Inductor's own static launcher types them (no hook set).
    knobs.runtime.launch_exit_hook.calls, saved = [], knobs.runtime.launch_exit_hook.calls
    knobs.runtime.launch_enter_hook.calls, saved_enter = [], knobs.runtime.launch_enter_hook.calls
    try:
        plain = static.StaticallyLaunchedCudaKernel(binaries["plain"])
    finally:
        knobs.runtime.launch_exit_hook.calls, knobs.runtime.launch_enter_hook.calls = saved, saved_enter
    assert kernel.arg_tys == plain.arg_tys == "OOi"
    kernel.run(4, 2, 1, 77, "x", "out", 1000)
    meta = binaries["recording"].metadata
    assert calls == [
        ("metadata", (4, 2, 1), 77),
        ("allocate", 8 * meta.profile_scratch_size, meta.profile_scratch_align, 77),
        ("enter", "meta"),
        (
            "launch",
            (
                1234,
                4,
                2,
                1,
                plain.num_warps,
                plain.shared,
                "OOi" + "O" * kernel.has_global_scratch + "K",
                ("x", "out", 1000, *[None] * kernel.has_global_scratch, 0x7F0000001000),
                77,
            ),
        ),
        ("exit", "meta"),
    ]


def test_a_tensor_buffer_inside_a_graph_capture_is_passed_as_an_object(binaries):
    calls: list = []
    buffer = types.SimpleNamespace(data_ptr=lambda: 0x1000)
    _allocation.set_profile_allocator(lambda size, alignment, stream: buffer)
    try:
        kernel, _ = _by_device()
        kernel = kernel(binaries["recording"])
        kernel.compiled = types.SimpleNamespace(launch_metadata=lambda *args: None)
        kernel.function, kernel.C_impl = 1, _Launcher(calls)
        kernel.run(1, 1, 1, 0, "x", "out", 8)
    finally:
        _allocation.set_profile_allocator(None)
    ((_, args),) = calls
    assert args[6].endswith("O") and args[7][-1] is buffer


def test_plain_kernels_and_other_devices_go_to_inductors_function(binaries):
    by_device, passed_on = _by_device()
    assert by_device(binaries["plain"], "cuda") == "inductor's own"
    assert by_device(binaries["recording"], "xpu") == "inductor's own"
    assert [device for _, device in passed_on] == ["cuda", "xpu"]


def test_a_recording_kernel_never_leaves_its_process(binaries):
    by_device, _ = _by_device()
    kernel = by_device(binaries["recording"])
    with pytest.raises(TypeError, match="stays in the process that compiled it"):
        pickle.dumps(kernel)


def test_with_a_static_launcher_built_otherwise_inductors_function_stays(binaries):
    moved = types.ModuleType("static_triton_launcher")  # a torch whose launcher moved
    original = object()
    assert inductor_static.recording_kernels(original, moved) is original
    base = type("StaticallyLaunchedTritonKernel", (), {"__init__": lambda self, kernel: None})
    moved.StaticallyLaunchedTritonKernel = base
    moved.StaticallyLaunchedCudaKernel = type("StaticallyLaunchedCudaKernel", (base,), {})
    assert inductor_static.recording_kernels(original, moved) is original  # reads no triton_knobs


def test_the_session_patches_inductors_function_and_removes_it_with_the_mode(binaries):
    heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
    import proton_ik

    before = heuristics.statically_launched_kernel_by_device
    with proton_ik.instrumented(Mode()):
        patched = heuristics.statically_launched_kernel_by_device
        assert patched is not before
        assert isinstance(patched(binaries["recording"]), static.StaticallyLaunchedCudaKernel)
    assert heuristics.statically_launched_kernel_by_device is before


def test_a_copy_in_this_process_shares_the_kernel_it_announces(binaries):
    import copy

    by_device, _ = _by_device()
    kernel = by_device(binaries["recording"])
    copied = copy.deepcopy(kernel)
    assert copied is not kernel and copied.compiled is kernel.compiled
    assert copied.arg_tys == kernel.arg_tys


def test_autotuners_that_record_stay_out_of_the_fx_graph_caches_bundle(binaries):
    bundler = pytest.importorskip("torch._inductor.triton_bundler")
    by_device, _ = _by_device()
    recording = types.SimpleNamespace(
        compile_results=[types.SimpleNamespace(kernel=by_device(binaries["recording"]))]
    )
    plain = types.SimpleNamespace(compile_results=[types.SimpleNamespace(kernel=object())])
    assert inductor_static.records(recording) and not inductor_static.records(plain)
    put: list = []

    class Bundler:
        @classmethod
        def put_static_autotuner(cls, key, kernel):
            put.append((cls, key, kernel))

    Bundler.put_static_autotuner = inductor_static.bundle_without_recording(
        Bundler.__dict__["put_static_autotuner"]
    )
    Bundler.put_static_autotuner("a", recording)
    Bundler.put_static_autotuner("b", plain)
    assert put == [(Bundler, "b", plain)]
    import proton_ik

    before = bundler.TritonBundler.__dict__["put_static_autotuner"]
    with proton_ik.instrumented(Mode()):
        assert bundler.TritonBundler.__dict__["put_static_autotuner"] is not before
    assert bundler.TritonBundler.__dict__["put_static_autotuner"] is before


FUNCTION = 8101  # the handle Triton loaded the recording kernel as (its KERNELS key)


class _Loaded:
    """The compiled kernel as the recording launcher holds it, loaded; ``launch_metadata`` only
    where it is expected (on the path through Triton's hooks)."""

    name = "scoped_kernel"
    function = FUNCTION
    src = None  # not an ASTSource: no launch_metadata function of the kernel's own

    def __init__(self, calls: list):
        self.calls = calls

    def _init_handles(self) -> None:
        """Loaded already."""

    def launch_metadata(self, grid, stream, *args):
        self.calls.append(("metadata", grid, stream))
        return CompiledKernel.launch_metadata(self, grid, stream, *args)  # as wrapped in a session


@pytest.fixture
def session_recorder(binaries, monkeypatch, launch_path_kind):
    """A session's recorder, installed as a session installs it, over a drain with no device."""
    metadata = KernelMetadata(layout=BufferLayout(units=4, capacity=4), num_warps=4)
    cta_bytes = binaries["recording"].metadata.profile_scratch_size  # what Triton asks for a CTA
    kernel = loaded.KernelInfo("scoped_kernel", 4, cta_bytes, metadata, metadata.to_dict())
    monkeypatch.setitem(loaded.KERNELS, FUNCTION, kernel)
    recorder = hooks.LaunchRecorder(
        1 << 20, lambda *args: None, is_capturing=lambda: False, current_device=lambda: 0
    )
    recorder.drains = {0: FakeDrain()}
    recorder.install()
    try:
        yield recorder
    finally:
        recorder.uninstall()


def _recording_kernel(binaries, calls: list):
    by_device, _ = _by_device()
    kernel = by_device(binaries["recording"], "cuda")
    kernel.compiled, kernel.function, kernel.C_impl = _Loaded(calls), 1234, _Launcher(calls)
    return kernel


def test_with_the_session_alone_behind_the_hooks_a_launch_calls_the_recorder_directly(
    binaries, session_recorder
):
    calls: list = []
    kernel = _recording_kernel(binaries, calls)
    kernel.run(4, 2, 1, 77, "x", "out", 1000)
    ((what, launched),) = calls  # no launch_metadata: the launch announced itself
    assert what == "launch"
    ((queued, stream),) = session_recorder.drains[0].submitted
    assert launched[6].endswith("K") and launched[7][-1] == FakeDrain.base + queued.chunk.offset
    assert stream == 77 and queued.meta()["kernel"] == "scoped_kernel" and queued.meta()["launch"] == 0
    assert queued.meta()["num_ctas"] == 8
    assert queued.chunk.size == 8 * binaries["recording"].metadata.profile_scratch_size


def test_another_launch_hook_sends_the_launch_through_tritons_hooks_and_both_see_it(
    binaries, session_recorder
):
    calls: list = []
    kernel = _recording_kernel(binaries, calls)

    def users_hook(metadata):
        calls.append(("user's exit", metadata))

    knobs.runtime.launch_exit_hook.add(users_hook)
    try:
        assert hooks.direct_recorder() is None
        kernel.run(4, 2, 1, 77, "x", "out", 1000)
    finally:
        knobs.runtime.launch_exit_hook.remove(users_hook)
    assert [call[0] for call in calls] == ["metadata", "launch", "user's exit"]
    ((queued, _),) = session_recorder.drains[0].submitted
    assert queued.meta()["kernel"] == "scoped_kernel"
    assert hooks.direct_recorder() is session_recorder


def test_launches_named_from_launch_metadata_go_through_tritons_hooks(session_recorder):
    session_recorder.launch_metadata = True  # hook="triton": the launch's metadata names it
    assert hooks.direct_recorder() is None


def test_another_profile_allocator_sends_the_launch_through_tritons_hooks(session_recorder):
    _allocation.set_profile_allocator(lambda size, alignment, stream: 0x1000)
    try:
        assert hooks.direct_recorder() is None
    finally:
        _allocation.set_profile_allocator(session_recorder.allocator)


def _launcher(*args):
    """What Inductor's launcher code does with its kernel: call ``runner`` from its globals."""
    return runner(*args)  # noqa: F821 (each launcher's own globals hold it)


def test_a_recording_launcher_never_gets_inductors_fast_c_launcher(binaries):
    """torch 2.13 on caches a C launcher built from a static kernel's function, which passes no
    profile buffer: not for a kernel that records."""
    kernel, _ = _by_device()
    recording = kernel(binaries["recording"], "cuda")
    built: list = []

    def original(self, launcher):
        built.append(launcher)
        return "fast"

    wrapped = inductor_static.without_fast_launcher(original)

    def launcher_of(runner):
        return types.FunctionType(_launcher.__code__, {"runner": runner})

    assert wrapped(None, launcher_of(recording.run)) is None and not built
    plain = launcher_of(types.SimpleNamespace(run=lambda *args: None).run)  # no __self__: not ours
    assert wrapped(None, plain) == "fast" and built == [plain]
