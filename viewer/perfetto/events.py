"""Events, marks and values in the Perfetto trace, chunk by chunk, beside the scope slices.

For each chunk with events or marks (``Chunk.async_parts``), one more packet sequence draws, on
the tracks ``perfetto`` numbered for the chunk:

- an async track per event under each CTA's place (its slot, or the CTA), named after the event:
  a slice per event from its start to its end (args: CTA, instance index, start and end warp,
  duration in cycles and ns, source line);
  events that overlap go on further tracks of the same name, which the UI merges into one;
- on the warp tracks, an instant where an event started and one where it ended, joined by a
  flow from the warp that started it to the warp that ended it; a start with no end, or an end
  with no start, is an instant named so ("tma_load: no end", args: its warp, cycles and status);
- marks as instants on their warp's track (args: CTA, warp, cycles), a value as the instant's
  ``value`` arg; and a counter track per warp and mark whose values change over time, under the
  warp's track.

Its events name their track in the event itself (no sequence default), at absolute times, with
names inline; ``readback.events`` reads the tables back from their args. Units that did not finish
have no warp track: their records are left out of the drawing (not of the tables).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    CounterDescriptor,
    TracePacket,
    TrackDescriptor,
    TrackEvent,
)

from proton_ik.viewer.perfetto.sink import Sink
from proton_ik.viewer.perfetto.tracks import Numbered
from proton_ik.viewer.tables import AsyncParts, Columns

ASYNC_RANK = 1 << 20  # an event's async tracks sort after the place's warp tracks
_MERGE = TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_TRACK_NAME


class _Places:
    """The warp (lane 0) and place tracks of the chunk's finished units, by (launch, CTA, unit)."""

    def __init__(self, lives: Columns, numbered: Numbered):
        track = numbered.tracks.life_track
        keys = zip(lives["launch"].tolist(), lives["cta"].tolist(), lives["unit"].tolist(), strict=True)
        unit_uuid = numbered.unit_uuid[track].tolist()
        place_uuid = numbered.place_uuid[numbered.tracks.unit_place[track]].tolist()
        self.tracks = {key: (u, p) for key, u, p in zip(keys, unit_uuid, place_uuid, strict=True)}

    def of(self, launch: np.ndarray, cta: np.ndarray, unit: np.ndarray, present: np.ndarray) -> np.ndarray:
        """(warp track, place track) per row; 0 where the unit has no track (or no side here)."""
        out = np.zeros((len(launch), 2), np.int64)
        for i in np.flatnonzero(present).tolist():
            out[i] = self.tracks.get((int(launch[i]), int(cta[i]), int(unit[i])), (0, 0))
        return out


class _Packets:
    """The sequence's packets, gathered and written in time order."""

    def __init__(self, sequence: int):
        self.sequence = sequence
        self.timed: list[tuple[int, int, TracePacket]] = []

    def event(self, ns: int, event: TrackEvent) -> None:
        packet = TracePacket(timestamp=ns, trusted_packet_sequence_id=self.sequence, track_event=event)
        self.timed.append((ns, len(self.timed), packet))

    def write(self, sink: Sink) -> None:
        for _, _, packet in sorted(self.timed, key=lambda item: item[:2]):
            sink.packet(packet)


def write_async(
    sink: Sink,
    parts: Sequence[AsyncParts],
    lives: Columns,
    numbered: Numbered,
    sequence: int,
    allocate: Callable[[int], np.ndarray],
    first_flow: int,
) -> int:
    """Draw a chunk's events, marks and values as packet sequence ``sequence``; returns the next
    free flow id."""
    places = _Places(lives, numbered)
    packets = _Packets(sequence)
    flow = first_flow
    for part in parts:
        flow = _events(sink, packets, part.events, places, allocate, flow)
        _marks(packets, part.marks, places, None)
        _marks(packets, part.values, places, (sink, allocate))
    packets.write(sink)
    return flow


def _side(events: Columns, places: _Places, side: str) -> tuple[np.ndarray, np.ndarray]:
    present = ~events[f"{side}_ns_missing"]
    found = places.of(events["launch"], events["cta"], events[f"{side}_unit"], present)
    return found[:, 0], found[:, 1]


def _events(
    sink: Sink, packets: _Packets, events: Columns, places: _Places, allocate: Callable, flow: int
) -> int:
    start_track, start_place = _side(events, places, "start")
    end_track, end_place = _side(events, places, "end")
    place = np.where(start_place > 0, start_place, end_place)
    both = (start_track > 0) & (end_track > 0) & (events["status"] == "matched")
    lane_track = _lanes(sink, events, both, place, allocate)
    # A side on an unfinished unit (no warp track) is left out of the drawing.
    for i in np.flatnonzero(np.where(events["status"] == "no start", end_track, start_track) > 0).tolist():
        name = str(events["event"][i])
        args = {"index": int(events["index"][i]), "cta": int(events["cta"][i])}
        if both[i]:
            # A slice cannot end before it begins: where the warps' clocks ran apart by more than
            # the event lasted (async_events.CLOCK_SKEW_CYCLES), its end is raised to its begin,
            # and its args keep the measured cycles and nanoseconds.
            begin = int(events["start_ns"][i])
            end = max(int(events["end_ns"][i]), begin)
            slice_args = {
                **args,
                "start_warp": int(events["start_warp"][i]),
                "end_warp": int(events["end_warp"][i]),
                "cycles": int(events["dur_cycles"][i]),
                "dur_ns": int(events["dur_ns"][i]),
                **_line(events, i),
            }
            packets.event(begin, _event(TrackEvent.TYPE_SLICE_BEGIN, lane_track[i], name, slice_args))
            packets.event(end, _event(TrackEvent.TYPE_SLICE_END, lane_track[i]))
            start = _event(TrackEvent.TYPE_INSTANT, start_track[i], f"{name}: start", args)
            start.flow_ids.append(flow)
            finish = _event(TrackEvent.TYPE_INSTANT, end_track[i], f"{name}: end", args)
            finish.terminating_flow_ids.append(flow)
            packets.event(begin, start)
            packets.event(end, finish)
            flow += 1
        elif events["status"][i] in ("no end", "no start"):
            status = str(events["status"][i])
            side, track = ("start", start_track) if status == "no end" else ("end", end_track)
            lost_args: dict[str, float | str] = {
                **args,
                "warp": int(events[f"{side}_warp"][i]),
                "cycles": int(events[f"{side}_cycles"][i]),
                "status": status,
                **_line(events, i),
            }
            ns = int(events[f"{side}_ns"][i])
            packets.event(ns, _event(TrackEvent.TYPE_INSTANT, track[i], f"{name}: {status}", lost_args))
    return flow


def _line(events: Columns, i: int) -> dict[str, int]:
    """The event's source line as an arg, where it has one."""
    return {} if events["line_missing"][i] else {"line": int(events["line"][i])}


def _lanes(
    sink: Sink, events: Columns, drawn: np.ndarray, place: np.ndarray, allocate: Callable
) -> np.ndarray:
    """The async track of each drawn event: per (place, event), events that overlap take further
    tracks of the same name (greedily, the first one free at its start)."""
    track = np.zeros(len(drawn), np.int64)
    rows = np.flatnonzero(drawn)
    order = rows[np.lexsort((events["start_ns"][rows], events["event_id"][rows], place[rows]))]
    free: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (place, event): heap of (end, track)
    for i in order.tolist():
        key = (int(place[i]), int(events["event_id"][i]))
        heap = free.setdefault(key, [])
        begin, end = int(events["start_ns"][i]), int(events["end_ns"][i])
        if heap and heap[0][0] <= begin:
            _, uuid = heapq.heappop(heap)
        else:
            uuid = int(allocate(1)[0])
            descriptor = TrackDescriptor(uuid=uuid, parent_uuid=key[0], name=str(events["event"][i]))
            descriptor.sibling_order_rank = ASYNC_RANK + key[1]
            descriptor.sibling_merge_behavior = _MERGE
            sink.packet(TracePacket(track_descriptor=descriptor))
        heapq.heappush(heap, (end, uuid))
        track[i] = uuid
    return track


def _marks(
    packets: _Packets, marks: Columns, places: _Places, counters: tuple[Sink, Callable] | None
) -> None:
    present = ~marks["ns_missing"]
    found = places.of(marks["launch"], marks["cta"], marks["unit"], present)[:, 0]
    drawn = np.flatnonzero(found > 0)
    for i in drawn.tolist():
        args: dict[str, float] = {
            "cta": int(marks["cta"][i]),
            "warp": int(marks["warp"][i]),
            "cycles": int(marks["cycles"][i]),
        }
        if counters is not None:
            args["value"] = float(marks["value"][i])
        packets.event(
            int(marks["ns"][i]), _event(TrackEvent.TYPE_INSTANT, found[i], str(marks["mark"][i]), args)
        )
    if counters is None or not len(drawn):
        return
    sink, allocate = counters
    keys = np.stack([found[drawn], marks["mark_id"][drawn]], axis=1)
    for key in np.unique(keys, axis=0).tolist():
        rows = drawn[(keys[:, 0] == key[0]) & (keys[:, 1] == key[1])]
        if len(np.unique(marks["value"][rows])) < 2:
            continue  # a value that never changes is an arg, not a counter
        uuid = int(allocate(1)[0])
        descriptor = TrackDescriptor(uuid=uuid, parent_uuid=key[0], name=str(marks["mark"][rows[0]]))
        descriptor.counter.CopyFrom(CounterDescriptor())
        sink.packet(TracePacket(track_descriptor=descriptor))
        for i in rows.tolist():
            counter = TrackEvent(type=TrackEvent.TYPE_COUNTER, track_uuid=uuid)
            counter.double_counter_value = float(marks["value"][i])
            packets.event(int(marks["ns"][i]), counter)


def _event(
    kind: int, track: int, name: str | None = None, args: Mapping[str, float | str] | None = None
) -> TrackEvent:
    event = TrackEvent(type=kind, track_uuid=int(track))
    if name is not None:
        event.name = name
    for key, value in (args or {}).items():
        annotation = event.debug_annotations.add(name=key)
        if isinstance(value, str):
            annotation.string_value = value
        elif isinstance(value, float) and key == "value":
            annotation.double_value = value
        else:
            annotation.int_value = value
    return event
