"""How many processes a render may use, and how one is started: the part of ``parts`` that a
session needs at its start (``forkserver.start_fork_server``) without the render's imports."""

from __future__ import annotations

import os
import sys

MAX_WORKERS = 32
# Where the cores allow fewer workers than this, the parts render in this process: on 2 cores
# (the render already compresses on a second thread), 2 workers rendered 25% slower than 1.
FEWEST_WORKERS = 4


def default_workers() -> int:
    """The cores this process may run on, shared among the ranks of a job on this host
    (``LOCAL_WORLD_SIZE``, as torchrun sets it), which finalize at about the same time."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    try:
        ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        ranks = 1
    return max(1, cores // ranks)


def worker_command() -> list[str]:
    """A render worker process: ``parts`` run as a program."""
    return [sys.executable, "-m", "proton_ik.viewer.render.parts"]


def worker_environment() -> dict[str, str]:
    """This process's environment, with its import path: a worker imports this very proton_ik."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
