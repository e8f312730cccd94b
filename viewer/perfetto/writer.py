"""The Perfetto writer: session chunks in, a ``.pftrace`` out, chunk by chunk (the package's
docstring tells the track tree, the streaming, the size and the speed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket
from tqdm import tqdm

from proton_ik.viewer.arrays import assemble
from proton_ik.viewer.perfetto.clusters import ClusterTracks
from proton_ik.viewer.perfetto.counters import InFlight, counter_points
from proton_ik.viewer.perfetto.events import write_async
from proton_ik.viewer.perfetto.host import HostInstance, HostScopes, write_host_track
from proton_ik.viewer.perfetto.packets import event_stream
from proton_ik.viewer.perfetto.sink import Sink
from proton_ik.viewer.perfetto.slices import LaunchSlices, launch_events, slice_markers
from proton_ik.viewer.perfetto.tracks import (
    Numbered,
    descriptor_rows,
    event_names,
    new_descriptor,
    source_locations,
)
from proton_ik.viewer.perfetto.wire import INCREMENTAL_CLOCK_ID, interning_packet
from proton_ik.viewer.tables import AsyncParts, Chunk, Columns, batches, chunk_from_tables, empty_chunk
from proton_ik.viewer.tracks import (
    COUNTERS,
    HOST_TRACK,
    LIFETIME,
    TREE_COLUMNS,
    OpenTracks,
    check_timeline,
    launch_name,
    track_tree,
)

if TYPE_CHECKING:  # imported where it is used: a render worker never imports it
    import pandas as pd

__all__ = [
    "HOST_TRACK",
    "INCREMENTAL_CLOCK_ID",
    "LIFETIME",
    "MAX_PARTS",
    "PROGRESS_EVENTS",
    "SEQUENCE_ID",
    "PerfettoWriter",
    "SharedLaunch",
    "first_uuid",
    "write_perfetto",
]

SEQUENCE_ID = 1  # the first chunk's packet sequence; later chunks count up from it
# A merged trace (``ranks.merge_sessions``): each session's uuids and flow ids below 2**UUID_BITS above
# its own base, its packet sequences SEQUENCES_PER_SESSION apart (a sequence id is 32 bits).
UUID_BITS = 48
SEQUENCES_PER_SESSION = 1 << 20
MAX_MERGED = (1 << 32) // SEQUENCES_PER_SESSION - 1
# A session rendered in parts (``render.parts``): part p's uuids and flow ids from p << PART_BITS
# above the session's base, its sequences an equal share of the session's.
PART_BITS = 40
MAX_PARTS = 1 << (UUID_BITS - PART_BITS)
PROGRESS_EVENTS = 1_000_000
_LIFE_COLUMNS = (*TREE_COLUMNS, "start_cycles", "end_cycles", "count", "overwritten")


def write_perfetto(
    path: str | Path,
    events: pd.DataFrame,
    units: pd.DataFrame,
    launches: pd.DataFrame,
    *,
    title: str = "proton_ik",
    timeline: str | None = None,
    progress: bool | None = None,
    compress: bool = True,
    async_parts: Sequence[AsyncParts] = (),
) -> Path:
    """Write a session's tables (events, unit lifetimes, launches; ``async_parts``: its events,
    marks and values, ``tables.parts_of``) as a ``.pftrace``;
    ``timeline``: "slots" (the default) or "ctas" (``tracks``); ``progress=None`` shows a bar
    past 1e6 events."""
    show = len(events) > PROGRESS_EVENTS if progress is None else progress
    with (
        tqdm(desc="perfetto", unit="packet", unit_scale=True, disable=not show) as bar,
        PerfettoWriter(path, title, timeline=timeline, compress=compress, bar=bar) as writer,
    ):
        writer.add(replace(chunk_from_tables(events, units, launches), async_parts=tuple(async_parts)))
    return Path(path)


@dataclass(frozen=True)
class SharedLaunch:
    """A launch whose SMs several parts draw (``tables.SmShare``): its number, its track's uuid
    (``first_uuid`` of the part that draws the launch itself), and whether this part is that one."""

    number: int
    uuid: int
    draws: bool


def first_uuid(merge_index: int, part: int) -> int:
    """The first uuid that the writer of part ``part`` of session ``merge_index`` hands out."""
    return 2 + (merge_index << UUID_BITS) + (part << PART_BITS)


@dataclass
class _OpenLaunch:
    """A launch whose pieces go on into the next chunk: its tracks so far, its time span and
    its counters' intervals in flight."""

    uuid: int
    tracks: OpenTracks
    begin: int
    end: int
    in_flight: InFlight | None

    @property
    def number(self) -> int:
        return self.tracks.number


class PerfettoWriter:
    """Writes chunks of a session, in launch order, to a ``.pftrace``; use it as a context manager.

    uuids: 1 is the root; each chunk numbers its new launch, SM (each followed by its counter
    tracks), place and unit tracks in blocks, in that order, after the previous chunk's.
    ``merge_index``: the session's place in a trace of several (``ranks.merge_sessions``): its uuids,
    flow ids and packet sequences are numbered in a range of their own, so that the files of
    several sessions concatenate into one trace with one root each.
    """

    def __init__(
        self,
        path: str | Path,
        title: str,
        *,
        timeline: str | None = None,
        compress: bool = True,
        warnings: Sequence[str] = (),
        bar: tqdm | None = None,
        merge_index: int = 0,
        part: int = 0,
        parts: int = 1,
        shared: SharedLaunch | None = None,
    ):
        self.timeline = check_timeline(timeline)
        self.path = Path(path)
        if not 0 <= merge_index < MAX_MERGED:
            raise ValueError(
                f"merge_index={merge_index}: a merged trace holds 0 to {MAX_MERGED - 1} sessions"
            )
        if not 0 <= part < parts <= MAX_PARTS:
            raise ValueError(f"part {part} of {parts}: a session is written in 1 to {MAX_PARTS} parts")
        self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self._sink = Sink(self._file, compress)
        self._root_uuid = 1 + (merge_index << UUID_BITS)
        self._root = new_descriptor(self._root_uuid, None, title, None)
        if warnings:
            self._root.description = "\n".join(warnings)
        self._bar = bar
        self._part = part
        self._next_uuid = first_uuid(merge_index, part)
        self._shared = shared
        self._shared_span: tuple[int, int] | None = None  # over all its SMs, its pieces so far
        if shared is not None and shared.draws:
            assert shared.uuid == self._allocate(1)[0], (
                "a shared launch's track is its drawing part's first uuid"
            )
        share = SEQUENCES_PER_SESSION // parts
        self._first_sequence = self._sequence = (
            SEQUENCE_ID + merge_index * SEQUENCES_PER_SESSION + part * share
        )
        self._past_sequences = self._first_sequence + share
        self._open: _OpenLaunch | None = None
        self._host = HostScopes()
        self._clusters = ClusterTracks()
        # A part of several: the host scopes' launches (path, number, begin, end), for the writer
        # of the last part, which draws the host scopes' track of the whole session
        self.host_launches: list[tuple[tuple[str, ...], int, int, int]] | None = [] if parts > 1 else None
        self._untimed: list[tuple[int, dict]] = []  # launches with no time yet: uuid, row
        self._last_end: int | None = None  # the latest end of any launch so far
        # the next flow id (an event from the warp that started it to the one that ended it)
        self._flow = 1 + (merge_index << UUID_BITS) + (part << PART_BITS)

    def add_host_launches(self, launches: Sequence[tuple[tuple[str, ...], int, int, int]]) -> None:
        """Launches of other parts, in launch order, for this writer's host scopes' track."""
        for path, number, begin, end in launches:
            self._host.add(path, number, begin, end)

    def add(self, chunk: Chunk) -> None:
        """Write one chunk as its own packet sequence."""
        self._add(chunk, closing=False)

    def _add(self, chunk: Chunk, closing: bool) -> None:
        if self._sequence + 2 > self._past_sequences:
            raise ValueError(
                f"{self.path}: a part of the session needs more than its {self._past_sequences - self._first_sequence} "
                "packet sequences; render it in fewer parts"
            )
        lives = chunk.lifetimes(_LIFE_COLUMNS)
        if self._shared is not None and (span := chunk.launch_spans.get(self._shared.number)):
            so_far = self._shared_span or span
            self._shared_span = (min(so_far[0], span[0]), max(so_far[1], span[1]))
        numbered = self._number(chunk, lives)
        ending = {int(row["launch"]) for row in chunk.launches}
        # At most one launch goes on into the next chunk: pieces come in launch order.
        going_on = next((n for n in numbered.tracks.launch.tolist() if n not in ending), None)
        before = self._open
        points, in_flight = counter_points(
            numbered.tracks,
            numbered.sm_uuid,
            (chunk.events["begin_ns"], chunk.events["end_ns"]),
            None if before is None else before.in_flight,
            {} if before is None else before.tracks.sms,
            going_on,
        )
        names = event_names(chunk, [row for _, row in self._untimed])
        locations, location_iids = source_locations(chunk)
        self._start_sequence(names, locations)
        launch_slices = self._launches(chunk, numbered, names, going_on, in_flight, closing)
        self._write_chunks(numbered.count, lambda lo, hi: assemble(descriptor_rows(numbered, lo, hi))[0])
        markers = slice_markers(
            chunk.events,
            lives,
            numbered,
            names,
            launch_slices,
            points,
            self._sequence,
            chunk.scopes,
            location_iids,
        )
        self._write_chunks(markers.rows, event_stream(markers))
        self._sequence += 1
        if chunk.async_parts:  # events, marks and values: a sequence of their own
            self._flow = write_async(
                self._sink, chunk.async_parts, lives, numbered, self._sequence, self._allocate, self._flow
            )
            self._sequence += 1
        tracks, uuids = numbered.tracks, numbered.launch_uuid
        if self._clusters.add(self._sink, lives, tracks, uuids, ending, self._sequence, self._allocate):
            self._sequence += 1

    def close(self) -> Path:
        """Finish the file (an empty session still gets its root track)."""
        if self._untimed:  # no launch of the session left a time: their slices go at 0
            self._add(empty_chunk(), closing=True)
        if self._sequence == self._first_sequence and self._part == 0:
            self._start_sequence({LIFETIME: 1})
        instances = self._host.finish()
        if instances:
            self._write_host_track(instances)
        self._sink.close()
        self._file.close()
        return self.path

    def __enter__(self) -> PerfettoWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _start_sequence(
        self, names: dict[str, int], locations: dict[tuple[str, int], int] | None = None
    ) -> None:
        """The sequence's interned names and source locations; the first sequence is followed by
        the root track."""
        self._sink.packet(interning_packet(names, self._sequence, locations))
        if self._sequence == self._first_sequence and self._part == 0:
            self._sink.packet(TracePacket(track_descriptor=self._root))

    def _write_chunks(self, rows: int, encode: Callable[[int, int], bytes | np.ndarray]) -> None:
        for lo, hi in batches(rows):
            self._sink.framed(encode(lo, hi))
            if self._bar is not None:
                self._bar.update(hi - lo)

    def _write_host_track(self, instances: list[HostInstance]) -> None:
        """The host scopes' track and its slices, as one more sequence."""
        write_host_track(self._sink, instances, int(self._allocate(1)[0]), self._sequence, self._root_uuid)
        self._sequence += 1

    def _allocate(self, count: int) -> np.ndarray:
        first = self._next_uuid
        self._next_uuid += count
        return np.arange(first, first + count, dtype=np.int64)

    def _number(self, chunk: Chunk, lives: Columns) -> Numbered:
        """The chunk's tracks, numbered: a launch continued from the last chunk keeps its uuids
        (and its tracks and slots)."""
        open_launch = self._open
        carried = open_launch.tracks if open_launch is not None else None
        tree = track_tree(chunk, lives, self.timeline, carried)
        launch_uuid = np.zeros(len(tree.launch), dtype=np.int64)
        fresh = tree.launch != (open_launch.number if open_launch is not None else -1)
        if open_launch is not None:
            launch_uuid[~fresh] = open_launch.uuid
        if self._shared is not None:
            shared = tree.launch == self._shared.number
            launch_uuid[shared], fresh = self._shared.uuid, fresh & ~shared
        launch_uuid[fresh] = self._allocate(int(fresh.sum()))
        sm_uuid, place_uuid, unit_uuid = tree.known(carried)
        new_sm, new_place, new_unit = sm_uuid < 0, place_uuid < 0, unit_uuid < 0
        per_sm = 1 + len(COUNTERS)  # an SM and its counter tracks
        sm_uuid[new_sm] = self._allocate(per_sm * int(new_sm.sum()))[::per_sm]
        place_uuid[new_place] = self._allocate(int(new_place.sum()))
        unit_uuid[new_unit] = self._allocate(int(new_unit.sum()))
        return Numbered(tree, launch_uuid, sm_uuid, new_sm, place_uuid, new_place, unit_uuid, new_unit)

    def _launches(
        self,
        chunk: Chunk,
        numbered: Numbered,
        names: dict[str, int],
        going_on: int | None,
        in_flight: InFlight | None,
        closing: bool,
    ) -> LaunchSlices:
        """Describe the launches that end in this chunk and give each its slice; keep the one
        that goes on into the next. A launch with no time is placed where the launches before
        it ended (held until one has a time)."""
        begin, end = self._launch_spans(numbered, going_on, in_flight)
        slices: list[tuple[int, int, int, dict]] = []
        for row in chunk.launches:  # in launch order, with launches that left no track too
            self._launch(chunk, row, numbered, (begin, end), slices)
        if self._untimed and (self._last_end is not None or closing):
            when = self._last_end if self._last_end is not None else 0
            slices.extend((held, when, when, held_row) for held, held_row in self._untimed)
            self._untimed = []
        return LaunchSlices(
            uuid=np.array([uuid for uuid, *_ in slices], dtype=np.int64),
            begin=np.array([b for _, b, _, _ in slices], dtype=np.int64),
            end=np.array([e for _, _, e, _ in slices], dtype=np.int64),
            events=launch_events([row for *_, row in slices], names),
        )

    def _launch_spans(
        self, numbered: Numbered, going_on: int | None, in_flight: InFlight | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each launch track's begin and end, a launch's earlier pieces' included; the launch
        that goes on into the next chunk is kept open."""
        tracks = numbered.tracks
        begin, end = tracks.launch_begin.copy(), tracks.launch_end.copy()
        before, self._open = self._open, None
        if before is not None and (at := tracks.launch_index(before.number)) is not None:
            begin[at], end[at] = min(begin[at], before.begin), max(end[at], before.end)
        if going_on is not None:
            at = tracks.launch_index(going_on)
            ids = (numbered.sm_uuid, numbered.place_uuid, numbered.unit_uuid)
            kept = tracks.keep(going_on, ids, None if before is None else before.tracks)
            self._open = _OpenLaunch(
                int(numbered.launch_uuid[at]), kept, int(begin[at]), int(end[at]), in_flight
            )
        return begin, end

    def _launch(
        self,
        chunk: Chunk,
        row: dict,
        numbered: Numbered,
        spans: tuple[np.ndarray, np.ndarray],
        slices: list[tuple[int, int, int, dict]],
    ) -> None:
        """A launch that ends in this chunk: its track described, its host scopes noted, and its
        slice added to ``slices`` (with those of the launches held before it), or held."""
        tracks, (begin, end) = numbered.tracks, spans
        number = int(row["launch"])
        at = tracks.launch_index(number)
        shared = self._shared if self._shared is not None and self._shared.number == number else None
        if shared is not None and not shared.draws:
            return  # another part draws the launch itself
        if shared is not None:  # its track and its span over all its SMs, whatever SMs are here
            uuid, kernel = shared.uuid, str(row["kernel"])
            span = self._shared_span or (1, 0)
        else:
            uuid = int(numbered.launch_uuid[at]) if at is not None else int(self._allocate(1)[0])
            kernel = str(tracks.kernel[at]) if at is not None else str(row["kernel"])
            span = (int(begin[at]), int(end[at])) if at is not None else (1, 0)
        self._sink.packet(
            TracePacket(
                track_descriptor=new_descriptor(uuid, self._root_uuid, launch_name(number, kernel), number)
            )
        )
        timed = span[0] <= span[1]
        span = span if timed else (1, 0)
        if self.host_launches is not None:
            self.host_launches.append((tuple(chunk.host_paths.get(number, ())), number, *span))
        else:
            self._host.add(chunk.host_paths.get(number, ()), number, *span)
        if not timed:
            self._untimed.append((uuid, row))
            return
        if self._untimed:  # the launches before it that had no time: where this one began
            when = self._last_end if self._last_end is not None else span[0]
            slices.extend((held, when, when, held_row) for held, held_row in self._untimed)
            self._untimed = []
        slices.append((uuid, *span, row))
        self._last_end = max(span[1], self._last_end if self._last_end is not None else span[1])
