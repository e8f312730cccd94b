"""Pairs of host time and GPU ``%globaltimer``, read at a session's start and at its finalize, so
that the sessions of a job's ranks and GPUs share one time axis (``viewer.merge``).

Every record's time is its GPU's ``%globaltimer``, which the driver sets from the host's clock
but which drifts from it, and from other GPUs', by microseconds. A pair is read by launching a
one-thread kernel that stores ``%globaltimer``, between two reads of the host's clock
(``time.time_ns``, the realtime clock, so that hosts kept in step by NTP share it too): of
``ROUNDS`` tries, the one with the least time from the host read to the GPU's is kept, since its
launch latency is the closest to the shortest there is. That latency (a few microseconds,
about the same for every GPU of one host) stays in the offset: GPUs are aligned to each other
to the spread of their shortest latencies, not to the host's clock.
"""

from __future__ import annotations

import time
import warnings

import triton
import triton.language as tl

ROUNDS = 16


@triton.jit
def _read_globaltimer(out_ptr):
    now = tl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )
    tl.store(out_ptr, now)


def clock_pair(device: int) -> dict[str, int]:
    """One (host ns, %globaltimer ns) pair of ``device``, and the host time the read took.
    Call it with no session mode set: the kernel must compile plain."""
    import torch

    with torch.cuda.device(device):
        times = torch.zeros(ROUNDS + 1, dtype=torch.int64, device=device)
        _read_globaltimer[(1,)](times[ROUNDS:], num_warps=1)  # compiles or loads: not timed
        torch.cuda.synchronize(device)
        slots = [times[index:] for index in range(ROUNDS)]  # made before the timed reads
        hosts = []
        for slot in slots:
            before = time.time_ns()
            _read_globaltimer[(1,)](slot, num_warps=1)
            torch.cuda.synchronize(device)
            hosts.append((before, time.time_ns()))
        device_ns = times[:ROUNDS].tolist()
    best = min(range(ROUNDS), key=lambda index: device_ns[index] - hosts[index][0])
    before, after = hosts[best]
    return {"host_ns": before, "globaltimer_ns": int(device_ns[best]), "read_ns": after - before}


def clock_pair_or_none(device: int) -> dict[str, int] | None:
    """``clock_pair``, or None with a warning where it cannot be read: the session goes on, and a
    merge of its sessions lines them up by their GPUs' timers alone."""
    try:
        return clock_pair(device)
    except Exception as error:
        warnings.warn(
            f"proton_ik: could not read the host and GPU clocks of device {device} ({error}); "
            "a merge of this session with others will not align their clocks",
            stacklevel=3,
        )
        return None
