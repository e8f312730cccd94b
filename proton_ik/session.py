"""The one profiling session: ``start`` creates it, ``finalize`` ends it. All state lives here."""

from __future__ import annotations

import datetime
import os
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import triton

from proton_ik.lowering import triton_hook
from proton_ik.mode import Mode

DEFAULT_POOL_BYTES = 512 << 20
FORMATS = ("pftrace", "json")
SESSION_SUFFIX = ".pik"


@dataclass
class Result:
    """What ``finalize`` returns: the files written and the decoded events."""

    name: str
    paths: dict[str, str] = field(default_factory=dict)
    launches: int = 0
    records: int = 0
    finalize_seconds: float = 0.0
    trace: Any = None  # proton_ik.viewer.Trace, or None when nothing ran

    @property
    def events(self):
        import pandas as pd

        return pd.DataFrame() if self.trace is None else self.trace.events

    def summary(self):
        return None if self.trace is None else self.trace.summary()


def gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _caller() -> str:
    """``file:line`` of the user code that called into proton_ik, for error messages."""
    for frame in reversed(traceback.extract_stack()):
        if not os.path.abspath(frame.filename).startswith(_PACKAGE_DIR):
            return f"{os.path.basename(frame.filename)}:{frame.lineno}"
    return "<unknown>"


class Session:
    def __init__(self, name: str, mode: Mode, out_dir: Path, pool_bytes: int, formats: tuple[str, ...]):
        self.name = name
        self.mode = mode
        self.out_dir = out_dir
        self.pool_bytes = pool_bytes
        self.formats = formats
        self.started_at = _caller()
        self.session_path = out_dir / f"{name}{SESSION_SUFFIX}"
        self.active = False
        self._recorder = None
        self._drain = None
        self._writer = None

    def start(self) -> None:
        if gpu_available():
            self._start_runtime()
        else:
            warnings.warn(
                "proton_ik: no CUDA GPU here. Kernels will compile instrumented (triton.compile "
                "with a GPUTarget works), but nothing will run, so finalize() writes no trace.",
                stacklevel=3,
            )
        self.activate()

    def _start_runtime(self) -> None:
        import torch

        from proton_ik.runtime.calibrate import time_shifts
        from proton_ik.runtime.drain import Drain
        from proton_ik.runtime.hooks import LaunchRecorder
        from proton_ik.runtime.pool import RingPool
        from proton_ik.viewer.session_file import SessionWriter

        self.out_dir.mkdir(parents=True, exist_ok=True)
        device = torch.cuda.current_device()
        properties = torch.cuda.get_device_properties(device)
        info = {
            "name": self.name,
            "mode": str(self.mode),
            "device": properties.name,
            "sm_count": properties.multi_processor_count,
            "triton": triton.__version__,
            "torch": torch.__version__,
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "time_shift_cycles": time_shifts(self.mode),
        }
        self._writer = SessionWriter(self.session_path, info, compress=False, trim=True)
        arena = torch.empty(self.pool_bytes, dtype=torch.uint8, device=device)
        pool = RingPool(self.pool_bytes)
        self._drain = Drain(pool, arena, self._writer.add_launch)
        self._recorder = LaunchRecorder(pool, arena, self._drain)
        self._recorder.install()

    def activate(self) -> None:
        triton_hook.install(self.mode)
        if self._recorder is not None:
            self._recorder.recording = True
        self.active = True

    def deactivate(self) -> None:
        triton_hook.uninstall()
        if self._recorder is not None:
            self._recorder.recording = False
        self.active = False

    def finalize(self) -> Result:
        began = time.perf_counter()
        self.deactivate()
        result = Result(self.name)
        if self._recorder is None:
            return result
        self._recorder.uninstall()
        self._drain.close()
        self._writer.close()
        result.launches = self._recorder.launches
        result.paths["session"] = str(self.session_path)
        if result.launches:
            from proton_ik import viewer

            trace = viewer.load(self.session_path)
            if "pftrace" in self.formats:
                result.paths["pftrace"] = str(trace.write_perfetto(self.out_dir / f"{self.name}.pftrace"))
            if "json" in self.formats:
                result.paths["json"] = str(trace.write_chrome(self.out_dir / f"{self.name}.json"))
            result.trace = trace
            result.records = trace.record_count
        result.finalize_seconds = time.perf_counter() - began
        return result
