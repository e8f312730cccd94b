"""The host scopes' track: instances of ``proton_ik.scope``s gathered launch by launch, and
written last as one track of nested slices, its own packet sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    BUILTIN_CLOCK_BOOTTIME,
    ClockSnapshot,
    TracePacket,
    TracePacketDefaults,
    TrackEvent,
    TrackEventDefaults,
)

from proton_ik.viewer.perfetto.sink import Sink
from proton_ik.viewer.perfetto.tracks import new_descriptor
from proton_ik.viewer.perfetto.wire import ANNOTATION_IID, INCREMENTAL_CLOCK_ID, interning_packet
from proton_ik.viewer.tracks import HOST_ARGS, HOST_TRACK


@dataclass
class HostInstance:
    """One run of consecutive launches made under a host scope (and the scopes around it)."""

    name: str
    depth: int
    first_launch: int
    last_launch: int
    begin: int = np.iinfo(np.int64).max  # the earliest begin and latest end of its timed launches
    end: int = np.iinfo(np.int64).min
    launches: int = 0


class HostScopes:
    """Host scope instances, gathered launch by launch in launch order: a launch under the same
    outer scopes as the launch before it extends their instances; a scope that it is not under
    ends its instance."""

    def __init__(self) -> None:
        self.open: list[HostInstance] = []  # outermost first
        self.done: list[HostInstance] = []  # in the order they opened: outer before inner, then by time

    def add(self, path: Sequence[str], number: int, begin: int, end: int) -> None:
        """A launch (``begin > end``: it has no time) made under ``path``, outermost first."""
        keep = 0
        while keep < min(len(self.open), len(path)) and self.open[keep].name == path[keep]:
            keep += 1
        del self.open[keep:]
        for depth in range(keep, len(path)):
            instance = HostInstance(path[depth], depth, number, number)
            self.open.append(instance)
            self.done.append(instance)
        for instance in self.open:
            instance.last_launch = number
            instance.launches += 1
            if begin <= end:
                instance.begin, instance.end = min(instance.begin, begin), max(instance.end, end)

    def finish(self) -> list[HostInstance]:
        """Every instance with a time, outer before inner and in launch order."""
        self.open = []
        return [instance for instance in self.done if instance.begin <= instance.end]


def _host_markers(instances: list[HostInstance]) -> list[tuple[int, HostInstance | None]]:
    """Slice begins (the instance) and ends (None) in the order one track needs them: nested by
    depth, never back in time. Launches on several streams can overlap; an instance that begins
    before the one before it at its depth ended is shown from that end."""
    markers: list[tuple[int, HostInstance | None]] = []
    stack: list[HostInstance] = []
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


def write_host_track(sink: Sink, instances: list[HostInstance], uuid: int, sequence: int, root: int) -> None:
    """The host scopes' track (``uuid``, under the root track ``root``) and its slices, as packet
    sequence ``sequence``."""
    names = {name: iid for iid, name in enumerate(dict.fromkeys(i.name for i in instances), start=1)}
    sink.packet(interning_packet(names, sequence))
    sink.packet(TracePacket(track_descriptor=new_descriptor(uuid, root, HOST_TRACK, -1)))
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
    sink.packet(
        TracePacket(
            clock_snapshot=snapshot,
            trusted_packet_sequence_id=sequence,
            trace_packet_defaults=defaults,
        )
    )
    now = first
    for ts, instance in markers:
        if instance is None:
            event = TrackEvent(type=TrackEvent.TYPE_SLICE_END)
        else:
            event = TrackEvent(type=TrackEvent.TYPE_SLICE_BEGIN, name_iid=names[instance.name])
            for key in HOST_ARGS:
                event.debug_annotations.add(name_iid=ANNOTATION_IID[key], int_value=getattr(instance, key))
        sink.packet(
            TracePacket(
                timestamp=ts - now,
                trusted_packet_sequence_id=sequence,
                track_event=event,
                sequence_flags=TracePacket.SEQ_NEEDS_INCREMENTAL_STATE,
            )
        )
        now = ts
