"""The one profiling session: ``start`` creates it, ``finalize`` ends it. All state lives here."""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import os
import threading
import time
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proton_ik import compile_mode, session_files
from proton_ik.contract.session_format import CLOCK_PAIRS, UNRECORDED
from proton_ik.mode import Mode
from proton_ik.result import Result
from proton_ik.runtime.pool_stalls import warn_of_stalls

if TYPE_CHECKING:  # the runtime imports torch; it is loaded only once a GPU is found
    from proton_ik.runtime.autotune import AutotuneFollower
    from proton_ik.runtime.graphs import GraphFollower
    from proton_ik.runtime.hooks import LaunchRecorder
    from proton_ik.runtime.session_writer import SessionWriter
    from proton_ik.viewer.render import ForkServer, StartedRunners  # imported when needed
    from proton_ik.viewer.session_file import StoredSession

DEFAULT_POOL_BYTES = 512 << 20
# The traces finalize can write: Perfetto, Chrome JSON, and the same Chrome trace and a call
# tree under triton.profiler's file names.
FORMATS = ("pftrace", "json", "chrome_trace", "hatchet", "html")  # html: the report (viewer.report)
DEFAULT_FORMATS = ("pftrace",)  # Chrome JSON is large: written only when asked for
SESSION_SUFFIX = ".pik"


def _memory_of(device: int) -> dict[str, int]:
    """The device's memory clock (kHz) and bus width (bits), as Triton's driver reads them;
    nothing where it cannot."""
    try:
        from triton.runtime import driver

        properties = driver.active.utils.get_device_properties(device)
        return {
            "memory_clock_rate": int(properties["mem_clock_rate"]),
            "bus_width": int(properties["mem_bus_width"]),
        }
    except Exception:  # a driver without them: -m util then has no bandwidth to divide by
        return {}


def gpu_available() -> bool:
    return why_no_gpu() is None


def why_no_gpu() -> str | None:
    """Why kernels cannot run here, in words a user can act on; None when they can."""
    try:
        import torch
    except ImportError:
        if os.path.exists("/proc/driver/nvidia/version"):
            return (
                "PyTorch is not installed, and proton_ik runs kernels through it (as Triton's "
                'launcher does): pip install torch, or pip install -e ".[gpu]"'
            )
        return "no CUDA GPU here (and no PyTorch)"
    if not torch.cuda.is_available():
        return "no CUDA GPU here"
    return None


def _package_dirs() -> tuple[str, ...]:
    """The folders of proton_ik's code: in a checkout the mapped packages sit beside proton_ik/."""
    specs = [importlib.util.find_spec(f"proton_ik.{name}") for name in ("dialect", "lowering", "viewer")]
    folders = [os.path.dirname(os.path.abspath(__file__))]
    folders += [folder for spec in specs if spec for folder in spec.submodule_search_locations or []]
    return tuple(os.path.join(os.path.abspath(folder), "") for folder in folders)


def _caller() -> str:
    """``file:line`` of the user code that called into proton_ik, for error messages."""
    ours = _package_dirs()
    for frame in reversed(traceback.extract_stack()):
        if not os.path.abspath(frame.filename).startswith(ours):
            return f"{os.path.basename(frame.filename)}:{frame.lineno}"
    return "<unknown>"


class Session:
    def __init__(
        self,
        name: str,
        mode: Mode,
        out_dir: Path,
        pool_bytes: int,
        formats: tuple[str, ...],
        launch_metadata: bool = False,
        timeline: str | None = None,
        overwrite: bool = False,
        flush_every: tuple[int | None, float | None] = (None, None),
    ):
        self.name = name
        self.flush_every = flush_every  # (launches, seconds): the drain writes that often too
        self.mode = mode
        self.out_dir = out_dir
        self.pool_bytes = pool_bytes
        self.formats = formats
        self.launch_metadata = launch_metadata  # hook="triton": launches named by launch_metadata
        self.timeline = timeline  # the traces' tracks (viewer.tracks.TIMELINES); None: the default
        self.started_at = _caller()
        self.overwrite = overwrite  # finalize may replace files of this name (else it takes name.1, ...)
        self.job = session_files.job()  # host, process, and rank where a launcher set one
        self.file_stem = session_files.job_stem(name, self.job)
        # Written here while the session runs; finalize moves it onto the name it claims.
        self.session_path = session_files.partial_path(out_dir, self.file_stem, SESSION_SUFFIX)
        self.active = False
        self._recorder: LaunchRecorder | None = None
        self._graphs: GraphFollower | None = None
        self._autotune: AutotuneFollower | None = None
        self._writer: SessionWriter | None = None
        self._session_info: dict[str, Any] = {}
        self._fork_server: ForkServer | None = None  # the trace's render workers, forked at finalize

    def start(self) -> None:
        outer = compile_mode.active_mode()
        if outer is not None:
            # The block would restore its mode over the running session's when it closes.
            raise RuntimeError(
                f"proton_ik.start('{self.name}') at {self.started_at}: kernels already compile "
                f"under '{outer}', in a proton_ik.instrumented() block; start the session outside "
                "the block (its kernels compile instrumented too)"
            )
        reason = why_no_gpu()
        if reason is None:
            self._start_runtime()
        else:
            warnings.warn(
                f"proton_ik: {reason}. Kernels will compile instrumented (triton.compile "
                "with a GPUTarget works), but nothing will run, so finalize() writes no trace.",
                stacklevel=3,
            )
        self.activate()

    def _start_runtime(self) -> None:
        import torch

        self.out_dir.mkdir(parents=True, exist_ok=True)
        if "pftrace" in self.formats:
            # First: it imports the render (about half a second on a GPU host) while this process
            # reads the device, its clock pair and its pool, and then while the program runs.
            from proton_ik.viewer.render import start_fork_server

            self._fork_server = start_fork_server()
        try:
            self._start_recorder(torch)
        except BaseException:
            if self._fork_server is not None:
                self._fork_server.close()
                self._fork_server = None
            raise

    def _start_recorder(self, torch: Any) -> None:
        """The session info, the device's clock pair, the recorder and its drain, the hooks."""
        from proton_ik.runtime import compiled
        from proton_ik.runtime.autotune import AutotuneFollower
        from proton_ik.runtime.calibrate import time_shifts
        from proton_ik.runtime.clock_sync import clock_pair_or_none
        from proton_ik.runtime.flush_policy import FlushPolicy
        from proton_ik.runtime.graphs import GraphFollower
        from proton_ik.runtime.hooks import LaunchRecorder

        device = torch.cuda.current_device()
        properties = torch.cuda.get_device_properties(device)
        self._session_info = {
            "name": self.name,
            "mode": str(self.mode),
            "device": properties.name,
            "sm_count": properties.multi_processor_count,
            "triton": _triton_version(),
            "torch": torch.__version__,
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "time_shift_cycles": time_shifts(self.mode),
            "device_index": device,
            "launch_path": compiled.described(),  # the C one, or the Python and why
            # what proton-viewer's -m util reads of the device (its .hatchet's device entry)
            "arch": f"{properties.major}{properties.minor}",
            **_memory_of(device),
            **self.job,
        }
        # Before the mode is set: the clock-reading kernel compiles plain.
        pair = clock_pair_or_none(device)
        self._session_info[CLOCK_PAIRS] = [pair] if pair is not None else []
        writing = threading.Lock()  # one drain thread per device

        def sink(launches):
            with writing:
                # Created at the first launch: a session that records nothing (a program that
                # stops early, say) leaves no empty file behind.
                self._file().add_launches(launches)

        launches, seconds = self.flush_every
        compiled.warn_if_not_built()
        recorder = LaunchRecorder(
            self.pool_bytes, sink, launch_metadata=self.launch_metadata, flush=FlushPolicy(launches, seconds)
        )
        recorder.drain_for(device)
        graphs, autotune = GraphFollower(recorder), AutotuneFollower(self.plain)
        recorder.autotune = autotune
        recorder.install()
        graphs.install()
        autotune.install()
        self._recorder, self._graphs, self._autotune = recorder, graphs, autotune

    @property
    def refused_launches(self) -> list[str]:
        """Why each launch that the profile allocator refused (and that never ran) was refused."""
        return list(self._recorder.refused) if self._recorder is not None else []

    @property
    def runs_kernels(self) -> bool:
        """Whether this session records launches (a GPU is here), not only compiles."""
        return self._recorder is not None

    def _file(self):
        """The session file, created at its first use."""
        from proton_ik.runtime.session_writer import SessionWriter

        if self._writer is None:
            # Launches arrive raw when sized from the code (at most twice what they wrote) and
            # trimmed on the device otherwise: the writer stores them as they come.
            self._writer = SessionWriter(self.session_path, self._session_info, compress=False, trim=False)
        return self._writer

    def _close_file(self) -> None:
        """Write the session file's manifest; launches that ran unrecorded make a file too."""
        unrecorded: list[dict[str, Any]] = (
            self._recorder.unrecorded_info() if self._recorder is not None else []
        )
        if self._writer is None and not unrecorded:
            return
        writer = self._file()
        if unrecorded:
            writer.info[UNRECORDED] = unrecorded
        device = writer.info.get("device_index")
        if isinstance(device, int) and CLOCK_PAIRS in writer.info:  # a session that read one at start
            from proton_ik.runtime.clock_sync import clock_pair_or_none

            pair = clock_pair_or_none(device)  # the mode is off by now: the kernel compiles plain
            if pair is not None:
                writer.info[CLOCK_PAIRS] = [*writer.info[CLOCK_PAIRS], pair]
        writer.close()

    @contextlib.contextmanager
    def plain(self) -> Iterator[None]:
        """Kernels compile and run plain, and nothing is recorded, inside this block."""
        if not self.active:
            yield
            return
        self.deactivate()
        try:
            yield
        finally:
            self.activate()

    def flush(self) -> None:
        """Copy every launch recorded so far off the devices into the session file, and hand it to
        the operating system: those launches survive the process being killed."""
        if self._recorder is not None:
            for drain in list(self._recorder.drains.values()):
                drain.flush()

    def activate(self) -> None:
        compile_mode.set_mode(self.mode)
        if self._recorder is not None:
            self._recorder.recording = True
        self.active = True

    def deactivate(self) -> None:
        compile_mode.set_mode(None)
        if self._recorder is not None:
            self._recorder.recording = False
        self.active = False

    def finalize(self) -> Result:
        began = time.perf_counter()
        self.deactivate()
        result = Result(self.name)
        if self._recorder is None:
            return result
        assert self._autotune is not None and self._graphs is not None  # made with the recorder
        self._autotune.uninstall()
        self._graphs.uninstall()
        self._recorder.uninstall()
        workers = self._workers_ahead()  # they import while the drains' last flush runs
        from proton_ik.viewer.arrays import collector_paused

        try:
            # The drains' last flush and the render make objects by the launch, and each of the
            # cyclic collector's full passes walks the whole program's heap (a 20,000-launch
            # flush took 0.28 s longer beside 3 million objects on a 2-core machine).
            with collector_paused():
                return self._finish(result, began, workers)
        finally:
            for started in (workers, self._fork_server):
                if started is not None:
                    started.close()

    def _finish(self, result: Result, began: float, workers: StartedRunners | None) -> Result:
        assert self._recorder is not None
        failure: RuntimeError | None = None
        try:
            self._recorder.close()
        except RuntimeError as error:
            failure = error
        finally:
            # Whatever was drained is kept: the manifest is written, and the file moved into
            # place, even if a drain failed.
            self._close_file()
            claim = self._place_session_file()
        if failure is not None:
            if claim is not None:
                claim.release()
            raise RuntimeError(
                f"{failure}. The launches drained before it are kept in {self.session_path}; render "
                f"them with `proton-ik convert {self.session_path.name} --to perfetto`"
            ) from failure
        result.launches = self._recorder.launches
        result.pool_wait_seconds = warn_of_stalls(self._recorder.pool_stalls())
        if claim is None:
            result.finalize_seconds = time.perf_counter() - began
            return result
        result.paths["session"] = str(self.session_path)
        result.session_path = self.session_path
        try:
            if result.launches and self.formats:
                result.records = self._render(claim, result.paths, workers)
        finally:
            claim.release()
        result.finalize_seconds = time.perf_counter() - began
        return result

    def _workers_ahead(self) -> StartedRunners | None:
        """Render workers for the trace: forks of the session's fork server, or else processes
        started before the drains' last flush (``viewer.render.start_workers_for``) from what the
        session holds so far: its file and its launches still in the device pools. None where the
        trace will not be rendered in parts on workers."""
        if "pftrace" not in self.formats or self._recorder is None or self._recorder.launches == 0:
            return None
        if self._fork_server is not None and self._fork_server.alive:
            return self._fork_server
        from proton_ik.viewer.render import start_workers_for

        pending = sum(drain.pool.used for drain in self._recorder.drains.values())
        try:
            written = self.session_path.stat().st_size
        except OSError:  # nothing written yet
            written = 0
        return start_workers_for(written + pending, launches=self._recorder.launches)

    def _place_session_file(self) -> session_files.Claim | None:
        """Claim the final names of the session file and its traces, and move the session file
        onto its name; None when no file was written."""
        if self._writer is None:
            return None
        suffixes = (SESSION_SUFFIX, *(f".{fmt}" for fmt in self.formats))
        claim = session_files.claim(self.out_dir, self.file_stem, suffixes, overwrite=self.overwrite)
        if claim.stem != self.file_stem:
            taken = self.out_dir / f"{self.file_stem}{SESSION_SUFFIX}"
            warnings.warn(
                f"proton_ik: session '{self.name}': {taken} (or a trace of that name) exists, from an "
                f"earlier run or another process, and is kept; this session's files are "
                f"{claim.stem}{SESSION_SUFFIX} and its traces. Pass overwrite=True to start() to "
                "replace them instead",
                stacklevel=4,
            )
        self.session_path = claim.place(SESSION_SUFFIX, self.session_path)
        return claim

    def _render(
        self, claim: session_files.Claim, paths: dict[str, str], workers: StartedRunners | None = None
    ) -> int:
        """Write the traces beside the session file, each moved onto its claimed name once
        whole; the records rendered."""
        from proton_ik import viewer

        outputs = {
            fmt: session_files.partial_path(self.out_dir, claim.stem, f".{fmt}") for fmt in self.formats
        }
        try:
            # The report links to the trace by its final name, not the name it is written under.
            link = f"{claim.stem}.pftrace" if "pftrace" in outputs else None
            stats = viewer.render_session(
                self.session_path,
                outputs,
                timeline=self.timeline,
                trace_link=link,
                started=workers,
                session=self._written_session(),
            )
        except BaseException:
            for written in outputs.values():
                written.unlink(missing_ok=True)
            raise
        for fmt, written in outputs.items():
            paths[fmt] = str(claim.place(f".{fmt}", written))
        return stats.records

    def _written_session(self) -> StoredSession | None:
        """The session file as its writer left it (``viewer.session_file.session_from_written``),
        where it wrote one: the render need not read the file's directory and manifest back."""
        written = self._writer.written if self._writer is not None else None
        if written is None:
            return None
        from proton_ik.viewer.session_file import session_from_written

        return session_from_written(self.session_path, written)


def _triton_version() -> str:
    import triton  # here, not at the top: reading sessions (proton_ik.viewer) needs no Triton

    return str(triton.__version__)
