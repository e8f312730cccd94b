"""When a full device pool held the program back: each device's waits (``PoolStall``, counted by
the drains), and the warning finalize gives once for the whole session, with the pool that
would not have waited."""

from __future__ import annotations

import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class PoolStall:
    """How long a device's full pool held the program back: the user's threads waited ``waits``
    times, ``seconds`` in all, for earlier launches' records to reach the file. ``needed_bytes``:
    the pool every launch of the session took together (a pool that large never waits)."""

    device: int
    waits: int
    seconds: float
    pool_bytes: int
    needed_bytes: int


STALL_WARN_SECONDS = 0.01  # less than this spent waiting for the pool goes unsaid


def warn_of_stalls(stalls: list) -> float:
    """Say, once per session, when a full device pool held the program back and how large a pool
    would not have (``PoolStall``); return the seconds waited."""
    waited = sum(stall.seconds for stall in stalls)
    if waited < STALL_WARN_SECONDS:
        return waited
    said = []
    for stall in stalls:
        said.append(
            f"device {stall.device}: its pool of {stall.pool_bytes >> 20} MiB filled, and launches "
            f"waited {stall.waits} times, {stall.seconds:.2f} s in all, for earlier launches' records "
            f"to reach the file; the session's launches took {stall.needed_bytes / (1 << 30):.2f} GiB "
            f"of pool in all (pool_bytes={pool_size_text(stall.needed_bytes)} would have held them)"
        )
    warnings.warn(
        "proton_ik: the program ran slower than it would unprofiled while it waited for the "
        f"device pool: {'; '.join(said)}. Pass a larger pool_bytes to proton_ik.start() where the "
        "device has the memory, or profile fewer steps (start later, finalize sooner)",
        stacklevel=4,  # the user's call of proton_ik.finalize
    )
    return waited


def pool_size_text(needed: int) -> str:
    """The pool that holds ``needed`` bytes, as a user would type it: a power of two of MiB, in
    GiB from 1 GiB up (``64 << 20``, ``4 << 30``)."""
    mib = 1 << max(0, (max(needed, 1) - 1).bit_length() - 20)
    return f"{mib >> 10} << 30" if mib >= 1024 else f"{mib} << 20"
