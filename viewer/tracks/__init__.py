"""The track model: the one home of the hierarchy launch > SM > place > unit > lane, which both
trace writers draw and both readers parse back.

``model`` numbers a chunk's tracks (``track_tree``), names them and parses the names back, and
says what a slice's args are; ``slots`` packs an SM's CTAs into as few slots as ever ran at once
(and counts intervals in flight, for the counter tracks). Outside this package, use what it
exports here.
"""

from __future__ import annotations

from proton_ik.viewer.tracks.model import (
    CLUSTER_TRACK,
    COUNTERS,
    FILE_ARG,
    HOST_ARGS,
    HOST_TRACK,
    KIND_ARG,
    KINDS,
    LAUNCH_ARGS,
    LAUNCH_TOTALS,
    LIFETIME,
    PLACE_PREFIX,
    SLICE_ARGS,
    TIMELINES,
    TREE_COLUMNS,
    OpenTracks,
    Tracks,
    check_timeline,
    launch_name,
    launch_slice_name,
    numbered_names,
    parse_lane,
    parse_launch_name,
    parse_process_name,
    process_name,
    root_name,
    session_name,
    stacked,
    thread_name,
    track_tree,
    unit_name,
)
from proton_ik.viewer.tracks.slots import Steps, steps

__all__ = [
    "CLUSTER_TRACK",
    "COUNTERS",
    "FILE_ARG",
    "HOST_ARGS",
    "HOST_TRACK",
    "KINDS",
    "KIND_ARG",
    "LAUNCH_ARGS",
    "LAUNCH_TOTALS",
    "LIFETIME",
    "PLACE_PREFIX",
    "SLICE_ARGS",
    "TIMELINES",
    "TREE_COLUMNS",
    "OpenTracks",
    "Steps",
    "Tracks",
    "check_timeline",
    "launch_name",
    "launch_slice_name",
    "numbered_names",
    "parse_lane",
    "parse_launch_name",
    "parse_process_name",
    "process_name",
    "root_name",
    "session_name",
    "stacked",
    "steps",
    "thread_name",
    "track_tree",
    "unit_name",
]
