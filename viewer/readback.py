"""Trace files proton_ik wrote (Chrome ``.json``, Perfetto ``.pftrace``) read back into tables.

What ``summary`` and the trace writers need comes back: one row per scope event (kernel, launch,
scope, CTA, SM, warp, unit, lane, begin and duration in ns and cycles, source line, and the place
of its begin and end on its track), the finished units' lifetimes (the denominator of a scope's
share of kernel time) and the launch table, so that ``proton-ik show`` prints the same per-scope
statistics for a trace as for its session file, and ``proton-ik convert`` writes a ``.pftrace``
as Chrome JSON and back (``TraceFile.write_perfetto``, ``write_chrome``).

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
    "name", "host_scope", "launch_metrics", "device", "graph", "replay", "warps_per_unit", "capacity",
    "capacity_source", "capacity_bound", "capacity_reason",
)  # fmt: skip
_THREAD_NAME = re.compile(r"CTA \d{1,9} warps? \d{1,9}(?:-\d{1,9})?(?: overlap (?P<lane>\d{1,9}))?")
MAX_WARPS_PER_UNIT = 1 << 10  # a unit is a block of a CTA's warps; a CTA has at most 32


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

    def write_perfetto(self, path: str | Path) -> Path:
        """Write the trace again as a ``.pftrace`` (what ``proton-ik convert`` runs)."""
        return self._writable().write_perfetto(path)

    def write_chrome(self, path: str | Path) -> Path:
        """Write the trace again as Chrome JSON."""
        return self._writable().write_chrome(path)

    def _writable(self) -> Trace:
        if "begin_record" not in self.trace.events:
            raise ValueError("this trace was read for its summary only: read it with for_writing=True")
        return self.trace


MAX_PACKET_BYTES = 32 << 20  # no packet proton_ik writes comes near this
_SLICE_ARGS = ("cta", "sm", "warp", "cycles", "line", "records", "overwritten")
_SUMMARY_ARGS = _SLICE_ARGS[:5]  # what show needs of a slice's args; the writers need them all
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


def read_chrome(path: str | Path, *, for_writing: bool = False) -> TraceFile:
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
    lanes: dict[tuple[object, object], int] = {}  # by (pid, tid), from the thread's name
    threads: dict[tuple[object, object], int] = {}
    columns: dict[str, list[Any]] = {
        name: []
        for name in ("kernel", "launch", "scope", "begin_ns", "dur_ns", "lane", "track", *_SLICE_ARGS)
    }
    for number, obj in enumerate(objects):
        if not isinstance(obj, dict):
            raise _refuse(path, f"traceEvents[{number}] is not a JSON object")
        args = obj.get("args")
        if obj.get("ph") == "M" and obj.get("name") == "process_name" and isinstance(args, dict):
            match = _PROCESS_NAME.fullmatch(str(args.get("name")))
            if match and isinstance(obj.get("pid"), (int, str)):
                processes[obj["pid"]] = int(match["launch"])
        if obj.get("ph") == "M" and obj.get("name") == "thread_name" and isinstance(args, dict):
            match = _THREAD_NAME.fullmatch(str(args.get("name")))
            if match and isinstance(obj.get("pid"), (int, str)) and isinstance(obj.get("tid"), (int, str)):
                lanes[obj["pid"], obj["tid"]] = int(match["lane"] or 0)
        if obj.get("ph") != "X":
            continue
        where = f"traceEvents[{number}]"
        kernel, scope, ts, dur = obj.get("cat"), obj.get("name"), obj.get("ts"), obj.get("dur")
        if not (isinstance(kernel, str) and isinstance(scope, str) and isinstance(args, dict)):
            raise _refuse(path, f"{where} is a slice without a kernel (cat), name or args")
        pid, tid = obj.get("pid"), obj.get("tid")
        if not isinstance(pid, (int, str)) or pid not in processes:
            raise _refuse(
                path, f"{where} is a slice in process {obj.get('pid')!r:.40}, which names no launch"
            )
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not 0 <= dur < 1e15:
            raise _refuse(path, f"{where} has the duration {dur!r:.40}, not a number of microseconds")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not -1e15 < ts < 1e15:
            raise _refuse(path, f"{where} has the start {ts!r:.40}, not a time in microseconds")
        thread = (pid, tid if isinstance(tid, (int, str)) else None)
        columns["kernel"].append(kernel)
        columns["launch"].append(processes[obj["pid"]])
        columns["scope"].append(scope)
        columns["begin_ns"].append(round(ts * 1000))
        columns["dur_ns"].append(round(dur * 1000))
        columns["lane"].append(lanes.get(thread, 0))
        columns["track"].append(threads.setdefault(thread, len(threads)))
        for key in _SLICE_ARGS:
            columns[key].append(_whole(args.get(key), f"{where}.args.{key}", path, missing=True))
    launches = _checked_launches(path, launch_rows)
    return _trace_file(info, columns, launches, for_writing)


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
        _warps_per_unit(row.get("warps_per_unit"), f"{where}.warps_per_unit", path)
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
    launches["warps_per_unit"] = [_warps_per_unit(row.get("warps_per_unit"), "", path) for row in rows]
    return launches


def _warps_per_unit(value: object, what: str, path: Path) -> int:
    """A launch's warps per unit (1 where the trace does not say), which numbers its units."""
    width = _whole(value, what, path, missing=True)
    if width is None:
        return 1
    if not 1 <= width <= MAX_WARPS_PER_UNIT:
        raise _refuse(path, f"{what} is {width}, not 1 to {MAX_WARPS_PER_UNIT}")
    return width


def read_perfetto(path: str | Path, *, for_writing: bool = False) -> TraceFile:
    """Read a ``.pftrace`` written by ``perfetto.write_perfetto``, replaying its packets as they
    stream in: interned names, per-track incremental clocks, slice begins and ends on each warp
    track's stack. Slices go into typed columns, with the place of their begin and end in the
    file (which orders a track's markers when the trace is written again); only launch
    lifetimes keep their args."""
    path = Path(path)
    tracks = TrackTree()
    names: dict[int, str] = {}
    annotation_names: dict[int, str] = {}
    stacks: dict[int, list[tuple[str, int, dict[str, Any], int]]] = defaultdict(list)
    scopes: dict[str, int] = {}  # slice name -> code
    rows = {
        "track": array("Q"), "scope": array("q"), "begin_ns": array("q"), "dur_ns": array("q"),
        "depth": array("q"), "begin_record": array("q"), "end_record": array("q"),
    }  # fmt: skip
    slice_args = _SLICE_ARGS if for_writing else _SUMMARY_ARGS
    values = {key: array("q") for key in slice_args}
    present = {key: array("b") for key in slice_args}
    launch_args: dict[int, dict[str, Any]] = {}
    track, now, marker = 0, 0, 0
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
        marker += 1
        if event.type == TrackEvent.TYPE_SLICE_BEGIN:
            args = {annotation_names.get(a.name_iid, a.name): _value(a) for a in event.debug_annotations}
            stacks[track].append((names.get(event.name_iid, ""), now, args, marker))
        elif event.type == TrackEvent.TYPE_SLICE_END and track in stacks:
            stack = stacks[track]
            name, begin, args, begun = stack.pop()
            depth = len(stack)
            if not stack:
                del stacks[track]  # one list per open track, not one per track ever seen
            duration = _whole(now - begin, f"the duration of a {name!r:.40} slice", path)
            if not (_INT64[0] <= begin <= _INT64[1] and _INT64[0] <= now <= _INT64[1]):
                raise _refuse(path, f"a {name!r:.40} slice's times do not fit in 64 bits")
            if track in tracks.host:
                continue  # host scopes group launches; the summary reads them from the launches
            if track in tracks.launches:
                launch_args[track] = args
                continue
            rows["track"].append(track)
            rows["scope"].append(scopes.setdefault(name, len(scopes)))
            rows["dur_ns"].append(duration)
            if for_writing:  # what only the writers need: kept apart, it costs show nothing
                rows["begin_ns"].append(begin)
                rows["depth"].append(depth)
                rows["begin_record"].append(begun)
                rows["end_record"].append(marker)
            for key in slice_args:
                value = args.get(key)
                present[key].append(value is not None)
                values[key].append(0 if value is None else _whole(value, f"a slice's {key}", path))
    return _perfetto_tables(path, tracks, scopes, rows, values, present, launch_args, for_writing)


class TrackTree:
    """The track descriptors as compact columns (uuid, parent, lane: the number after a warp
    track's "overlap", 0 for none); launch tracks, which are few, keep their launch number,
    kernel and description (the launch's statistics)."""

    def __init__(self) -> None:
        self.uuids, self.parents, self.lanes = array("Q"), array("Q"), array("q")
        self.launches: dict[int, tuple[int, str, str]] = {}
        self.host: set[int] = set()  # the host scopes' track
        self.title = ""

    def add(self, descriptor: Any) -> None:
        name = _text(descriptor.name)
        self.uuids.append(descriptor.uuid)
        self.parents.append(descriptor.parent_uuid)
        _, overlap, lane = name.rpartition(" overlap ")
        self.lanes.append(
            (int(lane) if lane.isascii() and lane.isdigit() and len(lane) <= 9 else 1) if overlap else 0
        )
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
        """For each track, the launch track above it, and its lane (past 0: an overlap track);
        refuses a track that belongs to no launch track (or sits on a loop of parents)."""
        uuids = np.frombuffer(self.uuids, dtype=np.uint64)
        order = np.argsort(uuids, kind="stable")
        known, parents = uuids[order], np.frombuffer(self.parents, dtype=np.uint64)[order]
        at = np.minimum(np.searchsorted(known, tracks), max(len(known) - 1, 0))
        if len(tracks) and (not len(known) or (known[at] != tracks).any()):
            raise SessionFileError(f"{path} {_NOT_A_TRACE}: a slice is on a track with no descriptor")
        lane = np.frombuffer(self.lanes, dtype=np.int64)[order][at]
        launch_uuids = np.fromiter(self.launches, dtype=np.uint64, count=len(self.launches))
        current = tracks.copy()
        for _ in range(64):  # deeper than any tree proton_ik writes: a loop of parents
            done = np.isin(current, launch_uuids)
            if done.all():
                return current, lane
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
    for_writing: bool = False,
) -> TraceFile:
    """The tables of a replayed ``.pftrace``: each slice's track walked up to its launch track."""
    launch_tracks = tracks.launches
    if not launch_tracks:
        raise SessionFileError(f"{path} {_NOT_A_TRACE}: it has no launch track")
    track = np.frombuffer(rows["track"], dtype=np.uint64)
    uuids, slice_track = np.unique(track, return_inverse=True)
    above, track_lane = tracks.launch_of(path, uuids)
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
        "lane": track_lane[slice_track],
        **{
            name: np.frombuffer(rows[name], dtype=np.int64)
            for name in (_TIMED if for_writing else ("dur_ns",))
        },
    }
    # A warp track's first slice is its unit's lifetime: scopes under it count from depth 0.
    if for_writing:
        columns["depth"] = np.maximum(columns["depth"] - (columns["lane"] == 0), 0)
    for key in values:
        columns[key] = pd.arrays.IntegerArray(
            np.frombuffer(values[key], dtype=np.int64).copy(), ~np.frombuffer(present[key], dtype=bool)
        )
    overlapping = (columns["lane"] > 0) & (scope_code != scopes.get(LIFETIME, -1))
    launches = _described_launches(path, launch_tracks, launch_args, columns, pd.Series(overlapping))
    return _trace_file({"name": tracks.title.removeprefix("proton_ik: ")}, columns, launches, for_writing)


_TIMED = ("begin_ns", "dur_ns", "depth", "begin_record", "end_record")  # the typed columns of a slice


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
        metadata["warps_per_unit"] = _warps_per_unit(
            metadata["warps_per_unit"], f"launch {launch}'s warps_per_unit", path
        )
        metadata["name"] = metadata["name"] if isinstance(metadata["name"], str) else kernel
        if not isinstance(metadata["host_scope"], (str, type(None))):
            raise _refuse(path, f"launch {launch}'s host_scope is {metadata['host_scope']!r:.40}, not text")
        if not isinstance(metadata["launch_metrics"], (dict, type(None))):
            raise _refuse(path, f"launch {launch}'s launch_metrics is not a table")
        config = args.get("config")
        if config is not None and not isinstance(config, dict):
            raise _refuse(path, f"launch {launch}'s config is {config!r:.40}, not a table")
        rows.append(
            {
                "launch": launch,
                "kernel": kernel,
                "grid": stats["grid"],
                "stream": int(stats["stream"]) if re.fullmatch(_NUMBER, stats["stream"]) else None,
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


def _trace_file(
    info: dict[str, Any], columns: Mapping[str, Any], launches: pd.DataFrame, for_writing: bool = False
) -> TraceFile:
    """The tables ``summarize`` reads; with ``for_writing``, also those the trace writers read."""
    if for_writing:
        return _writable_trace_file(info, columns, launches)
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
    return _finished(info, events, units, launches)


def _writable_trace_file(
    info: dict[str, Any], columns: Mapping[str, Any], launches: pd.DataFrame
) -> TraceFile:
    """Split slices into scope events and unit lifetimes, and make the tables ``summarize`` reads,
    with the columns the trace writers read too (``pipeline.chunk_from_tables``), so that a trace
    file can be written again in the other format."""
    launch = np.asarray(columns["launch"], dtype=np.int64)
    begin = np.asarray(columns["begin_ns"], dtype=np.int64)
    dur = np.asarray(columns["dur_ns"], dtype=np.int64)
    warp = pd.Series(columns["warp"], dtype="Int64")
    numbers = launches["launch"].to_numpy(np.int64)
    order = np.argsort(numbers, kind="stable")
    at = np.minimum(np.searchsorted(numbers[order], launch), max(len(numbers) - 1, 0))
    width = launches["warps_per_unit"].to_numpy(np.int64)[order][at] if len(numbers) else np.ones_like(launch)
    slices = pd.DataFrame(
        {
            "kernel": _labels(columns["kernel"]),
            "launch": launch,
            "scope": _labels(columns["scope"]),
            "cta": pd.Series(columns["cta"], dtype="Int64"),
            "sm": pd.Series(columns["sm"], dtype="Int64"),
            "warp": warp,
            "unit": warp // width,
            "lane": np.asarray(columns["lane"], dtype=np.int64),
            "begin_ns": begin,
            "end_ns": begin + dur,
            "dur_ns": dur,
            "dur_cycles": pd.Series(columns["cycles"], dtype="Int64"),
            "line": pd.Series(columns["line"], dtype="Int64"),
            "count": pd.Series(columns["records"], dtype="Int64"),
            "overwritten": pd.Series(columns["overwritten"], dtype="Int64"),
        }
    )
    del begin, dur, warp, width
    lifetime = (slices["scope"] == LIFETIME).to_numpy()
    # Times from the session's first unit start, as a session's tables count them.
    start = int(slices["begin_ns"][lifetime].min()) if lifetime.any() else 0
    if "begin_record" in columns:
        slices["depth"] = np.asarray(columns["depth"], dtype=np.int64)
        slices["begin_record"] = np.asarray(columns["begin_record"], dtype=np.int64)
        slices["end_record"] = np.asarray(columns["end_record"], dtype=np.int64)
    else:
        slices["depth"] = 0
        track = np.asarray(columns["track"], dtype=np.int64)
        slices["begin_record"], slices["end_record"] = _nesting_order(
            np.where(lifetime, -1, track), slices["begin_ns"].to_numpy(), slices["end_ns"].to_numpy()
        )
    events = slices[~lifetime].reset_index(drop=True)
    events["begin_rel_ns"] = events["begin_ns"] - start
    events["end_rel_ns"] = events["end_ns"] - start
    units = slices.loc[
        lifetime, ["kernel", "launch", "cta", "sm", "warp", "unit", "dur_ns", "count", "overwritten"]
    ]
    units = units.reset_index(drop=True)
    units["start_ns"] = slices["begin_ns"][lifetime].to_numpy()
    units["end_ns"] = slices["end_ns"][lifetime].to_numpy()
    units["start_rel_ns"] = units["start_ns"] - start
    units["end_rel_ns"] = units["end_ns"] - start
    units["start_cycles"] = 0
    units["end_cycles"] = slices["dur_cycles"][lifetime].reset_index(drop=True)
    del slices
    return _finished(info, events, units, launches)


def _finished(
    info: dict[str, Any], events: pd.DataFrame, units: pd.DataFrame, launches: pd.DataFrame
) -> TraceFile:
    """The trace file from its events and unit lifetimes: only what a file holds is named."""
    for table in (events, units):
        for name in ("kernel", "scope"):
            if name in table and isinstance(table[name].dtype, pd.CategoricalDtype):
                table[name] = table[name].cat.remove_unused_categories()
    units["finished"] = True
    unmatched = pd.DataFrame({column: [] for column in UNMATCHED_COLUMNS})
    return TraceFile(Trace(info, events, units, unmatched, launches))


def _nesting_order(track: np.ndarray, begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The place of each slice's begin and end among its track's, where a trace keeps only
    times: slices that nest (as a track's do) begin outermost first and end innermost first, and
    a slice that ends as another begins ends first. Returns the begin's and the end's place."""
    n = len(track)
    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((-end, begin, track))] = np.arange(n)
    empty = begin == end
    # Markers sort by (track, time, phase, then): ends of slices begun before (phase 0,
    # innermost first), then begins (phase 1, outermost first), each empty slice's end right
    # after its begin.
    phase = np.concatenate([np.ones(n, np.int64), empty.astype(np.int64)])
    then = np.concatenate([2 * rank, np.where(empty, 2 * rank + 1, -rank)])
    place = np.empty(2 * n, dtype=np.int64)
    place[np.lexsort((then, phase, np.concatenate([begin, end]), np.concatenate([track, track])))] = (
        np.arange(2 * n)
    )
    return place[:n], place[n:]
