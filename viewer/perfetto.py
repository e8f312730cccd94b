"""Events in, Perfetto protobuf trace (``.pftrace``) out.

The track tree lets a kernel author find any SM, CTA or warp::

    proton_ik: <session>                      sorted by launch
      launch 3: matmul_kernel                 its statistics in the track's description
        SM 17                                 sorted by SM, then CTA, then warp (numerically)
          CTA 42
            warp 4                            a "lifetime" slice with the warp's scopes nested in it
            warp 4 overlap 1                  scopes that overlap others without nesting

Size: one packet sequence carries everything. Each warp track gets one header packet that sets
the sequence's default track and restarts an incremental clock (a sequence-scoped clock whose
timestamps are deltas, anchored to BOOTTIME by a clock snapshot), so an event packet holds a
small time delta, an interned name and its debug annotations, with no track uuid. Tracks are
written in order of their first timestamp, which keeps the anchor snapshots monotonic. Packets
are bundled and zlib-compressed (``TracePacket.compressed_packets``), which trace processor and
the Perfetto UI inflate on load.

Speed: the few packets that say what the trace is (interned names, the root and launch tracks)
are built with perfetto's protos and written through its ``StreamingTraceProtoBuilder``. The
millions of others (SM, CTA and warp tracks, track headers, slice begins and ends) are encoded
column by column with ``byterows``, in the canonical field order protobuf itself writes, and
compressed on worker threads while the next chunk is encoded.
"""

from __future__ import annotations

import itertools
import os
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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
from proton_ik.viewer.table import TimeShift

SEQUENCE_ID = 1
# Clock ids 64..127 are scoped to one packet sequence; only those may be incremental.
INCREMENTAL_CLOCK_ID = 64
BUNDLE_BYTES = 1 << 20  # uncompressed bytes per compressed bundle
COMPRESS_LEVEL = 1  # zlib: level 6 saves about a quarter of the size for four times the time
CHUNK_ROWS = 1 << 15  # packets encoded at once: about one bundle
PROGRESS_EVENTS = 1_000_000
ANNOTATIONS = ("cta", "sm", "warp", "cycles", "line", "records", "overwritten")
_ANNOTATION_IID = {name: iid for iid, name in enumerate(ANNOTATIONS, start=1)}
LIFETIME = "lifetime"  # the slice spanning a unit from its start to its epilogue


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
    """Write events (and unit lifetimes) as a ``.pftrace``; ``progress=None`` shows a bar past 1e6 events."""
    path = Path(path)
    names = _event_names(events)
    tracks = _track_tree(events, units, launches)
    markers = _markers(events, units, tracks, names)
    show = len(events) > PROGRESS_EVENTS if progress is None else progress
    with open(path, "wb") as file, _Sink(file, compress) as sink:
        sink.packet(_interning_packet(names))
        for descriptor in _named_tracks(tracks, launches, title):
            sink.packet(TracePacket(track_descriptor=descriptor))
        total = tracks.count + markers.rows
        with tqdm(total=total, desc="perfetto", unit="packet", unit_scale=True, disable=not show) as bar:
            _write_chunks(sink, tracks.count, lambda lo, hi: _descriptor_rows(tracks, lo, hi), bar)
            _write_chunks(sink, markers.rows, lambda lo, hi: _event_rows(markers, lo, hi), bar)
    return path


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
_ON_SEQUENCE = _with(_PACKET, "trusted_packet_sequence_id", SEQUENCE_ID)


# --- the track tree --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tracks:
    """Warp tracks (one per unit and lane) and their SM, CTA and launch parents, all numbered.

    uuids: 1 is the root, then launches, SMs, CTAs and warp tracks, in blocks in that order.
    """

    launch: np.ndarray  # launch number of each launch track
    kernel: np.ndarray  # its kernel name (object)
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

    @property
    def count(self) -> int:
        """Track descriptors encoded in bulk: SMs, CTAs and warps."""
        return len(self.sm) + len(self.cta) + len(self.unit)

    def uuid_base(self) -> tuple[int, int, int, int]:
        """First uuid of launches, SMs, CTAs and warps."""
        launches = 2
        sms = launches + len(self.launch)
        ctas = sms + len(self.sm)
        return launches, sms, ctas, ctas + len(self.cta)


def _track_tree(events: pd.DataFrame, units: pd.DataFrame, launches: pd.DataFrame) -> _Tracks:
    finished = units[units["finished"]]
    rows = {
        column: np.concatenate(
            [
                events[column].to_numpy(np.int64),
                np.zeros(len(finished), np.int64)
                if column == "lane"
                else finished[column].to_numpy(np.int64),
            ]
        )
        for column in ("launch", "sm", "cta", "unit", "warp", "lane")
    }
    launch_numbers = np.unique(rows["launch"])
    launch_of_row = np.searchsorted(launch_numbers, rows["launch"])
    track_of_row, first_row = groups(launch_of_row, rows["cta"], rows["unit"], rows["lane"])
    cta_of_track, cta_first_track = groups(launch_of_row[first_row], rows["cta"][first_row])
    cta_rows = first_row[cta_first_track]
    sm_of_cta, sm_first_cta = groups(launch_of_row[cta_rows], rows["sm"][cta_rows])
    sm_rows = cta_rows[sm_first_cta]

    kernel_of_launch = _kernel_names(events, units, launches)
    widths = dict(zip(launches["launch"].tolist(), launches["warps_per_unit"].tolist(), strict=True))
    width = np.array([int(widths.get(int(n), 1)) for n in launch_numbers], dtype=np.int64)
    lanes = int(rows["lane"].max(initial=0)) + 1
    return _Tracks(
        launch=launch_numbers,
        kernel=np.array([kernel_of_launch.get(int(n), "") for n in launch_numbers], dtype=object),
        sm_launch=launch_of_row[sm_rows],
        sm=rows["sm"][sm_rows],
        cta_sm=sm_of_cta,
        cta=rows["cta"][cta_rows],
        warp_cta=cta_of_track,
        unit=rows["unit"][first_row],
        warp=rows["warp"][first_row],
        width=width[launch_of_row[first_row]],
        lane=rows["lane"][first_row],
        lanes=lanes,
        event_track=track_of_row[: len(events)],
        life_track=track_of_row[len(events) :],
    )


def _kernel_names(events: pd.DataFrame, units: pd.DataFrame, launches: pd.DataFrame) -> dict[int, str]:
    names = {}
    for frame in (units, events, launches):
        if len(frame):
            pairs = frame[["launch", "kernel"]].drop_duplicates("launch")
            names.update(zip(pairs["launch"].tolist(), pairs["kernel"].astype(str).tolist(), strict=True))
    return names


def _named_tracks(tracks: _Tracks, launches: pd.DataFrame, title: str) -> list[TrackDescriptor]:
    """The root and launch tracks, with the launches' statistics."""
    described = {int(row["launch"]): _launch_description(row) for row in launches.to_dict("records")}
    descriptors = [_descriptor(1, None, title, None)]
    first, *_ = tracks.uuid_base()
    for i, (launch, kernel) in enumerate(zip(tracks.launch.tolist(), tracks.kernel, strict=True)):
        descriptor = _descriptor(first + i, 1, f"launch {launch}: {kernel}", launch)
        if launch in described:
            descriptor.description = described[launch]
        descriptors.append(descriptor)
    return descriptors


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


def _launch_description(stats: dict) -> str:
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


_EXPLICIT_ORDER = _with(_TRACK, "child_ordering", TrackDescriptor.EXPLICIT)
_MERGE_NONE = _with(_TRACK, "sibling_merge_behavior", TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE)


def _descriptor_rows(tracks: _Tracks, lo: int, hi: int) -> list[tuple[Rows, np.ndarray]]:
    """Packets ``lo`` to ``hi`` of the SM, CTA and warp track descriptors, in that order."""
    _, sms, ctas, warps = tracks.uuid_base()
    bounds = np.cumsum([0, len(tracks.sm), len(tracks.cta), len(tracks.unit)])
    kinds = []
    for kind, (start, stop) in enumerate(itertools.pairwise(bounds)):
        a, b = max(lo, start) - start, min(hi, stop) - start
        if a >= b:
            continue
        index = np.arange(a, b)
        if kind == 0:
            uuid, parent, rank = sms + index, 2 + tracks.sm_launch[index], tracks.sm[index]
            name = Rows(len(index)).constant(b"SM ").decimal(tracks.sm[index])
        elif kind == 1:
            uuid, parent, rank = ctas + index, sms + tracks.cta_sm[index], tracks.cta[index]
            name = Rows(len(index)).constant(b"CTA ").decimal(tracks.cta[index])
        else:
            uuid, parent = warps + index, ctas + tracks.warp_cta[index]
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


def _event_names(events: pd.DataFrame) -> dict[str, int]:
    """Interned event names: the unit lifetime first, then every scope name."""
    scope = events["scope"]
    if isinstance(scope.dtype, pd.CategoricalDtype):
        used = scope.cat.remove_unused_categories().cat.categories
    else:
        used = pd.unique(scope.astype(str))
    scopes = sorted(str(s) for s in used)
    return {name: iid for iid, name in enumerate(dict.fromkeys([LIFETIME, *scopes]), start=1)}


@dataclass(frozen=True)
class _Markers:
    """Every packet of the event stream, in the order written: one header per warp track, then the
    track's slice begins and ends in the order its unit recorded them."""

    rows: int
    # Track headers: output row, the warp track's uuid, its first timestamp.
    header_row: np.ndarray
    header_uuid: np.ndarray
    header_ts: np.ndarray
    # Slice begins and ends, as written: output row, end or not, timestamp delta, warp track, and
    # for a begin its slice: a row of ``name`` and ``values`` (events first, then lifetimes).
    row: np.ndarray
    is_end: np.ndarray
    delta: np.ndarray
    track: np.ndarray
    slice: np.ndarray
    scopes: int  # slices below this are scope events, the rest unit lifetimes
    name: np.ndarray
    values: dict[str, np.ndarray]  # per annotation, -1 where a slice does not carry it
    shared: Rows  # per warp track: the annotations all its slices carry (CTA, SM, warp)


def _markers(events: pd.DataFrame, units: pd.DataFrame, tracks: _Tracks, names: dict[str, int]) -> _Markers:
    finished = units[units["finished"]]
    scope_track, life_track = tracks.event_track, tracks.life_track
    n_tracks = len(tracks.unit)
    begin_ns, end_ns = events["begin_ns"].to_numpy(np.int64), events["end_ns"].to_numpy(np.int64)
    start, end = finished["start_ns"].to_numpy(np.int64), finished["end_ns"].to_numpy(np.int64)
    if len(events) and len(finished):
        # Keep each lifetime around its unit's scopes even if the unit's clocks are inconsistent.
        start = np.minimum(start, _per_track(np.minimum, n_tracks, scope_track, begin_ns)[life_track])
        end = np.maximum(end, _per_track(np.maximum, n_tracks, scope_track, end_ns)[life_track])
    begin_record = events["begin_record"].to_numpy(np.int64)
    end_record = events["end_record"].to_numpy(np.int64)
    last_order = int(max(begin_record.max(initial=0), end_record.max(initial=0))) + 1
    n_events, n_lives = len(events), len(finished)
    track = np.concatenate([scope_track, scope_track, life_track, life_track])
    # Within a track: a lifetime begins before, and ends after, every record of its unit.
    order = np.concatenate(
        [begin_record + 1, end_record + 1, np.zeros(n_lives, np.int64), np.full(n_lives, last_order + 1)]
    )
    ts = np.concatenate([begin_ns, end_ns, start, end])
    slices = np.arange(n_events + n_lives)
    slice_of = np.concatenate(
        [slices[:n_events], np.full(n_events, -1), slices[n_events:], np.full(n_lives, -1)]
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

    def both(scoped: object, lives: object) -> np.ndarray:
        return np.concatenate([np.asarray(scoped, dtype=np.int64), np.asarray(lives, dtype=np.int64)])

    no_event, no_life = np.full(n_events, -1), np.full(n_lives, -1)
    return _Markers(
        rows=len(track) + int(new_track.sum()),
        header_row=row[new_track] - 1,
        header_uuid=track[new_track] + tracks.uuid_base()[3],
        header_ts=ts[new_track],
        row=row,
        is_end=slice_of < 0,
        delta=delta,
        track=track,
        slice=slice_of,
        scopes=n_events,
        name=both(_scope_iids(events, names), np.full(n_lives, names[LIFETIME])),
        shared=_annotations(
            len(tracks.unit),
            {
                "cta": tracks.cta[tracks.warp_cta],
                "sm": tracks.sm[tracks.cta_sm[tracks.warp_cta]],
                "warp": tracks.warp,
            },
        ),
        values={
            "cycles": both(
                events["dur_cycles"], (finished["end_cycles"] - finished["start_cycles"]).fillna(-1)
            ),
            "line": both(events["line"].fillna(-1), no_life),
            "records": both(no_event, finished["count"].fillna(-1)),
            "overwritten": both(no_event, finished["overwritten"]),
        },
    )


def _scope_iids(events: pd.DataFrame, names: dict[str, int]) -> np.ndarray:
    scope = events["scope"]
    if not isinstance(scope.dtype, pd.CategoricalDtype):
        scope = scope.astype(str).astype("category")
    lookup = np.array([names.get(str(c), 0) for c in scope.cat.categories], dtype=np.int64)
    return lookup[scope.cat.codes.to_numpy()] if len(lookup) else np.zeros(len(scope), np.int64)


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


def _interning_packet(names: dict[str, int]) -> TracePacket:
    """The sequence's first packet: it clears incremental state and interns every name."""
    packet = TracePacket(trusted_packet_sequence_id=SEQUENCE_ID, first_packet_on_sequence=True)
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
    # Scopes and lifetimes carry different annotations: encode each kind on its own.
    lifetime = markers.slice[begins] >= markers.scopes
    for kind in (begins[~lifetime], begins[lifetime]):
        if len(kind):
            kinds.append((_begin_rows(markers, kind), markers.row[kind] - lo))
    if len(ends):
        event = Rows(len(ends)).constant(_END_EVENT)
        packet = (
            Rows(len(ends))
            .field(_key(_PACKET, "timestamp"), markers.delta[ends])
            .constant(_ON_SEQUENCE)
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
        .constant(_ON_SEQUENCE)
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
    packet = (
        Rows(n)
        .field(_key(_PACKET, "timestamp"), markers.delta[index])
        .constant(_ON_SEQUENCE)
        .message(_key(_PACKET, "track_event"), event)
        .constant(_NEEDS_STATE)
    )
    return Rows(n).message(_TRACE_PACKET, packet)


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


def _write_chunks(
    sink: _Sink, rows: int, build: Callable[[int, int], list[tuple[Rows, np.ndarray]]], bar: tqdm
) -> None:
    for lo in range(0, rows, CHUNK_ROWS):
        hi = min(rows, lo + CHUNK_ROWS)
        data, _ = assemble(build(lo, hi))
        sink.framed(data)
        bar.update(hi - lo)


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

    def __enter__(self) -> _Sink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.pool is None:
            return
        self.flush()
        while self.bundles:
            self._write_bundle()
        self.pool.shutdown()
