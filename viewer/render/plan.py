"""Which parts a session's Perfetto trace is rendered in (``parts``): the plan alone, made from
the session file's directory before anything is decoded.

The launches are cut into parts of about ``PART_BYTES`` of stored data each (less where that
would leave the host's cores idle: ``part_bytes_for``), at launch boundaries, by their stored
sizes and their number (``LAUNCH_BYTES`` a launch) alone (``plan_parts``). Where those parts are
fewer than the host's cores, a part that is one large launch is drawn in shares of its SMs
(``share_out``, ``tables.SmShare``), a part each, so that a session of a few large launches
renders on many cores too. The plan depends on the session and
the host's cores, never on how many workers render it: one process or sixteen write the same
trace, byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from proton_ik.viewer.perfetto import MAX_PARTS
from proton_ik.viewer.render.cores import FEWEST_WORKERS
from proton_ik.viewer.session_file import StoredSession

PART_BYTES = 8 << 20  # stored bytes a part holds at least (its last launch may take it over)
# What a launch costs to render beyond its records, as the stored bytes that cost as much: a
# part of many small launches renders as slowly as one of fewer, larger ones (docs/PERFORMANCE.md,
# "Parts weighed by launches").
LAUNCH_BYTES = 16 << 10


def plan_parts(
    sizes: Sequence[int], part_bytes: int | None = None, launch_bytes: int | None = None
) -> list[tuple[int, int]]:
    """Consecutive launch ranges (first, past the last) of at least ``part_bytes`` (default
    ``PART_BYTES``) each (the last may hold less), a launch weighing its stored size and
    ``launch_bytes`` more (default ``LAUNCH_BYTES``), at most ``MAX_PARTS - 1`` of them (the last
    part number draws the host scopes)."""
    extra = LAUNCH_BYTES if launch_bytes is None else launch_bytes
    total = weighed_bytes(sizes, extra)
    per_part = max(PART_BYTES if part_bytes is None else part_bytes, -(-total // (MAX_PARTS - 1)), 1)
    parts: list[tuple[int, int]] = []
    first, held = 0, 0
    for index, size in enumerate(sizes):
        held += size + extra
        if held >= per_part:
            parts.append((first, index + 1))
            first, held = index + 1, 0
    if first < len(sizes):
        parts.append((first, len(sizes)))
    return parts


# Where a session's parts of PART_BYTES would be fewer than the host's cores, it is cut into about
# a part a core, none under MIN_PART_BYTES: a part costs its worker about 2% of a part of
# PART_BYTES beyond its launches (docs/PERFORMANCE.md, "Parts as many as the cores").
MIN_PART_BYTES = 2 << 20


def part_bytes_for(weighed: int, cores: int) -> int:
    """The bytes a part holds, of a session that weighs ``weighed`` (``weighed_bytes``), on a host
    of ``cores``: ``PART_BYTES``, or less where that would leave cores idle (only from
    ``FEWEST_WORKERS`` cores, where parts go to workers)."""
    finer = min(PART_BYTES, max(MIN_PART_BYTES, -(-weighed // cores)))
    if cores < FEWEST_WORKERS or weighed < FEWEST_WORKERS * finer:
        return PART_BYTES  # too few parts for workers: finer parts would only cost their own
    return finer


def weighed_bytes(sizes: Sequence[int], launch_bytes: int | None = None) -> int:
    """The launches' stored bytes, each weighing ``launch_bytes`` (default ``LAUNCH_BYTES``) more."""
    return sum(sizes) + (LAUNCH_BYTES if launch_bytes is None else launch_bytes) * len(sizes)


def stored_sizes(session: StoredSession) -> list[int]:
    """Each launch's stored bytes, as the session file's directory gives them."""
    return [int(launch.member.file_size) for launch in session.launches]


# A part that is one launch of at least SHARED_LAUNCH_BYTES of stored data is drawn in shares of
# its SMs, one per SHARE_BYTES, where the host has cores to spare (``share_out``). 12 MiB is about
# 750,000 records: 0.75 s of render on one core of a GPU host, where a render on forks costs about
# half a second before its parts (docs/PERFORMANCE.md); a smaller launch alone renders sooner here.
SHARED_LAUNCH_BYTES = 12 << 20
SHARE_BYTES = 2 << 20


class PartPlan(NamedTuple):
    """A part: launches ``first`` to ``past - 1``; or share ``share`` of ``shares`` of launch
    ``first``'s SMs (``tables.SmShare``)."""

    first: int
    past: int
    share: int = 0
    shares: int = 1


def share_out(parts: Sequence[tuple[int, int]], sizes: Sequence[int], cores: int) -> list[PartPlan]:
    """``parts`` (``plan_parts``), where a host of ``cores`` would leave cores idle, with each part
    that is one launch of at least ``SHARED_LAUNCH_BYTES`` cut into shares of its SMs: up to the
    cores each part has, one a ``SHARE_BYTES`` of the launch's stored data. Below
    ``FEWEST_WORKERS`` cores the parts render in one process, and a share would only add its
    decoding."""
    spare = cores // max(len(parts), 1) if cores >= FEWEST_WORKERS else 1
    plan: list[PartPlan] = []
    for first, past in parts:
        large = past == first + 1 and sizes[first] >= SHARED_LAUNCH_BYTES
        shares = max(1, min(spare, sizes[first] // SHARE_BYTES)) if large else 1
        plan.extend(PartPlan(first, past, share, shares) for share in range(shares))
    return plan if len(plan) < MAX_PARTS else [PartPlan(*part) for part in parts]
