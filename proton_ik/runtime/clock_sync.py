"""Pairs of host time and GPU ``%globaltimer``, read at a session's start and at its finalize, so
that the sessions of a job's ranks and GPUs share one time axis (``viewer.ranks.merge``).

Every record's time is its GPU's ``%globaltimer``, which the driver sets from the host's clock
but which drifts from it, and from other GPUs', by microseconds. A pair is read by a one-thread
kernel that polls a flag in pinned host memory and stores ``%globaltimer`` once it sees the flag
set; the host sets it between two reads of its clock (``time.time_ns``, the realtime clock, so
that hosts kept in step by NTP share it too). Of ``ROUNDS`` tries, the one with the least time
from the host's write to the GPU's read is kept. What stays in the offset is the time a store to
host memory takes to reach a polling SM (about a microsecond over PCIe, alike for the GPUs of
one host), not a kernel launch's latency, which differs between GPUs of one host by
microseconds (3 us between two H100s of one host: docs/PERFORMANCE.md).

Where the flag cannot be used (the kernel never saw it within its polls, or pinned memory is not
reachable), the pair is read as before: a kernel launched between two reads of the host's clock,
the launch latency then in the offset.
"""

from __future__ import annotations

import time
import warnings

import triton
import triton.language as tl

ROUNDS = 16
MAX_POLLS = 1 << 22  # a few milliseconds of polling: the host sets the flag within one
POLLING_SECONDS = 0.0005  # time for the launched kernel to start polling before the flag is set


@triton.jit
def _read_globaltimer(out_ptr):
    now = tl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )
    tl.store(out_ptr, now)


@triton.jit(do_not_specialize=["max_polls"])
def _globaltimer_at_flag(flag_ptr, out_ptr, max_polls):
    seen = tl.load(flag_ptr, volatile=True)
    polls = max_polls * 0
    while (seen == 0) & (polls < max_polls):
        seen = tl.load(flag_ptr, volatile=True)
        polls += 1
    now = tl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )
    tl.store(out_ptr, now)
    tl.store(out_ptr + 1, (seen != 0).to(tl.int64))


def flag_clock_pair(device: int) -> dict[str, int] | None:
    """One (host ns, %globaltimer ns) pair of ``device``, the GPU's read made when it sees the
    host's write; None where the GPU never saw it. Call it with no session mode set."""
    import torch

    with torch.cuda.device(device):
        flags = torch.zeros(ROUNDS + 1, dtype=torch.int32, pin_memory=True)
        written = flags.numpy()
        reads = torch.zeros((ROUNDS + 1, 2), dtype=torch.int64, device=device)
        written[ROUNDS] = 1
        _globaltimer_at_flag[(1,)](flags[ROUNDS:], reads[ROUNDS], MAX_POLLS, num_warps=1)  # compiles
        torch.cuda.synchronize(device)
        slots = [(flags[index:], reads[index]) for index in range(ROUNDS)]
        hosts = []
        for index, (flag, read) in enumerate(slots):
            _globaltimer_at_flag[(1,)](flag, read, MAX_POLLS, num_warps=1)
            time.sleep(POLLING_SECONDS)
            before = time.time_ns()
            written[index] = 1
            hosts.append((before, time.time_ns()))
            torch.cuda.synchronize(device)
        device_ns, seen = reads[:ROUNDS].T.tolist()
    rounds = [index for index in range(ROUNDS) if seen[index]]
    return _closest(rounds, device_ns, hosts) if rounds else None


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
    return _closest(range(ROUNDS), device_ns, hosts)


def _closest(rounds, device_ns: list[int], hosts: list[tuple[int, int]]) -> dict[str, int]:
    """The pair of the round with the least time from the host's first read to the GPU's read
    (the least latency in it), and how long the host took to read it."""
    best = min(rounds, key=lambda index: device_ns[index] - hosts[index][0])
    before, after = hosts[best]
    return {"host_ns": before, "globaltimer_ns": int(device_ns[best]), "read_ns": after - before}


def clock_pair_or_none(device: int) -> dict[str, int] | None:
    """``flag_clock_pair``, else ``clock_pair``, else None with a warning: the session goes on,
    and a merge of its sessions lines them up by their GPUs' timers alone."""
    problem: Exception | None = None
    for read in (flag_clock_pair, clock_pair):
        try:
            pair = read(device)
        except Exception as error:
            problem = error
            continue
        if pair is not None:
            return pair
    warnings.warn(
        f"proton_ik: could not read the host and GPU clocks of device {device} ({problem}); "
        "a merge of this session with others will not align their clocks",
        stacklevel=3,
    )
    return None
