"""Thread-block clusters seen together: per launch and cluster, its CTAs, their SMs, and how far
apart its CTAs started and ended.

A cluster's CTAs are co-scheduled on one GPC and may share distributed shared memory, so a
cluster waits for its slowest CTA at every cluster barrier. Its **start skew** is the spread
(max - min) of its CTAs' starts, a CTA's start being its first unit's start; its **end skew**
the spread of its CTAs' ends, a CTA's end being its last finished unit's end (ns, on the
session's time axis). A CTA whose units all failed to finish has no end, and a cluster none of
whose CTAs finished has no end skew.

The cluster of each CTA is what its header recorded (``contract.layout``: sm_90 and later); rows
of CTAs whose cluster was not recorded (-1) are left out. Whole-array numpy throughout: the
CTAs are reduced from their units with ``groups``, the clusters from their CTAs likewise; only
each cluster's list of CTAs and SMs is made per cluster.
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

from proton_ik.viewer.arrays import groups

if TYPE_CHECKING:  # imported where it is used: a render worker never imports it
    import pandas as pd

Columns = dict[str, np.ndarray]
CLUSTER_COLUMNS = [
    "kernel", "launch", "cluster", "size", "ctas", "sms", "start_ns", "end_ns", "start_skew_ns", "end_skew_ns",
]  # fmt: skip
CTA_COLUMNS = ("launch", "kernel", "cluster", "cluster_rank", "cta", "sm", "start_ns", "end_ns", "ended")
_NONE = np.iinfo(np.int64).min  # a CTA's end where none of its units finished
_SHOWN = 8  # launches ``cluster_lines`` names, the worst first


def cta_columns(units: Columns) -> Columns:
    """One row per CTA whose cluster was recorded, from its units' rows (``CTA_COLUMNS`` but
    ``ended`` as input, plus ``finished``: whether the unit has an end): its start is its
    units' earliest, its end its finished units' latest (``ended``: it has one)."""
    keep = units["cluster"] >= 0
    launch, cta = units["launch"][keep], units["cta"][keep]
    cta_of, first = groups(launch - launch.min(initial=0), cta)
    start = np.full(len(first), np.iinfo(np.int64).max)
    np.minimum.at(start, cta_of, units["start_ns"][keep])
    end = np.full(len(first), _NONE)
    finished = units["finished"][keep]
    np.maximum.at(end, cta_of[finished], units["end_ns"][keep][finished])
    rows = {
        name: units[name][keep][first]
        for name in ("launch", "kernel", "cluster", "cluster_rank", "cta", "sm")
    }
    return {**rows, "start_ns": start, "end_ns": end, "ended": end != _NONE}


def join_ctas(parts: list[Columns]) -> Columns:
    """CTA rows of several pieces (a CTA is never in two)."""
    return {name: np.concatenate([part[name] for part in parts]) for name in CTA_COLUMNS}


def cluster_columns(ctas: Columns) -> Columns:
    """One row per (launch, cluster) of ``cta_columns``' rows, in launch and cluster order: its
    kernel, size (CTAs seen), CTAs and SMs (tuples, by rank), first start and last end, start and
    end skew (``end_ns`` and ``end_skew_ns`` are -1 where no CTA ended)."""
    launch = ctas["launch"]
    cluster_of, first = groups(launch - launch.min(initial=0), ctas["cluster"])
    n = len(first)
    size = np.bincount(cluster_of, minlength=n)

    def spread(values: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        low = np.full(n, np.iinfo(np.int64).max)
        high = np.full(n, np.iinfo(np.int64).min)
        np.minimum.at(low, cluster_of[present], values[present])
        np.maximum.at(high, cluster_of[present], values[present])
        return low, high

    every = np.ones(len(launch), bool)
    first_start, last_start = spread(ctas["start_ns"], every)
    first_end, last_end = spread(ctas["end_ns"], ctas["ended"])
    ended = np.bincount(cluster_of[ctas["ended"]], minlength=n) > 0
    order = np.lexsort((ctas["cluster_rank"], cluster_of))
    bounds = np.cumsum(size)[:-1]
    return {
        "kernel": ctas["kernel"][first],
        "launch": launch[first],
        "cluster": ctas["cluster"][first],
        "size": size.astype(np.int64),
        "ctas": _tuples(ctas["cta"][order], bounds),
        "sms": _tuples(ctas["sm"][order], bounds),
        "start_ns": first_start,
        "end_ns": np.where(ended, last_end, -1),
        "start_skew_ns": last_start - first_start,
        "end_skew_ns": np.where(ended, last_end - first_end, -1),
    }


def _tuples(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """``values`` cut at ``bounds`` (one piece more than bounds), each piece a tuple of ints, as
    an object array."""
    if not len(values):
        return np.zeros(0, dtype=object)
    flat = values.tolist()
    edges = [0, *bounds.tolist(), len(flat)]
    pieces = (tuple(flat[a:b]) for a, b in pairwise(edges))
    return np.fromiter(pieces, dtype=object, count=len(edges) - 1)


def cluster_table(units: pd.DataFrame) -> pd.DataFrame:
    """The clusters of a session's units table (``Trace.units``): ``CLUSTER_COLUMNS``, one row per
    launch and cluster; empty where no cluster was recorded."""

    needed = ("kernel", "launch", "cta", "sm", "cluster", "cluster_rank", "start_ns", "end_ns", "finished")
    if any(name not in units for name in needed) or not len(units):
        return _empty()
    start, end = units["start_ns"], units["end_ns"]
    columns = {
        "launch": units["launch"].to_numpy(np.int64),
        "kernel": units["kernel"].astype(object).to_numpy(),
        "cta": _ints(units["cta"]),
        "sm": _ints(units["sm"]),
        "cluster": _ints(units["cluster"]),
        "cluster_rank": _ints(units["cluster_rank"]),
        # A unit without a start (no clock conversion) counts as starting at the latest time.
        "start_ns": start.fillna(np.iinfo(np.int64).max).to_numpy(np.int64),
        "end_ns": end.fillna(0).to_numpy(np.int64),
        "finished": units["finished"].to_numpy(bool) & end.notna().to_numpy(),
    }
    return cluster_frame(cta_columns(columns))


def cluster_frame(ctas: Columns) -> pd.DataFrame:
    """``cluster_table`` of ``cta_columns``' rows (of one table, or joined by ``join_ctas``)."""
    import pandas as pd

    if not len(ctas["launch"]):
        return _empty()
    clusters = cluster_columns(ctas)
    table = pd.DataFrame({name: clusters[name] for name in CLUSTER_COLUMNS}, columns=CLUSTER_COLUMNS)
    table["kernel"] = pd.Categorical(table["kernel"])
    for name in ("end_ns", "end_skew_ns"):
        table[name] = pd.arrays.IntegerArray(np.maximum(clusters[name], 0), clusters["end_ns"] < 0)
    return table


def _ints(column: pd.Series) -> np.ndarray:
    return column.fillna(-1).to_numpy(np.int64) if column.hasnans else column.to_numpy(np.int64)


def _empty() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        {name: pd.Series(dtype=object if name in ("ctas", "sms") else np.int64) for name in CLUSTER_COLUMNS}
    )


def cluster_lines(clusters: pd.DataFrame) -> list[str]:
    """``show``'s section: per launch with clusters of more than one CTA, the worst start and end
    skews, the worst launches first (at most ``_SHOWN``); none where there are no such clusters."""
    import pandas as pd

    if not len(clusters):
        return []
    per_launch = clusters.groupby("launch", sort=True).agg(
        kernel=("kernel", "first"),
        clusters=("cluster", "size"),
        size=("size", "max"),
        start_skew=("start_skew_ns", "max"),
        end_skew=("end_skew_ns", "max"),
    )
    per_launch = per_launch[per_launch["size"] > 1]
    if not len(per_launch):
        return []
    worst_start = clusters.loc[clusters.groupby("launch")["start_skew_ns"].idxmax()].set_index("launch")
    lines = ["clusters: the spread of each cluster's CTAs' starts and ends (worst cluster per launch)"]
    shown = per_launch.sort_values("start_skew", ascending=False, kind="stable")
    for launch, row in shown.head(_SHOWN).iterrows():
        worst = worst_start.loc[launch]
        ctas = ", ".join(map(str, worst["ctas"]))
        sms = ", ".join(map(str, worst["sms"]))
        end = "unknown" if pd.isna(row["end_skew"]) else f"{int(row['end_skew'])} ns"
        lines.append(
            f"  launch {launch} ({row['kernel']}): {row['clusters']} clusters of up to {row['size']} CTAs; "
            f"start skew up to {int(row['start_skew'])} ns (cluster {worst['cluster']}: CTAs {ctas} "
            f"on SMs {sms}), end skew up to {end}"
        )
    if len(shown) > _SHOWN:
        lines.append(
            f"  ... and {len(shown) - _SHOWN} more launches with clusters (Trace.clusters has them all)"
        )
    return lines
