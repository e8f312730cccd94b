"""Per-scope statistics, and what was lost on the way, as tables and as text."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from proton_ik.viewer.events import LOST_TO_RING, UNMATCHED_BEGIN, UNMATCHED_END, UNMATCHED_KINDS
from proton_ik.viewer.table import TimeShift

LOSS_COLUMNS = {
    "unmatched_begin": UNMATCHED_KINDS[UNMATCHED_BEGIN],
    "unmatched_end": UNMATCHED_KINDS[UNMATCHED_END],
    "lost_to_ring": UNMATCHED_KINDS[LOST_TO_RING],
}


@dataclass(frozen=True)
class Summary:
    """``scopes``: one row per (kernel, scope). ``kernels``: one row per kernel, with what was lost."""

    scopes: pd.DataFrame
    kernels: pd.DataFrame
    problems: list[str]

    def __str__(self) -> str:
        return format_summary(self)


def summarize(
    events: pd.DataFrame,
    units: pd.DataFrame,
    unmatched: pd.DataFrame,
    launches: pd.DataFrame,
    problems: list[str],
) -> Summary:
    """Count, mean, median and p90 of each scope's duration (ns and cycles), and its share of the
    kernel's time: the sum of its durations over the sum of the kernel's finished unit lifetimes."""
    keys = ["kernel", "scope"]
    finished = units[units["finished"]]
    lifetime = finished.groupby(finished["kernel"].astype(str))["dur_ns"].sum().astype(np.int64)
    grouped = events.assign(**{key: events[key].astype(str) for key in keys}).groupby(keys, sort=True)
    stats = grouped.agg(
        line=("line", "first"),
        count=("dur_ns", "size"),
        mean_ns=("dur_ns", "mean"),
        median_ns=("dur_ns", "median"),
        mean_cycles=("dur_cycles", "mean"),
        median_cycles=("dur_cycles", "median"),
        total_ns=("dur_ns", "sum"),
    )
    stats["p90_ns"] = grouped["dur_ns"].quantile(0.9)
    stats["p90_cycles"] = grouped["dur_cycles"].quantile(0.9)
    scopes = stats.merge(
        _losses_by_scope(unmatched),
        left_index=True,
        right_index=True,
        how="outer",
        suffixes=("", "_unmatched"),
    )
    scopes["line"] = scopes["line"].fillna(scopes.pop("line_unmatched")).astype("Int64")
    for column in ("count", "total_ns", *LOSS_COLUMNS):
        scopes[column] = scopes[column].fillna(0).astype(np.int64)
    scopes = scopes.reset_index()
    kernel_time = scopes["kernel"].map(lifetime).astype(np.float64)
    scopes["share"] = scopes["total_ns"] / kernel_time.where(kernel_time > 0)
    return Summary(scopes[list(SCOPE_COLUMNS)], _kernels(launches, lifetime), problems)


SCOPE_COLUMNS = (
    "kernel", "scope", "line", "count", "mean_ns", "median_ns", "p90_ns", "mean_cycles", "median_cycles",
    "p90_cycles", "total_ns", "share", *LOSS_COLUMNS,
)  # fmt: skip


def _losses_by_scope(unmatched: pd.DataFrame) -> pd.DataFrame:
    """Unmatched records per (kernel, scope), by kind, with the scope's source line."""
    columns = ["line", *LOSS_COLUMNS]
    if not len(unmatched):
        return pd.DataFrame(columns=columns, index=pd.MultiIndex.from_tuples([], names=["kernel", "scope"]))
    frame = unmatched.assign(kernel=unmatched["kernel"].astype(str), scope=unmatched["scope"].astype(str))
    counts = frame.groupby(["kernel", "scope", "kind"], observed=False).size().unstack("kind", fill_value=0)
    counts = counts.rename(columns={label: column for column, label in LOSS_COLUMNS.items()})
    counts.columns = list(counts.columns)
    counts["line"] = frame.groupby(["kernel", "scope"])["line"].first()
    return counts.loc[counts[list(LOSS_COLUMNS)].sum(axis=1) > 0, columns]


def _kernels(launches: pd.DataFrame, lifetime: pd.Series) -> pd.DataFrame:
    if not len(launches):
        return pd.DataFrame()
    totals = launches.groupby("kernel", sort=True).agg(
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
    totals["lifetime_ns"] = lifetime.reindex(totals.index).fillna(0).astype(np.int64)
    return totals.reset_index()


def format_summary(summary: Summary) -> str:
    """The summary as text for a terminal: one table per kernel, then what was lost."""
    if not len(summary.kernels):
        return "proton_ik: no launches were captured"
    lines = []
    for kernel in summary.kernels.itertuples():
        lines.append(
            f"{kernel.kernel}: {kernel.launches} launch(es), {kernel.units} units, "
            f"SM clock {kernel.mhz:.0f} MHz, {kernel.events} events; scope begins shifted by "
            f"{TimeShift(kernel.time_shift_cycles, kernel.time_shift_pair_cycles)} "
            "(the calibrated cost of an empty scope)"
        )
        table = summary.scopes[summary.scopes["kernel"] == kernel.kernel]
        if len(table):
            shown = pd.DataFrame(
                {
                    "scope": table["scope"],
                    "line": table["line"].astype("string").fillna("-"),
                    "count": table["count"],
                    "mean ns": _column(table["mean_ns"], "{:,.0f}"),
                    "median ns": _column(table["median_ns"], "{:,.0f}"),
                    "p90 ns": _column(table["p90_ns"], "{:,.0f}"),
                    "mean cyc": _column(table["mean_cycles"], "{:,.0f}"),
                    "median cyc": _column(table["median_cycles"], "{:,.0f}"),
                    "p90 cyc": _column(table["p90_cycles"], "{:,.0f}"),
                    "share": _column(table["share"], "{:.1%}"),
                    "unmatched": table["unmatched_begin"] + table["unmatched_end"],
                }
            )
            lines.extend("  " + line for line in shown.to_string(index=False).splitlines())
        lines.append(
            f"  records: {kernel.records:,} kept, {kernel.overwritten:,} overwritten by the ring; "
            f"unmatched: {kernel.unmatched_begin:,} begins, {kernel.unmatched_end:,} ends, "
            f"{kernel.lost_to_ring:,} ends lost to the ring; {kernel.units_unfinished:,} unfinished units"
        )
    if summary.problems:
        lines.append("problems:")
        lines.extend(f"  - {problem}" for problem in summary.problems)
    return "\n".join(lines)


def _column(values: pd.Series, spec: str) -> pd.Series:
    return values.map(lambda value: "-" if pd.isna(value) else spec.format(value))
