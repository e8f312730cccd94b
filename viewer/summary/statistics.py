"""Each scope's duration statistics, in numpy: the rows are sorted once by group and duration,
and counts, sums, medians and 90th percentiles are read off the sorted runs (the median and
percentiles interpolated linearly, as pandas' ``quantile`` does). A pandas ``groupby`` of
millions of events by four string keys cost most of ``proton-ik show``'s time and memory.

A row's group is (host scope, kernel, launch name, scope). The first three are the launch's:
they are looked up once per (launch, kernel) (``launch_keys``), not per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from proton_ik.viewer.arrays import groups as numbered_keys  # (``groups`` names groups of rows here)

if TYPE_CHECKING:
    from proton_ik.viewer.tables import Chunk

STATISTICS = ["line", "file", "count", "mean_ns", "median_ns", "mean_cycles", "median_cycles", "total_ns"]
PERCENTILES = ["p90_ns", "p90_cycles"]


@dataclass(frozen=True)
class LaunchKeys:
    """Each row's (launch, kernel) key (``row``), and each key's kernel, host scope path ("" for
    none) and launch name (the kernel's where the launch has none), as strings."""

    row: np.ndarray
    kernel: np.ndarray
    host_scope: np.ndarray
    name: np.ndarray


def launch_keys(frame: pd.DataFrame, labels: pd.DataFrame | None) -> LaunchKeys:
    """The keys of ``frame``'s rows (it has ``launch`` and ``kernel`` columns); ``labels``: host
    scope and name by launch number, where the launch table has them."""
    kernel_codes, kernels = pd.factorize(frame["kernel"], use_na_sentinel=False)
    # One key per (launch, kernel), factorized by hashing: no sort of the rows.
    key = frame["launch"].to_numpy().astype(np.int64) * len(kernels) + kernel_codes
    row, keys = pd.factorize(key)
    kernel = np.asarray(kernels, dtype=object)[keys % len(kernels)].astype(str).astype(object)
    host = np.full(len(keys), "", dtype=object)
    name = kernel.copy()
    if labels is not None:
        launches = pd.Series(keys // len(kernels))
        if "host_scope" in labels:
            found = launches.map(labels["host_scope"])
            host = found.where(found.notna(), "").astype(str).to_numpy(dtype=object)
        if "name" in labels:
            found = launches.map(labels["name"])
            name = np.where(found.notna().to_numpy(), found.astype(str).to_numpy(dtype=object), kernel)
    return LaunchKeys(row, kernel, host, name)


def scope_statistics(events: pd.DataFrame, labels: pd.DataFrame | None, keys: list[str]) -> pd.DataFrame:
    """Count, mean, median, p90 and total of each scope's durations (ns and cycles), and its
    first line and file, indexed by ``keys`` (host scope, kernel, name, scope) in sorted order."""
    launch = launch_keys(events, labels)
    scope_codes, scope_names = _scope_codes(events["scope"])
    # (launch key, scope) pairs, then the groups their strings name, sorted as strings.
    pair, pairs = pd.factorize(launch.row.astype(np.int64) * (len(scope_names) + 1) + scope_codes + 1)
    pair_key, pair_scope = pairs // (len(scope_names) + 1), pairs % (len(scope_names) + 1) - 1
    names = [
        (launch.host_scope[k], launch.kernel[k], launch.name[k], scope_names[s] if s >= 0 else "nan")
        for k, s in zip(pair_key.tolist(), pair_scope.tolist(), strict=True)
    ]
    groups = sorted(set(names))
    number = {group: i for i, group in enumerate(groups)}
    group = np.array([number[name] for name in names], dtype=np.int64)[pair]
    index = pd.MultiIndex.from_tuples(groups, names=keys)
    counts = np.bincount(group, minlength=len(groups))
    ns = _durations(events["dur_ns"].to_numpy(), group, counts)
    cycles = _durations(events["dur_cycles"].to_numpy(), group, counts)
    lines = _first(events["line"].array, group, len(groups))
    return _statistics_frame(
        index, lines, _first(events["file"].array, group, len(groups)), counts, ns, cycles
    )


Durations = tuple[dict[str, np.ndarray], np.ndarray]  # ``_durations``: total, mean, median; p90


def _statistics_frame(
    index: pd.MultiIndex, lines, files, counts: np.ndarray, ns: Durations, cycles: Durations
) -> pd.DataFrame:
    """The statistics' table (``STATISTICS``, then ``PERCENTILES``), a row per group of ``index``."""
    (ns_stats, ns_p90), (cycles_stats, cycles_p90) = ns, cycles
    stats = pd.DataFrame(
        {
            "line": lines,
            "file": files,
            "count": counts.astype(np.int64),
            "mean_ns": ns_stats["mean"],
            "median_ns": ns_stats["median"],
            "mean_cycles": cycles_stats["mean"],
            "median_cycles": cycles_stats["median"],
            "total_ns": ns_stats["total"],
        },
        index=index,
    )
    stats["p90_ns"] = ns_p90
    stats["p90_cycles"] = cycles_p90
    return stats


def _scope_codes(scope: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Each row's scope as a code (-1: missing, named "nan" as ``astype(str)`` names it) and the
    names of the codes: a categorical's own codes, else the strings' (a trace read back)."""
    if isinstance(scope.dtype, pd.CategoricalDtype):
        names = np.asarray(scope.cat.categories, dtype=object).astype(str).astype(object)
        return scope.cat.codes.to_numpy().astype(np.int64), names
    codes, names = pd.factorize(scope.astype(str))
    return codes.astype(np.int64), np.asarray(names, dtype=object)


def _durations(
    values: np.ndarray, group: np.ndarray, counts: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Total, mean and median of each group's ``values``, and their 90th percentile."""
    ordered = _sorted_in_groups(values.astype(np.int64), group, counts)
    starts = np.cumsum(counts) - counts
    total = np.add.reduceat(ordered, starts) if len(ordered) else np.zeros(0, dtype=np.int64)
    return (
        {"total": total, "mean": total / counts, "median": _quantile(ordered, starts, counts, 0.5)},
        _quantile(ordered, starts, counts, 0.9),
    )


def _sorted_in_groups(values: np.ndarray, group: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``values`` sorted by group, then by value. Only the values are wanted, not the order that
    sorts them: one sort of a single key (the group's offset plus the value) where it fits in 63
    bits, which is several times faster than a lexsort's two stable argsorts and gathers."""
    if not len(values):
        return values
    low = int(values.min())
    span = int(values.max()) - low + 1
    if len(counts) * span >= 1 << 63:
        return values[np.lexsort((values, group))]
    key = group.astype(np.int64) * span + (values - low)
    key.sort()  # equal keys are equal values, so the sort need not be stable
    key -= np.repeat(np.arange(len(counts), dtype=np.int64) * span, counts)
    return key + low


def _quantile(ordered: np.ndarray, starts: np.ndarray, counts: np.ndarray, q: float) -> np.ndarray:
    """The ``q`` quantile of each sorted run, linearly interpolated (pandas' and numpy's default)."""
    position = (counts - 1) * q
    low = np.floor(position).astype(np.int64)
    high = np.ceil(position).astype(np.int64)
    below, above = ordered[starts + low].astype(np.float64), ordered[starts + high].astype(np.float64)
    return below + (above - below) * (position - low)


def _first(column, group: np.ndarray, groups: int):
    """Each group's first value that is not missing, in row order, as ``column``'s type."""
    present = ~pd.isna(column)
    rows = np.full(groups, len(group), dtype=np.int64)
    np.minimum.at(rows, group[present], np.flatnonzero(present))
    found = rows < len(group)
    taken = column.take(np.where(found, rows, 0))
    return taken.where(found) if isinstance(taken, pd.Series) else pd.Series(taken).where(found).array


class ScopeSample:
    """The scope events of a session gathered chunk by chunk, for ``scope_statistics`` without its
    events table: each event's (launch, kernel, scope) as a number and its two durations (20
    bytes an event, where the table's columns take about 60), and each (launch, kernel, scope)'s
    first source line and file. ``statistics`` gives what ``scope_statistics`` gives the table
    the chunks join into."""

    def __init__(self) -> None:
        self._pairs: dict[tuple[int, int, int], int] = {}  # (launch, kernel code, scope code) -> pair
        self._order: list[int] = []  # per pair: its launch's place in the session (the table's row order)
        self._line: list[int | None] = []  # per pair: its first line, in row order
        self._file: list[int | None] = []  # per pair: its first file code
        self._pair: list[np.ndarray] = []
        self._ns: list[np.ndarray] = []
        self._cycles: list[np.ndarray] = []
        self.kernels: tuple[str, ...] = ()
        self.scopes: tuple[str, ...] = ()
        self.files: tuple[str, ...] = ()

    def add(self, chunk: Chunk) -> None:
        """One ``tables.Chunk``'s events (its rows are in the order the table keeps a launch's)."""
        events = chunk.events
        self.kernels, self.scopes, self.files = chunk.kernels, chunk.scopes, chunk.files
        launch = np.asarray(events["launch"], dtype=np.int64)
        if not len(launch):
            return
        kernel, scope = (
            np.asarray(events["kernel"], dtype=np.int64),
            np.asarray(events["scope"], dtype=np.int64),
        )
        pair_of, row = numbered_keys(launch - launch.min(), kernel, scope + 1)
        found = zip(launch[row].tolist(), kernel[row].tolist(), scope[row].tolist(), strict=True)
        numbers = np.empty(len(row), dtype=np.int64)
        for index, triple in enumerate(found):
            number = self._pairs.get(triple)
            if number is None:
                number = self._pairs[triple] = len(self._order)
                self._order.append(int(events["order"][row[index]]))
                self._line.append(None)
                self._file.append(None)
            numbers[index] = number
        self._first(pair_of, numbers, ~events["line_missing"], events["line"], self._line)
        self._first(pair_of, numbers, events["file"] >= 0, events["file"], self._file)
        self._pair.append(numbers[pair_of].astype(np.int32))
        # Copies: a chunk's column may be a view that holds more than itself.
        self._ns.append(np.array(events["dur_ns"], dtype=np.int64))
        self._cycles.append(np.array(events["dur_cycles"], dtype=np.int64))

    @staticmethod
    def _first(pair_of: np.ndarray, numbers: np.ndarray, present: np.ndarray, values, firsts: list) -> None:
        """Each pair's first present value, where an earlier chunk gave it none (a launch's rows
        come chunk after chunk, in order)."""
        local, at = np.unique(pair_of[present], return_index=True)
        rows = np.flatnonzero(present)[at]
        for index, row in zip(local.tolist(), rows.tolist(), strict=True):
            number = int(numbers[index])
            if firsts[number] is None:
                firsts[number] = int(values[row])

    def statistics(self, labels: pd.DataFrame | None, keys: list[str]) -> pd.DataFrame:
        """``scope_statistics`` of the gathered events (once: the events are let go as it reads
        them)."""
        triples = np.array(list(self._pairs) or np.zeros((0, 3)), dtype=np.int64).reshape(-1, 3)
        frame = pd.DataFrame(
            {"launch": triples[:, 0], "kernel": np.asarray(self.kernels or [""], dtype=object)[triples[:, 1]]}
        )
        launch = launch_keys(frame, labels)
        scope = [self.scopes[s] if s >= 0 else "nan" for s in triples[:, 2].tolist()]
        names = [
            (launch.host_scope[k], launch.kernel[k], launch.name[k], scope[p])
            for p, k in enumerate(launch.row.tolist())
        ]
        group_names = sorted(set(names))
        number = {group: i for i, group in enumerate(group_names)}
        pair_group = np.array([number[name] for name in names], dtype=np.int32)
        # Each gathered list is let go once joined: memory holds the events' columns once.
        pair, self._pair = (np.concatenate(self._pair) if self._pair else np.zeros(0, np.int32)), []
        group = pair_group[pair] if len(pair) else np.zeros(0, dtype=np.int32)
        del pair
        counts = np.bincount(group, minlength=len(group_names))
        ns_values, self._ns = _joined(self._ns), []
        ns = _durations(ns_values, group, counts)
        del ns_values
        cycles_values, self._cycles = _joined(self._cycles), []
        cycles = _durations(cycles_values, group, counts)
        files = [None if f is None else self.files[f] for f in self._file]
        return _statistics_frame(
            pd.MultiIndex.from_tuples(group_names, names=keys),
            self._group_first(self._line, pair_group, len(group_names), "Int64"),
            self._group_first(files, pair_group, len(group_names), object),
            counts,
            ns,
            cycles,
        )

    def _group_first(
        self, firsts: list, pair_group: np.ndarray, groups: int, dtype
    ) -> pd.api.extensions.ExtensionArray:
        """Each group's value of its pair whose launch comes first among those with one."""
        chosen: list = [None] * groups
        at: list[int | None] = [None] * groups
        for pair, value in enumerate(firsts):
            if value is None:
                continue
            group, order = int(pair_group[pair]), self._order[pair]
            if at[group] is None or order < at[group]:  # type: ignore[operator]
                chosen[group], at[group] = value, order
        return pd.array(chosen, dtype=dtype)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
