"""Render workers forked from a server that imported the render while the session ran
(``viewer.render.forkserver``): the same trace as a render in this process, no Python started
at finalize, and every way the server can fail leaves the trace written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from proton_ik.viewer import render_session
from proton_ik.viewer.render import ForkServer, forkserver, start_fork_server
from proton_ik.viewer.render import cores as render_cores
from proton_ik.viewer.render import parts as render_parts
from proton_ik.viewer.render import plan as render_plan

from .test_host_scopes import write_host_scoped


@pytest.fixture
def session(tmp_path, busy_launch, monkeypatch):
    """Six launches, a part each."""
    monkeypatch.setattr(render_plan, "PART_BYTES", 1)
    return write_host_scoped(tmp_path / "h.pik", busy_launch)


@pytest.fixture
def server():
    started = ForkServer()
    yield started
    started.close()


def _no_new_python(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a worker process was started at the render")

    monkeypatch.setattr(render_parts.subprocess, "run", refuse)
    monkeypatch.setattr(render_parts.subprocess, "Popen", refuse)


def test_forked_workers_render_the_same_trace_and_start_no_python(session, tmp_path, server, monkeypatch):
    here = tmp_path / "here.pftrace"
    render_session(session, {"pftrace": here}, workers=1)
    _no_new_python(monkeypatch)
    forked = tmp_path / "forked.pftrace"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no part fell back to this process
        stats = render_session(session, {"pftrace": forked}, workers=3, started=server)
    assert forked.read_bytes() == here.read_bytes() and stats.launches == 6
    assert not server.alive  # the render ends what it was given


def test_a_failing_worker_says_why_and_the_server_goes_on(tmp_path, server):
    job, done = tmp_path / "0.task", tmp_path / "0.done"
    job.write_text("not json")
    returncode, stderr = server.run(job, done)
    assert returncode == 1 and "JSONDecodeError" in stderr and not done.exists()
    job.write_text("[]")  # no parts: nothing to render, and nothing fails
    assert server.run(job, done) == (0, "") and json.loads(done.read_text()) == []


def test_a_server_killed_before_the_render_leaves_the_trace_written(session, tmp_path, server):
    here = tmp_path / "here.pftrace"
    render_session(session, {"pftrace": here}, workers=1)
    server._process.kill()
    server._process.wait()
    deadline = time.monotonic() + 10
    while server.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not server.alive and server.take() is None
    spread = tmp_path / "spread.pftrace"
    render_session(session, {"pftrace": spread}, workers=2, started=server)  # fresh workers instead
    assert spread.read_bytes() == here.read_bytes()


def test_a_server_killed_while_its_workers_run_fails_them_and_the_parts_render_here(tmp_path, server):
    job, done = tmp_path / "0.task", tmp_path / "0.done"
    job.write_text("[]")
    server._process.kill()
    with pytest.raises(RuntimeError, match="fork server"):
        server.run(job, done)


def test_a_ctrl_c_the_program_catches_does_not_end_the_server(tmp_path, server):
    assert server.ready(30)  # its handlers set
    server._process.send_signal(signal.SIGINT)
    time.sleep(0.2)
    job, done = tmp_path / "0.task", tmp_path / "0.done"
    job.write_text("[]")
    assert server.alive and server.run(job, done) == (0, "")


def test_close_ends_the_server_at_once_whatever_it_is_doing():
    """A server still importing (here: stopped), or whose input pipe a process the program forked
    holds open (a data loader's worker, say), would keep a close that waits for it waiting."""
    server = ForkServer()
    assert server._process.stdin is not None
    holder = subprocess.Popen(["sleep", "30"], pass_fds=(server._process.stdin.fileno(),))
    try:
        server._process.send_signal(signal.SIGSTOP)
        began = time.monotonic()
        server.close()
        assert server._process.poll() is not None and time.monotonic() - began < 5
    finally:
        holder.kill()
        holder.wait()


def test_the_server_does_not_fork_with_a_second_thread(tmp_path):
    """Forking a process of several threads can copy a lock another thread holds: the server
    answers that it will not, and the parts start their own workers."""
    code = (
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "from proton_ik.viewer.render.forkserver import serve\n"
        "serve()\n"
    )
    request = {"job": str(tmp_path / "0.task"), "done": str(tmp_path / "0.done"), "err": str(tmp_path / "e")}
    ran = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(request) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        env=render_cores.worker_environment(),
        check=True,
    )
    ready, answer = (json.loads(line) for line in ran.stdout.splitlines())
    assert ready == {"ready": True} and answer == {"job": request["job"], "rc": forkserver.UNSAFE}


def test_the_server_runs_one_thread_after_its_imports():
    code = "from proton_ik.viewer.render import forkserver, parts\nprint(forkserver._threads())\n"
    environment = {**render_cores.worker_environment(), **forkserver.ONE_THREAD}
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, check=True
    )
    assert ran.stdout.strip() == "1"


def test_a_server_starts_only_where_the_render_would_use_workers(monkeypatch):
    monkeypatch.setattr(forkserver, "default_workers", lambda: render_cores.FEWEST_WORKERS - 1)
    assert start_fork_server() is None
    monkeypatch.setattr(forkserver, "default_workers", lambda: render_cores.FEWEST_WORKERS)
    started = start_fork_server()
    assert started is not None
    started.close()


def test_finalize_renders_on_the_sessions_fork_server_and_ends_it(tmp_path, drained_session, monkeypatch):
    monkeypatch.setattr(render_plan, "PART_BYTES", 1)  # a part per launch
    monkeypatch.setattr(render_parts, "default_workers", lambda: 4)
    session = drained_session(tmp_path / "forked", "forked")
    session._fork_server = server = ForkServer()
    _no_new_python(monkeypatch)
    result = session.finalize()
    assert server._process.poll() is not None
    here = tmp_path / "here.pftrace"
    render_session(result.paths["session"], {"pftrace": here}, workers=1)
    assert Path(result.paths["pftrace"]).read_bytes() == here.read_bytes()


def test_a_session_that_records_nothing_ends_its_server_too(tmp_path, drained_session):
    session = drained_session(tmp_path / "empty", "empty")
    session._recorder.launches = 0
    session._fork_server = server = ForkServer()
    session.finalize()
    assert server._process.poll() is not None


def test_the_server_ends_with_the_process_that_started_it(tmp_path):
    """A program killed before finalize leaves no server behind."""
    code = (
        "import sys, time\n"
        "from proton_ik.viewer.render import ForkServer\n"
        "server = ForkServer()\n"
        "print(server._process.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    program = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=render_cores.worker_environment()
    )
    assert program.stdout is not None
    pid = int(program.stdout.readline())
    program.kill()
    program.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with_status = Path(f"/proc/{pid}/status")
        if with_status.exists() and "zombie" in with_status.read_text():
            return  # exited; its parent (killed) was not there to reap it
        time.sleep(0.05)
    pytest.fail("the fork server outlived the process that started it")


def test_a_server_with_a_second_thread_hands_its_share_to_a_worker_of_its_own(tmp_path, monkeypatch):
    """A library that starts a thread in the server (here a ``sitecustomize`` that does): the
    server does not fork, the share renders in a new worker process, and the later shares start
    their own too."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    environment = render_cores.worker_environment()
    threaded = {**environment, "PYTHONPATH": f"{site}{os.pathsep}{environment['PYTHONPATH']}"}
    monkeypatch.setattr(forkserver, "worker_environment", lambda: threaded)
    server = ForkServer()
    monkeypatch.setattr(forkserver, "worker_environment", lambda: environment)
    try:
        job, done = tmp_path / "0.task", tmp_path / "0.done"
        job.write_text("[]")
        assert server.run(job, done) == (0, "") and json.loads(done.read_text()) == []
        assert server.take() is None and "second thread" in str(server._gone)
    finally:
        server.close()


class _NeverReady:
    """A fork server still importing when the render ends: nothing may wait for it."""

    alive = True

    def __init__(self) -> None:
        self.asked = 0

    def ready(self, timeout: float) -> bool:
        self.asked += 1
        time.sleep(timeout)
        return False

    def run(self, job: Path, done: Path) -> tuple[int, str]:
        raise AssertionError("a part was forked before the server was ready")

    def take(self) -> None:
        raise AssertionError("the parts are taken from one queue, not shared out")

    def close(self) -> None:
        """Nothing to end."""


def test_this_process_renders_the_parts_while_the_server_imports(session, tmp_path, monkeypatch):
    here = tmp_path / "here.pftrace"
    render_session(session, {"pftrace": here}, workers=1)
    _no_new_python(monkeypatch)
    importing = _NeverReady()
    spread = tmp_path / "spread.pftrace"
    stats = render_session(session, {"pftrace": spread}, workers=4, started=importing)
    assert spread.read_bytes() == here.read_bytes() and stats.launches == 6
    assert importing.asked  # the workers did wait for it, and gave up once the parts were done


def test_the_finalizing_process_and_the_forks_share_the_parts(session, tmp_path, server, monkeypatch):
    """Once the server is ready, forks take parts one at a time beside this process, and the
    server reads the session once for all of them."""
    here = tmp_path / "here.pftrace"
    render_session(session, {"pftrace": here}, workers=1)
    assert server.ready(timeout=60)
    forked: list[Path] = []
    real_run = server.run

    def run(job: Path, done: Path) -> tuple[int, str]:
        assert len(json.loads(job.read_text())) == 1  # one part a fork
        forked.append(job)
        time.sleep(0.2)  # this process takes parts meanwhile
        return real_run(job, done)

    monkeypatch.setattr(server, "run", run)
    rendered_here: list[int] = []
    real_render = render_parts._render_part

    def render_part(task, *args):
        rendered_here.append(task.part)
        return real_render(task, *args)

    monkeypatch.setattr(render_parts, "_render_part", render_part)
    spread = tmp_path / "spread.pftrace"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fork failed
        stats = render_session(session, {"pftrace": spread}, workers=3, started=server)
    assert spread.read_bytes() == here.read_bytes() and stats.launches == 6
    assert forked and rendered_here and len(forked) + len(rendered_here) == 6


def test_a_server_that_ends_mid_render_leaves_its_parts_to_this_process(
    session, tmp_path, server, monkeypatch
):
    here = tmp_path / "here.pftrace"
    render_session(session, {"pftrace": here}, workers=1)
    assert server.ready(timeout=60)
    real_run = server.run

    def run(job: Path, done: Path) -> tuple[int, str]:
        server._process.kill()
        server._process.wait()
        return real_run(job, done)

    monkeypatch.setattr(server, "run", run)
    spread = tmp_path / "spread.pftrace"
    with pytest.warns(UserWarning, match="rendering the rest in this process"):
        stats = render_session(session, {"pftrace": spread}, workers=3, started=server)
    assert spread.read_bytes() == here.read_bytes() and stats.launches == 6


def test_the_server_reads_a_session_once_for_all_its_forks(session, tmp_path, monkeypatch):
    """``preload``: the session's JSON read and its launches prepared once, in the server,
    before its forks; a job of another session replaces it."""
    from proton_ik.viewer.session_file import read_session

    portable = tmp_path / "session.json"
    portable.write_text(json.dumps(read_session(session).portable()))
    reads: list[str] = []
    real_read = render_parts.session_from_portable
    monkeypatch.setattr(
        render_parts, "session_from_portable", lambda data: reads.append("read") or real_read(data)
    )
    monkeypatch.setattr(render_parts, "_preloaded", None)
    job = tmp_path / "0.task"
    task = render_parts._Part(
        session, tmp_path / "0.pftrace", (0, 1), 0, "t", (), "slots", 0, 0, 2, str(portable)
    )
    job.write_text(json.dumps([task.to_json()]))
    for _ in range(3):
        render_parts.preload(job)
    render_parts.work(job, tmp_path / "0.done")
    assert reads == ["read"]
    other = tmp_path / "other.json"
    other.write_text(portable.read_text())
    job.write_text(json.dumps([dict(task.to_json(), session_json=str(other))]))
    render_parts.preload(job)
    assert reads == ["read", "read"] and render_parts._preloaded is not None
    assert render_parts._preloaded[0] == str(other)


def test_the_other_formats_render_here_while_the_forks_render_the_parts(
    session, tmp_path, server, monkeypatch
):
    """A drop-in's ``.hatchet`` (and Chrome JSON) are not written in parts: this process writes
    them while the forks render the Perfetto parts, rather than after, and then joins the forks
    on the parts left; every file is the same as one process writes."""
    from proton_ik.viewer.proton import hatchet as hatchet_writer

    outputs = ("pftrace", "hatchet", "json")
    alone = render_session(session, {fmt: tmp_path / f"alone.{fmt}" for fmt in outputs}, workers=1)
    assert server.ready(timeout=60)
    writing = threading.Event()
    real_add = hatchet_writer.HatchetWriter.add

    def add(self, chunk):
        writing.set()
        return real_add(self, chunk)

    overlapped = []
    real_run = server.run

    def run(job: Path, done: Path) -> tuple[int, str]:
        overlapped.append(writing.wait(timeout=30))  # after the parts, it would never come
        return real_run(job, done)

    monkeypatch.setattr(hatchet_writer.HatchetWriter, "add", add)
    monkeypatch.setattr(server, "run", run)
    spread = render_session(
        session, {fmt: tmp_path / f"spread.{fmt}" for fmt in outputs}, workers=3, started=server
    )
    for fmt in outputs:
        assert (tmp_path / f"spread.{fmt}").read_bytes() == (tmp_path / f"alone.{fmt}").read_bytes(), fmt
    assert (spread.launches, spread.records, spread.events) == (alone.launches, alone.records, alone.events)
    assert overlapped and all(overlapped)


def test_the_other_formats_then_the_parts_here_while_the_server_never_gets_ready(
    session, tmp_path, monkeypatch
):
    """A server still importing when the other formats are written: this process then renders
    the parts itself, rather than wait for it."""
    here = tmp_path / "here.pftrace"
    render_session(session, {"pftrace": here}, workers=1)
    _no_new_python(monkeypatch)
    outputs = {"pftrace": tmp_path / "spread.pftrace", "hatchet": tmp_path / "spread.hatchet"}
    stats = render_session(session, outputs, workers=4, started=_NeverReady())
    assert outputs["pftrace"].read_bytes() == here.read_bytes() and stats.launches == 6
    assert outputs["hatchet"].stat().st_size
