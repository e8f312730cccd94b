"""Cycles to nanoseconds, from the clocks each unit read at its start and end. No clock rate is assumed.

Every unit header holds (%clock64, %globaltimer) at the unit's start and, once finished, at its
end. %clock64 counts per SM, so per (launch, SM) a least-squares line
``globaltimer = a + b * clock64`` through all those pairs gives the SM's real clock rate and
its offset. %globaltimer ticks in steps of about 32 ns, so a rate is only trusted over a span of
``MIN_SPAN_NS``; a shorter SM borrows a rate (the launch's median over trusted SMs, else the
session's, else that of the widest span there is) and fits only its offset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_SPAN_NS = 20_000

FIT = "fit"
LAUNCH_MEDIAN = "launch median"
SESSION_MEDIAN = "session median"
WIDEST_SPAN = "widest span"


@dataclass(frozen=True)
class ClockAnchors:
    """The (clock64, globaltimer) pairs of one launch, with the SM each was read on."""

    sm: np.ndarray  # int64
    clock: np.ndarray  # int64
    time: np.ndarray  # int64, ns


@dataclass(frozen=True)
class SmClocks:
    """Per-SM conversions of one launch: ``ns = time_ref + round(offset + ns_per_cycle * (clock - clock_ref))``."""

    sm: np.ndarray  # int64, sorted
    clock_ref: np.ndarray  # int64
    time_ref: np.ndarray  # int64
    offset: np.ndarray  # float64, ns
    ns_per_cycle: np.ndarray  # float64
    span_ns: np.ndarray  # int64, globaltimer span of the SM's anchors
    source: np.ndarray  # str: FIT or where the borrowed rate came from

    def covers(self, sm: np.ndarray) -> np.ndarray:
        """Which of these SMs have a conversion (an SM whose units all failed has none)."""
        row = np.minimum(np.searchsorted(self.sm, sm), max(len(self.sm) - 1, 0))
        return (self.sm[row] == sm) if len(self.sm) else np.zeros(len(sm), dtype=bool)

    def to_ns(self, sm: np.ndarray, clock: np.ndarray) -> np.ndarray:
        """Absolute globaltimer nanoseconds (int64) of clocks read on the given (covered) SMs."""
        if not self.covers(sm).all():
            raise ValueError(
                "a clock was read on an SM with no (clock64, globaltimer) anchors in this launch"
            )
        row = np.searchsorted(self.sm, sm)
        cycles = (clock - self.clock_ref[row]).astype(np.float64)
        offset = np.rint(self.offset[row] + self.ns_per_cycle[row] * cycles).astype(np.int64)
        return self.time_ref[row] + offset

    @property
    def mhz(self) -> float:
        """The SM clock (MHz) over this launch's SMs with a trusted fit, else the rate it borrowed."""
        fitted = self.source == FIT
        rates = self.ns_per_cycle[fitted] if fitted.any() else self.ns_per_cycle
        return float(1e3 / np.median(rates)) if len(rates) else float("nan")

    @property
    def rate_source(self) -> str:
        return FIT if (self.source == FIT).any() else (str(self.source[0]) if len(self.source) else "none")


@dataclass(frozen=True)
class _LineFit:
    sm: np.ndarray
    clock_ref: np.ndarray
    time_ref: np.ndarray
    mean_dx: np.ndarray
    mean_dy: np.ndarray
    slope: np.ndarray  # nan where the anchors span no time
    span_ns: np.ndarray


def fit_session(anchors: list[ClockAnchors], min_span_ns: int = MIN_SPAN_NS) -> list[SmClocks]:
    """Per-SM conversions for every launch of a session, in the order given."""
    fits = [_fit_lines(a) for a in anchors]
    trusted = [fit.slope[(fit.span_ns >= min_span_ns) & np.isfinite(fit.slope)] for fit in fits]
    session_rates = np.concatenate(trusted) if trusted else np.zeros(0)
    session_rate = float(np.median(session_rates)) if session_rates.size else None
    widest = _widest_span_rate(fits)
    result = []
    for fit, launch_rates in zip(fits, trusted, strict=True):
        if launch_rates.size:
            fallback, source = float(np.median(launch_rates)), LAUNCH_MEDIAN
        elif session_rate is not None:
            fallback, source = session_rate, SESSION_MEDIAN
        else:
            fallback, source = widest, WIDEST_SPAN
        own = (fit.span_ns >= min_span_ns) & np.isfinite(fit.slope)
        if not own.all() and fallback is None and len(fit.sm):
            raise ValueError(
                "cannot infer the SM clock rate: no unit in the session spans any %globaltimer time, "
                "so there is no pair of (clock64, globaltimer) readings to measure it from"
            )
        slope = np.where(own, fit.slope, fallback if fallback is not None else np.nan)
        result.append(
            SmClocks(
                sm=fit.sm,
                clock_ref=fit.clock_ref,
                time_ref=fit.time_ref,
                # The line goes through the anchors' mean point, whichever slope it has.
                offset=fit.mean_dy - slope * fit.mean_dx,
                ns_per_cycle=slope,
                span_ns=fit.span_ns,
                source=np.where(own, FIT, source),
            )
        )
    return result


def _fit_lines(anchors: ClockAnchors) -> _LineFit:
    """Least-squares globaltimer-vs-clock line per SM, on coordinates relative to each SM's first anchor."""
    sm, group = np.unique(anchors.sm, return_inverse=True)
    n = len(sm)
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
    return _LineFit(sm, clock_ref, time_ref, mean_dx, mean_dy, slope, span)


def _widest_span_rate(fits: list[_LineFit]) -> float | None:
    best, rate = 0, None
    for fit in fits:
        usable = np.flatnonzero(np.isfinite(fit.slope))
        if usable.size:
            i = usable[np.argmax(fit.span_ns[usable])]
            if fit.span_ns[i] > best:
                best, rate = int(fit.span_ns[i]), float(fit.slope[i])
    return rate
