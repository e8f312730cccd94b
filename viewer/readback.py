"""Trace files proton_ik wrote (Chrome ``.json``, Perfetto ``.pftrace``) read back into tables.

Only what ``summary`` needs comes back: one row per scope event (kernel, launch, scope, CTA, SM,
warp, ``dur_ns``, ``dur_cycles``, source line), the finished units' lifetimes (the denominator of
a scope's share of kernel time) and the launch table, so that ``proton-ik show`` prints the same
per-scope statistics for a trace as for its session file.

What a trace does not carry is left out or shown as unknown:

- Records left unpaired are not slices, so per-scope unmatched counts are unknown (``<NA>``)
  wherever the kernel lost any; the per-kernel totals are known (the launch statistics carry them).
- A ``.pftrace`` carries each launch's statistics only as its track's description (SM clock to the
  MHz, no problems list, no skipped units); a Chrome trace carries the whole launch table.
- A scope that only ever left unmatched records has no row.
- A ``.pftrace`` widens a unit's lifetime to cover its scopes where the unit's clocks disagree, so
  there a share can differ slightly from the session's.

Reading is per packet or per JSON object, in Python: fine for a summary, slower than writing.
"""

from __future__ import annotations

import json
import re
import zlib
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from google.protobuf.message import DecodeError
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import DebugAnnotation, TracePacket, TrackEvent
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as TraceProto

from proton_ik.viewer.perfetto import INCREMENTAL_CLOCK_ID, LIFETIME
from proton_ik.viewer.summary import LOSS_COLUMNS, Summary
from proton_ik.viewer.table import UNMATCHED_COLUMNS, config_text
from proton_ik.viewer.trace import Trace

EVENT_COLUMNS = ["kernel", "launch", "scope", "cta", "sm", "warp", "dur_ns", "dur_cycles", "line"]
_PROCESS_NAME = re.compile(r"launch (?P<launch>-?\d+): (?P<kernel>.*) / SM (?P<sm>\d+)")
_LAUNCH_TRACK = re.compile(r"launch (?P<launch>-?\d+): (?P<kernel>.*)")
# perfetto._launch_description, read back; tests/viewer/test_readback.py keeps the two in step.
_LAUNCH_DESCRIPTION = re.compile(
    r"kernel .*, grid (?P<grid>.*), stream (?P<stream>.*); SM clock (?P<mhz>\S+) MHz "
    r"\((?P<clock_source>.*)\); (?P<events>\d+) events from (?P<records>\d+) records; scope begins "
    r"shifted by (?P<time_shift_cycles>\d+) cycles(?: \((?P<time_shift_pair_cycles>\d+) for paired "
    r"scopes\))?; (?P<overwritten>\d+) records overwritten by the ring, (?P<lost_to_ring>\d+) ends "
    r"lost to it; (?P<unmatched_begin>\d+) unmatched begins, (?P<unmatched_end>\d+) unmatched ends; "
    r"(?P<units_unfinished>\d+) unfinished units; (?P<ctas_missing>\d+) CTAs without a header"
)
_DESCRIBED_COUNTS = (
    "events", "records", "time_shift_cycles", "time_shift_pair_cycles", "overwritten", "lost_to_ring",
    "unmatched_begin", "unmatched_end", "units_unfinished", "ctas_missing",
)  # fmt: skip


# What a launch's lifetime slice says that its track description does not.
_LAUNCH_METADATA = (
    "device", "graph", "replay", "capacity", "capacity_source", "capacity_bound", "capacity_reason",
)  # fmt: skip


@dataclass(frozen=True)
class TraceFile:
    """A trace file's scope events, finished unit lifetimes and launches, as ``Trace`` tables."""

    trace: Trace

    def summary(self) -> Summary:
        """``Trace.summary``, with per-scope unmatched counts unknown where the kernel lost records."""
        summary = self.trace.summary()
        if not len(summary.kernels):
            return summary
        lost = summary.kernels.set_index("kernel")[list(LOSS_COLUMNS)].sum(axis=1)
        unknown = summary.scopes["kernel"].map(lost).fillna(0).to_numpy() > 0
        scopes = summary.scopes.copy()
        for column in LOSS_COLUMNS:
            scopes[column] = scopes[column].astype("Int64").mask(unknown)
        return replace(summary, scopes=scopes)

    def summary_text(self) -> str:
        return str(self.summary())


def read_chrome(path: str | Path) -> TraceFile:
    """Read a Chrome JSON trace written by ``chrome.write_chrome``."""
    path = Path(path)
    try:
        document = json.loads(path.read_bytes())
        other = document["otherData"]
        info, launch_rows, objects = other["proton_ik"], other["launches"], document["traceEvents"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path} is not a Chrome trace written by proton_ik ({type(error).__name__}: {error})"
        ) from None
    processes = {}
    for obj in objects:
        if obj.get("ph") == "M" and obj.get("name") == "process_name":
            match = _PROCESS_NAME.fullmatch(obj["args"]["name"])
            if match:
                processes[obj["pid"]] = int(match["launch"])
    slices = [obj for obj in objects if obj.get("ph") == "X"]
    columns = {
        "kernel": [obj["cat"] for obj in slices],
        "launch": [processes[obj["pid"]] for obj in slices],
        "scope": [obj["name"] for obj in slices],
        "dur_ns": [round(obj["dur"] * 1000) for obj in slices],
        **{key: [obj["args"][key] for obj in slices] for key in ("cta", "sm", "warp", "cycles", "line")},
    }
    launches = pd.DataFrame(launch_rows)
    if "problems" not in launches:
        launches["problems"] = [[] for _ in range(len(launches))]
    return _trace_file(info, columns, launches)


def read_perfetto(path: str | Path) -> TraceFile:
    """Read a ``.pftrace`` written by ``perfetto.write_perfetto``, replaying its packets: interned
    names, per-track incremental clocks, slice begins and ends on each warp track's stack."""
    path = Path(path)
    packets = read_packets(path)
    tracks: dict[int, Any] = {}
    names: dict[int, str] = {}
    annotation_names: dict[int, str] = {}
    stacks: dict[int, list[tuple[str, int, dict[str, int]]]] = defaultdict(list)
    slices: list[tuple[int, str, int, dict[str, int]]] = []  # track, name, duration, annotations
    track, now = 0, 0
    for packet in packets:
        if packet.HasField("track_descriptor"):
            tracks[packet.track_descriptor.uuid] = packet.track_descriptor
        names.update({entry.iid: entry.name for entry in packet.interned_data.event_names})
        annotation_names.update(
            {entry.iid: entry.name for entry in packet.interned_data.debug_annotation_names}
        )
        if packet.HasField("trace_packet_defaults"):
            track = packet.trace_packet_defaults.track_event_defaults.track_uuid
        if packet.HasField("clock_snapshot"):
            for clock in packet.clock_snapshot.clocks:
                if clock.clock_id == INCREMENTAL_CLOCK_ID:
                    now = clock.timestamp
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        now += packet.timestamp
        if event.type == TrackEvent.TYPE_SLICE_BEGIN:
            args = {annotation_names.get(a.name_iid, a.name): _value(a) for a in event.debug_annotations}
            stacks[track].append((names.get(event.name_iid, ""), now, args))
        elif event.type == TrackEvent.TYPE_SLICE_END and stacks[track]:
            name, begin, args = stacks[track].pop()
            slices.append((track, name, now - begin, args))
    launch_tracks = {
        uuid: (int(match["launch"]), match["kernel"], descriptor.description)
        for uuid, descriptor in tracks.items()
        if (match := _LAUNCH_TRACK.fullmatch(descriptor.name)) and descriptor.parent_uuid == 1
    }
    if not launch_tracks:
        raise ValueError(
            f"{path} is not a proton_ik session (.pik), Chrome JSON (.json) or Perfetto (.pftrace) file"
        )
    # A launch track's own slice is the launch's lifetime, whose args are its metadata.
    launch_args = {uuid: args for uuid, _, _, args in slices if uuid in launch_tracks}
    slices = [s for s in slices if s[0] not in launch_tracks]
    launch_of: dict[int, int] = {}
    for uuid in {t for t, *_ in slices}:
        above = uuid
        while above not in launch_tracks and above in tracks:
            above = tracks[above].parent_uuid
        if above not in launch_tracks:
            raise ValueError(f"{path}: track {uuid} ({tracks[uuid].name!r}) belongs to no launch track")
        launch_of[uuid] = above
    columns = {
        "kernel": [launch_tracks[launch_of[t]][1] for t, *_ in slices],
        "launch": [launch_tracks[launch_of[t]][0] for t, *_ in slices],
        "scope": [name for _, name, _, _ in slices],
        "dur_ns": [duration for _, _, duration, _ in slices],
        **{key: [args.get(key) for *_, args in slices] for key in ("cta", "sm", "warp", "cycles", "line")},
    }
    overlapping = pd.Series(
        [" overlap " in tracks[t].name and name != LIFETIME for t, name, _, _ in slices], dtype=bool
    )
    launches = _described_launches(path, launch_tracks, launch_args, columns, overlapping)
    root = tracks.get(1)
    title = root.name if root is not None else ""
    info = {"name": title.removeprefix("proton_ik: ")}
    return _trace_file(info, columns, launches)


def _value(annotation: DebugAnnotation) -> Any:
    """A debug annotation as plain data: a number, text, dictionary or list."""
    if annotation.dict_entries:
        return {entry.name: _value(entry) for entry in annotation.dict_entries}
    if annotation.array_values:
        return [_value(item) for item in annotation.array_values]
    kind = annotation.WhichOneof("value")
    return getattr(annotation, kind) if kind else 0


def read_packets(path: str | Path) -> list[TracePacket]:
    """Every packet in file order, with compressed bundles inflated in place."""
    packets = []
    try:
        trace = TraceProto()
        trace.ParseFromString(Path(path).read_bytes())
        for packet in trace.packet:
            if packet.HasField("compressed_packets"):
                inner = TraceProto()
                inner.ParseFromString(zlib.decompress(packet.compressed_packets))
                packets.extend(inner.packet)
            else:
                packets.append(packet)
    except (DecodeError, zlib.error) as error:
        raise ValueError(
            f"{path} is not a proton_ik session (.pik), Chrome JSON (.json) or Perfetto (.pftrace) "
            f"file ({type(error).__name__}: {error})"
        ) from None
    return packets


def _described_launches(
    path: Path,
    launch_tracks: dict[int, tuple[int, str, str]],
    launch_args: dict[int, dict[str, Any]],
    columns: dict[str, list[Any]],
    overlapping: pd.Series,
) -> pd.DataFrame:
    """The launch table from each launch track's description and its lifetime's args (the
    metadata: device, graph replay, config, ring), plus what the slices can count."""
    slices = pd.DataFrame({"launch": columns["launch"], "cta": columns["cta"], "scope": columns["scope"]})
    lifetime = slices["scope"] == LIFETIME
    rows = []
    for uuid, (launch, kernel, description) in launch_tracks.items():
        match = _LAUNCH_DESCRIPTION.fullmatch(description)
        if not match:
            raise ValueError(
                f"{path}: launch {launch} ({kernel}) has no statistics proton_ik can read in its "
                f"track description {description!r}; show its session file instead"
            )
        stats = match.groupdict()
        stats["time_shift_pair_cycles"] = stats["time_shift_pair_cycles"] or stats["time_shift_cycles"]
        counts = {key: int(stats[key]) for key in _DESCRIBED_COUNTS}
        here = slices["launch"] == launch
        finished = int((here & lifetime).sum())
        args = launch_args.get(uuid, {})
        rows.append(
            {
                "launch": launch,
                "kernel": kernel,
                "grid": stats["grid"],
                "stream": stats["stream"],
                **{key: args.get(key) for key in _LAUNCH_METADATA},
                "config": config_text(args.get("config")),
                "config_args": args.get("config"),
                **counts,
                "ctas": int(slices.loc[here, "cta"].nunique()) + counts["ctas_missing"],
                "units": finished + counts["units_unfinished"],
                "units_skipped": pd.NA,
                "overlapping": int((here & overlapping).sum()),
                "mhz": float(stats["mhz"]),
                "clock_source": stats["clock_source"],
                "problems": [],
            }
        )
    launches = pd.DataFrame(rows).sort_values("launch", kind="stable").reset_index(drop=True)
    launches["units_skipped"] = launches["units_skipped"].astype("Int64")
    return launches


def _trace_file(info: dict[str, Any], columns: dict[str, list[Any]], launches: pd.DataFrame) -> TraceFile:
    """Split slices into scope events and unit lifetimes, and make the tables ``summarize`` reads."""
    slices = pd.DataFrame(
        {
            "kernel": pd.Series(columns["kernel"], dtype=str),
            "launch": pd.Series(columns["launch"], dtype=np.int64),
            "scope": pd.Series(columns["scope"], dtype=str),
            "cta": pd.Series(columns["cta"], dtype="Int64"),
            "sm": pd.Series(columns["sm"], dtype="Int64"),
            "warp": pd.Series(columns["warp"], dtype="Int64"),
            "dur_ns": pd.Series(columns["dur_ns"], dtype=np.int64),
            "dur_cycles": pd.Series(columns["cycles"], dtype="Int64"),
            "line": pd.Series(columns["line"], dtype="Int64"),
        }
    )
    lifetime = slices["scope"] == LIFETIME
    events = slices[~lifetime].reset_index(drop=True)
    units = slices.loc[lifetime, ["kernel", "launch", "cta", "sm", "warp", "dur_ns"]].reset_index(drop=True)
    units["finished"] = True
    unmatched = pd.DataFrame({column: [] for column in UNMATCHED_COLUMNS})
    return TraceFile(Trace(info, events, units, unmatched, launches))
