"""The slices of a chunk as Perfetto packets: each track's header (its clock anchor), then its
markers in order: on a unit track, the slice begins and ends (scopes and unit lifetimes) of each
CTA that ran in its place, CTA by CTA in start order, each CTA's in recorded order; each
launch's slice with its metadata as args; and counter points. Encoded column by column with
``arrays.byterows``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    ClockSnapshot,
    DebugAnnotation,
    TrackEvent,
    TrackEventDefaults,
)

from proton_ik.viewer.arrays import Rows
from proton_ik.viewer.perfetto.counters import Points
from proton_ik.viewer.perfetto.marker_order import (
    COUNT_MARKER,
    END_MARKER,
    LaunchSpans,
    Ordered,
    in_track_order,
    unsorted_markers,
)
from proton_ik.viewer.perfetto.tracks import Numbered
from proton_ik.viewer.perfetto.wire import (
    ANNOTATION_IID,
    BEGIN,
    BOOTTIME,
    CLOCK,
    COUNTER_EVENT,
    DEFAULT_CLOCK,
    DEFAULTS,
    END_EVENT,
    EVENT,
    INCREMENTAL,
    IS_INCREMENTAL,
    KIND_IID,
    NEEDS_STATE,
    PACKET,
    PRIMARY_BOOTTIME,
    TRACE_PACKET,
    annotation_field,
    annotation_rows,
    field_key,
    field_value,
    kind_annotation,
)
from proton_ik.viewer.tables import Columns
from proton_ik.viewer.tracks import (
    KIND_ARG,
    KINDS,
    LAUNCH_ARGS,
    LIFETIME,
    SLICE_ARGS,
    Tracks,
    launch_slice_name,
    stacked,
)

# Besides the SM and warp every slice of a unit track shares (and the CTA, where the track is
# one CTA's), and its kind:
SCOPE_ANNOTATIONS = ("cta", "cycles", "line", "cluster", "cluster_rank")
LIFETIME_ANNOTATIONS = ("cta", "cycles", "records", "overwritten", "cluster", "cluster_rank")
_SCOPE_KIND, _UNIT_KIND, _LAUNCH_KIND = KINDS


@dataclass(frozen=True)
class LaunchSlices:
    """The slices of the launches that end in a chunk: each its own track's only slice."""

    uuid: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    events: Rows  # each begin's TrackEvent (``launch_events``): its name and its annotations


def _launch_args(row: Mapping[str, Any]) -> dict[str, Any]:
    """A launch's begin's annotations, by name, in the order they are written."""
    values = {name: row.get(name) for name in LAUNCH_ARGS}
    values["config"] = row.get("config_args")
    # What a launch table row from a trace file may lack: the time shift, as its summary reads it.
    values["time_shift_cycles"] = row.get("time_shift_cycles", 0)
    values["time_shift_pair_cycles"] = row.get("time_shift_pair_cycles", values["time_shift_cycles"])
    return values


def launch_events(rows: Sequence[Mapping[str, Any]], names: dict[str, int]) -> Rows:
    """Each launch's begin: its metadata and totals as structured args, the TrackEvent in the
    order protobuf writes it (its annotations, then its type and name; a test holds it to
    protobuf's own bytes). An annotation that is an int64 or absent in every launch (a launch's
    number, its records, its times: most of them) is encoded for all launches at once; any
    other launch by launch (``annotation_field``) and picked."""
    n = len(rows)
    events = Rows(n)
    columns = [_launch_args(row) for row in rows]
    for name in columns[0] if columns else ():
        iid = ANNOTATION_IID[name]
        values = [column[name] for column in columns]
        numbers = _int64_column(values)
        if numbers is not None:
            present = np.array([value is not None for value in values])
            body = Rows(n).constant(field_value(DebugAnnotation.DESCRIPTOR, "name_iid", iid))
            body.field(_INT_VALUE_KEY, numbers)
            events.message(_ANNOTATIONS_KEY, body, None if present.all() else present)
            continue
        # Encoded once per distinct value (a kernel's name, its capacity's reason: the launches
        # of a session share a few), told apart by type and repr: 1, 1.0 and True encode apart.
        table: list[bytes] = []
        codes: dict[tuple[type, str], int] = {}
        picked = np.empty(n, dtype=np.int64)
        for index, value in enumerate(values):
            key = (type(value), repr(value))
            code = codes.get(key)
            if code is None:
                code = codes[key] = len(table)
                table.append(annotation_field(iid, value))
            picked[index] = code
        events.pick(picked, table)
    events.constant(_LAUNCH_KIND_FIELD + _BEGIN_TYPE)
    events.varint(np.array([names[launch_slice_name(row)] for row in rows], dtype=np.int64))
    return events


def _int64_column(values: list[Any]) -> np.ndarray | None:
    """``values`` as an int64 column (0 where absent), where each is an int64 or None (and not
    all None); else None."""
    numbers = np.zeros(len(values), dtype=np.int64)
    seen = False
    for index, value in enumerate(values):
        if value is None:
            continue
        if type(value) is not int and not isinstance(value, np.integer):  # bool is not an int here
            return None
        if not _INT64_MIN <= value <= _INT64_MAX:
            return None
        numbers[index], seen = value, True
    return numbers if seen else None


# The parts of every launch's begin that never change: its kind annotation, its type, the tag
# of its name.
_LAUNCH_KIND_FIELD = TrackEvent(
    debug_annotations=[{"name_iid": ANNOTATION_IID[KIND_ARG], "string_value_iid": KIND_IID[_LAUNCH_KIND]}]
).SerializeToString()
_BEGIN_TYPE = TrackEvent(type=TrackEvent.TYPE_SLICE_BEGIN).SerializeToString() + field_key(
    TrackEvent.DESCRIPTOR, "name_iid"
)
_ANNOTATIONS_KEY = field_key(TrackEvent.DESCRIPTOR, "debug_annotations")
_INT_VALUE_KEY = field_key(DebugAnnotation.DESCRIPTOR, "int_value")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True)
class Markers:
    """Every packet of a chunk's event stream, in the order written: one header per track, then
    the track's markers."""

    rows: int
    on_sequence: bytes  # the chunk's trusted_packet_sequence_id field
    # Track headers: output row, the track's uuid, its first timestamp.
    header_row: np.ndarray
    header_uuid: np.ndarray
    header_ts: np.ndarray
    header_counter: np.ndarray  # a unit track's: its SM's scopes-in-flight track (-1: none)
    # Markers, as written: output row, timestamp delta, track, and what it is: a slice's begin
    # (a row of ``name`` and ``values``: events, unit lifetimes, then launches), its end (-1),
    # or a counter point (-2); ``count``: a point's count, and a scope's begin's or end's
    # scopes in flight (``counted``).
    row: np.ndarray
    delta: np.ndarray
    track: np.ndarray
    slice: np.ndarray
    count: np.ndarray
    counted: np.ndarray
    scopes: int  # slices below this are scope events
    lives: int  # then up to this, unit lifetimes; the rest are launches
    name: np.ndarray
    location: np.ndarray  # per scope event: its interned source location, 0 for none
    values: dict[str, np.ndarray]  # per annotation, -1 where a slice does not carry it
    shared: Rows  # per unit track: the annotations all its slices carry (SM, warp; CTA)
    shared_names: frozenset[str]
    launch_events: Rows  # per launch slice: its begin's TrackEvent


def slice_markers(
    events: Mapping[str, np.ndarray],
    lives: Columns,
    numbered: Numbered,
    names: dict[str, int],
    launches: LaunchSlices,
    counters: Points,
    sequence: int,
    scope_names: Sequence[str],
    locations: np.ndarray,
) -> Markers:
    """A chunk's markers; ``locations``: each scope event's interned source location (0: none)."""
    tracks = numbered.tracks
    n_units, n_events, n_lives = len(tracks.unit), tracks.events, len(tracks.life_track)
    n_launches = len(launches.uuid)
    ordered, counter_tracks = _ordered(events, lives, tracks, launches, counters)
    n_tracks = n_units + n_launches + len(counter_tracks)
    track, new_track = ordered.track, ordered.new_track
    # Each track's header goes right before its first marker.
    row = np.arange(len(track)) + np.cumsum(new_track)
    shared = {"sm": tracks.sm[tracks.unit_sm], "warp": tracks.warp}
    if tracks.timeline == "ctas":
        shared["cta"] = tracks.place[tracks.unit_place]
    track_uuid = np.concatenate([numbered.unit_uuid, launches.uuid, counters.uuid[counter_tracks]])
    # A unit track's scopes carry its SM's scopes in flight: the SM's second counter track.
    flying = np.full(n_tracks, -1, dtype=np.int64)
    flying[:n_units] = numbered.sm_uuid[tracks.unit_sm] + 2
    scoped_or_lived = _SlicesOf(n_launches)
    return Markers(
        rows=len(track) + int(new_track.sum()),
        on_sequence=field_value(PACKET, "trusted_packet_sequence_id", sequence),
        header_row=row[new_track] - 1,
        header_uuid=track_uuid[track[new_track]],
        header_ts=ordered.ts[new_track],
        header_counter=flying[track[new_track]],
        row=row,
        delta=ordered.delta,
        track=track,
        slice=ordered.slice_of,
        count=ordered.count,
        counted=ordered.counted,
        scopes=n_events,
        lives=n_events + n_lives,
        name=scoped_or_lived(
            _scope_iids(events["scope"], scope_names, names), np.full(n_lives, names[LIFETIME])
        ),
        location=locations,
        shared=annotation_rows(n_units, shared),
        shared_names=frozenset(shared),
        values=_slice_values(events, lives, tracks, locations, scoped_or_lived),
        launch_events=launches.events,
    )


def _ordered(
    events: Mapping[str, np.ndarray], lives: Columns, tracks: Tracks, launches: LaunchSlices, counters: Points
) -> tuple[Ordered, np.ndarray]:
    """The chunk's markers in the order they go out (unit tracks, launch tracks, then counter
    tracks), and which of ``counters``' tracks have points here."""
    counter_tracks, point_track = np.unique(counters.track, return_inverse=True)
    n_tracks = len(tracks.unit) + len(launches.uuid) + len(counter_tracks)
    unsorted = unsorted_markers(
        events,
        lives,
        tracks,
        LaunchSpans(launches.begin, launches.end),
        counters,
        point_track,
        len(counter_tracks),
    )
    return in_track_order(unsorted, n_tracks), counter_tracks


class _SlicesOf:
    """A value per slice: the scope events', then the lifetimes', then -1 for each launch."""

    def __init__(self, launches: int):
        self.launches = launches

    def __call__(self, scoped: object, lived: object) -> np.ndarray:
        return stacked(scoped, lived, np.full(self.launches, -1))


def _slice_values(
    events: Mapping[str, np.ndarray], lives: Columns, tracks: Tracks, locations: np.ndarray, both: _SlicesOf
) -> dict[str, np.ndarray]:
    """Per annotation, each slice's value (-1 where a slice does not carry it)."""
    n_events, n_lives = tracks.events, len(tracks.life_track)
    no_event, no_life = np.full(n_events, -1), np.full(n_lives, -1)

    def of_cta(column: np.ndarray) -> np.ndarray:
        return both(column[tracks.row_cta[:n_events]], column[tracks.row_cta[n_events:]])

    return {
        "cta": of_cta(tracks.cta),
        "cluster": of_cta(tracks.cta_cluster),
        "cluster_rank": of_cta(tracks.cta_cluster_rank),
        "cycles": both(events["dur_cycles"], lives["end_cycles"] - lives["start_cycles"]),
        # A scope whose source location is interned has its line there, not here too.
        "line": both(np.where(locations > 0, -1, events["line"]), no_life),
        "records": both(no_event, lives["count"]),
        "overwritten": both(no_event, lives["overwritten"]),
    }


def _scope_iids(codes: np.ndarray, scope_names: Sequence[str], names: dict[str, int]) -> np.ndarray:
    """The interned name of each event's scope, from its scope code."""
    lookup = np.array([names.get(name, 0) for name in scope_names] or [0], dtype=np.int64)
    return lookup[codes]


def event_rows(markers: Markers, lo: int, hi: int) -> list[tuple[Rows, np.ndarray]]:
    """Output rows ``lo`` to ``hi`` of the event stream: track headers, slice begins and ends,
    counter points."""
    kinds = []
    a, b = np.searchsorted(markers.header_row, [lo, hi])
    if a < b:
        kinds.append((_header_rows(markers, a, b), markers.header_row[a:b] - lo))
    a, b = np.searchsorted(markers.row, [lo, hi])
    what = markers.slice[a:b]
    ends, points, begins = (
        np.flatnonzero(where) + a for where in (what == END_MARKER, what == COUNT_MARKER, what >= 0)
    )
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
        event = Rows(len(ends)).constant(END_EVENT)
        event.field(field_key(EVENT, "extra_counter_values"), markers.count[ends], markers.counted[ends])
        packet = (
            Rows(len(ends))
            .field(field_key(PACKET, "timestamp"), markers.delta[ends])
            .constant(markers.on_sequence)
            .message(field_key(PACKET, "track_event"), event)
        )
        kinds.append((Rows(len(ends)).message(TRACE_PACKET, packet), markers.row[ends] - lo))
    if len(points):
        event = (
            Rows(len(points))
            .constant(COUNTER_EVENT)
            .field(field_key(EVENT, "counter_value"), markers.count[points])
        )
        packet = (
            Rows(len(points))
            .field(field_key(PACKET, "timestamp"), markers.delta[points])
            .constant(markers.on_sequence)
            .message(field_key(PACKET, "track_event"), event)
        )
        kinds.append((Rows(len(points)).message(TRACE_PACKET, packet), markers.row[points] - lo))
    return kinds


def _header_rows(markers: Markers, a: int, b: int) -> Rows:
    """Make each track the sequence's default and restart the incremental clock at its first timestamp."""
    n = b - a
    ts, first = markers.header_ts[a:b], markers.header_row[a:b] == 0
    incremental = (
        Rows(n).constant(INCREMENTAL).field(field_key(CLOCK, "timestamp"), ts).constant(IS_INCREMENTAL)
    )
    boottime = Rows(n).constant(BOOTTIME).field(field_key(CLOCK, "timestamp"), ts)
    snapshot = (
        Rows(n)
        .message(field_key(ClockSnapshot.DESCRIPTOR, "clocks"), incremental)
        .message(field_key(ClockSnapshot.DESCRIPTOR, "clocks"), boottime)
        .constant(PRIMARY_BOOTTIME, first)
    )
    uuid = markers.header_uuid[a:b]
    flying = markers.header_counter[a:b]
    track_defaults = (
        Rows(n)
        .field(field_key(TrackEventDefaults.DESCRIPTOR, "track_uuid"), uuid)
        .field(field_key(TrackEventDefaults.DESCRIPTOR, "extra_counter_track_uuids"), flying, flying >= 0)
    )
    defaults = (
        Rows(n).message(field_key(DEFAULTS, "track_event_defaults"), track_defaults).constant(DEFAULT_CLOCK)
    )
    packet = (
        Rows(n)
        .message(field_key(PACKET, "clock_snapshot"), snapshot)
        .constant(markers.on_sequence)
        .message(field_key(PACKET, "trace_packet_defaults"), defaults)
    )
    return Rows(n).message(TRACE_PACKET, packet)


def _begin_rows(markers: Markers, index: np.ndarray) -> Rows:
    n = len(index)
    slices = markers.slice[index]
    lifetime = slices[0] >= markers.scopes
    event = Rows(n).take(markers.shared, markers.track[index])
    carried = carried_annotations(markers, lifetime)
    event.rows(annotation_rows(n, {name: markers.values[name][slices] for name in carried}))
    event.constant(kind_annotation(_UNIT_KIND if lifetime else _SCOPE_KIND))
    event.constant(BEGIN).field(field_key(EVENT, "name_iid"), markers.name[slices])
    if not lifetime:
        event.field(field_key(EVENT, "extra_counter_values"), markers.count[index], markers.counted[index])
        location = markers.location[slices]
        if location.any():
            event.field(field_key(EVENT, "source_location_iid"), location, location > 0)
    return _begin_packets(markers, index, event)


def carried_annotations(markers: Markers, lifetime: bool) -> tuple[str, ...]:
    """What a scope's or a unit lifetime's begin carries besides its track's shared annotations,
    in the order written (``wire.annotation_rows``)."""
    names = LIFETIME_ANNOTATIONS if lifetime else SCOPE_ANNOTATIONS
    return tuple(name for name in SLICE_ARGS if name in names and name not in markers.shared_names)


def _launch_rows(markers: Markers, index: np.ndarray) -> Rows:
    """Launch lifetimes' begins: few, each with its own annotations, encoded by protobuf."""
    launch = markers.slice[index] - markers.lives
    event = Rows(len(index)).take(markers.launch_events, launch)
    return _begin_packets(markers, index, event)


def _begin_packets(markers: Markers, index: np.ndarray, event: Rows) -> Rows:
    packet = (
        Rows(len(index))
        .field(field_key(PACKET, "timestamp"), markers.delta[index])
        .constant(markers.on_sequence)
        .message(field_key(PACKET, "track_event"), event)
        .constant(NEEDS_STATE)
    )
    return Rows(len(index)).message(TRACE_PACKET, packet)
