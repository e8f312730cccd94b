"""Registers, spills and resident CTAs per SM (issue 10): every suite kernel compiled plain, in
the parts of the default mode (``scope_parts.py``), under each proton_ik mode measured and under
Proton's modes. It compiles and never launches.

Registers (REG) and local memory per thread (LOCAL, whose quarter is Triton's ``n_spills``) come
from the cubin, read by the cuobjdump that ships with Triton; warps and shared memory from the
compiled kernel's metadata; resident CTAs from CUDA's occupancy rule (``residency.py``).

- In a run on the GPU (the "occupancy" section) the binaries are those the JIT builds for the
  run's arguments, as the overhead section times them, and the driver's ``n_regs`` and
  ``n_spills`` are checked against the cubin's.
- Without a GPU, ``python -m benchmarks.occupancy`` compiles for sm_90 from each kernel's
  signature (no specialization on argument values). Proton's modes compile through Proton's own
  instrumentation hook, activated against a stand-in for an sm_90 device's driver.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import triton
from triton import knobs

import proton_ik
from benchmarks import compile_check, kernels, residency, scope_parts
from benchmarks.kernels.problem import Problem
from benchmarks.variants import Variant, make_variants, with_parts
from proton_ik.mode import Mode

if TYPE_CHECKING:
    from benchmarks.harness import Context

JIT = "jit"  # the binaries the run times, specialized to its arguments
OFFLINE = "sm_90"  # compiled for sm_90 from the signatures, with no GPU
_RESOURCE = re.compile(r"REG:(?P<registers>\d+) .*LOCAL:(?P<local>\d+)")


def cubin_resources(cubin: bytes) -> tuple[int, int]:
    """(registers per thread, n_spills) of the one kernel in ``cubin``, by cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        dump = subprocess.run(
            [knobs.nvidia.cuobjdump.path, "--dump-resource-usage", file.name],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    found = [m for m in map(_RESOURCE.search, dump.splitlines()) if m]
    if len(found) != 1:
        raise ValueError(
            f"cuobjdump: expected one function's resource usage, found {len(found)}: {dump[:300]}"
        )
    # Triton's n_spills is the driver's local memory per thread in 4-byte words.
    return int(found[0]["registers"]), int(found[0]["local"]) // 4


def describe(compiled, sm: residency.SMLimits) -> dict[str, Any]:
    """A compiled kernel's registers, spills, warps and shared memory, and its resident CTAs."""
    registers, spills = cubin_resources(compiled.asm["cubin"])
    warps, shared = int(compiled.metadata.num_warps), int(compiled.metadata.shared)
    fit = residency.resident_ctas(registers, warps, shared, sm)
    return {
        "registers": registers,
        "spills": spills,
        "warps": warps,
        "shared": shared,
        "ctas": fit.ctas,
        "limited_by": fit.limited_by,
        "profile_scratch_per_cta": int(compiled.metadata.profile_scratch_size),
    }


def table(
    problems: list[Problem],
    variants: list[Variant],
    compile_one: Callable[[Problem, Variant], Any],
    sm: residency.SMLimits,
    compiled_by: str,
) -> dict[str, Any]:
    """The section's results: every problem under every variant, ``compile_one`` compiling."""
    found: dict[str, Any] = {}
    for problem in problems:
        entry: dict[str, Any] = {"variants": {}, "errors": {}}
        for variant in variants:
            try:
                entry["variants"][variant.label] = describe(compile_one(problem, variant), sm)
            except Exception as error:
                entry["errors"][variant.label] = f"{error!r}"[:400]
        found[problem.name] = entry
    return {
        "compiled": compiled_by,
        "rule": dataclasses.asdict(sm),
        "variants": [v.__dict__ for v in variants],
        "kernels": found,
    }


# --- without a GPU ---------------------------------------------------------------------------------


class _SM90Driver:
    """What Proton's instrumentation hook asks the driver while it activates and deactivates."""

    class utils:  # named as the driver names it
        @staticmethod
        def get_device_properties(device: int) -> dict[str, int]:
            return {"max_shared_mem": residency.SM90.max_shared_per_cta}

    @staticmethod
    def get_current_device() -> int:
        return 0

    @staticmethod
    def get_current_target():
        return compile_check.TARGET


@contextlib.contextmanager
def _stand_in_driver() -> Iterator[None]:
    from triton.runtime.driver import driver

    found = driver._active  # None until a real driver was asked for; put back as found
    driver.set_active(_SM90Driver())
    try:
        yield
    finally:
        driver.set_active(found)


@contextlib.contextmanager
def proton_offline(mode: str) -> Iterator[str]:
    """Proton's instrumentation hook for ``mode``, active with no GPU; yields the knob that a
    direct ``triton.compile()`` passes as its ``instrumentation_mode`` option."""
    from triton.profiler.hooks.instrumentation import InstrumentationHook

    hook = InstrumentationHook(mode)
    with _stand_in_driver():
        hook.activate()
    try:
        yield str(hook.mode)
    finally:
        with _stand_in_driver():
            hook.deactivate()


@contextlib.contextmanager
def _offline(variant: Variant) -> Iterator[str]:
    """Compiles inside are ``variant``'s; yields their ``instrumentation_mode`` option."""
    if variant.part:
        with scope_parts.compiling(variant.part, Mode.parse(variant.mode)) as knob:
            yield knob
    elif variant.profiler == "proton_ik":
        with proton_ik.instrumented(variant.mode) as mode:
            yield mode.knob
    elif variant.profiler == "proton":
        with proton_offline(variant.mode) as knob:
            yield knob
    else:
        yield ""


def compile_offline(problem: Problem, variant: Variant):
    """``problem``'s kernel for sm_90 under ``variant``, with no GPU."""
    source = compile_check.source(problem.fn, problem.signature, problem.constexprs)
    with _offline(variant) as knob:
        options = {**problem.options, **({"instrumentation_mode": knob} if knob else {})}
        return triton.compile(source, target=compile_check.TARGET, options=options)


def offline(problems: list[Problem], ik_modes: list[str], proton_modes: list[str]) -> dict[str, Any]:
    """The section's results, compiled with no GPU."""
    variants = with_parts(make_variants(ik_modes, proton_modes))
    return table(problems, variants, compile_offline, residency.SM90, OFFLINE)


# --- in a run, on the GPU --------------------------------------------------------------------------


def measure(ctx: Context) -> dict[str, Any]:
    """The run's "occupancy" section: the JIT's binaries for the run's arguments (the overhead
    section's, from the JIT's cache when it ran first), on an sm_90 device."""
    import torch

    from benchmarks import harness

    props = torch.cuda.get_device_properties(0)
    if (props.major, props.minor) != (9, 0):
        return {"error": f"the occupancy rule here is sm_90's; the device is sm_{props.major}{props.minor}"}
    sm = residency.SM90
    # the rule's limits as the device reports them, where this torch reports them
    reported = {
        "registers": getattr(props, "regs_per_multiprocessor", None),
        "max_warps": props.max_threads_per_multi_processor // sm.warp_size,
        "shared_bytes": getattr(props, "shared_memory_per_multiprocessor", None),
        "max_shared_per_cta": getattr(props, "shared_memory_per_block_optin", None),
    }
    device = {key: value for key, value in reported.items() if value is not None}
    session_dir = ctx.scratch / "compile_sessions"
    session_dir.mkdir(parents=True, exist_ok=True)
    launches: dict[str, Any] = {}
    driver_counts: dict[str, dict[str, list[int]]] = {}

    def compile_one(problem: Problem, variant: Variant):
        if problem.name not in launches:
            launches.clear()  # one problem's inputs on the device at a time
            launches[problem.name] = problem.make_launch()
        launch = launches[problem.name]
        compiled = harness.compile_variant(
            problem.fn, launch.args, launch.grid, problem.options, variant, session_dir
        )
        compiled._init_handles()
        driver_counts.setdefault(problem.name, {})[variant.label] = [compiled.n_regs, compiled.n_spills]
        return compiled

    problems = kernels.suite(ctx.args.quick, ctx.num_sms)
    results = table(problems, with_parts(ctx.variants), compile_one, sm, JIT)
    launches.clear()
    torch.cuda.empty_cache()
    results["device_limits"] = device
    results["rule_matches_device"] = all(getattr(sm, key) == value for key, value in device.items())
    for name, entry in results["kernels"].items():
        for label, row in entry["variants"].items():
            driver = driver_counts.get(name, {}).get(label)
            row["driver_agrees"] = driver == [row["registers"], row["spills"]]
            if not row["driver_agrees"]:
                harness.log(f"  occupancy {name} [{label}]: driver n_regs, n_spills {driver} vs cubin {row}")
    return results


# --- command line ----------------------------------------------------------------------------------


def main() -> int:
    from benchmarks.report import occupancy as report

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ik-mode", action="append", default=[], help="another proton_ik mode")
    parser.add_argument("--proton-mode", action="append", default=[], help="another Proton mode")
    parser.add_argument("--quick", action="store_true", help="the --quick sizes of benchmarks.run")
    parser.add_argument("--only", default="", help="comma list of suite kernels (default: all)")
    parser.add_argument("--json", default="", help="also write the results here")
    args = parser.parse_args()
    knobs.cache.dir = tempfile.mkdtemp(prefix="pik_occupancy_")
    problems = kernels.suite(args.quick, compile_check.H100_SMS)
    wanted = [name for name in args.only.split(",") if name]
    unknown = set(wanted) - {p.name for p in problems}
    if unknown:
        parser.error(
            f"no suite kernels named {sorted(unknown)}; the suite: {', '.join(p.name for p in problems)}"
        )
    problems = [p for p in problems if not wanted or p.name in wanted]
    results = offline(problems, args.ik_mode, args.proton_mode)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print("\n".join(report.markdown({"occupancy": results})))
    failed = [(name, label) for name, e in results["kernels"].items() for label in e["errors"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
