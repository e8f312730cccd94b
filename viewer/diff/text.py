"""A ``diff`` frame as text for a terminal: what ``proton-ik diff`` prints.

Per kernel: its change of span and warp time per launch, a table of its scopes (medians, the
change and its interval, shares, verdict), and the scopes whose time per launch changed most,
with the part of the kernel's change of warp time each one accounts for (a nested scope's time
counts in its enclosing scope's too, so the parts may add up to more than the whole).
"""

from __future__ import annotations

import pandas as pd

from proton_ik.viewer.diff.compare import ONLY_A, ONLY_B, kernel_table

EXPLAINING = 3  # scopes named as accounting for a kernel's change


def format_diff(frame: pd.DataFrame) -> str:
    """The report of a ``diff`` frame (it reads ``frame.attrs``, which ``diff`` fills)."""
    options, sessions = frame.attrs["options"], frame.attrs["sessions"]
    level = f"{options['confidence'] * 100:g}%"
    lines = [_session_line("A", sessions["a"]), _session_line("B", sessions["b"])]
    method = (
        f"durations in ns; {level} intervals from {options['resamples']:,} resamples of the CTAs of "
        f"each launch (seed {options['seed']})"
    )
    if options["min_change"]:
        method += f"; significant changes under {options['min_change']:.1%} of A's median are negligible"
    lines.append(method)
    mhz_a, mhz_b = sessions["a"]["mhz"], sessions["b"]["mhz"]
    if frame.attrs["clocks_differ"]:
        lines.append(
            f"note: the SM clocks differ by {abs(mhz_b / mhz_a - 1):.1%} (A {mhz_a:,.0f} MHz, B "
            f"{mhz_b:,.0f} MHz); durations compare in ns, each session's cycles converted with its "
            "own fitted clocks, so cycle counts would not compare"
        )
    for kernel in kernel_table(frame).itertuples():
        lines.append("")
        lines.append(_kernel_line(kernel, level))
        scopes = frame[frame["kernel"] == kernel.kernel]
        if len(scopes):
            lines.extend("  " + line for line in _scope_table(scopes, level).splitlines())
        lines.extend("  " + line for line in _explained(scopes, kernel))
        lines.extend("  " + line for line in _moved(scopes))
    return "\n".join(lines)


def _session_line(name: str, info: dict) -> str:
    return (
        f"{name}: {info['label']} ({info['launches']} launch(es), {info['records']:,} records, "
        f"SM clock {_number(info['mhz'])} MHz)"
    )


def _kernel_line(kernel, level: str) -> str:
    if not kernel.launches_a or not kernel.launches_b:
        where = "A" if kernel.launches_a else "B"
        return f"{kernel.kernel}: only in {where} ({max(kernel.launches_a, kernel.launches_b)} launch(es))"
    return (
        f"{kernel.kernel}: {kernel.launches_a} launch(es) in A, {kernel.launches_b} in B; span per launch "
        f"{_number(kernel.span_a_ns)} -> {_number(kernel.span_b_ns)} ns ({_percent(kernel.span_change)}); "
        f"warp time per launch {_number(kernel.warp_a_ns)} -> {_number(kernel.warp_b_ns)} ns "
        f"({_percent(kernel.warp_change)}, {level} CI {_interval(kernel.warp_change_low, kernel.warp_change_high)})"
    )


def _scope_table(scopes: pd.DataFrame, level: str) -> str:
    shown = pd.DataFrame(
        {
            "scope": scopes["scope"],
            "line": [_lines(a, b) for a, b in zip(scopes["line_a"], scopes["line_b"], strict=True)],
            "median A ns": scopes["median_a_ns"].map(_number),
            "median B ns": scopes["median_b_ns"].map(_number),
            "change": scopes["change"].map(_percent),
            f"{level} CI": [
                _interval(low, high)
                for low, high in zip(scopes["change_low"], scopes["change_high"], strict=True)
            ],
            "share A": scopes["share_a"].map(_share),
            "share B": scopes["share_b"].map(_share),
            "verdict": scopes["verdict"],
        }
    )
    return shown.to_string(index=False)


def _explained(scopes: pd.DataFrame, kernel) -> list[str]:
    """The scopes whose time per launch changed most and, where the kernel's warp time per
    launch changed significantly, the part of that change each accounts for."""
    change = kernel.warp_b_ns - kernel.warp_a_ns
    if pd.isna(change):
        return []
    significant = kernel.warp_change_low > 0 or kernel.warp_change_high < 0
    moved = scopes[~scopes["verdict"].isin([ONLY_A, ONLY_B]) & (scopes["per_launch_change_ns"].abs() > 0)]
    top = moved.reindex(moved["per_launch_change_ns"].abs().sort_values(ascending=False).index)[:EXPLAINING]
    parts = [
        f"{row.scope} (line {_lines(row.line_a, row.line_b)}) {_number(row.per_launch_change_ns, signed=True)} ns"
        + (f" ({row.explains:.0%})" if significant and pd.notna(row.explains) else "")
        for row in top.itertuples()
    ]
    text = f"warp time per launch {'changed' if significant else 'did not change significantly'}"
    text += f" ({_number(change, signed=True)} ns)"
    return [text + (f"; the scopes whose time per launch changed most: {', '.join(parts)}" if parts else "")]


def _moved(scopes: pd.DataFrame) -> list[str]:
    """A hint for scopes found in both sessions under one name at different lines."""
    only_a = scopes[scopes["verdict"] == ONLY_A].drop_duplicates("scope").set_index("scope")["line_a"]
    only_b = scopes[scopes["verdict"] == ONLY_B].drop_duplicates("scope").set_index("scope")["line_b"]
    return [
        f"scope {name} is at line {_lines(only_a[name], None)} in A and {_lines(only_b[name], None)} in B, "
        "so it is not paired: pass --ignore-lines (ignore_lines=True) to pair scopes by name"
        for name in only_a.index.intersection(only_b.index)
    ]


def _lines(a, b) -> str:
    a, b = (None if pd.isna(v) else int(v) for v in (a, b))
    if a is None or b is None or a == b:
        return "-" if a is None and b is None else str(a if a is not None else b)
    return f"{a}->{b}"


def _number(value: float, signed: bool = False) -> str:
    return "-" if pd.isna(value) else (f"{value:+,.0f}" if signed else f"{value:,.0f}")


def _percent(value: float) -> str:
    return "-" if pd.isna(value) else f"{value:+.1%}"


def _share(value: float) -> str:
    return "-" if pd.isna(value) else f"{value:.1%}"


def _interval(low: float, high: float) -> str:
    return "-" if pd.isna(low) or pd.isna(high) else f"[{low:+.1%}, {high:+.1%}]"
