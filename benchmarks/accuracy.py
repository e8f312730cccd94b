"""Accuracy: scopes of known length (a %clock64 spin), ours and Proton's; cross-CTA alignment
after a grid barrier; and the SM clock our trace implies against the one nvidia-smi reports."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import triton.profiler as proton

import proton_ik
from benchmarks.harness import Context, fresh, ik_session, log, proton_trace_events
from benchmarks.kernels import micro
from benchmarks.report.format import fmt

CLOCK_SPIN_CYCLES = 20_000_000  # ~10 ms spins, long enough for nvidia-smi to sample the SM clock
CLOCK_SPIN_LAUNCHES = 40
SPIN_REPEATS = 3
ALIGN_LAUNCHES = 5
ALIGN_MAX_POLLS = 1 << 20


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


def measure(ctx: Context) -> dict[str, Any]:
    """Spins of known length inside one scope; a grid barrier then a scope whose begin should be
    simultaneous across CTAs; the SM clock our trace implies against nvidia-smi's."""
    grid = (ctx.num_sms, 1, 1)
    warps = micro.MICRO_OPTIONS["num_warps"]
    block = micro.MICRO_BLOCK
    out = torch.zeros(ctx.num_sms * block, dtype=torch.int64, device="cuda")
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    arrived = torch.zeros(ctx.num_sms, dtype=torch.int32, device="cuda")
    spin, sync = fresh(micro.spin_kernel), fresh(micro.grid_sync_kernel)

    spun: list[tuple[int, np.ndarray]] = []  # (target cycles, cycles spun by lane 0 of each warp)
    barrier_ok = []
    ik_session("accuracy", ctx.scratch / "accuracy")
    try:
        for n in micro.SPIN_CYCLES:
            for _ in range(SPIN_REPEATS):
                spin[grid](out, n, block, **micro.MICRO_OPTIONS)
                torch.cuda.synchronize()
                spun.append((n, out.view(ctx.num_sms, warps, 32)[:, :, 0].cpu().numpy()))
        clock_t0 = time.time()
        for _ in range(CLOCK_SPIN_LAUNCHES):
            spin[grid](out, CLOCK_SPIN_CYCLES, block, **micro.MICRO_OPTIONS)
            torch.cuda.synchronize()
            spun.append((CLOCK_SPIN_CYCLES, out.view(ctx.num_sms, warps, 32)[:, :, 0].cpu().numpy()))
        clock_t1 = time.time()
        for _ in range(ALIGN_LAUNCHES):
            counter.zero_()
            sync[grid](counter, arrived, ctx.num_sms, ALIGN_MAX_POLLS, **micro.MICRO_OPTIONS)
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
    for n in (*micro.SPIN_CYCLES, CLOCK_SPIN_CYCLES):
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


def proton_spin_accuracy(ctx: Context, grid: tuple[int, int, int]) -> list[dict[str, Any]]:
    """The same spins under Proton (default mode), one session per length. Proton converts
    cycles to time at an assumed 1 GHz, so its microseconds x 1000 are its cycles."""
    warps = micro.MICRO_OPTIONS["num_warps"]
    out = torch.zeros(ctx.num_sms * micro.MICRO_BLOCK, dtype=torch.int64, device="cuda")
    rows = []
    directory = ctx.scratch / "proton_accuracy"
    directory.mkdir(parents=True, exist_ok=True)
    for n in micro.SPIN_CYCLES:
        base = directory / f"spin_{n}"
        spin = fresh(micro.spin_kernel)
        proton.start(str(base), backend="instrumentation", data="trace")
        try:
            spin[grid](out, n, micro.MICRO_BLOCK, **micro.MICRO_OPTIONS)
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
