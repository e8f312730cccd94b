"""The proton_ik benchmark: overhead, per-record cost, accuracy and host-side cost, side by side
with Triton's Proton, in one process, following ../shared/BENCHMARKING.md.

    python benchmarks/run.py                    # the full run: a few minutes on an H100 or H200
    python benchmarks/run.py --quick            # small sizes and few rounds: a smoke test
    python benchmarks/run.py --only overhead    # sections: overhead, record, accuracy, counts, host, buffers
    python benchmarks/run.py --only buffers     # issue 7 alone (benchmarks/buffers.py)
    python benchmarks/run.py --ik-mode instrumentation:granularity=warpgroup   # another mode of ours

Sections:

- overhead: compile every kernel of the suite plain, under proton_ik (default and --ik-mode
  modes) and under Proton (global and shared buffer, and --proton-mode modes), keeping the
  compiled kernels; check every variant's outputs against torch and against the plain kernel;
  then time direct launches (launch hooks bypassed) in interleaved rounds.
- record: per-record cost from a loop of empty scopes, by the kernel's own clock and device time.
- accuracy: scopes of known length (a %clock64 spin), cross-CTA alignment after a grid barrier,
  and the SM clock inferred from our trace against nvidia-smi's.
- counts: records per warp in our trace against the exact count the scope structure implies.
- host: wall time of 1000 profiled launches including finalize, trace bytes per million events,
  and finalize seconds per million records, for proton_ik and for Proton.
- buffers: buffers sized from the code (issue 7), benchmarks/buffers.py: the default mode on
  every kernel, device bytes against bytes written, host time per launch, end to end on a
  16384-CTA grid, finalize rate, CUDA graph replays and autotuning.

Results go to --out (default benchmarks/results/) as results.json and results.md; the summary
table is printed last. Every number there is computed here.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.profiler as proton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon._runtime import GluonJITFunction  # noqa: E402
from triton.runtime._allocation import set_profile_allocator  # noqa: E402

import proton_ik  # noqa: E402
from benchmarks import buffers, kernels, scopes, targets  # noqa: E402
from proton_ik.lowering import triton_hook  # noqa: E402
from proton_ik.mode import DEFAULT_RING_CAPACITY, Mode  # noqa: E402

SECTIONS = ("overhead", "record", "breakdown", "accuracy", "counts", "host", "buffers")
PROTON_DEFAULT_MODES = {"proton_global": "default:buffer_type=global", "proton_shared": "default"}
HOST_LAUNCHES = 1000
HOST_ELEMENTS = 1 << 18  # the short kernel: GELU over 256K floats, 64 CTAs
HOST_BUDGET_S = 120.0  # a profiled host loop stops early past this; the report says how far it got
CLOCK_SPIN_CYCLES = 20_000_000  # ~10 ms spins, long enough for nvidia-smi to sample the SM clock
CLOCK_SPIN_LAUNCHES = 40
SPIN_REPEATS = 3
ALIGN_LAUNCHES = 5
ALIGN_MAX_POLLS = 1 << 20


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- variants ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One way to compile a kernel: plain, under a proton_ik mode, or under a Proton mode."""

    label: str
    profiler: str | None  # None, "proton_ik" or "proton", as scopes.active_profiler() names them
    mode: str = ""


def ik_label(mode: Mode) -> str:
    """``proton_ik`` for the default mode, else ``proton_ik[option=value:...]`` with the options
    that differ from it."""
    default = Mode()
    changed = [
        f"{f.name}={getattr(mode, f.name).value if f.name == 'granularity' else getattr(mode, f.name)}"
        for f in dataclasses.fields(Mode)
        if getattr(mode, f.name) != getattr(default, f.name)
    ]
    return f"proton_ik[{':'.join(changed)}]" if changed else "proton_ik"


def make_variants(ik_modes: list[str], proton_modes: list[str]) -> list[Variant]:
    variants = [Variant("plain", None), Variant("proton_ik", "proton_ik", str(Mode()))]
    for text in ik_modes:
        mode = Mode.parse(text)
        if mode != Mode():
            variants.append(Variant(ik_label(mode), "proton_ik", str(mode)))
    variants += [Variant(label, "proton", mode) for label, mode in PROTON_DEFAULT_MODES.items()]
    variants += [Variant(f"proton[{m}]", "proton", m) for m in proton_modes]
    return variants


@contextlib.contextmanager
def compiling(variant: Variant, session_dir: Path) -> Iterator[None]:
    """Kernels compiled inside are ``variant``'s. Proton's hook sets its own profile allocator
    and resets it on the way out; the timing code installs ours afterwards."""
    if variant.profiler == "proton_ik":
        triton_hook.install(Mode.parse(variant.mode))
    elif variant.profiler == "proton":
        name = session_dir / f"compile_{re.sub(r'[^A-Za-z0-9_]+', '_', variant.label)}"
        session = proton.start(str(name), backend="instrumentation", mode=variant.mode)
    try:
        if scopes.active_profiler() != variant.profiler:
            raise RuntimeError(f"{variant.label}: scopes would record for {scopes.active_profiler()!r}")
        yield
    finally:
        if variant.profiler == "proton_ik":
            triton_hook.uninstall()
        elif variant.profiler == "proton":
            proton.finalize(session)


def compile_variant(fn, args: tuple, grid: tuple, options: dict, variant: Variant, session_dir: Path):
    """The compiled kernel for ``variant``, checked to carry the instrumentation it should."""
    with compiling(variant, session_dir):
        compiled = fn.warmup(*args, grid=grid, **options)
    meta = compiled.metadata
    if variant.profiler == "proton_ik" and not getattr(meta, "proton_ik", None):
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


def check_outputs(actual: list[torch.Tensor], expected: list[torch.Tensor], tolerance) -> str:
    """'' when every output matches within (atol, rtol); else the first mismatch, in short."""
    atol, rtol = tolerance
    for got, want in zip(actual, expected, strict=True):
        try:
            torch.testing.assert_close(got, want.to(got.dtype), atol=atol, rtol=rtol)
        except AssertionError as error:
            return " ".join(str(error).split())[:300]
    return ""


def section_overhead(ctx: Context) -> dict[str, Any]:
    problems = kernels.suite(ctx.args.quick, ctx.num_sms)
    session_dir = ctx.scratch / "compile_sessions"
    session_dir.mkdir(parents=True, exist_ok=True)

    # Compile first: every variant of every kernel, before any timing.
    prepared = []
    for problem in problems:
        entry: dict[str, Any] = {"compile_s": {}, "errors": {}}
        try:
            launch = problem.make_launch()
        except Exception as error:
            log(f"  {problem.name}: inputs failed: {error!r}")
            entry["errors"]["inputs"] = repr(error)
            prepared.append((problem, None, {}, entry))
            continue
        compiled = {}
        for variant in ctx.variants:
            start = time.perf_counter()
            try:
                compiled[variant.label] = compile_variant(
                    problem.fn, launch.args, launch.grid, problem.options, variant, session_dir
                )
            except Exception as error:
                entry["errors"][variant.label] = f"compile: {error!r}"[:500]
                log(f"  {problem.name} [{variant.label}] compile FAILED: {error!r}"[:400])
                continue
            entry["compile_s"][variant.label] = time.perf_counter() - start
            log(f"  compiled {problem.name} [{variant.label}] in {entry['compile_s'][variant.label]:.1f}s")
        prepared.append((problem, launch, compiled, entry))

    results: dict[str, Any] = {}
    for problem, launch, compiled, entry in prepared:
        results[problem.name] = entry
        entry.update(describe_problem(problem, compiled))
        if launch is None or "plain" not in compiled:
            continue
        for variant in ctx.variants:
            reason = variant.label in compiled and unsafe_launch(
                variant, compiled[variant.label], launch.grid
            )
            if reason:
                entry["errors"][variant.label] = reason
                del compiled[variant.label]
                log(f"  {problem.name} [{variant.label}] {reason}")
        log(f"  {problem.name}: checking outputs of {len(compiled)} variants ({ctx.elapsed()})")
        ctx.pool.install()
        runners = {label: direct(ck, launch.args, launch.grid) for label, ck in compiled.items()}
        entry["numerics"] = check_variants(problem, launch, runners)
        timed = [label for label in runners if not entry["numerics"][label]["error"]]
        per_round: dict[str, list[float]] = {label: [] for label in timed}
        for round_index in range(ctx.rounds):
            for label in timed:
                per_round[label].append(bench_ms(runners[label], ctx.args.quick))
            log(
                f"  {problem.name} round {round_index + 1}/{ctx.rounds}: "
                + "  ".join(f"{label}={per_round[label][-1]:.4f}ms" for label in timed)
            )
        entry["timing"] = {label: summarize_rounds(values) for label, values in per_round.items()}
        entry["overhead_pct"] = overheads(entry["timing"], ctx.variants)
        del runners
        ctx.pool.clear()
    del prepared
    torch.cuda.empty_cache()
    return {"kernels": results, "summary": overhead_summary(results, ctx.variants), "rounds": ctx.rounds}


def describe_problem(problem: kernels.Problem, compiled: dict) -> dict[str, Any]:
    """The problem as the report prints it, with the exact records per warp per launch."""
    plain = compiled.get("plain")
    warps = plain.metadata.num_warps if plain is not None else problem.options["num_warps"]
    counts = problem.records_per_warp(warps)
    return {
        "kind": problem.kind,
        "size": problem.size,
        "scopes": problem.scopes,
        "grid": list(problem.grid),
        "warps_per_cta": int(warps),
        "records_per_warp": {
            "min": int(counts.min()),
            "mean": float(counts.mean()),
            "max": int(counts.max()),
        },
        "records_per_launch": int(counts.sum()),
    }


def check_variants(problem: kernels.Problem, launch: kernels.Launch, runners: dict) -> dict[str, Any]:
    """Each variant's outputs against torch's reference, and the instrumented ones against plain."""
    expected = launch.reference()
    plain_outputs: list[torch.Tensor] = []
    report: dict[str, Any] = {}
    for label, run in runners.items():
        for out in launch.outputs:
            out.fill_(float("nan") if out.is_floating_point() else -1)
        run()
        torch.cuda.synchronize()
        entry = {"error": check_outputs(launch.outputs, expected, problem.tolerance)}
        if label == "plain":
            plain_outputs = [out.clone() for out in launch.outputs]
        else:
            diffs = [
                (out.float() - ref.float()).abs().max().item()
                for out, ref in zip(launch.outputs, plain_outputs, strict=True)
            ]
            entry["max_abs_diff_vs_plain"] = max(diffs) if diffs else 0.0
            entry["bitwise_equal_to_plain"] = all(
                torch.equal(out, ref) for out, ref in zip(launch.outputs, plain_outputs, strict=True)
            )
        if entry["error"]:
            log(f"  {problem.name} [{label}] WRONG OUTPUT: {entry['error']}")
        report[label] = entry
    del expected, plain_outputs
    return report


def overheads(timing: dict[str, dict], variants: list[Variant]) -> dict[str, float]:
    if "plain" not in timing:
        return {}
    plain = timing["plain"]["median_ms"]
    out = {label: pct(t["median_ms"] / plain) for label, t in timing.items() if label != "plain"}
    proton_labels = [v.label for v in variants if v.profiler == "proton" and v.label in timing]
    if proton_labels:
        best = min(timing[label]["median_ms"] for label in proton_labels)
        for v in variants:
            if v.profiler == "proton_ik" and v.label in timing:
                out[f"{v.label} vs best proton"] = pct(timing[v.label]["median_ms"] / best)
    return out


def overhead_summary(results: dict[str, Any], variants: list[Variant]) -> dict[str, Any]:
    """Geometric means across the kernels every variant finished."""
    summary: dict[str, Any] = {}
    for v in variants[1:]:
        ratios = [
            r["timing"][v.label]["median_ms"] / r["timing"]["plain"]["median_ms"]
            for r in results.values()
            if "timing" in r and v.label in r["timing"] and "plain" in r["timing"]
        ]
        summary[v.label] = {"geomean_overhead_pct": pct(geomean(ratios)), "kernels": len(ratios)}
    proton_labels = [v.label for v in variants if v.profiler == "proton"]
    for v in (v for v in variants if v.profiler == "proton_ik"):
        ratios = []
        for r in results.values():
            timing = r.get("timing", {})
            best = [timing[label]["median_ms"] for label in proton_labels if label in timing]
            if v.label in timing and best:
                ratios.append(timing[v.label]["median_ms"] / min(best))
        summary[f"{v.label} vs best proton"] = {"geomean_pct": pct(geomean(ratios)), "kernels": len(ratios)}
    return summary


def section_record_cost(ctx: Context) -> dict[str, Any]:
    """Empty scopes in a tight loop, one CTA per SM, 4 warps: cycles and ns per record."""
    fn = kernels.record_cost_kernel
    grid = (ctx.num_sms, 1, 1)
    warps = kernels.MICRO_OPTIONS["num_warps"]
    out = torch.zeros(ctx.num_sms * kernels.MICRO_BLOCK, dtype=torch.int64, device="cuda")
    block, unroll = kernels.MICRO_BLOCK, kernels.RECORD_COST_UNROLL
    compiled = {}
    session_dir = ctx.scratch / "compile_sessions"
    session_dir.mkdir(parents=True, exist_ok=True)
    errors = {}
    for variant in ctx.variants:
        try:
            compiled[variant.label] = compile_variant(
                fn, (out, 64, block, unroll), grid, kernels.MICRO_OPTIONS, variant, session_dir
            )
        except Exception as error:
            errors[variant.label] = repr(error)[:500]
            log(f"  record_cost [{variant.label}] compile FAILED: {error!r}"[:400])
    ctx.pool.install()
    runners = {
        (label, n): direct(ck, (out, n, block, unroll), grid)
        for label, ck in compiled.items()
        for n in kernels.RECORD_COST_ITERS
    }
    cycles: dict[str, dict[int, float]] = {label: {} for label in compiled}
    for (label, n), run in runners.items():
        out.zero_()
        run()
        torch.cuda.synchronize()
        per_warp = out.view(ctx.num_sms, warps, 32)[:, :, 0]
        cycles[label][n] = float(per_warp.double().median().item())
    per_round: dict[tuple[str, int], list[float]] = {key: [] for key in runners}
    timed_from = time.time()
    for _ in range(max(3, ctx.rounds)):
        for key, run in runners.items():
            per_round[key].append(bench_ms(run, ctx.args.quick))
    device_ms = {label: {} for label in compiled}
    for (label, n), values in per_round.items():
        device_ms[label][n] = float(np.median(values))
    samples = ctx.clock.between(timed_from, time.time())
    smi = float(np.median(samples)) if samples else None
    results: dict[str, Any] = {"errors": errors, "grid": list(grid), "warps_per_cta": warps, "variants": {}}
    for label in compiled:
        rows = {}
        for n in kernels.RECORD_COST_ITERS:
            records = 2 * n
            row: dict[str, Any] = {
                "records_per_warp": records,
                "clock_cycles": cycles[label][n],
                "device_ms": device_ms[label][n],
            }
            if records:
                row["cycles_per_record"] = (cycles[label][n] - cycles[label][0]) / records
                ns = (device_ms[label][n] - device_ms[label][0]) * 1e6 / records
                row["device_ns_per_record"] = ns
                if smi:
                    row["device_cycles_per_record"] = ns * smi / 1000.0
            rows[str(n)] = row
        results["variants"][label] = rows
        last = rows[str(kernels.RECORD_COST_ITERS[-1])]
        log(
            f"  record cost [{label}]: {last.get('cycles_per_record', float('nan')):.1f} cycles/record (clock)"
        )
    results["smi_mhz_used"] = smi or None
    ctx.pool.clear()
    return results


def ik_session(name: str, out_dir: Path):
    out_dir.mkdir(parents=True, exist_ok=True)
    return proton_ik.start(name, mode="instrumentation", out_dir=str(out_dir))


def launch_positions(launches, kernel: str) -> dict[int, int]:
    """Launch id -> position among ``kernel``'s launches, from the trace's launch table, which
    lists every captured launch, also those that produced no events."""
    mine = launches[launches["kernel"].astype(str) == kernel]
    return {int(launch): i for i, launch in enumerate(sorted(mine["launch"]))}


def launch_problems(launches, ids: list[int]) -> list[str]:
    """The problems the trace reports for these launches (a list or a '; '-joined string each)."""
    found = []
    for row in launches[launches["launch"].isin(ids)].itertuples():
        problems = row.problems.split("; ") if isinstance(row.problems, str) else list(row.problems)
        found += [f"launch {row.launch}: {problem}" for problem in problems if problem]
    return found


def section_accuracy(ctx: Context) -> dict[str, Any]:
    """Spins of known length inside one scope; a grid barrier then a scope whose begin should be
    simultaneous across CTAs; the SM clock our trace implies against nvidia-smi's."""
    grid = (ctx.num_sms, 1, 1)
    warps = kernels.MICRO_OPTIONS["num_warps"]
    block = kernels.MICRO_BLOCK
    out = torch.zeros(ctx.num_sms * block, dtype=torch.int64, device="cuda")
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    arrived = torch.zeros(ctx.num_sms, dtype=torch.int32, device="cuda")
    spin, sync = fresh(kernels.spin_kernel), fresh(kernels.grid_sync_kernel)

    spun: list[tuple[int, np.ndarray]] = []  # (target cycles, cycles spun by lane 0 of each warp)
    barrier_ok = []
    ik_session("accuracy", ctx.scratch / "accuracy")
    try:
        for n in kernels.SPIN_CYCLES:
            for _ in range(SPIN_REPEATS):
                spin[grid](out, n, block, **kernels.MICRO_OPTIONS)
                torch.cuda.synchronize()
                spun.append((n, out.view(ctx.num_sms, warps, 32)[:, :, 0].cpu().numpy()))
        clock_t0 = time.time()
        for _ in range(CLOCK_SPIN_LAUNCHES):
            spin[grid](out, CLOCK_SPIN_CYCLES, block, **kernels.MICRO_OPTIONS)
            torch.cuda.synchronize()
            spun.append((CLOCK_SPIN_CYCLES, out.view(ctx.num_sms, warps, 32)[:, :, 0].cpu().numpy()))
        clock_t1 = time.time()
        for _ in range(ALIGN_LAUNCHES):
            counter.zero_()
            sync[grid](counter, arrived, ctx.num_sms, ALIGN_MAX_POLLS, **kernels.MICRO_OPTIONS)
            torch.cuda.synchronize()
            barrier_ok.append(bool((arrived == ctx.num_sms).all()))
    finally:
        result = proton_ik.finalize()
    events, launches = result.events, result.trace.launches

    positions = launch_positions(launches, "spin_kernel")
    if len(positions) != len(spun):
        raise RuntimeError(f"the trace holds {len(positions)} spin launches; {len(spun)} were made")
    spin_events = events[events["scope"] == "spin"]
    position = spin_events["launch"].map(positions).to_numpy()
    targets = np.array([n for n, _ in spun])
    actual = np.stack([cycles for _, cycles in spun])  # (launch, cta, warp)
    spin_events = spin_events.assign(
        target=targets[position],
        spun=actual[position, spin_events["cta"].to_numpy(), spin_events["warp"].to_numpy()],
    )
    spin_events = spin_events.assign(error=spin_events["dur_cycles"] - spin_events["spun"])
    rows = []
    for n in (*kernels.SPIN_CYCLES, CLOCK_SPIN_CYCLES):
        group = spin_events[spin_events["target"] == n]
        ids = [launch for launch, i in positions.items() if targets[i] == n]
        rows.append(
            {
                "target_cycles": n,
                "launches": len(ids),
                "events": len(group),
                "events_expected": len(ids) * ctx.num_sms * warps,
                "spun_median": float(group["spun"].median()),
                "measured_median": float(group["dur_cycles"].median()),
                "error_median": float(group["error"].median()),
                "error_p05": float(group["error"].quantile(0.05)),
                "error_p95": float(group["error"].quantile(0.95)),
                "relative_error_median_pct": float((group["error"].abs() / group["spun"]).median() * 100),
                "problems": launch_problems(launches, ids)[:3],
            }
        )
        if rows[-1]["events"] != rows[-1]["events_expected"]:
            log(
                f"  spin {n}: {rows[-1]['events']} events, expected {rows[-1]['events_expected']}; {rows[-1]['problems']}"
            )
    long = spin_events[spin_events["target"] >= 10_000]
    clock_ids = [launch for launch, i in positions.items() if targets[i] == CLOCK_SPIN_CYCLES]
    smi = ctx.clock.between(clock_t0, clock_t1)
    clock = {
        "inferred_mhz": float(long["dur_cycles"].sum() / long["dur_ns"].sum() * 1000.0)
        if len(long)
        else None,
        "launch_table_mhz_median": float(launches[launches["launch"].isin(clock_ids)]["mhz"].median())
        if "mhz" in launches
        else None,
        "smi_mhz_median": float(np.median(smi)) if smi else None,
        "smi_samples": len(smi),
        "smi_error": ctx.clock.error,
    }
    log(
        f"  SM clock: trace {fmt(clock['inferred_mhz'], '.0f')} MHz (launch table "
        f"{fmt(clock['launch_table_mhz_median'], '.0f')}), nvidia-smi {fmt(clock['smi_mhz_median'], '.0f')} MHz "
        f"({len(smi)} samples)"
    )

    released = events[events["scope"] == "released"]
    first_warp = released[released["warp"] == 0]
    spreads = first_warp.groupby("launch", observed=True)["begin_ns"].agg(lambda s: float(s.max() - s.min()))
    stds = first_warp.groupby("launch", observed=True)["begin_ns"].std()
    alignment = {
        "launches": len(spreads),
        "barrier_completed": barrier_ok,
        "ctas": int(first_warp.groupby("launch", observed=True).size().median()) if len(first_warp) else 0,
        "begin_spread_ns_median": float(spreads.median()) if len(spreads) else None,
        "begin_spread_ns_max": float(spreads.max()) if len(spreads) else None,
        "begin_std_ns_median": float(stds.median()) if len(stds) else None,
    }
    if not all(barrier_ok):
        log("  the grid barrier timed out in some launches: their CTAs were not all resident at once")
    out_rows = {"proton_ik": rows, "clock": clock, "alignment": alignment, "records": int(result.records)}
    try:
        out_rows["proton"] = proton_spin_accuracy(ctx, grid)
    except Exception as error:
        out_rows["proton"] = {"error": repr(error)[:500]}
        log(f"  Proton accuracy FAILED: {error!r}"[:400])
    return out_rows


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


def proton_spin_accuracy(ctx: Context, grid: tuple[int, int, int]) -> list[dict[str, Any]]:
    """The same spins under Proton (default mode), one session per length. Proton converts
    cycles to time at an assumed 1 GHz, so its microseconds x 1000 are its cycles."""
    warps = kernels.MICRO_OPTIONS["num_warps"]
    out = torch.zeros(ctx.num_sms * kernels.MICRO_BLOCK, dtype=torch.int64, device="cuda")
    rows = []
    directory = ctx.scratch / "proton_accuracy"
    directory.mkdir(parents=True, exist_ok=True)
    for n in kernels.SPIN_CYCLES:
        base = directory / f"spin_{n}"
        spin = fresh(kernels.spin_kernel)
        proton.start(str(base), backend="instrumentation", data="trace")
        try:
            spin[grid](out, n, kernels.MICRO_BLOCK, **kernels.MICRO_OPTIONS)
            torch.cuda.synchronize()
        finally:
            proton.finalize()
        spun = out.view(ctx.num_sms, warps, 32)[:, :, 0].double()
        durations = np.array(
            [e["dur"] * 1000.0 for e in proton_trace_events(base) if e.get("name") == "spin"]
        )
        measured = float(np.median(durations)) if len(durations) else float("nan")
        rows.append(
            {
                "target_cycles": n,
                "events": len(durations),
                "spun_median": float(spun.median().item()),
                "measured_median": measured,
                "error_median": measured - float(spun.median().item()),
            }
        )
    return rows


def section_counts(ctx: Context) -> dict[str, Any]:
    """One launch of each suite kernel at its --quick size under a proton_ik session: the records
    per warp in the trace against the exact count the scopes imply."""
    results = {}
    for problem in kernels.suite(True, ctx.num_sms):
        try:
            launch = problem.make_launch()
            fn = fresh(problem.fn)
            ik_session(f"counts_{problem.name}", ctx.scratch / "counts")
            try:
                compiled = fn[launch.grid](*launch.args, **problem.options)
                torch.cuda.synchronize()
            finally:
                result = proton_ik.finalize()
            expected = problem.records_per_warp(compiled.metadata.num_warps)
            measured = np.zeros_like(expected)
            per_warp = result.events.groupby(["cta", "warp"], observed=True).size()
            for (cta, warp), count in per_warp.items():
                measured[int(cta), int(warp)] = 2 * int(count)
            capacity = compiled.metadata.proton_ik["layout"]["capacity"]
            results[problem.name] = {
                "expected_total": int(expected.sum()),
                "trace_total": int(measured.sum()),
                "decoded_records": int(result.records),
                "exact": bool((np.minimum(expected, capacity) == measured).all()),
                "same_multiset": bool(
                    (np.sort(np.minimum(expected, capacity), axis=None) == np.sort(measured, axis=None)).all()
                ),
                "expected_per_warp_max": int(expected.max()),
            }
            log(f"  counts {problem.name}: {results[problem.name]}")
            del launch
        except Exception as error:
            results[problem.name] = {"error": repr(error)[:500]}
            log(f"  counts {problem.name} FAILED: {error!r}"[:400])
            traceback.print_exc()
    return results


def host_loop(fn, args: tuple, grid: tuple[int, int, int], options: dict, launches: int) -> int:
    """Launch ``fn`` up to ``launches`` times, stopping early past the host budget."""
    start = time.perf_counter()
    for i in range(launches):
        fn[grid](*args, **options)
        if i % 50 == 49 and time.perf_counter() - start > HOST_BUDGET_S:
            return i + 1
    return launches


def timed_session(
    problem: kernels.Problem,
    launch: kernels.Launch,
    launches: int,
    start: Callable[[], Any],
    finalize: Callable[[], Any],
) -> tuple[dict[str, Any], Any]:
    """Wall clock of start, the launch loop (synchronized) and finalize, for a fresh JIT wrapper."""
    fn = fresh(problem.fn)
    began = time.perf_counter()
    start()
    try:
        done = host_loop(fn, launch.args, launch.grid, problem.options, launches)
        torch.cuda.synchronize()
    finally:
        looped = time.perf_counter()
        result = finalize()
    ended = time.perf_counter()
    timing = {
        "launches": done,
        "wall_s": ended - began,
        "loop_s": looped - began,
        "finalize_s": ended - looped,
        "per_launch_ms": 1e3 * (ended - began) / done,
    }
    return timing, result


def section_buffers(ctx: Context) -> dict[str, Any]:
    """Buffers sized from the code (issue 7): benchmarks/buffers.py."""
    settings = buffers.Settings(ctx.args.quick, ctx.num_sms, ctx.scratch / "buffers", ctx.rounds, log)
    return buffers.measure(settings)


def section_breakdown(ctx: Context) -> dict[str, Any]:
    """Where one record's cycles go: benchmarks/record_variants.py, each variant of the emitted
    PTX in a process of its own."""
    from benchmarks import record_variants

    return record_variants.measure_all()


def section_host(ctx: Context) -> dict[str, Any]:
    """1000 launches of a short kernel, unprofiled, under proton_ik and under Proton, wall clock
    from start to finalize (trace written); trace bytes and finalize cost per million."""
    launches = 100 if ctx.args.quick else HOST_LAUNCHES
    problem = kernels.gelu(HOST_ELEMENTS)
    launch = problem.make_launch()
    events_per_launch = int(problem.records_per_warp(problem.options["num_warps"]).sum()) // 2
    directory = ctx.scratch / "host"
    (directory / "proton").mkdir(parents=True, exist_ok=True)

    def ik_start(name: str) -> Callable[[], Any]:
        return lambda: ik_session(name, directory / name)

    def proton_start(name: str) -> Callable[[], Any]:
        return lambda: proton.start(str(directory / "proton" / name), backend="instrumentation", data="trace")

    # Warm Triton's disk cache for all three with one launch each, so that no timed loop compiles.
    timed_session(problem, launch, 1, lambda: None, lambda: None)
    timed_session(problem, launch, 1, ik_start("warm"), proton_ik.finalize)
    timed_session(problem, launch, 1, proton_start("warm"), proton.finalize)

    results: dict[str, Any] = {"launches": launches, "events_per_launch": events_per_launch}
    plain, _ = timed_session(problem, launch, launches, lambda: None, lambda: None)
    results["plain"] = plain
    log(f"  host unprofiled: {plain['wall_s']:.3f}s for {plain['launches']} launches")

    def versus_plain(timing: dict[str, Any]) -> float:
        return timing["per_launch_ms"] / plain["per_launch_ms"]

    try:
        timing, result = timed_session(problem, launch, launches, ik_start("host"), proton_ik.finalize)
        events = len(result.events)
        sizes = {k: Path(v).stat().st_size for k, v in result.paths.items() if Path(v).is_file()}
        results["proton_ik"] = {
            **timing,
            "ratio_vs_plain": versus_plain(timing),
            "events": events,
            "records": int(result.records),
            "trace_bytes": sizes,
            "bytes_per_million_events": {k: b / (events / 1e6) for k, b in sizes.items()} if events else {},
            "finalize_s_reported": float(result.finalize_seconds),
            "finalize_s_per_million_records": timing["finalize_s"] / (result.records / 1e6)
            if result.records
            else None,
        }
        log(f"  host proton_ik: {timing}, {events} events, files {sizes}")
    except Exception as error:
        results["proton_ik"] = {"error": repr(error)[:500]}
        log(f"  host proton_ik FAILED: {error!r}"[:400])
        traceback.print_exc()

    try:
        timing, _ = timed_session(problem, launch, launches, proton_start("host"), proton.finalize)
        trace = sorted((directory / "proton").glob("host*.chrome_trace"))
        size = trace[-1].stat().st_size if trace else 0
        events = len(proton_trace_events(directory / "proton" / "host"))
        results["proton"] = {
            **timing,
            "ratio_vs_plain": versus_plain(timing),
            "events": events,
            "trace_bytes": {"chrome_trace": size},
            "bytes_per_million_events": {"chrome_trace": size / (events / 1e6)} if events else {},
            "finalize_s_per_million_records": timing["finalize_s"] / (2 * events / 1e6) if events else None,
            "note": "Proton synchronizes, copies and parses after every launch (in loop_s); finalize only writes",
        }
        log(f"  host Proton: {timing}, {events} events, trace {size} bytes")
    except Exception as error:
        results["proton"] = {"error": repr(error)[:500]}
        log(f"  host Proton FAILED: {error!r}"[:400])
        traceback.print_exc()
    return results


# --- report ------------------------------------------------------------------------------------


def environment(num_sms: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    return {
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


def fmt(value: Any, spec: str | None = None) -> str:
    """A number for the report: ints with separators, floats to ``spec`` (default .1f)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and spec is None:
        return f"{value:,}"
    return format(value, spec or ".1f") if isinstance(value, (int, float)) else str(value)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def overhead_table(results: dict[str, Any], variants: list[Variant]) -> list[str]:
    overhead = results.get("overhead", {})
    kernels_ = overhead.get("kernels", {})
    labels = [v.label for v in variants[1:]]
    ik_labels = [v.label for v in variants if v.profiler == "proton_ik"]
    header = ["kernel", "plain ms (spread)"] + [f"{label} %" for label in labels]
    header += [f"{label} vs best Proton %" for label in ik_labels] + ["records/warp (mean)"]
    rows = []
    for name, entry in kernels_.items():
        timing = entry.get("timing", {})
        plain = timing.get("plain")
        row = [name, f"{fmt(plain['median_ms'], '.4f')} ({fmt(plain['spread_pct'])}%)" if plain else "-"]
        for label in labels:
            value = entry.get("overhead_pct", {}).get(label)
            spread = timing.get(label, {}).get("spread_pct")
            row.append(f"{fmt(value, '+.1f')} ({fmt(spread)}%)" if value is not None else "FAIL")
        row += [
            fmt(entry.get("overhead_pct", {}).get(f"{label} vs best proton"), "+.1f") for label in ik_labels
        ]
        row.append(fmt(entry.get("records_per_warp", {}).get("mean")))
        rows.append(row)
    summary = overhead.get("summary", {})
    row = ["**geomean**", ""] + [
        fmt(summary.get(label, {}).get("geomean_overhead_pct"), "+.1f") for label in labels
    ]
    row += [fmt(summary.get(f"{label} vs best proton", {}).get("geomean_pct"), "+.1f") for label in ik_labels]
    rows.append([*row, ""])
    return table(header, rows)


def markdown(results: dict[str, Any], variants: list[Variant]) -> str:
    env = results["environment"]
    lines = [
        "# proton_ik benchmark",
        "",
        f"- Device: {env['device']} ({env['sms']} SMs, sm_{env['capability'].replace('.', '')}), "
        f"driver {env['driver']}, max SM clock {env['max_sm_clock_mhz']}",
        f"- triton {env['triton']}, torch {env['torch']} (CUDA {env['cuda']}), python {env['python']}",
        f"- Date: {env['date_utc']}; run took {fmt(results.get('wall_s'), '.0f')} s"
        + ("; **--quick sizes**" if results["quick"] else ""),
        f"- Command: `{results['command']}`",
        f"- proton_ik modes: {', '.join(v.mode for v in variants if v.profiler == 'proton_ik')}; "
        f"Proton modes: {', '.join(v.mode for v in variants if v.profiler == 'proton')}",
        "",
        "Method: ../shared/BENCHMARKING.md. Every variant compiles from the same source "
        "(benchmarks/kernels.py, scopes from benchmarks/scopes.py) before any timing; device time "
        "comes from direct launches with hooks set to None, "
        f"{results.get('overhead', {}).get('rounds', '-')} interleaved rounds of "
        "`triton.testing.do_bench(return_mode='median')`; we report the median of the round medians "
        "and, in parentheses, the spread (max - min) / median of the rounds.",
        "",
        *targets.markdown(results),
        "",
    ]
    kernels_ = results.get("overhead", {}).get("kernels", {})
    if kernels_:
        lines += ["## Suite: scopes and records per warp per launch", ""]
        rows = []
        for name, e in kernels_.items():
            if "records_per_warp" not in e:
                continue
            r = e["records_per_warp"]
            rows.append(
                [
                    name,
                    e["kind"],
                    e["size"],
                    e["scopes"],
                    f"{e['grid']} x {e['warps_per_cta']} warps",
                    f"{r['min']} / {fmt(r['mean'])} / {r['max']}",
                    f"{e['records_per_launch']:,}",
                ]
            )
        lines += table(
            ["kernel", "type", "size", "scopes", "grid", "records/warp min/mean/max", "records/launch"], rows
        )
        capacity = DEFAULT_RING_CAPACITY
        over = [
            name for name, e in kernels_.items() if e.get("records_per_warp", {}).get("max", 0) > capacity
        ]
        if over:
            lines += [
                "",
                f"In {', '.join(over)}, some warps write more than {capacity} records per launch, more than "
                f"the ring of {capacity} entries that capacity=auto gives a kernel whose records its code "
                "does not bound may hold when their scopes do not pair: the ring keeps the newest ones, "
                "and the trace counts the rest as overwritten.",
            ]
        lines += ["", "## Kernel overhead (instrumented / plain - 1)", ""]
        lines += overhead_table(results, variants)
        bad = [
            f"{name} [{label}]: {check['error']}"
            for name, e in kernels_.items()
            for label, check in e.get("numerics", {}).items()
            if check["error"]
        ]
        errors = [
            f"{name} [{label}]: {msg}" for name, e in kernels_.items() for label, msg in e["errors"].items()
        ]
        not_bitwise = [
            f"{name} [{label}] (max abs diff {check['max_abs_diff_vs_plain']:.3g})"
            for name, e in kernels_.items()
            for label, check in e.get("numerics", {}).items()
            if label != "plain" and not check.get("bitwise_equal_to_plain", True)
        ]
        lines += ["", "Numerics: every variant checked against torch and against the plain kernel."]
        lines += [f"- wrong output: {b}" for b in bad] + [f"- failed: {e}" for e in errors]
        lines += [f"- not bitwise equal to plain (within tolerance): {b}" for b in not_bitwise]
        if not (bad or errors or not_bitwise):
            lines.append("- all outputs correct and bitwise equal to the plain kernel's.")
    record = results.get("record", {})
    if record.get("variants"):
        lines += [
            "",
            "## Per-record cost",
            "",
            f"Empty scopes in a loop (unrolled x{kernels.RECORD_COST_UNROLL}), grid {record['grid']}, "
            f"{record['warps_per_cta']} warps. Clock: each warp's own %clock64 around the loop; device: "
            f"do_bench time x nvidia-smi clock ({fmt(record.get('smi_mhz_used'), '.0f')} MHz).",
            "",
        ]
        rows = []
        for label, by_n in record["variants"].items():
            for n, row in by_n.items():
                if n == "0":
                    continue
                rows.append(
                    [
                        label,
                        n,
                        str(row["records_per_warp"]),
                        fmt(row.get("cycles_per_record")),
                        fmt(row.get("device_ns_per_record"), ".2f"),
                        fmt(row.get("device_cycles_per_record")),
                    ]
                )
        lines += table(
            [
                "variant",
                "L",
                "records/warp",
                "cycles/record (clock)",
                "ns/record (device)",
                "cycles/record (device)",
            ],
            rows,
        )
    accuracy = results.get("accuracy", {})
    if accuracy.get("proton_ik"):
        lines += [
            "",
            "## Accuracy: a scope around a %clock64 spin",
            "",
            "Error = scope duration in the trace - cycles the spin really took (read inside the spin).",
            "",
        ]
        proton_rows = (
            {r["target_cycles"]: r for r in accuracy.get("proton", []) if isinstance(r, dict)}
            if isinstance(accuracy.get("proton"), list)
            else {}
        )
        header = ["N", "spun (median)", "ours (median)", "ours error (median)", "ours error p5..p95"]
        header += ["ours abs(error)/spun %", "events / expected", "Proton (us x 1000)", "Proton error"]
        rows = []
        for r in accuracy["proton_ik"]:
            p = proton_rows.get(r["target_cycles"], {})
            rows.append(
                [
                    str(r["target_cycles"]),
                    fmt(r["spun_median"], ".0f"),
                    fmt(r["measured_median"], ".0f"),
                    fmt(r["error_median"], "+.0f"),
                    f"{fmt(r['error_p05'], '+.0f')} .. {fmt(r['error_p95'], '+.0f')}",
                    fmt(r["relative_error_median_pct"], ".2f"),
                    f"{r['events']} / {r['events_expected']}",
                    fmt(p.get("measured_median"), ".0f"),
                    fmt(p.get("error_median"), "+.0f"),
                ]
            )
        lines += table(header, rows)
        problems = [f"N={r['target_cycles']}: {p}" for r in accuracy["proton_ik"] for p in r["problems"]]
        lines += [
            "",
            "Proton converts cycles at an assumed 1 GHz, so its microseconds x 1000 are its cycles.",
        ]
        lines += [f"- trace problem: {p}" for p in problems]
        clock, align = accuracy["clock"], accuracy["alignment"]
        lines += [
            "",
            f"- SM clock inferred from our trace: {fmt(clock['inferred_mhz'], '.0f')} MHz from the spins of "
            f"10000 cycles or more ({fmt(clock['launch_table_mhz_median'], '.0f')} MHz in the trace's launch "
            f"table for the long spins); nvidia-smi during the long spins: {fmt(clock['smi_mhz_median'], '.0f')} "
            f"MHz ({clock['smi_samples']} samples).",
            f"- Cross-CTA alignment: after a grid barrier over {align['ctas']} CTAs, the begins of one scope "
            f"spread over {fmt(align['begin_spread_ns_median'], '.0f')} ns (median of {align['launches']} "
            f"launches; max {fmt(align['begin_spread_ns_max'], '.0f')} ns; std "
            f"{fmt(align['begin_std_ns_median'], '.0f')} ns). This bounds our alignment error from above: "
            "it includes the barrier's own release skew.",
        ]
    counts = results.get("counts", {})
    if counts:
        lines += ["", "## Records per warp in our trace against the scope structure (--quick sizes)", ""]
        rows = [
            [
                name,
                fmt(c.get("expected_total")),
                fmt(c.get("trace_total")),
                fmt(c.get("decoded_records")),
                fmt(c.get("exact")),
                fmt(c.get("same_multiset")),
                c.get("error", "")[:120],
            ]
            for name, c in counts.items()
        ]
        lines += table(
            [
                "kernel",
                "expected records",
                "records in events",
                "decoded records",
                "exact per (CTA, warp)",
                "same multiset",
                "error",
            ],
            rows,
        )
    host = results.get("host", {})
    if host.get("plain"):
        lines += [
            "",
            "## Host side",
            "",
            f"A short kernel (GELU, {HOST_ELEMENTS:,} elements, {host['events_per_launch']} scope events per "
            "launch) launched in a loop, wall clock from start to finalize, trace written.",
            "",
        ]
        header = ["profiler", "launches", "wall s", "loop s", "finalize s", "ms/launch", "x plain", "events"]
        header += ["trace bytes per million events", "finalize s per million records", "error"]
        rows = []
        for label in ("plain", "proton_ik", "proton"):
            h = host.get(label, {})
            per_m = h.get("bytes_per_million_events", {})
            rows.append(
                [
                    label,
                    fmt(h.get("launches")),
                    fmt(h.get("wall_s"), ".3f"),
                    fmt(h.get("loop_s"), ".3f"),
                    fmt(h.get("finalize_s"), ".3f"),
                    fmt(h.get("per_launch_ms"), ".3f"),
                    fmt(h.get("ratio_vs_plain"), ".1f"),
                    fmt(h.get("events")),
                    ", ".join(f"{k}: {v / 1e6:.1f} MB" for k, v in per_m.items()) or "-",
                    fmt(h.get("finalize_s_per_million_records"), ".2f"),
                    h.get("error", "")[:100],
                ]
            )
        lines += table(header, rows)
        lines += [
            "",
            "loop s: start, the launches and a synchronize; finalize s: finalize with the traces written. "
            "Proton synchronizes, copies and parses after every launch, inside the loop. Ours writes the "
            "session file (.pik) and both traces (.pftrace, .json); bytes per million events for each.",
        ]
    breakdown = results.get("breakdown", {})
    if breakdown and "error" not in breakdown:
        lines += [
            "",
            "## Where one record's cycles go",
            "",
            "`benchmarks/record_variants.py`: each variant changes one thing in the PTX emitted for single "
            "records, in a loop of empty scopes (132 CTAs x 4 warps); cycles per record from the warps' "
            "own clocks. See docs/PERFORMANCE.md.",
            "",
        ]
        lines += table(
            ["variant", "cycles/record"],
            [
                [
                    name,
                    fmt(r.get("cycles_per_record"), ".1f")
                    if "error" not in r
                    else f"failed: {r['error'][:80]}",
                ]
                for name, r in breakdown.items()
            ],
        )
    lines += buffers.markdown(results.get("buffers", {}))
    failed = {name: r["error"] for name, r in results.items() if isinstance(r, dict) and "error" in r}
    if failed:
        lines += ["", "## Sections that failed", ""] + [f"- {name}: {e}" for name, e in failed.items()]
    return "\n".join(lines) + "\n"


def final_table(results: dict[str, Any], variants: list[Variant]) -> str:
    lines = [
        "",
        "=" * 100,
        f"proton_ik benchmark on {results['environment']['device']} "
        f"({results['environment']['date_utc']}{', --quick' if results['quick'] else ''})",
        "",
    ]
    if results.get("overhead", {}).get("kernels"):
        lines += overhead_table(results, variants)
    record = results.get("record", {}).get("variants", {})
    last = str(kernels.RECORD_COST_ITERS[-1])
    if record:
        lines += [
            "",
            "per-record cost (cycles, clock, L="
            + last
            + "): "
            + ", ".join(
                f"{label} {fmt(rows.get(last, {}).get('cycles_per_record'))}"
                for label, rows in record.items()
            ),
        ]
    accuracy = results.get("accuracy", {})
    if accuracy.get("proton_ik"):
        lines.append(
            "accuracy (ours, median error cycles by N): "
            + ", ".join(
                f"{r['target_cycles']}: {fmt(r['error_median'], '+.0f')}" for r in accuracy["proton_ik"]
            )
        )
        lines.append(
            f"SM clock: trace {fmt(accuracy['clock']['inferred_mhz'], '.0f')} MHz vs nvidia-smi "
            f"{fmt(accuracy['clock']['smi_mhz_median'], '.0f')} MHz; cross-CTA begin spread "
            f"{fmt(accuracy['alignment']['begin_spread_ns_median'], '.0f')} ns"
        )
    host = results.get("host", {})
    for label in ("proton_ik", "proton"):
        h = host.get(label, {})
        if "wall_s" in h:
            lines.append(
                f"host {label}: {fmt(h['ratio_vs_plain'], '.1f')}x plain over {h['launches']} launches; "
                f"trace bytes/M events {', '.join(f'{k} {v / 1e6:.1f} MB' for k, v in h['bytes_per_million_events'].items())}; "
                f"finalize {fmt(h['finalize_s_per_million_records'], '.2f')} s/M records"
            )
    lines += buffers.summary_lines(results.get("buffers", {}))
    failed = [name for name, r in results.items() if isinstance(r, dict) and "error" in r]
    if failed:
        lines.append(f"FAILED sections: {', '.join(failed)} (see above)")
    return "\n".join(lines)


def public_command() -> str:
    """The command line, with the output folder (a path on the machine that ran it) left out."""
    words = [Path(sys.executable).name, *sys.argv]
    hidden = {"--out", "--benchmarks-md"}
    return " ".join("PATH" if i > 0 and words[i - 1] in hidden else word for i, word in enumerate(words))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes and 2 rounds: a smoke test")
    parser.add_argument(
        "--only", action="append", default=[], help=f"comma list of sections: {', '.join(SECTIONS)}"
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="where results go")
    parser.add_argument("--ik-mode", action="append", default=[], help="another proton_ik mode to time")
    parser.add_argument("--proton-mode", action="append", default=[], help="another Proton mode to time")
    parser.add_argument("--rounds", type=int, default=0, help="interleaved rounds (default 7, --quick 2)")
    parser.add_argument(
        "--reuse-cache",
        action="store_true",
        help="use Triton's usual cache; by default a fresh one, so no stale instrumented binary",
    )
    parser.add_argument(
        "--benchmarks-md", default="", help="also write the report here (the repository's BENCHMARKS.md)"
    )
    parser.add_argument("--keep-traces", action="store_true", help="keep the traces and session files")
    args = parser.parse_args()
    args.sections = [s for item in args.only for s in item.split(",") if s] or list(SECTIONS)
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    return args


def main() -> int:
    args = parse_args()
    if not torch.cuda.is_available():
        print(
            "run.py needs a CUDA GPU; on a machine without one, run benchmarks/compile_check.py", flush=True
        )
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="pik_bench_"))
    if not args.reuse_cache:
        triton.knobs.cache.dir = str(scratch / "triton_cache")
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    ctx = Context(
        args, num_sms, make_variants(args.ik_mode, args.proton_mode), ScratchPool(), ClockSampler(), scratch
    )
    ctx.results = {
        "environment": environment(num_sms),
        "quick": args.quick,
        "command": public_command(),
        "variants": [v.__dict__ for v in ctx.variants],
    }
    log(f"{ctx.results['environment']['device']}, {num_sms} SMs; sections {args.sections}; scratch {scratch}")
    ctx.clock.start()
    sections = {
        "overhead": section_overhead,
        "record": section_record_cost,
        "breakdown": section_breakdown,
        "accuracy": section_accuracy,
        "counts": section_counts,
        "host": section_host,
        "buffers": section_buffers,
    }
    try:
        for name in args.sections:
            log(f"section {name} ({ctx.elapsed()})")
            try:
                ctx.results[name] = sections[name](ctx)
            except Exception as error:
                traceback.print_exc()
                ctx.results[name] = {"error": f"{error!r}"[:1000]}
                log(f"section {name} FAILED: {error!r}"[:400])
            finally:
                # A failure inside a section can leave a profiler active; nothing after should see it.
                triton_hook.uninstall()
                ctx.pool.clear()
    finally:
        ctx.clock.stop()
        ctx.results["wall_s"] = time.perf_counter() - ctx.started
        ctx.results["smi_mhz_all_samples_median"] = (
            float(np.median([mhz for _, mhz in ctx.clock.samples])) if ctx.clock.samples else None
        )
        (out_dir / "results.json").write_text(json.dumps(ctx.results, indent=2, default=str))
        report = markdown(ctx.results, ctx.variants)
        (out_dir / "results.md").write_text(report)
        if args.benchmarks_md:
            Path(args.benchmarks_md).write_text(report)
        if not args.keep_traces:
            shutil.rmtree(scratch, ignore_errors=True)
        log(f"wrote {out_dir / 'results.json'} and {out_dir / 'results.md'}")
        print(final_table(ctx.results, ctx.variants), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
