"""The work a profiled launch adds on the user's thread, counted (``runtime.hooks``): the
``launch_metadata`` wrapper, the profile allocator and the exit hook make a bounded number of
calls per launch, the same whatever the kernel's arguments, and the launch's metadata is made on
the drain thread, from a record that says everything the session file stores."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from triton.compiler.compiler import CompiledKernel, LazyDict

from proton_ik import host_scopes
from proton_ik.contract.layout import BufferLayout
from proton_ik.contract.metadata import KernelMetadata
from proton_ik.runtime import hooks, loaded

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))
from fake_drain import FakeDrain

FUNCTION = 7001
# Calls per launch made by proton_ik's Python (its functions, and the C functions they call), the
# wrapper, the allocator, the exit hook and the drain's queue together: 17.2 on the Python path
# and 1.2 on the compiled one (the wrapper, and a seal every eighth launch) when this was written.
CALLS_PER_LAUNCH = {"python": 18, "compiled": 2}


class _Compiled:
    """What Triton's ``CompiledKernel.launch_metadata`` reads of a loaded kernel."""

    name = "k"
    function = FUNCTION
    src = None  # not an ASTSource: no launch_metadata function of the kernel's own

    def _init_handles(self) -> None:
        """Loaded already."""


@pytest.fixture
def recorder(monkeypatch, launch_path_kind):
    metadata = KernelMetadata(layout=BufferLayout(units=4, capacity=4), num_warps=4)
    kernel = loaded.KernelInfo("k", 4, metadata.layout.cta_bytes, metadata, metadata.to_dict())
    monkeypatch.setitem(loaded.KERNELS, FUNCTION, kernel)
    recorder = hooks.LaunchRecorder(
        1 << 20, lambda *args: None, is_capturing=lambda: False, current_device=lambda: 0
    )
    recorder.drains = {0: FakeDrain()}
    recorder.install()  # Triton's CompiledKernel.launch_metadata now announces each launch
    yield recorder
    recorder.uninstall()


def _launch(recorder: hooks.LaunchRecorder, args: tuple, grid=(256, 1, 1)) -> None:
    """One launch as Triton makes it: launch_metadata, the allocator, the launch, the exit hook."""
    data = CompiledKernel.launch_metadata(_Compiled(), grid, 5, *args)  # type: ignore[arg-type]
    recorder.allocator(256 * loaded.KERNELS[FUNCTION].cta_bytes, 128, 5)
    recorder.exit_hook(data)


def _calls_per_launch(recorder: hooks.LaunchRecorder, args: tuple, launches: int = 50) -> float:
    """Calls into or made from proton_ik's code (not this file's stand-ins for Triton and the
    drain) per launch."""
    calls: Counter[str] = Counter()
    ours = str(Path(hooks.__file__).parents[1])

    def count(frame, event, arg):
        # "call": frame is the function called; "c_call": frame is the Python caller.
        if event in ("call", "c_call") and frame.f_code.co_filename.startswith(ours):
            calls[event] += 1

    _launch(recorder, args)  # the first launch of a stream makes its entries
    sys.setprofile(count)
    try:
        for _ in range(launches):
            _launch(recorder, args)
    finally:
        sys.setprofile(None)
    return sum(calls.values()) / launches


def test_a_launch_makes_a_bounded_number_of_calls_whatever_its_arguments(recorder, launch_path_kind):
    few = _calls_per_launch(recorder, (1, 2, 3))
    many = _calls_per_launch(recorder, tuple(range(40)))
    assert few == many, "the launch path does work per kernel argument"
    assert few <= CALLS_PER_LAUNCH[launch_path_kind]


def test_the_record_a_launch_leaves_says_what_the_session_file_stores(recorder):
    _launch(recorder, (1,), grid=(256, 1, 1))
    with host_scopes.scope("step 3"):
        _launch(recorder, (1,), grid=(256, 1, 1))
    drain = recorder.drains[0]
    (first, stream), (second, _) = drain.submitted
    assert stream == 5
    meta = first.meta()
    assert meta == {
        "launch": 0,
        "kernel": "k",
        "stream": 5,
        "device": 0,
        "num_warps": 4,
        "num_ctas": 256,
        "profile": loaded.KERNELS[FUNCTION].profile,
    }
    assert second.meta()["launch"] == 1
    assert second.meta()["host_scope"] == ["step 3"]
    assert first.chunk.offset != second.chunk.offset and recorder.launches == 2


def test_a_launch_that_announced_nothing_is_still_known_by_its_metadata(recorder):
    """A launch path that bound ``launch_metadata`` before the session wrapped it."""
    recorder.allocator(256 * loaded.KERNELS[FUNCTION].cta_bytes, 128, 5)
    recorder.exit_hook(LazyDict({"name": "k", "function": FUNCTION, "stream": 5}))
    ((launch, _),) = recorder.drains[0].submitted
    assert launch.meta()["kernel"] == "k"


def test_the_allocator_hands_the_launcher_an_int(recorder):
    CompiledKernel.launch_metadata(_Compiled(), (4,), 5)  # type: ignore[arg-type]
    pointer = recorder.allocator(4 * loaded.KERNELS[FUNCTION].cta_bytes, 128, 5)
    assert type(pointer) is int and pointer >= FakeDrain.base


def test_a_kernel_loaded_before_the_session_is_registered_at_its_first_launch(recorder):
    """Loaded under ``proton_ik.instrumented()`` or before ``start``: no load hook saw it."""
    from collections import namedtuple

    metadata = KernelMetadata(layout=BufferLayout(units=2, capacity=8), num_warps=2)
    fields = {
        "name": "early",
        "num_warps": 2,
        "profile_scratch_size": metadata.layout.cta_bytes,
        "proton_ik": metadata.to_dict(),
    }
    compiled = _Compiled()
    compiled.function, compiled.name = 7002, "early"
    compiled.metadata = namedtuple("KernelMetadata", sorted(fields))(**fields)
    assert 7002 not in loaded.KERNELS
    try:
        data = CompiledKernel.launch_metadata(compiled, (3,), 5)  # type: ignore[arg-type]
        recorder.allocator(3 * metadata.layout.cta_bytes, 128, 5)
        recorder.exit_hook(data)
        ((launch, _),) = recorder.drains[0].submitted
        assert launch.meta()["kernel"] == "early" and launch.num_ctas == 3
        assert loaded.KERNELS[7002].layout == metadata.layout
    finally:
        loaded.KERNELS.pop(7002, None)


def test_another_profilers_kernel_is_read_once_not_at_every_launch(recorder, monkeypatch):
    """A kernel with a profile buffer but no proton_ik metadata (Proton's own) runs unrecorded,
    and its metadata is read at its first launch only."""
    from collections import namedtuple

    fields = {"name": "theirs", "num_warps": 4, "profile_scratch_size": 512}
    compiled = _Compiled()
    compiled.function, compiled.name = 7003, "theirs"
    reads = []

    class Metadata(namedtuple("KernelMetadata", sorted(fields))):
        def _asdict(self):
            reads.append(1)
            return super()._asdict()

    compiled.metadata = Metadata(**fields)
    monkeypatch.setattr(loaded, "NOT_OURS", set())
    for _ in range(3):
        data = CompiledKernel.launch_metadata(compiled, (2,), 5)  # type: ignore[arg-type]
        recorder.allocator(1024, 128, 5)
        recorder.exit_hook(data)
    assert len(reads) == 1 and 7003 not in loaded.KERNELS
    assert all(launch.number is None for launch, _ in recorder.drains[0].submitted)


def test_a_host_scope_open_in_another_thread_is_counted_and_names_only_that_threads_launches(recorder):
    import threading

    opened, close = threading.Event(), threading.Event()

    def other():
        with host_scopes.scope("elsewhere"):
            opened.set()
            close.wait(5)

    thread = threading.Thread(target=other)
    thread.start()
    opened.wait(5)
    try:
        assert host_scopes.open_count == 1
        _launch(recorder, (1,))
    finally:
        close.set()
        thread.join()
    with pytest.raises(RuntimeError):
        host_scopes.exit_scope("never opened")
    assert host_scopes.open_count == 0  # a refused exit counts nothing
    ((launch, _),) = recorder.drains[0].submitted
    assert "host_scope" not in launch.meta()
