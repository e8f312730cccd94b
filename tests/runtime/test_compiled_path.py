"""The compiled launch path (``runtime/launch_path/``) against the Python one, its reference: the
same launches leave the same ring, the same queued launches and the same events; every case the
C hands back reaches the Python; numbers stay unique across threads; nothing leaks."""

from __future__ import annotations

import gc
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from triton.compiler.compiler import CompiledKernel

from proton_ik import host_scopes, native
from proton_ik.contract.layout import BufferLayout
from proton_ik.contract.metadata import KernelMetadata
from proton_ik.contract.sampling import Sampling
from proton_ik.runtime import compiled, hooks, loaded
from proton_ik.runtime.pool import PoolTooSmall, RingPool, make_ring

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))
from fake_drain import FakeDrain

PLAIN, SAMPLED, OTHER = 7101, 7102, 7103

built = compiled.launch_path()
needs_c = pytest.mark.skipif(built is None, reason=f"the C launch path is not built: {compiled.why_python()}")


class _Compiled:
    name = "k"
    src = None

    def __init__(self, function: int):
        self.function = function

    def _init_handles(self) -> None:
        """Loaded already."""


def _kernel(name: str, layout: BufferLayout) -> loaded.KernelInfo:
    metadata = KernelMetadata(layout=layout, num_warps=4)
    return loaded.KernelInfo(name, 4, metadata.layout.cta_bytes, metadata, metadata.to_dict())


@pytest.fixture
def kernels(monkeypatch):
    monkeypatch.setitem(loaded.KERNELS, PLAIN, _kernel("plain", BufferLayout(units=4, capacity=4)))
    sampled = BufferLayout(units=4, capacity=4, sampling=Sampling(cta_stride=2))
    monkeypatch.setitem(loaded.KERNELS, SAMPLED, _kernel("sampled", sampled))


def _recorder(kind: str, monkeypatch, pool_bytes: int = 1 << 30) -> hooks.LaunchRecorder:
    with monkeypatch.context() as patched:
        if kind == "python":
            patched.setattr(compiled, "launch_path", lambda: None)
        recorder = hooks.LaunchRecorder(
            pool_bytes, lambda *args: None, is_capturing=lambda: False, current_device=lambda: 0
        )
        recorder.drains = {0: FakeDrain(pool_bytes)}
    assert (recorder.drains[0].route is None) == (kind == "python")
    return recorder


def _launch(recorder: hooks.LaunchRecorder, function: int, stream: int, ctas: int = 8) -> Any:
    data = CompiledKernel.launch_metadata(_Compiled(function), (ctas, 1, 1), stream)  # type: ignore[arg-type]
    address = recorder.allocator(ctas * 512, 128, stream)
    recorder.exit_hook(data)
    return address


def _left(recorder: hooks.LaunchRecorder) -> dict[str, Any]:
    """What a run of launches left: addresses aside, the ring's counters, each queued launch's
    metadata, chunk and event group, and the launches waiting for an event per stream."""
    drain = recorder.drains[0]
    events: dict[int, int] = {}
    queued = [
        (
            launch.meta() if launch.number is not None else None,
            (launch.chunk.offset, launch.chunk.size, launch.chunk.skip),
            None if launch.launched is None else events.setdefault(id(launch.launched), len(events)),
            launch.owns_event,
        )
        for launch in drain._waiting
    ]
    pool = drain.pool
    return {
        "ring": (pool.used, pool.high_water, pool.handed_out),
        "queued": queued,
        "unevented": {stream: len(waiting) for stream, waiting in drain._unevented.items()},
        "events": drain.events,
        "launches": recorder.launches,
    }


@needs_c
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3000)), max_size=60))
def test_the_compiled_ring_hands_out_and_takes_back_what_the_python_one_does(steps):
    python, c = RingPool(4096, 128), make_ring(4096, 128)
    held: list[tuple[Any, Any]] = []
    for release, size in steps:
        if release and held:
            first, second = held.pop(size % len(held))
            python.release(first)
            c.release(second)
        else:
            first, second = python.try_allocate(size), c.try_allocate(size)
            assert (first is None) == (second is None)
            if first is not None:
                assert (first.offset, first.size, first.skip) == (second.offset, second.size, second.skip)
                held.append((first, second))
        assert (python.used, python.high_water, python.handed_out) == (c.used, c.high_water, c.handed_out)
    with pytest.raises(PoolTooSmall, match="pass a larger pool_bytes"):
        c.try_allocate(5000)


@needs_c
def test_the_same_launches_leave_the_same_queue_on_both_paths(kernels, monkeypatch):
    """Streams 0 and two others, a sampled kernel (the Python sizes it), a kernel not ours,
    host scopes open, recording paused: every case, on both paths. (Kernels sized at launch:
    tests/runtime/test_launch_sizing.py, on both paths.)"""
    left = {}
    for kind in ("compiled", "python"):
        recorder = _recorder(kind, monkeypatch)
        recorder.install()
        try:
            addresses = []
            for index in range(40):
                stream = (0, 5, 9)[index % 3]
                addresses.append(_launch(recorder, PLAIN, stream, ctas=1 + index % 5))
                if index % 7 == 0:
                    addresses.append(_launch(recorder, SAMPLED, stream))
                if index % 11 == 0:
                    addresses.append(_launch(recorder, OTHER, stream))
                if index % 13 == 0:
                    with host_scopes.scope("step"):
                        addresses.append(_launch(recorder, PLAIN, 5))
                if index == 20:
                    recorder.recording = False
                    addresses.append(_launch(recorder, PLAIN, 9))
                    recorder.recording = True
            recorder.drains[0].seal()
            left[kind] = {**_left(recorder), "addresses": addresses}
        finally:
            recorder.uninstall()
    assert left["compiled"] == left["python"]
    assert left["compiled"]["launches"] == 40 + 6 + 4  # the plain, sampled and host-scope launches


@needs_c
def test_each_case_the_c_hands_back_reaches_the_python(kernels, monkeypatch):
    recorder = _recorder("compiled", monkeypatch)
    python_calls: list[str] = []
    allocate, exit = recorder.allocate, recorder.exit
    monkeypatch.setattr(recorder, "allocate", lambda *a: python_calls.append("allocate") or allocate(*a))
    monkeypatch.setattr(recorder, "exit", lambda *a: python_calls.append("exit") or exit(*a))
    # The compiled path holds the recorder's Python methods as they were when it was made.
    recorder._path = recorder._compiled_path()
    recorder.exit_hook, recorder.allocator = recorder._path.exit, recorder._path.allocate
    recorder.install()
    try:
        _launch(recorder, PLAIN, 5)  # the stream's first launch: the Python finds its drain
        assert python_calls == ["allocate"]
        python_calls.clear()
        _launch(recorder, PLAIN, 5)
        assert python_calls == []  # all in C
        _launch(recorder, SAMPLED, 5)
        assert python_calls == []  # sized by the Python's LaunchRecorder.sized alone
        with host_scopes.scope("open"):
            _launch(recorder, PLAIN, 5)
        assert python_calls == ["exit"]
        python_calls.clear()
        with pytest.raises(PoolTooSmall):
            _launch(recorder, PLAIN, 5, ctas=(1 << 30) // 512 + 1)
        assert python_calls == ["allocate"] and recorder.refused
    finally:
        recorder.uninstall()


@needs_c
def test_launches_from_several_threads_get_unique_numbers(kernels, monkeypatch):
    recorder = _recorder("compiled", monkeypatch)
    recorder.install()
    try:

        def launches(stream: int) -> None:
            for _ in range(500):
                _launch(recorder, PLAIN, stream)

        threads = [threading.Thread(target=launches, args=(stream,)) for stream in (5, 6, 7, 8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        numbers = [launch.number for launch in recorder.drains[0]._waiting]
    finally:
        recorder.uninstall()
    assert sorted(numbers) == list(range(2000)) and recorder.launches == 2000


@needs_c
def test_the_compiled_path_keeps_no_reference_it_should_not(kernels, monkeypatch):
    recorder = _recorder("compiled", monkeypatch)
    recorder.install()
    kernel = loaded.KERNELS[PLAIN]
    try:
        _launch(recorder, PLAIN, 5)
        drain = recorder.drains[0]
        before = sys.getrefcount(kernel)
        for _ in range(1000):
            _launch(recorder, PLAIN, 5)
        drain.seal()
        while drain._waiting:
            drain.pool.release(drain._waiting.popleft().chunk)
        gc.collect()
        assert sys.getrefcount(kernel) == before - 1  # the one launch before, released too
        assert drain.pool.used == 0
    finally:
        recorder.uninstall()


def test_the_python_path_is_chosen_by_the_environment(monkeypatch):
    monkeypatch.setenv(native.SWITCH, "0")
    assert compiled._built.__wrapped__() == (None, f"{native.SWITCH}=0")


def test_a_build_that_fails_leaves_the_python_path_and_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv(native.CACHE_VARIABLE, str(tmp_path))  # nothing built there yet
    monkeypatch.setenv("CC", "no-such-compiler-here")
    module, why = compiled._built.__wrapped__()
    assert module is None and "launch_path could not be built" in why and "no-such-compiler-here" in why


def test_a_source_is_built_once_and_loaded_from_the_cache_afterwards(monkeypatch, tmp_path):
    monkeypatch.setenv(native.CACHE_VARIABLE, str(tmp_path))
    first, why = native.build(compiled.SOURCES, compiled.MODULE_NAME)
    assert why is None and first is not None
    (built,) = tmp_path.glob(f"*/{compiled.MODULE_NAME}*")
    monkeypatch.setenv("CC", "no-such-compiler-here")  # loaded, not built again
    second, why = native.build(compiled.SOURCES, compiled.MODULE_NAME)
    assert why is None and second is not None and list(tmp_path.glob("*/*")) == [built]


@needs_c
def test_the_compiled_queued_launch_has_the_dataclass_fields_and_methods():
    import dataclasses

    from proton_ik.runtime.queued_launch import QueuedLaunch, queued_launch_type

    made = queued_launch_type()
    assert made is not QueuedLaunch
    fields = {field.name: field.default for field in dataclasses.fields(QueuedLaunch)}
    queued = made(object())
    assert {name: getattr(queued, name) for name in fields if name != "chunk"} == {
        name: default for name, default in fields.items() if name != "chunk"
    }
    assert made.meta is QueuedLaunch.meta
    assert not gc.is_tracked(queued)  # a loop of launches costs the cyclic collector nothing


def test_a_session_is_told_when_the_c_path_could_not_be_built_and_not_when_python_was_asked(monkeypatch):
    import warnings

    monkeypatch.setattr(
        compiled, "_built", lambda: (None, "the C launch path could not be built (OSError: x)")
    )
    with pytest.warns(UserWarning, match=r"Python launch path.*could not be built \(OSError: x\)"):
        compiled.warn_if_not_built()
    assert compiled.described() == "Python (the C launch path could not be built (OSError: x))"
    monkeypatch.setattr(compiled, "_built", lambda: (None, f"{native.SWITCH}=0"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled.warn_if_not_built()
    monkeypatch.setattr(compiled, "_built", lambda: (object(), None))
    assert compiled.described() == "C"


def test_the_c_path_builds_wherever_there_is_a_c_compiler():
    """A C source that stopped compiling would otherwise only move every launch to the Python
    path, and every test of the C path above would skip."""
    import os
    import shutil

    if not (os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang") or shutil.which("cc")):
        pytest.skip("no C compiler here")
    if os.environ.get(native.SWITCH, "").strip() == "0":
        pytest.skip(f"{native.SWITCH}=0 asks for Python only")
    assert built is not None, compiled.why_python()


def test_a_cache_folder_that_cannot_be_written_moves_the_build_to_the_temporary_folder(monkeypatch, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv(native.CACHE_VARIABLE, str(blocked / "cache"))
    monkeypatch.setattr(native.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    module, why = native.build(compiled.SOURCES, compiled.MODULE_NAME)
    assert why is None and module is not None
    assert list((tmp_path / "tmp").glob(f"proton_ik-*/*/{compiled.MODULE_NAME}*"))
