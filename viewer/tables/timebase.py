"""Cycles to nanoseconds, from the clocks each unit read at its start and end. No clock rate is assumed.

Every unit header holds (%clock64, %globaltimer) at the unit's start and, once finished, at its
end. %clock64 counts per SM, so per (launch, SM) a least-squares line
``globaltimer = a + b * clock64`` through all those pairs gives the SM's real clock rate and
its offset. %globaltimer ticks in steps of about 32 ns, so a rate is only trusted over a span of
``MIN_SPAN_NS``; a shorter SM borrows a rate (the launch's median over trusted SMs, else the
session's, else that of the widest span there is) and fits only its offset.

All (launch, SM) lines of a session are fitted at once, with whole-array operations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from proton_ik.viewer.arrays import groups

MIN_SPAN_NS = 20_000

FIT = "fit"
LAUNCH_MEDIAN = "launch median"
SESSION_MEDIAN = "session median"
WIDEST_SPAN = "widest span"
_SOURCES = np.array([FIT, LAUNCH_MEDIAN, SESSION_MEDIAN, WIDEST_SPAN])


_NO_LAUNCH = np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class ClockAnchors:
    """(clock64, globaltimer) pairs, with the SM each was read on and the launch (0, 1, 2, ... in the
    session) it belongs to."""

    sm: np.ndarray  # int64
    clock: np.ndarray  # int64
    time: np.ndarray  # int64, ns
    launch: np.ndarray = field(default_factory=lambda: _NO_LAUNCH)  # int64; absent: all of launch 0

    def __post_init__(self) -> None:
        if self.launch is _NO_LAUNCH:
            object.__setattr__(self, "launch", np.zeros(len(self.sm), dtype=np.int64))


@dataclass(frozen=True)
class SmClocks:
    """Per-(launch, SM) conversions: ``ns = time_ref + round(offset + ns_per_cycle * (clock - clock_ref))``.

    Rows are sorted by launch, then SM.
    """

    launch: np.ndarray  # int64
    sm: np.ndarray  # int64
    clock_ref: np.ndarray  # int64
    time_ref: np.ndarray  # int64
    offset: np.ndarray  # float64, ns
    ns_per_cycle: np.ndarray  # float64
    span_ns: np.ndarray  # int64, globaltimer span of the SM's anchors
    source: np.ndarray  # str: FIT or where the borrowed rate came from

    def rows(self, sm: np.ndarray, launch: np.ndarray | int | None = None) -> np.ndarray:
        """The row converting clocks read on each (launch, SM); -1 where there is none (an SM whose
        units all failed). ``launch=None``: this table's only launch."""
        if launch is None:
            launch = int(self.launch[0]) if len(self.launch) else 0
        sm = np.asarray(sm, dtype=np.int64)
        launch = np.broadcast_to(np.asarray(launch, dtype=np.int64), sm.shape)
        if not len(self.sm):
            return np.full(sm.shape, -1, dtype=np.int64)
        radix = int(max(self.sm.max(), sm.max(initial=0))) + 1
        keys = self.launch * radix + self.sm
        wanted = launch * radix + sm
        row = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
        return np.where(keys[row] == wanted, row, -1)

    def covers(self, sm: np.ndarray, launch: np.ndarray | int | None = None) -> np.ndarray:
        """Which of these SMs have a conversion."""
        return self.rows(sm, launch) >= 0

    def to_ns(self, sm: np.ndarray, clock: np.ndarray, launch: np.ndarray | int | None = None) -> np.ndarray:
        """Absolute globaltimer nanoseconds (int64) of clocks read on the given (covered) SMs."""
        return self.convert(self.rows(sm, launch), clock)

    def convert(self, row: np.ndarray, clock: np.ndarray) -> np.ndarray:
        """``to_ns`` with the rows already looked up."""
        if len(row) and row.min() < 0:
            raise ValueError(
                "a clock was read on an SM with no (clock64, globaltimer) anchors in this launch"
            )
        cycles = (clock - self.clock_ref[row]).astype(np.float64)
        offset = np.rint(self.offset[row] + self.ns_per_cycle[row] * cycles).astype(np.int64)
        return self.time_ref[row] + offset

    def for_launch(self, launch: int) -> SmClocks:
        """The rows of one launch."""
        return self.for_launches(launch, launch + 1)

    def for_launches(self, first: int, past: int) -> SmClocks:
        """The rows of launches ``first`` to ``past - 1``."""
        a, b = np.searchsorted(self.launch, [first, past])
        return SmClocks(*(getattr(self, name)[a:b] for name in self.__dataclass_fields__))

    @property
    def mhz(self) -> float:
        """The SM clock (MHz) over this table's SMs with a trusted fit, else the rate they borrowed."""
        fitted = self.source == FIT
        rates = self.ns_per_cycle[fitted] if fitted.any() else self.ns_per_cycle
        return float(1e3 / np.median(rates)) if len(rates) else float("nan")

    @property
    def rate_source(self) -> str:
        return FIT if (self.source == FIT).any() else (str(self.source[0]) if len(self.source) else "none")

    def per_launch(self, launches: int) -> tuple[np.ndarray, np.ndarray]:
        """``mhz`` and ``rate_source`` of each launch 0 .. launches - 1."""
        fitted = self.source == FIT
        has_fit = np.bincount(self.launch[fitted], minlength=launches) > 0
        used = fitted | ~has_fit[self.launch]
        median = _group_median(self.launch[used], self.ns_per_cycle[used], launches)
        has_rows = np.bincount(self.launch, minlength=launches) > 0
        first = np.minimum(np.searchsorted(self.launch, np.arange(launches)), max(len(self.source) - 1, 0))
        borrowed = self.source[first] if len(self.source) else np.full(launches, "none")
        source = np.where(has_fit, FIT, np.where(has_rows, borrowed, "none"))
        return 1e3 / median, source.astype(object)


def fit_session(anchors: Sequence[ClockAnchors], min_span_ns: int = MIN_SPAN_NS) -> list[SmClocks]:
    """Per-SM conversions for every launch of a session, one table per launch, in the order given."""
    merged = ClockAnchors(
        sm=np.concatenate([a.sm for a in anchors]) if anchors else np.zeros(0, np.int64),
        clock=np.concatenate([a.clock for a in anchors]) if anchors else np.zeros(0, np.int64),
        time=np.concatenate([a.time for a in anchors]) if anchors else np.zeros(0, np.int64),
        launch=np.repeat(np.arange(len(anchors)), [len(a.sm) for a in anchors]),
    )
    clocks = fit_clocks(merged, len(anchors), min_span_ns)
    return [clocks.for_launch(launch) for launch in range(len(anchors))]


def fit_clocks(anchors: ClockAnchors, launches: int, min_span_ns: int = MIN_SPAN_NS) -> SmClocks:
    """Per-(launch, SM) conversions for a whole session (``launches`` launches)."""
    return clocks_from_lines(fit_lines(anchors), launches, min_span_ns)


def clocks_from_lines(fit: LineFit, launches: int, min_span_ns: int = MIN_SPAN_NS) -> SmClocks:
    """Per-(launch, SM) conversions from the lines of a whole session: where a line spans too little
    time to trust its rate, it borrows one (its launch's, else the session's, else the widest)."""
    finite = np.isfinite(fit.slope)
    trusted = (fit.span_ns >= min_span_ns) & finite
    launch_rate = _group_median(fit.launch[trusted], fit.slope[trusted], launches)
    session_rate = float(np.median(fit.slope[trusted])) if trusted.any() else None
    widest = float(fit.slope[finite][np.argmax(fit.span_ns[finite])]) if finite.any() else None
    borrowed = launch_rate[fit.launch]
    source = np.where(np.isfinite(borrowed), 1, 2 if session_rate is not None else 3)
    if session_rate is None:
        borrowed = np.full(len(fit.launch), np.nan if widest is None else widest)
    else:
        borrowed = np.where(np.isfinite(borrowed), borrowed, session_rate)
    if not trusted.all() and session_rate is None and widest is None:
        raise ValueError(
            "cannot infer the SM clock rate: no unit in the session spans any %globaltimer time, "
            "so there is no pair of (clock64, globaltimer) readings to measure it from"
        )
    slope = np.where(trusted, fit.slope, borrowed)
    return SmClocks(
        launch=fit.launch,
        sm=fit.sm,
        clock_ref=fit.clock_ref,
        time_ref=fit.time_ref,
        # The line goes through the anchors' mean point, whichever slope it has.
        offset=fit.mean_dy - slope * fit.mean_dx,
        ns_per_cycle=slope,
        span_ns=fit.span_ns,
        source=_SOURCES[np.where(trusted, 0, source)],
    )


@dataclass(frozen=True)
class LineFit:
    """Least-squares globaltimer-vs-clock lines, one per (launch, SM), sorted by launch, then SM.
    Lines of launches fitted apart join with ``concat``: each line needs only its own anchors."""

    launch: np.ndarray
    sm: np.ndarray
    clock_ref: np.ndarray
    time_ref: np.ndarray
    mean_dx: np.ndarray
    mean_dy: np.ndarray
    slope: np.ndarray  # nan where the anchors span no time
    span_ns: np.ndarray

    @classmethod
    def concat(cls, fits: Sequence[LineFit]) -> LineFit:
        """Lines of successive launches, in the order given."""
        if not fits:
            return fit_lines(ClockAnchors(*(np.zeros(0, np.int64) for _ in range(3))))
        return cls(*(np.concatenate([getattr(f, name) for f in fits]) for name in cls.__dataclass_fields__))


def fit_lines(anchors: ClockAnchors) -> LineFit:
    """Least-squares globaltimer-vs-clock line per (launch, SM), on coordinates relative to each
    group's earliest anchor."""
    group, first = groups(anchors.launch, anchors.sm)
    n = len(first)
    clock_ref = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(clock_ref, group, anchors.clock)
    time_ref = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(time_ref, group, anchors.time)
    time_max = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(time_max, group, anchors.time)
    dx = (anchors.clock - clock_ref[group]).astype(np.float64)
    dy = (anchors.time - time_ref[group]).astype(np.float64)
    count = np.bincount(group, minlength=n).astype(np.float64)
    mean_dx = np.bincount(group, dx, n) / np.maximum(count, 1)
    mean_dy = np.bincount(group, dy, n) / np.maximum(count, 1)
    cx, cy = dx - mean_dx[group], dy - mean_dy[group]
    sxx = np.bincount(group, cx * cx, n)
    sxy = np.bincount(group, cx * cy, n)
    span = time_max - time_ref
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where((sxx > 0) & (span > 0), sxy / sxx, np.nan)
    return LineFit(
        anchors.launch[first], anchors.sm[first], clock_ref, time_ref, mean_dx, mean_dy, slope, span
    )


def _group_median(group: np.ndarray, values: np.ndarray, groups_count: int) -> np.ndarray:
    """Median of ``values`` per group 0 .. groups_count - 1 (nan for an empty group), as np.median."""
    order = np.lexsort((values, group))
    values = values[order]
    count = np.bincount(group, minlength=groups_count)
    start = np.cumsum(count) - count
    low = np.minimum(start + (count - 1) // 2, max(len(values) - 1, 0))
    high = np.minimum(start + count // 2, max(len(values) - 1, 0))
    if not len(values):
        return np.full(groups_count, np.nan)
    return np.where(count > 0, (values[low] + values[high]) / 2, np.nan)
