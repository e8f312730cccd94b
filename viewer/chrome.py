"""Events in, Chrome JSON trace out (for chrome://tracing and tools that read the legacy format).

One process per (launch, SM), named "launch N: kernel / SM s"; one thread per (CTA, warp, lane),
named "CTA c warp w". Slices are complete ("X") events with ``ts``/``dur`` in microseconds
whose three decimals carry the nanoseconds, counted from the session's first unit start so the
numbers stay exact as doubles. Slices on one thread must nest; scopes that overlap without
nesting sit on their own "overlap" threads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from proton_ik.viewer.perfetto import LIFETIME, PROGRESS_EVENTS

CHUNK = 100_000


def write_chrome(
    path: str | Path,
    events: pd.DataFrame,
    units: pd.DataFrame,
    launches: pd.DataFrame,
    info: Mapping[str, Any],
    *,
    progress: bool | None = None,
) -> Path:
    """Write events (and unit lifetimes) as Chrome JSON; ``progress=None`` shows a bar past 1e6 events."""
    path = Path(path)
    slices = _slices(events, units)
    processes, threads = _ids(slices, launches)
    slices = slices.merge(processes[["launch", "sm", "pid"]], on=["launch", "sm"]).merge(
        threads[["launch", "sm", "cta", "unit", "lane", "tid"]], on=["launch", "sm", "cta", "unit", "lane"]
    )
    slices = slices.sort_values(
        ["pid", "tid", "ts", "dur", "depth"], ascending=[True, True, True, False, True]
    )
    other = {"proton_ik": dict(info), "launches": json.loads(launches.to_json(orient="records"))}
    show = len(events) > PROGRESS_EVENTS if progress is None else progress
    with open(path, "w") as file:
        file.write('{"displayTimeUnit": "ns", "otherData": ' + json.dumps(other) + ', "traceEvents": [\n')
        file.write(",\n".join(_metadata(processes, threads)))
        with tqdm(total=len(slices), desc="chrome json", unit="event", disable=not show) as bar:
            for start in range(0, len(slices), CHUNK):
                chunk = slices.iloc[start : start + CHUNK]
                file.write(",\n" + ",\n".join(_x_events(chunk)))
                bar.update(len(chunk))
        file.write("\n]}\n")
    return path


def _slices(events: pd.DataFrame, units: pd.DataFrame) -> pd.DataFrame:
    """Scope events and finished units' lifetimes, in one table with relative times."""
    scope = pd.DataFrame(
        {
            "launch": events["launch"],
            "kernel": events["kernel"].astype(str),
            "sm": events["sm"],
            "cta": events["cta"],
            "unit": events["unit"],
            "warp": events["warp"],
            "lane": events["lane"],
            "name": events["scope"].astype(str),
            "ts": events["begin_rel_ns"],
            "dur": events["dur_ns"],
            "cycles": events["dur_cycles"],
            "depth": events["depth"] + 1,
            "line": events["line"],
        }
    )
    finished = units[units["finished"]]
    life = pd.DataFrame(
        {
            "launch": finished["launch"],
            "kernel": finished["kernel"].astype(str),
            "sm": finished["sm"],
            "cta": finished["cta"],
            "unit": finished["unit"],
            "warp": finished["warp"],
            "lane": 0,
            "name": LIFETIME,
            "ts": finished["start_rel_ns"].astype(np.int64),
            "dur": finished["dur_ns"].astype(np.int64),
            "cycles": (finished["end_cycles"] - finished["start_cycles"]).astype(np.int64),
            "depth": 0,
            "line": pd.array([pd.NA] * len(finished), dtype="Int64"),
        }
    )
    frames = [frame for frame in (scope, life) if len(frame)]
    return pd.concat(frames, ignore_index=True) if frames else scope


def _ids(slices: pd.DataFrame, launches: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """pid per (launch, SM) and tid per (CTA, warp, lane), numbered in sort order so they sort numerically."""
    processes = slices[["launch", "kernel", "sm"]].drop_duplicates(["launch", "sm"])
    processes = processes.sort_values(["launch", "sm"], ignore_index=True)
    processes["pid"] = np.arange(1, len(processes) + 1)
    threads = slices[["launch", "sm", "cta", "unit", "warp", "lane"]].drop_duplicates(
        ["launch", "sm", "cta", "unit", "lane"]
    )
    threads = threads.sort_values(["launch", "sm", "cta", "unit", "lane"], ignore_index=True)
    threads = threads.merge(processes[["launch", "sm", "pid"]], on=["launch", "sm"])
    threads["tid"] = threads.groupby("pid").cumcount() + 1
    wide = launches.set_index("launch")["warps_per_unit"] if len(launches) else pd.Series(dtype=np.int64)
    threads["width"] = threads["launch"].map(wide).fillna(1).astype(np.int64)
    return processes, threads


def _metadata(processes: pd.DataFrame, threads: pd.DataFrame) -> Iterable[str]:
    for row in processes.itertuples(index=False):
        name = json.dumps(f"launch {row.launch}: {row.kernel} / SM {row.sm}")
        yield f'{{"ph": "M", "name": "process_name", "pid": {row.pid}, "tid": 0, "args": {{"name": {name}}}}}'
        yield (
            f'{{"ph": "M", "name": "process_sort_index", "pid": {row.pid}, "tid": 0, '
            f'"args": {{"sort_index": {row.pid}}}}}'
        )
    for row in threads.itertuples(index=False):
        warp = f"warp {row.warp}" if row.width <= 1 else f"warps {row.warp}-{row.warp + row.width - 1}"
        name = json.dumps(f"CTA {row.cta} {warp}" + (f" overlap {row.lane}" if row.lane else ""))
        yield (
            f'{{"ph": "M", "name": "thread_name", "pid": {row.pid}, "tid": {row.tid}, '
            f'"args": {{"name": {name}}}}}'
        )
        yield (
            f'{{"ph": "M", "name": "thread_sort_index", "pid": {row.pid}, "tid": {row.tid}, '
            f'"args": {{"sort_index": {row.tid}}}}}'
        )


def _x_events(chunk: pd.DataFrame) -> list[str]:
    names = {name: json.dumps(name) for name in pd.unique(chunk["name"])}
    kernels = {kernel: json.dumps(kernel) for kernel in pd.unique(chunk["kernel"])}
    line = chunk["line"].astype("string").fillna("null").tolist()
    columns = [
        chunk[c].tolist()
        for c in ("name", "kernel", "ts", "dur", "pid", "tid", "cta", "sm", "warp", "cycles")
    ]
    return [
        f'{{"ph": "X", "name": {names[name]}, "cat": {kernels[kernel]}, "ts": {_us(ts)}, "dur": {_us(dur)}, '
        f'"pid": {pid}, "tid": {tid}, "args": {{"cta": {cta}, "sm": {sm}, "warp": {warp}, "cycles": {cycles}, '
        f'"line": {ln}}}}}'
        for (name, kernel, ts, dur, pid, tid, cta, sm, warp, cycles), ln in zip(
            zip(*columns, strict=True), line, strict=True
        )
    ]


def _us(ns: int) -> str:
    """Nanoseconds as exact decimal microseconds."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}"
