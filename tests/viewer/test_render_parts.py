"""A session's Perfetto trace in parts (``viewer.render.parts``): the same bytes rendered by one
process or by several, and the same trace read back as the one written whole; the parts cut at
launch boundaries by stored size."""

from __future__ import annotations

import os
import subprocess
import warnings
from pathlib import Path

import pandas as pd
import pytest

from proton_ik.viewer import render_session
from proton_ik.viewer.readback.perfetto import read_perfetto
from proton_ik.viewer.render import ahead as render_ahead
from proton_ik.viewer.render import parts as render_parts
from proton_ik.viewer.render import plan as render_plan

# six launches under nested host scopes, 1 ms apart; the host track's slices as drawn
from .test_host_scopes import host_slices, write_host_scoped


@pytest.fixture
def session(tmp_path, busy_launch):
    return write_host_scoped(tmp_path / "h.pik", busy_launch)


@pytest.mark.parametrize(
    ("sizes", "part_bytes", "parts"),
    [
        ([10, 10, 10, 10], 20, [(0, 2), (2, 4)]),
        ([10, 10, 10], 20, [(0, 2), (2, 3)]),  # the last part holds what is left
        ([50, 1, 1], 20, [(0, 1), (1, 3)]),  # a launch larger than a part is a part
        ([5, 5], 100, [(0, 2)]),
        ([], 100, []),
    ],
)
def test_parts_are_cut_at_launches_by_stored_size(sizes, part_bytes, parts):
    assert render_plan.plan_parts(sizes, part_bytes, launch_bytes=0) == parts


def test_many_small_launches_are_cut_by_their_number_too():
    """A launch costs more to render than its few records: 1000 launches of 100 bytes, each
    weighing 900 bytes more, make parts of 10 launches where their bytes alone make one part."""
    parts = render_plan.plan_parts([100] * 1000, part_bytes=10_000, launch_bytes=900)
    assert parts == [(first, first + 10) for first in range(0, 1000, 10)]
    by_bytes = render_plan.plan_parts([100] * 1000, part_bytes=10_000, launch_bytes=0)
    assert by_bytes == [(first, first + 100) for first in range(0, 1000, 100)]


def test_no_more_parts_than_the_trace_can_number():
    parts = render_plan.plan_parts([1] * 10_000, part_bytes=1)
    assert len(parts) <= render_plan.MAX_PARTS - 1 and parts[-1][1] == 10_000


MIB = 1 << 20


@pytest.mark.parametrize(
    ("weighed", "cores", "part_bytes"),
    [
        (28 * MIB, 2, render_plan.PART_BYTES),  # too few cores for workers: parts as ever
        (28 * MIB, 32, 2 * MIB),  # the 1000 GELU launches on a GPU host: 14 parts, none tiny
        (96 * MIB, 32, 3 * MIB),  # a part a core
        (1024 * MIB, 32, render_plan.PART_BYTES),  # more parts than cores already
        (6 * MIB, 32, render_plan.PART_BYTES),  # 3 parts of 2 MiB: too few for workers, so one
        (8 * MIB, 32, 2 * MIB),  # 4 parts, on 4 workers
    ],
)
def test_a_session_of_fewer_parts_than_cores_is_cut_finer(weighed, cores, part_bytes):
    assert render_plan.part_bytes_for(weighed, cores) == part_bytes


def test_workers_started_ahead_count_the_finer_parts(monkeypatch):
    """A session of 28 MiB on 32 cores makes 14 parts: as many workers start ahead, not 3."""
    monkeypatch.setattr(render_ahead, "default_workers", lambda: 32)
    monkeypatch.setattr(render_ahead, "Workers", lambda count: count)
    assert render_ahead.start_workers_for(28 * MIB - 1000 * render_plan.LAUNCH_BYTES, None, 1000) == 14


def _table(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    return frame[columns].astype(str).sort_values(columns).reset_index(drop=True)


def test_parts_render_the_same_bytes_on_one_process_or_several_and_read_back_as_whole(
    session, tmp_path, monkeypatch
):
    whole = tmp_path / "whole.pftrace"
    stats = render_session(session, {"pftrace": whole})
    monkeypatch.setattr(render_plan, "PART_BYTES", 1)  # a part per launch
    here, spread = tmp_path / "here.pftrace", tmp_path / "spread.pftrace"
    in_parts = render_session(session, {"pftrace": here}, workers=1)
    render_session(session, {"pftrace": spread}, workers=3)
    assert here.read_bytes() == spread.read_bytes()
    assert (in_parts.launches, in_parts.records, in_parts.events) == (
        stats.launches,
        stats.records,
        stats.events,
    )
    a, b = read_perfetto(whole).trace, read_perfetto(here).trace
    keys = ["launch", "kernel", "scope", "cta", "sm", "warp", "dur_cycles", "line"]
    assert len(b.events) == len(a.events) == stats.events
    assert _table(b.events, keys).equals(_table(a.events, keys))
    launch_keys = ["launch", "kernel", "name", "host_scope", "events", "records", "ctas", "units"]
    assert _table(b.launches, launch_keys).equals(_table(a.launches, launch_keys))
    # These launches are too short for their SMs to give a clock rate: each borrows one, from its
    # part rather than from the whole session, so times in ns agree to a few ns, not exactly.
    gap = b.events.sort_values(keys)["dur_ns"].to_numpy() - a.events.sort_values(keys)["dur_ns"].to_numpy()
    assert abs(gap).max() <= 50
    # the host scopes span parts: drawn once, as whole
    drawn, expected = host_slices(here), host_slices(whole)
    assert [(n, d, args) for n, d, _, _, args in drawn] == [(n, d, args) for n, d, _, _, args in expected]
    assert len(expected) == 4


def test_parts_a_worker_cannot_render_are_rendered_here_with_a_warning(session, tmp_path, monkeypatch):
    monkeypatch.setattr(render_plan, "PART_BYTES", 1)
    here = tmp_path / "here.pftrace"
    render_session(session, {"pftrace": here}, workers=1)
    monkeypatch.setattr(render_parts.sys, "executable", "false")  # a worker that fails at once
    fallen_back = tmp_path / "fallen_back.pftrace"
    with pytest.warns(UserWarning, match=r"rendering parts \d+ \(launches \d+ to \d+\).* failed"):
        render_session(session, {"pftrace": fallen_back}, workers=2)
    assert fallen_back.read_bytes() == here.read_bytes()


def test_the_ranks_of_a_job_on_one_host_share_its_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert render_parts.default_workers() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "32")
    assert render_parts.default_workers() == 1
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert render_parts.default_workers() == 16


def test_workers_get_the_session_as_read_here_not_the_file_again(session, tmp_path, monkeypatch):
    """A worker takes the session this process read, as plain JSON (its directory and manifest checked
    once), where reading the file again took a worker longer than its part."""
    monkeypatch.setattr(render_plan, "PART_BYTES", 1)
    here = tmp_path / "here.pftrace"
    render_session(session, {"pftrace": here}, workers=1)
    handed: list[str] = []

    def worker(tasks, started=None):
        if started is not None:
            started.cancel()  # a worker started ahead, told there is nothing for it
        handed.extend(task.session_json for task in tasks)
        return render_parts.render_some(tasks)  # as the worker process runs them

    def read_again(path):
        raise AssertionError(f"{path} read again for a worker")

    monkeypatch.setattr(render_parts, "_in_a_process", worker)
    monkeypatch.setattr(render_parts, "read_session", read_again)
    spread = tmp_path / "spread.pftrace"
    render_session(session, {"pftrace": spread}, workers=2)
    assert handed and all(handed)
    assert spread.read_bytes() == here.read_bytes()


def test_workers_started_ahead_render_the_parts_and_the_others_end(session, tmp_path, monkeypatch):
    """Workers start importing before the session is read and take the parts (no worker is
    started after the read); the ones no part needs exit when the render is done."""
    monkeypatch.setattr(render_plan, "PART_BYTES", 1)
    here = tmp_path / "here.pftrace"
    render_session(session, {"pftrace": here}, workers=1)
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    def no_new_worker(*args, **kwargs):
        raise AssertionError("a worker started after the session was read")

    monkeypatch.setattr(render_parts.subprocess, "Popen", popen)
    monkeypatch.setattr(render_parts.subprocess, "run", no_new_worker)
    spread = tmp_path / "spread.pftrace"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no part fell back to this process
        stats = render_session(session, {"pftrace": spread}, workers=8)  # 6 launches: 6 parts
    assert spread.read_bytes() == here.read_bytes() and stats.launches == 6
    assert len(started) == 8
    assert all(process.poll() is not None for process in started)  # the 2 unused ones ended too


@pytest.mark.parametrize(
    ("size", "workers", "started"), [(3500, 16, 3), (3500, 2, 2), (1999, 16, None), (9000, 1, None)]
)
def test_no_more_workers_start_ahead_than_the_file_makes_parts(tmp_path, monkeypatch, size, workers, started):
    """A session of 3 parts on a 16-core host rendered in 6.9 s with 16 workers started, 4.5 s
    with 4: the workers no part needs only compete with the read of the session."""
    monkeypatch.setattr(render_plan, "PART_BYTES", 1000)
    monkeypatch.setattr(render_ahead, "Workers", lambda count: count)
    path = tmp_path / "s.pik"
    path.write_bytes(b"\0" * size)
    assert render_ahead.start_workers(path, workers) == started


@pytest.mark.parametrize(("size", "launches", "started"), [(1500, 0, None), (1500, 5, 2), (1500, 25, 4)])
def test_the_launches_weigh_in_the_workers_started_ahead(monkeypatch, size, launches, started):
    """As ``plan_parts`` weighs them: the 1000 GELU launches' session of 35 MB made 6 parts of 8
    MiB with its launches' weight, and 4 by its bytes alone, so 2 parts waited for a cold worker."""
    monkeypatch.setattr(render_plan, "PART_BYTES", 1000)
    monkeypatch.setattr(render_plan, "LAUNCH_BYTES", 100)
    monkeypatch.setattr(render_ahead, "Workers", lambda count: count)
    assert render_ahead.start_workers_for(size, 16, launches=launches) == started
    sizes = [size // max(launches, 1)] * max(launches, 1)
    if started is not None:
        assert len(render_plan.plan_parts(sizes)) >= started


def test_a_closed_session_file_says_how_many_launches_it_holds(tmp_path):
    """From its zip's end records alone (ZIP64 as the runtime writes it, or plain), before the
    file is read: what ``start_workers`` weighs the launches by."""
    from proton_ik.runtime.session_writer import SessionWriter
    from proton_ik.viewer.session_file import read_session, stored_launches_hint

    launch = read_session(Path(__file__).parents[1] / "data" / "ring.pik").launches[0]
    for compress in (False, True):
        path = tmp_path / f"s{compress}.pik"
        with SessionWriter(path, {"name": "s"}, compress=compress) as writer:
            for number in range(5):
                writer.add_launch({**launch.meta, "launch": number}, launch.buffer)
        assert stored_launches_hint(path) == 5
        cut = tmp_path / "cut.pik"
        cut.write_bytes(path.read_bytes()[:-30])  # never closed: no end records
        assert stored_launches_hint(cut) == 0
    assert stored_launches_hint(tmp_path / "missing.pik") == 0
