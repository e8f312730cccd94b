"""A large session's Perfetto trace in parts, rendered on worker processes where there are cores.

``plan`` cuts the session's launches into parts (a large launch alone in its part, into shares
of its SMs), the same parts whatever the number of workers. Each part is fitted, decoded and
written on its own (``Pipeline(only=...)``: a launch whose SMs give no clock rate borrows one
from its part, not from the whole session) by a ``PerfettoWriter`` that numbers its tracks, flows
and packet sequences in a range of the part's own, and the parts' files are concatenated in
order (a Perfetto trace is a sequence of packets). The shares of a launch draw their SMs under
one launch track, which share 0 describes (``SharedLaunch``). The host scopes' track spans
parts, so the parts hand their launches' host scopes and times back, and one more writer draws
it last. Rendered by one process or by sixteen, the trace is the same, byte for byte.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from proton_ik.viewer.arrays import collector_paused
from proton_ik.viewer.perfetto import PerfettoWriter, SharedLaunch, first_uuid
from proton_ik.viewer.render.cores import (
    FEWEST_WORKERS,
    MAX_WORKERS,
    default_workers,
    worker_command,
    worker_environment,
)
from proton_ik.viewer.render.plan import PartPlan
from proton_ik.viewer.session_file import (
    StoredSession,
    read_session,
    session_from_portable,
)
from proton_ik.viewer.tables import Launch, Pipeline, SmShare, prepare, time_shift_cycles


@dataclass(frozen=True)
class _Part:
    """What a worker needs to render one part (sent to it as JSON: plain data, read back
    without running anything)."""

    session_path: Path
    output: Path
    launches: tuple[int, int]
    host_offset_ns: int
    title: str
    warnings: tuple[str, ...]
    timeline: str
    merge_index: int
    part: int
    parts: int
    # The session as this process read it, as JSON in the parts' scratch folder (its form for
    # worker processes: ``StoredSession.portable``), or "" to read the file again.
    session_json: str = ""
    share: tuple[int, int] = (0, 1)  # of the launch's SMs (``tables.SmShare``): (0, 1) for all
    shared_uuid: int = 0  # a share's launch track: the first uuid of its share 0's part

    def to_json(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "session_path": str(self.session_path),
            "output": str(self.output),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _Part:
        return cls(
            **{
                **data,
                "session_path": Path(data["session_path"]),
                "output": Path(data["output"]),
                "launches": tuple(data["launches"]),
                "share": tuple(data["share"]),
                "warnings": tuple(data["warnings"]),
            }
        )


@dataclass(frozen=True)
class PartDone:
    """What a part's render counted, and its launches' host scopes and times."""

    part: int
    launches: int
    records: int
    events: int
    problems: tuple[str, ...]
    host_launches: tuple[tuple[tuple[str, ...], int, int, int], ...]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartDone:
        host = tuple((tuple(path), number, begin, end) for path, number, begin, end in data["host_launches"])
        return cls(**{**data, "problems": tuple(data["problems"]), "host_launches": host})


def render_parts(
    session_path: Path,
    output: Path,
    parts: Sequence[tuple[int, int] | PartPlan],
    *,
    title: str,
    session_warnings: Sequence[str],
    timeline: str,
    merge_index: int,
    host_offset_ns: int,
    workers: int | None,
    session: StoredSession | None = None,
    started: StartedRunners | None = None,
    join: threading.Event | None = None,
) -> list[PartDone]:
    """Write the session's Perfetto trace to ``output`` in ``parts``, on up to ``workers``
    processes (None: ``default_workers()``); what each part counted, in order. ``session``: the
    file as the caller read it (else it is read again); ``started``: workers started ahead
    (``ahead.start_workers``, or a ``ForkServer``), taken before new ones are started; ``join``:
    where this process has other work meanwhile, set once it is done, and only then does this
    process render parts beside its forked workers."""
    count = len(parts) + 1  # the last part number: the host scopes' track
    plans = [PartPlan(*part) for part in parts]
    with tempfile.TemporaryDirectory(prefix=".parts-", dir=Path(output).parent) as scratch:
        tasks = [
            _Part(
                Path(session_path),
                Path(scratch) / f"{index}.pftrace",
                (plan.first, plan.past),
                host_offset_ns,
                title,
                tuple(session_warnings) if index == 0 else (),  # the root's: part 0 draws it
                timeline,
                merge_index,
                index,
                count,
                share=(plan.share, plan.shares),
                shared_uuid=first_uuid(merge_index, index - plan.share) if plan.shares > 1 else 0,
            )
            for index, plan in enumerate(plans)
        ]
        done = _run(tasks, workers, session, Path(scratch), started, join)
        host = Path(scratch) / "host.pftrace"
        with PerfettoWriter(
            host, title, timeline=timeline, merge_index=merge_index, part=len(parts), parts=count
        ) as writer:
            for part in done:
                writer.add_host_launches(part.host_launches)
        with open(output, "wb") as whole:
            for file in [*(task.output for task in tasks), host]:
                with open(file, "rb") as piece:
                    shutil.copyfileobj(piece, whole)
    return done


class Runner(Protocol):
    """What renders one share of the parts in another process: an ``ahead.StartedWorker``, or a fork of
    the session's ``ForkServer``."""

    def run(self, job: Path, done: Path) -> tuple[int, str]: ...

    def cancel(self) -> None: ...


class StartedRunners(Protocol):
    """Where the parts' runners come from: ``ahead.Workers``, or a ``ForkServer``."""

    def take(self) -> Runner | None: ...

    def close(self) -> None: ...


@runtime_checkable
class PartForker(Protocol):
    """Runners that fork a worker for each ``run`` once ``ready`` (a ``ForkServer``): the parts
    can then be taken one at a time, by whoever is free (``_from_one_queue``)."""

    @property
    def alive(self) -> bool: ...

    def ready(self, timeout: float) -> bool: ...

    def run(self, job: Path, done: Path) -> tuple[int, str]: ...


def _run(
    tasks: list[_Part],
    workers: int | None,
    session: StoredSession | None = None,
    scratch: Path | None = None,
    started: StartedRunners | None = None,
    join: threading.Event | None = None,
) -> list[PartDone]:
    wanted = _wanted_workers(workers, len(tasks))
    if wanted <= 1:
        return render_some(tasks, session)
    if session is not None and scratch is not None:
        # Each worker takes the session read here rather than reading the file again: its zip
        # directory and manifest, checked again, took a worker longer than its part.
        portable = scratch / "session.json"
        portable.write_text(json.dumps(session.portable()))
        tasks = [dataclasses.replace(task, session_json=str(portable)) for task in tasks]
    if session is not None and isinstance(started, PartForker):
        return _from_one_queue(tasks, session, started, wanted - 1, join)
    # Each worker process takes every wanted-th part: one start and one read of the session each.
    shares = [(tasks[first::wanted], started.take() if started else None) for first in range(wanted)]
    with ThreadPoolExecutor(max_workers=wanted) as pool:
        done = list(pool.map(lambda share: _in_a_process_or_here(*share), shares))
    by_part = {part.part: part for share in done for part in share}
    return [by_part[task.part] for task in tasks]


def on_workers(workers: int | None, parts: int) -> bool:
    """Whether ``render_parts`` renders ``parts`` parts on worker processes, not all in this one."""
    return _wanted_workers(workers, parts) > 1


def _wanted_workers(workers: int | None, parts: int) -> int:
    wanted = min(workers or default_workers(), parts, MAX_WORKERS)
    if workers is None and wanted < FEWEST_WORKERS:
        return 1  # a worker's start and its own read of the session cost more than it saves here
    return wanted


def _from_one_queue(
    tasks: list[_Part],
    session: StoredSession,
    forker: PartForker,
    forks: int,
    join: threading.Event | None = None,
) -> list[PartDone]:
    """The parts taken one at a time, in order, by whoever is free: this process, which holds
    the session and starts at once (or once ``join`` is set), and up to ``forks`` workers forked
    a part each, each once the server has its imports (a session shorter than those would
    otherwise wait for them). A part whose fork fails goes back to the queue, and that worker
    takes no more: this process renders what is left."""
    waiting = collections.deque(tasks)
    done: dict[int, PartDone] = {}

    def take() -> _Part | None:
        try:
            return waiting.popleft()  # atomic: each part is taken once
        except IndexError:
            return None

    def fork_parts() -> None:
        while waiting and forker.alive:
            if not forker.ready(timeout=0.05):
                continue
            task = take()
            if task is None:
                return
            try:
                (part,) = _in_a_process([task], forker)
            except (RuntimeError, OSError, ValueError, KeyError, TypeError) as error:
                waiting.appendleft(task)
                warnings.warn(f"proton_ik: {error}; rendering the rest in this process", stacklevel=2)
                return
            done[part.part] = part

    def render_here() -> None:
        while (task := take()) is not None:
            done[task.part] = _render_part(task, session, prepared)

    with ThreadPoolExecutor(max_workers=max(forks, 1)) as pool:
        forking = [pool.submit(fork_parts) for _ in range(forks)]  # the server reads meanwhile
        prepared = prepare(session.launches)
        try:
            if join is not None:
                join.wait()
            render_here()
        except BaseException:
            waiting.clear()  # the workers take no more: the error is the session's
            raise
        for each in forking:
            each.result()
    render_here()  # parts handed back after this process had finished
    return [done[task.part] for task in tasks]


def _in_a_process_or_here(tasks: list[_Part], worker: Runner | None = None) -> list[PartDone]:
    """``_in_a_process``, or, where the worker could not run them (no Python to start, a worker
    killed for memory), ``render_some`` in this process, with a warning: the trace is written
    either way, and a fault of the session itself is raised here as the serial render raises it."""
    try:
        return _in_a_process(tasks, worker)
    except (RuntimeError, OSError, ValueError, KeyError, TypeError) as error:
        warnings.warn(f"proton_ik: {error}; rendering them in this process instead", stacklevel=2)
        return render_some(tasks)


def _in_a_process(tasks: list[_Part], worker: Runner | PartForker | None = None) -> list[PartDone]:
    """``render_some`` in ``worker`` (started ahead, ``ahead.Workers``, or forked, ``ForkServer``) or in
    a new Python process running this module. Not multiprocessing: a fork copies a process that holds CUDA and other
    libraries' threads badly, and a spawned child imports the user's main script again, running
    a script with no ``__main__`` guard twice."""
    job, done = tasks[0].output.with_suffix(".task"), tasks[0].output.with_suffix(".done")
    job.write_text(json.dumps([task.to_json() for task in tasks]))
    if worker is not None:
        returncode, stderr = worker.run(job, done)
    else:
        command = [*worker_command(), str(job), str(done)]
        ran = subprocess.run(command, env=worker_environment(), capture_output=True, text=True, check=False)
        returncode, stderr = ran.returncode, ran.stderr
    if returncode != 0:
        which = ", ".join(f"{t.part} (launches {t.launches[0]} to {t.launches[1] - 1})" for t in tasks)
        raise RuntimeError(
            f"rendering parts {which} of the trace failed in their worker process:\n{stderr[-3000:]}"
        )
    return [PartDone.from_json(part) for part in json.loads(done.read_text())]


def render_some(tasks: list[_Part], session: StoredSession | None = None) -> list[PartDone]:
    """Decode and write parts of one session, in order (on a worker process, or in this one,
    where the caller may have read the session already)."""
    if not tasks:
        return []
    if session is None and tasks[0].session_json:
        session, prepared = _portable_session(tasks[0].session_json)
    else:
        if session is None:
            session = read_session(tasks[0].session_path)
        prepared = prepare(session.launches)
    return [_render_part(task, session, prepared) for task in tasks]


# The session a fork server read for its workers (``preload``), which each fork inherits: the
# JSON's path, the session and its prepared launches.
_preloaded: tuple[str, StoredSession, list[Launch]] | None = None


def _portable_session(session_json: str) -> tuple[StoredSession, list[Launch]]:
    """The session of a JSON written by the process that started this one, into a folder of its
    own (``_run``), and its prepared launches: read here, or inherited from the fork server."""
    if _preloaded is not None and _preloaded[0] == session_json:
        return _preloaded[1], _preloaded[2]
    session = session_from_portable(json.loads(Path(session_json).read_text()))
    return session, prepare(session.launches)


def preload(job: Path) -> None:
    """Read the session that a job's parts render, once, before forking their workers (a fork
    server's work): each fork then starts with it read and its launches prepared."""
    global _preloaded
    tasks = json.loads(job.read_text())
    session_json = str(tasks[0]["session_json"]) if tasks else ""
    if session_json and (_preloaded is None or _preloaded[0] != session_json):
        _preloaded = None  # the previous session's memory goes before the next is read
        _preloaded = (session_json, *_portable_session(session_json))


def _render_part(task: _Part, session: StoredSession, prepared: list[Launch]) -> PartDone:
    share = SmShare(*task.share) if task.share[1] > 1 else None
    pipeline = Pipeline(
        session.launches,
        time_shift_cycles(session.info),
        task.host_offset_ns,
        only=task.launches,
        prepared=prepared,
        share=share,
    )
    shared = None
    if share is not None:
        number = int(prepared[task.launches[0]].meta["launch"])
        shared = SharedLaunch(number, task.shared_uuid, share.draws_launch)
    counts_launches = share is None or share.draws_launch  # the other shares' rows hold part of it
    launches = records = events = 0
    problems: list[str] = []
    writer = PerfettoWriter(
        task.output,
        task.title,
        timeline=task.timeline,
        warnings=task.warnings,
        merge_index=task.merge_index,
        part=task.part,
        parts=task.parts,
        shared=shared,
    )
    with writer:
        for chunk in pipeline.chunks():
            writer.add(chunk)
            events += len(chunk.events["launch"])
            if counts_launches:
                launches += len(chunk.launches)
                records += sum(int(row["records"]) for row in chunk.launches)
                problems.extend(chunk.problems())
    host: Any = writer.host_launches or ()
    return PartDone(task.part, launches, records, events, tuple(problems), tuple(host))


@collector_paused()
def work(job: Path, done: Path) -> None:
    """The worker process: its parts (a JSON list of tasks), and what they counted, as JSON."""
    tasks = [_Part.from_json(task) for task in json.loads(job.read_text())]
    done.write_text(json.dumps([dataclasses.asdict(part) for part in render_some(tasks)]))


def _wait_for_work() -> None:
    """A worker started ahead (``ahead.Workers``): its job and done paths as one JSON line on its
    standard input, or an empty line when no part came to it."""
    line = sys.stdin.readline()
    if line.strip():
        job, done = json.loads(line)
        work(Path(job), Path(done))


if __name__ == "__main__":
    if sys.argv[1:] == ["--wait"]:
        _wait_for_work()
    else:
        work(Path(sys.argv[1]), Path(sys.argv[2]))
