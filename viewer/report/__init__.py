"""A session's report: one self-contained HTML file that opens in any browser, offline.

    from proton_ik.viewer.report import write_report

    write_report("run.pik", "run.html")                       # beside run.pftrace, linked
    write_report("run.pik", "run.html", diff_with="base.pik")  # and base.pik -> run.pik compared

The page holds, each under an anchor: the session (``#overview``, with a link to its Perfetto
trace), each kernel's launches (``#kernels``), its scopes' statistics with a histogram each
(``#scopes``: ``proton-ik show``'s numbers), busy fractions per SM and time (``#sms``), CTAs by
scope (``#ctas``), events and marks (``#events``), the comparison (``#diff``) and what went wrong
(``#problems``). Modules: ``collect`` (the session, chunk by chunk, into narrow tables and
``show``'s summary), ``figures`` (the figures as arrays), ``svg`` (arrays to inline SVG and PNG),
``sections`` and ``section_figures`` (the sections), ``page`` (the document, style and script).
"""

from __future__ import annotations

import os
from pathlib import Path

from proton_ik.viewer.report.collect import collect
from proton_ik.viewer.report.figures import scope_extras
from proton_ik.viewer.report.page import page
from proton_ik.viewer.report.section_figures import cta_section, diff_section, sm_section
from proton_ik.viewer.report.sections import (
    events_section,
    kernels_section,
    overview,
    problems_section,
    scopes_section,
)

__all__ = ["SECTIONS", "write_report"]

SECTIONS = ("overview", "kernels", "scopes", "sms", "ctas", "events", "diff", "problems")


def write_report(
    session_path: str | Path,
    out_path: str | Path,
    *,
    diff_with: str | Path | None = None,
    trace_link: str | None = None,
) -> Path:
    """Write the report of ``session_path`` to ``out_path`` and return its path. ``diff_with``: a
    session to compare with (A; this session is B). ``trace_link``: the Perfetto trace's name,
    relative to the report (default: the session's ``.pftrace`` beside it, if that exists)."""
    session, out = Path(session_path), Path(out_path)
    if trace_link is None:
        trace = session.with_suffix(".pftrace")
        trace_link = os.path.relpath(trace, out.resolve().parent) if trace.exists() else None
    trace_exists = trace_link is not None and (out.resolve().parent / trace_link).exists()
    collected = collect(session)
    sections = [
        overview(collected, session.name, trace_link, trace_exists),
        kernels_section(collected),
        scopes_section(collected, scope_extras(collected.events, collected.launches)),
        sm_section(collected),
        cta_section(collected),
        events_section(collected),
    ]
    if diff_with is not None:
        sections.append(diff_section(Path(diff_with), session))
    sections.append(problems_section(collected))
    name = str(collected.info.get("name", session.stem))
    subtitle = f"{session.name} on {collected.info.get('device', 'unknown GPU')}, by proton_ik"
    out.write_text(page(f"proton_ik report: {name}", subtitle, sections), encoding="utf-8")
    return out
