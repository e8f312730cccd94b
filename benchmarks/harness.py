"""What every measurement shares: the variants side by side (plain, proton_ik's modes, Proton's
global and shared buffers, the parts of the default mode), compiled first and launched directly with the hooks set to None,
timed in interleaved rounds; the SM clock sampled by nvidia-smi; and the run's context.

The method is ../shared/BENCHMARKING.md. A variant compiles under proton_ik inside
``proton_ik.instrumented(mode)`` (no session), under Proton inside a Proton session.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import triton
import triton.profiler as proton
from triton.experimental import gluon
from triton.experimental.gluon._runtime import GluonJITFunction
from triton.runtime._allocation import set_profile_allocator

import proton_ik
from benchmarks import scope_parts, scopes
from benchmarks.variants import Variant
from proton_ik.mode import Mode


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- compiling a variant (benchmarks/variants.py names them) ---------------------------------------


@contextlib.contextmanager
def compiling(variant: Variant, session_dir: Path) -> Iterator[None]:
    """Kernels compiled inside are ``variant``'s. Proton's hook sets its own profile allocator
    and resets it on the way out; the timing code installs ours afterwards."""
    with contextlib.ExitStack() as stack:
        if variant.part:
            stack.enter_context(scope_parts.compiling(variant.part, Mode.parse(variant.mode)))
        elif variant.profiler == "proton_ik":
            stack.enter_context(proton_ik.instrumented(variant.mode))
        elif variant.profiler == "proton":
            name = session_dir / f"compile_{re.sub(r'[^A-Za-z0-9_]+', '_', variant.label)}"
            session = proton.start(str(name), backend="instrumentation", mode=variant.mode)
            stack.callback(proton.finalize, session)
        if scopes.active_profiler() != variant.profiler:
            raise RuntimeError(f"{variant.label}: scopes would record for {scopes.active_profiler()!r}")
        yield


def compile_variant(fn, args: tuple, grid: tuple, options: dict, variant: Variant, session_dir: Path):
    """The compiled kernel for ``variant``, checked to carry the instrumentation it should."""
    with compiling(variant, session_dir):
        compiled = fn.warmup(*args, grid=grid, **options)
    meta = compiled.metadata
    if variant.part == "markers":
        if meta.profile_scratch_size or getattr(meta, "proton_ik", None):
            raise RuntimeError(f"{variant.label}: lowered by proton_ik; the markers should stay comments")
        if not scope_parts.markers_in(compiled.asm["ptx"]):
            raise RuntimeError(f"{variant.label}: no scope markers in the PTX")
    elif variant.profiler == "proton_ik" and not getattr(meta, "proton_ik", None):
        raise RuntimeError(f"{variant.label}: compiled without proton_ik metadata, so not instrumented")
    if variant.profiler == "proton" and not meta.profile_scratch_size:
        raise RuntimeError(f"{variant.label}: compiled without a profile buffer, so not instrumented")
    if variant.profiler is None and meta.profile_scratch_size:
        raise RuntimeError("plain: compiled with a profile buffer; a profiler was left active")
    return compiled


# Proton's global buffer faults (illegal address) once grid x per-CTA scratch passes 2 GiB (seen
# on an H200 with triton 3.6); such a launch would end the whole process, so it is skipped.
PROTON_GLOBAL_MAX_BYTES = (1 << 31) - 1


def unsafe_launch(variant: Variant, compiled, grid: tuple[int, int, int]) -> str:
    """Why launching ``compiled`` would crash the process, or ''."""
    total = grid[0] * grid[1] * grid[2] * compiled.metadata.profile_scratch_size
    if (
        variant.profiler == "proton"
        and "buffer_type=global" in variant.mode
        and total > PROTON_GLOBAL_MAX_BYTES
    ):
        return f"skipped: {total:,} bytes of Proton global buffer (over 2 GiB faults)"
    return ""


def fresh(fn):
    """A new JIT wrapper of the same source: it compiles (from Triton's disk cache) and loads
    anew, so a profiler session started now sees the kernel load."""
    if isinstance(fn, GluonJITFunction):
        return gluon.jit(fn.fn)
    return triton.jit(fn.fn, do_not_specialize=fn.do_not_specialize)


# --- profiled sessions: ours and Proton's ------------------------------------------------------


def ik_session(name: str, out_dir: Path):
    """A proton_ik session writing into ``out_dir``; the caller calls ``proton_ik.finalize()``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return proton_ik.start(name, mode="instrumentation", out_dir=str(out_dir))


def proton_trace_events(base: Path) -> list[dict]:
    """The complete ("X") events of the Chrome trace a Proton session named ``base`` wrote."""
    paths = sorted(base.parent.glob(base.name + "*.chrome_trace")) or sorted(
        base.parent.glob(base.name + "*")
    )
    if not paths:
        raise FileNotFoundError(f"Proton wrote no trace next to {base}")
    data = json.loads(paths[-1].read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X"]


# --- direct launches ----------------------------------------------------------------------------


class ScratchPool:
    """Profile and global scratch for direct launches: one cached buffer per requested size, so
    no allocation happens inside a timed launch."""

    def __init__(self) -> None:
        self._buffers: dict[int, torch.Tensor] = {}

    def __call__(self, size: int, alignment: int, stream: int | None) -> torch.Tensor:
        buffer = self._buffers.get(size)
        if buffer is None:
            buffer = torch.empty(size, dtype=torch.uint8, device="cuda")
            if buffer.data_ptr() % alignment:
                raise RuntimeError(f"scratch of {size} bytes is not {alignment}-byte aligned")
            self._buffers[size] = buffer
        return buffer

    def install(self) -> None:
        set_profile_allocator(self)
        triton.set_allocator(self)

    def clear(self) -> None:
        self._buffers.clear()
        torch.cuda.empty_cache()


def direct(compiled, args: tuple, grid: tuple[int, int, int]) -> Callable[[], None]:
    """Launch ``compiled`` with its launch hooks set to None: device work only."""
    compiled._init_handles()
    run, function, packed = compiled.run, compiled.function, compiled.packed_metadata
    stream = torch.cuda.current_stream().cuda_stream
    gx, gy, gz = grid

    def launch() -> None:
        run(gx, gy, gz, stream, function, packed, None, None, None, *args)

    return launch


def bench_ms(fn: Callable[[], None], quick: bool) -> float:
    warmup, rep = (5, 20) if quick else (25, 100)
    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


# --- the SM clock, sampled by nvidia-smi ---------------------------------------------------------


class ClockSampler:
    """nvidia-smi's SM clock (MHz), sampled every ``interval_ms`` in the background."""

    def __init__(self, interval_ms: int = 50) -> None:
        self.samples: list[tuple[float, int]] = []
        self.error = ""
        device = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
        self._command = [
            "nvidia-smi",
            f"--id={device}",
            "--query-gpu=clocks.sm",
            "--format=csv,noheader,nounits",
            f"--loop-ms={interval_ms}",
        ]
        self._process: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            self._process = subprocess.Popen(
                self._command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        except OSError as error:
            self.error = f"nvidia-smi: {error}"
            return
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            with contextlib.suppress(ValueError):
                self.samples.append((time.time(), int(line.strip())))

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)

    def between(self, t0: float, t1: float) -> list[int]:
        return [mhz for t, mhz in self.samples if t0 <= t <= t1]


def nvidia_smi(query: str) -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError) as error:
        return f"unknown ({error})"


def host_cpu() -> str:
    """The host's CPU model and core count, as the report names the host."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            model = next(
                (line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model
            )
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def environment(num_sms: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    return {
        "host_cpu": host_cpu(),
        "device": torch.cuda.get_device_name(0),
        "sms": num_sms,
        "capability": f"{props.major}.{props.minor}",
        "driver": nvidia_smi("driver_version"),
        "max_sm_clock_mhz": nvidia_smi("clocks.max.sm"),
        "triton": triton.__version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "proton_ik_default_mode": str(Mode()),
    }


# --- statistics --------------------------------------------------------------------------------


def geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summarize_rounds(per_round: list[float]) -> dict[str, Any]:
    median = float(np.median(per_round))
    return {
        "median_ms": median,
        "rounds_ms": per_round,
        "spread_pct": 100.0 * (max(per_round) - min(per_round)) / median,
    }


def pct(ratio: float) -> float:
    return 100.0 * (ratio - 1.0)


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Context:
    args: argparse.Namespace
    num_sms: int
    variants: list[Variant]
    pool: ScratchPool
    clock: ClockSampler
    scratch: Path  # traces and Proton session files; removed at the end unless --keep-traces
    started: float = field(default_factory=time.perf_counter)
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return self.args.rounds or (2 if self.args.quick else 7)

    def elapsed(self) -> str:
        return f"{time.perf_counter() - self.started:.0f}s"
