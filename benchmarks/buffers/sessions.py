"""proton_ik and Proton sessions for the buffers measurements, and what they read back.

Private runtime state is read in one place, ``IkRun``: the drains' ``copied_bytes`` counters
and their ``flush``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import triton.profiler as proton

import proton_ik
from benchmarks.kernels.problem import Launch

PROTON_MODE = "default"  # Triton Proton's instrumentation mode: its shared-memory buffer
PROTON_DATA = "tree"  # Proton's default; "trace" takes tens of seconds per finalize here


@dataclass
class IkRun:
    """A running (then finalized) proton_ik session, with the runtime counters we read."""

    session: Any
    result: Any = None
    finalize_s: float = 0.0

    def _drains(self) -> list[Any]:
        recorder = getattr(self.session, "_recorder", None)  # private: None without a GPU
        return [] if recorder is None else list(recorder.drains.values())

    def copied_bytes(self) -> int:
        """Bytes of records copied from device to host so far, all devices."""
        return sum(int(drain.copied_bytes) for drain in self._drains())

    def pool_waits(self) -> tuple[int, float]:
        """Times a launch waited for room in the device pool so far, and the seconds, all devices."""
        drains = self._drains()
        return sum(int(d.waits) for d in drains), sum(float(d.waited_seconds) for d in drains)

    def flush(self) -> None:
        """Copy every launch queued so far off the device, and wait for it."""
        for drain in self._drains():
            drain.flush()


@contextlib.contextmanager
def ik_session(name: str, directory: Path, **options: Any) -> Iterator[IkRun]:
    """A proton_ik session: the default mode unless ``options`` say otherwise. Finalized on the
    way out; ``run.result`` and ``run.finalize_s`` (wall time of ``finalize``) are set then."""
    directory.mkdir(parents=True, exist_ok=True)
    run = IkRun(proton_ik.start(name, out_dir=str(directory), **options))
    try:
        yield run
    finally:
        began = time.perf_counter()
        run.result = proton_ik.finalize()
        run.finalize_s = time.perf_counter() - began


@contextlib.contextmanager
def proton_session(directory: Path) -> Iterator[None]:
    """A Triton Proton instrumentation session (mode ``PROTON_MODE``, data ``PROTON_DATA``)."""
    directory.mkdir(parents=True, exist_ok=True)
    proton.start(str(directory / "proton"), backend="instrumentation", mode=PROTON_MODE, data=PROTON_DATA)
    try:
        yield
    finally:
        proton.finalize()


def end_leftover_session() -> None:
    """A measurement that failed between start and finalize must not leave a session running."""
    if proton_ik._session is not None:  # private: the module's running session
        with contextlib.suppress(Exception):
            proton_ik.finalize()


def launch_table(run: IkRun) -> pd.DataFrame:
    """The session's launch table (one row per launch), in launch order."""
    trace = run.result.trace
    if trace is None:
        raise RuntimeError("the session recorded no launch")
    return trace.launches.sort_values("launch").reset_index(drop=True)


def output_error(launch: Launch, tolerance: tuple[float, float]) -> str:
    """'' when every output matches its torch reference; else the mismatch, in short."""
    atol, rtol = tolerance
    for got, want in zip(launch.outputs, launch.reference(), strict=True):
        try:
            torch.testing.assert_close(got, want.to(got.dtype), atol=atol, rtol=rtol)
        except AssertionError as error:
            return " ".join(str(error).split())[:300]
    return ""


def file_bytes(result: Any) -> dict[str, int]:
    return {kind: Path(path).stat().st_size for kind, path in result.paths.items() if Path(path).is_file()}
