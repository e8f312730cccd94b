"""The report's figures as arrays: whole-array numpy over a session's events, never a loop per record.

- ``scope_extras``: each scope's p5, p95 and max (ns and cycles) and a histogram of its durations
  (``HIST_STEPS`` bins per doubling), grouped as ``show`` groups scopes (``summary.LAUNCH_KEYS``).
- ``sm_heatmaps``: per scope, SM x time within the launch, the busy fraction: the time the SM's
  warps spent in the scope over the time they were alive, in ``TIME_BINS`` bins.
- ``cta_heatmap``: CTA x scope, each CTA's time in the scope per launch (and when its last warp
  ended), CTAs binned by the maximum over ``CTA_BINS`` bins so stragglers stay visible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from proton_ik.viewer.summary import LAUNCH_KEYS

HIST_STEPS = 4  # histogram bins per doubling of the duration
TIME_BINS = 160
CTA_BINS = 480
MAX_SCOPES_DRAWN = 8  # per kernel, the scopes of most total time
QUANTILES = (0.05, 0.95)
_SHIFT = 40  # a sort key: group above, duration (< 2**40 ns, 18 minutes) below


@dataclass(frozen=True)
class Heatmap:
    """``values`` (rows x columns, NaN where nothing ran) with what its axes mean; ``row_max``:
    each row's largest value, when rows are scaled apart (``values`` then in [0, 1])."""

    title: str
    values: np.ndarray
    rows: list[str]
    x_label: str
    x_span: tuple[float, float]
    x_unit: str
    value_label: str
    row_max: list[float] | None = None


def scope_groups(events: pd.DataFrame, launches: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Each event's group (an index into the table returned with it) of (host scope, kernel,
    launch name, scope), labelled as ``show`` labels them: from its launch's row."""
    kernels = events["kernel"].cat.categories.astype(str)
    by_launch = pd.DataFrame(
        {"launch": events["launch"].to_numpy(), "code": events["kernel"].cat.codes.to_numpy()}
    )
    labels = by_launch.drop_duplicates("launch").set_index("launch")
    labels["kernel"] = kernels[labels["code"].to_numpy()]
    labels["host_scope"], labels["name"] = "", labels["kernel"]
    if len(launches):
        table = launches.drop_duplicates("launch").set_index("launch").reindex(labels.index)
        if "host_scope" in table:
            labels["host_scope"] = (
                table["host_scope"].astype(object).where(table["host_scope"].notna(), "").astype(str)
            )
        if "name" in table:
            labels["name"] = (
                table["name"].astype(object).where(table["name"].notna(), labels["kernel"]).astype(str)
            )
    label_code, label_index = pd.MultiIndex.from_frame(labels[LAUNCH_KEYS]).factorize()
    launch_code = label_code[labels.index.get_indexer(events["launch"].to_numpy())]
    scopes = events["scope"].cat.categories.astype(str)
    pair = launch_code.astype(np.int64) * len(scopes) + events["scope"].cat.codes.to_numpy(np.int64)
    unique, group = np.unique(pair, return_inverse=True)
    keys = pd.DataFrame(label_index[unique // len(scopes)].to_list(), columns=LAUNCH_KEYS)
    keys["scope"] = scopes[unique % len(scopes)]
    return group.reshape(-1), keys


def scope_extras(events: pd.DataFrame, launches: pd.DataFrame) -> pd.DataFrame:
    """Per (host scope, kernel, launch name, scope): p5/p95/max in ns and cycles, and the
    histogram of ns durations (``hist``: counts, ``hist_first``: the first bin's index)."""
    if not len(events):
        return pd.DataFrame(columns=[*LAUNCH_KEYS, "scope", "hist", "hist_first"])
    group, table = scope_groups(events, launches)
    for unit, column in (("ns", "dur_ns"), ("cycles", "dur_cycles")):
        stats = _group_quantiles(group, events[column].to_numpy(np.int64), len(table))
        for name, values in stats.items():
            table[f"{name}_{unit}"] = values
    counts, first = histograms(group, events["dur_ns"].to_numpy(np.int64), len(table))
    table["hist"] = list(counts)
    table["hist_first"] = first
    return table


def hist_bins(durations: np.ndarray) -> np.ndarray:
    """Each duration's histogram bin: ``HIST_STEPS`` per doubling, bin 0 for 1 ns and less."""
    return np.floor(HIST_STEPS * np.log2(np.maximum(durations, 1))).astype(np.int64)


def histograms(group: np.ndarray, durations: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the counts over the bins from its first non-empty one, and that bin's index."""
    bins = hist_bins(durations)
    width = int(bins.max()) + 1 if len(bins) else 1
    counts = np.bincount(group * width + bins, minlength=groups * width).reshape(groups, width)
    filled = counts > 0
    first = np.where(filled.any(1), filled.argmax(1), 0)
    last = width - 1 - filled[:, ::-1].argmax(1)
    return np.array([counts[g, first[g] : last[g] + 1] for g in range(groups)], dtype=object), first


def _group_quantiles(group: np.ndarray, values: np.ndarray, groups: int) -> dict[str, np.ndarray]:
    """p5, p95 and max of ``values`` per group, interpolated as pandas' ``quantile`` (linear)."""
    key = np.sort((group.astype(np.int64) << _SHIFT) | np.clip(values, 0, (1 << _SHIFT) - 1))
    ordered = (key & ((1 << _SHIFT) - 1)).astype(np.float64)
    size = np.bincount(group, minlength=groups)
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    out = {}
    for q in QUANTILES:
        position = q * np.maximum(size - 1, 0)
        low = np.floor(position).astype(np.int64)
        high = np.minimum(low + 1, np.maximum(size - 1, 0))
        fraction = position - low
        at_low, at_high = ordered[start + low], ordered[start + high]
        out[f"p{round(q * 100)}"] = at_low + (at_high - at_low) * fraction
    out["max"] = ordered[start + size - 1]
    return out


def top_scopes(events: pd.DataFrame) -> list[str]:
    """A kernel's scopes of most total time, at most ``MAX_SCOPES_DRAWN``."""
    codes, names = scope_codes(events)
    totals = np.bincount(codes, weights=events["dur_ns"].to_numpy(np.float64), minlength=len(names))
    order = np.argsort(-totals, kind="stable")
    return [names[i] for i in order[:MAX_SCOPES_DRAWN] if totals[i] > 0]


def scope_codes(events: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Each event's scope as a code, and the names of the codes (no string per event)."""
    scope = events["scope"]
    return scope.cat.codes.to_numpy(np.int64), [str(name) for name in scope.cat.categories]


def launch_starts(units: pd.DataFrame) -> pd.Series:
    """Each launch's first unit start (ns from the session start), by launch number."""
    start = units["start_rel_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    return pd.Series(start, index=units["launch"].to_numpy()).groupby(level=0).min()


def _since_launch(launch: pd.Series, times: np.ndarray, starts: pd.Series) -> np.ndarray:
    return times - starts.reindex(launch.to_numpy()).to_numpy(np.float64)


def sm_heatmaps(events: pd.DataFrame, units: pd.DataFrame, scopes: list[str]) -> list[Heatmap]:
    """One kernel's busy fraction per SM and time bin for each of ``scopes`` (launches overlaid,
    each from its first unit's start)."""
    units = units[units["finished"].to_numpy(bool)]
    if not len(events) or not len(units):
        return []
    starts = launch_starts(units)
    u_begin = _since_launch(
        units["launch"], units["start_rel_ns"].to_numpy(np.float64, na_value=np.nan), starts
    )
    u_end = _since_launch(units["launch"], units["end_rel_ns"].to_numpy(np.float64, na_value=np.nan), starts)
    span = float(np.nanmax(u_end)) if np.isfinite(u_end).any() else 0.0
    if span <= 0:
        return []
    scale = TIME_BINS / span
    sms = int(max(units["sm"].max(), events["sm"].max())) + 1
    alive = coverage(units["sm"].to_numpy(np.int64), u_begin * scale, u_end * scale, sms)
    e_begin = _since_launch(events["launch"], events["begin_rel_ns"].to_numpy(np.float64), starts) * scale
    e_end = _since_launch(events["launch"], events["end_rel_ns"].to_numpy(np.float64), starts) * scale
    scope, names = scope_codes(events)
    sm = events["sm"].to_numpy(np.int64)
    maps = []
    for name in scopes:
        chosen = scope == names.index(name)
        busy = coverage(sm[chosen], e_begin[chosen], e_end[chosen], sms)
        with np.errstate(invalid="ignore", divide="ignore"):
            fraction = np.where(alive > 0, np.minimum(busy / alive, 1.0), np.nan)
        maps.append(
            Heatmap(
                name,
                fraction,
                [f"SM {i}" for i in range(sms)],
                "time since the launch's first warp started",
                (0.0, span),
                "ns",
                "busy fraction",
            )
        )
    return maps


def coverage(row: np.ndarray, begin: np.ndarray, end: np.ndarray, rows: int) -> np.ndarray:
    """The time each row's intervals cover in each of ``TIME_BINS`` unit-wide bins: the integral of
    how many are open, exact, from the cumulative sums of their begins and ends."""
    keep = np.isfinite(begin) & np.isfinite(end)
    row, begin, end = row[keep], np.clip(begin[keep], 0, TIME_BINS), np.clip(end[keep], 0, TIME_BINS)
    edges = TIME_BINS + 1

    def integral(at: np.ndarray) -> np.ndarray:  # sum over intervals of (edge - at), for at < edge
        cell = row * edges + np.minimum(np.floor(at).astype(np.int64) + 1, TIME_BINS)
        count = np.bincount(cell, minlength=rows * edges).reshape(rows, edges).cumsum(1)
        total = np.bincount(cell, weights=at, minlength=rows * edges).reshape(rows, edges).cumsum(1)
        return np.arange(edges) * count - total

    return np.diff(integral(begin) - integral(end), axis=1)


def cta_heatmap(events: pd.DataFrame, units: pd.DataFrame, scopes: list[str]) -> Heatmap | None:
    """One kernel's time per CTA in each of ``scopes`` per launch, and its last warp's end since
    the launch's start; CTAs binned by their maximum, each row scaled to its own maximum."""
    units = units[units["finished"].to_numpy(bool)]
    if not len(events) or not len(units):
        return None
    ctas = int(max(units["cta"].max(), events["cta"].max())) + 1
    launches = max(1, units["launch"].nunique())
    cta = events["cta"].to_numpy(np.int64)
    scope, names = scope_codes(events)
    dur = events["dur_ns"].to_numpy(np.float64)
    rows = []
    for name in scopes:
        chosen = scope == names.index(name)
        rows.append(np.bincount(cta[chosen], weights=dur[chosen], minlength=ctas) / launches)
    starts = launch_starts(units)
    end = _since_launch(units["launch"], units["end_rel_ns"].to_numpy(np.float64, na_value=np.nan), starts)
    last = pd.Series(end).groupby([units["launch"].to_numpy(), units["cta"].to_numpy()]).max()
    ended = last.groupby(level=1).mean().reindex(range(ctas)).to_numpy(np.float64)
    values = np.vstack([*rows, ended])
    width = -(-ctas // CTA_BINS)
    binned = binned_max(values, width)
    row_max = np.nanmax(np.where(np.isfinite(binned), binned, np.nan), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        scaled = binned / np.where(row_max > 0, row_max, np.nan)[:, None]
    label = "CTA" if width == 1 else f"CTA ({width} per column, their maximum)"
    names = [*(f"{name} ns/launch" for name in scopes), "last warp end ns"]
    return Heatmap(
        "CTAs",
        scaled,
        names,
        label,
        (0.0, float(ctas)),
        "",
        "of the row's maximum",
        [float(v) for v in row_max],
    )


def binned_max(values: np.ndarray, width: int) -> np.ndarray:
    """``values``' columns in runs of ``width``, each run's maximum (NaN where all are NaN)."""
    if width <= 1:
        return values
    pad = (-values.shape[1]) % width
    padded = np.pad(values, ((0, 0), (0, pad)), constant_values=np.nan)
    runs = padded.reshape(values.shape[0], -1, width)
    empty = np.isnan(runs).all(axis=2)
    return np.where(empty, np.nan, np.nanmax(np.where(np.isnan(runs), -np.inf, runs), axis=2))
