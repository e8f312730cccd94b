"""Whole-array building blocks that the viewer's other packages share; none of them knows what a
record is.

``numbering`` numbers the distinct key tuples of many rows (tracks, threads, SMs) and keeps ids
by them (``KeyedIds``); ``segments`` finds the runs of rows sorted by their keys, with running
sums and minima that restart at each run (the pairing of scopes and of events); ``byterows``
encodes millions of small byte records at once (the writers' protobuf packets and JSON objects); ``freed`` hands memory that arrays freed
back to the operating system, and ``collector`` holds Python's cyclic collector off while the
viewer makes and drops many objects. Outside this package, use what it exports here.
"""

from __future__ import annotations

from proton_ik.viewer.arrays.byterows import Rows, assemble, join, varint_bytes
from proton_ik.viewer.arrays.collector import collector_paused
from proton_ik.viewer.arrays.freed import release_freed_memory
from proton_ik.viewer.arrays.numbering import DENSE_ALLOWANCE, DENSE_PER_ROW, KeyedIds, groups
from proton_ik.viewer.arrays.segments import run_starts, segment_cummin, segment_cumsum

__all__ = [
    "DENSE_ALLOWANCE",
    "DENSE_PER_ROW",
    "KeyedIds",
    "Rows",
    "assemble",
    "collector_paused",
    "groups",
    "join",
    "release_freed_memory",
    "run_starts",
    "segment_cummin",
    "segment_cumsum",
    "varint_bytes",
]
