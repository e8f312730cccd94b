"""The track model (``tracks``) as Perfetto tracks: uuids for a chunk's tracks, their
descriptors (the SM, counter, place and unit ones encoded in bulk), and the interned names and
source locations of the slices on them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import CounterDescriptor, TrackDescriptor

from proton_ik.viewer.arrays import DENSE_ALLOWANCE, DENSE_PER_ROW, Rows
from proton_ik.viewer.perfetto.wire import PACKET, TRACE_PACKET, TRACK, field_key, field_value
from proton_ik.viewer.tables import Chunk
from proton_ik.viewer.tracks import (
    COUNTERS,
    LIFETIME,
    PLACE_PREFIX,
    Tracks,
    launch_slice_name,
    numbered_names,
    unit_name,
)


@dataclass(frozen=True)
class Numbered:
    """A chunk's tracks and their uuids, level by level; ``new_*``: not described by an earlier
    chunk (a launch going on keeps its tracks). An SM's counter tracks take the uuids after its own."""

    tracks: Tracks
    launch_uuid: np.ndarray
    sm_uuid: np.ndarray
    new_sm: np.ndarray
    place_uuid: np.ndarray
    new_place: np.ndarray
    unit_uuid: np.ndarray
    new_unit: np.ndarray

    @property
    def count(self) -> int:
        """Track descriptors encoded in bulk: new SMs, their counters, new places and unit tracks."""
        return (
            int(self.new_sm.sum()) * (1 + len(COUNTERS))
            + int(self.new_place.sum())
            + int(self.new_unit.sum())
        )


_RANK_MIN, _RANK_MAX = -(1 << 31), (1 << 31) - 1


def new_descriptor(uuid: int, parent: int | None, name: str, rank: int | None) -> TrackDescriptor:
    descriptor = TrackDescriptor(uuid=uuid, name=name)
    if parent is not None:
        descriptor.parent_uuid = parent
    if rank is not None:  # an int32 field: a rank past it (a launch numbered 2^31) sorts last
        descriptor.sibling_order_rank = min(max(int(rank), _RANK_MIN), _RANK_MAX)
    descriptor.child_ordering = TrackDescriptor.EXPLICIT
    # The UI merges same-named sibling tracks unless told not to; every track here stands alone.
    descriptor.sibling_merge_behavior = TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
    return descriptor


_EXPLICIT_ORDER = field_value(TRACK, "child_ordering", TrackDescriptor.EXPLICIT)
_MERGE_NONE = field_value(TRACK, "sibling_merge_behavior", TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE)
_COUNTER = field_key(TRACK, "counter") + bytes([CounterDescriptor().ByteSize()])  # a plain count


def descriptor_rows(numbered: Numbered, lo: int, hi: int) -> list[tuple[Rows, np.ndarray]]:
    """Packets ``lo`` to ``hi`` of the new track descriptors: SMs, their counters (first below
    them), places, unit tracks, in that order."""
    tracks = numbered.tracks
    new_sms = np.flatnonzero(numbered.new_sm)
    new_places, new_units = np.flatnonzero(numbered.new_place), np.flatnonzero(numbered.new_unit)
    counters = len(COUNTERS)
    sizes = [len(new_sms), counters * len(new_sms), len(new_places), len(new_units)]
    kinds = []
    for kind, (start, stop) in enumerate(itertools.pairwise(np.cumsum([0, *sizes]))):
        a, b = max(lo, start) - start, min(hi, stop) - start
        if a >= b:
            continue
        index = np.arange(a, b)
        counter = None
        if kind == 0:
            sm = new_sms[index]
            uuid, rank = numbered.sm_uuid[sm], tracks.sm[sm]
            parent = numbered.launch_uuid[tracks.sm_launch[sm]]
            name = numbered_names(b"SM ", tracks.sm[sm])
        elif kind == 1:
            sm, counter = new_sms[index // counters], index % counters
            uuid, parent, rank = numbered.sm_uuid[sm] + 1 + counter, numbered.sm_uuid[sm], counter - counters
            name = Rows(len(index)).pick(counter, [name.encode() for name in COUNTERS])
        elif kind == 2:
            place = new_places[index]
            uuid, rank = numbered.place_uuid[place], tracks.place[place]
            parent = numbered.sm_uuid[tracks.place_sm[place]]
            name = numbered_names(PLACE_PREFIX[tracks.timeline], tracks.place[place])
        else:
            unit = new_units[index]
            uuid, parent = numbered.unit_uuid[unit], numbered.place_uuid[tracks.unit_place[unit]]
            rank = tracks.unit_rank[unit]
            name = unit_name(Rows(len(index)), tracks.warp[unit], tracks.width[unit], tracks.lane[unit])
        body = (
            Rows(len(index))
            .field(field_key(TRACK, "uuid"), uuid)
            .message(field_key(TRACK, "name"), name)
            .field(field_key(TRACK, "parent_uuid"), parent)
        )
        if counter is not None:
            body.constant(_COUNTER)
        body.constant(_EXPLICIT_ORDER).field(field_key(TRACK, "sibling_order_rank"), rank).constant(
            _MERGE_NONE
        )
        packet = Rows(len(index)).message(field_key(PACKET, "track_descriptor"), body)
        kinds.append((Rows(len(index)).message(TRACE_PACKET, packet), start + index - lo))
    return kinds


def event_names(chunk: Chunk, launches: list[dict] | tuple = ()) -> dict[str, int]:
    """Interned event names: the lifetime first, then every scope name the chunk uses, then the
    names of its launches' slices (and of ``launches``, held over from earlier chunks)."""
    used = np.unique(chunk.events["scope"]).tolist()
    scopes = sorted(chunk.scopes[code] for code in used)
    named = sorted({launch_slice_name(row) for row in [*chunk.launches, *launches]})
    return {name: iid for iid, name in enumerate(dict.fromkeys([LIFETIME, *scopes, *named]), start=1)}


def source_locations(chunk: Chunk) -> tuple[dict[tuple[str, int], int], np.ndarray]:
    """Interned source locations: one per (file, line) the chunk's scope events have (line -1:
    none), and each event's iid, 0 where its file is unknown (sessions from before files were
    recorded). Numbered by marking a table of (file, line) keys where it is small: linear in the
    events, where sorting them is not."""
    file, line = chunk.events["file"], chunk.events["line"]
    iid = np.zeros(len(file), dtype=np.int64)
    known = file >= 0
    if not known.any():
        return {}, iid
    width = int(line.max()) + 2
    key = file[known] * width + line[known] + 1
    space = (int(file.max()) + 1) * width
    if space <= DENSE_PER_ROW * len(key) + DENSE_ALLOWANCE:
        seen = np.zeros(space, dtype=bool)
        seen[key] = True
        present = np.flatnonzero(seen)
        iid[known] = np.cumsum(seen)[key]
    else:
        present, inverse = np.unique(key, return_inverse=True)
        iid[known] = inverse.reshape(-1) + 1
    locations = {
        (chunk.files[k // width], k % width - 1): at for at, k in enumerate(present.tolist(), start=1)
    }
    return locations, iid
