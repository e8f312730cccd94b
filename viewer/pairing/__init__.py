"""Records to events, arrays in and arrays out.

``events`` pairs each scope's begins with its ends within a unit (the latest open begin first,
with what the ring overwrote accounted for); ``async_events`` pairs an event's starts with its
ends across the warps of a CTA, in time order, and picks out marks and values. Outside this
package, use what it exports here.
"""

from __future__ import annotations

from proton_ik.viewer.pairing.async_events import (
    MATCHED,
    NO_END,
    NO_START,
    STATUSES,
    Marks,
    Spans,
    marks,
    pair_events,
)
from proton_ik.viewer.pairing.events import (
    LOST_TO_RING,
    UNMATCHED_BEGIN,
    UNMATCHED_END,
    UNMATCHED_KINDS,
    Pairs,
    Unmatched,
    pair_records,
)

__all__ = [
    "LOST_TO_RING",
    "MATCHED",
    "NO_END",
    "NO_START",
    "STATUSES",
    "UNMATCHED_BEGIN",
    "UNMATCHED_END",
    "UNMATCHED_KINDS",
    "Marks",
    "Pairs",
    "Spans",
    "Unmatched",
    "marks",
    "pair_events",
    "pair_records",
]
