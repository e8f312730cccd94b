"""The report's figures and comparison: per kernel, SM x time busy fractions per scope and the
CTA x scope heatmap; with a second session, the diff (``viewer.diff``, as ``proton-ik diff``)."""

from __future__ import annotations

from html import escape
from pathlib import Path

import numpy as np
import pandas as pd

from proton_ik.viewer.diff import DiffOptions, diff_sessions, format_diff
from proton_ik.viewer.report import figures
from proton_ik.viewer.report.collect import Collected
from proton_ik.viewer.report.page import Cell, Section, paragraph, table
from proton_ik.viewer.report.sections import kernels_of, number
from proton_ik.viewer.report.svg import colour_bar, heatmap_svg, short_number

MAX_KERNELS_DRAWN = 12  # kernels with figures, those of most warp time; the rest are named


def drawn_kernels(collected: Collected) -> list[tuple[int, str]]:
    """(anchor number, kernel name) of the kernels drawn, at most ``MAX_KERNELS_DRAWN`` by lifetime."""
    kernels = collected.summary.kernels
    if not len(kernels):
        return []
    by_time = kernels.sort_values("lifetime_ns", ascending=False, kind="stable")
    chosen = {str(k) for k in by_time["kernel"].head(MAX_KERNELS_DRAWN)}
    seen: set[str] = set()
    drawn = []
    for index, kernel in kernels_of(collected):
        if kernel.kernel in chosen and kernel.kernel not in seen:  # host scopes share one figure
            drawn.append((index, str(kernel.kernel)))
            seen.add(kernel.kernel)
    return drawn


def _left_out(collected: Collected, drawn: list[tuple[int, str]]) -> str:
    others = sorted({str(k) for k in collected.summary.kernels.get("kernel", [])} - {k for _, k in drawn})
    if not others:
        return ""
    return paragraph(f"Not drawn ({len(others)} kernels of less warp time): {', '.join(others)}", "note")


def _of_kernel(frame: pd.DataFrame, kernel: str) -> pd.DataFrame:
    mine = (frame["kernel"] == kernel).to_numpy(bool)
    return frame if mine.all() else frame[mine]  # one kernel: no copy of millions of rows


def sm_section(collected: Collected) -> Section:
    drawn = drawn_kernels(collected)
    parts = [
        paragraph(
            "Per SM (rows) and time since each launch's first warp started (columns; a kernel's launches "
            f"overlaid, {figures.TIME_BINS} bins): the fraction of the time its living warps spent "
            "inside the scope.",
            "note",
        ),
        colour_bar("busy fraction", "0", "1"),
    ]
    for index, kernel in drawn:
        events, units = _of_kernel(collected.events, kernel), _of_kernel(collected.units, kernel)
        scopes = figures.top_scopes(events) if len(events) else []
        parts.append(f'<h3 id="sms-{index}">{escape(kernel)}</h3>')
        maps = figures.sm_heatmaps(events, units, scopes)
        if not maps:
            parts.append(paragraph("No finished warps with scope events to draw."))
        parts.extend(f"<h4>{escape(m.title)}</h4>{heatmap_svg(m)}" for m in maps)
    parts.append(_left_out(collected, drawn))
    return Section("sms", "Where time goes, per SM", "".join(parts))


def cta_section(collected: Collected) -> Section:
    drawn = drawn_kernels(collected)
    parts = [
        paragraph(
            "Per CTA (columns, by CTA id): its time in each scope per launch, and when its last warp "
            "ended after the launch's first warp started. Each row is scaled to its own maximum "
            "(named on the right), so stragglers and tails show as bright columns.",
            "note",
        ),
        colour_bar("of the row's maximum", "0", "1"),
    ]
    for index, kernel in drawn:
        events, units = _of_kernel(collected.events, kernel), _of_kernel(collected.units, kernel)
        scopes = figures.top_scopes(events) if len(events) else []
        heatmap = figures.cta_heatmap(events, units, scopes)
        parts.append(f'<h3 id="ctas-{index}">{escape(kernel)}</h3>')
        if heatmap is None:
            parts.append(paragraph("No finished warps with scope events to draw."))
            continue
        labelled = figures.Heatmap(
            heatmap.title,
            heatmap.values,
            [
                f"{row} (max {short_number(top)})"
                for row, top in zip(heatmap.rows, heatmap.row_max or [], strict=True)
            ],
            heatmap.x_label,
            heatmap.x_span,
            heatmap.x_unit,
            heatmap.value_label,
        )
        parts.append(heatmap_svg(labelled, row_px=16, label_px=300))
    parts.append(_left_out(collected, drawn))
    return Section("ctas", "CTAs: stragglers and tails", "".join(parts))


DIFF_HEADERS = [
    "kernel", "scope", "line A", "line B", "median A ns", "median B ns", "change ns", "interval ns",
    "change", "share A", "share B", "verdict",
]  # fmt: skip


def diff_section(base: Path, session: Path) -> Section:
    """``base`` (A) against this session (B), scope by scope, as ``proton-ik diff A B`` reports."""
    frame = diff_sessions(base, session, DiffOptions())
    rows = []
    for row in frame.to_dict("records"):
        verdict = str(row["verdict"])
        cls = verdict if verdict in ("slower", "faster") else ""
        rows.append(
            [Cell(str(row["kernel"]), left=True), Cell(str(row["scope"]), left=True)]
            + [Cell("-" if pd.isna(row[k]) else str(row[k])) for k in ("line_a", "line_b")]
            + [number(row[k]) for k in ("median_a_ns", "median_b_ns", "change_ns")]
            + [Cell(_interval(row["change_ns_low"], row["change_ns_high"]))]
            + [
                number(row["change"], "{:+.1%}"),
                number(row["share_a"], "{:.1%}"),
                number(row["share_b"], "{:.1%}"),
            ]
            + [Cell(f'<span class="{cls}">{escape(verdict)}</span>', raw_html=True)]
        )
    body = (
        paragraph(f"A: {base.name}, B: {session.name} (this session).")
        + table(DIFF_HEADERS, rows, left=2)
        + f"<pre>{escape(format_diff(frame))}</pre>"
    )
    return Section("diff", "Compared with another session", body)


def _interval(low: float, high: float) -> str:
    if not (np.isfinite(low) and np.isfinite(high)):
        return "-"
    return f"[{low:+,.0f}, {high:+,.0f}]"
