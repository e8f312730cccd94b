"""Several sessions of one job side by side: per scope, each session's mean and count, and the
slowest session named (``proton-ik show dist.rank0.pik dist.rank1.pik``).

A session is labelled by the rank it recorded (``rank N``, from a job's launcher), else by its
file name. Scopes are matched by kernel and name; a scope one session lacks shows a gap.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from proton_ik.viewer.summary import Summary, formatted

__all__ = ["label_of", "side_by_side", "side_by_side_text"]

_KEYS = ["kernel", "scope"]


def label_of(info: Mapping[str, object], file_name: str) -> str:
    """``rank N`` for a session a job's rank recorded, else its file name."""
    rank = info.get("rank")
    return f"rank {rank}" if isinstance(rank, int) and not isinstance(rank, bool) else file_name


def side_by_side(summaries: Mapping[str, Summary]) -> pd.DataFrame:
    """One row per (kernel, scope): each session's count and mean ns (weighted over its launch
    names and host scopes), the slowest session by mean, and how much slower it is than the
    fastest."""
    frames = []
    for label, summary in summaries.items():
        scopes = summary.scopes
        if not len(scopes):
            continue
        weighted = scopes.assign(total=scopes["mean_ns"] * scopes["count"])
        per = weighted.groupby(_KEYS, observed=True, sort=True)[["count", "total"]].sum()
        per["mean_ns"] = per["total"] / per["count"].where(per["count"] > 0)
        frames.append(per[["count", "mean_ns"]].add_prefix(f"{label}: "))
    if not frames:
        return pd.DataFrame(columns=[*_KEYS, "slowest", "slowest_over_fastest"])
    table = pd.concat(frames, axis=1).reset_index()
    means = table[[f"{label}: mean_ns" for label in summaries if f"{label}: mean_ns" in table]]
    table["slowest"] = means.idxmax(axis=1).str.removesuffix(": mean_ns")
    table["slowest_over_fastest"] = means.max(axis=1) / means.min(axis=1)
    return table


def side_by_side_text(summaries: Mapping[str, Summary]) -> str:
    """``side_by_side`` as text: mean ns per session, the slowest named."""
    table = side_by_side(summaries)
    if not len(table):
        return "no scope was recorded in any of the sessions"
    labels = [label for label in summaries if f"{label}: mean_ns" in table]
    shown = pd.DataFrame(
        {
            "kernel": table["kernel"].astype(str),
            "scope": table["scope"].astype(str),
            **{f"{label} mean ns": formatted(table[f"{label}: mean_ns"], "{:,.0f}") for label in labels},
            "slowest": table["slowest"],
            "x fastest": formatted(table["slowest_over_fastest"], "{:.2f}"),
        }
    )
    return shown.to_string(index=False)
