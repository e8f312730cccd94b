"""A chunk: a run of consecutive launches, decoded into columns, as the trace writers take it.

``pipeline`` builds chunks from a session's launches run by run; ``chunk_from_tables`` builds one
from a whole session's tables (``Trace``'s, or tables built by hand), so the writers take either.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from proton_ik.viewer.tables.table import HOST_SCOPE_SEPARATOR

if TYPE_CHECKING:  # imported where it is used: a render worker never imports it
    import pandas as pd

Columns = dict[str, np.ndarray]
BATCH_ROWS = 1 << 15  # rows a writer encodes at once (packets or JSON lines): about one bundle


@dataclass(frozen=True)
class Chunk:
    """A run of consecutive launches, decoded: columns as ``table`` builds them, group by group
    (launches of one kernel and profile), each in launch order (its ``order`` column).

    ``kernel``, ``scope``, ``host_scope`` and ``file`` columns hold codes into ``kernels``,
    ``scopes``, ``host_scopes`` and ``files`` (the session's names so far, in the order first
    seen; a ``file`` of -1: the scope's file is unknown). ``launches`` holds the
    launch-table rows of the launches whose last piece is here, and ``host_paths`` their host
    scopes (outermost first); ``widths`` the warps per unit of every launch (by number) with rows
    here. Times relative to the session start are in the ``*_rel_ns`` columns.
    """

    kernels: tuple[str, ...]
    scopes: tuple[str, ...]
    events: Mapping[str, np.ndarray]
    units: Mapping[str, np.ndarray]
    unmatched: Mapping[str, np.ndarray]
    launches: list[dict[str, Any]]
    widths: dict[int, int]
    host_scopes: tuple[str, ...] = ("",)
    host_paths: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    async_parts: tuple[Any, ...] = ()  # event_tables.AsyncParts of the groups that have events or marks
    # A launch whose rows here are one share of its SMs (``shares``): its span over all of them
    launch_spans: Mapping[int, tuple[int, int]] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """Each problem of the launches that end here, prefixed with its launch."""
        return [
            f"launch {row['launch']} ({row['kernel']}): {problem}"
            for row in self.launches
            for problem in row["problems"]
        ]

    def lifetimes(self, names: Sequence[str]) -> Columns:
        """Columns ``names`` of the finished units: those with a lifetime to draw."""
        finished = self.units["finished"]
        return {name: self.units[name][finished] for name in names}


def batches(rows: int) -> Iterator[tuple[int, int]]:
    """``rows`` in batches of ``BATCH_ROWS``: (first, past the last) each."""
    for lo in range(0, rows, BATCH_ROWS):
        yield lo, min(rows, lo + BATCH_ROWS)


def chunk_from_tables(events: pd.DataFrame, units: pd.DataFrame, launches: pd.DataFrame) -> Chunk:
    """A whole session's tables (``Trace``'s, or tables built by hand) as one chunk, for the writers."""
    kernels = sorted(
        {*_labels(events["kernel"]), *_labels(units["kernel"]), *_labels(launches.get("kernel", []))}
    )
    scopes = _labels(events["scope"])
    files = _labels(events["file"].dropna()) if "file" in events else []
    hosts = ["", *(label for label in _labels(events.get("host_scope", [])) if label)]
    rows = launches.to_dict("records")
    return Chunk(
        kernels=tuple(kernels),
        scopes=tuple(scopes),
        events={
            **{name: _ints(events[name]) for name in _EVENT_INTS},
            **_optional_ints(events),
            "kernel": _codes(events["kernel"], kernels),
            "scope": _codes(events["scope"], scopes),
            "file": _file_codes(events, files),
            "host_scope": _codes(events["host_scope"], hosts)
            if "host_scope" in events
            else np.zeros(len(events), np.int64),
        },
        units={
            **{name: _ints(units[name]) for name in _UNIT_INTS},
            **_optional_ints(units),
            "kernel": _codes(units["kernel"], kernels),
            "finished": units["finished"].to_numpy(bool),
        },
        unmatched={},
        launches=rows,
        widths={int(row["launch"]): int(row.get("warps_per_unit", 1)) for row in rows},
        host_scopes=tuple(hosts),
        host_paths={int(row["launch"]): _host_path(row.get("host_scope")) for row in rows},
        files=tuple(files),
    )


def empty_chunk() -> Chunk:
    """A chunk of no launches: what a writer adds to finish what earlier chunks left."""
    ints = np.zeros(0, np.int64)
    return Chunk(
        kernels=(),
        scopes=(),
        events={
            name: ints for name in (*_EVENT_INTS, *_OPTIONAL_INTS, "kernel", "scope", "file", "host_scope")
        },
        units={
            **{name: ints for name in (*_UNIT_INTS, *_OPTIONAL_INTS, "kernel")},
            "finished": np.zeros(0, bool),
        },
        unmatched={},
        launches=[],
        widths={},
    )


def _host_path(joined: Any) -> tuple[str, ...]:
    """A launch table's host scope path (joined by "/") as its scopes, outermost first."""
    return tuple(joined.split(HOST_SCOPE_SEPARATOR)) if isinstance(joined, str) and joined else ()


# What the trace writers read of the tables; -1 stands for a missing value.
_EVENT_INTS = (
    "launch", "sm", "cta", "unit", "warp", "lane", "depth", "begin_ns", "end_ns", "begin_rel_ns", "dur_ns",
    "dur_cycles", "line", "begin_record", "end_record",
)  # fmt: skip
_UNIT_INTS = (
    "launch", "sm", "cta", "unit", "warp", "start_ns", "end_ns", "start_rel_ns", "dur_ns", "start_cycles",
    "end_cycles", "count", "overwritten",
)  # fmt: skip
# Read where a table has them, -1 where it does not (tables built by hand, older trace files).
_OPTIONAL_INTS = ("cluster", "cluster_rank")


def _optional_ints(table: pd.DataFrame) -> Columns:
    return {
        name: _ints(table[name]) if name in table else np.full(len(table), -1, np.int64)
        for name in _OPTIONAL_INTS
    }


def _ints(column: pd.Series) -> np.ndarray:
    return column.fillna(-1).to_numpy(np.int64) if column.hasnans else column.to_numpy(np.int64)


def _labels(column: pd.Series | list) -> list[str]:
    """The distinct values of a column of names, as strings, sorted."""
    import pandas as pd

    if isinstance(column, pd.Series) and isinstance(column.dtype, pd.CategoricalDtype):
        return sorted(str(c) for c in column.cat.categories)
    return sorted({str(c) for c in column})


def _codes(column: pd.Series, labels: Sequence[str]) -> np.ndarray:
    """Each value's index in ``labels``."""
    import pandas as pd

    position = {label: i for i, label in enumerate(labels)}
    if isinstance(column.dtype, pd.CategoricalDtype):
        lookup = np.array([position[str(c)] for c in column.cat.categories] or [0], dtype=np.int64)
        return lookup[column.cat.codes.to_numpy()]
    return pd.Categorical(column.astype(str), categories=list(labels)).codes.astype(np.int64)


def _file_codes(events: pd.DataFrame, files: Sequence[str]) -> np.ndarray:
    """Each event's file's index in ``files``; -1 where it has none (or the table has no files)."""
    import pandas as pd

    if "file" not in events:
        return np.full(len(events), -1, np.int64)
    return pd.Categorical(events["file"], categories=list(files)).codes.astype(np.int64)


class _Joined(Mapping[str, np.ndarray]):
    """Columns of several groups one after another, each joined when first read: the writers
    read a few of the columns that ``trace`` needs all of. A group's rows are in launch order
    (its ``order`` column); the writers need no more, ``trace`` orders the whole session."""

    def __init__(self, parts: list[Columns]):
        self._parts = parts
        self._joined: Columns = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._joined:
            self._joined[name] = np.concatenate([part[name] for part in self._parts])
        return self._joined[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts[0])

    def __len__(self) -> int:
        return len(self._parts[0])


def joined_columns(parts: list[Columns]) -> Mapping[str, np.ndarray]:
    """Columns of several groups one after another (the one group's own where there is one)."""
    return parts[0] if len(parts) == 1 else _Joined(parts)
