"""Per-scope statistics, and what was lost on the way, as tables and as text.

Statistics are grouped by host scope path (``proton_ik.scope`` around the launches; "" for none),
kernel, launch name (what the kernel's ``launch_metadata`` named the launch, e.g. one name per
autotuned config; the kernel's name otherwise) and scope. Tables without those launch columns
(older sessions, traces read back) group as if no launch had a host scope or a name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from proton_ik.viewer.pairing import LOST_TO_RING, UNMATCHED_BEGIN, UNMATCHED_END, UNMATCHED_KINDS
from proton_ik.viewer.summary.aggregate import aggregate_lines
from proton_ik.viewer.summary.async_events import event_lines
from proton_ik.viewer.summary.statistics import launch_keys, scope_statistics
from proton_ik.viewer.summary.text_columns import formatted
from proton_ik.viewer.tables import TimeShift, cluster_lines

LOSS_COLUMNS = {
    "unmatched_begin": UNMATCHED_KINDS[UNMATCHED_BEGIN],
    "unmatched_end": UNMATCHED_KINDS[UNMATCHED_END],
    "lost_to_ring": UNMATCHED_KINDS[LOST_TO_RING],
}


LAUNCH_KEYS = ["host_scope", "kernel", "name"]  # what a scope's statistics are grouped under
SCOPE_KEYS = [*LAUNCH_KEYS, "scope"]


@dataclass(frozen=True)
class Summary:
    """``scopes``: one row per (host scope, kernel, launch name, scope). ``kernels``: one row per
    (host scope, kernel), with what was lost. ``aggregates``: the per-scope statistics of
    aggregate launches (``summarize_aggregates``), empty when there are none.
    ``events``: latency statistics of events (``summarize_events``). ``clusters``:
    per launch and thread-block cluster, its CTAs and their skews (``tables.cluster_table``)."""

    scopes: pd.DataFrame
    kernels: pd.DataFrame
    problems: list[str]
    warnings: list[str] = field(default_factory=list)  # about the session as a whole
    aggregates: pd.DataFrame = field(default_factory=pd.DataFrame)
    events: pd.DataFrame = field(default_factory=pd.DataFrame)
    clusters: pd.DataFrame = field(default_factory=pd.DataFrame)

    def __str__(self) -> str:
        return format_summary(self)


def table_statistics(
    events: pd.DataFrame, units: pd.DataFrame, launches: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What ``summarize`` reads of a trace's tables: the scopes' statistics, and the finished
    units' launch, kernel and lifetime."""
    statistics = scope_statistics(_with_files(events), launch_labels(launches), SCOPE_KEYS)
    # Only the columns read here are labelled: a copy of a table of millions of rows with all its
    # columns costs more than the statistics.
    return statistics, units.loc[units["finished"], ["launch", "kernel", "dur_ns"]]


def summarize(
    statistics: pd.DataFrame,
    finished: pd.DataFrame,
    unmatched: pd.DataFrame,
    launches: pd.DataFrame,
    problems: list[str],
    warnings: Sequence[str] = (),
    aggregates: pd.DataFrame | None = None,
    event_stats: pd.DataFrame | None = None,
) -> Summary:
    """Count, mean, median and p90 of each scope's duration (ns and cycles), and its share of the
    kernel's time: the sum of its durations over the sum of the finished unit lifetimes of the
    launches it ran in (of its kernel, launch name and host scope). ``statistics``: the scopes'
    (``table_statistics`` of a trace's tables, or a session's ``ScopeSample`` gathered chunk by
    chunk); ``finished``: the finished units' launch, kernel and lifetime (``dur_ns``; a row may
    sum several units). ``aggregates``: the aggregate launches' per-scope rows
    (``summarize_aggregates``), printed under their kernels."""
    labels = launch_labels(launches)
    lifetime = _labelled(finished, labels).groupby(LAUNCH_KEYS)["dur_ns"].sum().astype(np.int64)
    scopes = _with_losses(statistics, _labelled(_with_files(unmatched), labels))
    kernel_time = pd.Series(
        lifetime.reindex(pd.MultiIndex.from_frame(scopes[LAUNCH_KEYS])).to_numpy(), dtype=np.float64
    )
    scopes["share"] = scopes["total_ns"] / kernel_time.where(kernel_time > 0)
    return Summary(
        scopes[list(SCOPE_COLUMNS)],
        _kernels(_labelled(launches, labels), lifetime),
        problems,
        list(warnings),
        pd.DataFrame() if aggregates is None else aggregates,
        pd.DataFrame() if event_stats is None else event_stats,
    )


SCOPE_COLUMNS = (
    "host_scope", "kernel", "name", "scope", "line", "file", "count", "mean_ns", "median_ns", "p90_ns", "mean_cycles", "median_cycles",
    "p90_cycles", "total_ns", "share", *LOSS_COLUMNS,
)  # fmt: skip


def _with_losses(stats: pd.DataFrame, unmatched: pd.DataFrame) -> pd.DataFrame:
    """The statistics beside each scope's unmatched records (a scope may have only those)."""
    scopes = stats.merge(
        _losses_by_scope(unmatched),
        left_index=True,
        right_index=True,
        how="outer",
        suffixes=("", "_unmatched"),
    )
    scopes["line"] = scopes["line"].fillna(scopes.pop("line_unmatched")).astype("Int64")
    file = scopes["file"].astype(object)
    scopes["file"] = file.where(file.notna(), scopes.pop("file_unmatched").astype(object))
    for column in ("count", "total_ns", *LOSS_COLUMNS):
        # An outer merge with an empty side leaves object columns; fillna on those is deprecated.
        scopes[column] = pd.to_numeric(scopes[column]).fillna(0).astype(np.int64)
    return scopes.reset_index()


def launch_labels(launches: pd.DataFrame) -> pd.DataFrame | None:
    """Host scope path and launch name by launch number, where the launch table has them."""
    present = [key for key in ("host_scope", "name") if key in launches]
    if not len(launches) or not present:
        return None
    return launches.drop_duplicates("launch").set_index("launch")[present]


def _labelled(frame: pd.DataFrame, labels: pd.DataFrame | None) -> pd.DataFrame:
    """``frame`` with string ``kernel``, ``host_scope`` ("" for none) and ``name`` (the kernel's
    where the launch has none) columns, looked up by its ``launch`` column. The strings are made
    once per (launch, kernel) (``statistics.launch_keys``) and spread to the rows by index: a
    session of millions of events has a few thousand launches."""
    if not len(frame):
        empty = pd.Series([], index=frame.index, dtype=object)
        return frame.assign(kernel=empty, host_scope=empty, name=empty)
    keys = launch_keys(frame, labels)
    return frame.assign(
        kernel=keys.kernel[keys.row], host_scope=keys.host_scope[keys.row], name=keys.name[keys.row]
    )


def _with_files(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with a ``file`` column: none known in tables from before files were recorded."""
    return frame if "file" in frame else frame.assign(file=pd.Series(None, index=frame.index, dtype=object))


def _losses_by_scope(unmatched: pd.DataFrame) -> pd.DataFrame:
    """Unmatched records per (host scope, kernel, launch name, scope), by kind, with the scope's
    source line and file."""
    columns = ["line", "file", *LOSS_COLUMNS]
    keys = [*LAUNCH_KEYS, "scope"]
    if not len(unmatched):
        return pd.DataFrame(columns=columns, index=pd.MultiIndex.from_tuples([], names=keys))
    frame = unmatched.assign(scope=unmatched["scope"].astype(str))
    counts = frame.groupby([*keys, "kind"], observed=False).size().unstack("kind", fill_value=0)
    counts = counts.rename(columns={label: column for column, label in LOSS_COLUMNS.items()})
    counts.columns = list(counts.columns)
    counts["line"] = frame.groupby(keys)["line"].first()
    counts["file"] = frame.groupby(keys)["file"].first()
    return counts.loc[counts[list(LOSS_COLUMNS)].sum(axis=1) > 0, columns]


def _kernels(launches: pd.DataFrame, lifetime: pd.Series) -> pd.DataFrame:
    """One row per (host scope, kernel): its launches' counts, lifetime, ring and variety."""
    if not len(launches):
        return pd.DataFrame()
    keys = ["host_scope", "kernel"]
    # A launch with no time has no clock: numbers, so that an all-NaN median is NaN, not a warning.
    # (a trace read back may hold no clock for any launch: no column then)
    mhz = pd.to_numeric(launches["mhz"]) if "mhz" in launches.columns else np.nan
    launches = launches.assign(mhz=mhz)
    totals = launches.groupby(keys, sort=True).agg(
        launches=("launch", "size"),
        ctas=("ctas", "sum"),
        ctas_missing=("ctas_missing", "sum"),
        units=("units", "sum"),
        units_unfinished=("units_unfinished", "sum"),
        units_skipped=("units_skipped", "sum"),
        records=("records", "sum"),
        overwritten=("overwritten", "sum"),
        events=("events", "sum"),
        overlapping=("overlapping", "sum"),
        unmatched_begin=("unmatched_begin", "sum"),
        unmatched_end=("unmatched_end", "sum"),
        lost_to_ring=("lost_to_ring", "sum"),
        mhz=("mhz", "median"),
        time_shift_cycles=("time_shift_cycles", "max"),
        time_shift_pair_cycles=("time_shift_pair_cycles", "max"),
    )
    by_kernel = lifetime.groupby(level=keys).sum()
    totals["lifetime_ns"] = by_kernel.reindex(totals.index).fillna(0).astype(np.int64)
    groups = dict(tuple(launches.groupby(keys, sort=True)))
    totals["ring"] = [_ring(groups[key]) for key in totals.index]
    totals["variety"] = [_variety(groups[key]) for key in totals.index]
    totals["sampled"] = [_sampled(groups[key]) for key in totals.index]
    return totals.reset_index()


def format_summary(summary: Summary) -> str:
    """The summary as text for a terminal: one table per kernel (under its host scope, where
    launches were made in host scopes), then what was lost."""
    if not len(summary.kernels):
        return "proton_ik: no launches were captured"
    lines = []
    if (summary.kernels["host_scope"] != "").any():
        for host, kernels in summary.kernels.groupby("host_scope", sort=True):
            lines.append(f"host scope {host}:" if host else "outside host scopes:")
            scopes = summary.scopes[summary.scopes["host_scope"] == host]
            aggregates = summary.aggregates
            if len(aggregates):
                aggregates = aggregates[aggregates["host_scope"] == host]
            lines.extend("  " + line for line in _kernel_lines(kernels, scopes, aggregates))
    else:
        lines.extend(_kernel_lines(summary.kernels, summary.scopes, summary.aggregates))
    for kernel in dict.fromkeys(summary.events["kernel"]) if len(summary.events) else ():
        lines.extend(event_lines(summary.events, kernel))
    lines.extend(cluster_lines(summary.clusters))
    if summary.warnings:
        lines.extend(f"warning: {warning}" for warning in summary.warnings)
    if summary.problems:
        lines.append("problems:")
        lines.extend(f"  - {problem}" for problem in summary.problems)
    return "\n".join(lines)


def _kernel_lines(kernels: pd.DataFrame, scopes: pd.DataFrame, aggregates: pd.DataFrame) -> list[str]:
    """Each kernel's launches, its scope table (by launch name too, where launches were named
    apart from the kernel), its aggregate launches' statistics and what it lost."""
    lines = []
    for kernel in kernels.itertuples():
        lines.append(
            f"{kernel.kernel}: {kernel.launches} launch(es), {kernel.units} units, "
            f"SM clock {kernel.mhz:.0f} MHz, {kernel.events} events; scope begins shifted by "
            f"{TimeShift(kernel.time_shift_cycles, kernel.time_shift_pair_cycles)} "
            "(the calibrated cost of an empty scope)"
        )
        lines.append(f"  {kernel.ring}")
        if getattr(kernel, "sampled", ""):
            lines.append(f"  sampled: {kernel.sampled}; the others recorded nothing")
        if kernel.variety:
            lines.append(f"  launches: {kernel.variety}")
        table = scopes[scopes["kernel"] == kernel.kernel]
        if len(table):
            named = (table["name"] != table["kernel"]).any()
            shown = pd.DataFrame(
                {
                    **({"name": table["name"]} if named else {}),
                    "scope": table["scope"],
                    "line": _source_lines(table),
                    "count": table["count"],
                    "mean ns": formatted(table["mean_ns"], "{:,.0f}"),
                    "median ns": formatted(table["median_ns"], "{:,.0f}"),
                    "p90 ns": formatted(table["p90_ns"], "{:,.0f}"),
                    "mean cyc": formatted(table["mean_cycles"], "{:,.0f}"),
                    "median cyc": formatted(table["median_cycles"], "{:,.0f}"),
                    "p90 cyc": formatted(table["p90_cycles"], "{:,.0f}"),
                    "share": formatted(table["share"], "{:.1%}"),
                    "unmatched": table["unmatched_begin"] + table["unmatched_end"],
                }
            )
            lines.extend("  " + line for line in shown.to_string(index=False).splitlines())
        if len(aggregates):
            rows = aggregates[aggregates["kernel"] == kernel.kernel]
            lines.extend("  " + line for line in aggregate_lines(rows))
        lines.append(
            f"  records: {kernel.records:,} kept, {kernel.overwritten:,} overwritten by the ring; "
            f"unmatched: {kernel.unmatched_begin:,} begins, {kernel.unmatched_end:,} ends, "
            f"{kernel.lost_to_ring:,} ends lost to the ring; {kernel.units_unfinished:,} unfinished units"
        )
    return lines


def _source_lines(table: pd.DataFrame) -> pd.Series:
    """Each scope's ``file:line`` (its file, or its line, where only one is known; "-" for neither)."""
    line, file = table["line"].astype("string"), table["file"].astype("string")
    return (file + ":" + line).fillna(file).fillna(line).fillna("-")


def _values(launches: pd.DataFrame, name: str) -> list[Any]:
    """A launch-table column as plain values, None where missing (older files lack some columns)."""
    if name not in launches:
        return [None] * len(launches)
    return [None if _missing(value) else value for value in launches[name].tolist()]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _ring(launches: pd.DataFrame) -> str:
    """How many entries each unit's ring holds, and why that many, for one kernel's launches."""
    rings = dict.fromkeys(
        zip(
            *(
                _values(launches, name)
                for name in ("capacity", "capacity_source", "capacity_bound", "capacity_reason")
            ),
            strict=True,
        )
    )
    texts = []
    for capacity, source, bound, reason in rings:
        if source == "aggregate":
            texts.append("none, per-scope statistics instead (aggregate=on)")
            continue
        text = "?" if capacity is None else f"{int(capacity):,}"
        why = ", ".join(
            part
            for part in (
                f"from the {source}" if source else "",
                f"bound {int(bound):,} slots" if bound is not None else "",
            )
            if part
        )
        texts.append(
            f"{text} slots per unit" + (f" ({why})" if why else "") + (f": {reason}" if reason else "")
        )
    return "ring: " + "; ".join(texts)


def _sampled(launches: pd.DataFrame) -> str:
    """Which CTAs and warps recorded (``tables.sampled``), each distinct text once; empty when all did."""
    return "; ".join(dict.fromkeys(str(text) for text in _values(launches, "sampled") if text))


def _variety(launches: pd.DataFrame) -> str:
    """What tells one kernel's launches apart: devices and streams (when there are several), CUDA
    graph replays and autotuner configs; empty when nothing does."""
    parts = []
    for name, label in (("device", "devices"), ("stream", "streams")):
        values = sorted({int(v) for v in _values(launches, name) if v is not None})
        if len(values) > 1:
            parts.append(f"{label} {', '.join(map(str, values))}")
    replays: dict[int, list[int]] = {}
    for graph, replay in zip(_values(launches, "graph"), _values(launches, "replay"), strict=True):
        if graph is not None:
            replays.setdefault(int(graph), []).append(-1 if replay is None else int(replay))
    if replays:
        graphs = "; ".join(
            f"graph {graph}: {len(numbers)} replay(s) {_span(numbers)}"
            for graph, numbers in sorted(replays.items())
        )
        parts.append(f"{len(launches) - sum(map(len, replays.values()))} direct, from CUDA graphs: {graphs}")
    configs: dict[str, int] = {}
    for config in _values(launches, "config"):
        if config is not None:
            configs[str(config)] = configs.get(str(config), 0) + 1
    if configs:
        parts.append(
            "configs: " + ", ".join(f"{config} ({count} launch(es))" for config, count in configs.items())
        )
    return "; ".join(parts)


def _span(numbers: list[int]) -> str:
    low, high = min(numbers), max(numbers)
    return f"{low}" if low == high else f"{low}-{high}"
