"""Two sessions compared scope by scope: the scopes matched, each side's statistics and their
bootstrap intervals in one table, and the verdicts (the package's docstring says how)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd

from proton_ik.viewer.diff.bootstrap import percentile_interval
from proton_ik.viewer.diff.sample import ScopeKey, SessionSample, sample_session
from proton_ik.viewer.diff.stats import SideStats, measure
from proton_ik.viewer.trace import Trace

SLOWER, FASTER, NEGLIGIBLE, NO_CHANGE = "slower", "faster", "negligible", "no significant change"
ONLY_A, ONLY_B = "only in A", "only in B"
CLOCK_TOLERANCE = 0.01  # SM clocks of the two sessions further apart than this are reported
MIN_RESAMPLES = 100
_T = TypeVar("_T")
_COUNTS = ("line_a", "line_b", "count_a", "count_b", "ctas_a", "ctas_b")  # nullable: unpaired scopes

SCOPE_COLUMNS = (
    "kernel", "scope", "line_a", "line_b", "count_a", "count_b", "ctas_a", "ctas_b", "median_a_ns",
    "median_b_ns", "change_ns", "change_ns_low", "change_ns_high", "change", "change_low", "change_high",
    "share_a", "share_b", "share_change", "share_change_low", "share_change_high", "per_launch_a_ns",
    "per_launch_b_ns", "per_launch_change_ns", "explains", "verdict",
)  # fmt: skip
KERNEL_COLUMNS = (
    "kernel", "launches_a", "launches_b", "span_a_ns", "span_b_ns", "span_change", "warp_a_ns", "warp_b_ns",
    "warp_change", "warp_change_low", "warp_change_high",
)  # fmt: skip


@dataclass(frozen=True)
class DiffOptions:
    """How two sessions are compared (see the module docstring)."""

    confidence: float = 0.95
    resamples: int = 1000
    seed: int = 0
    min_change: float = 0.0  # a significant change smaller than this fraction of A's median is "negligible"
    kernel: str | None = None  # compare this kernel only
    ignore_lines: bool = False  # pair scopes by kernel and name, wherever their lines are

    def __post_init__(self) -> None:
        if not 0.5 <= self.confidence < 1:
            raise ValueError(f"confidence={self.confidence!r}: a level in [0.5, 1), e.g. 0.95 (the default)")
        if isinstance(self.resamples, bool) or not isinstance(self.resamples, int):
            raise ValueError(f"resamples={self.resamples!r}: a whole number, e.g. 1000 (the default)")
        if self.resamples < MIN_RESAMPLES:
            raise ValueError(
                f"resamples={self.resamples}: a percentile interval needs at least {MIN_RESAMPLES} "
                "resamples; 1000 (the default) gives stable 95% intervals"
            )
        if not self.min_change >= 0:
            raise ValueError(f"min_change={self.min_change!r}: a fraction >= 0, e.g. 0.01 for 1%")


def diff(
    a: str | Path | Trace,
    b: str | Path | Trace,
    *,
    confidence: float = DiffOptions.confidence,
    resamples: int = DiffOptions.resamples,
    seed: int = DiffOptions.seed,
    min_change: float = DiffOptions.min_change,
    kernel: str | None = DiffOptions.kernel,
    ignore_lines: bool = DiffOptions.ignore_lines,
) -> pd.DataFrame:
    """Compare session B with session A (files, or loaded ``Trace``s): one row per scope, with the
    change of its median duration and of its share of kernel time, their ``confidence``
    intervals from ``resamples`` CTA resamples (seeded by ``seed``), and a verdict.

    ``frame.attrs`` holds ``kernels`` (rows of KERNEL_COLUMNS: each kernel's change of span and
    warp time per launch), ``sessions`` (label, launches, records and SM clock of A and B),
    ``clocks_differ`` and ``options``; ``text.format_diff(frame)`` is the report.
    """
    return diff_sessions(a, b, DiffOptions(confidence, resamples, seed, min_change, kernel, ignore_lines))


def diff_sessions(a: str | Path | Trace, b: str | Path | Trace, options: DiffOptions) -> pd.DataFrame:
    """``diff`` with its options as one value: the two sessions are read at once, in two threads."""
    return compare(*_in_pair(sample_session, (a,), (b,)), options)


def compare(a: SessionSample, b: SessionSample, options: DiffOptions | None = None) -> pd.DataFrame:
    """``diff`` of two sessions already reduced to samples."""
    options = options or DiffOptions()
    kernels = _kernels(a, b, options.kernel)
    groups_a, groups_b = _groups(a, kernels, options), _groups(b, kernels, options)
    paired = sorted(set(groups_a) & set(groups_b), key=_order)
    if not paired:
        raise ValueError(_nothing_in_common(a, b, groups_a, groups_b, options))
    only_a = sorted(set(groups_a) - set(groups_b), key=_order)
    only_b = sorted(set(groups_b) - set(groups_a), key=_order)
    seeds = np.random.SeedSequence(options.seed).spawn(2)
    side_a, side_b = _in_pair(
        measure,
        (a, [groups_a[k] for k in [*paired, *only_a]], len(paired), kernels, options.resamples, seeds[0]),
        (b, [groups_b[k] for k in [*paired, *only_b]], len(paired), kernels, options.resamples, seeds[1]),
    )
    kernel_rows = [_kernel_row(name, side_a, side_b, options) for name in kernels]
    warp_change = {row["kernel"]: row["warp_b_ns"] - row["warp_a_ns"] for row in kernel_rows}
    rows = [_paired_row(key, i, side_a, side_b, options, warp_change) for i, key in enumerate(paired)]
    rows += [_single_row(key, len(paired) + i, side_a, "a") for i, key in enumerate(only_a)]
    rows += [_single_row(key, len(paired) + i, side_b, "b") for i, key in enumerate(only_b)]
    frame = pd.DataFrame(rows, columns=list(SCOPE_COLUMNS)).astype(dict.fromkeys(_COUNTS, "Int64"))
    line = frame["line_a"].fillna(frame["line_b"]).fillna(np.iinfo(np.int64).max)
    order = np.lexsort((frame["scope"].to_numpy(str), line.to_numpy(np.int64), frame["kernel"].to_numpy(str)))
    frame = frame.iloc[order].reset_index(drop=True)
    frame.attrs.update(
        kernels=kernel_rows,
        sessions={"a": _session_info(a), "b": _session_info(b)},
        clocks_differ=bool(abs(a.mhz - b.mhz) > CLOCK_TOLERANCE * min(a.mhz, b.mhz)),
        options=asdict(options),
    )
    return frame


def _in_pair(function: Callable[..., _T], a: tuple, b: tuple) -> tuple[_T, _T]:
    """``function`` called on A's arguments and on B's, in two threads: numpy leaves the
    interpreter lock in its long loops (decoding, drawing, sorting), so two cores take half the
    time. An error from A's call is raised first."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        first, second = pool.submit(function, *a), pool.submit(function, *b)
        return first.result(), second.result()


def kernel_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The kernel rows of a ``diff`` frame as a DataFrame."""
    return pd.DataFrame(frame.attrs.get("kernels", []), columns=list(KERNEL_COLUMNS))


def verdict(low: float, high: float, change: float, min_change: float) -> str:
    """The verdict on a change whose interval is [low, high] (see the module docstring)."""
    if not (low > 0 or high < 0):
        return NO_CHANGE
    if abs(change) < min_change:
        return NEGLIGIBLE
    return SLOWER if low > 0 else FASTER


def _kernels(a: SessionSample, b: SessionSample, wanted: str | None) -> list[str]:
    """The kernels to compare: all of either session's, or the one asked for, which must be there."""
    every = sorted({*a.kernels, *b.kernels})
    if wanted is None:
        return every
    if wanted not in every:
        raise ValueError(
            f"kernel {wanted!r} is in neither session; A ({a.label}) has {_names(a.kernels)}, "
            f"B ({b.label}) has {_names(b.kernels)}"
        )
    return [wanted]


def _groups(sample: SessionSample, kernels: Sequence[str], options: DiffOptions) -> dict[ScopeKey, list[int]]:
    """The session's scopes of ``kernels`` as the diff pairs them, each with its keys' numbers."""
    groups: dict[ScopeKey, list[int]] = {}
    for number, key in enumerate(sample.keys):
        if key.kernel in kernels:
            groups.setdefault(key._replace(line=None) if options.ignore_lines else key, []).append(number)
    return groups


def _order(key: ScopeKey) -> tuple:
    return (key.kernel, key.line is None, key.line or 0, key.scope)


def _names(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "no kernels"


def _nothing_in_common(
    a: SessionSample,
    b: SessionSample,
    groups_a: dict[ScopeKey, list[int]],
    groups_b: dict[ScopeKey, list[int]],
    options: DiffOptions,
) -> str:
    def listed(sample: SessionSample, groups: dict[ScopeKey, list[int]]) -> str:
        if not groups:
            return f"{sample.label} has no scope events" + (
                f" (kernels: {_names(sample.kernels)})" if sample.kernels else ""
            )
        by_kernel: dict[str, list[str]] = {}
        for number in (n for numbers in groups.values() for n in numbers):
            key = sample.keys[number]
            by_kernel.setdefault(key.kernel, []).append(
                key.scope + (f" (line {key.line})" if key.line else "")
            )
        return f"{sample.label} has " + "; ".join(
            f"{k}: {', '.join(s)}" for k, s in sorted(by_kernel.items())
        )

    text = (
        "no scope in common: scopes pair by kernel, name"
        + ("" if options.ignore_lines else " and source line")
        + f". A: {listed(a, groups_a)}. B: {listed(b, groups_b)}"
    )
    named_a = {(k.kernel, k.scope) for k in groups_a}
    if not options.ignore_lines and named_a & {(k.kernel, k.scope) for k in groups_b}:
        text += ". Some scopes moved lines: pass ignore_lines=True (--ignore-lines) to pair them by name"
    return text


def _paired_row(
    key: ScopeKey, i: int, a: SideStats, b: SideStats, options: DiffOptions, warp_change: dict[str, float]
) -> dict:
    change_ns = b.median[i] - a.median[i]
    low_ns, high_ns = percentile_interval(
        b.resampled_median[:, i] - a.resampled_median[:, i], options.confidence
    )
    share_low, share_high = percentile_interval(
        b.resampled_share[:, i] - a.resampled_share[:, i], options.confidence
    )
    change = _relative(change_ns, a.median[i])
    per_launch_change = b.per_launch[i] - a.per_launch[i]
    kernel_change = warp_change.get(key.kernel, np.nan)
    return {
        "kernel": key.kernel,
        "scope": key.scope,
        "line_a": a.lines[i],
        "line_b": b.lines[i],
        "count_a": int(a.count[i]),
        "count_b": int(b.count[i]),
        "ctas_a": int(a.ctas[i]),
        "ctas_b": int(b.ctas[i]),
        "median_a_ns": a.median[i],
        "median_b_ns": b.median[i],
        "change_ns": change_ns,
        "change_ns_low": low_ns,
        "change_ns_high": high_ns,
        "change": change,
        "change_low": _relative(low_ns, a.median[i]),
        "change_high": _relative(high_ns, a.median[i]),
        "share_a": a.share[i],
        "share_b": b.share[i],
        "share_change": b.share[i] - a.share[i],
        "share_change_low": share_low,
        "share_change_high": share_high,
        "per_launch_a_ns": a.per_launch[i],
        "per_launch_b_ns": b.per_launch[i],
        "per_launch_change_ns": per_launch_change,
        "explains": per_launch_change / kernel_change if kernel_change else np.nan,
        "verdict": verdict(low_ns, high_ns, change, options.min_change),
    }


def _single_row(key: ScopeKey, i: int, side: SideStats, which: str) -> dict:
    """A scope found in one session only: its own values, the other session's left empty."""
    values = {
        f"line_{which}": side.lines[i],
        f"count_{which}": int(side.count[i]),
        f"ctas_{which}": int(side.ctas[i]),
        f"median_{which}_ns": side.median[i],
        f"share_{which}": side.share[i],
        f"per_launch_{which}_ns": side.per_launch[i],
    }
    return {"kernel": key.kernel, "scope": key.scope, **values, "verdict": ONLY_A if which == "a" else ONLY_B}


def _kernel_row(name: str, a: SideStats, b: SideStats, options: DiffOptions) -> dict:
    i = a.kernels.index(name)
    low, high = percentile_interval(b.resampled_warp[:, i] - a.resampled_warp[:, i], options.confidence)
    return {
        "kernel": name,
        "launches_a": int(a.launches[i]),
        "launches_b": int(b.launches[i]),
        "span_a_ns": a.span[i],
        "span_b_ns": b.span[i],
        "span_change": _relative(b.span[i] - a.span[i], a.span[i]),
        "warp_a_ns": a.warp[i],
        "warp_b_ns": b.warp[i],
        "warp_change": _relative(b.warp[i] - a.warp[i], a.warp[i]),
        "warp_change_low": _relative(low, a.warp[i]),
        "warp_change_high": _relative(high, a.warp[i]),
    }


def _relative(change: float, base: float) -> float:
    return float(change / base) if base and np.isfinite(base) else float("nan")


def _session_info(sample: SessionSample) -> dict:
    return {
        "label": sample.label,
        "launches": len(sample.launch_kernel),
        "records": sample.records,
        "mhz": sample.mhz,
    }
