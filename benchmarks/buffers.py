"""Buffers sized from the code (issue 7): what the default mode records, and what it costs.

    python benchmarks/run.py --only buffers [--quick]

Six measurements, each a function that returns plain data for results.json (``measure`` runs
them all; a failure in one is recorded and the others go on):

1. ``default_mode``: ``proton_ik.start`` with no options and one launch of every suite kernel
   and of ``four_scopes`` (16384 CTAs x 8 warps, four straight-line scopes): the capacity the
   compiler chose, the records in the trace against the count the scopes give, the outputs.
2. ``device_bytes``: from those launches, for the kernels whose bound is known, the device
   bytes a launch takes against the headers and entries it wrote.
3. ``host_per_launch``: a loop of launches of ``short_add``, each followed by a synchronize,
   plain, under proton_ik and under Triton's Proton, in interleaved rounds: microseconds added.
4. ``end_to_end``: 100 launches of ``four_scopes`` with the hooks on, one synchronize at the
   end, against plain launches and against a pinned copy of the bytes the launches wrote.
5. ``finalize_rate``: records per second of ``proton_ik.finalize()`` for a session of about
   26M records (.pik and .pftrace).
6. ``graph_replays`` and ``autotune_choice``: a CUDA graph replayed 10 times, and an autotuned
   kernel, each checked against what should have been recorded.

The targets are judged in ``targets.py`` from these numbers; ``markdown`` writes the tables.
Private runtime state is read in one place, ``IkRun``: the drains' ``copied_bytes`` counters
and their ``flush``.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import triton
import triton.profiler as proton
from triton.experimental import gluon
from triton.experimental.gluon._runtime import GluonJITFunction

import proton_ik
from benchmarks import kernels
from proton_ik.contract.layout import CTA_HEADER_BYTES, ENTRY_BYTES, UNIT_HEADER_BYTES

HOST_VARIANTS = ("plain", "proton_ik", "proton")
PROTON_MODE = "default"  # Triton Proton's instrumentation mode: its shared-memory buffer
PROTON_DATA = "tree"  # Proton's default; "trace" takes tens of seconds per finalize here
LOOP_BUDGET_S = 60.0  # a timed loop stops early past this; the results say how far it got
STEP_BUDGET_S = 90.0  # a step starts no round that would likely end later: the whole run fits 10 minutes
GRAPH_REPLAYS = 10
AUTOTUNE_CALLS = 3


@dataclass(frozen=True)
class Settings:
    quick: bool
    num_sms: int
    scratch: Path  # session files and traces; removed as soon as a measurement is done with them
    rounds: int  # interleaved rounds of the host-side loop
    log: Callable[[str], None] = print

    @property
    def host_launches(self) -> int:
        return 100 if self.quick else 1000

    @property
    def e2e_launches(self) -> int:
        return 10 if self.quick else 100

    @property
    def e2e_rounds(self) -> int:
        # Every profiled round ends in a finalize of e2e_launches x 1M records (not timed).
        return 2 if self.quick else 3

    @property
    def finalize_launches(self) -> int:
        return 5 if self.quick else 25

    @property
    def autotune_elements(self) -> int:
        return 1 << (22 if self.quick else 24)


def measure(settings: Settings) -> dict[str, Any]:
    """Every measurement, in order; each failure is recorded as {"error": ...}."""
    steps: dict[str, Callable[[Settings], dict[str, Any]]] = {
        "default_mode": default_mode,
        "host": host_per_launch,
        "end_to_end": end_to_end,
        "finalize": finalize_rate,
        "graph": graph_replays,
        "autotune": autotune_choice,
    }
    results: dict[str, Any] = {
        "default_mode_string": str(proton_ik.Mode()),
        "pool_bytes": proton_ik.DEFAULT_POOL_BYTES,
        "quick": settings.quick,
    }
    for name, step in steps.items():
        settings.log(f"  buffers: {name}")
        try:
            results[name] = step(settings)
        except Exception as error:
            traceback.print_exc()
            results[name] = {"error": f"{error!r}"[:1000]}
            settings.log(f"  buffers: {name} FAILED: {error!r}"[:400])
        finally:
            _end_leftover_session()
            with contextlib.suppress(Exception):  # after a device fault the next step reports it
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        if name == "default_mode":
            results["device_bytes"] = device_bytes(results["default_mode"])
    return results


# --- sessions ----------------------------------------------------------------------------------


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


def _end_leftover_session() -> None:
    """A measurement that failed between start and finalize must not leave a session running."""
    if proton_ik._session is not None:  # private: the module's running session
        with contextlib.suppress(Exception):
            proton_ik.finalize()


def fresh(fn: Any) -> Any:
    """A new JIT wrapper of the same source: it loads anew, so a session started now sees the
    kernel load (as run.fresh)."""
    if isinstance(fn, GluonJITFunction):
        return gluon.jit(fn.fn)
    return triton.jit(fn.fn, do_not_specialize=fn.do_not_specialize)


def launch_table(run: IkRun) -> pd.DataFrame:
    """The session's launch table (one row per launch), in launch order."""
    trace = run.result.trace
    if trace is None:
        raise RuntimeError("the session recorded no launch")
    return trace.launches.sort_values("launch").reset_index(drop=True)


def output_error(launch: kernels.Launch, tolerance: tuple[float, float]) -> str:
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


def out_of_budget(began: float, rounds_done: int, minimum: int) -> bool:
    """Whether one more round, as long as the rounds so far on average, would end past
    STEP_BUDGET_S (never before ``minimum`` rounds are done). The results say how many ran."""
    if rounds_done < minimum:
        return False
    elapsed = time.perf_counter() - began
    return elapsed + elapsed / rounds_done > STEP_BUDGET_S


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")


def _spread_pct(values: list[float]) -> float:
    median = _median(values)
    return 100.0 * (max(values) - min(values)) / median if values and median else float("nan")


def _rounds(values: list[float]) -> dict[str, Any]:
    return {"median": _median(values), "rounds": values, "spread_pct": _spread_pct(values)}


# --- 1. the default mode on every kernel ----------------------------------------------------------


def default_mode(settings: Settings) -> dict[str, Any]:
    """One launch of each suite kernel and of four_scopes, each in a session of its own."""
    problems = [*kernels.suite(settings.quick, settings.num_sms), kernels.four_scopes()]
    found: dict[str, Any] = {}
    for problem in problems:
        directory = settings.scratch / "default_mode" / problem.name
        try:
            found[problem.name] = profile_once(problem, directory)
        except Exception as error:
            traceback.print_exc()
            found[problem.name] = {"worked": False, "error": f"{error!r}"[:500]}
        finally:
            _end_leftover_session()
            shutil.rmtree(directory, ignore_errors=True)
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
        entry = found[problem.name]
        settings.log(
            f"  default mode {problem.name}: worked={entry['worked']} "
            f"capacity={entry.get('capacity')} records={entry.get('records')}/{entry.get('records_expected')}"
        )
    return {"kernels": found}


def profile_once(problem: kernels.Problem, directory: Path) -> dict[str, Any]:
    """``problem`` launched once under ``proton_ik.start`` with no options."""
    launch = problem.make_launch()
    fn = fresh(problem.fn)
    with ik_session(problem.name, directory) as run:
        compiled = fn[launch.grid](*launch.args, **problem.options)
        torch.cuda.synchronize()
    profile = getattr(compiled.metadata, "proton_ik", None)
    if not profile:
        raise RuntimeError("compiled without proton_ik metadata: the default mode did not instrument it")
    table = launch_table(run)
    row = table.iloc[0]
    ctas = math.prod(launch.grid)
    entry: dict[str, Any] = {
        "grid": list(launch.grid),
        "warps": int(compiled.metadata.num_warps),
        "ctas": ctas,
        "capacity": dict(profile.get("capacity") or {}),
        "layout": dict(profile["layout"]),
        "launches_in_trace": len(table),
        "records": int(row["records"]),
        "records_expected": int(problem.records_per_warp(compiled.metadata.num_warps).sum()),
        "overwritten": int(row["overwritten"]),
        "events": int(row["events"]),
        "problems": _problems(row["problems"])[:3],
        "device_bytes": ctas * int(profile["layout"]["cta_bytes"]),
        "copied_bytes": run.copied_bytes(),
        "entries_in_table": int(row["entries"]) if "entries" in table.columns else None,
        "files": sorted(run.result.paths),
        "output_error": output_error(launch, problem.tolerance),
    }
    entry["exact"] = entry["launches_in_trace"] == 1 and entry["records"] == entry["records_expected"]
    entry["worked"] = entry["exact"] and not entry["output_error"]
    return entry


def _problems(value: Any) -> list[str]:
    if isinstance(value, str):
        return [p for p in value.split("; ") if p]
    return [str(p) for p in value]


# --- 2. device bytes against what was written ------------------------------------------------------


def device_bytes(default: dict[str, Any]) -> dict[str, Any]:
    """For each kernel of ``default_mode`` whose bound is known: bytes = CTAs x cta_bytes against
    written = CTAs x 64 + units x 48 + entries x 16."""
    rows: dict[str, Any] = {}
    for name, kernel in default.get("kernels", {}).items():
        capacity = kernel.get("capacity") or {}
        if capacity.get("source") != "bound" or "layout" not in kernel:
            continue
        units = kernel["ctas"] * int(kernel["layout"]["units"])
        entries, source = entries_written(kernel, capacity.get("bound"), units)
        written = kernel["ctas"] * CTA_HEADER_BYTES + units * UNIT_HEADER_BYTES + entries * ENTRY_BYTES
        rows[name] = {
            "bytes": kernel["device_bytes"],
            "written": written,
            "ratio": kernel["device_bytes"] / written,
            "entries": entries,
            "entries_source": source,
            "units": units,
            "entries_per_unit": entries / units,
            "capacity_entries": int(kernel["layout"]["capacity"]),
            "bound": capacity.get("bound"),
            "copied_bytes": kernel["copied_bytes"],
        }
    return {"kernels": rows}


def entries_written(kernel: dict[str, Any], bound: int | None, units: int) -> tuple[int, str]:
    """Entries the launch wrote, and where the number comes from. A pair entry holds 2 records,
    a single 1: records / 2 is exact when every entry is a pair, and a lower bound otherwise."""
    if kernel.get("entries_in_table") is not None:
        return int(kernel["entries_in_table"]), "the launch table's entries column"
    records = int(kernel["records"])
    if bound is not None and records == 2 * int(bound) * units:
        return records // 2, "records / 2 (records = 2 x bound x units: every entry is a pair)"
    return -(-records // 2), "records / 2 (the fewest entries that hold them: the ratio is an upper bound)"


# --- 3. host time added per launch -----------------------------------------------------------------


def host_per_launch(settings: Settings) -> dict[str, Any]:
    """short_add launched and synchronized in a loop: plain, proton_ik and Proton, each round
    in a session of its own (start, the first launch and finalize not timed)."""
    problem = kernels.short_add()
    launch = problem.make_launch()
    per_round: dict[str, list[dict[str, Any]]] = {variant: [] for variant in HOST_VARIANTS}
    began = time.perf_counter()
    for index in range(settings.rounds):
        if out_of_budget(began, index, minimum=2):
            settings.log(f"  host: stopped after {index} rounds ({STEP_BUDGET_S:.0f} s budget)")
            break
        for variant in HOST_VARIANTS:
            per_round[variant].append(_host_round_or_error(variant, problem, launch, settings, index))
        settings.log(
            f"  host round {index + 1}: "
            + "  ".join(f"{v}={_fmt(per_round[v][-1].get('us_per_launch'))}us" for v in HOST_VARIANTS)
        )
    return summarize_host(problem, per_round, settings.host_launches)


def _host_round_or_error(
    variant: str, problem: kernels.Problem, launch: kernels.Launch, settings: Settings, index: int
) -> dict[str, Any]:
    """One round of one variant; a failure is kept as {"error": ...} and the others go on."""
    directory = settings.scratch / "host" / f"{variant}_{index}"
    try:
        return host_round(variant, problem, launch, settings.host_launches, directory)
    except Exception as error:
        traceback.print_exc()
        _end_leftover_session()
        return {"error": f"{error!r}"[:500]}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def host_round(
    variant: str, problem: kernels.Problem, launch: kernels.Launch, launches: int, directory: Path
) -> dict[str, Any]:
    """One timed loop of ``variant``, after one untimed launch that compiles or loads the kernel."""
    fn = fresh(problem.fn)
    with _variant_session(variant, directory) as run:
        compiled = fn[launch.grid](*launch.args, **problem.options)
        torch.cuda.synchronize()
        _check_instrumented(variant, compiled)
        copied = 0 if run is None else run.copied_bytes()
        done, seconds = synced_loop(fn, launch, problem.options, launches)
        copied = 0 if run is None else run.copied_bytes() - copied
    found: dict[str, Any] = {"launches": done, "loop_s": seconds, "us_per_launch": 1e6 * seconds / done}
    if run is not None:
        found["recorded_launches"] = int(run.result.launches)  # the untimed first launch included
        found["copied_bytes_in_loop"] = copied
        found["finalize_s"] = run.finalize_s
    return found


@contextlib.contextmanager
def _variant_session(variant: str, directory: Path) -> Iterator[IkRun | None]:
    if variant == "proton_ik":
        with ik_session("host", directory) as run:
            yield run
    elif variant == "proton":
        with proton_session(directory):
            yield None
    else:
        yield None


def _check_instrumented(variant: str, compiled: Any) -> None:
    meta = compiled.metadata
    if variant == "proton_ik" and not getattr(meta, "proton_ik", None):
        raise RuntimeError("proton_ik: the kernel compiled without proton_ik metadata")
    if variant == "proton" and not meta.profile_scratch_size:
        raise RuntimeError("proton: the kernel compiled without a profile buffer")
    if variant == "plain" and meta.profile_scratch_size:
        raise RuntimeError("plain: the kernel compiled with a profile buffer; a profiler was left active")


def synced_loop(fn: Any, launch: kernels.Launch, options: dict, launches: int) -> tuple[int, float]:
    """(launches made, seconds): each launch followed by torch.cuda.synchronize()."""
    kernel, args = fn[launch.grid], launch.args
    start = time.perf_counter()
    for index in range(launches):
        kernel(*args, **options)
        torch.cuda.synchronize()
        if index % 64 == 63 and time.perf_counter() - start > LOOP_BUDGET_S:
            return index + 1, time.perf_counter() - start
    return launches, time.perf_counter() - start


def summarize_host(
    problem: kernels.Problem, per_round: dict[str, list[dict[str, Any]]], launches: int
) -> dict[str, Any]:
    """Medians over rounds; added = median over rounds of (variant - plain) in the same round."""
    us = {v: [r["us_per_launch"] for r in rounds if "error" not in r] for v, rounds in per_round.items()}
    added: dict[str, float | None] = {}
    for variant in HOST_VARIANTS[1:]:
        pairs = zip(per_round[variant], per_round["plain"], strict=True)
        diffs = [
            v["us_per_launch"] - p["us_per_launch"] for v, p in pairs if "error" not in v and "error" not in p
        ]
        added[variant] = _median(diffs) if diffs else None
    ik = [r for r in per_round["proton_ik"] if "error" not in r]
    return {
        "kernel": problem.name,
        "size": problem.size,
        "records_per_launch": int(problem.records_per_warp(problem.options["num_warps"]).sum()),
        "launches": launches,
        "launches_done": {v: [r.get("launches", 0) for r in rounds] for v, rounds in per_round.items()},
        "errors": {v: [r["error"] for r in rounds if "error" in r][:2] for v, rounds in per_round.items()},
        "rounds": len(per_round["plain"]),
        "us_per_launch": {variant: _rounds(values) for variant, values in us.items()},
        "added_us": added,
        "proton_ik_recorded_launches": [r["recorded_launches"] for r in ik],
        "proton_ik_copied_bytes_in_loop": [r["copied_bytes_in_loop"] for r in ik],
        "proton_ik_finalize_s": [r["finalize_s"] for r in ik],
        "proton": {"mode": PROTON_MODE, "data": PROTON_DATA},
    }


# --- 4. end to end on the large grid ---------------------------------------------------------------


def end_to_end(settings: Settings) -> dict[str, Any]:
    """Rounds of: plain launches, profiled launches (hooks on), a pinned copy of the bytes the
    profiled launches wrote. No synchronize inside the loops; one at the end."""
    problem = kernels.four_scopes()
    launch = problem.make_launch()
    n = settings.e2e_launches
    rounds: list[dict[str, Any]] = []
    began = time.perf_counter()
    for index in range(settings.e2e_rounds):
        if out_of_budget(began, index, minimum=1):
            settings.log(f"  end to end: stopped after {index} rounds ({STEP_BUDGET_S:.0f} s budget)")
            break
        plain_ms = plain_loop_ms(problem, launch, n)
        directory = settings.scratch / "end_to_end" / str(index)
        profiled = profiled_loop(problem, launch, n, directory)
        shutil.rmtree(directory, ignore_errors=True)
        copy = copy_ms(profiled["written_bytes_per_launch"])
        rounds.append({"plain_ms": plain_ms, **profiled, "copy_ms": copy})
        settings.log(
            f"  end to end round {index + 1}: plain {plain_ms:.3f} ms, profiled "
            f"{profiled['flushed_ms']:.3f} ms (loop {profiled['loop_ms']:.3f}), copy {copy:.3f} ms per launch; "
            f"finalize {profiled['finalize_s']:.1f} s"
        )
    return summarize_e2e(problem, rounds, n)


def plain_loop_ms(problem: kernels.Problem, launch: kernels.Launch, launches: int) -> float:
    """Milliseconds per launch of ``launches`` plain launches and one synchronize."""
    fn = fresh(problem.fn)
    compiled = fn[launch.grid](*launch.args, **problem.options)
    torch.cuda.synchronize()
    _check_instrumented("plain", compiled)
    kernel, args = fn[launch.grid], launch.args
    start = time.perf_counter()
    for _ in range(launches):
        kernel(*args, **problem.options)
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - start) / launches


def profiled_loop(
    problem: kernels.Problem, launch: kernels.Launch, launches: int, directory: Path
) -> dict[str, Any]:
    """``launches`` launches under proton_ik and one synchronize (loop_ms), then the drain
    flushed so that every record is on the host (flushed_ms); finalize is not timed."""
    fn = fresh(problem.fn)
    # Only the session file: rendering 100 launches of 1M records each would take minutes a
    # round, and finalize is measured on its own (``finalize_rate``).
    with ik_session("end_to_end", directory, formats=()) as run:
        compiled = fn[launch.grid](*launch.args, **problem.options)
        torch.cuda.synchronize()
        run.flush()  # the untimed first launch leaves the pool empty
        copied = run.copied_bytes()
        kernel, args = fn[launch.grid], launch.args
        start = time.perf_counter()
        for _ in range(launches):
            kernel(*args, **problem.options)
        torch.cuda.synchronize()
        looped = time.perf_counter()
        run.flush()
        flushed = time.perf_counter()
        copied = run.copied_bytes() - copied
    layout = compiled.metadata.proton_ik["layout"]
    ctas = math.prod(launch.grid)
    records = int(problem.records_per_warp(compiled.metadata.num_warps).sum())
    return {
        "loop_ms": 1e3 * (looped - start) / launches,
        "flushed_ms": 1e3 * (flushed - start) / launches,
        "copied_bytes_per_launch": copied / launches,
        # four_scopes writes pair entries only: entries = records / 2
        "written_bytes_per_launch": ctas * CTA_HEADER_BYTES
        + ctas * int(layout["units"]) * UNIT_HEADER_BYTES
        + records // 2 * ENTRY_BYTES,
        "device_bytes_per_launch": ctas * int(layout["cta_bytes"]),
        "launches_recorded": int(run.result.launches),
        "launches_expected": launches + 1,
        "finalize_s": run.finalize_s,
    }


def copy_ms(nbytes: int, repeats: int = 20) -> float:
    """Milliseconds of one device-to-host copy of ``nbytes`` into pinned memory (CUDA events)."""
    source = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    target = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    target.copy_(source, non_blocking=True)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        target.copy_(source, non_blocking=True)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def summarize_e2e(problem: kernels.Problem, rounds: list[dict[str, Any]], launches: int) -> dict[str, Any]:
    def column(key: str) -> list[float]:
        return [float(r[key]) for r in rounds]

    plain, flushed, copy = (
        _median(column("plain_ms")),
        _median(column("flushed_ms")),
        _median(column("copy_ms")),
    )
    written = rounds[0]["written_bytes_per_launch"] if rounds else 0
    copied = _median(column("copied_bytes_per_launch"))
    return {
        "kernel": problem.name,
        "size": problem.size,
        "launches": launches,
        "rounds": len(rounds),
        "per_round": rounds,
        "plain_ms": _rounds(column("plain_ms")),
        "loop_ms": _rounds(column("loop_ms")),
        "flushed_ms": _rounds(column("flushed_ms")),
        "copy_ms": _rounds(column("copy_ms")),
        "written_bytes_per_launch": written,
        "copied_bytes_per_launch": copied,
        "device_bytes_per_launch": rounds[0]["device_bytes_per_launch"] if rounds else 0,
        "copy_gb_per_s": written / copy / 1e6 if copy else float("nan"),
        "drain_gb_per_s": copied / flushed / 1e6 if flushed else float("nan"),
        "x_plain": flushed / plain,
        "x_copy": flushed / copy,
        "loop_x_plain": _median(column("loop_ms")) / plain,
        "launches_exact": all(r["launches_recorded"] == r["launches_expected"] for r in rounds),
    }


# --- 5. finalize -------------------------------------------------------------------------------------


def finalize_rate(settings: Settings) -> dict[str, Any]:
    """finalize of a session of ``finalize_launches`` launches of four_scopes (1,048,576 records
    each). The drain is flushed first and timed apart: flush + finalize is what finalize costs
    when called straight after the launches."""
    problem = kernels.four_scopes()
    launch = problem.make_launch()
    n = settings.finalize_launches
    directory = settings.scratch / "finalize"
    fn = fresh(problem.fn)
    try:
        with ik_session("finalize", directory) as run:
            for _ in range(n):
                fn[launch.grid](*launch.args, **problem.options)
            torch.cuda.synchronize()
            began = time.perf_counter()
            run.flush()
            flush_s = time.perf_counter() - began
        sizes = file_bytes(run.result)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    records = int(run.result.records)
    events = records // 2  # four_scopes: every record is in a matched pair
    return {
        "kernel": problem.name,
        "launches": n,
        "records": records,
        "records_expected": n * int(problem.records_per_warp(problem.options["num_warps"]).sum()),
        "flush_s": flush_s,
        "finalize_s": run.finalize_s,
        "finalize_seconds_reported": float(run.result.finalize_seconds),
        "records_per_s": records / (flush_s + run.finalize_s),
        "formats": sorted(run.result.paths),
        "file_bytes": sizes,
        "bytes_per_event": {kind: size / events for kind, size in sizes.items()} if events else {},
    }


# --- 6. CUDA graphs and autotuning -------------------------------------------------------------------


def graph_replays(settings: Settings) -> dict[str, Any]:
    """One instrumented launch captured in a CUDA graph and replayed GRAPH_REPLAYS times."""
    problem = kernels.short_add()
    launch = problem.make_launch()
    fn = fresh(problem.fn)
    directory = settings.scratch / "graph"
    expected = int(problem.records_per_warp(problem.options["num_warps"]).sum())
    try:
        with ik_session("graph", directory) as run:
            fn[launch.grid](*launch.args, **problem.options)  # compiles and loads outside the capture
            torch.cuda.synchronize()
            for out in launch.outputs:
                out.zero_()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn[launch.grid](*launch.args, **problem.options)
            for _ in range(GRAPH_REPLAYS):
                graph.replay()
            torch.cuda.synchronize()
        table = launch_table(run)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    missing = [column for column in ("graph", "replay") if column not in table.columns]
    replays = table.iloc[0:0] if missing else table[table["graph"].notna()]
    found = {
        "replays_made": GRAPH_REPLAYS,
        "launch_rows": len(table),
        "missing_columns": missing,
        "replay_rows": len(replays),
        "replay_indices": sorted(int(v) for v in replays["replay"]) if not missing else [],
        "records_per_replay": [int(v) for v in replays["records"]],
        "records_expected": expected,
        "overwritten": int(table["overwritten"].sum()),
        "output_error": output_error(launch, problem.tolerance),
    }
    found["exact"] = (
        not missing
        and found["replay_indices"] == list(range(GRAPH_REPLAYS))
        and all(r == expected for r in found["records_per_replay"])
        and found["overwritten"] == 0
        and not found["output_error"]
    )
    return found


def autotune_choice(settings: Settings) -> dict[str, Any]:
    """An autotuned add (two configs far apart in speed), tuned outside a session and inside one."""
    n = settings.autotune_elements
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(n, meta["BLOCK"]),)

    outside = kernels.tuned_add()
    outside[grid](x, y, out, n)
    torch.cuda.synchronize()
    inside = kernels.tuned_add()
    directory = settings.scratch / "autotune"
    try:
        with ik_session("autotune", directory) as run:
            for _ in range(AUTOTUNE_CALLS):
                inside[grid](x, y, out, n)
            torch.cuda.synchronize()
        table = launch_table(run)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    chosen = _config(inside.best_config)
    expected = triton.cdiv(n, chosen["BLOCK"]) * chosen["num_warps"] * 2  # one scope: one pair per warp
    found = {
        "calls": AUTOTUNE_CALLS,
        "config_outside": _config(outside.best_config),
        "config_inside": chosen,
        "timings_outside_ms": _timings(outside),
        "timings_inside_ms": _timings(inside),
        "launch_rows": len(table),
        "records_per_launch": [int(v) for v in table["records"]],
        "records_expected": expected,
        "config_column": [str(v) for v in table["config"]] if "config" in table.columns else None,
        "output_error": "" if torch.equal(out, x + y) else "out != x + y",
    }
    found["same_config"] = found["config_outside"] == chosen
    found["exact"] = (
        found["launch_rows"] == AUTOTUNE_CALLS
        and all(r == expected for r in found["records_per_launch"])
        and not found["output_error"]
    )
    return found


def _config(config: Any) -> dict[str, Any]:
    return {**{str(k): v for k, v in config.kwargs.items()}, "num_warps": int(config.num_warps)}


def _timings(tuner: Any) -> dict[str, float]:
    """Each config's benchmark time (ms, the median do_bench reports), as the autotuner saw it."""
    timings = getattr(tuner, "configs_timings", None) or {}
    return {str(config): float(np.ravel(value)[0]) for config, value in timings.items()}


# --- report ------------------------------------------------------------------------------------------


def _fmt(value: Any, spec: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return format(value, spec) if isinstance(value, float) else str(value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _mib(nbytes: float) -> str:
    return _fmt(nbytes / 2**20, ".2f")


def markdown(results: dict[str, Any]) -> list[str]:
    """The '## Buffers (issue 7)' section; empty when the section did not run."""
    if not results:
        return []
    lines = [
        "",
        "## Buffers (issue 7)",
        "",
        f"Default mode `{results.get('default_mode_string')}`, pool of "
        f"{_mib(results.get('pool_bytes', 0))} MiB: `proton_ik.start` with no mode, pool or format options. "
        "`benchmarks/buffers.py`; the targets above are judged from these numbers.",
    ]
    for part in (_default_mode_md, _device_bytes_md, _host_md, _e2e_md, _finalize_md, _checks_md):
        lines += part(results)
    failed = [(name, r["error"]) for name, r in results.items() if isinstance(r, dict) and "error" in r]
    if failed:
        lines += ["", *(f"- {name} failed: {error}" for name, error in failed)]
    return lines


def _default_mode_md(results: dict[str, Any]) -> list[str]:
    found = results.get("default_mode", {}).get("kernels", {})
    if not found:
        return []
    rows = []
    for name, k in found.items():
        capacity = k.get("capacity") or {}
        rows.append(
            [
                name,
                f"{k.get('grid', '-')} x {k.get('warps', '-')}",
                f"{_fmt(capacity.get('entries'))} ({capacity.get('source', '-')})",
                _fmt(capacity.get("bound")),
                str(capacity.get("reason", "-"))[:140],
                f"{_fmt(k.get('records'))} / {_fmt(k.get('records_expected'))}",
                _fmt(k.get("overwritten")),
                _mib(k["device_bytes"]) if "device_bytes" in k else "-",
                _mib(k["copied_bytes"]) if "copied_bytes" in k else "-",
                ", ".join(k.get("files", [])) or "-",
                _fmt(k.get("worked")) + (f": {k['error'][:120]}" if k.get("error") else ""),
            ]
        )
    header = ["kernel", "grid x warps", "entries per warp (source)", "bound", "reason"]
    header += ["records / expected", "overwritten", "device MiB", "copied MiB", "files", "worked"]
    return [
        "",
        "### The default mode on every kernel",
        "",
        "One launch each, a session each. Records: written, from the unit headers (overwritten ones "
        "included); expected: the count the scope structure gives. Worked: no exception, one launch "
        "in the trace, exact records, outputs equal to torch's.",
        "",
        *_table(header, rows),
    ]


def _device_bytes_md(results: dict[str, Any]) -> list[str]:
    found = results.get("device_bytes", {}).get("kernels", {})
    if not found:
        return []
    rows = [
        [
            name,
            f"{r['capacity_entries']} (bound {r['bound']})",
            _fmt(r["entries_per_unit"], ".2f"),
            _fmt(r["bytes"]),
            _fmt(r["written"]),
            _fmt(r["ratio"], ".3f"),
            _fmt(r["copied_bytes"]),
            r["entries_source"],
        ]
        for name, r in found.items()
    ]
    header = ["kernel", "entries per warp", "written per warp", "device bytes", "written bytes", "ratio"]
    header += ["copied bytes", "entries from"]
    return [
        "",
        "### Device bytes per launch against what the launch wrote",
        "",
        "Kernels whose bound is known. Device bytes = CTAs x cta_bytes; written = CTAs x 64 + "
        "units x 48 + entries x 16; copied: what the drain moved to the host.",
        "",
        *_table(header, rows),
    ]


def _host_md(results: dict[str, Any]) -> list[str]:
    host = results.get("host", {})
    if "us_per_launch" not in host:
        return []
    rows = []
    for variant in HOST_VARIANTS:
        timing = host["us_per_launch"][variant]
        added = host["added_us"].get(variant)
        rows.append(
            [
                variant,
                _fmt(timing["median"], ".1f"),
                _fmt(timing["spread_pct"], ".1f"),
                "-" if added is None else _fmt(added, "+.1f"),
                ", ".join(str(n) for n in host["launches_done"][variant]),
            ]
        )
    copied = host["proton_ik_copied_bytes_in_loop"]
    return [
        "",
        "### Host time added per launch",
        "",
        f"{host['kernel']} ({host['size']}, {host['records_per_launch']:,} records a launch): "
        f"{host['launches']:,} launches, each followed by `torch.cuda.synchronize()`; start, one "
        f"untimed first launch and finalize excluded; {host['rounds']} interleaved rounds. Proton: "
        f"mode `{host['proton']['mode']}`, data `{host['proton']['data']}`. Added: median over rounds "
        "of (variant - plain) in the same round.",
        "",
        *_table(["variant", "us per launch (median)", "spread %", "added us", "launches per round"], rows),
        "",
        f"proton_ik recorded {host['proton_ik_recorded_launches']} launches per round (the first "
        f"included); its drain copied {_mib(max(copied, default=0))} MiB during a loop at most.",
        "",
        *(f"- {variant} failed: {errors[0]}" for variant, errors in host["errors"].items() if errors),
    ]


def _e2e_md(results: dict[str, Any]) -> list[str]:
    e2e = results.get("end_to_end", {})
    if "plain_ms" not in e2e:
        return []
    rows = [
        ["plain", _fmt(e2e["plain_ms"]["median"], ".3f"), _fmt(e2e["plain_ms"]["spread_pct"]), "1.00", "-"],
    ]
    for key, label in (("loop_ms", "proton_ik: loop + sync"), ("flushed_ms", "proton_ik: + drain flushed")):
        median = e2e[key]["median"]
        rows.append(
            [
                label,
                _fmt(median, ".3f"),
                _fmt(e2e[key]["spread_pct"]),
                _fmt(median / e2e["plain_ms"]["median"], ".2f"),
                _fmt(median / e2e["copy_ms"]["median"], ".2f"),
            ]
        )
    copy = e2e["copy_ms"]
    rows.append(
        [
            f"pinned copy of {e2e['written_bytes_per_launch']:,} bytes",
            _fmt(copy["median"], ".3f"),
            _fmt(copy["spread_pct"]),
            _fmt(copy["median"] / e2e["plain_ms"]["median"], ".2f"),
            "1.00",
        ]
    )
    return [
        "",
        "### End to end",
        "",
        f"{e2e['kernel']} ({e2e['size']}): {e2e['launches']} launches, hooks on, no synchronize inside "
        f"the loop, one at the end; finalize excluded; {e2e['rounds']} interleaved rounds (plain, "
        "profiled, copy). 'drain flushed': until every record is on the host. The copy: the bytes a "
        f"launch writes, device to pinned host memory ({_fmt(e2e['copy_gb_per_s'], '.1f')} GB/s); the "
        f"drain moved {_mib(e2e['copied_bytes_per_launch'])} MiB per launch "
        f"({_fmt(e2e['drain_gb_per_s'], '.1f')} GB/s over the whole loop). Launches recorded in each "
        f"session exact: {_fmt(e2e['launches_exact'])}; these sessions write the session file only.",
        "",
        *_table(["", "ms per launch (median)", "spread %", "x plain", "x copy"], rows),
    ]


def _finalize_md(results: dict[str, Any]) -> list[str]:
    fin = results.get("finalize", {})
    if "records" not in fin:
        return []
    sizes = ", ".join(
        f"{kind} {_mib(size)} MiB ({_fmt(fin['bytes_per_event'].get(kind), '.1f')} B/event)"
        for kind, size in fin["file_bytes"].items()
    )
    rows = [
        [
            f"{fin['launches']} x {fin['kernel']}",
            f"{fin['records']:,} / {fin['records_expected']:,}",
            _fmt(fin["flush_s"], ".2f"),
            _fmt(fin["finalize_s"], ".2f"),
            _fmt(fin["records_per_s"] / 1e6, ".2f"),
            sizes,
        ]
    ]
    return [
        "",
        "### Finalize",
        "",
        "After the launches and a synchronize: the drain flushed (timed apart), then "
        "`proton_ik.finalize()` writing .pik and .pftrace. Rate = records / (flush + finalize).",
        "",
        *_table(["session", "records / expected", "flush s", "finalize s", "M records/s", "files"], rows),
    ]


def _checks_md(results: dict[str, Any]) -> list[str]:
    rows = []
    graph = results.get("graph", {})
    if "replay_rows" in graph:
        rows.append(
            [
                f"CUDA graph, {graph['replays_made']} replays",
                f"{graph['replays_made']} rows, replay 0..{graph['replays_made'] - 1}, "
                f"{graph['records_expected']:,} records each",
                f"{graph['replay_rows']} rows of {graph['launch_rows']}, replays {graph['replay_indices']}, "
                f"records {sorted(set(graph['records_per_replay']))}"
                + (f"; missing columns {graph['missing_columns']}" if graph["missing_columns"] else ""),
                _fmt(graph["exact"]),
            ]
        )
    tune = results.get("autotune", {})
    if "config_inside" in tune:
        rows.append(
            [
                f"autotune, {tune['calls']} calls",
                f"config {tune['config_outside']} (tuned outside a session); {tune['calls']} rows of "
                f"{tune['records_expected']:,} records",
                f"config {tune['config_inside']}; {tune['launch_rows']} rows, records "
                f"{sorted(set(tune['records_per_launch']))}; config column {tune['config_column']}",
                _fmt(tune["same_config"] and tune["exact"]),
            ]
        )
    if not rows:
        return []
    return ["", "### CUDA graphs and autotuning", "", *_table(["check", "expected", "found", "exact"], rows)]


def summary_lines(results: dict[str, Any]) -> list[str]:
    """One line for the table run.py prints last."""
    if not results:
        return []
    host, e2e, fin = results.get("host", {}), results.get("end_to_end", {}), results.get("finalize", {})
    added = host.get("added_us", {})
    parts = [
        f"host +{_fmt(added.get('proton_ik'))} us/launch (Proton +{_fmt(added.get('proton'))})",
        f"end to end {_fmt(e2e.get('x_plain'), '.2f')}x plain, {_fmt(e2e.get('x_copy'), '.2f')}x copy",
        f"finalize {_fmt(fin.get('records_per_s', float('nan')) / 1e6, '.2f')}M records/s",
        f"graph exact {_fmt(results.get('graph', {}).get('exact'))}",
        f"autotune same config {_fmt(results.get('autotune', {}).get('same_config'))}",
    ]
    return ["buffers: " + "; ".join(parts)]
