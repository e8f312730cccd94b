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
import warnings
from pathlib import Path
from typing import Any

MODE = "instrumentation:unscoped=kernel"
# The sessions timed: the user's scoped kernel alone records, or every kernel does; and every
# kernel with a device pool that holds all the records of the steps timed (none waits for the
# drain: the profile of a window of steps, flushed at its end).
SESSION_MODES = {"session_user": "instrumentation", "session": MODE, "session_window": MODE}
WINDOW_POOL_BYTES = 8 << 30
POOL_BYTES = {"session_window": WINDOW_POOL_BYTES}
STEPS = 50  # steps of a round: the records of the later ones leave the device pool as they run
SHORT_STEPS = 10  # the first steps of a session, whose records all stay in the device pool
# First calls in a fresh process: plain, in a session (compiles in this process: every kernel
# records), and in a session with Inductor's compile workers kept (each kernel compiled plain in
# a worker, then again under the mode here): the measurement behind compiling in the process.
FIRST_CALL_KINDS = ("plain", "session", "session_workers")
STEP_ROUNDS = 7
FIRST_CALL_ROUNDS = 2
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
    # Triton's kernels among what CUPTI saw: Inductor's (named triton_*) and the user's own.
    triton_kernel = compiled_block.block_attention_kernel.fn.__name__
    cupti_kernels = sorted(
        e.name
        for e in cupti.events()
        if e.device_type.name == "CUDA" and (e.name.startswith("triton_") or e.name == triton_kernel)
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


def _fresh_process(task: str, kind: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``python -m benchmarks.compiled TASK KIND DIR`` in a fresh process with empty Inductor and
    Triton caches: what it printed last, as JSON."""
    with tempfile.TemporaryDirectory(prefix="pik_compiled_") as scratch:
        env = dict(
            os.environ,
            TORCHINDUCTOR_CACHE_DIR=str(Path(scratch) / "inductor"),
            TRITON_CACHE_DIR=str(Path(scratch) / "triton"),
            PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent), *sys.path]),
            **(env or {}),
        )
        run = subprocess.run(
            [sys.executable, "-m", "benchmarks.compiled", task, kind, scratch],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        if run.returncode != 0:
            said = (run.stderr.strip() or run.stdout.strip())[-2000:]
            raise RuntimeError(f"{task} ({kind}) exited with {run.returncode}: {said}")
        return json.loads(run.stdout.strip().splitlines()[-1])


def _proton_integration() -> dict[str, Any]:
    """PyTorch's Proton integration on the same block, in a process of its own: Inductor reads
    its switch when it first writes a kernel's imports, so it must be on from the start."""
    return _fresh_process("steps", "proton", {"TORCHINDUCTOR_TRITON_PROTON_PROFILING": "1"})


def measure(ctx) -> dict[str, Any]:
    import numpy as np
    import torch

    import proton_ik
    from benchmarks.harness import log
    from benchmarks.kernels import compiled_block

    # Steps are cheap and a shared host's noise large: many rounds; first calls cost a fresh
    # process each, so fewer.
    rounds = 2 if ctx.args.quick else STEP_ROUNDS
    out_dir = ctx.scratch / "compiled"
    out_dir.mkdir(parents=True, exist_ok=True)
    block, x = compiled_block.make_block()
    torch._dynamo.reset()
    compiled = torch.compile(block)
    results: dict[str, Any] = {"mode": MODE, "steps": STEPS, "short_steps": SHORT_STEPS, "rounds": rounds}
    results["block"] = {
        "batch": compiled_block.BATCH,
        "seq": compiled_block.SEQ,
        "width": compiled_block.WIDTH,
        "heads": compiled_block.HEADS,
    }
    with torch.no_grad():
        expected = compiled(x)  # compiled plain, outside any session
        results["exact"] = _exact(compiled, x, out_dir)
        proton_ik.start("equal", mode=MODE, out_dir=str(out_dir))
        profiled = compiled(x)
        torch.cuda.synchronize()
        proton_ik.finalize()
        results["outputs_equal"] = bool(torch.equal(profiled, expected))
        timed: dict[str, list[float]] = {"plain": []}
        finalize: dict[str, list[float]] = {}
        waited: dict[str, list[float]] = {}  # seconds the steps waited for room in the pool
        for round_ in range(rounds):
            timed["plain"].append(_steps(compiled, x, STEPS))
            for label, mode in SESSION_MODES.items():
                # No trace rendered at finalize: the finalize timed is the session file's alone.
                pool = {"pool_bytes": POOL_BYTES[label]} if label in POOL_BYTES else {}
                proton_ik.start(f"steps_{round_}", mode=mode, out_dir=str(out_dir), formats=(), **pool)
                compiled(x)  # the launchers for this mode: compiled in the first round, kept after
                timed.setdefault(f"{label}_short", []).append(_steps(compiled, x, SHORT_STEPS))
                timed.setdefault(label, []).append(_steps(compiled, x, STEPS))
                began = time.perf_counter()
                with warnings.catch_warnings():  # the pool's stall, said in the report instead
                    warnings.simplefilter("ignore")
                    done = proton_ik.finalize()
                finalize.setdefault(label, []).append(time.perf_counter() - began)
                waited.setdefault(label, []).append(done.pool_wait_seconds)
                # The session file (up to GBs) gone and the host's dirty pages written out before
                # the next timed steps: the kernel's writeback would slow whatever comes next.
                for path in done.paths.values():
                    Path(path).unlink(missing_ok=True)
                os.sync()
        results["step_ms"] = {label: 1e3 * float(np.median(seconds)) for label, seconds in timed.items()}
        results["step_ms"]["rounds"] = {label: [1e3 * s for s in seconds] for label, seconds in timed.items()}
        results["step_ms"]["finalize_s"] = {label: float(np.median(s)) for label, s in finalize.items()}
        results["step_ms"]["pool_wait_s"] = {label: float(np.median(s)) for label, s in waited.items()}
        results["session_modes"] = SESSION_MODES
        results["window_pool_bytes"] = WINDOW_POOL_BYTES
        log(
            f"compiled step (ms): {', '.join(f'{k} {v:.3f}' for k, v in results['step_ms'].items() if isinstance(v, float))}"
        )
    try:
        results["proton_integration"] = _proton_integration()
    except Exception as error:  # it is theirs: a failure is reported, not fatal
        results["proton_integration"] = {"error": f"{error!r}"[:500]}
    first: dict[str, list[float]] = {kind: [] for kind in FIRST_CALL_KINDS}
    for _ in range(1 if ctx.args.quick else FIRST_CALL_ROUNDS):
        for kind in FIRST_CALL_KINDS:
            first[kind].append(_fresh_process("first", kind)["first_call_s"])
    results["first_call_s"] = {kind: float(np.median(seconds)) for kind, seconds in first.items()}
    results["first_call_s"]["rounds"] = first
    return results


def _proton_steps(out_dir: str) -> dict[str, Any]:
    """In a process started with TORCHINDUCTOR_TRITON_PROTON_PROFILING=1: the compiled block's
    step under PyTorch's Proton integration, which profiles and writes a trace in every step."""
    import torch

    from benchmarks.kernels import compiled_block

    torch._inductor.config.triton.proton_output_dir = out_dir
    block, x = compiled_block.make_block()
    compiled = torch.compile(block)
    with torch.no_grad():
        compiled(x)
        per_step = _steps(compiled, x, PROTON_STEPS)
    return {"step_ms": 1e3 * per_step, "steps": PROTON_STEPS}


def _first_call(kind: str, out_dir: str) -> float:
    """The first call of a compiled block in this (fresh) process: trace, compile and run."""
    import torch

    import proton_ik
    from benchmarks.kernels import compiled_block

    block, x = compiled_block.make_block()
    torch.cuda.synchronize()
    if kind != "plain":
        from torch._inductor.async_compile import AsyncCompile

        workers = AsyncCompile.__dict__["use_process_pool"]
        proton_ik.start("first", mode=MODE, out_dir=out_dir)
        if kind == "session_workers":  # undo proton_ik's choice of compiling in this process
            AsyncCompile.use_process_pool = workers
    began = time.perf_counter()
    with torch.no_grad():
        torch.compile(block)(x)
    torch.cuda.synchronize()
    first = time.perf_counter() - began
    if kind != "plain":
        proton_ik.finalize()
    return first


if __name__ == "__main__":
    task = tuple(sys.argv[1:3])
    if len(sys.argv) != 4 or task not in {
        *(("first", kind) for kind in FIRST_CALL_KINDS),
        ("steps", "proton"),
    }:
        sys.exit(
            "usage: python -m benchmarks.compiled (first plain|session|session_workers)|(steps proton) DIR"
        )
    if task[0] == "first":
        print(json.dumps({"first_call_s": _first_call(task[1], sys.argv[3])}))
    else:
        print(json.dumps(_proton_steps(sys.argv[3])))
