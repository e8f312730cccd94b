"""Render workers started as processes before the session is read, where there is no fork server
(``forkserver``): each imports what a part's render needs while the finalizing process reads
the session, then takes a share of the parts (``parts.render_parts``, ``started``)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

from proton_ik.viewer.render import plan
from proton_ik.viewer.render.cores import (
    FEWEST_WORKERS,
    MAX_WORKERS,
    default_workers,
    worker_command,
    worker_environment,
)
from proton_ik.viewer.session_file import stored_launches_hint


class Workers:
    """Worker processes started before the session is read (``start_workers``): each imports
    what a part's render needs (about a second on a GPU host) while this process reads and
    checks the session, then waits for its parts on its standard input (an empty line, or its
    input closed: none). ``close`` ends those not used."""

    def __init__(self, count: int):
        self._idle: list[subprocess.Popen[str]] = []
        for _ in range(count):
            try:
                self._idle.append(
                    subprocess.Popen(
                        [*worker_command(), "--wait"],
                        env=worker_environment(),
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
            except OSError:
                break  # no Python to start: the parts start their own workers, or render here

    def take(self) -> StartedWorker | None:
        return StartedWorker(self._idle.pop()) if self._idle else None

    def close(self) -> None:
        """End the workers no part came to, at once: waiting for them to finish their imports
        first would keep the render waiting that long."""
        for process in self._idle:
            with contextlib.suppress(OSError):
                process.kill()
            process.communicate()
        self._idle.clear()


class StartedWorker:
    """A worker process of ``Workers``, taken for one share of the parts."""

    def __init__(self, process: subprocess.Popen[str]):
        self._process = process

    def run(self, job: Path, done: Path) -> tuple[int, str]:
        """Its parts (``job``), what they counted in ``done``: its exit status and standard error."""
        try:
            _, stderr = self._process.communicate(json.dumps([str(job), str(done)]) + "\n")
        except BaseException:
            self._process.kill()
            self._process.wait()
            raise
        return self._process.returncode, stderr

    def cancel(self) -> None:
        """No part came to it: it ends."""
        self._process.communicate("\n")


def start_workers(session_path: Path, workers: int | None) -> Workers | None:
    """``start_workers_for`` a session file as it lies (its launches counted from its zip's end
    records); None where it cannot be read."""
    try:
        size = session_path.stat().st_size
    except OSError:
        return None
    return start_workers_for(size, workers, stored_launches_hint(session_path))


def start_workers_for(stored_bytes: int, workers: int | None = None, launches: int = 0) -> Workers | None:
    """Workers started ahead for a session of about ``stored_bytes`` in ``launches`` launches
    (0: not known) that may make several parts, where the parts would render on worker
    processes (``parts.render_parts``); else None. No more than the parts it makes at least
    (``plan.plan_parts`` cuts at least one part a ``plan.part_bytes_for`` of stored data, a
    launch weighing ``LAUNCH_BYTES`` more): a worker started for nothing competes with the read
    of the session (a session of 3 parts on a 16-core host rendered in 6.9 s with 16 workers
    started, 4.5 s with 4), and a part past those waits for a worker started when it comes (0.6 s of
    imports on a GPU host). ``finalize`` starts them before its drains' last flush, so that they
    import while it runs, where the session has no fork server."""
    wanted = min(workers or default_workers(), MAX_WORKERS)
    if (workers is None and wanted < FEWEST_WORKERS) or wanted <= 1:
        return None
    weighed = stored_bytes + launches * plan.LAUNCH_BYTES
    parts_at_least = weighed // plan.part_bytes_for(weighed, default_workers())
    return Workers(min(wanted, parts_at_least)) if parts_at_least >= 2 else None
