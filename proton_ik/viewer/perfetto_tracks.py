"""The Perfetto trace's track model and naming: a chunk's launch, SM, CTA and warp tracks,
numbered into a tree, their names and descriptors (the SM, CTA and warp ones encoded in bulk),
and the names of the slices on them.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackDescriptor

from proton_ik.viewer.byterows import Rows
from proton_ik.viewer.groups import groups
from proton_ik.viewer.perfetto_wire import _PACKET, _TRACE_PACKET, _TRACK, _key, _with
from proton_ik.viewer.pipeline import Chunk, Columns
from proton_ik.viewer.table import TimeShift

LIFETIME = "lifetime"  # the slice spanning a unit (or a launch) from its start to its end


@dataclass(frozen=True)
class _Tracks:
    """Warp tracks (one per unit and lane) and their SM, CTA and launch parents, and their uuids."""

    launch: np.ndarray  # launch number of each launch track
    kernel: np.ndarray  # its kernel name (object)
    launch_begin: np.ndarray  # the earliest and latest time of its slices here (ns)
    launch_end: np.ndarray
    sm_launch: np.ndarray  # per SM track: index of its launch track, and the SM
    sm: np.ndarray
    cta_sm: np.ndarray  # per CTA track: index of its SM track, and the CTA
    cta: np.ndarray
    warp_cta: np.ndarray  # per warp track: index of its CTA track, unit, first warp, warps per unit, lane
    unit: np.ndarray
    warp: np.ndarray
    width: np.ndarray
    lane: np.ndarray
    lanes: int  # lanes of the busiest unit
    event_track: np.ndarray  # warp track of each event
    life_track: np.ndarray  # warp track of each finished unit
    launch_uuid: np.ndarray | None = None
    sm_uuid: np.ndarray | None = None
    new_sm: np.ndarray | None = None  # SM tracks not described by an earlier chunk
    cta_uuid: np.ndarray | None = None
    warp_uuid: np.ndarray | None = None

    def numbered(
        self,
        launch_uuid: np.ndarray,
        sm_uuid: np.ndarray,
        new_sm: np.ndarray,
        cta_uuid: np.ndarray,
        warp_uuid: np.ndarray,
    ) -> _Tracks:
        return dataclasses.replace(
            self,
            launch_uuid=launch_uuid,
            sm_uuid=sm_uuid,
            new_sm=new_sm,
            cta_uuid=cta_uuid,
            warp_uuid=warp_uuid,
        )

    @property
    def count(self) -> int:
        """Track descriptors encoded in bulk: new SMs, CTAs and warps."""
        return int(self.new_sm.sum()) + len(self.cta) + len(self.unit)


def _track_tree(chunk: Chunk, lives: Columns, carried: Sequence[int]) -> _Tracks:
    """Number the chunk's tracks; ``carried``: a launch with no slices here whose track must exist."""
    events = chunk.events
    n_events = len(events["launch"])
    rows = {
        column: np.concatenate(
            [
                events[column],
                np.zeros(len(lives["launch"]), np.int64) if column == "lane" else lives[column],
            ]
        ).astype(np.int64, copy=False)
        for column in ("launch", "sm", "cta", "unit", "warp", "lane")
    }
    launch_numbers = np.union1d(rows["launch"], np.asarray(carried, dtype=np.int64))
    launch_of_row = np.searchsorted(launch_numbers, rows["launch"])
    track_of_row, first_row = groups(launch_of_row, rows["cta"], rows["unit"], rows["lane"])
    cta_of_track, cta_first_track = groups(launch_of_row[first_row], rows["cta"][first_row])
    cta_rows = first_row[cta_first_track]
    sm_of_cta, sm_first_cta = groups(launch_of_row[cta_rows], rows["sm"][cta_rows])
    sm_rows = cta_rows[sm_first_cta]

    width = np.array([chunk.widths.get(int(n), 1) for n in launch_numbers.tolist()], dtype=np.int64)
    begin = np.full(len(launch_numbers), np.iinfo(np.int64).max)
    end = np.full(len(launch_numbers), np.iinfo(np.int64).min)
    np.minimum.at(begin, launch_of_row, np.concatenate([events["begin_ns"], lives["start_ns"]]))
    np.maximum.at(end, launch_of_row, np.concatenate([events["end_ns"], lives["end_ns"]]))
    return _Tracks(
        launch=launch_numbers,
        kernel=_kernel_names(chunk, lives, launch_numbers),
        launch_begin=begin,
        launch_end=end,
        sm_launch=launch_of_row[sm_rows],
        sm=rows["sm"][sm_rows],
        cta_sm=sm_of_cta,
        cta=rows["cta"][cta_rows],
        warp_cta=cta_of_track,
        unit=rows["unit"][first_row],
        warp=rows["warp"][first_row],
        width=width[launch_of_row[first_row]],
        lane=rows["lane"][first_row],
        lanes=int(rows["lane"].max(initial=0)) + 1,
        event_track=track_of_row[:n_events],
        life_track=track_of_row[n_events:],
    )


def _kernel_names(chunk: Chunk, lives: Columns, launch_numbers: np.ndarray) -> np.ndarray:
    """The kernel of each launch track, from its rows here (or its launch-table row)."""
    names = {int(row["launch"]): str(row["kernel"]) for row in chunk.launches}
    for table in (chunk.events, lives):
        numbers, first = np.unique(table["launch"], return_index=True)
        names.update(
            zip(
                numbers.tolist(),
                (chunk.kernels[code] for code in table["kernel"][first].tolist()),
                strict=True,
            )
        )
    return np.array([names.get(n, "") for n in launch_numbers.tolist()], dtype=object)


def _descriptor(uuid: int, parent: int | None, name: str, rank: int | None) -> TrackDescriptor:
    descriptor = TrackDescriptor(uuid=uuid, name=name)
    if parent is not None:
        descriptor.parent_uuid = parent
    if rank is not None:
        descriptor.sibling_order_rank = int(rank)
    descriptor.child_ordering = TrackDescriptor.EXPLICIT
    # The UI merges same-named sibling tracks unless told not to; every track here stands alone.
    descriptor.sibling_merge_behavior = TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
    return descriptor


def _launch_description(stats: Mapping[str, Any]) -> str:
    return (
        f"kernel {stats['kernel']}, grid {stats['grid']}, stream {stats['stream']}; "
        f"SM clock {stats['mhz']:.0f} MHz ({stats['clock_source']}); {stats['events']} events from "
        f"{stats['records']} records; scope begins shifted by "
        f"{TimeShift(stats.get('time_shift_cycles', 0), stats.get('time_shift_pair_cycles', 0))}; "
        f"{stats['overwritten']} records overwritten by the ring, "
        f"{stats['lost_to_ring']} ends lost to it; {stats['unmatched_begin']} unmatched begins, "
        f"{stats['unmatched_end']} unmatched ends; {stats['units_unfinished']} unfinished units; "
        f"{stats['ctas_missing']} CTAs without a header"
    )


def _launch_slice_name(row: Mapping[str, Any]) -> str:
    """A launch's slice is named after the launch where ``launch_metadata`` named it apart from its kernel."""
    name = row.get("name")
    return name if isinstance(name, str) and name and name != row.get("kernel") else LIFETIME


_EXPLICIT_ORDER = _with(_TRACK, "child_ordering", TrackDescriptor.EXPLICIT)
_MERGE_NONE = _with(_TRACK, "sibling_merge_behavior", TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE)


def _descriptor_rows(tracks: _Tracks, lo: int, hi: int) -> list[tuple[Rows, np.ndarray]]:
    """Packets ``lo`` to ``hi`` of the new SM, CTA and warp track descriptors, in that order."""
    new_sms = np.flatnonzero(tracks.new_sm)
    bounds = np.cumsum([0, len(new_sms), len(tracks.cta), len(tracks.unit)])
    kinds = []
    for kind, (start, stop) in enumerate(itertools.pairwise(bounds)):
        a, b = max(lo, start) - start, min(hi, stop) - start
        if a >= b:
            continue
        index = np.arange(a, b)
        if kind == 0:
            sm = new_sms[index]
            uuid, parent, rank = tracks.sm_uuid[sm], tracks.launch_uuid[tracks.sm_launch[sm]], tracks.sm[sm]
            name = Rows(len(index)).constant(b"SM ").decimal(tracks.sm[sm])
        elif kind == 1:
            uuid, parent, rank = (
                tracks.cta_uuid[index],
                tracks.sm_uuid[tracks.cta_sm[index]],
                tracks.cta[index],
            )
            name = Rows(len(index)).constant(b"CTA ").decimal(tracks.cta[index])
        else:
            uuid, parent = tracks.warp_uuid[index], tracks.cta_uuid[tracks.warp_cta[index]]
            lane, rank = tracks.lane[index], tracks.unit[index] * tracks.lanes + tracks.lane[index]
            name = _warp_name(len(index), tracks.warp[index], tracks.width[index], lane)
        body = (
            Rows(len(index))
            .field(_key(_TRACK, "uuid"), uuid)
            .message(_key(_TRACK, "name"), name)
            .field(_key(_TRACK, "parent_uuid"), parent)
            .constant(_EXPLICIT_ORDER)
            .field(_key(_TRACK, "sibling_order_rank"), rank)
            .constant(_MERGE_NONE)
        )
        packet = Rows(len(index)).message(_key(_PACKET, "track_descriptor"), body)
        kinds.append((Rows(len(index)).message(_TRACE_PACKET, packet), start + index - lo))
    return kinds


def _warp_name(n: int, warp: np.ndarray, width: np.ndarray, lane: np.ndarray) -> Rows:
    """'warp 4', or 'warps 4-7' for a unit of several warps; ' overlap 1' for lanes past the first."""
    single, overlap = width <= 1, lane > 0
    return (
        Rows(n)
        .constant(b"warp ", single)
        .constant(b"warps ", ~single)
        .decimal(warp)
        .constant(b"-", ~single)
        .decimal(warp + width - 1, where=~single)
        .constant(b" overlap ", overlap)
        .decimal(lane, where=overlap)
    )


def _event_names(chunk: Chunk) -> dict[str, int]:
    """Interned event names: the lifetime first, then every scope name the chunk uses, then the
    names of its launches' slices."""
    used = np.unique(chunk.events["scope"]).tolist()
    scopes = sorted(chunk.scopes[code] for code in used)
    launches = sorted({_launch_slice_name(row) for row in chunk.launches})
    return {name: iid for iid, name in enumerate(dict.fromkeys([LIFETIME, *scopes, *launches]), start=1)}
