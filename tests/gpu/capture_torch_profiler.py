"""Capture a session and a ``torch.profiler`` trace of the same steps, the pair the CPU tests of
``viewer.torch_profiler`` read (tests/data/torch_profiler.pik, torch_profiler_trace.json.gz).

Run on a GPU machine from the repository root: ``python tests/gpu/capture_torch_profiler.py
OUT_DIR``. Under ``torch.profiler.profile(activities=[CPU, CUDA])``, a session with
``unscoped=kernel``: three steps of a compiled LayerNorm + GELU (Inductor's kernel) and a scoped
user kernel timed at about 10 us, 100 us, 1 ms and 10 ms, then two launches on a side stream.
Writes OUT_DIR/torch_profiler.pik and OUT_DIR/torch_profiler_trace.json, and prints, as JSON,
the launches and how far they fell from CUPTI's kernels after alignment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from torch.profiler import ProfilerActivity, profile, record_function

import proton_ik
import proton_ik.language as pl
from proton_ik.viewer.torch_profiler.kineto import read_kineto
from proton_ik.viewer.torch_profiler.timeline import launch_spans, merge_torch_trace

BLOCK, CTAS = 512, 264
SPINS = (2_000, 20_000, 200_000, 2_000_000)  # about 10 us, 100 us, 1 ms and 10 ms on an H200


@triton.jit
def busy_kernel(x_ptr, out_ptr, n_iter, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("load"):
        v = tl.load(x_ptr + offs)
    with pl.scope("spin"):
        for _ in range(n_iter):
            v = v * 0.999999 + 0.5
    with pl.scope("store"):
        tl.store(out_ptr + offs, v)


def small(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(a + b, (a.shape[-1],)))


def capture(out: Path, steps: int = 3) -> dict:
    x = torch.randn(BLOCK * CTAS, device="cuda")
    y = torch.empty_like(x)

    def busy(spins: int) -> None:
        busy_kernel[(CTAS,)](x, y, spins, BLOCK=BLOCK, num_warps=4)

    compiled = torch.compile(small)
    a = torch.randn(256, 1024, device="cuda")
    b = torch.randn_like(a)
    compiled(a, b)
    busy(16)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        proton_ik.start(
            "torch_profiler", mode="instrumentation:unscoped=kernel", out_dir=str(out), formats=()
        )
        for step in range(steps):
            with record_function(f"step{step}"):
                compiled(a, b)
                for spins in SPINS:
                    busy(spins)
        with torch.cuda.stream(side):
            busy(SPINS[1])
            busy(SPINS[1])
        torch.cuda.synchronize()
        result = proton_ik.finalize()
    trace_path = out / "torch_profiler_trace.json"
    prof.export_chrome_trace(str(trace_path))
    _, (alignment,) = merge_torch_trace([out / "torch_profiler.pik"], trace_path, out / "merged.pftrace")
    spans, _ = launch_spans(out / "torch_profiler.pik")
    kernels = read_kineto(trace_path).kernels
    offset = alignment.offset_ns or 0
    unmatched = []
    for launch in spans[spans["launch"].isin(alignment.unmatched)].itertuples():
        same = kernels[kernels["name"] == launch.kernel]
        nearest = same.iloc[(same["begin_ns"] - launch.start_ns - offset).abs().argsort()[:2]]
        unmatched.append(
            {
                "launch": int(launch.launch),
                "kernel": launch.kernel,
                "ns": int(launch.end_ns - launch.start_ns),
                "nearest_begin_minus_ours": (nearest["begin_ns"] - launch.start_ns - offset).tolist(),
                "nearest_end_minus_ours": (nearest["end_ns"] - launch.end_ns - offset).tolist(),
            }
        )
    return {
        "unmatched_detail": unmatched,
        "launches": result.launches,
        "matched": len(alignment.matches),
        "unmatched": alignment.unmatched,
        "streams": {str(k): v for k, v in alignment.streams.items()},
        "errors": alignment.errors(),
    }


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    print(json.dumps(capture(folder)))
