"""The clusters track in the Perfetto trace: a launch's thread-block clusters seen together.

Under each launch whose clusters hold more than one CTA, a track named ``tracks.CLUSTER_TRACK``
(first among the launch's tracks) holds a slice per cluster, "cluster 5", from its first CTA's
start to its last CTA's end (its finished units'), with args: the cluster, its CTAs and their
SMs (by rank), and its start and end skews (``tables.clusters``). Clusters that overlap in time go on
further tracks of the same name, which the UI merges into one.

A launch's CTAs may come in several chunks (never one CTA in two): the CTAs of the launch that
goes on into the next chunk are kept until its last piece, and each launch's clusters are drawn
once, as one more packet sequence, at absolute times with names inline (as ``events``);
the readers skip the track by its name.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Protocol

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    DebugAnnotation,
    TracePacket,
    TrackDescriptor,
    TrackEvent,
)

from proton_ik.viewer.tables import Columns, cluster_columns, cta_columns, join_ctas
from proton_ik.viewer.tracks import CLUSTER_TRACK, Tracks

CLUSTER_RANK = -1  # the clusters track sorts before the launch's SM tracks (ranked by SM)
CLUSTER_ARGS = ("cluster", "ctas", "sms", "start_skew_ns", "end_skew_ns")
_MERGE = TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_TRACK_NAME


class PacketSink(Protocol):
    def packet(self, packet: TracePacket) -> None: ...


class ClusterTracks:
    """The clusters of a session's launches, chunk by chunk: each launch's drawn with its last piece."""

    def __init__(self) -> None:
        self._going_on: Columns | None = None  # the CTAs of the launch that goes on

    def add(
        self,
        sink: PacketSink,
        lives: Columns,
        tracks: Tracks,
        launch_uuid: np.ndarray,
        ending: set[int],
        sequence: int,
        allocate: Callable[[int], np.ndarray],
    ) -> bool:
        """Draw the clusters of the launches that end in this chunk (``lives``: its finished
        units; ``tracks`` the chunk's, ``launch_uuid`` its launch tracks' uuids) as packet
        sequence ``sequence``; True where it was used."""
        ctas = cta_columns({**lives, "finished": np.ones(len(lives["launch"]), bool)})
        if self._going_on is not None:
            ctas = join_ctas([self._going_on, ctas])
        done = np.isin(ctas["launch"], np.fromiter(ending, np.int64, len(ending)))
        self._going_on = {name: column[~done] for name, column in ctas.items()} if (~done).any() else None
        if not ctas["cluster_rank"][done].any():
            # Every CTA is its cluster's rank 0: clusters of one CTA each, which draw nothing
            # (two CTAs of one cluster have two ranks). Most launches: no tuples made for them.
            return False
        clusters = cluster_columns({name: column[done] for name, column in ctas.items()})
        size = clusters["size"]
        if not (size > 1).any():
            return False
        at = np.searchsorted(tracks.launch, clusters["launch"])  # every launch ending here has a track
        parents = launch_uuid[at]
        drawn = np.flatnonzero(
            np.isin(clusters["launch"], clusters["launch"][size > 1]) & (clusters["end_ns"] >= 0)
        )
        packets: list[tuple[int, int, TracePacket]] = []
        free: dict[int, list[tuple[int, int]]] = {}  # per launch track: heap of (end, lane track)
        for i in drawn[np.lexsort((clusters["start_ns"][drawn], parents[drawn]))].tolist():
            parent, begin, end = int(parents[i]), int(clusters["start_ns"][i]), int(clusters["end_ns"][i])
            heap = free.setdefault(parent, [])
            if heap and heap[0][0] <= begin:
                _, track = heapq.heappop(heap)
            else:
                track = int(allocate(1)[0])
                descriptor = TrackDescriptor(uuid=track, parent_uuid=parent, name=CLUSTER_TRACK)
                descriptor.sibling_order_rank = CLUSTER_RANK
                descriptor.sibling_merge_behavior = _MERGE
                sink.packet(TracePacket(track_descriptor=descriptor))
            heapq.heappush(heap, (end, track))
            begin_event = TrackEvent(type=TrackEvent.TYPE_SLICE_BEGIN, track_uuid=track)
            begin_event.name = f"cluster {int(clusters['cluster'][i])}"
            for name in CLUSTER_ARGS:
                annotation = begin_event.debug_annotations.add(name=name)
                value = clusters[name][i]
                if isinstance(value, tuple):
                    annotation.array_values.extend(DebugAnnotation(int_value=int(v)) for v in value)
                else:
                    annotation.int_value = int(value)
            end_event = TrackEvent(type=TrackEvent.TYPE_SLICE_END, track_uuid=track)
            packets.append((begin, len(packets), _packet(begin, begin_event, sequence)))
            packets.append((end, len(packets), _packet(end, end_event, sequence)))
        for _, _, packet in sorted(packets, key=lambda item: item[:2]):
            sink.packet(packet)
        return True


def _packet(ns: int, event: TrackEvent, sequence: int) -> TracePacket:
    return TracePacket(timestamp=ns, trusted_packet_sequence_id=sequence, track_event=event)
