"""Session chunks in, Perfetto protobuf trace (``.pftrace``) out.

The track tree lets a kernel author find any SM, CTA or warp::

    proton_ik: <session>                      sorted by launch
      host scopes                             where launches were made in ``proton_ik.scope``s:
                                              a slice per scope instance, nested, spanning its
                                              launches
      launch 3: matmul_kernel                 a slice named after the launch (its
                                              ``launch_metadata`` name; "lifetime" if it has
                                              none) whose args are the launch's
        SM 17                                 metadata and statistics (also in its description)
          CTA 42                              sorted by SM, then CTA, then warp (numerically)
            warp 4                            a "lifetime" slice with the warp's scopes nested in it
            warp 4 overlap 1                  scopes that overlap others without nesting

Streaming: the trace is written chunk by chunk (``pipeline.Chunk``: a run of launches), and each
chunk is its own packet sequence, with its own interned names and incremental clock, so nothing
of a chunk is kept once it is written. A launch whose pieces span chunks keeps its launch and SM
tracks; its launch track is described, and its lifetime slice written, with its last piece.
Host scope instances (a few numbers each, not events) are gathered as launches end and written
last, as their own sequence: an instance is a run of consecutive launches (in launch order)
under the same scope, from its first launch's begin to its last launch's end.

Size: within a sequence, each track gets one header packet that sets the sequence's default
track and restarts an incremental clock (a sequence-scoped clock whose timestamps are deltas,
anchored to BOOTTIME by a clock snapshot), so an event packet holds a small time delta, an
interned name and its debug annotations, with no track uuid. Tracks are written in order of
their first timestamp, which keeps the anchor snapshots monotonic. Packets are bundled and
zlib-compressed (``TracePacket.compressed_packets``), which trace processor and the Perfetto UI
inflate on load.

Speed: the few packets that say what the trace is (interned names, the root and launch tracks,
launch slices) are built with perfetto's protos. The millions of others (SM, CTA and warp tracks,
track headers, slice begins and ends) are encoded column by column with ``byterows``, in the
canonical field order protobuf itself writes, and compressed on worker threads while the next
chunk is encoded.
"""

from __future__ import annotations

import dataclasses
import itertools
import numbers
import os
import zlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    BUILTIN_CLOCK_BOOTTIME,
    ClockSnapshot,
    DebugAnnotation,
    Trace,
    TracePacket,
    TracePacketDefaults,
    TrackDescriptor,
    TrackEvent,
    TrackEventDefaults,
)
from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder
from tqdm import tqdm

from proton_ik.viewer.byterows import Rows, assemble, varint_bytes
from proton_ik.viewer.groups import groups
from proton_ik.viewer.pipeline import Chunk, Columns, chunk_from_tables
from proton_ik.viewer.table import TimeShift

SEQUENCE_ID = 1  # the first chunk's packet sequence; later chunks count up from it
# Clock ids 64..127 are scoped to one packet sequence; only those may be incremental.
INCREMENTAL_CLOCK_ID = 64
BUNDLE_BYTES = 1 << 20  # uncompressed bytes per compressed bundle
COMPRESS_LEVEL = 1  # zlib: level 6 saves about a quarter of the size for four times the time
CHUNK_ROWS = 1 << 15  # packets encoded at once: about one bundle
PROGRESS_EVENTS = 1_000_000
ANNOTATIONS = ("cta", "sm", "warp", "cycles", "line", "records", "overwritten")
# A launch's lifetime slice carries these (where its metadata has them), then "config" and
# "problems" as a dictionary and an array.
LAUNCH_ANNOTATIONS = (
    "kernel", "name", "host_scope", "launch", "device", "stream", "graph", "replay", "grid",
    "warps_per_unit", "capacity", "capacity_source", "capacity_bound", "capacity_reason", "ctas", "units",
    "records", "events", "overwritten", "mhz", "clock_source", "config", "launch_metrics", "problems",
)  # fmt: skip
HOST_ANNOTATIONS = ("launches", "first_launch", "last_launch")  # of a host scope's slice
_ANNOTATION_IID = {
    name: iid
    for iid, name in enumerate(dict.fromkeys([*ANNOTATIONS, *LAUNCH_ANNOTATIONS, *HOST_ANNOTATIONS]), start=1)
}
LIFETIME = "lifetime"  # the slice spanning a unit (or a launch) from its start to its end
HOST_TRACK = "host scopes"  # the track of host scope slices, beside the launch tracks
_LIFE_COLUMNS = (
    "kernel", "launch", "sm", "cta", "unit", "warp", "start_ns", "end_ns", "start_cycles", "end_cycles",
    "count", "overwritten",
)  # fmt: skip


# --- protobuf keys, from perfetto's own descriptors ---------------------------------------------

_WIRE_TYPES = {
    **dict.fromkeys(
        (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES), 2
    ),
    **dict.fromkeys(
        (
            FieldDescriptor.TYPE_INT32,
            FieldDescriptor.TYPE_INT64,
            FieldDescriptor.TYPE_UINT32,
            FieldDescriptor.TYPE_UINT64,
            FieldDescriptor.TYPE_BOOL,
            FieldDescriptor.TYPE_ENUM,
        ),
        0,
    ),
}


def _key(message: Descriptor, name: str) -> bytes:
    """The key (field number and wire type) that starts a field of ``message``."""
    field = message.fields_by_name[name]
    return varint_bytes(field.number << 3 | _WIRE_TYPES[field.type])


def _with(message: Descriptor, name: str, value: int) -> bytes:
    """A varint field with a value known in advance, as bytes."""
    return _key(message, name) + varint_bytes(value)


_TRACE_PACKET = _key(Trace.DESCRIPTOR, "packet")
_PACKET, _EVENT, _TRACK = TracePacket.DESCRIPTOR, TrackEvent.DESCRIPTOR, TrackDescriptor.DESCRIPTOR


def write_perfetto(
    path: str | Path,
    events: pd.DataFrame,
    units: pd.DataFrame,
    launches: pd.DataFrame,
    *,
    title: str = "proton_ik",
    progress: bool | None = None,
    compress: bool = True,
) -> Path:
    """Write a session's tables (events, unit lifetimes, launches) as a ``.pftrace``;
    ``progress=None`` shows a bar past 1e6 events."""
    show = len(events) > PROGRESS_EVENTS if progress is None else progress
    with (
        tqdm(desc="perfetto", unit="packet", unit_scale=True, disable=not show) as bar,
        PerfettoWriter(path, title, compress=compress, bar=bar) as writer,
    ):
        writer.add(chunk_from_tables(events, units, launches))
    return Path(path)


@dataclass
class _OpenLaunch:
    """A launch whose pieces go on into the next chunk: its tracks so far and its time span."""

    number: int
    uuid: int
    sm_uuid: dict[int, int]
    begin: int
    end: int


class PerfettoWriter:
    """Writes chunks of a session, in launch order, to a ``.pftrace``; use it as a context manager.

    uuids: 1 is the root; each chunk numbers its new launch, SM, CTA and warp tracks in blocks,
    in that order, after the previous chunk's.
    """

    def __init__(
        self,
        path: str | Path,
        title: str,
        *,
        compress: bool = True,
        warnings: Sequence[str] = (),
        bar: tqdm | None = None,
    ):
        self.path = Path(path)
        self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self._sink = _Sink(self._file, compress)
        self._root = _descriptor(1, None, title, None)
        if warnings:
            self._root.description = "\n".join(warnings)
        self._bar = bar
        self._next_uuid = 2
        self._sequence = SEQUENCE_ID
        self._open: _OpenLaunch | None = None
        self._host = _HostScopes()

    def add(self, chunk: Chunk) -> None:
        """Write one chunk as its own packet sequence."""
        finished = chunk.units["finished"]
        lives = {name: chunk.units[name][finished] for name in _LIFE_COLUMNS}
        names = _event_names(chunk)
        self._start_sequence(names)
        tracks = self._track_tree(chunk, lives)
        launch_slices = self._launches(chunk, tracks, names)
        self._write_chunks(tracks.count, lambda lo, hi: _descriptor_rows(tracks, lo, hi))
        markers = _markers(chunk.events, lives, tracks, names, launch_slices, self._sequence, chunk.scopes)
        self._write_chunks(markers.rows, lambda lo, hi: _event_rows(markers, lo, hi))
        self._sequence += 1

    def close(self) -> Path:
        """Finish the file (an empty session still gets its root track)."""
        if self._sequence == SEQUENCE_ID:
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

    def _start_sequence(self, names: dict[str, int]) -> None:
        """The sequence's interned names; the first sequence is followed by the root track."""
        self._sink.packet(_interning_packet(names, self._sequence))
        if self._sequence == SEQUENCE_ID:
            self._sink.packet(TracePacket(track_descriptor=self._root))

    def _write_chunks(self, rows: int, build: Callable[[int, int], list[tuple[Rows, np.ndarray]]]) -> None:
        for lo in range(0, rows, CHUNK_ROWS):
            hi = min(rows, lo + CHUNK_ROWS)
            data, _ = assemble(build(lo, hi))
            self._sink.framed(data)
            if self._bar is not None:
                self._bar.update(hi - lo)

    def _write_host_track(self, instances: list[_HostInstance]) -> None:
        """The host scopes' track and its slices, as one more sequence."""
        names = {name: iid for iid, name in enumerate(dict.fromkeys(i.name for i in instances), start=1)}
        self._sink.packet(_interning_packet(names, self._sequence))
        uuid = int(self._allocate(1)[0])
        self._sink.packet(TracePacket(track_descriptor=_descriptor(uuid, 1, HOST_TRACK, -1)))
        markers = _host_markers(instances)
        first = markers[0][0]
        snapshot = ClockSnapshot(
            clocks=[
                ClockSnapshot.Clock(clock_id=INCREMENTAL_CLOCK_ID, timestamp=first, is_incremental=True),
                ClockSnapshot.Clock(clock_id=BUILTIN_CLOCK_BOOTTIME, timestamp=first),
            ]
        )
        defaults = TracePacketDefaults(
            timestamp_clock_id=INCREMENTAL_CLOCK_ID, track_event_defaults=TrackEventDefaults(track_uuid=uuid)
        )
        self._sink.packet(
            TracePacket(
                clock_snapshot=snapshot,
                trusted_packet_sequence_id=self._sequence,
                trace_packet_defaults=defaults,
            )
        )
        now = first
        for ts, instance in markers:
            if instance is None:
                event = TrackEvent(type=TrackEvent.TYPE_SLICE_END)
            else:
                event = TrackEvent(type=TrackEvent.TYPE_SLICE_BEGIN, name_iid=names[instance.name])
                for key in HOST_ANNOTATIONS:
                    event.debug_annotations.add(
                        name_iid=_ANNOTATION_IID[key], int_value=getattr(instance, key)
                    )
            self._sink.packet(
                TracePacket(
                    timestamp=ts - now,
                    trusted_packet_sequence_id=self._sequence,
                    track_event=event,
                    sequence_flags=TracePacket.SEQ_NEEDS_INCREMENTAL_STATE,
                )
            )
            now = ts
        self._sequence += 1

    def _allocate(self, count: int) -> np.ndarray:
        first = self._next_uuid
        self._next_uuid += count
        return np.arange(first, first + count, dtype=np.int64)

    def _track_tree(self, chunk: Chunk, lives: Columns) -> _Tracks:
        """The chunk's tracks, numbered: a launch (and its SMs) continued from the last chunk
        keeps its uuids."""
        open_launch = self._open
        carried = [open_launch.number] if open_launch is not None else []
        tree = _track_tree(chunk, lives, carried)
        launch_uuid = np.zeros(len(tree.launch), dtype=np.int64)
        fresh = tree.launch != (open_launch.number if open_launch is not None else -1)
        if open_launch is not None:
            launch_uuid[~fresh] = open_launch.uuid
        launch_uuid[fresh] = self._allocate(int(fresh.sum()))
        sm_uuid = np.zeros(len(tree.sm), dtype=np.int64)
        new_sm = np.ones(len(tree.sm), dtype=bool)
        if open_launch is not None:
            for i in np.flatnonzero(~fresh[tree.sm_launch]).tolist():
                known = open_launch.sm_uuid.get(int(tree.sm[i]))
                if known is not None:
                    sm_uuid[i], new_sm[i] = known, False
        sm_uuid[new_sm] = self._allocate(int(new_sm.sum()))
        return tree.numbered(
            launch_uuid, sm_uuid, new_sm, self._allocate(len(tree.cta)), self._allocate(len(tree.unit))
        )

    def _launches(self, chunk: Chunk, tracks: _Tracks, names: dict[str, int]) -> _LaunchSlices:
        """Describe the launches that end in this chunk and give each its lifetime slice; keep
        the one that goes on into the next."""
        rows = {int(row["launch"]): row for row in chunk.launches}
        begin, end = tracks.launch_begin.copy(), tracks.launch_end.copy()
        if self._open is not None:
            carried = tracks.launch == self._open.number
            begin[carried] = np.minimum(begin[carried], self._open.begin)
            end[carried] = np.maximum(end[carried], self._open.end)
        ending = np.array([number in rows for number in tracks.launch.tolist()], dtype=bool)
        before, self._open = self._open, None
        for i in np.flatnonzero(~ending).tolist():  # at most one: pieces come in launch order
            number = int(tracks.launch[i])
            # The SMs of all its pieces so far: a later piece may run on any of them again.
            sm_uuid = dict(before.sm_uuid) if before is not None and before.number == number else {}
            sm_uuid.update(
                (int(tracks.sm[j]), int(tracks.sm_uuid[j])) for j in np.flatnonzero(tracks.sm_launch == i)
            )
            self._open = _OpenLaunch(number, int(tracks.launch_uuid[i]), sm_uuid, int(begin[i]), int(end[i]))
        index = np.flatnonzero(ending)
        timed_at = {int(tracks.launch[i]): (int(begin[i]), int(end[i])) for i in index.tolist()}
        for row in chunk.launches:  # in launch order, with launches that left no track too
            number = int(row["launch"])
            self._host.add(chunk.host_paths.get(number, ()), number, *timed_at.get(number, (1, 0)))
        for i in index.tolist():
            number = int(tracks.launch[i])
            descriptor = _descriptor(
                int(tracks.launch_uuid[i]), 1, f"launch {number}: {tracks.kernel[i]}", number
            )
            descriptor.description = _launch_description(rows[number])
            self._sink.packet(TracePacket(track_descriptor=descriptor))
        # A launch none of whose units left a time has no lifetime.
        timed = index[begin[index] <= end[index]]
        return _LaunchSlices(
            uuid=tracks.launch_uuid[timed],
            begin=begin[timed],
            end=end[timed],
            events=[_launch_event(rows[int(tracks.launch[i])], names) for i in timed.tolist()],
        )


@dataclass(frozen=True)
class _LaunchSlices:
    """The lifetime slices of the launches that end in a chunk: each its own track's only slice."""

    uuid: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    events: list[bytes]  # each begin's TrackEvent, encoded: its name and its annotations


# --- the track tree --------------------------------------------------------------------------


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


def _launch_event(row: Mapping[str, Any], names: dict[str, int]) -> bytes:
    """A launch lifetime's begin: its metadata and statistics as structured args."""
    values = {name: row.get(name) for name in LAUNCH_ANNOTATIONS}
    values["config"] = row.get("config_args")
    event = TrackEvent(type=TrackEvent.TYPE_SLICE_BEGIN, name_iid=names[_launch_slice_name(row)])
    for name, value in values.items():
        annotation = _debug_annotation(value)
        if annotation is not None:
            annotation.name_iid = _ANNOTATION_IID[name]
            event.debug_annotations.append(annotation)
    return event.SerializeToString()


def _debug_annotation(value: Any) -> DebugAnnotation | None:
    """A plain value (number, text, dictionary, list) as a debug annotation; None for none."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, (Mapping, list, tuple, np.ndarray)) and not len(value):
        return None  # an empty dictionary and an empty list would read back alike
    annotation = DebugAnnotation()
    if isinstance(value, (bool, np.bool_)):
        annotation.bool_value = bool(value)
    elif isinstance(value, numbers.Integral):
        annotation.int_value = int(value)
    elif isinstance(value, numbers.Real):
        annotation.double_value = float(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            entry = _debug_annotation(item)
            if entry is not None:
                entry.name = str(key)
                annotation.dict_entries.append(entry)
    elif isinstance(value, (list, tuple, np.ndarray)):
        for item in value:
            entry = _debug_annotation(item)
            if entry is not None:
                annotation.array_values.append(entry)
    else:
        annotation.string_value = str(value)
    return annotation


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


# --- slices ----------------------------------------------------------------------------------


def _event_names(chunk: Chunk) -> dict[str, int]:
    """Interned event names: the lifetime first, then every scope name the chunk uses, then the
    names of its launches' slices."""
    used = np.unique(chunk.events["scope"]).tolist()
    scopes = sorted(chunk.scopes[code] for code in used)
    launches = sorted({_launch_slice_name(row) for row in chunk.launches})
    return {name: iid for iid, name in enumerate(dict.fromkeys([LIFETIME, *scopes, *launches]), start=1)}


# --- host scopes -----------------------------------------------------------------------------


@dataclass
class _HostInstance:
    """One run of consecutive launches made under a host scope (and the scopes around it)."""

    name: str
    depth: int
    first_launch: int
    last_launch: int
    begin: int = np.iinfo(np.int64).max  # the earliest begin and latest end of its timed launches
    end: int = np.iinfo(np.int64).min
    launches: int = 0


class _HostScopes:
    """Host scope instances, gathered launch by launch in launch order: a launch under the same
    outer scopes as the launch before it extends their instances; a scope that it is not under
    ends its instance."""

    def __init__(self) -> None:
        self.open: list[_HostInstance] = []  # outermost first
        self.done: list[_HostInstance] = []  # in the order they opened: outer before inner, then by time

    def add(self, path: Sequence[str], number: int, begin: int, end: int) -> None:
        """A launch (``begin > end``: it has no time) made under ``path``, outermost first."""
        keep = 0
        while keep < min(len(self.open), len(path)) and self.open[keep].name == path[keep]:
            keep += 1
        del self.open[keep:]
        for depth in range(keep, len(path)):
            instance = _HostInstance(path[depth], depth, number, number)
            self.open.append(instance)
            self.done.append(instance)
        for instance in self.open:
            instance.last_launch = number
            instance.launches += 1
            if begin <= end:
                instance.begin, instance.end = min(instance.begin, begin), max(instance.end, end)

    def finish(self) -> list[_HostInstance]:
        """Every instance with a time, outer before inner and in launch order."""
        self.open = []
        return [instance for instance in self.done if instance.begin <= instance.end]


def _host_markers(instances: list[_HostInstance]) -> list[tuple[int, _HostInstance | None]]:
    """Slice begins (the instance) and ends (None) in the order one track needs them: nested by
    depth, never back in time. Launches on several streams can overlap; an instance that begins
    before the one before it at its depth ended is shown from that end."""
    markers: list[tuple[int, _HostInstance | None]] = []
    stack: list[_HostInstance] = []
    now = np.iinfo(np.int64).min

    def close_to(depth: int) -> None:
        nonlocal now
        while len(stack) > depth:
            now = max(now, stack.pop().end)
            markers.append((now, None))

    for instance in instances:
        close_to(instance.depth)
        now = max(now, instance.begin)
        markers.append((now, instance))
        stack.append(instance)
    close_to(0)
    return markers


@dataclass(frozen=True)
class _Markers:
    """Every packet of a chunk's event stream, in the order written: one header per track, then
    the track's slice begins and ends in the order its unit recorded them."""

    rows: int
    on_sequence: bytes  # the chunk's trusted_packet_sequence_id field
    # Track headers: output row, the track's uuid, its first timestamp.
    header_row: np.ndarray
    header_uuid: np.ndarray
    header_ts: np.ndarray
    # Slice begins and ends, as written: output row, end or not, timestamp delta, track, and
    # for a begin its slice: a row of ``name`` and ``values`` (events, unit lifetimes, then
    # launch lifetimes).
    row: np.ndarray
    is_end: np.ndarray
    delta: np.ndarray
    track: np.ndarray
    slice: np.ndarray
    scopes: int  # slices below this are scope events
    lives: int  # then up to this, unit lifetimes; the rest are launch lifetimes
    name: np.ndarray
    values: dict[str, np.ndarray]  # per annotation, -1 where a slice does not carry it
    shared: Rows  # per warp track: the annotations all its slices carry (CTA, SM, warp)
    launch_events: Rows  # per launch lifetime: its begin's TrackEvent


def _markers(
    events: Columns,
    lives: Columns,
    tracks: _Tracks,
    names: dict[str, int],
    launches: _LaunchSlices,
    sequence: int,
    scope_names: Sequence[str],
) -> _Markers:
    scope_track, life_track = tracks.event_track, tracks.life_track
    n_warps = len(tracks.unit)
    n_events, n_lives, n_launches = len(scope_track), len(life_track), len(launches.uuid)
    n_tracks = n_warps + n_launches
    begin_ns, end_ns = events["begin_ns"], events["end_ns"]
    start, end = lives["start_ns"], lives["end_ns"]
    if n_events and n_lives:
        # Keep each lifetime around its unit's scopes even if the unit's clocks are inconsistent.
        start = np.minimum(start, _per_track(np.minimum, n_warps, scope_track, begin_ns)[life_track])
        end = np.maximum(end, _per_track(np.maximum, n_warps, scope_track, end_ns)[life_track])
    begin_record, end_record = events["begin_record"], events["end_record"]
    last_order = int(max(begin_record.max(initial=0), end_record.max(initial=0))) + 1
    launch_track = n_warps + np.arange(n_launches)
    track = np.concatenate([scope_track, scope_track, life_track, life_track, launch_track, launch_track])
    # Within a track: a lifetime begins before, and ends after, every record of its unit.
    order = np.concatenate(
        [
            begin_record + 1,
            end_record + 1,
            np.zeros(n_lives, np.int64),
            np.full(n_lives, last_order + 1),
            np.zeros(n_launches, np.int64),
            np.full(n_launches, last_order + 1),
        ]
    )
    ts = np.concatenate([begin_ns, end_ns, start, end, launches.begin, launches.end])
    slices = np.arange(n_events + n_lives + n_launches)
    ends = np.full(n_events, -1)
    slice_of = np.concatenate(
        [
            slices[:n_events],
            ends,
            slices[n_events : n_events + n_lives],
            np.full(n_lives, -1),
            slices[n_events + n_lives :],
            np.full(n_launches, -1),
        ]
    )

    # Tracks go out in order of their first timestamp: each restarts the incremental clock with a
    # snapshot against BOOTTIME, and one clock's snapshots must not go back in time.
    first_ts = _per_track(np.minimum, n_tracks, track, ts)
    rank = np.empty(n_tracks, dtype=np.int64)
    rank[np.argsort(first_ts, kind="stable")] = np.arange(n_tracks)
    sort = _argsort_keys(rank[track], order, last_order + 2)
    track, ts, slice_of = track[sort], ts[sort], slice_of[sort]
    new_track = np.ones(len(track), dtype=bool)
    new_track[1:] = track[1:] != track[:-1]
    # A timestamp never goes back within a track: that would be a negative delta.
    ts = _running_max(ts, new_track)
    delta = np.diff(ts, prepend=0)
    delta[new_track] = 0
    # Each track's header goes right before its first marker.
    row = np.arange(len(track)) + np.cumsum(new_track)

    def both(scoped: object, lived: object) -> np.ndarray:
        return np.concatenate(
            [np.asarray(scoped, dtype=np.int64), np.asarray(lived, dtype=np.int64), np.full(n_launches, -1)]
        )

    no_event, no_life = np.full(n_events, -1), np.full(n_lives, -1)
    track_uuid = np.concatenate([tracks.warp_uuid, launches.uuid])
    return _Markers(
        rows=len(track) + int(new_track.sum()),
        on_sequence=_with(_PACKET, "trusted_packet_sequence_id", sequence),
        header_row=row[new_track] - 1,
        header_uuid=track_uuid[track[new_track]],
        header_ts=ts[new_track],
        row=row,
        is_end=slice_of < 0,
        delta=delta,
        track=track,
        slice=slice_of,
        scopes=n_events,
        lives=n_events + n_lives,
        name=both(_scope_iids(events["scope"], scope_names, names), np.full(n_lives, names[LIFETIME])),
        shared=_annotations(
            n_warps,
            {
                "cta": tracks.cta[tracks.warp_cta],
                "sm": tracks.sm[tracks.cta_sm[tracks.warp_cta]],
                "warp": tracks.warp,
            },
        ),
        values={
            "cycles": both(events["dur_cycles"], lives["end_cycles"] - lives["start_cycles"]),
            "line": both(events["line"], no_life),
            "records": both(no_event, lives["count"]),
            "overwritten": both(no_event, lives["overwritten"]),
        },
        launch_events=Rows(n_launches).pick(np.arange(n_launches), launches.events),
    )


def _scope_iids(codes: np.ndarray, scope_names: Sequence[str], names: dict[str, int]) -> np.ndarray:
    """The interned name of each event's scope, from its scope code."""
    lookup = np.array([names.get(name, 0) for name in scope_names] or [0], dtype=np.int64)
    return lookup[codes]


def _argsort_keys(major: np.ndarray, minor: np.ndarray, minor_range: int) -> np.ndarray:
    """The order that sorts rows by (major, minor), both non-negative with unique pairs."""
    if len(major) == 0:
        return np.zeros(0, np.int64)
    if (int(major.max()) + 1) * minor_range < 1 << 63:
        # Stable: merge sort finds the long runs the rows come in (each track's records in order).
        return np.argsort(major * minor_range + minor, kind="stable")
    return np.lexsort((minor, major))


def _running_max(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running maximum that restarts where ``starts`` is True (rows grouped)."""
    if np.all((values[1:] >= values[:-1]) | starts[1:]):
        return values
    group = np.cumsum(starts) - 1
    low = values.min()
    span = int(values.max()) - int(low) + 1
    lifted = (values - low) + group * span
    return np.maximum.accumulate(lifted) - group * span + low


def _per_track(reduce: np.ufunc, n_tracks: int, track: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``reduce`` (np.minimum or np.maximum) of ``values`` per warp track."""
    identity = np.iinfo(np.int64).max if reduce is np.minimum else np.iinfo(np.int64).min
    result = np.full(n_tracks, identity, dtype=np.int64)
    reduce.at(result, track, values)
    return result


def _interning_packet(names: dict[str, int], sequence: int) -> TracePacket:
    """A sequence's first packet: it clears incremental state and interns every name."""
    packet = TracePacket(trusted_packet_sequence_id=sequence, first_packet_on_sequence=True)
    packet.sequence_flags = (
        TracePacket.SEQ_INCREMENTAL_STATE_CLEARED | TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    )
    for name, iid in names.items():
        packet.interned_data.event_names.add(iid=iid, name=name)
    for name, iid in _ANNOTATION_IID.items():
        packet.interned_data.debug_annotation_names.add(iid=iid, name=name)
    return packet


_CLOCK = ClockSnapshot.Clock.DESCRIPTOR
_DEFAULTS = TracePacketDefaults.DESCRIPTOR
_INCREMENTAL = _with(_CLOCK, "clock_id", INCREMENTAL_CLOCK_ID)
_BOOTTIME = _with(_CLOCK, "clock_id", BUILTIN_CLOCK_BOOTTIME)
_IS_INCREMENTAL = _with(_CLOCK, "is_incremental", 1)
_PRIMARY_BOOTTIME = _with(ClockSnapshot.DESCRIPTOR, "primary_trace_clock", BUILTIN_CLOCK_BOOTTIME)
_DEFAULT_CLOCK = _with(_DEFAULTS, "timestamp_clock_id", INCREMENTAL_CLOCK_ID)
_BEGIN = _with(_EVENT, "type", TrackEvent.TYPE_SLICE_BEGIN)
_END_EVENT = _with(_EVENT, "type", TrackEvent.TYPE_SLICE_END)
_NEEDS_STATE = _with(_PACKET, "sequence_flags", TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)


def _event_rows(markers: _Markers, lo: int, hi: int) -> list[tuple[Rows, np.ndarray]]:
    """Output rows ``lo`` to ``hi`` of the event stream: track headers, slice begins and ends."""
    kinds = []
    a, b = np.searchsorted(markers.header_row, [lo, hi])
    if a < b:
        kinds.append((_header_rows(markers, a, b), markers.header_row[a:b] - lo))
    a, b = np.searchsorted(markers.row, [lo, hi])
    ends = np.flatnonzero(markers.is_end[a:b]) + a
    begins = np.flatnonzero(~markers.is_end[a:b]) + a
    # Scopes, unit lifetimes and launch lifetimes carry different annotations: each kind on its own.
    slices = markers.slice[begins]
    scoped, launched = slices < markers.scopes, slices >= markers.lives
    for kind in (begins[scoped], begins[~scoped & ~launched]):
        if len(kind):
            kinds.append((_begin_rows(markers, kind), markers.row[kind] - lo))
    if launched.any():
        kind = begins[launched]
        kinds.append((_launch_rows(markers, kind), markers.row[kind] - lo))
    if len(ends):
        event = Rows(len(ends)).constant(_END_EVENT)
        packet = (
            Rows(len(ends))
            .field(_key(_PACKET, "timestamp"), markers.delta[ends])
            .constant(markers.on_sequence)
            .message(_key(_PACKET, "track_event"), event)
        )
        kinds.append((Rows(len(ends)).message(_TRACE_PACKET, packet), markers.row[ends] - lo))
    return kinds


def _header_rows(markers: _Markers, a: int, b: int) -> Rows:
    """Make each track the sequence's default and restart the incremental clock at its first timestamp."""
    n = b - a
    ts, first = markers.header_ts[a:b], markers.header_row[a:b] == 0
    incremental = (
        Rows(n).constant(_INCREMENTAL).field(_key(_CLOCK, "timestamp"), ts).constant(_IS_INCREMENTAL)
    )
    boottime = Rows(n).constant(_BOOTTIME).field(_key(_CLOCK, "timestamp"), ts)
    snapshot = (
        Rows(n)
        .message(_key(ClockSnapshot.DESCRIPTOR, "clocks"), incremental)
        .message(_key(ClockSnapshot.DESCRIPTOR, "clocks"), boottime)
        .constant(_PRIMARY_BOOTTIME, first)
    )
    uuid = markers.header_uuid[a:b]
    track_defaults = Rows(n).field(_key(TrackEventDefaults.DESCRIPTOR, "track_uuid"), uuid)
    defaults = (
        Rows(n).message(_key(_DEFAULTS, "track_event_defaults"), track_defaults).constant(_DEFAULT_CLOCK)
    )
    packet = (
        Rows(n)
        .message(_key(_PACKET, "clock_snapshot"), snapshot)
        .constant(markers.on_sequence)
        .message(_key(_PACKET, "trace_packet_defaults"), defaults)
    )
    return Rows(n).message(_TRACE_PACKET, packet)


def _begin_rows(markers: _Markers, index: np.ndarray) -> Rows:
    n = len(index)
    slices = markers.slice[index]
    carried = _LIFETIME_ANNOTATIONS if slices[0] >= markers.scopes else _SCOPE_ANNOTATIONS
    event = Rows(n).take(markers.shared, markers.track[index])
    event.rows(_annotations(n, {name: markers.values[name][slices] for name in carried}))
    event.constant(_BEGIN).field(_key(_EVENT, "name_iid"), markers.name[slices])
    return _begin_packets(markers, index, event)


def _launch_rows(markers: _Markers, index: np.ndarray) -> Rows:
    """Launch lifetimes' begins: few, each with its own annotations, encoded by protobuf."""
    launch = markers.slice[index] - markers.lives
    event = Rows(len(index)).take(markers.launch_events, launch)
    return _begin_packets(markers, index, event)


def _begin_packets(markers: _Markers, index: np.ndarray, event: Rows) -> Rows:
    packet = (
        Rows(len(index))
        .field(_key(_PACKET, "timestamp"), markers.delta[index])
        .constant(markers.on_sequence)
        .message(_key(_PACKET, "track_event"), event)
        .constant(_NEEDS_STATE)
    )
    return Rows(len(index)).message(_TRACE_PACKET, packet)


_OPTIONAL = ("line",)  # -1: the slice has no such annotation
# Besides the CTA, SM and warp every slice of a track shares:
_SCOPE_ANNOTATIONS = ("cycles", "line")
_LIFETIME_ANNOTATIONS = ("cycles", "records", "overwritten")


def _annotations(n: int, values: dict[str, np.ndarray]) -> Rows:
    """TrackEvent.debug_annotations fields, with interned names, in the order of ANNOTATIONS."""
    rows = Rows(n)
    for annotation in ANNOTATIONS:
        if annotation not in values:
            continue
        column = values[annotation]
        present = column >= 0 if annotation in _OPTIONAL else None
        if present is not None:
            column = np.maximum(column, 0)  # an absent annotation's value is never written
        body = Rows(n).constant(_with(DebugAnnotation.DESCRIPTOR, "name_iid", _ANNOTATION_IID[annotation]))
        body.field(_key(DebugAnnotation.DESCRIPTOR, "int_value"), column)
        rows.message(_key(_EVENT, "debug_annotations"), body, present)
    return rows


# --- output ----------------------------------------------------------------------------------


class _Sink:
    """Writes framed packets (``Trace.packet`` fields) to the file, or gathers them into bundles
    that worker threads compress while the caller encodes the next chunk."""

    def __init__(self, file: BinaryIO, compress: bool):
        self.file = file
        self.builder = StreamingTraceProtoBuilder(file)
        self.compress = compress
        self.pending: list[bytes | np.ndarray] = []
        self.pending_bytes = 0
        self.workers = min(8, os.cpu_count() or 1)
        self.pool = ThreadPoolExecutor(self.workers) if compress else None
        self.bundles: deque[Future[bytes]] = deque()

    def packet(self, packet: TracePacket) -> None:
        self.framed(_TRACE_PACKET + varint_bytes(packet.ByteSize()) + packet.SerializeToString())

    def framed(self, data: bytes | np.ndarray) -> None:
        if not self.compress:
            self.file.write(data)
            return
        self.pending.append(data)
        self.pending_bytes += len(data)
        if self.pending_bytes >= BUNDLE_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        payload = b"".join(self.pending)
        self.pending, self.pending_bytes = [], 0
        self.bundles.append(self.pool.submit(zlib.compress, payload, COMPRESS_LEVEL))
        while len(self.bundles) > 2 * self.workers:
            self._write_bundle()

    def _write_bundle(self) -> None:
        self.builder.write_packet(TracePacket(compressed_packets=self.bundles.popleft().result()))

    def close(self) -> None:
        """Write what is pending, and wait for the workers."""
        if self.pool is None:
            return
        self.flush()
        while self.bundles:
            self._write_bundle()
        self.pool.shutdown()
