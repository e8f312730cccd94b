"""Events in, Perfetto protobuf trace (``.pftrace``) out, streamed with perfetto's trace builder.

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
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    BUILTIN_CLOCK_BOOTTIME,
    TracePacket,
    TrackDescriptor,
    TrackEvent,
)
from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder
from tqdm import tqdm

SEQUENCE_ID = 1
# Clock ids 64..127 are scoped to one packet sequence; only those may be incremental.
INCREMENTAL_CLOCK_ID = 64
BUNDLE_BYTES = 1 << 20
PROGRESS_EVENTS = 1_000_000
PROGRESS_STEP = 1 << 16
ANNOTATIONS = ("cta", "sm", "warp", "cycles", "line", "records", "overwritten")
_ANNOTATION_IID = {name: iid for iid, name in enumerate(ANNOTATIONS, start=1)}
LIFETIME = "lifetime"  # the slice spanning a unit from its start to its epilogue
_LIFETIME_ORDER = np.iinfo(np.int64).max  # a lifetime ends after every record of its unit

_BEGIN, _END, _LIFETIME = 0, 1, 2


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
    tracks = _track_tree(events, units, launches, title)
    names = _event_names(events)
    markers = _markers(events, units, tracks, names)
    show = len(events) > PROGRESS_EVENTS if progress is None else progress
    with open(path, "wb") as file:
        sink = _PacketSink(StreamingTraceProtoBuilder(file), compress)
        sink.write(_interning_packet(names))
        for descriptor in tracks.descriptors:
            packet = TracePacket()
            packet.track_descriptor.CopyFrom(descriptor)
            sink.write(packet)
        total = len(markers["ts"]) + len(tracks.uuid_of_track)
        with tqdm(total=total, desc="perfetto", unit="packet", unit_scale=True, disable=not show) as bar:
            for number, packet in enumerate(_packets(markers, tracks.uuid_of_track), start=1):
                sink.write(packet)
                if number % PROGRESS_STEP == 0:
                    bar.update(PROGRESS_STEP)
            bar.update(total - bar.n)
        sink.close()
    return path


@dataclass(frozen=True)
class _Tracks:
    descriptors: list[TrackDescriptor]
    uuid_of_track: np.ndarray  # uuid of each warp track, indexed by track number
    key: pd.DataFrame  # launch, cta, unit, lane -> track number


def _track_tree(events: pd.DataFrame, units: pd.DataFrame, launches: pd.DataFrame, title: str) -> _Tracks:
    """Descriptors for root, launches, SMs, CTAs and warp lanes, with numeric sibling order."""
    warp_tracks = pd.concat(
        [
            events[["launch", "kernel", "sm", "cta", "unit", "warp", "lane"]],
            units.loc[units["finished"], ["launch", "kernel", "sm", "cta", "unit", "warp"]].assign(lane=0),
        ]
    )
    warp_tracks["kernel"] = warp_tracks["kernel"].astype(str)
    warp_tracks = warp_tracks.drop_duplicates(["launch", "cta", "unit", "lane"]).sort_values(
        ["launch", "sm", "cta", "unit", "lane"], ignore_index=True
    )
    descriptors = [_descriptor(1, None, title, rank=None)]
    uuids: dict[tuple, int] = {(): 1}
    described = {row["launch"]: _launch_description(row) for row in launches.to_dict("records")}
    width = dict(zip(launches["launch"], launches["warps_per_unit"], strict=True))
    uuid_of_track = np.zeros(len(warp_tracks), dtype=np.int64)
    lanes = int(warp_tracks["lane"].max()) + 1 if len(warp_tracks) else 1
    for number, row in enumerate(warp_tracks.itertuples(index=False)):
        chain = [
            ((row.launch,), f"launch {row.launch}: {row.kernel}", row.launch),
            ((row.launch, row.sm), f"SM {row.sm}", row.sm),
            ((row.launch, row.sm, row.cta), f"CTA {row.cta}", row.cta),
        ]
        for key, name, rank in chain:
            if key not in uuids:
                descriptor = _descriptor(len(descriptors) + 1, uuids[key[:-1]], name, rank)
                if len(key) == 1:
                    descriptor.description = described[row.launch]
                descriptors.append(descriptor)
                uuids[key] = descriptor.uuid
        name = _warp_name(row.warp, int(width[row.launch]))
        if row.lane:
            name += f" overlap {row.lane}"
        descriptors.append(
            _descriptor(len(descriptors) + 1, uuids[chain[-1][0]], name, row.unit * lanes + row.lane)
        )
        uuid_of_track[number] = descriptors[-1].uuid
    key = warp_tracks[["launch", "cta", "unit", "lane"]].assign(track=np.arange(len(warp_tracks)))
    return _Tracks(descriptors, uuid_of_track, key)


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


def _warp_name(warp: int, width: int) -> str:
    return f"warp {warp}" if width <= 1 else f"warps {warp}-{warp + width - 1}"


def _launch_description(stats: dict) -> str:
    return (
        f"kernel {stats['kernel']}, grid {stats['grid']}, stream {stats['stream']}; "
        f"SM clock {stats['mhz']:.0f} MHz ({stats['clock_source']}); {stats['events']} events from "
        f"{stats['records']} records; {stats['overwritten']} records overwritten by the ring, "
        f"{stats['lost_to_ring']} ends lost to it; {stats['unmatched_begin']} unmatched begins, "
        f"{stats['unmatched_end']} unmatched ends; {stats['units_unfinished']} unfinished units; "
        f"{stats['ctas_missing']} CTAs without a header"
    )


def _event_names(events: pd.DataFrame) -> dict[str, int]:
    """Interned event names: the unit lifetime first, then every scope name."""
    scopes = sorted(str(s) for s in pd.unique(events["scope"].astype(str))) if len(events) else []
    return {name: iid for iid, name in enumerate(dict.fromkeys([LIFETIME, *scopes]), start=1)}


MARKER_FIELDS = (
    "track",
    "order",
    "kind",
    "ts",
    "name",
    "cta",
    "sm",
    "warp",
    "cycles",
    "line",
    "records",
    "overwritten",
)


def _markers(
    events: pd.DataFrame, units: pd.DataFrame, tracks: _Tracks, names: dict[str, int]
) -> dict[str, np.ndarray]:
    """Every begin and end to write, as columns of MARKER_FIELDS, sorted by track emission order,
    then by the order the unit recorded them (``order``: record number; lifetimes enclose all)."""
    keys = ["launch", "cta", "unit", "lane"]
    scoped = events.merge(tracks.key, on=keys, how="left", sort=False)
    lives = units.loc[units["finished"]].assign(lane=0).merge(tracks.key, on=keys, how="left", sort=False)
    start, end = lives["start_ns"].to_numpy(np.int64), lives["end_ns"].to_numpy(np.int64)
    if len(scoped) and len(lives):
        # Keep each lifetime around its unit's scopes even if the unit's clocks are inconsistent.
        first = _per_track(np.minimum, tracks, scoped["track"], scoped["begin_ns"])
        last = _per_track(np.maximum, tracks, scoped["track"], scoped["end_ns"])
        start = np.minimum(start, first[lives["track"].to_numpy(np.int64)])
        end = np.maximum(end, last[lives["track"].to_numpy(np.int64)])
    scope = {
        "name": scoped["scope"].astype(str).map(names),
        "cta": scoped["cta"],
        "sm": scoped["sm"],
        "warp": scoped["warp"],
        "cycles": scoped["dur_cycles"],
        "line": scoped["line"].fillna(-1),
    }
    lifetime = {
        "name": names[LIFETIME],
        "cta": lives["cta"],
        "sm": lives["sm"],
        "warp": lives["warp"],
        "cycles": lives["end_cycles"] - lives["start_cycles"],
        "records": lives["count"],
        "overwritten": lives["overwritten"],
    }
    parts = [
        _part(scoped, kind=_BEGIN, order=scoped["begin_record"], ts=scoped["begin_ns"], **scope),
        _part(scoped, kind=_END, order=scoped["end_record"], ts=scoped["end_ns"]),
        _part(lives, kind=_LIFETIME, order=-1, ts=start, **lifetime),
        _part(lives, kind=_END, order=_LIFETIME_ORDER, ts=end),
    ]
    markers = {field: np.concatenate([part[field] for part in parts]) for field in MARKER_FIELDS}
    # Tracks go out in order of their first timestamp: each restarts the incremental clock with a
    # snapshot against BOOTTIME, and one clock's snapshots must not go back in time.
    first_ts = _per_track(np.minimum, tracks, markers["track"], markers["ts"])
    track_rank = np.empty_like(first_ts)
    track_rank[np.argsort(first_ts, kind="stable")] = np.arange(len(first_ts))
    sort = np.lexsort((markers["order"], track_rank[markers["track"]]))
    return {field: column[sort] for field, column in markers.items()}


def _part(frame: pd.DataFrame, **values: object) -> dict[str, np.ndarray]:
    """One kind of marker for every row of ``frame``; fields not given are 0."""
    rows = len(frame)
    part = {"track": frame["track"].to_numpy(np.int64)}
    for field in MARKER_FIELDS[1:]:
        value = values.get(field, 0)
        column = (
            value.to_numpy(np.int64) if isinstance(value, pd.Series) else np.asarray(value, dtype=np.int64)
        )
        part[field] = np.broadcast_to(column, (rows,))
    return part


def _per_track(
    reduce: np.ufunc, tracks: _Tracks, track: pd.Series | np.ndarray, values: object
) -> np.ndarray:
    """``reduce`` (np.minimum or np.maximum) of ``values`` per warp track."""
    identity = np.iinfo(np.int64).max if reduce is np.minimum else np.iinfo(np.int64).min
    result = np.full(len(tracks.uuid_of_track), identity, dtype=np.int64)
    reduce.at(result, np.asarray(track, dtype=np.int64), np.asarray(values, dtype=np.int64))
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


class _Template:
    """One reusable packet of a given shape; ``fill`` sets a begin's name and annotation values."""

    def __init__(self, event_type: int, annotations: tuple[str, ...] = ()):
        self.packet = TracePacket(trusted_packet_sequence_id=SEQUENCE_ID)
        self.event = self.packet.track_event
        self.event.type = event_type
        if event_type == TrackEvent.TYPE_SLICE_BEGIN:
            self.packet.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        self.annotations = [
            self.event.debug_annotations.add(name_iid=_ANNOTATION_IID[name], int_value=0)
            for name in annotations
        ]

    def fill(self, name: int, *values: int) -> TracePacket:
        self.event.name_iid = name
        for annotation, value in zip(self.annotations, values, strict=True):
            annotation.int_value = value
        return self.packet


def _packets(markers: dict[str, np.ndarray], uuid_of_track: np.ndarray) -> Iterator[TracePacket]:
    """Event packets, each track led by its header; timestamps are deltas on the incremental clock."""
    scope = _Template(TrackEvent.TYPE_SLICE_BEGIN, ("cta", "sm", "warp", "cycles", "line"))
    scope_no_line = _Template(TrackEvent.TYPE_SLICE_BEGIN, ("cta", "sm", "warp", "cycles"))
    lifetime = _Template(
        TrackEvent.TYPE_SLICE_BEGIN, ("cta", "sm", "warp", "cycles", "records", "overwritten")
    )
    end = _Template(TrackEvent.TYPE_SLICE_END).packet
    fields = ("track", "kind", "ts", "name", "cta", "sm", "warp", "cycles", "line", "records", "overwritten")
    columns = [markers[field].tolist() for field in fields]
    current, last_ts = -1, 0
    for track, kind, ts, name, cta, sm, warp, cycles, line, records, overwritten in zip(
        *columns, strict=True
    ):
        if track != current:
            yield _track_header(int(uuid_of_track[track]), ts, first=current < 0)
            current, last_ts = track, ts
        if kind == _END:
            packet = end
        elif kind == _LIFETIME:
            packet = lifetime.fill(name, cta, sm, warp, cycles, records, overwritten)
        elif line >= 0:
            packet = scope.fill(name, cta, sm, warp, cycles, line)
        else:
            packet = scope_no_line.fill(name, cta, sm, warp, cycles)
        packet.timestamp = ts - last_ts
        last_ts = ts
        yield packet


def _track_header(uuid: int, ts: int, first: bool) -> TracePacket:
    """Make ``uuid`` the sequence's default track and restart the incremental clock at ``ts``."""
    packet = TracePacket(trusted_packet_sequence_id=SEQUENCE_ID)
    defaults = packet.trace_packet_defaults
    defaults.timestamp_clock_id = INCREMENTAL_CLOCK_ID
    defaults.track_event_defaults.track_uuid = uuid
    packet.clock_snapshot.clocks.add(clock_id=INCREMENTAL_CLOCK_ID, timestamp=ts, is_incremental=True)
    packet.clock_snapshot.clocks.add(clock_id=BUILTIN_CLOCK_BOOTTIME, timestamp=ts)
    if first:
        packet.clock_snapshot.primary_trace_clock = BUILTIN_CLOCK_BOOTTIME
    return packet


class _PacketSink:
    """Writes packets through the trace builder, or gathers them into compressed bundles.

    A bundle's payload is what the builder would have written for those packets (each one a
    ``Trace.packet`` field); framing them here saves a message copy per packet.
    """

    def __init__(self, builder: StreamingTraceProtoBuilder, compress: bool):
        self.builder = builder
        self.compress = compress
        self.bundle: list[bytes] = []
        self.bundle_bytes = 0

    def write(self, packet: TracePacket) -> None:
        if not self.compress:
            self.builder.write_packet(packet)
            return
        payload = packet.SerializeToString()
        self.bundle.append(_PACKET_FIELD + _varint(len(payload)) + payload)
        self.bundle_bytes += len(payload) + 3
        if self.bundle_bytes >= BUNDLE_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.bundle:
            packet = self.builder.create_packet()
            packet.compressed_packets = zlib.compress(b"".join(self.bundle), 6)
            self.builder.write_packet(packet)
            self.bundle, self.bundle_bytes = [], 0

    def close(self) -> None:
        self.flush()


_PACKET_FIELD = bytes([1 << 3 | 2])  # Trace.packet: field 1, length-delimited


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
