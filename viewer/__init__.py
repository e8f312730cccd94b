"""proton_ik.viewer: profile buffers in; event tables, summaries, Perfetto and Chrome traces out.

    from proton_ik import viewer

    trace = viewer.load("matmul.pik")        # a session file written by the runtime
    trace.events                             # pandas: one row per scope event
    trace.async_events, trace.marks, trace.values  # pl.start_event/end_event pairs, pl.mark
    print(trace.summary())                   # per-scope statistics, and what was lost
    viewer.render("matmul.pik", "matmul")    # matmul.pftrace and matmul.json
    viewer.render_session("matmul.pik", {"pftrace": Path("m.pftrace")})  # no tables held

In data-flow order, a package for each concept (each package's docstring names its modules;
outside a package, use what its ``__init__`` exports):

- ``session_file/``: the session file read back, its manifest's schema checked first (the format,
  the kernel metadata and the trimmed form are ``proton_ik.contract``'s), its members read in
  bounded memory, the complete launches of a file never closed;
- ``decode/``: bytes to arrays (CTA, unit and record tables; clocks made whole; what went wrong);
- ``pairing/``: records to events (a scope's begins with its ends; an event's starts with its ends
  across the warps of a CTA; marks);
- ``tables/``: cycles to ns (``timebase``), columns and pandas tables, the pipeline (launches to
  chunks of columns, in bounded memory), thread-block clusters, the statistics of launches made
  with ``aggregate=on``; ``trace`` (the one module beside this file) joins them into the tables of
  a whole session;
- ``summary/``: what ``show`` prints (statistics of scopes, events and aggregates; what was lost);
- traces: ``tracks/`` (the track model both writers draw and both readers parse: launch, SM,
  place, unit, lane; an SM's CTA slots), the writers ``perfetto/`` and ``chrome/`` (chunk by
  chunk), ``proton/`` (Proton's ``.hatchet`` tree and ``.chrome_trace``, for Triton's own tools),
  ``render/`` (a session straight to trace files, a large one in parts on worker processes);
- traces read again: ``readback/`` (both readers, so that ``show`` and ``convert`` take a trace);
- several sessions: ``diff/`` (two sessions compared scope by scope), ``ranks/`` (a job's
  sessions side by side, and on one timeline), ``torch_profiler/`` (a session beside a
  ``torch.profiler`` trace);
- ``report/``: one self-contained HTML page of a session (``show``'s numbers, histograms,
  heatmaps).

``arrays/`` holds the whole-array helpers they share (numbering key tuples, runs of sorted rows,
encoding millions of packets or JSON objects at once). Nothing loops in Python per record, event
or unit, so a session of millions of records finalizes in seconds;
``tests/viewer/finalize_speed.py`` measures it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

# The subpackage first (it imports nothing heavy itself): the function ``render`` defined below
# must replace the attribute that loading a subpackage sets on its parent, not be replaced by it.
import proton_ik.viewer.render as _render_package  # noqa: F401
from proton_ik.lazy_exports import lazy_exports

if TYPE_CHECKING:
    import pandas as pd

    from proton_ik.viewer.render import RenderStats, render_session
    from proton_ik.viewer.session_file import LaunchCapture, SessionFileError, read_session
    from proton_ik.viewer.summary import Summary
    from proton_ik.viewer.tables import cluster_table
    from proton_ik.viewer.trace import SummarizedSession, Trace, load, load_for_summary, summarize_session

# Imported when first asked for (PEP 562): a render worker process (``render.parts``) imports
# the modules its part needs, not the summaries, tables and writers of every format (nor pandas).
_EXPORTED_FROM = {
    "RenderStats": "proton_ik.viewer.render",
    "render_session": "proton_ik.viewer.render",
    "LaunchCapture": "proton_ik.viewer.session_file",
    "SessionFileError": "proton_ik.viewer.session_file",
    "read_session": "proton_ik.viewer.session_file",
    "Summary": "proton_ik.viewer.summary",
    "cluster_table": "proton_ik.viewer.tables",
    "Trace": "proton_ik.viewer.trace",
    "load": "proton_ik.viewer.trace",
    "load_for_summary": "proton_ik.viewer.trace",
    "SummarizedSession": "proton_ik.viewer.trace",
    "summarize_session": "proton_ik.viewer.trace",
}


__getattr__, __dir__ = lazy_exports("proton_ik.viewer", globals(), _EXPORTED_FROM)


__all__ = [
    "LaunchCapture",
    "RenderStats",
    "Rendered",
    "SessionFileError",
    "SummarizedSession",
    "Summary",
    "Trace",
    "aggregate_table",
    "cluster_table",
    "load",
    "load_for_summary",
    "read_session",
    "render",
    "render_session",
    "summarize_session",
]


class Rendered(NamedTuple):
    perfetto: Path
    chrome: Path


def render(session_path: str | Path, out_stem: str | Path, *, progress: bool | None = None) -> Rendered:
    """Decode a session file and write ``<out_stem>.pftrace`` and ``<out_stem>.json``."""
    # Imported here: a lazy export is in this module's globals only once someone asked for it.
    from proton_ik.viewer.render import render_session

    stem = Path(out_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    rendered = Rendered(stem.parent / f"{stem.name}.pftrace", stem.parent / f"{stem.name}.json")
    render_session(session_path, {"pftrace": rendered.perfetto, "json": rendered.chrome}, progress=progress)
    return rendered


def aggregate_table(session_path: str | Path) -> pd.DataFrame:
    """The per-scope statistics of a session's aggregate launches (``aggregate=on``): one row per
    (launch, CTA, unit, scope), as ``Trace.aggregates`` (columns: ``viewer.tables.aggregate``)."""
    from proton_ik.viewer.trace import load  # imported here, as in ``render``

    return load(session_path).aggregates
