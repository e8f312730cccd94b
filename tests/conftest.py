"""Shared test setup: GPU tests skip cleanly without CUDA; each session compiles into its own
Triton cache so plain and instrumented binaries from earlier runs never leak in."""

from __future__ import annotations

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _private_triton_cache(tmp_path_factory):
    """And proton_ik's own cache of C parts (``proton_ik.native``), which the tests' subprocesses
    share."""
    import os

    from triton import knobs

    from proton_ik import native

    previous = knobs.cache.dir, os.environ.get(native.CACHE_VARIABLE)
    knobs.cache.dir = str(tmp_path_factory.mktemp("triton_cache"))
    os.environ[native.CACHE_VARIABLE] = str(tmp_path_factory.mktemp("proton_ik_cache"))
    yield
    knobs.cache.dir = previous[0]
    if previous[1] is None:
        os.environ.pop(native.CACHE_VARIABLE, None)
    else:
        os.environ[native.CACHE_VARIABLE] = previous[1]


@pytest.fixture(params=["compiled", "python"])
def launch_path_kind(request, monkeypatch):
    """A launch-path test runs on the compiled launch path (``runtime.compiled``) and on the
    Python one, its reference and fallback."""
    from proton_ik.runtime import compiled

    if request.param == "python":
        monkeypatch.setattr(compiled, "launch_path", lambda: None)
    elif compiled.launch_path() is None:
        pytest.skip(f"the C launch path is not built here: {compiled.why_python()}")
    return request.param


@pytest.fixture(autouse=True)
def _no_session_outlives_its_test():
    """A test that fails between ``start`` and ``finalize`` would leave its session running, and
    every later test's ``start`` would fail with it: the session is finalized here and the
    test reported, so that one failure reads as one."""
    import proton_ik

    yield
    leaked = proton_ik._session  # private: the running session, which no public call names
    if leaked is not None:
        try:
            proton_ik.finalize()
        finally:
            pytest.fail(f"the test left session '{leaked.name}' running; it is finalized now")


class _DrainedRecorder:
    """What finalize asks of the runtime's recorder, with the launches already drained."""

    launches = 0
    refused: list[str] = []
    drains: dict = {}  # nothing left on a device: all of it is in the file

    def uninstall(self) -> None: ...

    def close(self) -> None: ...

    def unrecorded_info(self) -> list[dict]:
        return []

    def pool_stalls(self) -> list:
        return []


class _Follower:
    def uninstall(self) -> None: ...


@pytest.fixture
def drained_session():
    """A session as the runtime leaves it before finalize, with no GPU: its file written, aside
    under this process's partial name, with the real launches of tests/data/add.pik."""
    from pathlib import Path

    from proton_ik.mode import Mode
    from proton_ik.session import Session
    from proton_ik.viewer.session_file import read_session

    def make(folder: Path, name: str, formats=("pftrace",), overwrite: bool = False) -> Session:
        session = Session(name, Mode(), folder, 1 << 20, formats, overwrite=overwrite)
        folder.mkdir(parents=True, exist_ok=True)
        stored = read_session(Path(__file__).parent / "data" / "add.pik")
        session._session_info = dict(stored.info)
        recorder = _DrainedRecorder()
        session._recorder, session._graphs, session._autotune = recorder, _Follower(), _Follower()  # type: ignore[assignment]
        for launch in stored:
            session._file().add_launch(launch.meta, launch.buffer, trimmed_on_device=launch.trimmed)
            recorder.launches += 1
        session.active = True
        return session

    return make
