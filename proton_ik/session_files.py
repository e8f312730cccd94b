"""Where a session's files go, so that no two processes and no two runs ever write one file.

- **One name per process of a job.** Under a launcher that sets ``RANK`` and ``WORLD_SIZE``
  (``torchrun``, ``torch.distributed``, Slurm through them), each rank's files carry its rank:
  ``dist.rank0.pik``, ``dist.rank1.pik``; ``job()`` says what the session records of it.
- **Written aside, then moved into place.** A process writes its session file under a name of
  its own (``partial_path``: the host and process id in it), and the traces likewise; finalize
  claims the final names (``claim``) and moves each file onto its claimed name with one
  ``os.replace``. A killed process leaves its ``.partial`` file, which the readers recover.
- **Never over another's file.** A claim reserves every file name of a stem at once, each with
  an exclusive create, so two processes cannot both take one. A name taken (by an earlier run, or
  by another process of the same name) is not overwritten unless the user asks (``overwrite``):
  the session takes the next free stem, ``run.1``, ``run.2``, ..., and says so.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Claim", "claim", "job", "job_stem", "partial_path"]

PARTIAL = ".partial"
MAX_STEMS = 10_000  # run, run.1, ... run.9999: past that, something is wrong with the folder


def job() -> dict[str, Any]:
    """What a session records of the process that ran it: host and process id, and, under a
    launcher that sets them, its rank, local rank and the world size."""
    info: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
    for key, variable in (("rank", "RANK"), ("local_rank", "LOCAL_RANK"), ("world_size", "WORLD_SIZE")):
        value = os.environ.get(variable, "")
        if value.isdigit():
            info[key] = int(value)
    return info


def job_stem(stem: str, info: dict[str, Any]) -> str:
    """The file stem of a session in the process ``info`` describes: with its rank where the
    job has more than one process (or says which rank this is without a size)."""
    if "rank" in info and info.get("world_size", 2) > 1:
        return f"{stem}.rank{info['rank']}"
    return stem


def partial_path(folder: Path, stem: str, suffix: str) -> Path:
    """Where this process writes a file before finalize moves it into place: unique to the
    host and process, visible beside the final one (``run.pik.host-1234.partial``)."""
    return folder / f"{stem}{suffix}.{socket.gethostname()}-{os.getpid()}{PARTIAL}"


@dataclass
class Claim:
    """File names reserved for a session: ``paths`` maps each suffix (".pik", ".pftrace", ...)
    to its final path, each an empty file this process created until ``place`` fills it."""

    stem: str
    paths: dict[str, Path]
    reserved: bool = True  # False under overwrite: the names were taken as they were, not created
    placed: set[str] = field(default_factory=set)

    def place(self, suffix: str, written: Path) -> Path:
        """Move the file ``written`` onto the name claimed for ``suffix``."""
        os.replace(written, self.paths[suffix])
        self.placed.add(suffix)
        return self.paths[suffix]

    def release(self) -> None:
        """Remove the names reserved and never filled (a trace that failed to render, say)."""
        if not self.reserved:
            return
        for suffix, path in self.paths.items():
            if suffix not in self.placed:
                with contextlib.suppress(OSError):
                    if path.stat().st_size == 0:
                        path.unlink()


def claim(folder: Path, stem: str, suffixes: tuple[str, ...], overwrite: bool = False) -> Claim:
    """Reserve ``stem`` + each suffix in ``folder``, or the first of ``stem.1``, ``stem.2``, ...
    that is free for all of them; with ``overwrite``, ``stem`` itself, whatever is there."""
    folder.mkdir(parents=True, exist_ok=True)
    if overwrite:
        return Claim(stem, {suffix: folder / f"{stem}{suffix}" for suffix in suffixes}, reserved=False)
    for index in range(MAX_STEMS):
        candidate = stem if index == 0 else f"{stem}.{index}"
        reserved = _reserve(folder, candidate, suffixes)
        if reserved is not None:
            return Claim(candidate, reserved)
    raise FileExistsError(
        f"{folder}: {stem} and {MAX_STEMS - 1} numbered names after it are all taken; use another "
        "session name or folder, or pass overwrite=True"
    )


def _reserve(folder: Path, stem: str, suffixes: tuple[str, ...]) -> dict[str, Path] | None:
    """Each of ``stem`` + suffix created empty and exclusively, or none (all undone) if any is taken."""
    made: dict[str, Path] = {}
    for suffix in suffixes:
        path = folder / f"{stem}{suffix}"
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            for taken in made.values():
                with contextlib.suppress(OSError):
                    taken.unlink()
            return None
        made[suffix] = path
    return made
