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
A ``.pftrace`` is read as a stream, packet by packet (compressed bundles inflated as they are
read), into compact columns: memory grows with the slices, not with the packets' objects. A
file that is not a trace proton_ik wrote raises ``SessionFileError`` saying what is wrong.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
from google.protobuf.message import DecodeError
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import DebugAnnotation, TracePacket, TrackEvent

from proton_ik.viewer.manifest import ManifestError, check_info
from proton_ik.viewer.perfetto import HOST_TRACK, INCREMENTAL_CLOCK_ID, LIFETIME
from proton_ik.viewer.session_file import SessionFileError
from proton_ik.viewer.summary import LOSS_COLUMNS, Summary
from proton_ik.viewer.table import UNMATCHED_COLUMNS, config_text
from proton_ik.viewer.trace import Trace

EVENT_COLUMNS = ["kernel", "launch", "scope", "cta", "sm", "warp", "dur_ns", "dur_cycles", "line"]
_NUMBER = r"-?\d{1,18}"  # a launch number that fits int64
_PROCESS_NAME = re.compile(rf"launch (?P<launch>{_NUMBER}): (?P<kernel>.*) / SM (?P<sm>\d{{1,9}})")
_LAUNCH_TRACK = re.compile(rf"launch (?P<launch>{_NUMBER}): (?P<kernel>.*)")
# perfetto._launch_description after its "kernel NAME, " prefix, read back; every group stops at
# the separator after it, so that a long or crafted description is matched in linear time.
# tests/viewer/test_readback.py keeps the two in step.
_COUNT = r"\d{1,18}"
_LAUNCH_DESCRIPTION = re.compile(
    rf"grid (?P<grid>[^,;]*), stream (?P<stream>[^;]*); SM clock (?P<mhz>\d{{1,9}}(?:\.\d+)?) MHz "
    rf"\((?P<clock_source>[^)]*)\); (?P<events>{_COUNT}) events from (?P<records>{_COUNT}) records; "
    rf"scope begins shifted by (?P<time_shift_cycles>{_COUNT}) cycles(?: \((?P<time_shift_pair_cycles>"
    rf"{_COUNT}) for paired scopes\))?; (?P<overwritten>{_COUNT}) records overwritten by the ring, "
    rf"(?P<lost_to_ring>{_COUNT}) ends lost to it; (?P<unmatched_begin>{_COUNT}) unmatched begins, "
    rf"(?P<unmatched_end>{_COUNT}) unmatched ends; (?P<units_unfinished>{_COUNT}) unfinished units; "
    rf"(?P<ctas_missing>{_COUNT}) CTAs without a header"
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
        # A kernel has a row per host scope it ran under: what it lost, summed over them.
        lost = summary.kernels.groupby("kernel", observed=True)[list(LOSS_COLUMNS)].sum().sum(axis=1)
        unknown = summary.scopes["kernel"].map(lost).fillna(0).to_numpy() > 0
        scopes = summary.scopes.copy()
        for column in LOSS_COLUMNS:
            scopes[column] = scopes[column].astype("Int64").mask(unknown)
        return replace(summary, scopes=scopes)

    def summary_text(self) -> str:
        return str(self.summary())


MAX_PACKET_BYTES = 32 << 20  # no packet proton_ik writes comes near this
_SLICE_ARGS = ("cta", "sm", "warp", "cycles", "line")
_INT64 = (-(1 << 63), (1 << 63) - 1)
_NOT_A_TRACE = "is not a proton_ik session (.pik), Chrome JSON (.json) or Perfetto (.pftrace) file"


def _refuse(path: Path, problem: str) -> SessionFileError:
    return SessionFileError(
        f"{path}: {problem}. Show or convert the session file (.pik) it was written from, or write "
        "the trace again"
    )


def _whole(value: object, what: str, path: Path, *, missing: bool = False) -> int | None:
    """A JSON or annotation value that must be a whole number in int64 (or None if ``missing``)."""
    if missing and (value is None or (isinstance(value, float) and math.isnan(value))):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a pandas column with gaps is float: 7.0 is launch 7
    if isinstance(value, bool) or not isinstance(value, int) or not _INT64[0] <= value <= _INT64[1]:
        raise _refuse(path, f"{what} is {value!r:.60}, not a whole number")
    return value


def read_chrome(path: str | Path) -> TraceFile:
    """Read a Chrome JSON trace written by ``chrome.write_chrome``."""
    path = Path(path)
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise SessionFileError(f"{path} does not exist; check the path") from None
    except (ValueError, RecursionError) as error:
        raise SessionFileError(f"{path} {_NOT_A_TRACE} (its JSON does not parse: {error})") from None
    other = document.get("otherData") if isinstance(document, dict) else None
    info = other.get("proton_ik") if isinstance(other, dict) else None
    launch_rows = other.get("launches") if isinstance(other, dict) else None
    objects = document.get("traceEvents") if isinstance(document, dict) else None
    if not (isinstance(info, dict) and isinstance(launch_rows, list) and isinstance(objects, list)):
        raise SessionFileError(
            f"{path} is not a Chrome trace written by proton_ik (it lacks otherData.proton_ik, "
            "otherData.launches or traceEvents)"
        )
    try:
        check_info(info)
    except ManifestError as error:
        raise _refuse(path, f"otherData.proton_ik: {error}") from None
    processes: dict[object, int] = {}
    columns: dict[str, list[Any]] = {
        name: [] for name in ("kernel", "launch", "scope", "dur_ns", *_SLICE_ARGS)
    }
    for number, obj in enumerate(objects):
        if not isinstance(obj, dict):
            raise _refuse(path, f"traceEvents[{number}] is not a JSON object")
        args = obj.get("args")
        if obj.get("ph") == "M" and obj.get("name") == "process_name" and isinstance(args, dict):
            match = _PROCESS_NAME.fullmatch(str(args.get("name")))
            if match and isinstance(obj.get("pid"), (int, str)):
                processes[obj["pid"]] = int(match["launch"])
        if obj.get("ph") != "X":
            continue
        where = f"traceEvents[{number}]"
        kernel, scope, dur = obj.get("cat"), obj.get("name"), obj.get("dur")
        if not (isinstance(kernel, str) and isinstance(scope, str) and isinstance(args, dict)):
            raise _refuse(path, f"{where} is a slice without a kernel (cat), name or args")
        if obj.get("pid") not in processes:
            raise _refuse(
                path, f"{where} is a slice in process {obj.get('pid')!r:.40}, which names no launch"
            )
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not 0 <= dur < 1e15:
            raise _refuse(path, f"{where} has the duration {dur!r:.40}, not a number of microseconds")
        columns["kernel"].append(kernel)
        columns["launch"].append(processes[obj["pid"]])
        columns["scope"].append(scope)
        columns["dur_ns"].append(round(dur * 1000))
        for key in _SLICE_ARGS:
            columns[key].append(_whole(args.get(key), f"{where}.args.{key}", path, missing=True))
    launches = _checked_launches(path, launch_rows)
    return _trace_file(info, columns, launches)


def _checked_launches(path: Path, rows: list[Any]) -> pd.DataFrame:
    """A Chrome trace's launch table, each row checked for what the summary reads."""
    for number, row in enumerate(rows):
        where = f"otherData.launches[{number}]"
        if not isinstance(row, dict):
            raise _refuse(path, f"{where} is not a JSON object")
        if not isinstance(row.get("kernel"), str):
            raise _refuse(path, f"{where} names no kernel")
        for key in ("launch", "ctas", "units", "overlapping", *_DESCRIBED_COUNTS):
            _whole(row.get(key), f"{where}.{key}", path)
        for key in ("device", "stream", "graph", "replay", "capacity", "capacity_bound", "units_skipped"):
            _whole(row.get(key), f"{where}.{key}", path, missing=True)
        mhz = row.get("mhz")
        if isinstance(mhz, bool) or not isinstance(mhz, (int, float)) or not math.isfinite(mhz):
            raise _refuse(path, f"{where}.mhz is {mhz!r:.40}, not a clock rate")
        for key in ("grid", "config", "capacity_source", "capacity_reason", "clock_source"):
            if not isinstance(row.get(key), (str, type(None))):
                raise _refuse(path, f"{where}.{key} is {row.get(key)!r:.40}, not text")
        problems = row.get("problems", [])
        if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
            raise _refuse(path, f"{where}.problems is not a list of text")
    launches = pd.DataFrame(rows)
    if not len(launches):
        raise _refuse(path, "it lists no launches (otherData.launches is empty)")
    if "problems" not in launches:
        launches["problems"] = [[] for _ in range(len(launches))]
    if "units_skipped" not in launches:
        launches["units_skipped"] = pd.NA
    return launches


def read_perfetto(path: str | Path) -> TraceFile:
    """Read a ``.pftrace`` written by ``perfetto.write_perfetto``, replaying its packets as they
    stream in: interned names, per-track incremental clocks, slice begins and ends on each warp
    track's stack. Slices go into typed columns; only launch lifetimes keep their args."""
    path = Path(path)
    tracks = TrackTree()
    names: dict[int, str] = {}
    annotation_names: dict[int, str] = {}
    stacks: dict[int, list[tuple[str, int, dict[str, Any]]]] = defaultdict(list)
    scopes: dict[str, int] = {}  # slice name -> code
    rows = {"track": array("Q"), "scope": array("q"), "dur_ns": array("q")}
    values = {key: array("q") for key in _SLICE_ARGS}
    present = {key: array("b") for key in _SLICE_ARGS}
    launch_args: dict[int, dict[str, Any]] = {}
    track, now = 0, 0
    for packet in iter_packets(path):
        if packet.HasField("interned_data"):
            names.update({entry.iid: _text(entry.name) for entry in packet.interned_data.event_names})
            annotation_names.update(
                {entry.iid: _text(entry.name) for entry in packet.interned_data.debug_annotation_names}
            )
        if packet.HasField("trace_packet_defaults"):
            track = packet.trace_packet_defaults.track_event_defaults.track_uuid
        kind = packet.WhichOneof("data")
        if kind == "track_descriptor":
            tracks.add(packet.track_descriptor)
        elif kind == "clock_snapshot":
            for clock in packet.clock_snapshot.clocks:
                if clock.clock_id == INCREMENTAL_CLOCK_ID:
                    now = clock.timestamp
        if kind != "track_event":
            continue
        event = packet.track_event
        now += packet.timestamp
        if event.type == TrackEvent.TYPE_SLICE_BEGIN:
            args = {annotation_names.get(a.name_iid, a.name): _value(a) for a in event.debug_annotations}
            stacks[track].append((names.get(event.name_iid, ""), now, args))
        elif event.type == TrackEvent.TYPE_SLICE_END and track in stacks:
            stack = stacks[track]
            name, begin, args = stack.pop()
            if not stack:
                del stacks[track]  # one list per open track, not one per track ever seen
            duration = _whole(now - begin, f"the duration of a {name!r:.40} slice", path)
            if track in tracks.host:
                continue  # host scopes group launches; the summary reads them from the launches
            if track in tracks.launches:
                launch_args[track] = args
                continue
            rows["track"].append(track)
            rows["scope"].append(scopes.setdefault(name, len(scopes)))
            rows["dur_ns"].append(duration)
            for key in _SLICE_ARGS:
                value = args.get(key)
                present[key].append(value is not None)
                values[key].append(0 if value is None else _whole(value, f"a slice's {key}", path))
    return _perfetto_tables(path, tracks, scopes, rows, values, present, launch_args)


class TrackTree:
    """The track descriptors as compact columns (uuid, parent, overlap flag); launch tracks,
    which are few, keep their launch number, kernel and description (the launch's statistics)."""

    def __init__(self) -> None:
        self.uuids, self.parents, self.overlap = array("Q"), array("Q"), array("b")
        self.launches: dict[int, tuple[int, str, str]] = {}
        self.host: set[int] = set()  # the host scopes' track
        self.title = ""

    def add(self, descriptor: Any) -> None:
        name = _text(descriptor.name)
        self.uuids.append(descriptor.uuid)
        self.parents.append(descriptor.parent_uuid)
        self.overlap.append(" overlap " in name)
        if descriptor.parent_uuid == 1 and name == HOST_TRACK:
            self.host.add(descriptor.uuid)
        match = _LAUNCH_TRACK.fullmatch(name) if descriptor.parent_uuid == 1 else None
        if match:
            self.launches[descriptor.uuid] = (
                int(match["launch"]),
                match["kernel"],
                _text(descriptor.description),
            )
        if descriptor.uuid == 1:
            self.title = name

    def launch_of(self, path: Path, tracks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each track, the launch track above it, and whether it is an overlap track;
        refuses a track that belongs to no launch track (or sits on a loop of parents)."""
        uuids = np.frombuffer(self.uuids, dtype=np.uint64)
        order = np.argsort(uuids, kind="stable")
        known, parents = uuids[order], np.frombuffer(self.parents, dtype=np.uint64)[order]
        at = np.minimum(np.searchsorted(known, tracks), max(len(known) - 1, 0))
        if len(tracks) and (not len(known) or (known[at] != tracks).any()):
            raise SessionFileError(f"{path} {_NOT_A_TRACE}: a slice is on a track with no descriptor")
        overlap = np.frombuffer(self.overlap, dtype=np.int8)[order][at].astype(bool)
        launch_uuids = np.fromiter(self.launches, dtype=np.uint64, count=len(self.launches))
        current = tracks.copy()
        for _ in range(64):  # deeper than any tree proton_ik writes: a loop of parents
            done = np.isin(current, launch_uuids)
            if done.all():
                return current, overlap
            at = np.minimum(np.searchsorted(known, current), len(known) - 1)
            if (~done & (known[at] != current)).any():
                raise SessionFileError(f"{path} {_NOT_A_TRACE}: a track belongs to no launch track")
            current = np.where(done, current, parents[at])
        raise SessionFileError(f"{path} {_NOT_A_TRACE}: its tracks' parents form a loop")


def _perfetto_tables(
    path: Path,
    tracks: TrackTree,
    scopes: dict[str, int],
    rows: dict[str, array],
    values: dict[str, array],
    present: dict[str, array],
    launch_args: dict[int, dict[str, Any]],
) -> TraceFile:
    """The tables of a replayed ``.pftrace``: each slice's track walked up to its launch track."""
    launch_tracks = tracks.launches
    if not launch_tracks:
        raise SessionFileError(f"{path} {_NOT_A_TRACE}: it has no launch track")
    track = np.frombuffer(rows["track"], dtype=np.uint64)
    uuids, slice_track = np.unique(track, return_inverse=True)
    above, overlapping_track = tracks.launch_of(path, uuids)
    launch_of = above.tolist()
    launch_number = np.array([launch_tracks[t][0] for t in launch_of], dtype=np.int64)[slice_track]
    kernels: dict[str, int] = {}
    kernel_of = [kernels.setdefault(launch_tracks[t][1], len(kernels)) for t in launch_of]
    scope_code = np.frombuffer(rows["scope"], dtype=np.int64)
    del track
    columns: dict[str, Any] = {
        # Categoricals: a code per slice, each name held once.
        "kernel": pd.Categorical.from_codes(np.array(kernel_of, dtype=np.int32)[slice_track], list(kernels)),
        "launch": launch_number,
        "scope": pd.Categorical.from_codes(scope_code.astype(np.int32), list(scopes)),
        "dur_ns": np.frombuffer(rows["dur_ns"], dtype=np.int64),
    }
    for key in _SLICE_ARGS:
        columns[key] = pd.arrays.IntegerArray(
            np.frombuffer(values[key], dtype=np.int64).copy(), ~np.frombuffer(present[key], dtype=bool)
        )
    overlapping = overlapping_track[slice_track] & (scope_code != scopes.get(LIFETIME, -1))
    launches = _described_launches(path, launch_tracks, launch_args, columns, pd.Series(overlapping))
    return _trace_file({"name": tracks.title.removeprefix("proton_ik: ")}, columns, launches)


def _text(value: str | bytes) -> str:
    """A string field; protobuf hands back bytes where a file's text is not UTF-8."""
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


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
    return list(iter_packets(path))


def iter_packets(path: str | Path) -> Iterator[TracePacket]:
    """Every packet in file order, read one at a time, with compressed bundles inflated as they
    are read: memory holds one packet (and one bundle's compressed bytes), whatever the file's size."""
    path = Path(path)
    try:
        with open(path, "rb") as file:
            yield from _packets(path, _reader(file), nested=False)
    except FileNotFoundError:
        raise SessionFileError(f"{path} does not exist; check the path") from None
    except IsADirectoryError:
        raise SessionFileError(f"{path} is a folder, not a trace file") from None


_CHUNK = 1 << 20


class _Stream:
    """Bytes pulled in chunks from a file or an inflater, served in the sizes a parser asks for."""

    def __init__(self, pull: Callable[[int], bytes]):
        self.pull = pull
        self.buffer = b""
        self.position = 0

    def read(self, size: int) -> bytes:
        if len(self.buffer) - self.position < size:
            parts, held = [self.buffer[self.position :]], len(self.buffer) - self.position
            while held < size:
                chunk = self.pull(max(_CHUNK, size - held))
                if not chunk:
                    break
                parts.append(chunk)
                held += len(chunk)
            self.buffer, self.position = b"".join(parts), 0
        out = self.buffer[self.position : self.position + size]
        self.position += len(out)
        return out


def _reader(file: BinaryIO) -> Callable[[int], bytes]:
    return _Stream(file.read).read


def _inflating(data: bytes) -> Callable[[int], bytes]:
    """A read function over a zlib stream, inflating a chunk at a time."""
    inflater = zlib.decompressobj()
    pending = [data]

    def pull(size: int) -> bytes:
        if inflater.unconsumed_tail:
            return inflater.decompress(inflater.unconsumed_tail, size)
        return inflater.decompress(pending.pop(), size) if pending else b""

    return _Stream(pull).read


def _packets(path: Path, read: Callable[[int], bytes], *, nested: bool) -> Iterator[TracePacket]:
    """The packets of a ``Trace`` message: field 1, length-delimited, repeated."""
    what = "a compressed bundle" if nested else "the file"
    try:
        while True:
            tag = _varint(read, path, what, first=True)
            if tag is None:
                return
            if tag != 0x0A:  # field 1 (packet), length-delimited
                raise SessionFileError(f"{path} {_NOT_A_TRACE}: {what} holds a field other than packets")
            length = _varint(read, path, what)
            if length > MAX_PACKET_BYTES:
                raise SessionFileError(
                    f"{path} {_NOT_A_TRACE}: {what} declares a packet of {length:,} bytes "
                    f"(over the {MAX_PACKET_BYTES:,} a proton_ik trace can hold)"
                )
            data = read(length)
            if len(data) != length:
                raise SessionFileError(
                    f"{path}: {what} ends inside a packet: the trace is truncated, write it again"
                )
            packet = TracePacket()
            packet.ParseFromString(data)
            if packet.HasField("compressed_packets"):
                if nested:
                    raise SessionFileError(f"{path} {_NOT_A_TRACE}: a compressed bundle holds another")
                yield from _packets(path, _inflating(packet.compressed_packets), nested=True)
            else:
                yield packet
    except (DecodeError, zlib.error, RecursionError) as error:
        raise SessionFileError(f"{path} {_NOT_A_TRACE} ({type(error).__name__}: {error})") from None


def _varint(read: Callable[[int], bytes], path: Path, what: str, *, first: bool = False) -> int | None:
    """A protobuf varint; None at a clean end of the stream where ``first``."""
    value = 0
    for shift in range(0, 64, 7):
        byte = read(1)
        if not byte:
            if first and shift == 0:
                return None
            raise SessionFileError(
                f"{path}: {what} ends inside a packet: the trace is truncated, write it again"
            )
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
    raise SessionFileError(f"{path} {_NOT_A_TRACE}: {what} holds a malformed length")


def _described_launches(
    path: Path,
    launch_tracks: dict[int, tuple[int, str, str]],
    launch_args: dict[int, dict[str, Any]],
    columns: dict[str, Any],
    overlapping: pd.Series,
) -> pd.DataFrame:
    """The launch table from each launch track's description and its lifetime's args (the
    metadata: device, graph replay, config, ring), plus what the slices can count."""
    slices = pd.DataFrame({"launch": columns["launch"], "cta": columns["cta"], "scope": columns["scope"]})
    lifetime = slices["scope"] == LIFETIME
    finished_by_launch = slices["launch"][lifetime.to_numpy()].value_counts()
    ctas_by_launch = slices.groupby("launch")["cta"].nunique()
    overlapping_by_launch = slices["launch"][overlapping.to_numpy()].value_counts()
    rows = []
    for uuid, (launch, kernel, description) in launch_tracks.items():
        prefix = f"kernel {kernel}, "
        match = (
            _LAUNCH_DESCRIPTION.fullmatch(description[len(prefix) :])
            if description.startswith(prefix)
            else None
        )
        if not match:
            raise SessionFileError(
                f"{path}: launch {launch} ({kernel}) has no statistics proton_ik can read in its "
                f"track description {description!r:.200}; show its session file instead"
            )
        stats = match.groupdict()
        stats["time_shift_pair_cycles"] = stats["time_shift_pair_cycles"] or stats["time_shift_cycles"]
        counts = {key: int(stats[key]) for key in _DESCRIBED_COUNTS}
        args = launch_args.get(uuid, {})
        metadata = {key: args.get(key) for key in _LAUNCH_METADATA}
        for key in ("device", "graph", "replay", "capacity", "capacity_bound"):
            _whole(metadata[key], f"launch {launch}'s {key}", path, missing=True)
        config = args.get("config")
        if config is not None and not isinstance(config, dict):
            raise _refuse(path, f"launch {launch}'s config is {config!r:.40}, not a table")
        rows.append(
            {
                "launch": launch,
                "kernel": kernel,
                "grid": stats["grid"],
                "stream": stats["stream"],
                **metadata,
                "config": config_text(config),
                "config_args": config,
                **counts,
                "ctas": int(ctas_by_launch.get(launch, 0)) + counts["ctas_missing"],
                "units": int(finished_by_launch.get(launch, 0)) + counts["units_unfinished"],
                "units_skipped": pd.NA,
                "overlapping": int(overlapping_by_launch.get(launch, 0)),
                "mhz": float(stats["mhz"]),
                "clock_source": stats["clock_source"],
                "problems": [],
            }
        )
    launches = pd.DataFrame(rows).sort_values("launch", kind="stable").reset_index(drop=True)
    launches["units_skipped"] = launches["units_skipped"].astype("Int64")
    return launches


def _labels(values: Any) -> pd.Series:
    """Names as the summary reads them; a categorical stays one (its codes are small)."""
    return pd.Series(values) if isinstance(values, pd.Categorical) else pd.Series(values, dtype=str)


def _trace_file(info: dict[str, Any], columns: Mapping[str, Any], launches: pd.DataFrame) -> TraceFile:
    """Split slices into scope events and unit lifetimes, and make the tables ``summarize`` reads."""
    slices = pd.DataFrame(
        {
            "kernel": _labels(columns["kernel"]),
            "launch": pd.Series(columns["launch"], dtype=np.int64),
            "scope": _labels(columns["scope"]),
            "cta": pd.Series(columns["cta"], dtype="Int64"),
            "sm": pd.Series(columns["sm"], dtype="Int64"),
            "warp": pd.Series(columns["warp"], dtype="Int64"),
            "dur_ns": pd.Series(columns["dur_ns"], dtype=np.int64),
            "dur_cycles": pd.Series(columns["cycles"], dtype="Int64"),
            "line": pd.Series(columns["line"], dtype="Int64"),
        }
    )
    lifetime = (slices["scope"] == LIFETIME).to_numpy()
    events = slices[~lifetime].reset_index(drop=True)
    units = slices.loc[lifetime, ["kernel", "launch", "cta", "sm", "warp", "dur_ns"]].reset_index(drop=True)
    del slices
    for table in (events, units):
        for name in ("kernel", "scope"):
            if name in table and isinstance(table[name].dtype, pd.CategoricalDtype):
                table[name] = table[name].cat.remove_unused_categories()
    units["finished"] = True
    unmatched = pd.DataFrame({column: [] for column in UNMATCHED_COLUMNS})
    return TraceFile(Trace(info, events, units, unmatched, launches))
