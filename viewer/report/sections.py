"""The report's tables: the session at a glance, each kernel's launches, its scopes' statistics
(the numbers ``proton-ik show`` prints, formatted as it formats them, and p5/p95/max beside
them), events and marks, and what went wrong. Figures are ``section_figures``' job."""

from __future__ import annotations

from collections.abc import Iterator
from html import escape
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from proton_ik.viewer.report.collect import Collected
from proton_ik.viewer.report.page import Cell, Section, paragraph, table
from proton_ik.viewer.report.svg import histogram_svg
from proton_ik.viewer.summary import LAUNCH_KEYS, formatted

MAX_LAUNCH_ROWS = 200  # per kernel; the rest are counted, not listed
PERFETTO_NOTE = (
    "Open it at https://ui.perfetto.dev (Open trace file): every SM, CTA slot and warp with its "
    "scopes. The file stays on your machine; the UI runs in the browser."
)


def number(value: Any, spec: str = "{:,.0f}") -> Cell:
    """A number as ``show`` formats it ("-" where missing), sortable."""
    text = formatted(pd.Series([value], dtype=object), spec).iloc[0]
    return Cell(text, None if pd.isna(value) else float(value))


def count(value: Any) -> Cell:
    return Cell(f"{int(value):,}", float(value))


def kernels_of(collected: Collected) -> Iterator[tuple[int, Any]]:
    """Each (host scope, kernel) row of the summary with its position: its anchors' number."""
    kernels = collected.summary.kernels
    yield from enumerate(kernels.itertuples()) if len(kernels) else iter(())


def kernel_title(kernel: Any) -> str:
    return f"{kernel.kernel}" + (f" (host scope {kernel.host_scope})" if kernel.host_scope else "")


def overview(collected: Collected, session: str, trace_link: str | None, trace_exists: bool) -> Section:
    """The session's name, device and counts, and its Perfetto trace (``session``: its file name)."""
    info, launches = collected.info, collected.launches
    records = int(launches["records"].sum()) if len(launches) else 0
    facts = [
        ("session", str(info.get("name", "proton_ik"))),
        ("device", str(info.get("device", "unknown GPU"))),
        ("launches", f"{len(launches):,}"),
        ("kernels", f"{len(collected.summary.kernels):,}"),
        ("records", f"{records:,}"),
        ("scope events", f"{len(collected.events):,}"),
    ]
    if "launch_path" in info:  # sessions since the C launch path: which one ran, and why
        facts.append(("launch path", str(info["launch_path"])))
    rows = [[Cell(name, left=True), Cell(value)] for name, value in facts]
    body = table(["", ""], rows, left=1)
    if trace_link is None:
        body += paragraph(
            f"No Perfetto trace was written with this session; `proton-ik convert {session} --to "
            "perfetto` makes one, for the raw slices."
        )
    else:
        link = f'<a href="{_attr(trace_link)}">{_text(trace_link)}</a>'
        missing = "" if trace_exists else f" (not written yet: `proton-ik convert {session} --to perfetto`)"
        body += f"<p>Raw slices: {link}{_text(missing)}. {_text(PERFETTO_NOTE)}</p>"
    return Section("overview", "Session", body)


def kernels_section(collected: Collected) -> Section:
    parts = []
    for index, kernel in kernels_of(collected):
        facts = (
            f"{kernel.launches} launch(es), {kernel.ctas:,} CTAs, {kernel.units} units, SM clock "
            f"{kernel.mhz:.0f} MHz, {kernel.events} events; records: {kernel.records:,} kept, "
            f"{kernel.overwritten:,} overwritten by the ring; unmatched: {kernel.unmatched_begin:,} "
            f"begins, {kernel.unmatched_end:,} ends, {kernel.lost_to_ring:,} ends lost to the ring; "
            f"{kernel.units_unfinished:,} unfinished units; {kernel.ring}"
        )
        parts.append(f'<h3 id="kernel-{index}">{_text(kernel_title(kernel))}</h3>{paragraph(facts)}')
        parts.append(_launch_table(collected.launches, kernel))
    return Section(
        "kernels", "Kernels and launches", "".join(parts) or paragraph("No launches were captured.")
    )


def _launch_table(launches: pd.DataFrame, kernel: Any) -> str:
    mine = launches[
        (launches["kernel"] == kernel.kernel) & (launches.get("host_scope", "") == kernel.host_scope)
    ]
    columns = [
        ("launch", "launch"), ("name", "name"), ("grid", "grid"), ("CTAs", "ctas"), ("units", "units"),
        ("warps/unit", "warps_per_unit"), ("records", "records"), ("overwritten", "overwritten"),
        ("lost to ring", "lost_to_ring"), ("unmatched begins", "unmatched_begin"),
        ("unmatched ends", "unmatched_end"), ("MHz", "mhz"),
    ]  # fmt: skip
    present = [(title, name) for title, name in columns if name in mine]
    rows = []
    for row in mine.head(MAX_LAUNCH_ROWS).to_dict("records"):
        cells = []
        for _, name in present:
            value = row[name]
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
                cells.append(number(value) if name == "mhz" else count(value))
            else:
                cells.append(Cell("-" if value is None else str(value), left=True))
        rows.append(cells)
    more = len(mine) - MAX_LAUNCH_ROWS
    note = paragraph(f"... and {more:,} more launches, not listed.", "note") if more > 0 else ""
    return table([title for title, _ in present], rows, left=0) + note


SCOPE_HEADERS = [
    "scope", "line", "durations", "count", "total ns", "mean ns", "median ns", "p90 ns", "p5 ns", "p95 ns", "max ns",
    "mean cyc", "median cyc", "p90 cyc", "p5 cyc", "p95 cyc", "max cyc", "share", "unmatched",
]  # fmt: skip


def scopes_section(collected: Collected, extras: pd.DataFrame) -> Section:
    scopes = collected.summary.scopes
    keys = [*LAUNCH_KEYS, "scope"]
    merged = scopes.merge(extras, on=keys, how="left") if len(scopes) else scopes
    parts = [
        paragraph(
            "count, mean, median, p90 and share are what `proton-ik show` prints; total, p5, p95 and "
            "max are of the same durations. Histograms: durations in ns on a log scale.",
            "note",
        )
    ]
    for index, kernel in kernels_of(collected):
        rows = merged[(merged["kernel"] == kernel.kernel) & (merged["host_scope"] == kernel.host_scope)]
        if not len(rows):
            continue
        named = (rows["name"] != rows["kernel"]).any()
        body = [_scope_row(row, named) for row in rows.to_dict("records")]
        headers = ["name", *SCOPE_HEADERS] if named else SCOPE_HEADERS
        parts.append(f'<h3 id="scopes-{index}">{_text(kernel_title(kernel))}</h3>')
        parts.append(table(headers, body, left=3 if named else 2, cls="scopes"))
    return Section("scopes", "Scope statistics", "".join(parts))


def _scope_row(row: dict[str, Any], named: bool) -> list[Cell]:
    line = row["line"]
    source = (
        "-" if pd.isna(line) else (f"{row['file']}:{line}" if isinstance(row["file"], str) else str(line))
    )
    cells = [Cell(str(row["name"]), left=True)] if named else []
    hist = row.get("hist")
    figure = histogram_svg(hist, int(row["hist_first"])) if isinstance(hist, np.ndarray) else ""
    cells += [Cell(str(row["scope"]), left=True), Cell(source, left=True), Cell(figure, raw_html=True)]
    cells += [Cell(str(row["count"]), row["count"]), number(row["total_ns"])]
    cells += [number(row[name]) for name in ("mean_ns", "median_ns", "p90_ns", "p5_ns", "p95_ns", "max_ns")]
    cells += [number(row[f"{stat}_cycles"]) for stat in ("mean", "median", "p90", "p5", "p95", "max")]
    return [*cells, number(row["share"], "{:.1%}"), count(row["unmatched_begin"] + row["unmatched_end"])]


EVENT_HEADERS = [
    "kernel", "event", "line", "count", "mean ns", "median ns", "p90 ns", "p99 ns", "mean cyc",
    "median cyc", "p90 cyc", "p99 cyc", "no end", "no start",
]  # fmt: skip


def events_section(collected: Collected) -> Section:
    stats = collected.summary.events
    parts = [
        paragraph(
            "Events (pl.start_event to pl.end_event in any warp of the CTA): how long each waited, as "
            "`proton-ik show` prints it.",
            "note",
        )
    ]
    if len(stats):
        rows = [
            [Cell(str(r["kernel"]), left=True), Cell(str(r["event"]), left=True)]
            + [Cell("-" if pd.isna(r["line"]) else str(r["line"])), count(r["count"])]
            + [number(r[f"{s}_{u}"]) for u in ("ns", "cycles") for s in ("mean", "median", "p90", "p99")]
            + [count(r["no_end"]), count(r["no_start"])]
            for r in stats.to_dict("records")
        ]
        parts.append(table(EVENT_HEADERS, rows, left=2))
    else:
        parts.append(paragraph("This session recorded no events."))
    marks = collected.trace.marks
    if len(marks):
        counts = marks.groupby([marks["kernel"].astype(str), marks["mark"].astype(str)]).size()
        rows = [[Cell(k, left=True), Cell(m, left=True), count(n)] for (k, m), n in counts.items()]
        parts.append("<h3>Marks</h3>" + table(["kernel", "mark", "count"], rows, left=2))
    return Section("events", "Events and marks", "".join(parts))


def problems_section(collected: Collected) -> Section:
    summary = collected.summary
    lines = [f"warning: {w}" for w in summary.warnings] + list(summary.problems)
    body = (
        "<ul>" + "".join(f"<li>{_text(line)}</li>" for line in lines) + "</ul>"
        if lines
        else paragraph("None.")
    )
    return Section("problems", "Warnings and problems", body)


def _text(value: str) -> str:
    return escape(value)


def _attr(value: str) -> str:
    return escape(quote(value))
