"""A job's rank, for the runner's ``jobs`` section and ``tests/gpu/test_jobs_gpu.py``: run by
``torchrun`` (every rank profiles the same scoped kernel, with an all_reduce between steps), or
alone with ``--kill-after N`` (a worker killed with SIGKILL after N launches and a flush, with
more launches in flight).

Each rank prints one JSON line: its session file, its launches, and, for the launches queued
right after each all_reduce (the markers), the first record's begin in host-clock ns (the
session's %globaltimer plus the offset of its clock pairs): the same all_reduce ends on both
GPUs within its own skew, so the markers' starts (each unit's %globaltimer at its start) differ by the clocks' misalignment.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time

import torch

import proton_ik
from benchmarks.kernels.elementwise import short_add_kernel as add_kernel
from proton_ik.contract.session_format import host_offset_ns
from proton_ik.viewer import read_session

N, BLOCK, STEPS = 1 << 22, 1024, 10
WARPS, SCOPES = 4, 3  # the suite's short add kernel: Triton's default warps, 3 scopes per warp
IN_FLIGHT = 20  # launches made after the flush and before the kill
SLEEP_CYCLES = 400_000_000  # about 0.2 s at 2 GHz: far longer than queueing the steps takes


def rank_job(out_dir: str) -> None:
    import torch.distributed as dist

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    out, token = torch.empty_like(x), torch.ones(1, device="cuda")
    add_kernel[(N // BLOCK,)](x, y, out, N, BLOCK=BLOCK)  # compiled before the session
    with proton_ik.instrumented():  # the session's binary too, compiled and loaded: loading a
        # module waits for the device, which would end the sleep below at the first launch
        add_kernel.warmup(x, y, out, N, BLOCK=BLOCK, grid=(N // BLOCK,))._init_handles()
    dist.all_reduce(token)
    torch.cuda.synchronize()
    proton_ik.start("dist", out_dir=out_dir)
    # Every step is queued while the GPU sleeps, so that each marker starts when its all_reduce
    # ends, not when a host that fell behind its GPU queued it (an add of 4M floats takes 15 us
    # on an H200, less than a step's host work: the GPU caught up after a few steps; and a
    # compile inside the steps would outlast the sleep).
    slept = time.perf_counter_ns()
    torch.cuda._sleep(SLEEP_CYCLES)
    queued = []  # ns after the sleep was queued at which each marker was: all within the sleep
    for _ in range(STEPS):
        add_kernel[(N // BLOCK,)](x, y, out, N, BLOCK=BLOCK)
        dist.all_reduce(token)
        add_kernel[(1,)](x, y, out, BLOCK, BLOCK=BLOCK)  # the marker: queued behind the all_reduce
        queued.append(time.perf_counter_ns() - slept)
    torch.cuda.synchronize()
    result = proton_ik.finalize()
    info = read_session(result.session_path).info
    events = result.events
    markers = sorted(int(launch) for launch in events["launch"].unique() if int(launch) % 2 == 1)
    offset = host_offset_ns(info) or 0
    begins = [int(events.loc[events["launch"] == launch, "begin_ns"].min()) + offset for launch in markers]
    # The same from the units' own %globaltimer reads at their start, with no clock fit between
    units = result.trace.units
    starts = [
        int(units.loc[units["launch"] == launch, "globaltimer_start_ns"].min()) + offset for launch in markers
    ]
    counts = events.groupby("launch").size()
    print(
        json.dumps(
            {
                "rank": dist.get_rank(),
                "session": str(result.session_path),
                "launches": int(result.launches),
                "counts": {str(k): int(v) for k, v in counts.items()},
                "marker_begins_host_ns": begins,
                "marker_starts_host_ns": starts,
                "markers_queued_ns": queued,
                "clock_pairs": info.get("clock_pairs"),
            }
        ),
        flush=True,
    )
    dist.destroy_process_group()


def killed_job(out_dir: str, launches: int) -> None:
    x, y = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
    out = torch.empty_like(x)
    proton_ik.start("killed", out_dir=out_dir)
    for _ in range(launches):
        add_kernel[((1 << 20) // BLOCK,)](x, y, out, 1 << 20, BLOCK=BLOCK)
    proton_ik.flush()
    for _ in range(IN_FLIGHT):
        add_kernel[((1 << 20) // BLOCK,)](x, y, out, 1 << 20, BLOCK=BLOCK)
    print(json.dumps({"flushed": launches, "launched": launches + IN_FLIGHT}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--kill-after", type=int, default=0)
    args = parser.parse_args()
    if args.kill_after:
        killed_job(args.out_dir, args.kill_after)
    else:
        rank_job(args.out_dir)
