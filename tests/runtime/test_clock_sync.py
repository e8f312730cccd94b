"""The host/GPU clock pair's kernels (``runtime.clock_sync``) compile for sm_90 as they must work:
the flag kernel polls pinned host memory with volatile loads (a cached load would never see the
host's write) and reads %globaltimer only after the poll."""

from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from proton_ik.runtime import clock_sync


def test_the_flag_kernel_polls_with_volatile_loads_then_reads_the_timer():
    source = ASTSource(
        clock_sync._globaltimer_at_flag,
        signature={"flag_ptr": "*i32", "out_ptr": "*i64", "max_polls": "i32"},
    )
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    lines = ptx.splitlines()
    polls = [i for i, line in enumerate(lines) if "ld.volatile.global" in line]
    timer = [i for i, line in enumerate(lines) if "%globaltimer" in line]
    assert polls and timer and max(polls) < min(timer)


def test_the_pair_kept_is_the_round_with_the_least_latency():
    hosts = [(100, 130), (200, 220), (300, 390)]
    device = [1_105, 1_202, 1_330]  # latencies +1005, +1002, +1030 from each host read
    assert clock_sync._closest(range(3), device, hosts) == {
        "host_ns": 200,
        "globaltimer_ns": 1_202,
        "read_ns": 20,
    }
    assert clock_sync._closest([0, 2], device, hosts)["host_ns"] == 100  # round 1 never saw the flag
