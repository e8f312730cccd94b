"""Compile every benchmark kernel for sm_90, plain and under proton_ik, on a machine with no GPU.

    python -m benchmarks.compile_check [--ik-mode instrumentation:granularity=warpgroup ...]

Triton Proton's variants need a GPU to activate, so only run.py compiles those. Each compile
goes to a fresh Triton cache, so a cached binary from an older proton_ik is never reused.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction

import proton_ik
from benchmarks import kernels
from benchmarks.kernels import elementwise, micro
from proton_ik.mode import Mode

TARGET = GPUTarget("cuda", 90, 32)
H100_SMS = 132


def source(fn, signature: dict[str, str], constexprs: dict):
    """What ``triton.compile`` compiles: ``fn`` with its runtime arguments typed by ``signature``
    and the rest given by ``constexprs`` (no specialization on argument values)."""
    full_signature = {name: signature.get(name, "constexpr") for name in fn.arg_names}
    unknown = set(signature) - set(fn.arg_names) or set(constexprs) - set(fn.arg_names)
    if unknown:
        raise ValueError(f"{fn.__name__}: no parameters named {sorted(unknown)}")
    untyped = [n for n, t in full_signature.items() if t == "constexpr" and n not in constexprs]
    if untyped:
        raise ValueError(f"{fn.__name__}: parameters without a type or constexpr value: {untyped}")
    source_cls = GluonASTSource if isinstance(fn, GluonJITFunction) else triton.compiler.ASTSource
    return source_cls(fn, signature=full_signature, constexprs=constexprs)


def compile_kernel(fn, signature: dict[str, str], constexprs: dict, options: dict, mode: Mode | None):
    """One kernel for sm_90: plain when ``mode`` is None, else instrumented under ``mode``."""
    src = source(fn, signature, constexprs)
    if mode is None:
        return triton.compile(src, target=TARGET, options=dict(options))
    with proton_ik.instrumented(mode):
        return triton.compile(src, target=TARGET, options={**options, "instrumentation_mode": mode.knob})


def describe(compiled, mode: Mode | None) -> str:
    meta = compiled.metadata
    if mode is None:
        return f"warps={meta.num_warps} shared={meta.shared}"
    pik = getattr(meta, "proton_ik", None)
    if not pik:
        return "NOT INSTRUMENTED (no proton_ik metadata)"
    names = ",".join(s["name"] for s in pik["scopes"])
    return (
        f"warps={meta.num_warps} shared={meta.shared} scratch/CTA={meta.profile_scratch_size} "
        f"scopes=[{names}]"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ik-mode", action="append", default=[], help="another proton_ik mode to compile")
    parser.add_argument("--quick", action="store_true", help="the --quick sizes of benchmarks.run")
    args = parser.parse_args()
    modes: list[Mode | None] = [None, Mode(), *(Mode.parse(text) for text in args.ik_mode)]
    triton.knobs.cache.dir = tempfile.mkdtemp(prefix="pik_compile_check_")

    jobs = [
        (p.name, p.fn, p.signature, p.constexprs, p.options, p.records_per_warp)
        for p in [*kernels.suite(args.quick, H100_SMS), *elementwise.buffer_problems()]
    ]
    jobs += [
        (name, fn, signature, constexprs, micro.MICRO_OPTIONS, None)
        for name, (fn, signature, constexprs) in micro.MICRO_KERNELS.items()
    ]
    jobs += [
        (f"tuned_add[{c.kwargs['BLOCK']}]", elementwise.tuned_add_kernel, elementwise.TUNED_ADD_SIGNATURE, c.kwargs,
         {"num_warps": c.num_warps}, None)
        for c in elementwise.tuned_add_configs()
    ]  # fmt: skip
    failures = 0
    for name, fn, signature, constexprs, options, records in jobs:
        for mode in modes:
            label = "plain" if mode is None else f"proton_ik[{mode}]"
            start = time.perf_counter()
            try:
                compiled = compile_kernel(fn, signature, constexprs, options, mode)
                line = describe(compiled, mode)
                if records is not None and mode is None:
                    counts = records(compiled.metadata.num_warps)
                    line += f" records/warp min={counts.min()} mean={counts.mean():.1f} max={counts.max()}"
                ok = "NOT INSTRUMENTED" not in line
            except Exception:
                line = traceback.format_exc().strip().splitlines()[-1]
                ok = False
                traceback.print_exc()
            failures += not ok
            seconds = time.perf_counter() - start
            print(f"{'ok  ' if ok else 'FAIL'} {name:24s} {label:55s} {seconds:5.1f}s  {line}", flush=True)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
