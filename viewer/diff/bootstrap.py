"""A cluster bootstrap over CTAs: arrays in, resampled statistics out.

The records of one CTA share its SM, its neighbours on the SM and its place in the wave, so they
are not independent draws; the CTA is. A resample draws CTAs with replacement, each with all of
its records, within each launch (a stratum): a launch keeps its number of CTAs in every resample,
as the launches themselves are what the program chose to run, not a sample.

A resample is a row of counts, how often each CTA was drawn, and every statistic is weighted by
them. Per-CTA sums (records, durations, warp time) resample as one matrix product of the counts
with a table of per-CTA columns. The median of the resampled records is the weighted median of
the records, each weighing its CTA's count: exactly the median of the records of the drawn CTAs,
repeats included. Only the records near the median are looked at per resample (``MedianBand``);
those below enter as a per-CTA count, one more column of the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

# The band around the median spans this many standard deviations of the resampled median's rank
# each way (plus BAND_MARGIN records), as ``MedianBand.build`` bounds them from above: a resample
# whose median falls outside it (under one in 10**4) is computed from all of the records instead,
# so the band costs time, never exactness.
BAND_SDS = 4.0
BAND_MARGIN = 32
BLOCK_ELEMENTS = 1 << 22  # counts drawn at once: rows x CTAs, about 32 MB of float64


def resample_counts(rng: np.random.Generator, sizes: np.ndarray, rows: int) -> np.ndarray:
    """``rows`` resamples of CTAs numbered stratum after stratum, ``sizes[i]`` of them in stratum
    ``i``: float64 (rows, sum(sizes)), how often each CTA was drawn; each stratum's row sums to
    its size. Strata of equal size are drawn together."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    offsets = np.cumsum(sizes) - sizes
    drawn = np.empty((rows, total), dtype=np.int64)
    column = 0
    for size in np.unique(sizes[sizes > 0]).tolist():
        strata = np.flatnonzero(sizes == size)
        local = rng.integers(0, size, size=(rows, len(strata), size))
        local += offsets[strata][None, :, None]
        drawn[:, column : column + local[0].size] = local.reshape(rows, -1)
        column += local[0].size
    counts = np.empty((rows, total), dtype=np.float64)
    for row in range(rows):
        counts[row] = np.bincount(drawn[row], minlength=total)
    return counts


def block_rows(ctas: int, resamples: int) -> int:
    """Resamples drawn per block, so that a block's counts stay about BLOCK_ELEMENTS."""
    return max(1, min(resamples, BLOCK_ELEMENTS // max(ctas, 1)))


def percentile_interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile bootstrap interval of ``samples`` (resampled statistics); NaN ones, from
    resamples where the statistic is undefined, are left out."""
    finite = samples[np.isfinite(samples)]
    if not len(finite):
        return float("nan"), float("nan")
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(finite, [tail, 1.0 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class MedianBand:
    """A statistic's records (``values`` and their CTAs, as given) and, sorted, those ranked
    ``low`` to ``low + len(band_values)`` around their median, where resampled medians fall:
    ``below`` counts, per CTA, the records ranked under ``low``. Records are ranked by value,
    ties in an arbitrary but fixed order (a median of tied values is theirs in any order)."""

    values: np.ndarray
    cta: np.ndarray
    low: int
    band_values: np.ndarray
    band_cta: np.ndarray
    size: np.ndarray  # per CTA: its records
    below: np.ndarray  # per CTA: its records ranked under low

    @classmethod
    def build(cls, values: np.ndarray, cta: np.ndarray, ctas: int) -> MedianBand:
        """The band of records with durations ``values`` in CTAs ``cta``, ``ctas`` CTAs in all.

        Its width comes from the spread of the resampled median's rank: the number of resampled
        records ranked up to the median moves by the sum, over the drawn CTAs, of each CTA's
        records ranked up to the median less half its records, whose standard deviation is at
        most the root of the sum of their squares. Only the band is sorted: the rest is split
        off around it (``argpartition``), in time proportional to the records.
        """
        n = len(values)
        size = np.bincount(cta, minlength=ctas).astype(np.float64)
        if not n:
            return cls(values, cta, 0, values, cta, size, size.copy())
        middle = (n - 1) // 2
        under = np.bincount(cta[np.argpartition(values, middle)[: middle + 1]], minlength=ctas)
        reach = int(np.ceil(BAND_SDS * np.sqrt(np.sum((under - size / 2) ** 2)))) + BAND_MARGIN
        low, high = max(0, middle - reach), min(n, n // 2 + 1 + reach)
        order = np.argpartition(values, sorted({low, high - 1}))
        band = order[low:high][np.argsort(values[order[low:high]], kind="stable")]
        below = np.bincount(cta[order[:low]], minlength=ctas).astype(np.float64)
        return cls(values, cta, low, values[band], cta[band], size, below)

    @property
    def count(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        """The median of all of the records."""
        n = len(self.values)
        if not n:
            return float("nan")
        return (
            float(self.band_values[(n - 1) // 2 - self.low]) + float(self.band_values[n // 2 - self.low])
        ) / 2

    @cached_property
    def _ranked(self) -> tuple[np.ndarray, np.ndarray]:
        """Every record's value and CTA by rank, for a resample whose median is outside the band."""
        order = np.argsort(self.values, kind="stable")
        return self.values[order], self.cta[order]

    def medians(self, counts: np.ndarray, total: np.ndarray, below: np.ndarray) -> np.ndarray:
        """The median of each resample's records, NaN where it drew none of them.

        ``counts``: (rows, CTAs) from ``resample_counts``; ``total`` and ``below``: each row's
        counts times ``size`` and ``below``. The median is the mean of the lower and the upper
        weighted medians, the first records at which the weights summed in rank order reach half
        the total and pass it: with every weight 1, the usual median.
        """
        half = total / 2
        median = np.full(len(counts), np.nan)
        inside = np.cumsum(counts[:, self.band_cta], axis=1)
        inside += below[:, None]
        found = (below < half) & (inside[:, -1] > half) if inside.shape[1] else np.zeros(len(half), bool)
        rows = np.flatnonzero(found)
        if len(rows):
            lower = (inside[rows] < half[rows, None]).sum(axis=1)
            upper = (inside[rows] <= half[rows, None]).sum(axis=1)
            median[rows] = (self.band_values[lower].astype(np.float64) + self.band_values[upper]) / 2
        for row in np.flatnonzero(~found & (total > 0)).tolist():
            values, cta = self._ranked
            summed = np.cumsum(counts[row, cta])
            lower = int(np.searchsorted(summed, half[row], side="left"))
            upper = int(np.searchsorted(summed, half[row], side="right"))
            median[row] = (float(values[lower]) + float(values[upper])) / 2
        return median
