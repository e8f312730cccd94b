"""torch.compile (issue 22): a compiled transformer block (benchmarks/kernels/compiled_block.py),
its attention a scoped user kernel and the rest Inductor's kernels, profiled with
``unscoped=kernel`` so that Inductor's kernels record too.

- exact: one profiled step beside torch.profiler: every Triton launch CUPTI saw is one of our
  launches, each Inductor kernel records one scope per warp, the attention kernel its kv_block
  scopes exactly, nothing overwritten or unmatched.
- step: wall time of a compiled step, plain and in a session (finalize excluded), in interleaved
  rounds in this process; and beside them PyTorch's own Proton integration
  (``torch._inductor.config.triton.proton_profiling``), which compiles its own copy.
- first compile: the first call (trace, compile, run) of a fresh process with empty Inductor and
  Triton caches, plain and in a session, in interleaved rounds (``python -m benchmarks.compiled
  first plain|session``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODE = "instrumentation:unscoped=kernel"
STEPS = 50
PROTON_STEPS = 10  # PyTorch's Proton integration synchronizes and writes a trace every step


def _steps(compiled, x, steps: int) -> float:
    """Wall seconds per step of ``steps`` compiled steps, synchronized at the end."""
    import torch

    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(steps):
        compiled(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - began) / steps


def _exact(compiled, x, out_dir: Path) -> dict[str, Any]:
    """One profiled step beside torch.profiler: launches and records against what ran."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import proton_ik
    from benchmarks.kernels import compiled_block

    with profile(activities=[ProfilerActivity.CUDA]) as cupti:
        proton_ik.start("exact", mode=MODE, out_dir=str(out_dir))
        compiled(x)
        torch.cuda.synchronize()
        result = proton_ik.finalize()
    cupti_kernels = sorted(
        e.name for e in cupti.events() if e.device_type.name == "CUDA" and "triton" in e.name
    )
    launches, events = result.trace.launches, result.events
    wrong: list[str] = []
    for launch, kernel, units in zip(launches["launch"], launches["kernel"], launches["units"], strict=True):
        mine = events[events["launch"] == launch]
        per_warp = mine.groupby(["cta", "warp", "scope"]).size().unstack(fill_value=0)
        if kernel == "block_attention_kernel":
            expected = {"kv_block": compiled_block.kv_blocks_per_warp(), "epilogue": 1}
        else:
            expected = {kernel: 1}
        if len(per_warp) != units or any((per_warp.get(s, 0) != n).any() for s, n in expected.items()):
            wrong.append(kernel)
    return {
        "launches": len(launches),
        "cupti_triton_launches": len(cupti_kernels),
        "same_kernels": sorted(launches["kernel"]) == cupti_kernels,
        "kernels": sorted(set(launches["kernel"])),
        "records": int(launches["records"].sum()),
        "overwritten": int(launches["overwritten"].sum()),
        "unmatched": int(launches["unmatched_begin"].sum() + launches["unmatched_end"].sum()),
        "inexact_kernels": wrong,
    }


def _proton_integration(block, x, out_dir: Path) -> dict[str, Any]:
    """PyTorch's Proton integration on the same block: its own compile, its step time."""
    import torch

    config = torch._inductor.config.triton
    torch._dynamo.reset()
    previous = (config.proton_profiling, config.proton_output_dir)
    config.proton_profiling, config.proton_output_dir = True, str(out_dir)
    try:
        compiled = torch.compile(block)
        with torch.no_grad():
            compiled(x)
            per_step = _steps(compiled, x, PROTON_STEPS)
        return {"step_ms": 1e3 * per_step, "traces": len(list(out_dir.rglob("*")))}
    finally:
        config.proton_profiling, config.proton_output_dir = previous
        torch._dynamo.reset()


def _first_compile(kind: str, rounds: int) -> list[float]:
    """Seconds of the first call in fresh processes with empty caches, one per round."""
    seconds = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="pik_first_") as scratch:
            env = dict(
                os.environ,
                TORCHINDUCTOR_CACHE_DIR=str(Path(scratch) / "inductor"),
                TRITON_CACHE_DIR=str(Path(scratch) / "triton"),
                PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent), *sys.path]),
            )
            run = subprocess.run(
                [sys.executable, "-m", "benchmarks.compiled", "first", kind, scratch],
                capture_output=True,
                text=True,
                env=env,
                timeout=600,
            )
            if run.returncode != 0:
                raise RuntimeError(f"first compile ({kind}) failed: {run.stderr[-2000:]}")
            seconds.append(json.loads(run.stdout.strip().splitlines()[-1])["first_call_s"])
    return seconds


def measure(ctx) -> dict[str, Any]:
    import numpy as np
    import torch

    import proton_ik
    from benchmarks.harness import log
    from benchmarks.kernels import compiled_block

    rounds = 2 if ctx.args.quick else 3
    out_dir = ctx.scratch / "compiled"
    out_dir.mkdir(parents=True, exist_ok=True)
    block, x = compiled_block.make_block()
    torch._dynamo.reset()
    compiled = torch.compile(block)
    results: dict[str, Any] = {"mode": MODE, "steps": STEPS, "rounds": rounds}
    with torch.no_grad():
        expected = compiled(x)  # compiled plain, outside any session
        _exact_result = _exact(compiled, x, out_dir)
        results["exact"] = _exact_result
        proton_ik.start("equal", mode=MODE, out_dir=str(out_dir))
        profiled = compiled(x)
        torch.cuda.synchronize()
        proton_ik.finalize()
        results["outputs_equal"] = bool(torch.equal(profiled, expected))
        plain, session, finalize = [], [], []
        for round_ in range(rounds):
            plain.append(_steps(compiled, x, STEPS))
            proton_ik.start(f"steps{round_}", mode=MODE, out_dir=str(out_dir))
            session.append(_steps(compiled, x, STEPS))
            began = time.perf_counter()
            proton_ik.finalize()
            finalize.append(time.perf_counter() - began)
        results["step_ms"] = {
            "plain": 1e3 * float(np.median(plain)),
            "session": 1e3 * float(np.median(session)),
            "plain_rounds": [1e3 * s for s in plain],
            "session_rounds": [1e3 * s for s in session],
            "finalize_s": float(np.median(finalize)),
        }
        log(
            f"compiled step: plain {results['step_ms']['plain']:.3f} ms, session {results['step_ms']['session']:.3f} ms"
        )
    try:
        results["proton_integration"] = _proton_integration(block, x, out_dir / "proton")
    except Exception as error:  # it is theirs: a failure is reported, not fatal
        results["proton_integration"] = {"error": f"{error!r}"[:500]}
    first_plain, first_session = [], []
    for _ in range(rounds - 1):
        first_plain += _first_compile("plain", 1)
        first_session += _first_compile("session", 1)
    results["first_call_s"] = {
        "plain": float(np.median(first_plain)),
        "session": float(np.median(first_session)),
        "plain_rounds": first_plain,
        "session_rounds": first_session,
    }
    return results


def _first_call(kind: str, out_dir: str) -> float:
    """The first call of a compiled block in this (fresh) process: trace, compile and run."""
    import torch

    import proton_ik
    from benchmarks.kernels import compiled_block

    block, x = compiled_block.make_block()
    torch.cuda.synchronize()
    if kind == "session":
        proton_ik.start("first", mode=MODE, out_dir=out_dir)
    began = time.perf_counter()
    with torch.no_grad():
        torch.compile(block)(x)
    torch.cuda.synchronize()
    first = time.perf_counter() - began
    if kind == "session":
        proton_ik.finalize()
    return first


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "first" or sys.argv[2] not in ("plain", "session"):
        sys.exit("usage: python -m benchmarks.compiled first plain|session OUT_DIR")
    print(json.dumps({"first_call_s": _first_call(sys.argv[2], sys.argv[3])}))
