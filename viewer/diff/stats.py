"""One session's side of a diff: each compared scope's median, share and time per launch, and
each kernel's warp time and span per launch, with their values over CTA resamples (``bootstrap``).

Only the CTAs of the kernels compared are resampled. Per-CTA columns (each paired scope's events
and events under its median band, its summed durations, each kernel's warp time) form one table,
so a block of resamples is one matrix product; the medians then come from the bands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from proton_ik.viewer.diff.bootstrap import MedianBand, block_rows, resample_counts
from proton_ik.viewer.diff.sample import SessionSample


@dataclass(frozen=True)
class SideStats:
    """Per scope (as ``measure`` was given them) and per kernel: point values; for the first
    ``paired`` scopes and every kernel, their values over resamples, one row per resample."""

    lines: list[int | None]  # each scope's source line (the lowest, if its keys have several)
    count: np.ndarray  # events
    ctas: np.ndarray  # CTAs with events of the scope
    median: np.ndarray  # ns
    share: np.ndarray  # of its kernel's warp time
    per_launch: np.ndarray  # ns of the scope per launch of its kernel
    kernels: list[str]
    launches: np.ndarray  # per kernel
    warp: np.ndarray  # per kernel: warp time per launch, ns
    span: np.ndarray  # per kernel: the median over its launches of first unit start to last unit end
    resampled_median: np.ndarray  # (resamples, paired)
    resampled_share: np.ndarray  # (resamples, paired)
    resampled_warp: np.ndarray  # (resamples, kernels)


def measure(
    sample: SessionSample,
    groups: Sequence[Sequence[int]],
    paired: int,
    kernels: list[str],
    resamples: int,
    seed: np.random.SeedSequence,
) -> SideStats:
    """The statistics of the scopes made of ``groups`` (each a list of ``sample.keys`` numbers),
    the first ``paired`` of them resampled ``resamples`` times, and of ``kernels``."""
    launch_kernel = np.array(
        [kernels.index(k) if k in kernels else -1 for k in sample.launch_kernel], np.int64
    )
    cta_kernel = launch_kernel[sample.cta_launch] if len(launch_kernel) else np.zeros(0, np.int64)
    kept = cta_kernel >= 0
    ctas = int(kept.sum())
    renumber = np.cumsum(kept) - 1
    scope_of_key = np.full(len(sample.keys), -1, dtype=np.int64)
    for scope, numbers in enumerate(groups):
        scope_of_key[list(numbers)] = scope
    event_scope = scope_of_key[sample.event_key] if len(sample.keys) else np.zeros(0, np.int64)
    # A stable sort of 16-bit keys is a radix sort: one pass over the events.
    order = np.argsort(event_scope.astype(np.int16 if len(groups) < 1 << 15 else np.int64), kind="stable")
    bounds = np.cumsum(np.bincount(event_scope + 1, minlength=len(groups) + 1))
    bands, times = [], []
    for scope in range(len(groups)):
        events = order[bounds[scope] : bounds[scope + 1]]
        cta = renumber[sample.event_cta[events]]
        bands.append(MedianBand.build(sample.event_ns[events], cta, ctas))
        times.append(np.bincount(cta, sample.event_ns[events], minlength=ctas))
    warp = [np.where(cta_kernel[kept] == k, sample.cta_warp_ns[kept], 0.0) for k in range(len(kernels))]
    launches = np.array([sample.launches_of(k) for k in kernels], dtype=np.float64)
    scope_kernel = np.array([kernels.index(sample.keys[g[0]].kernel) for g in groups], dtype=np.int64)
    time_sum, warp_sum = np.array([t.sum() for t in times]), np.array([w.sum() for w in warp])
    strata = np.bincount(sample.cta_launch[kept], minlength=len(sample.launch_kernel))
    spans = [sample.launch_span_ns[[k == name for k in sample.launch_kernel]] for name in kernels]
    return SideStats(
        lines=[_line(sample, numbers) for numbers in groups],
        count=np.array([band.count for band in bands]),
        ctas=np.array([int((band.size > 0).sum()) for band in bands]),
        median=np.array([band.median for band in bands]),
        share=ratio(time_sum, warp_sum[scope_kernel]),
        per_launch=ratio(time_sum, launches[scope_kernel]),
        kernels=kernels,
        launches=launches,
        warp=ratio(warp_sum, launches),
        span=np.array([np.nanmedian(s) if np.isfinite(s).any() else np.nan for s in spans]),
        **_resampled(
            bands[:paired], times[:paired], warp, scope_kernel[:paired], launches, strata, resamples, seed
        ),
    )


def _resampled(
    bands: list[MedianBand],
    times: list[np.ndarray],
    warp: list[np.ndarray],
    scope_kernel: np.ndarray,
    launches: np.ndarray,
    strata: np.ndarray,
    resamples: int,
    seed: np.random.SeedSequence,
) -> dict[str, np.ndarray]:
    """The paired scopes' medians and shares, and the kernels' warp time per launch, resampled."""
    rng = np.random.default_rng(seed)
    paired, ctas = len(bands), int(strata.sum())
    columns = [*(band.size for band in bands), *(band.below for band in bands), *times, *warp]
    table = np.column_stack(columns) if ctas else np.zeros((0, len(columns)))
    median, share = np.full((resamples, paired), np.nan), np.full((resamples, paired), np.nan)
    warp_time = np.full((resamples, len(launches)), np.nan)
    step = block_rows(ctas, resamples)
    for start in range(0, resamples if ctas else 0, step):
        rows = slice(start, min(start + step, resamples))
        counts = resample_counts(rng, strata, rows.stop - start)
        sums = counts @ table
        for scope, band in enumerate(bands):
            median[rows, scope] = band.medians(counts, sums[:, scope], sums[:, paired + scope])
        kernel_time = sums[:, 3 * paired :]
        share[rows] = ratio(sums[:, 2 * paired : 3 * paired], kernel_time[:, scope_kernel])
        warp_time[rows] = ratio(kernel_time, launches)
    return {"resampled_median": median, "resampled_share": share, "resampled_warp": warp_time}


def _line(sample: SessionSample, numbers: Sequence[int]) -> int | None:
    """The scope's source line: the lowest of its keys' (with ``ignore_lines``, it may have several)."""
    lines = [line for line in (sample.keys[n].line for n in numbers) if line is not None]
    return min(lines) if lines else None


def ratio(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """top / bottom, NaN where bottom is not positive."""
    bottom = np.broadcast_to(bottom, np.shape(top))
    out = np.full(np.shape(top), np.nan)
    np.divide(top, bottom, out=out, where=bottom > 0)
    return out
