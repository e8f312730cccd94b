"""PyTorch profiler traces (Kineto's Chrome JSON, ``prof.export_chrome_trace``) read, and drawn
again as Perfetto packets beside a session's (``timeline``).

Time: Kineto writes ``ts`` and ``dur`` in microseconds (three decimals), ``ts`` counted from the
trace's ``baseTimeNanoseconds``, a time of the host's realtime clock; so ``base + ts * 1000`` is
the host's ``time.time_ns()`` of the event, the clock a session's clock pairs read
(``runtime.clock_sync``). CUPTI's GPU times are moved onto that clock by CUPTI itself.

The drawing: one root track "torch.profiler", a track per Kineto process (the CPU process, each
GPU) and under it a track per thread or stream, each with its ``X`` slices and ``i`` instants at
absolute times, args as debug annotations; a flow from each CUDA runtime call to the kernel or
copy it launched (their shared ``correlation``). GPU-side user annotations get a track of their
own beside their stream, since they overlap the stream's kernels without nesting in them.
Events of other phases (counters, Kineto's own flow events, metadata) are not drawn as such.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    DebugAnnotation,
    TracePacket,
    TrackDescriptor,
    TrackEvent,
)

from proton_ik.viewer.perfetto import debug_annotation

__all__ = ["KinetoTrace", "TorchTraceError", "kineto_packets", "read_kineto"]

KERNEL_CATEGORIES = ("kernel",)  # what CUPTI records a kernel launch as
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")  # the ends of a runtime call's flow
_ANNOTATION_CATEGORY = "gpu_user_annotation"
_CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")


class TorchTraceError(ValueError):
    """A file that is not a trace ``torch.profiler`` wrote, and why."""


@dataclass(frozen=True)
class KinetoTrace:
    """A ``torch.profiler`` trace: its events, the host time its ``ts`` count from, and a table
    of its GPU kernels (name, device, stream, begin_ns and end_ns on the host's clock,
    correlation, and ``event``: the kernel's index in ``events``)."""

    path: Path
    events: list[dict[str, Any]]
    base_ns: int
    kernels: pd.DataFrame

    def ns(self, ts: float) -> int:
        """A Kineto ``ts`` (microseconds) as the host's nanoseconds."""
        return self.base_ns + round(ts * 1000)


def read_kineto(path: str | Path) -> KinetoTrace:
    """Read a ``torch.profiler`` Chrome trace (``.json`` or ``.json.gz``)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        document = json.loads(text)
    except OSError as error:
        raise TorchTraceError(f"{path}: cannot read it ({error.strerror or error})") from None
    except (ValueError, EOFError) as error:
        raise TorchTraceError(
            f"{path} is not a torch.profiler trace (not JSON: {error}); pass the file that "
            "prof.export_chrome_trace() wrote"
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise TorchTraceError(
            f"{path} is not a torch.profiler trace: it has no traceEvents list; pass the file that "
            "prof.export_chrome_trace() wrote"
        )
    base = document.get("baseTimeNanoseconds", 0)
    if not isinstance(base, int) or isinstance(base, bool):
        raise TorchTraceError(f"{path}: baseTimeNanoseconds is {base!r}, not a count of nanoseconds")
    events = [event for event in document["traceEvents"] if isinstance(event, dict)]
    return KinetoTrace(path, events, base, _kernels(events, base))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _kernels(events: list[dict[str, Any]], base: int) -> pd.DataFrame:
    rows: dict[str, list[Any]] = {
        key: [] for key in ("name", "device", "stream", "begin_ns", "end_ns", "correlation", "event")
    }
    for index, event in enumerate(events):
        if event.get("ph") != "X" or event.get("cat") not in KERNEL_CATEGORIES:
            continue
        ts, dur, args = _number(event.get("ts")), _number(event.get("dur")), event.get("args")
        if ts is None or dur is None or dur < 0 or not isinstance(args, dict):
            continue
        begin = base + round(ts * 1000)
        rows["name"].append(str(event.get("name", "")))
        rows["device"].append(_int(args.get("device"), -1))
        rows["stream"].append(_int(args.get("stream"), -1))
        rows["begin_ns"].append(begin)
        rows["end_ns"].append(begin + round(dur * 1000))
        rows["correlation"].append(_int(args.get("correlation"), -1))
        rows["event"].append(index)
    frame = pd.DataFrame(rows)
    for column in ("device", "stream", "begin_ns", "end_ns", "correlation", "event"):
        frame[column] = frame[column].astype(np.int64)
    return frame.sort_values("begin_ns", kind="stable").reset_index(drop=True)


def _int(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


# --- drawing -------------------------------------------------------------------------------------


@dataclass
class _Tracks:
    """The track uuids handed out so far, from ``base`` up."""

    root: int
    next_uuid: int
    by_key: dict[tuple[Any, ...], int]

    def uuid(self) -> int:
        self.next_uuid += 1
        return self.next_uuid


def kineto_packets(
    trace: KinetoTrace,
    *,
    uuid_base: int,
    sequence: int,
    notes: Mapping[int, Mapping[str, Any]] | None = None,
    title: str = "torch.profiler",
) -> Iterator[TracePacket]:
    """The trace's tracks and events as Perfetto packets: uuids and flow ids from ``uuid_base``
    up, on packet sequence ``sequence``; ``notes``: more args for some events (by index in
    ``trace.events``), such as the session launch a kernel was matched to."""
    notes = notes or {}
    names = _process_and_thread_names(trace.events)
    tracks = _Tracks(uuid_base + 1, uuid_base + 1, {})
    root = TrackDescriptor(uuid=tracks.root, name=f"{title} ({trace.path.name})")
    root.child_ordering = TrackDescriptor.EXPLICIT
    yield TracePacket(
        track_descriptor=root,
        trusted_packet_sequence_id=sequence,
        sequence_flags=TracePacket.SEQ_INCREMENTAL_STATE_CLEARED,
    )
    drawn = [
        (index, event)
        for index, event in enumerate(trace.events)
        if event.get("ph") in ("X", "i", "I") and _number(event.get("ts")) is not None
    ]
    # Slices nest on a track when the outer one comes first: by time, then the longer first.
    drawn.sort(key=lambda item: (float(item[1]["ts"]), -(_number(item[1].get("dur")) or 0.0)))
    flow_base = uuid_base + (1 << 40)
    for index, event in drawn:
        track, descriptors = _track_of(event, names, tracks)
        for descriptor in descriptors:
            yield TracePacket(track_descriptor=descriptor, trusted_packet_sequence_id=sequence)
        yield from _event_packets(trace, event, track, sequence, flow_base, notes.get(index, {}))


def _process_and_thread_names(events: list[dict[str, Any]]) -> dict[tuple[Any, ...], tuple[str, int]]:
    """Names and sort indexes from Kineto's metadata events: ("p", pid) and ("t", pid, tid)."""
    found: dict[tuple[Any, ...], tuple[str, int]] = {}
    labels: dict[Any, str] = {}
    for event in events:
        if event.get("ph") != "M" or not isinstance(event.get("args"), dict):
            continue
        pid, tid, args, what = event.get("pid"), event.get("tid"), event["args"], event.get("name")
        key: tuple[Any, ...] = ("p", pid) if what and str(what).startswith("process") else ("t", pid, tid)
        name, rank = found.get(key, (str(pid if key[0] == "p" else tid), 0))
        if what in ("process_name", "thread_name"):
            name = str(args.get("name", name)).strip()
        elif what in ("process_sort_index", "thread_sort_index"):
            rank = _int(args.get("sort_index"), rank)
        elif what == "process_labels":
            labels[pid] = str(args.get("labels", ""))
        found[key] = (name, rank)
    for pid, label in labels.items():
        name, rank = found.get(("p", pid), (str(pid), 0))
        found[("p", pid)] = (f"{label} ({name})" if label else name, rank)
    return found


def _track_of(
    event: dict[str, Any], names: Mapping[tuple[Any, ...], tuple[str, int]], tracks: _Tracks
) -> tuple[int, list[TrackDescriptor]]:
    """The track of ``event``, and the descriptors of tracks it is the first event of."""
    pid, tid = event.get("pid"), event.get("tid")
    annotation = event.get("cat") == _ANNOTATION_CATEGORY
    key = ("t", pid, tid, annotation)
    if key in tracks.by_key:
        return tracks.by_key[key], []
    new: list[TrackDescriptor] = []
    process_key = ("p", pid)
    if process_key not in tracks.by_key:
        name, rank = names.get(process_key, (f"process {pid}", 0))
        uuid = tracks.by_key[process_key] = tracks.uuid()
        new.append(_descriptor(uuid, tracks.root, name, rank))
    name, rank = names.get(("t", pid, tid), (f"thread {tid}", 0))
    if annotation:
        name, rank = f"{name} (annotations)", rank
    uuid = tracks.by_key[key] = tracks.uuid()
    new.append(_descriptor(uuid, tracks.by_key[process_key], name, rank))
    return uuid, new


def _descriptor(uuid: int, parent: int, name: str, rank: int) -> TrackDescriptor:
    descriptor = TrackDescriptor(uuid=uuid, parent_uuid=parent, name=name)
    descriptor.sibling_order_rank = max(min(rank, (1 << 31) - 1), -(1 << 31))
    descriptor.child_ordering = TrackDescriptor.EXPLICIT
    descriptor.sibling_merge_behavior = TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
    return descriptor


def _event_packets(
    trace: KinetoTrace,
    event: dict[str, Any],
    track: int,
    sequence: int,
    flow_base: int,
    note: Mapping[str, Any],
) -> Iterator[TracePacket]:
    begin = trace.ns(float(event["ts"]))
    given = event.get("args")
    args: dict[str, Any] = given if isinstance(given, dict) else {}
    category = str(event.get("cat", ""))
    annotations = [
        annotation
        for key, value in {"cat": category, **args, **note}.items()
        if (annotation := _annotation(key, value)) is not None
    ]
    if event.get("ph") != "X":
        instant = TrackEvent(type=TrackEvent.TYPE_INSTANT, track_uuid=track, name=str(event.get("name", "")))
        instant.debug_annotations.extend(annotations)
        yield TracePacket(timestamp=begin, track_event=instant, trusted_packet_sequence_id=sequence)
        return
    start = TrackEvent(type=TrackEvent.TYPE_SLICE_BEGIN, track_uuid=track, name=str(event.get("name", "")))
    start.debug_annotations.extend(annotations)
    correlation = _int(args.get("correlation"), -1)
    if correlation >= 0 and category in _CALL_CATEGORIES:
        start.flow_ids.append(flow_base + correlation)
    elif correlation >= 0 and category in GPU_CATEGORIES:
        start.terminating_flow_ids.append(flow_base + correlation)
    yield TracePacket(timestamp=begin, track_event=start, trusted_packet_sequence_id=sequence)
    end = TrackEvent(type=TrackEvent.TYPE_SLICE_END, track_uuid=track)
    duration = max(round((_number(event.get("dur")) or 0.0) * 1000), 0)
    yield TracePacket(timestamp=begin + duration, track_event=end, trusted_packet_sequence_id=sequence)


def _annotation(name: str, value: Any) -> DebugAnnotation | None:
    """An arg as a named debug annotation (the Perfetto writer's encoding); None for none."""
    annotation = debug_annotation(value)
    if annotation is not None:
        annotation.name = str(name)
    return annotation
