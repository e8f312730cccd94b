"""Per-record cost: a loop of empty scopes at L = 0, 64 and 1024 iterations, cycles per record
from each warp's own clock and from device time x the SM clock; and where one record's cycles
go (``record_variants.py``)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from benchmarks import record_variants
from benchmarks.harness import Context, bench_ms, compile_variant, direct, log
from benchmarks.kernels import micro


def measure(ctx: Context) -> dict[str, Any]:
    """Empty scopes in a tight loop, one CTA per SM, 4 warps: cycles and ns per record."""
    fn = micro.record_cost_kernel
    grid = (ctx.num_sms, 1, 1)
    warps = micro.MICRO_OPTIONS["num_warps"]
    out = torch.zeros(ctx.num_sms * micro.MICRO_BLOCK, dtype=torch.int64, device="cuda")
    block, unroll = micro.MICRO_BLOCK, micro.RECORD_COST_UNROLL
    compiled = {}
    session_dir = ctx.scratch / "compile_sessions"
    session_dir.mkdir(parents=True, exist_ok=True)
    errors = {}
    for variant in ctx.variants:
        try:
            compiled[variant.label] = compile_variant(
                fn, (out, 64, block, unroll), grid, micro.MICRO_OPTIONS, variant, session_dir
            )
        except Exception as error:
            errors[variant.label] = repr(error)[:500]
            log(f"  record_cost [{variant.label}] compile FAILED: {error!r}"[:400])
    ctx.pool.install()
    runners = {
        (label, n): direct(ck, (out, n, block, unroll), grid)
        for label, ck in compiled.items()
        for n in micro.RECORD_COST_ITERS
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
        for n in micro.RECORD_COST_ITERS:
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
        last = rows[str(micro.RECORD_COST_ITERS[-1])]
        log(
            f"  record cost [{label}]: {last.get('cycles_per_record', float('nan')):.1f} cycles/record (clock)"
        )
    results["smi_mhz_used"] = smi or None
    ctx.pool.clear()
    return results


def breakdown(ctx: Context) -> dict[str, Any]:
    """Where one record's cycles go: benchmarks/record_variants.py, each variant of the emitted
    PTX in a process of its own."""
    return record_variants.measure_all()
