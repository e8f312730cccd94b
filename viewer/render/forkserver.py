"""Render workers forked from one process that imported the render while the session ran.

A worker process started at finalize spends longer on Python's start and its imports (about a
second on the GPU hosts) than on its part of a short session (0.3 s for 171 GELU launches), so
finalize waited on imports rather than on work. ``ForkServer`` starts one process when a
session starts; it imports what a part's render needs, then waits. At finalize each worker is a
``fork`` of it: its imports are done, and the fork takes milliseconds.

Forking is safe only in a process of one thread: the server is a fresh Python (never a fork of
the user's process, which holds CUDA's and other libraries' threads), its numerical libraries are
told to start no thread pools, and it refuses to fork (the parts then start their own workers)
if it finds a second thread all the same. The server ends when the session that started it
closes its input, or when that process dies.

The protocol, one JSON object a line: the server writes ``{"ready": true}`` once its imports are
done; the parent writes ``{"job", "done", "err"}`` (paths in the render's private scratch
folder); the server reads the session the job's parts render (once: ``parts.preload``), forks a
worker that runs ``parts.work(job, done)`` with its standard error in ``err``, and writes
``{"job", "rc"}`` when the worker has exited. The parent forks one part at a time, whichever
worker is free taking the next (``parts.PartForker``). The session kills the server when its
render is done.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import traceback
from concurrent.futures import Future
from pathlib import Path
from typing import IO

from proton_ik.viewer.render.cores import (
    FEWEST_WORKERS,
    default_workers,
    worker_command,
    worker_environment,
)

# Numerical libraries that start a thread pool when loaded, unless told to use one thread: the
# server must stay single-threaded to fork safely (a part's render calls none of their routines).
ONE_THREAD = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
UNSAFE = -1000  # the server's answer where it will not fork: it has more than one thread


def start_fork_server() -> ForkServer | None:
    """A fork server for a session whose trace would render on worker processes (as many cores
    as ``cores.FEWEST_WORKERS``); None elsewhere, or where no Python can be started."""
    if default_workers() < FEWEST_WORKERS:
        return None
    try:
        return ForkServer()
    except OSError:
        return None


class ForkServer:
    """The parent's side: ``take()`` gives a worker, which ``run`` forks for its parts."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "proton_ik.viewer.render.forkserver"],
            env={**worker_environment(), **ONE_THREAD},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._lock = threading.Lock()
        self._waiting: dict[str, Future[int]] = {}
        self._gone: str | None = None  # why the server can no longer fork, once it cannot
        self._ready = threading.Event()  # its imports are done, or it has ended
        self._reader = threading.Thread(target=self._read, name="proton_ik-forkserver", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self._gone is None and self._process.poll() is None

    def ready(self, timeout: float) -> bool:
        """Whether the server can fork now, waiting up to ``timeout`` seconds for its imports."""
        return self._ready.wait(timeout) and self.alive

    def take(self) -> ForkedWorker | None:
        """A worker for one share of the parts, or None once the server has failed (the parts
        then start their own)."""
        return ForkedWorker(self) if self.alive else None

    def run(self, job: Path, done: Path) -> tuple[int, str]:
        """Fork a worker for ``job``; its exit status and standard error once it has exited."""
        err = done.with_suffix(".err")
        answer: Future[int] = Future()
        with self._lock:
            if self._gone is not None:
                raise RuntimeError(self._gone)
            self._waiting[str(job)] = answer
            try:
                assert self._process.stdin is not None
                self._process.stdin.write(
                    json.dumps({"job": str(job), "done": str(done), "err": str(err)}) + "\n"
                )
                self._process.stdin.flush()
            except OSError as error:
                del self._waiting[str(job)]
                raise RuntimeError(f"the render's fork server has ended ({error})") from None
        returncode = answer.result()
        if returncode == UNSAFE:  # this share, and those after it, in processes of their own
            self._gone = "the render's fork server has a second thread, and does not fork"
            ran = subprocess.run(
                [*worker_command(), str(job), str(done)],
                env=worker_environment(),
                capture_output=True,
                text=True,
                check=False,
            )
            return ran.returncode, ran.stderr
        try:
            stderr = err.read_text(errors="replace")
        except OSError:
            stderr = ""
        return returncode, stderr

    def _read(self) -> None:
        """Answers, as the server writes them; when it ends, every worker still waited for fails."""
        assert self._process.stdout is not None
        for line in self._process.stdout:
            try:
                answer = json.loads(line)
                if answer.get("ready") is True:
                    self._ready.set()
                    continue
                job, returncode = str(answer["job"]), int(answer["rc"])
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            with self._lock:
                waiting = self._waiting.pop(job, None)
            if waiting is not None:
                waiting.set_result(returncode)
        with self._lock:
            self._gone = f"the render's fork server ended (exit status {self._process.wait()})"
            waiting_now, self._waiting = list(self._waiting.values()), {}
        self._ready.set()  # nothing more to wait for
        for waiting in waiting_now:
            waiting.set_exception(RuntimeError(self._gone))

    def close(self) -> None:
        """End the server at once. It holds nothing once the parts it forked are done, and it may
        still be importing (a session shorter than that would wait for it), or its input may be
        held open by a process the program forked since (then it would never see it close)."""
        with contextlib.suppress(OSError):
            self._process.kill()
        self._process.wait()
        self._reader.join(timeout=10)
        with contextlib.suppress(OSError):
            assert self._process.stdin is not None
            self._process.stdin.close()


class ForkedWorker:
    """One share of the parts, rendered by a fork of the server."""

    def __init__(self, server: ForkServer):
        self._server = server

    def run(self, job: Path, done: Path) -> tuple[int, str]:
        return self._server.run(job, done)

    def cancel(self) -> None:
        """No part came to it: nothing was forked."""


def _threads() -> int:
    """This process's threads, as the kernel counts them (a library's own included)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # not Linux: trust Python's count
        return threading.active_count()


def _work_in_child(request: dict[str, str], closing: tuple[int, ...]) -> None:
    """The forked worker: render its parts, its standard error in the request's file."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        for fd in closing:
            os.close(fd)
        quiet = os.open(os.devnull, os.O_RDWR)
        os.dup2(quiet, 0)
        os.dup2(quiet, 1)  # the server's answers go there: nothing of the worker's may
        os.dup2(os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
        from proton_ik.viewer.render import parts

        parts.work(Path(request["job"]), Path(request["done"]))
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stderr.flush()
        os._exit(code)


def _answer(out: IO[str], job: str, returncode: int) -> None:
    out.write(json.dumps({"job": job, "rc": returncode}) + "\n")
    out.flush()


def serve(inp: int = 0, out: IO[str] = sys.stdout) -> None:
    """The server: import the render, then fork a worker for each request until the input ends."""
    # A Ctrl-C the program catches (and then finalizes) must not end the server, not even while
    # it imports: the session does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Everything a part's render imports (none of it imports more as it renders), loaded once,
    # and the event stream's C encoder, built here (once per machine) while the session runs.
    from proton_ik.viewer.perfetto import event_encoder
    from proton_ik.viewer.render import parts

    event_encoder()

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)  # a worker's exit wakes the select below
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, str] = {}
    pending, reading = b"", True
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    while reading or children:
        ready, _, _ = select.select([inp, wake_read] if reading else [wake_read], [], [], 1.0)
        if wake_read in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_read, 4096)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            _answer(out, children.pop(pid), os.waitstatus_to_exitcode(status))
        if inp not in ready:
            continue
        data = os.read(inp, 1 << 16)
        if not data:
            reading = False
            continue
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            request = json.loads(line)
            if _threads() > 1:
                _answer(out, request["job"], UNSAFE)
                continue
            with contextlib.suppress(Exception):  # else the worker reads it, and says what failed
                parts.preload(Path(request["job"]))
            out.flush()
            pid = os.fork()
            if pid == 0:
                _work_in_child(request, (wake_read, wake_write, inp))
            children[pid] = request["job"]


if __name__ == "__main__":
    serve()
