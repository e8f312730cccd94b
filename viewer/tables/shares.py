"""One share of a large launch's SMs: ``render.parts`` draws such a launch in several parts.

Below a launch, the trace's tree is per SM (SM tracks, their slots, unit tracks and counters),
so the parts that draw one launch share it out by SM (``SmShare.holds``: share 0 half as many
SMs as each other share). The launch itself (its track, its slice with its totals, its span over all SMs) is share
0's, which decodes the whole launch for it and draws its own SMs' rows; the other shares decode
their SMs' units alone. Events pair within a CTA, and marks and values are a warp's, so they go
with their SM. A launch whose thread-block clusters hold more than one CTA (its clusters track
draws each across SMs) is drawn whole by share 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from proton_ik.viewer.tables.chunk import Chunk, Columns
from proton_ik.viewer.tables.event_tables import AsyncParts

_FIRST = np.iinfo(np.int64).min
_LAST = np.iinfo(np.int64).max


@dataclass(frozen=True)
class SmShare:
    """Share ``share`` of ``shares`` of a launch's SMs."""

    share: int
    shares: int

    def __post_init__(self) -> None:
        if not 0 <= self.share < self.shares:
            raise ValueError(f"SM share {self.share} of {self.shares}: a share is 0 to shares - 1")

    @property
    def draws_launch(self) -> bool:
        return self.share == 0

    def holds(self, sm: np.ndarray) -> np.ndarray:
        """The SMs of this share: SM ids cut into 2n - 1 classes (their id modulo that), one for
        share 0, which decodes the whole launch besides (about what a share of that size costs
        to draw), two for each other share."""
        return (sm % (2 * self.shares - 1) + 1) // 2 == self.share


def crosses_sms(cluster_ctas: np.ndarray) -> bool:
    """Whether a launch has rows drawn across SMs: its CTAs' clusters (from their headers, which
    every share reads alike) hold more than one CTA."""
    return bool((cluster_ctas > 1).any())


def share_of_chunk(chunk: Chunk, share: SmShare, whole: bool) -> Chunk:
    """Share 0's part of a chunk decoded whole: its SMs' rows (all of them where ``whole``),
    with each launch's span over all SMs (``Chunk.launch_spans``)."""
    spans = _spans(chunk)
    if whole:
        return dataclasses.replace(chunk, launch_spans=spans)
    return dataclasses.replace(
        chunk,
        events=_on(chunk.events, share),
        units=_on(chunk.units, share),
        unmatched=_on(chunk.unmatched, share),
        async_parts=tuple(
            AsyncParts(*(_rows_on(table, share) for table in (part.events, part.marks, part.values)))
            for part in chunk.async_parts
        ),
        launch_spans=spans,
    )


def _on(columns: Mapping[str, np.ndarray], share: SmShare) -> _Masked:
    return _Masked(columns, share.holds(columns["sm"]))


def _rows_on(columns: Columns, share: SmShare) -> Columns:
    """An events, marks or values table's rows on the share's SMs (a table of no columns: none)."""
    if "sm" not in columns:
        return columns
    keep = share.holds(columns["sm"])
    return {name: column[keep] for name, column in columns.items()}


def _spans(chunk: Chunk) -> dict[int, tuple[int, int]]:
    """Each launch's earliest begin and latest end, over its events and finished units: what the
    track tree gives a launch drawn whole (``tracks.track_tree``)."""
    lives = chunk.lifetimes(("launch", "start_ns", "end_ns"))
    launch = np.concatenate([chunk.events["launch"], lives["launch"]])
    begin = np.concatenate([chunk.events["begin_ns"], lives["start_ns"]])
    end = np.concatenate([chunk.events["end_ns"], lives["end_ns"]])
    numbers, row = np.unique(launch, return_inverse=True)
    first, last = np.full(len(numbers), _LAST), np.full(len(numbers), _FIRST)
    np.minimum.at(first, row, begin)
    np.maximum.at(last, row, end)
    return {n: (b, e) for n, b, e in zip(numbers.tolist(), first.tolist(), last.tolist(), strict=True)}


class _Masked(Mapping[str, np.ndarray]):
    """Columns' rows ``keep``, each column taken when first read (the writers read a few)."""

    def __init__(self, columns: Mapping[str, np.ndarray], keep: np.ndarray):
        self._columns, self._keep = columns, keep
        self._taken: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._taken:
            self._taken[name] = self._columns[name][self._keep]
        return self._taken[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)
