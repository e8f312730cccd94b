"""A session file straight to trace files, chunk by chunk: what ``finalize`` runs.

``render_session`` never builds the session's tables: the pipeline hands over a run of launches
at a time (``tables.Chunk``), each writer adds it to its file, and it is dropped. Its memory is
that of one run (up to ``tables.runs.GROUP_BYTES`` of stored data, decoded) however many launches the
session holds; what it keeps per launch is its counts and its problems. ``trace.load`` is for
when the tables themselves are wanted.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from proton_ik.contract.session_format import unrecorded_warnings
from proton_ik.viewer.arrays import collector_paused
from proton_ik.viewer.perfetto import PerfettoWriter
from proton_ik.viewer.render.ahead import start_workers
from proton_ik.viewer.render.cores import default_workers
from proton_ik.viewer.render.parts import StartedRunners, on_workers, render_parts
from proton_ik.viewer.render.plan import (
    PartPlan,
    part_bytes_for,
    plan_parts,
    share_out,
    stored_sizes,
    weighed_bytes,
)
from proton_ik.viewer.session_file import StoredSession, read_session
from proton_ik.viewer.tables import Pipeline, time_shift_cycles
from proton_ik.viewer.tracks import check_timeline, root_name

if TYPE_CHECKING:  # imported where asked for: they import pandas, which finalize would wait for
    from proton_ik.viewer.chrome import ChromeWriter
    from proton_ik.viewer.proton import HatchetWriter, ProtonChromeWriter

# Perfetto, Chrome JSON (also under Proton's name for it), Proton's tree for proton-viewer, and
# the HTML report (``viewer.report``).
OUTPUTS = ("pftrace", "json", "chrome_trace", "hatchet", "html")
PROGRESS_DELAY_S = 2.0  # progress=None: a bar only for renders that take longer than this


@dataclass(frozen=True)
class RenderStats:
    """What ``render_session`` wrote: counts over the session, and what went wrong.

    ``problems``: each launch's problems, prefixed with the launch (as ``Trace.problems``).
    ``warnings``: about the session as a whole, e.g. launches that ran but were not recorded.
    """

    launches: int
    records: int
    events: int
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@collector_paused()
def render_session(
    session_path: str | Path,
    outputs: Mapping[str, Path],
    *,
    timeline: str | None = None,
    progress: bool | None = None,
    title: str | None = None,
    merge_index: int = 0,
    host_offset_ns: int = 0,
    workers: int | None = None,
    trace_link: str | None = None,
    started: StartedRunners | None = None,
    session: StoredSession | None = None,
) -> RenderStats:
    """Decode a session file and write the files named in ``outputs`` ("pftrace" for Perfetto,
    "json" and "chrome_trace" for Chrome, "hatchet" for Proton's tree), launch run by launch run,
    in memory that does not grow with the number of launches (the tree is per scope, not per
    event). ``timeline``: the traces' tracks, "slots" (the default: an SM's CTA slots) or
    "ctas" (a track per CTA, for small grids). ``progress=None`` shows a bar if it takes more
    than a few seconds. ``title`` names the Perfetto root track (default: the session's name);
    ``merge_index`` numbers its tracks apart from other sessions' (``ranks.merge_sessions``), and
    ``host_offset_ns`` moves its times onto the host's clock there. A session of more than one
    part's stored data (``plan.PART_BYTES``), or of a few large launches on a host of many cores,
    has its Perfetto trace written in parts, on
    up to ``workers`` processes (None: one per core; 1: in this one): the same file either way;
    ``started``: workers started ahead (``ahead.start_workers_for``) or a fork server, ended here when done;
    ``session``: the file as this process knows it already (``session_file.session_from_written``),
    not read again.
    "html" is the report (``viewer.report``), written after the traces; it links to the Perfetto
    trace by ``trace_link`` (default: the "pftrace" output's name, where it is written beside)."""
    if "html" in outputs:
        traces = {fmt: path for fmt, path in outputs.items() if fmt != "html"}
        stats = render_session(
            session_path, traces, timeline=timeline, progress=progress, title=title,
            merge_index=merge_index, host_offset_ns=host_offset_ns, workers=workers, started=started,
            session=session,
        )  # fmt: skip
        _write_report(session_path, outputs["html"], traces.get("pftrace"), trace_link)
        return stats
    unknown = sorted(set(outputs) - set(OUTPUTS))
    if unknown:
        raise ValueError(f"cannot render {unknown}: the trace formats are {list(OUTPUTS)}")
    timeline = check_timeline(timeline)
    # Worker processes import while this one reads the session; those no part needs end here.
    if started is None and "pftrace" in outputs:
        started = start_workers(Path(session_path), workers)
    try:
        if session is None:
            session = read_session(session_path)
        warnings = unrecorded_warnings(session.info)
        title = title or root_name(str(session.info.get("name", "proton_ik")))
        sizes = stored_sizes(session)
        cores = default_workers()
        parts = share_out(plan_parts(sizes, part_bytes_for(weighed_bytes(sizes), cores)), sizes, cores)
        if "pftrace" in outputs and len(parts) > 1:
            return _render_in_parts(
                Path(session_path), outputs, parts, title=title, warnings=warnings, timeline=timeline,
                progress=progress, merge_index=merge_index, host_offset_ns=host_offset_ns, workers=workers,
                session=session, started=started,
            )  # fmt: skip
    finally:
        if started is not None:
            started.close()
    pipeline = Pipeline(session.launches, time_shift_cycles(session.info), host_offset_ns)
    with ExitStack() as stack:
        writers = _writers(stack, outputs, session.info, timeline, title, warnings, merge_index)
        return _render_chunks(pipeline, writers, stack, len(session.launches), progress, warnings)


def _render_in_parts(
    session_path: Path,
    outputs: Mapping[str, Path],
    parts: list[PartPlan],
    *,
    title: str,
    warnings: list[str],
    timeline: str,
    progress: bool | None,
    merge_index: int,
    host_offset_ns: int,
    workers: int | None,
    session: StoredSession,
    started: StartedRunners | None,
) -> RenderStats:
    """The Perfetto trace written in ``parts`` (``parts.render_parts``), and the other formats.
    ``session``: the file as read already, for the parts rendered in this process."""
    rendering = functools.partial(
        render_parts,
        session_path,
        outputs["pftrace"],
        parts,
        title=title,
        session_warnings=warnings,
        timeline=timeline,
        merge_index=merge_index,
        host_offset_ns=host_offset_ns,
        workers=workers,
        session=session,
        started=started,
    )
    rest = {fmt: path for fmt, path in outputs.items() if fmt != "pftrace"}
    if not rest:
        done = rendering()
    elif not on_workers(workers, len(parts)):  # decoded again, serially, after the parts
        done = rendering()
        render_session(session_path, rest, timeline=timeline, progress=progress, title=title)
    else:
        # The other formats are not written in parts: decoded again in this process while the
        # workers render the parts (after them, a drop-in's .hatchet took about as long again),
        # and then this process joins the workers on the parts left.
        joining = threading.Event()
        with ThreadPoolExecutor(1, thread_name_prefix="proton_ik-parts") as pool:
            in_parts = pool.submit(rendering, join=joining)
            try:
                render_session(session_path, rest, timeline=timeline, progress=progress, title=title)
            finally:
                joining.set()  # leaving the block then waits for the parts
        done = in_parts.result()
    return RenderStats(
        sum(part.launches for part in done),
        sum(part.records for part in done),
        sum(part.events for part in done),
        tuple(problem for part in done for problem in part.problems),
        tuple(warnings),
    )


def _render_chunks(
    pipeline: Pipeline,
    writers: list[PerfettoWriter | ChromeWriter | ProtonChromeWriter | HatchetWriter],
    stack: ExitStack,
    total: int,
    progress: bool | None,
    warnings: list[str],
) -> RenderStats:
    """Each chunk of the pipeline handed to every writer in turn, with a progress bar (closed
    with ``stack``) over the ``total`` launches."""
    launches = records = events = 0
    problems: list[str] = []
    bar = stack.enter_context(
        tqdm(
            total=total,
            desc="render",
            unit="launch",
            disable=progress is False,
            delay=PROGRESS_DELAY_S if progress is None else 0,
        )
    )
    for chunk in pipeline.chunks():
        for writer in writers:
            writer.add(chunk)
        launches += len(chunk.launches)
        records += sum(int(row["records"]) for row in chunk.launches)
        events += len(chunk.events["launch"])
        problems.extend(chunk.problems())
        bar.update(len(chunk.launches))
    return RenderStats(launches, records, events, tuple(problems), tuple(warnings))


def _writers(
    stack: ExitStack,
    outputs: Mapping[str, Path],
    info: Mapping[str, Any],
    timeline: str,
    title: str,
    warnings: list[str],
    merge_index: int,
) -> list[PerfettoWriter | ChromeWriter | ProtonChromeWriter | HatchetWriter]:
    """A writer for each trace format asked for, each closed with ``stack``."""
    writers: list[PerfettoWriter | ChromeWriter | ProtonChromeWriter | HatchetWriter] = []
    if "pftrace" in outputs:
        perfetto = PerfettoWriter(
            outputs["pftrace"], title, timeline=timeline, warnings=warnings, merge_index=merge_index
        )
        writers.append(stack.enter_context(perfetto))
    if "json" in outputs:
        from proton_ik.viewer.chrome import ChromeWriter

        writers.append(stack.enter_context(ChromeWriter(outputs["json"], info, timeline=timeline)))
    if "chrome_trace" in outputs:  # Proton's file, in Proton's schema
        from proton_ik.viewer.proton import ProtonChromeWriter

        writers.append(stack.enter_context(ProtonChromeWriter(outputs["chrome_trace"])))
    if "hatchet" in outputs:
        from proton_ik.viewer.proton import HatchetWriter

        writers.append(stack.enter_context(HatchetWriter(outputs["hatchet"], info)))
    return writers


def _write_report(session_path: str | Path, out: Path, pftrace: Path | None, link: str | None) -> None:
    """The HTML report, linking to the Perfetto trace (``link``, else ``pftrace``'s name when it
    lies beside the report)."""
    from proton_ik.viewer.report import write_report

    if link is None and pftrace is not None and Path(pftrace).parent.resolve() == Path(out).parent.resolve():
        link = Path(pftrace).name
    write_report(session_path, out, trace_link=link)
