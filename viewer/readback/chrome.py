"""Reading a Chrome JSON trace proton_ik wrote (``chrome.write_chrome``) back into columns: its
slices, its processes' launches and its threads' lanes, and the launch table it carries whole
(``otherData.launches``), each value checked. Events, marks and values (``chrome.events``: async
slices "b" and instants "i"; their ends, flows and counters repeat them) go to ``events``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from proton_ik.viewer.readback.checks import NOT_A_TRACE, checked_warps_per_unit, refuse, whole_number
from proton_ik.viewer.readback.events import AsyncRows, with_async
from proton_ik.viewer.readback.trace_file import TraceFile, trace_file_from_columns
from proton_ik.viewer.session_file import ManifestError, SessionFileError, check_info
from proton_ik.viewer.tracks import FILE_ARG, LAUNCH_TOTALS, SLICE_ARGS, parse_lane, parse_process_name


def read_chrome(path: str | Path, *, for_writing: bool = False) -> TraceFile:
    """Read a Chrome JSON trace written by ``chrome.write_chrome``."""
    path = Path(path)
    info, launch_rows, objects = _document(path)
    processes: dict[object, int] = {}
    lanes: dict[tuple[object, object], int] = {}  # by (pid, tid), from the thread's name
    threads: dict[tuple[object, object], int] = {}
    names = ("kernel", "launch", "scope", "begin_ns", "dur_ns", "lane", "track", *SLICE_ARGS, FILE_ARG)
    columns: dict[str, list[Any]] = {name: [] for name in names}
    async_rows = AsyncRows(path)
    places: dict[tuple[int, str], int] = {}  # an event's or mark's (launch, kernel) -> its code
    for number, obj in enumerate(objects):
        if not isinstance(obj, dict):
            raise refuse(path, f"traceEvents[{number}] is not a JSON object")
        _name_process_or_thread(obj, processes, lanes)
        where = f"traceEvents[{number}]"
        if obj.get("ph") in ("b", "i"):  # an event's slice, or an unmatched event, a mark or value
            place, name, ns, placed_args = _placed(path, obj, where, processes)
            add = async_rows.add_slice if obj["ph"] == "b" else async_rows.add_instant
            add(places.setdefault(place, len(places)), name, ns, placed_args, where)
        if obj.get("ph") == "X":  # not metadata, nor the rest of events and values ("e", "s", "f", "C")
            _add_slice(path, obj, where, processes, lanes, threads, columns)
    launches = _checked_launches(path, launch_rows)
    by_code = list(places)

    def resolve(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = [by_code[code] for code in codes.tolist()]
        return np.array([launch for launch, _ in found]), np.array([kernel for _, kernel in found])

    tables = async_rows.tables(resolve, relative=True)
    return with_async(trace_file_from_columns(info, columns, launches, for_writing), tables)


def _document(path: Path) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """The trace's session info (checked), launch table and trace events."""
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise SessionFileError(f"{path} does not exist; check the path") from None
    except (ValueError, RecursionError) as error:
        raise SessionFileError(f"{path} {NOT_A_TRACE} (its JSON does not parse: {error})") from None
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
        raise refuse(path, f"otherData.proton_ik: {error}") from None
    return info, launch_rows, objects


def _name_process_or_thread(
    obj: dict[str, Any], processes: dict[object, int], lanes: dict[tuple[object, object], int]
) -> None:
    """A process's launch, or a thread's lane, from its name (metadata "M")."""
    args = obj.get("args")
    if obj.get("ph") == "M" and obj.get("name") == "process_name" and isinstance(args, dict):
        launch = parse_process_name(str(args.get("name")))
        if launch is not None and isinstance(obj.get("pid"), (int, str)):
            processes[obj["pid"]] = launch
    if obj.get("ph") == "M" and obj.get("name") == "thread_name" and isinstance(args, dict):
        lane = parse_lane(str(args.get("name")))
        if (
            lane is not None
            and isinstance(obj.get("pid"), (int, str))
            and isinstance(obj.get("tid"), (int, str))
        ):
            lanes[obj["pid"], obj["tid"]] = lane


def _add_slice(
    path: Path,
    obj: dict[str, Any],
    where: str,
    processes: dict[object, int],
    lanes: dict[tuple[object, object], int],
    threads: dict[tuple[object, object], int],
    columns: dict[str, list[Any]],
) -> None:
    """A complete slice ("X": a scope or a unit's lifetime) into the columns, checked."""
    args = obj.get("args")
    kernel, scope, ts, dur = obj.get("cat"), obj.get("name"), obj.get("ts"), obj.get("dur")
    if not (isinstance(kernel, str) and isinstance(scope, str) and isinstance(args, dict)):
        raise refuse(path, f"{where} is a slice without a kernel (cat), name or args")
    pid, tid = obj.get("pid"), obj.get("tid")
    if not isinstance(pid, (int, str)) or pid not in processes:
        raise refuse(path, f"{where} is a slice in process {obj.get('pid')!r:.40}, which names no launch")
    if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not 0 <= dur < 1e15:
        raise refuse(path, f"{where} has the duration {dur!r:.40}, not a number of microseconds")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not -1e15 < ts < 1e15:
        raise refuse(path, f"{where} has the start {ts!r:.40}, not a time in microseconds")
    thread = (pid, tid if isinstance(tid, (int, str)) else None)
    columns["kernel"].append(kernel)
    columns["launch"].append(processes[obj["pid"]])
    columns["scope"].append(scope)
    columns["begin_ns"].append(round(ts * 1000))
    columns["dur_ns"].append(round(dur * 1000))
    columns["lane"].append(lanes.get(thread, 0))
    columns["track"].append(threads.setdefault(thread, len(threads)))
    for key in SLICE_ARGS:
        columns[key].append(whole_number(args.get(key), f"{where}.args.{key}", path, missing=True))
    file = args.get(FILE_ARG)
    if not isinstance(file, (str, type(None))):
        raise refuse(path, f"{where}.args.{FILE_ARG} is {file!r:.40}, not text")
    columns[FILE_ARG].append(file)


def _placed(
    path: Path, obj: dict[str, Any], where: str, processes: dict[object, int]
) -> tuple[tuple[int, str], str, int, dict[str, Any]]:
    """An event's or mark's (launch, kernel), name, time in ns and args, checked."""
    kernel, name, ts, pid, args = (
        obj.get("cat"),
        obj.get("name"),
        obj.get("ts"),
        obj.get("pid"),
        obj.get("args"),
    )
    if not (isinstance(kernel, str) and isinstance(name, str) and isinstance(args, dict)):
        raise refuse(path, f"{where} is an event or mark without a kernel (cat), name or args")
    if not isinstance(pid, (int, str)) or pid not in processes:
        raise refuse(path, f"{where} is an event or mark in process {pid!r:.40}, which names no launch")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not -1e15 < ts < 1e15:
        raise refuse(path, f"{where} has the time {ts!r:.40}, not a time in microseconds")
    return (processes[pid], kernel), name, round(ts * 1000), args


def _checked_launches(path: Path, rows: list[Any]) -> pd.DataFrame:
    """A Chrome trace's launch table, each row checked for what the summary reads."""
    for number, row in enumerate(rows):
        where = f"otherData.launches[{number}]"
        if not isinstance(row, dict):
            raise refuse(path, f"{where} is not a JSON object")
        if not isinstance(row.get("kernel"), str):
            raise refuse(path, f"{where} names no kernel")
        for key in ("launch", "ctas", "units", "overlapping", *LAUNCH_TOTALS):
            whole_number(row.get(key), f"{where}.{key}", path)
        for key in ("device", "stream", "graph", "replay", "capacity", "capacity_bound", "units_skipped"):
            whole_number(row.get(key), f"{where}.{key}", path, missing=True)
        checked_warps_per_unit(row.get("warps_per_unit"), f"{where}.warps_per_unit", path)
        mhz = row.get("mhz")  # null: no unit of the launch left a time
        if mhz is not None and (
            isinstance(mhz, bool) or not isinstance(mhz, (int, float)) or math.isinf(mhz)
        ):
            raise refuse(path, f"{where}.mhz is {mhz!r:.40}, not a clock rate")
        for key in ("grid", "config", "capacity_source", "capacity_reason", "clock_source"):
            if not isinstance(row.get(key), (str, type(None))):
                raise refuse(path, f"{where}.{key} is {row.get(key)!r:.40}, not text")
        problems = row.get("problems", [])
        if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
            raise refuse(path, f"{where}.problems is not a list of text")
    launches = pd.DataFrame(rows)
    if not len(launches):
        raise refuse(path, "it lists no launches (otherData.launches is empty)")
    if "problems" not in launches:
        launches["problems"] = [[] for _ in range(len(launches))]
    if "units_skipped" not in launches:
        launches["units_skipped"] = pd.NA
    launches["warps_per_unit"] = [checked_warps_per_unit(row.get("warps_per_unit"), "", path) for row in rows]
    return launches
