"""Kernel overhead: every suite kernel compiled plain, under proton_ik's modes and under Proton's,
all before any timing; every variant's outputs checked against torch and against the plain
kernel; then direct launches timed in interleaved rounds. Overhead = instrumented / plain - 1,
per kernel and as a geometric mean, and ours against Proton's best mode. And gelu under the
sampling modes (some CTAs or warps recorded), beside the default mode: a section of its own."""

from __future__ import annotations

import time
from typing import Any

import torch

from benchmarks import kernels
from benchmarks.harness import (
    Context,
    bench_ms,
    compile_variant,
    direct,
    geomean,
    log,
    pct,
    summarize_rounds,
    unsafe_launch,
)
from benchmarks.kernels.problem import Launch, Problem
from benchmarks.variants import Variant, ik_label
from proton_ik.contract.metadata import KernelMetadata
from proton_ik.mode import Mode

# The mode's sampling options (issue 10): which CTAs (ctas=N) and which warps (warps=...) record.
SAMPLE_MODES = ("instrumentation:ctas=4", "instrumentation:ctas=16", "instrumentation:warps=0")
# A short kernel (the frame dominates) and a loop that keeps every row's records (their bytes do).
SAMPLED_KERNELS = ("gelu", "add_rms_norm")


def measure(ctx: Context) -> dict[str, Any]:
    """The run's "overhead" section: the suite under the run's variants."""
    results = compare(ctx, kernels.suite(ctx.args.quick, ctx.num_sms), ctx.variants, ctx.rounds)
    return {"kernels": results, "summary": overhead_summary(results, ctx.variants), "rounds": ctx.rounds}


def compare(ctx: Context, problems: list[Problem], variants: list[Variant], rounds: int) -> dict[str, Any]:
    """Every problem compiled under every variant before any timing; each variant's outputs
    checked; then direct launches timed in ``rounds`` interleaved rounds. One entry per problem."""
    session_dir = ctx.scratch / "compile_sessions"
    session_dir.mkdir(parents=True, exist_ok=True)
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
        for variant in variants:
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
        ctas = launch.grid[0] * launch.grid[1] * launch.grid[2]
        entry["profile_bytes_per_launch"] = {
            label: allocated_bytes(ck, ctas) for label, ck in compiled.items()
        }
        entry["profile_bytes_written"] = {label: written_bytes(ck, ctas) for label, ck in compiled.items()}
        for variant in variants:
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
        for round_index in range(rounds):
            for label in timed:
                per_round[label].append(bench_ms(runners[label], ctx.args.quick))
            log(
                f"  {problem.name} round {round_index + 1}/{rounds}: "
                + "  ".join(f"{label}={per_round[label][-1]:.4f}ms" for label in timed)
            )
        entry["timing"] = {label: summarize_rounds(values) for label, values in per_round.items()}
        entry["overhead_pct"] = overheads(entry["timing"], variants)
        del runners
        ctx.pool.clear()
    del prepared
    torch.cuda.empty_cache()
    return results


def allocated_bytes(compiled, ctas: int) -> int | str:
    """The profile buffer a launch of ``ctas`` CTAs is handed: by proton_ik's allocator, the
    sampled CTAs' regions (``Sampling.buffer_bytes``); by any other, what Triton's launcher asks
    for (a region per CTA). The reason, where the kernel's metadata cannot say."""
    ours = getattr(compiled.metadata, "proton_ik", None)
    if not ours:
        return ctas * compiled.metadata.profile_scratch_size
    try:
        layout = KernelMetadata.from_dict(ours, compiled.metadata.name).layout
        return layout.sampling.buffer_bytes(ctas, layout.cta_bytes)
    except (AttributeError, ValueError) as error:
        return f"unknown: {error!r}"[:200]


def written_bytes(compiled, ctas: int) -> int | str:
    """The part of the profile buffer that a launch of ``ctas`` CTAs writes, and the runtime
    copies: the sampled CTAs' regions of a proton_ik kernel, the whole buffer of any other. The
    reason, where the kernel's metadata cannot say."""
    allocated = ctas * compiled.metadata.profile_scratch_size
    ours = getattr(compiled.metadata, "proton_ik", None)
    if not ours:
        return allocated
    try:
        layout = KernelMetadata.from_dict(ours, compiled.metadata.name).layout
        return layout.sampling.cta_slots(ctas) * layout.cta_bytes
    except (AttributeError, ValueError) as error:
        return f"unknown: {error!r}"[:200]


def sampling(ctx: Context) -> dict[str, Any]:
    """The run's "sampling" section, last in the run (a mode new to the GPU that faults takes no
    other section with it): SAMPLED_KERNELS under the sampling modes (``--sample-mode``, by
    default SAMPLE_MODES) beside plain and the default mode, their overhead and profile bytes per
    launch. A mode that does not parse is skipped with the parser's message."""
    texts = ctx.args.sample_mode or list(SAMPLE_MODES)
    modes: dict[str, dict[str, str]] = {}
    variants = [v for v in ctx.variants if v.label in ("plain", "proton_ik")]
    for text in texts:
        try:
            mode = Mode.parse(text)
        except ValueError as error:
            modes[text] = {"skipped": str(error)[:300]}
            log(f"  sampling: {text} skipped: {error}")
            continue
        label = ik_label(mode)
        modes[text] = {"label": label}
        if label not in {v.label for v in variants}:
            variants.append(Variant(label, "proton_ik", str(mode)))
    result: dict[str, Any] = {"modes": modes, "kernels": {}}
    if len(variants) > 2:
        problems = [p for p in kernels.suite(ctx.args.quick, ctx.num_sms) if p.name in SAMPLED_KERNELS]
        result["kernels"] = compare(ctx, problems, variants, ctx.rounds)
    return result


def describe_problem(problem: Problem, compiled: dict) -> dict[str, Any]:
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


def check_variants(problem: Problem, launch: Launch, runners: dict) -> dict[str, Any]:
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


def check_outputs(actual: list[torch.Tensor], expected: list[torch.Tensor], tolerance) -> str:
    """'' when every output matches within (atol, rtol); else the first mismatch, in short."""
    atol, rtol = tolerance
    for got, want in zip(actual, expected, strict=True):
        try:
            torch.testing.assert_close(got, want.to(got.dtype), atol=atol, rtol=rtol)
        except AssertionError as error:
            return " ".join(str(error).split())[:300]
    return ""


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
