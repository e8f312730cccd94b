"""Reading a ``.pftrace`` proton_ik wrote (``perfetto.write_perfetto``) back into columns: its
packets replayed (interned names, per-track incremental clocks, each unit track's stack of
slices), its track tree walked up from each slice to its launch track, and the launch table
rebuilt from each launch slice's args (its metadata and totals, structured). A slice's CTA, SM
and warp are its args, so slot and CTA timelines (``tracks``) read alike; a scope's file is its
interned source location's (and its line, there rather than an arg). Events, marks and values
(``perfetto.events``: async slices and instants that name their track) go to ``events``."""

from __future__ import annotations

import math
import warnings
from array import array
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import DebugAnnotation, SourceLocation, TrackEvent

from proton_ik.viewer.perfetto import INCREMENTAL_CLOCK_ID
from proton_ik.viewer.readback.checks import (
    INT64_RANGE,
    NOT_A_TRACE,
    checked_warps_per_unit,
    refuse,
    whole_number,
)
from proton_ik.viewer.readback.events import AsyncRows, with_async
from proton_ik.viewer.readback.packets import iter_packets
from proton_ik.viewer.readback.trace_file import TraceFile, trace_file_from_columns
from proton_ik.viewer.session_file import SessionFileError
from proton_ik.viewer.tables import config_text
from proton_ik.viewer.tracks import (
    CLUSTER_TRACK,
    FILE_ARG,
    HOST_TRACK,
    LAUNCH_TOTALS,
    LIFETIME,
    SLICE_ARGS,
    parse_lane,
    parse_launch_name,
    session_name,
)

# what show needs of a slice's args (the clusters for their skews); the writers need them all
_SUMMARY_ARGS = (*SLICE_ARGS[:5], "cluster", "cluster_rank")


# What a launch's slice says besides its totals.
_LAUNCH_METADATA = (
    "name", "host_scope", "launch_metrics", "device", "stream", "graph", "replay", "grid", "warps_per_unit",
    "capacity", "capacity_source", "capacity_bound", "capacity_reason", "sampled", "mhz", "clock_source",
)  # fmt: skip


def read_perfetto(path: str | Path, *, for_writing: bool = False) -> TraceFile:
    """Read a ``.pftrace`` written by ``perfetto.write_perfetto``, replaying its packets as they
    stream in: interned names, per-track incremental clocks, slice begins and ends on each warp
    track's stack. Slices go into typed columns, with the place of their begin and end in the
    file (which orders a track's markers when the trace is written again); only launch
    lifetimes keep their args."""
    replay = _Replay(Path(path), for_writing)
    for packet in iter_packets(replay.path):
        replay.packet(packet)
    return replay.trace_file()


class _Replay:
    """The state of a ``.pftrace`` replayed packet by packet: what its packets interned, each
    track's open slices, the current track and time, and the columns of the slices ended."""

    def __init__(self, path: Path, for_writing: bool) -> None:
        self.path, self.for_writing = path, for_writing
        self.tracks = TrackTree()
        self.names: dict[int, str] = {}
        self.annotation_names: dict[int, str] = {}
        self.sources: dict[int, tuple[str, int | None]] = {}  # interned source location: file, line
        self.stacks: dict[int, list[tuple[str, int, dict[str, Any], int]]] = defaultdict(list)
        self.scopes: dict[str, int] = {}  # slice name -> code
        self.files: dict[str, int] = {}  # source file -> code
        self.rows = {
            "track": array("Q"), "scope": array("q"), "file": array("q"), "begin_ns": array("q"),
            "dur_ns": array("q"), "depth": array("q"), "begin_record": array("q"), "end_record": array("q"),
        }  # fmt: skip
        self.slice_args = SLICE_ARGS if for_writing else _SUMMARY_ARGS
        self.values = {key: array("q") for key in self.slice_args}
        self.present = {key: array("b") for key in self.slice_args}
        self.launch_args: dict[int, dict[str, Any]] = {}
        self.track, self.now, self.marker = 0, 0, 0
        self.async_rows = AsyncRows(path)

    def packet(self, packet: Any) -> None:
        if packet.HasField("interned_data"):
            interned = packet.interned_data
            self.names.update({entry.iid: _text(entry.name) for entry in interned.event_names})
            self.annotation_names.update(
                {entry.iid: _text(entry.name) for entry in interned.debug_annotation_names}
            )
            self.sources.update({entry.iid: _source(entry) for entry in interned.source_locations})
        if packet.HasField("trace_packet_defaults"):
            self.track = packet.trace_packet_defaults.track_event_defaults.track_uuid
        kind = packet.WhichOneof("data")
        if kind == "track_descriptor":
            self.tracks.add(packet.track_descriptor)
        elif kind == "clock_snapshot":
            for clock in packet.clock_snapshot.clocks:
                if clock.clock_id == INCREMENTAL_CLOCK_ID:
                    self.now = clock.timestamp
        if kind != "track_event":
            return
        event = packet.track_event
        if event.track_uuid in self.tracks.clusters:
            return  # a cluster's slice sums up its CTAs' (``perfetto.clusters``): nothing to read
        if event.track_uuid:  # events, marks and values (``perfetto.events``), at absolute times
            self._async(event, packet.timestamp)
            return
        self.now += packet.timestamp
        self.marker += 1
        if event.type == TrackEvent.TYPE_SLICE_BEGIN:
            args = self._args(event)
            if event.source_location_iid in self.sources:  # a scope's file and line
                args[FILE_ARG], line = self.sources[event.source_location_iid]
                args.setdefault("line", line)
            self.stacks[self.track].append((self.names.get(event.name_iid, ""), self.now, args, self.marker))
        elif event.type == TrackEvent.TYPE_SLICE_END and self.track in self.stacks:
            self._end()

    def _args(self, event: Any) -> dict[str, Any]:
        return {self.annotation_names.get(a.name_iid, a.name): _value(a) for a in event.debug_annotations}

    def _async(self, event: Any, timestamp: int) -> None:
        """An event's slice begin or an instant (an unmatched event, a mark or a value)."""
        if event.type not in (TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_INSTANT):
            return
        rows = self.async_rows
        add = rows.add_slice if event.type == TrackEvent.TYPE_SLICE_BEGIN else rows.add_instant
        add(
            event.track_uuid,
            _text(event.name),
            timestamp,
            self._args(event),
            f"an event on track {event.track_uuid}",
        )

    def _end(self) -> None:
        """The current track's innermost open slice ends now: a row of its own, unless it is a
        host scope's or a launch's (whose args are the launch's)."""
        track, now, path = self.track, self.now, self.path
        stack = self.stacks[track]
        name, begin, args, begun = stack.pop()
        depth = len(stack)
        if not stack:
            del self.stacks[track]  # one list per open track, not one per track ever seen
        duration = whole_number(now - begin, f"the duration of a {name!r:.40} slice", path)
        if not (INT64_RANGE[0] <= begin <= INT64_RANGE[1] and INT64_RANGE[0] <= now <= INT64_RANGE[1]):
            raise refuse(path, f"a {name!r:.40} slice's times do not fit in 64 bits")
        if track in self.tracks.host:
            return  # host scopes group launches; the summary reads them from the launches
        if track in self.tracks.launches:
            self.launch_args[track] = args
            return
        rows = self.rows
        rows["track"].append(track)
        rows["scope"].append(self.scopes.setdefault(name, len(self.scopes)))
        file = args.get(FILE_ARG)
        rows["file"].append(-1 if file is None else self.files.setdefault(file, len(self.files)))
        rows["dur_ns"].append(duration)
        rows["begin_ns"].append(begin)  # show's cluster skews read the units' starts
        if self.for_writing:  # what only the writers need: kept apart, it costs show nothing
            rows["depth"].append(depth)
            rows["begin_record"].append(begun)
            rows["end_record"].append(self.marker)
        for key in self.slice_args:
            value = args.get(key)
            self.present[key].append(value is not None)
            self.values[key].append(0 if value is None else whole_number(value, f"a slice's {key}", path))

    def trace_file(self) -> TraceFile:
        """The replayed slices' tables, with the events, marks and values placed on their launches."""
        tables = _perfetto_tables(self)
        places = self.async_rows.places()
        if len(places):
            stray = places[self.tracks.launch_of(self.path, places)[0] == 0]
            if len(stray):  # another tool's async slices and instants (torch.profiler's flows)
                _say_left_out(self.path, self.async_rows.drop_places(stray), "events")
        return with_async(tables, self.async_rows.tables(self._launches_of, relative=False))

    def _launches_of(self, uuids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The launch and kernel of each track (by uuid)."""
        tracks = self.tracks
        above = tracks.launch_of(self.path, uuids.astype(np.uint64))[0]
        if (above == 0).any():
            raise SessionFileError(f"{self.path} {NOT_A_TRACE}: an event's track belongs to no launch track")
        launch_of = [tracks.launches[uuid] for uuid in above.tolist()]
        return np.array([launch for launch, _ in launch_of]), np.array([kernel for _, kernel in launch_of])


class TrackTree:
    """The track descriptors as compact columns (uuid, parent, lane: the number after a unit
    track's "overlap", 0 for none); launch tracks, which are few, keep their launch number and
    kernel."""

    def __init__(self) -> None:
        self.uuids, self.parents, self.lanes = array("Q"), array("Q"), array("q")
        self.launches: dict[int, tuple[int, str]] = {}
        self.host: set[int] = set()  # the host scopes' track
        self.clusters: set[int] = set()  # the launches' clusters tracks
        self.other_roots: set[int] = set()  # launch tracks' parents past the root: other sessions'
        self.title = ""

    def add(self, descriptor: Any) -> None:
        name = _text(descriptor.name)
        self.uuids.append(descriptor.uuid)
        self.parents.append(descriptor.parent_uuid)
        self.lanes.append(parse_lane(name) or 0)
        if descriptor.parent_uuid == 1 and name == HOST_TRACK:
            self.host.add(descriptor.uuid)
        if name == CLUSTER_TRACK and descriptor.parent_uuid in self.launches:
            self.clusters.add(descriptor.uuid)
        launch = parse_launch_name(name)
        if launch is not None and descriptor.parent_uuid == 1:
            self.launches[descriptor.uuid] = launch
        elif launch is not None and descriptor.parent_uuid not in self.launches:
            self.other_roots.add(descriptor.parent_uuid)  # a merged trace's next session
        if descriptor.uuid == 1:
            self.title = name

    def launch_of(self, path: Path, tracks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each track, the launch track above it (0 for a track under no launch: another
        tool's, merged beside the session), and its lane (past 0: an overlap track); refuses a
        track whose parent has no descriptor, or that sits on a loop of parents."""
        uuids = np.frombuffer(self.uuids, dtype=np.uint64)
        order = np.argsort(uuids, kind="stable")
        known, parents = uuids[order], np.frombuffer(self.parents, dtype=np.uint64)[order]
        at = np.minimum(np.searchsorted(known, tracks), max(len(known) - 1, 0))
        if len(tracks) and (not len(known) or (known[at] != tracks).any()):
            raise SessionFileError(f"{path} {NOT_A_TRACE}: a slice is on a track with no descriptor")
        lane = np.frombuffer(self.lanes, dtype=np.int64)[order][at]
        launch_uuids = np.fromiter(self.launches, dtype=np.uint64, count=len(self.launches))
        current = tracks.copy()
        for _ in range(64):  # deeper than any tree proton_ik writes: a loop of parents
            done = np.isin(current, launch_uuids) | (current == 0)
            if done.all():
                return current, lane
            at = np.minimum(np.searchsorted(known, current), len(known) - 1)
            if (~done & (known[at] != current)).any():
                raise SessionFileError(f"{path} {NOT_A_TRACE}: a track's parent has no descriptor")
            current = np.where(done, current, parents[at])
        raise SessionFileError(f"{path} {NOT_A_TRACE}: its tracks' parents form a loop")

    def under_the_root(self, tracks: np.ndarray) -> np.ndarray:
        """Whether each track is (under) the session's root track, uuid 1: proton_ik's, as
        against another tool's merged beside it."""
        parent_of = dict(zip(self.uuids.tolist(), self.parents.tolist(), strict=True))
        current = tracks.tolist()
        for _ in range(64):
            current = [track if track in (0, 1) else parent_of.get(track, 0) for track in current]
        return np.array([track == 1 for track in current], dtype=bool)


def _perfetto_tables(replay: _Replay) -> TraceFile:
    """The tables of a replayed ``.pftrace``: each slice's track walked up to its launch track."""
    path, tracks, rows, scopes, files = replay.path, replay.tracks, replay.rows, replay.scopes, replay.files
    launch_tracks = tracks.launches
    if not launch_tracks:
        raise SessionFileError(
            f"{path} is a Perfetto trace, but not one proton_ik wrote: it has no launch track. "
            "proton-ik reads the traces it writes and its session files (.pik)"
        )
    if tracks.other_roots:
        raise SessionFileError(
            f"{path} holds {1 + len(tracks.other_roots)} sessions (a job's trace, from proton-ik merge); "
            "proton-ik reads back the trace of one session. Convert or show each session's .pik "
            "(proton-ik show takes several at once), or open this trace in Perfetto"
        )
    track = np.frombuffer(rows["track"], dtype=np.uint64)
    uuids, slice_track = np.unique(track, return_inverse=True)
    above, track_lane = tracks.launch_of(path, uuids)
    if (above == 0).any():  # another tool's tracks (torch.profiler's, merged beside the session)
        if tracks.under_the_root(uuids[above == 0]).any():
            raise SessionFileError(f"{path} {NOT_A_TRACE}: a track of the session belongs to no launch track")
        _leave_out_other_tools(path, replay, (above != 0)[slice_track])
        track = np.frombuffer(rows["track"], dtype=np.uint64)
        uuids, slice_track = np.unique(track, return_inverse=True)
        above, track_lane = tracks.launch_of(path, uuids)
    launch_of = above.tolist()
    launch_number = np.array([launch_tracks[t][0] for t in launch_of], dtype=np.int64)[slice_track]
    kernels: dict[str, int] = {}
    kernel_of = [kernels.setdefault(launch_tracks[t][1], len(kernels)) for t in launch_of]
    scope_code = np.frombuffer(rows["scope"], dtype=np.int64)
    file_code = np.frombuffer(rows["file"], dtype=np.int64)
    del track
    columns: dict[str, Any] = {
        # Categoricals: a code per slice, each name held once.
        "kernel": pd.Categorical.from_codes(np.array(kernel_of, dtype=np.int32)[slice_track], list(kernels)),
        "launch": launch_number,
        "scope": pd.Categorical.from_codes(scope_code.astype(np.int32), list(scopes)),
        "file": pd.Categorical.from_codes(file_code.astype(np.int32), list(files)),
        "lane": track_lane[slice_track],
        **{
            name: np.frombuffer(rows[name], dtype=np.int64)
            for name in (_TIMED if replay.for_writing else ("begin_ns", "dur_ns"))
        },
    }
    # A warp track's first slice is its unit's lifetime: scopes under it count from depth 0.
    if replay.for_writing:
        columns["depth"] = np.maximum(columns["depth"] - (columns["lane"] == 0), 0)
    for key, values in replay.values.items():
        columns[key] = pd.arrays.IntegerArray(
            np.frombuffer(values, dtype=np.int64).copy(), ~np.frombuffer(replay.present[key], dtype=bool)
        )
    overlapping = (columns["lane"] > 0) & (scope_code != scopes.get(LIFETIME, -1))
    launches = _described_launches(path, launch_tracks, replay.launch_args, columns, pd.Series(overlapping))
    return trace_file_from_columns(
        {"name": session_name(tracks.title)}, columns, launches, replay.for_writing
    )


_TIMED = ("begin_ns", "dur_ns", "depth", "begin_record", "end_record")  # the typed columns of a slice


def _leave_out_other_tools(path: Path, replay: _Replay, ours: np.ndarray) -> None:
    """Keep only the slices under a launch (``ours``), saying how many others were left out: a
    trace merged with torch.profiler's holds its threads' and streams' slices too."""
    left_out = int((~ours).sum())
    for column in (replay.rows, replay.values, replay.present):
        for name, values in column.items():
            if len(values) == len(ours):  # (what only the writers need is empty for show)
                kept = np.frombuffer(values, dtype=values.typecode)[ours]
                column[name] = array(values.typecode, kept.tobytes())
    _say_left_out(path, left_out, "slices")


def _say_left_out(path: Path, count: int, what: str) -> None:
    warnings.warn(
        f"{path}: {count:,} {what} on tracks that are not proton_ik's (another tool's, merged "
        "beside the session, such as torch.profiler's) are left out",
        stacklevel=5,
    )


def _text(value: str | bytes) -> str:
    """A string field; protobuf hands back bytes where a file's text is not UTF-8."""
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _source(location: SourceLocation) -> tuple[str, int | None]:
    """An interned source location's file, and its line where it has one."""
    return _text(location.file_name), location.line_number if location.HasField("line_number") else None


def _value(annotation: DebugAnnotation) -> Any:
    """A debug annotation as plain data: a number, text, dictionary or list."""
    if annotation.dict_entries:
        return {entry.name: _value(entry) for entry in annotation.dict_entries}
    if annotation.array_values:
        return [_value(item) for item in annotation.array_values]
    kind = annotation.WhichOneof("value")
    return getattr(annotation, kind) if kind else 0


def _described_launches(
    path: Path,
    launch_tracks: dict[int, tuple[int, str]],
    launch_args: dict[int, dict[str, Any]],
    columns: dict[str, Any],
    overlapping: pd.Series,
) -> pd.DataFrame:
    """The launch table from each launch slice's args (its metadata: device, graph replay,
    config, ring; and its totals), plus what the slices can count."""
    slices = pd.DataFrame({"launch": columns["launch"], "cta": columns["cta"], "scope": columns["scope"]})
    lifetime = slices["scope"] == LIFETIME
    finished_by_launch = slices["launch"][lifetime.to_numpy()].value_counts()
    ctas_by_launch = slices.groupby("launch")["cta"].nunique()
    overlapping_by_launch = slices["launch"][overlapping.to_numpy()].value_counts()
    rows = []
    for uuid, (launch, kernel) in launch_tracks.items():
        args = launch_args.get(uuid)
        if args is None:
            raise SessionFileError(
                f"{path}: launch {launch} ({kernel}) has no slice with its totals (a proton_ik "
                "older than its slot timeline wrote them as its track's description); show or "
                "convert the session file (.pik) it was written from instead"
            )
        counts = {key: whole_number(args.get(key), f"launch {launch}'s {key}", path) for key in LAUNCH_TOTALS}
        metadata, mhz, config = _launch_metadata(path, launch, kernel, args)
        rows.append(
            {
                "launch": launch,
                "kernel": kernel,
                **metadata,
                "config": config_text(config),
                "config_args": config,
                **counts,
                "ctas": int(ctas_by_launch.get(launch, 0)) + counts["ctas_missing"],
                "units": int(finished_by_launch.get(launch, 0)) + counts["units_unfinished"],
                "units_skipped": pd.NA,
                "overlapping": int(overlapping_by_launch.get(launch, 0)),
                "mhz": float(mhz),
                "problems": [],
            }
        )
    launches = pd.DataFrame(rows).sort_values("launch", kind="stable").reset_index(drop=True)
    launches["units_skipped"] = launches["units_skipped"].astype("Int64")
    return launches


def _launch_metadata(
    path: Path, launch: int, kernel: str, args: dict[str, Any]
) -> tuple[dict[str, Any], float | int, dict | None]:
    """A launch slice's metadata, its clock rate (NaN where no unit left a time) and its config,
    each checked."""
    metadata = {key: args.get(key) for key in _LAUNCH_METADATA}
    for key in ("device", "stream", "graph", "replay", "capacity", "capacity_bound"):
        whole_number(metadata[key], f"launch {launch}'s {key}", path, missing=True)
    metadata["warps_per_unit"] = checked_warps_per_unit(
        metadata["warps_per_unit"], f"launch {launch}'s warps_per_unit", path
    )
    metadata["name"] = metadata["name"] if isinstance(metadata["name"], str) else kernel
    for key in ("host_scope", "grid", "clock_source"):
        if not isinstance(metadata[key], (str, type(None))):
            raise refuse(path, f"launch {launch}'s {key} is {metadata[key]!r:.40}, not text")
    mhz = math.nan if metadata["mhz"] is None else metadata["mhz"]  # none: no unit left a time
    if isinstance(mhz, bool) or not isinstance(mhz, (int, float)) or math.isinf(mhz):
        raise refuse(path, f"launch {launch}'s mhz is {mhz!r:.40}, not a clock rate")
    if not isinstance(metadata["launch_metrics"], (dict, type(None))):
        raise refuse(path, f"launch {launch}'s launch_metrics is not a table")
    config = args.get("config")
    if config is not None and not isinstance(config, dict):
        raise refuse(path, f"launch {launch}'s config is {config!r:.40}, not a table")
    return metadata, mhz, config
