"""Events, marks and values against scopes (issue 11): the per-record cost section's loop with an
event, a mark or a value mark for each of its scope records, plain and in proton_ik's default
mode; cycles per record from each warp's own clock and from device time x the SM clock, and
each kernel's registers from its cubin."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from benchmarks.harness import Context, bench_ms, compile_variant, direct, log
from benchmarks.kernels import micro
from benchmarks.occupancy import cubin_resources
from benchmarks.variants import Variant
from proton_ik.mode import Mode

VARIANTS = (Variant("plain", None), Variant("proton_ik", "proton_ik", str(Mode())))


def measure(ctx: Context) -> dict[str, Any]:
    """Every kernel of ``micro.EVENT_COST_KERNELS``, one CTA per SM, 4 warps, at each of
    ``micro.EVENT_COST_ITERS`` iterations: cycles and ns per record, timed in interleaved rounds."""
    grid = (ctx.num_sms, 1, 1)
    warps = micro.MICRO_OPTIONS["num_warps"]
    block, unroll = micro.MICRO_BLOCK, micro.RECORD_COST_UNROLL
    out = torch.zeros(ctx.num_sms * block, dtype=torch.int64, device="cuda")
    session_dir = ctx.scratch / "compile_sessions"
    session_dir.mkdir(parents=True, exist_ok=True)
    compiled, errors = {}, {}
    for name, (fn, _) in micro.EVENT_COST_KERNELS.items():
        for variant in VARIANTS:
            try:
                compiled[name, variant.label] = compile_variant(
                    fn, (out, 64, block, unroll), grid, micro.MICRO_OPTIONS, variant, session_dir
                )
            except Exception as error:
                errors[f"{name} [{variant.label}]"] = repr(error)[:500]
                log(f"  event_cost {name} [{variant.label}] compile FAILED: {error!r}"[:400])
    ctx.pool.install()
    runners = {
        (name, label, n): direct(ck, (out, n, block, unroll), grid)
        for (name, label), ck in compiled.items()
        for n in micro.EVENT_COST_ITERS
    }
    cycles: dict[tuple[str, str, int], float] = {}
    for key, run in runners.items():
        out.zero_()
        run()
        torch.cuda.synchronize()
        cycles[key] = float(out.view(ctx.num_sms, warps, 32)[:, :, 0].double().median().item())
    per_round: dict[tuple[str, str, int], list[float]] = {key: [] for key in runners}
    timed_from = time.time()
    for _ in range(max(3, ctx.rounds)):
        for key, run in runners.items():
            per_round[key].append(bench_ms(run, ctx.args.quick))
    samples = ctx.clock.between(timed_from, time.time())
    smi = float(np.median(samples)) if samples else None
    device_ms = {key: float(np.median(values)) for key, values in per_round.items()}
    kernels: dict[str, Any] = {}
    for name, (_, what) in micro.EVENT_COST_KERNELS.items():
        kernels[name] = {"what": what, "variants": {}}
        for label in (v.label for v in VARIANTS):
            if (name, label) not in compiled:
                continue
            registers, spills = cubin_resources(compiled[name, label].asm["cubin"])
            rows = {
                str(n): _row(
                    micro.RECORDS_PER_ITER * n,
                    (cycles[name, label, 0], cycles[name, label, n]),
                    (device_ms[name, label, 0], device_ms[name, label, n]),
                    smi,
                )
                for n in micro.EVENT_COST_ITERS
            }
            kernels[name]["variants"][label] = {"registers": registers, "spills": spills, "iters": rows}
            last = rows[str(micro.EVENT_COST_ITERS[-1])]
            log(
                f"  event cost {name} [{label}]: {last.get('cycles_per_record', float('nan')):.1f} "
                f"cycles/record (clock), {registers} registers"
            )
    ctx.pool.clear()
    return {
        "errors": errors,
        "grid": list(grid),
        "warps_per_cta": warps,
        "unroll": unroll,
        "records_per_iter": micro.RECORDS_PER_ITER,
        "rounds": max(3, ctx.rounds),
        "smi_mhz_used": smi,
        "kernels": kernels,
    }


def _row(
    records: int, clock_cycles: tuple[float, float], device_ms: tuple[float, float], smi: float | None
) -> dict[str, Any]:
    """One kernel and variant with ``records`` per warp; ``clock_cycles`` and ``device_ms`` are
    (with no iterations, with these): per record, the difference over the records."""
    row: dict[str, Any] = {
        "records_per_warp": records,
        "clock_cycles": clock_cycles[1],
        "device_ms": device_ms[1],
    }
    if records:
        row["cycles_per_record"] = (clock_cycles[1] - clock_cycles[0]) / records
        ns = (device_ms[1] - device_ms[0]) * 1e6 / records
        row["device_ns_per_record"] = ns
        if smi:
            row["device_cycles_per_record"] = ns * smi / 1000.0
    return row
