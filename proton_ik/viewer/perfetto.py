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

Its parts: ``perfetto_tracks`` (the track tree and its names), ``perfetto_slices`` (slice packets),
``perfetto_host`` (the host scopes' track), ``perfetto_wire`` (protobuf encoding) and
``perfetto_sink`` (bundling and compression); this module drives them, chunk by chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket
from tqdm import tqdm

from proton_ik.viewer.byterows import Rows, assemble
from proton_ik.viewer.perfetto_host import HOST_TRACK, _HostInstance, _HostScopes, _write_host_track
from proton_ik.viewer.perfetto_sink import _Sink
from proton_ik.viewer.perfetto_slices import _event_rows, _launch_event, _LaunchSlices, _markers
from proton_ik.viewer.perfetto_tracks import (
    LIFETIME,
    _descriptor,
    _descriptor_rows,
    _event_names,
    _launch_description,
    _track_tree,
    _Tracks,
)
from proton_ik.viewer.perfetto_wire import INCREMENTAL_CLOCK_ID, _interning_packet
from proton_ik.viewer.pipeline import Chunk, Columns, chunk_from_tables

__all__ = [
    "HOST_TRACK",
    "INCREMENTAL_CLOCK_ID",
    "LIFETIME",
    "PROGRESS_EVENTS",
    "SEQUENCE_ID",
    "PerfettoWriter",
    "write_perfetto",
]

SEQUENCE_ID = 1  # the first chunk's packet sequence; later chunks count up from it
CHUNK_ROWS = 1 << 15  # packets encoded at once: about one bundle
PROGRESS_EVENTS = 1_000_000
_LIFE_COLUMNS = (
    "kernel", "launch", "sm", "cta", "unit", "warp", "start_ns", "end_ns", "start_cycles", "end_cycles",
    "count", "overwritten",
)  # fmt: skip


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
        _write_host_track(self._sink, instances, int(self._allocate(1)[0]), self._sequence)
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
