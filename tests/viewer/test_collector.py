"""The viewer holds Python's cyclic collector off while it reads and renders (``arrays.collector``),
and leaves it as the program had it."""

from __future__ import annotations

import gc

import pytest

from proton_ik.viewer import render_session
from proton_ik.viewer.arrays import collector_paused


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_off_inside_and_back_on_after(collector_on):
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: the outer pause turns it back on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_program_that_turned_the_collector_off_keeps_it_off(collector_on):
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_error_inside_turns_it_back_on(collector_on):
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("inside")
    assert gc.isenabled()


def test_a_render_runs_with_the_collector_off_and_leaves_it_on(
    collector_on, tmp_path, busy_launch, monkeypatch
):
    from proton_ik.runtime.session_writer import write_session
    from proton_ik.viewer.render import session as render

    seen: list[bool] = []
    real = render.read_session
    monkeypatch.setattr(render, "read_session", lambda path: seen.append(gc.isenabled()) or real(path))
    path = write_session(tmp_path / "s.pik", {"name": "s"}, [busy_launch()])
    render_session(path, {"pftrace": tmp_path / "s.pftrace"})
    assert seen == [False] and gc.isenabled()
