"""A session's files, on the CPU: each process of a job names its own, a file is written aside and
moved into place whole, and a name that exists is never written over unless asked."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from proton_ik import session_files
from proton_ik.viewer.session_file import read_session

DATA = Path(__file__).parents[1] / "data"


def test_the_session_file_is_written_aside_and_moved_into_place(tmp_path, drained_session):
    session = drained_session(tmp_path, "run")
    assert session.session_path.name.endswith(".partial") and session.session_path.exists()
    result = session.finalize()
    assert result.paths["session"] == str(tmp_path / "run.pik")
    assert result.paths["pftrace"] == str(tmp_path / "run.pftrace")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pftrace", "run.pik"]
    assert len(read_session(tmp_path / "run.pik").launches) == result.launches > 0


def test_finalize_renders_its_file_without_reading_it_back(tmp_path, drained_session, monkeypatch):
    """The file's directory and manifest are what the writer wrote (``session_from_written``):
    finalize does not read them back, and its trace is the one a read of the file renders."""
    import importlib

    from proton_ik.viewer import render_session

    session = drained_session(tmp_path, "run")
    with monkeypatch.context() as patched:
        for module in ("proton_ik.viewer.render.session", "proton_ik.viewer.session_file.reader"):
            patched.setattr(
                importlib.import_module(module), "read_session", lambda *_: pytest.fail("read back")
            )
        result = session.finalize()
    render_session(result.paths["session"], {"pftrace": tmp_path / "read.pftrace"}, workers=1)
    assert Path(result.paths["pftrace"]).read_bytes() == (tmp_path / "read.pftrace").read_bytes()


def test_finalize_pauses_the_cyclic_collector_and_leaves_it_as_it_was(tmp_path, drained_session, monkeypatch):
    """The drains' last flush and the render run without the collector's passes over the
    program's heap; the program's own choice is kept (on here, off where it turned it off)."""
    import gc

    from proton_ik.session import Session

    seen = []
    finish = Session._finish
    monkeypatch.setattr(
        Session, "_finish", lambda self, *args: seen.append(gc.isenabled()) or finish(self, *args)
    )
    assert gc.isenabled()
    drained_session(tmp_path, "on").finalize()
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        drained_session(tmp_path, "off").finalize()
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()


def test_an_existing_name_is_kept_and_the_session_takes_the_next(tmp_path, drained_session):
    (tmp_path / "run.pik").write_bytes(b"an earlier run")
    session = drained_session(tmp_path, "run")
    with pytest.warns(UserWarning, match=r"run\.pik \(or a trace of that name\) exists.*run\.1\.pik"):
        result = session.finalize()
    assert (tmp_path / "run.pik").read_bytes() == b"an earlier run"
    assert result.paths == {
        "session": str(tmp_path / "run.1.pik"),
        "pftrace": str(tmp_path / "run.1.pftrace"),
    }


def test_overwrite_replaces_the_files_of_that_name(tmp_path, drained_session):
    (tmp_path / "run.pik").write_bytes(b"an earlier run")
    result = drained_session(tmp_path, "run", overwrite=True).finalize()
    assert result.paths["session"] == str(tmp_path / "run.pik")
    assert len(read_session(tmp_path / "run.pik").launches) == result.launches


def test_each_rank_of_a_job_names_its_files(tmp_path, monkeypatch, drained_session):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    session = drained_session(tmp_path, "dist")
    assert session.job["rank"] == 3 and session.job["world_size"] == 8 and session.job["host"]
    assert session.finalize().paths["session"] == str(tmp_path / "dist.rank3.pik")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert session_files.job_stem("dist", session_files.job()) == "dist"


# One process of many: the same session name, the same folder, at once (each waits for "go").
WRITER = """
import sys, time
from pathlib import Path
from proton_ik import session_files
from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer.session_file import read_session

folder, data, index = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
partial = session_files.partial_path(folder, "same", ".pik")
with SessionWriter(partial, {"name": "same", "writer": index}, compress=False) as writer:
    for launch in read_session(data):
        writer.add_launch(launch.meta, launch.buffer, trimmed_on_device=launch.trimmed)
(folder / f"ready{index}").touch()
while not (folder / "go").exists():
    time.sleep(0.001)
claim = session_files.claim(folder, "same", (".pik", ".pftrace"))
claim.place(".pik", partial)
claim.release()
print(claim.paths[".pik"])
"""


@pytest.mark.parametrize("processes", [2, 8])
def test_processes_with_one_name_in_one_folder_never_share_a_file(tmp_path, processes):
    folder = tmp_path / "out"
    folder.mkdir()
    running = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(folder), str(DATA / "add.pik"), str(i)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    deadline = time.monotonic() + 120
    while len(list(folder.glob("ready*"))) < processes and time.monotonic() < deadline:
        time.sleep(0.01)
    (folder / "go").touch()  # every process claims at once
    placed = [process.communicate(timeout=120)[0].strip() for process in running]
    assert all(process.returncode == 0 for process in running)
    assert len(set(placed)) == processes
    expected = len(read_session(DATA / "add.pik").launches)
    writers = set()
    for path in placed:
        session = read_session(path)
        assert len(session.launches) == expected
        assert all(np.asarray(launch.buffer).size for launch in session.launches)
        writers.add(session.info["writer"])
    assert writers == set(range(processes))
    names = {p.name for p in folder.iterdir()} - {"go"} - {f"ready{i}" for i in range(processes)}
    assert names == {Path(p).name for p in placed}  # no partial file left, no empty name reserved


def test_finalize_starts_the_render_workers_before_the_last_flush(tmp_path, drained_session, monkeypatch):
    """Workers import while the drains' last flush runs; they render the trace's parts (the
    same bytes as a render in this process) and none is left running."""
    from proton_ik.viewer import render_session
    from proton_ik.viewer.render import ahead as render_ahead
    from proton_ik.viewer.render import parts as render_parts
    from proton_ik.viewer.render import plan as render_plan

    monkeypatch.setattr(render_plan, "PART_BYTES", 1)  # a part per launch
    monkeypatch.setattr(render_parts, "default_workers", lambda: 4)
    monkeypatch.setattr(render_ahead, "default_workers", lambda: 4)
    session = drained_session(tmp_path / "ahead", "ahead")
    order: list[str] = []
    made: list[render_ahead.Workers] = []
    real_workers, real_close = render_ahead.Workers, session._recorder.close

    def workers(count):
        order.append("workers")
        made.append(real_workers(count))
        return made[-1]

    def close():
        order.append("flush")
        real_close()

    monkeypatch.setattr(render_ahead, "Workers", workers)
    monkeypatch.setattr(session._recorder, "close", close)
    result = session.finalize()
    assert order[:2] == ["workers", "flush"] and len(made) == 1
    here = tmp_path / "here.pftrace"
    render_session(result.paths["session"], {"pftrace": here}, workers=1)
    assert Path(result.paths["pftrace"]).read_bytes() == here.read_bytes()


def test_a_results_summary_is_read_off_its_file_without_loading_the_trace(tmp_path, drained_session):
    """``result.summary()`` gathers the statistics chunk by chunk (``summarize_session``): the
    same text and tables as the loaded trace's, with no events table built for it."""
    import pandas as pd

    from proton_ik.viewer import load

    result = drained_session(tmp_path / "s", "s").finalize()
    summary = result.summary()
    assert result._trace is None  # nothing loaded
    whole = load(result.paths["session"]).summary()
    assert str(summary) == str(whole)
    pd.testing.assert_frame_equal(summary.scopes, whole.scopes)
    assert len(result.events) and str(result.summary()) == str(whole)  # then off the loaded trace
