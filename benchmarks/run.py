"""The proton_ik benchmark: overhead, per-record cost, accuracy and host-side cost, side by side
with Triton's Proton, in one process, following ../shared/BENCHMARKING.md. From the repository root:

    python -m benchmarks.run                    # the full run: a few minutes on an H100 or H200
    python -m benchmarks.run --quick            # small sizes and few rounds: a smoke test
    python -m benchmarks.run --only overhead    # one section of those listed below
    python -m benchmarks.run --only occupancy,decomposition   # issue 10: registers, CTAs, parts
    python -m benchmarks.run --only buffers     # issue 7 alone (benchmarks/buffers/)
    python -m benchmarks.run --ik-mode instrumentation:granularity=warpgroup   # another mode of ours
    python -m benchmarks.run --report-only      # the report again from --out's results.json, no GPU
    python -m benchmarks.run --only compiled --merge   # one section anew; the others kept from --out

Sections, each measured by its own module (the shared harness: benchmarks/harness.py):

- overhead (overhead.py): compile every kernel of the suite plain, under proton_ik (default and
  --ik-mode modes) and under Proton (global and shared buffer, and --proton-mode modes), keeping
  the compiled kernels; check every variant's outputs against torch and against the plain kernel;
  then time direct launches (launch hooks bypassed) in interleaved rounds.
- occupancy (occupancy.py): registers, spills and resident CTAs per SM of every kernel and
  variant, from the compiled kernels and CUDA's occupancy rule (residency.py); compiles only, so
  ``python -m benchmarks.occupancy`` gives the same table on a machine without a GPU.
- decomposition (decomposition.py): every kernel timed plain, with its scopes' markers only,
  with the prologue and epilogue, and with the records (scope_parts.py): what measuring a scope
  costs in itself, and what our records add.
- record (record_cost.py): per-record cost from a loop of empty scopes, by the kernel's own clock
  and device time.
- breakdown (record_cost.py, record_variants.py): where one record's cycles go, from variants of
  the emitted PTX.
- events (event_cost.py): issue 11's events, marks and values against scopes: the record
  section's loop with an event (a register index, or a constant one), two marks or two value
  marks in place of each scope, plain and in the default mode; cycles per record by the clock
  and device time, and registers.
- accuracy (accuracy.py): scopes of known length (a %clock64 spin), cross-CTA alignment after a
  grid barrier, and the SM clock inferred from our trace against nvidia-smi's.
- counts (counts.py): records per warp in our trace against the exact count the scope structure
  implies.
- host (host.py): wall time of 1000 profiled launches including finalize, trace bytes per million
  events, and finalize seconds per million records, for proton_ik and for Proton.
- buffers (buffers/): buffers sized from the code (issue 7): the default mode on every kernel,
  device bytes against bytes written, host time per launch, end to end on a 16384-CTA grid,
  finalize rate, CUDA graph replays and autotuning.
- compiled (compiled.py): torch.compile (issue 22): a compiled transformer block, its attention
  a scoped user kernel and the rest Inductor's kernels, recorded with unscoped=kernel: every
  launch against torch.profiler's, exact counts, the step in a session against the plain step
  and PyTorch's Proton integration, and the first compile in a session against a plain one.
- jobs (jobs.py): sessions in jobs (issue 23): a worker killed with SIGKILL after a flush (its
  partial file read back), and, on a host of two GPUs, a two-rank torchrun job's merged timeline
  against an all_reduce both GPUs leave at once (benchmarks/job_rank.py is a rank).
- sampling (overhead.py): gelu under the sampling modes (--sample-mode; by default ctas=4,
  ctas=16 and warps=0) beside the default mode, timed as in overhead; a mode that does not parse
  is skipped and reported. Last, so that a new mode's fault takes no other section with it.

Results go to --out (default benchmarks/results/) as results.json and results.md; the summary
table is printed last. Every number there is computed here. The report (benchmarks/report/) is
rendered from results.json, so --report-only writes it again byte for byte.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks import report

SECTIONS = (
    "overhead",
    "occupancy",
    "decomposition",
    "record",
    "breakdown",
    "events",
    "accuracy",
    "counts",
    "host",
    "buffers",
    "compiled",
    "jobs",
    "sampling",
)
RESULTS = Path(__file__).resolve().parent / "results"
PATH_OPTIONS = ("--out", "--benchmarks-md")  # public_command hides their values


def public_command() -> str:
    """The command line, with the output paths (paths on the machine that ran it) left out."""
    words = [Path(sys.executable).name, "-m", "benchmarks.run", *sys.argv[1:]]
    shown = []
    for previous, word in zip(["", *words[:-1]], words, strict=True):
        flag = word.split("=", 1)[0]
        if previous in PATH_OPTIONS:
            shown.append("PATH")
        elif flag in PATH_OPTIONS and "=" in word:
            shown.append(f"{flag}=PATH")
        else:
            shown.append(word)
    return " ".join(shown)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="small sizes and 2 rounds: a smoke test")
    parser.add_argument(
        "--only", action="append", default=[], help=f"comma list of sections: {', '.join(SECTIONS)}"
    )
    parser.add_argument("--out", default=str(RESULTS), help="where results go")
    parser.add_argument("--ik-mode", action="append", default=[], help="another proton_ik mode to time")
    parser.add_argument("--proton-mode", action="append", default=[], help="another Proton mode to time")
    parser.add_argument(
        "--sample-mode",
        action="append",
        default=[],
        help="a sampling mode to time on gelu (default: instrumentation:ctas=4, ctas=16 and warps=0)",
    )
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
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the sections of --out's results.json that this run does not measure; the report "
        "names the run (date, device, command) each kept section came from",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="measure nothing: write results.md (and --benchmarks-md) again from --out's results.json",
    )
    args = parser.parse_args()
    args.sections = [s for item in args.only for s in item.split(",") if s] or list(SECTIONS)
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    if args.report_only:
        ignored = [
            flag
            for flag, given in (
                ("--quick", args.quick),
                ("--only", args.only),
                ("--ik-mode", args.ik_mode),
                ("--proton-mode", args.proton_mode),
                ("--sample-mode", args.sample_mode),
                ("--rounds", args.rounds),
                ("--reuse-cache", args.reuse_cache),
                ("--keep-traces", args.keep_traces),
                ("--merge", args.merge),
            )
            if given
        ]
        if ignored:
            parser.error(f"--report-only measures nothing, so {', '.join(ignored)} would be ignored")
    return args


def write_report(out_dir: Path, benchmarks_md: str) -> dict[str, Any]:
    """results.md (and ``benchmarks_md``) from ``out_dir``'s results.json; the results, as read."""
    results = json.loads((out_dir / "results.json").read_text())
    text = report.render(results)
    (out_dir / "results.md").write_text(text)
    if benchmarks_md:
        Path(benchmarks_md).write_text(text)
    return results


def merge_kept_sections(results: dict[str, Any], earlier: dict[str, Any], measured: list[str]) -> None:
    """Into ``results``, the sections of ``earlier`` (an earlier results.json) that were not
    ``measured`` now, each with the run it came from under ``kept_sections``."""
    provenance = {
        "date_utc": earlier["environment"]["date_utc"],
        "device": earlier["environment"]["device"],
        "host_cpu": earlier["environment"].get("host_cpu", "a host not recorded"),
        "command": earlier["command"],
    }
    kept = results.setdefault("kept_sections", {})
    for name in SECTIONS:
        if name in measured or name not in earlier:
            continue
        results[name] = earlier[name]
        kept[name] = earlier.get("kept_sections", {}).get(name, provenance)
    if "overhead" in kept:  # its table is labelled by the variants compared (sampling's by its own)
        results["variants"] = earlier["variants"]


def measure(args: argparse.Namespace) -> int:
    """Run the sections ``args`` names, then write results.json and the report from it."""
    # torch and the GPU from here on: --help and --report-only need neither.
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print(
            "benchmarks.run measures on a CUDA GPU, with torch; on a machine without one, run "
            "python -m benchmarks.compile_check (or --report-only to render saved results)",
            flush=True,
        )
        return 2
    import numpy as np
    import triton

    from benchmarks import (
        accuracy,
        buffers,
        compiled,
        counts,
        decomposition,
        event_cost,
        harness,
        host,
        jobs,
        occupancy,
        overhead,
        record_cost,
        variants,
    )

    measurements = {
        "overhead": overhead.measure,
        "occupancy": occupancy.measure,
        "decomposition": decomposition.measure,
        "sampling": overhead.sampling,
        "record": record_cost.measure,
        "breakdown": record_cost.breakdown,
        "events": event_cost.measure,
        "accuracy": accuracy.measure,
        "counts": counts.measure,
        "host": host.measure,
        "buffers": buffers.measure,
        "compiled": compiled.measure,
        "jobs": jobs.measure,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="pik_bench_"))
    if not args.reuse_cache:
        triton.knobs.cache.dir = str(scratch / "triton_cache")
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    compared = variants.make_variants(args.ik_mode, args.proton_mode)
    ctx = harness.Context(args, num_sms, compared, harness.ScratchPool(), harness.ClockSampler(), scratch)
    ctx.results = {
        "environment": harness.environment(num_sms),
        "quick": args.quick,
        "command": public_command(),
        "variants": [v.__dict__ for v in ctx.variants],
    }
    harness.log(
        f"{ctx.results['environment']['device']}, {num_sms} SMs; sections {args.sections}; scratch {scratch}"
    )
    ctx.clock.start()
    try:
        for name in args.sections:
            harness.log(f"section {name} ({ctx.elapsed()})")
            try:
                ctx.results[name] = measurements[name](ctx)
            except Exception as error:
                traceback.print_exc()
                ctx.results[name] = {"error": f"{error!r}"[:1000]}
                harness.log(f"section {name} FAILED: {error!r}"[:400])
            finally:
                ctx.pool.clear()
    finally:
        ctx.clock.stop()
        ctx.results["wall_s"] = time.perf_counter() - ctx.started
        earlier = out_dir / "results.json"
        if args.merge and earlier.exists():
            merge_kept_sections(ctx.results, json.loads(earlier.read_text()), args.sections)
        ctx.results["smi_mhz_all_samples_median"] = (
            float(np.median([mhz for _, mhz in ctx.clock.samples])) if ctx.clock.samples else None
        )
        (out_dir / "results.json").write_text(json.dumps(ctx.results, indent=2, default=str))
        results = write_report(out_dir, args.benchmarks_md)
        if not args.keep_traces:
            shutil.rmtree(scratch, ignore_errors=True)
        harness.log(f"wrote {out_dir / 'results.json'} and {out_dir / 'results.md'}")
        print(report.summary(results), flush=True)
    return 0


def main() -> int:
    args = parse_args()
    if args.report_only:
        out_dir = Path(args.out)
        if not (out_dir / "results.json").is_file():
            print(f"--report-only: no results.json in {out_dir}; point --out at a run's results folder")
            return 2
        print(report.summary(write_report(out_dir, args.benchmarks_md)), flush=True)
        return 0
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
