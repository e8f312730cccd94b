"""A session's start on the CPU, with the device work stood in for: the render's fork server
starts first, so that its imports overlap the device's setup, and it ends with a start that fails."""

from __future__ import annotations

import importlib

import pytest

from proton_ik.mode import Mode
from proton_ik.session import Session

pytest.importorskip("torch")
render = importlib.import_module(
    "proton_ik.viewer.render"
)  # the package (the viewer's ``render`` is a function)


class _Server:
    closed = False

    def close(self) -> None:
        self.closed = True


def test_the_fork_server_starts_before_the_device_setup_and_ends_if_that_fails(tmp_path, monkeypatch):
    order: list[str] = []
    server = _Server()

    def started():
        order.append("server")
        return server

    def device_setup(self, torch):
        order.append("device")
        assert self._fork_server is server
        raise RuntimeError("out of device memory")

    monkeypatch.setattr(render, "start_fork_server", started)
    monkeypatch.setattr(Session, "_start_recorder", device_setup)
    session = Session("s", Mode(), tmp_path, 1 << 20, ("pftrace",))
    with pytest.raises(RuntimeError, match="out of device memory"):
        session._start_runtime()
    assert order == ["server", "device"]
    assert server.closed and session._fork_server is None


def test_a_session_that_writes_no_trace_starts_no_fork_server(tmp_path, monkeypatch):
    monkeypatch.setattr(render, "start_fork_server", lambda: pytest.fail("a server for no trace"))
    monkeypatch.setattr(Session, "_start_recorder", lambda self, torch: None)
    session = Session("s", Mode(), tmp_path, 1 << 20, ())
    session._start_runtime()
    assert session._fork_server is None
