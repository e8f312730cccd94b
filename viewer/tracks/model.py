"""The track model both trace writers draw and both readers parse back: one home for the
hierarchy (launch > SM > place > unit > lane), its numbering, its names and what its slices say.

A chunk's slices (scope events, then finished units' lifetimes) are placed on unit tracks, one
per (place, unit, lane): lane 0 for a unit's nested scopes, 1, 2, ... for scopes that overlap
them without nesting. A unit track's parent is its place, whose parent is the launch's SM track,
whose parent is the launch's track. A place is, by ``timeline``:

- ``"slots"`` (the default): a CTA slot of the SM (``slots.assign_slots``). An SM has as many
  slots as CTAs ever ran on it at once, so the tracks are bounded by SMs x resident CTAs x units,
  whatever the grid; each slice says its CTA.
- ``"ctas"``: the CTA itself, a track per CTA: for small grids.

Perfetto draws the tree as nested tracks, with two counter tracks per SM (``COUNTERS``); Chrome
JSON as a process per SM track and a thread per unit track. Names, and the parsers that read
them back::

    launch 3: matmul_kernel                   launch track (Chrome: the process name's start)
    SM 17                                     SM track (Chrome: "launch 3: matmul_kernel / SM 17")
    slot 2, or CTA 42                         place track (Chrome: the thread name's start)
    warp 4, warps 4-7, warp 4 overlap 1       unit track (Chrome: "slot 2 warp 4")
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from proton_ik.contract.tags import RecordKind
from proton_ik.viewer.arrays import KeyedIds, Rows, groups
from proton_ik.viewer.tables import Chunk, Columns
from proton_ik.viewer.tracks.slots import FREE, assign_slots

LIFETIME = "lifetime"  # the slice spanning a unit (or a launch) from its start to its end
HOST_TRACK = "host scopes"  # the track of host scope slices, beside the launch tracks
CLUSTER_TRACK = "clusters"  # under a launch: a slice per thread-block cluster (``perfetto.clusters``)
ROOT_PREFIX = "proton_ik: "  # the root track's name: this, then the session's name
TIMELINES = ("slots", "ctas")  # what a place is: an SM's CTA slot, or a CTA
DEFAULT_TIMELINE = "slots"
PLACE_PREFIX = {"slots": b"slot ", "ctas": b"CTA "}
COUNTERS = ("resident CTAs", "scopes in flight")  # an SM track's counter tracks, in this order

# The whole-number args of a slice on a unit track: where it ran, its cycles and source line
# (scopes), and its records (lifetimes), its CTA's thread-block cluster and rank there (where
# recorded); and the text arg that says what it is.
SLICE_ARGS = ("cta", "sm", "warp", "cycles", "line", "records", "overwritten", "cluster", "cluster_rank")
KIND_ARG = "kind"  # text: what a slice is, one of KINDS
FILE_ARG = "file"  # text: a scope's source file (Perfetto: its interned source location's)
KINDS = (RecordKind.SCOPE.name.lower(), "unit", "launch")  # from scope records, unit headers, a launch
# A launch's totals, each a whole number, as its slice's args; its reader needs every one.
LAUNCH_TOTALS = (
    "events", "records", "time_shift_cycles", "time_shift_pair_cycles", "overwritten", "lost_to_ring",
    "unmatched_begin", "unmatched_end", "units_unfinished", "ctas_missing",
)  # fmt: skip
# A launch's slice carries these (where its metadata has them), "config" and "problems" as a
# dictionary and an array.
LAUNCH_ARGS = (
    "kernel", "name", "host_scope", "launch", "device", "stream", "graph", "replay", "grid",
    "warps_per_unit", "capacity", "capacity_source", "capacity_bound", "capacity_reason", "sampled",
    "ctas", "units", *LAUNCH_TOTALS, "mhz", "clock_source", "config", "launch_metrics", "problems",
)  # fmt: skip
HOST_ARGS = ("launches", "first_launch", "last_launch")  # of a host scope's slice

_NUMBER = r"-?\d{1,18}"  # a launch number that fits int64
_LAUNCH_NAME = re.compile(rf"launch (?P<launch>{_NUMBER}): (?P<kernel>.*)")
_SM_SEPARATOR = " / "  # between a Chrome process's launch and its SM
_PROCESS_NAME = re.compile(rf"launch (?P<launch>{_NUMBER}): (?P<kernel>.*) / SM (?P<sm>\d{{1,9}})")
_UNIT_NAME = re.compile(
    r"(?:(?:slot|CTA) \d{1,9} )?warps? \d{1,9}(?:-\d{1,9})?(?: overlap (?P<lane>\d{1,9}))?"
)


def check_timeline(timeline: object) -> str:
    """The timeline asked for (None: the default), or an error that lists the choices."""
    if timeline is None:
        return DEFAULT_TIMELINE
    if timeline not in TIMELINES:
        raise ValueError(
            f"timeline={timeline!r}: choose 'slots' (a track per CTA slot of an SM, the default: "
            "bounded by SMs x resident CTAs, whatever the grid) or 'ctas' (a track per CTA, for "
            "small grids)"
        )
    return str(timeline)


@dataclass
class OpenTracks:
    """The tracks of a launch whose pieces go on into the next chunk, by key, with a writer's id
    for each, so that its later pieces draw on them: SMs by number; with slots, places by (SM,
    slot) and unit tracks by (SM, slot, unit, lane), and when each slot's last CTA ended. (A
    CTA's pieces never span chunks, so CTA places need no keeping.)"""

    number: int
    sms: dict[int, int] = field(default_factory=dict)
    places: KeyedIds = field(default_factory=lambda: KeyedIds.empty(2))  # (SM, slot)
    units: KeyedIds = field(default_factory=lambda: KeyedIds.empty(4))  # (SM, slot, unit, lane)
    busy: dict[int, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Tracks:
    """A chunk's tracks, level by level (each a parent index into the level above, and its
    number), its CTAs, and the unit track and CTA of every slice."""

    timeline: str
    launch: np.ndarray  # per launch track: the launch number
    kernel: np.ndarray  # its kernel name (object)
    launch_begin: np.ndarray  # the earliest and latest time of its slices here (ns)
    launch_end: np.ndarray
    sm_launch: np.ndarray  # per SM track: index of its launch track, and the SM
    sm: np.ndarray
    busy: np.ndarray  # with slots: per SM track and slot, when its last CTA ended
    place_sm: np.ndarray  # per place track: index of its SM track, and its slot or CTA
    place: np.ndarray
    unit_place: np.ndarray  # per unit track: index of its place, unit, first warp, warps per unit, lane
    unit: np.ndarray
    warp: np.ndarray
    width: np.ndarray
    lane: np.ndarray
    lanes: int  # lanes of the busiest unit
    cta: np.ndarray  # per CTA: its number, SM track, and first begin and last end of its slices
    cta_sm: np.ndarray
    cta_begin: np.ndarray
    cta_end: np.ndarray
    cta_cluster: np.ndarray  # per CTA: its thread-block cluster and rank there (-1: not recorded)
    cta_cluster_rank: np.ndarray
    row_track: np.ndarray  # per slice (scope events, then lifetimes): its unit track and its CTA
    row_cta: np.ndarray
    events: int  # slices that are scope events; the rest are lifetimes

    @property
    def unit_sm(self) -> np.ndarray:
        """The SM track of each unit track."""
        return self.place_sm[self.unit_place]

    @property
    def unit_rank(self) -> np.ndarray:
        """Where a unit track sorts among its place's: by unit, then lane."""
        return self.unit * self.lanes + self.lane

    @property
    def event_track(self) -> np.ndarray:
        return self.row_track[: self.events]

    @property
    def life_track(self) -> np.ndarray:
        return self.row_track[self.events :]

    def launch_index(self, number: int) -> int | None:
        at = int(np.searchsorted(self.launch, number))
        return at if at < len(self.launch) and self.launch[at] == number else None

    def known(self, open_tracks: OpenTracks | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ids ``open_tracks`` keeps for this chunk's SM, place and unit tracks; -1 for new ones."""
        sm_id = np.full(len(self.sm), -1, dtype=np.int64)
        place_id = np.full(len(self.place), -1, dtype=np.int64)
        unit_id = np.full(len(self.unit), -1, dtype=np.int64)
        if open_tracks is None or (at := self.launch_index(open_tracks.number)) is None:
            return sm_id, place_id, unit_id
        sms = np.flatnonzero(self.sm_launch == at)
        for i in sms.tolist():
            sm_id[i] = open_tracks.sms.get(int(self.sm[i]), -1)
        if not len(open_tracks.places.ids):  # CTA places: a CTA never comes back in a later piece
            return sm_id, place_id, unit_id
        places = np.flatnonzero(np.isin(self.place_sm, sms))
        place_id[places] = open_tracks.places.find(self._place_keys(places))
        units = np.flatnonzero(np.isin(self.unit_place, np.flatnonzero(place_id >= 0)))
        unit_id[units] = open_tracks.units.find(self._unit_keys(units))
        return sm_id, place_id, unit_id

    def keep(
        self, number: int, ids: tuple[np.ndarray, np.ndarray, np.ndarray], before: OpenTracks | None
    ) -> OpenTracks:
        """The tracks of launch ``number`` (here and in ``before``, its earlier pieces) with their
        ids, for its next piece."""
        kept = before if before is not None and before.number == number else OpenTracks(number)
        at = self.launch_index(number)
        if at is None:
            return kept
        sm_id, place_id, unit_id = ids
        sms = np.flatnonzero(self.sm_launch == at)
        kept.sms.update((int(self.sm[i]), int(sm_id[i])) for i in sms.tolist())
        if self.timeline != "slots":
            return kept
        places = np.flatnonzero(np.isin(self.place_sm, sms))
        kept.places = kept.places.updated(self._place_keys(places), place_id[places])
        units = np.flatnonzero(np.isin(self.unit_place, places))
        kept.units = kept.units.updated(self._unit_keys(units), unit_id[units])
        kept.busy.update((int(self.sm[i]), self.busy[i]) for i in sms.tolist())
        return kept

    def _place_keys(self, places: np.ndarray) -> np.ndarray:
        """Rows of (SM, place) of these place tracks."""
        return np.stack([self.sm[self.place_sm[places]], self.place[places]], axis=1)

    def _unit_keys(self, units: np.ndarray) -> np.ndarray:
        """Rows of (SM, place, unit, lane) of these unit tracks."""
        return np.concatenate(
            [
                self._place_keys(self.unit_place[units]),
                np.stack([self.unit[units], self.lane[units]], axis=1),
            ],
            axis=1,
        )


# What the tree reads of the finished units' columns (``Chunk.lifetimes``).
TREE_COLUMNS = (
    "kernel", "launch", "sm", "cta", "cluster", "cluster_rank", "unit", "warp", "start_ns", "end_ns",
)  # fmt: skip


def track_tree(
    chunk: Chunk, lives: Columns, timeline: str = DEFAULT_TIMELINE, carried: OpenTracks | None = None
) -> Tracks:
    """Number a chunk's tracks, each level in sorted order: launches by number, SMs by (launch,
    SM), places by (SM track, slot or CTA), unit tracks by (place, unit, lane). ``lives``: the
    chunk's lifetimes (with ``TREE_COLUMNS`` at least); ``carried``: a launch going on from an
    earlier chunk, whose track must exist even with no slices here, and whose slots are as its
    earlier pieces left them."""
    events = chunk.events
    rows = {
        column: stacked(events[column], np.zeros(len(lives["launch"])) if column == "lane" else lives[column])
        for column in ("launch", "sm", "cta", "cluster", "cluster_rank", "unit", "warp", "lane")
    }
    begin = stacked(events["begin_ns"], lives["start_ns"])
    end = stacked(events["end_ns"], lives["end_ns"])
    launch_numbers = np.union1d(rows["launch"], [] if carried is None else [carried.number]).astype(np.int64)
    launch_of_row = np.searchsorted(launch_numbers, rows["launch"])
    cta_of_row, cta_first = groups(launch_of_row, rows["cta"])
    cta_begin, cta_end = _spans(cta_of_row, len(cta_first), begin, end)
    sm_of_cta, sm_first = groups(launch_of_row[cta_first], rows["sm"][cta_first])
    sm_rows = cta_first[sm_first]
    sm_launch, sm = launch_of_row[sm_rows], rows["sm"][sm_rows]
    if timeline == "slots":
        busy = _carried_busy(sm_launch, sm, launch_numbers, carried)
        place_of_cta, busy = assign_slots(sm_of_cta, cta_begin, cta_end, busy)
    else:
        place_of_cta, busy = rows["cta"][cta_first], np.zeros((len(sm_rows), 0), np.int64)
    place_track, place_first = groups(sm_of_cta, place_of_cta)
    track_of_row, first_row = groups(place_track[cta_of_row], rows["unit"], rows["lane"])

    width = np.array([chunk.widths.get(int(n), 1) for n in launch_numbers.tolist()], dtype=np.int64)
    launch_begin, launch_end = _spans(launch_of_row, len(launch_numbers), begin, end)
    return Tracks(
        timeline=timeline,
        launch=launch_numbers,
        kernel=_kernel_names(chunk, lives, launch_numbers),
        launch_begin=launch_begin,
        launch_end=launch_end,
        sm_launch=sm_launch,
        sm=sm,
        busy=busy,
        place_sm=sm_of_cta[place_first],
        place=place_of_cta[place_first],
        unit_place=place_track[cta_of_row[first_row]],
        unit=rows["unit"][first_row],
        warp=rows["warp"][first_row],
        width=width[launch_of_row[first_row]],
        lane=rows["lane"][first_row],
        lanes=int(rows["lane"].max(initial=0)) + 1,
        cta=rows["cta"][cta_first],
        cta_sm=sm_of_cta,
        cta_begin=cta_begin,
        cta_end=cta_end,
        cta_cluster=rows["cluster"][cta_first],
        cta_cluster_rank=rows["cluster_rank"][cta_first],
        row_track=track_of_row,
        row_cta=cta_of_row,
        events=len(events["launch"]),
    )


def _spans(
    group: np.ndarray, count: int, begin: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per group (numbered 0 to ``count`` - 1), its rows' earliest begin and latest end."""
    first = np.full(count, np.iinfo(np.int64).max)
    last = np.full(count, np.iinfo(np.int64).min)
    np.minimum.at(first, group, begin)
    np.maximum.at(last, group, end)
    return first, last


def _carried_busy(
    sm_launch: np.ndarray, sm: np.ndarray, launch_numbers: np.ndarray, carried: OpenTracks | None
) -> np.ndarray | None:
    """Per SM track, when each slot's last CTA ended: as the carried launch's earlier pieces
    left its SMs, free for the others."""
    if carried is None or not carried.busy:
        return None
    width = max(len(slots) for slots in carried.busy.values())
    busy = np.full((len(sm), width), FREE)
    at = int(np.searchsorted(launch_numbers, carried.number))
    for i in np.flatnonzero(sm_launch == at).tolist():
        slots = carried.busy.get(int(sm[i]))
        if slots is not None:
            busy[i, : len(slots)] = slots
    return busy


def stacked(*parts: Any) -> np.ndarray:
    """Columns of the parts of a chunk's slices (scope events, unit lifetimes, ...), one after another."""
    return np.concatenate([np.asarray(part, dtype=np.int64) for part in parts])


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


# --- names ------------------------------------------------------------------------------------


def root_name(session: str) -> str:
    return f"{ROOT_PREFIX}{session}"


def session_name(root: str) -> str:
    """The session's name, from the root track's name."""
    return root.removeprefix(ROOT_PREFIX)


def launch_name(number: int, kernel: str) -> str:
    return f"launch {number}: {kernel}"


def process_name(number: int, kernel: str, sm: int) -> str:
    """A Chrome process: a launch's SM."""
    return f"{launch_name(number, kernel)}{_SM_SEPARATOR}SM {sm}"


def launch_slice_name(row: Mapping[str, Any]) -> str:
    """A launch's slice is named after the launch where ``launch_metadata`` named it apart from its kernel."""
    name = row.get("name")
    return name if isinstance(name, str) and name and name != row.get("kernel") else LIFETIME


def numbered_names(prefix: bytes, numbers: np.ndarray) -> Rows:
    """'SM 17', 'slot 2', 'CTA 42': a level's name and number, one row each."""
    return Rows(len(numbers)).constant(prefix).decimal(numbers)


def unit_name(rows: Rows, warp: np.ndarray, width: np.ndarray, lane: np.ndarray) -> Rows:
    """'warp 4', or 'warps 4-7' for a unit of several warps; ' overlap 1' for lanes past the
    first; appended to ``rows``."""
    single, overlap = width <= 1, lane > 0
    return (
        rows.constant(b"warp ", single)
        .constant(b"warps ", ~single)
        .decimal(warp)
        .constant(b"-", ~single)
        .decimal(warp + width - 1, where=~single)
        .constant(b" overlap ", overlap)
        .decimal(lane, where=overlap)
    )


def thread_name(rows: Rows, tracks: Tracks, unit: np.ndarray) -> Rows:
    """A Chrome thread, a unit track named with its place ('slot 2 warp 4', 'CTA 42 warp 4'),
    appended to ``rows``."""
    place = tracks.place[tracks.unit_place[unit]]
    rows.constant(PLACE_PREFIX[tracks.timeline]).decimal(place).constant(b" ")
    return unit_name(rows, tracks.warp[unit], tracks.width[unit], tracks.lane[unit])


# --- parsers ----------------------------------------------------------------------------------


def parse_launch_name(name: str) -> tuple[int, str] | None:
    """A launch track's number and kernel; None for a name that is not a launch's."""
    match = _LAUNCH_NAME.fullmatch(name)
    return (int(match["launch"]), match["kernel"]) if match else None


def parse_process_name(name: str) -> int | None:
    """A Chrome process's launch number; None for a name that is not a launch's SM."""
    match = _PROCESS_NAME.fullmatch(name)
    return int(match["launch"]) if match else None


def parse_lane(name: str) -> int | None:
    """A unit track's (or Chrome thread's) lane: past 0 for an overlap track; None for a name
    that is not a unit track's."""
    match = _UNIT_NAME.fullmatch(name)
    return int(match["lane"] or 0) if match else None
