"""The pipeline: launches in, chunks of columns out, in launch order and in bounded memory.

Two passes over the launches. The first reads only headers: each unit's start and end
(clock64, globaltimer) pairs are fitted into per-(launch, SM) lines as they come, so the
session's clock conversions (an SM with too short a span borrows its launch's or the session's
rate) and its first unit start are known before any record is decoded (a raw launch's
headers come with its slots: that view is kept for the second pass, which then reads the launch
no more). The second decodes runs
of consecutive launches of up to ``GROUP_BYTES`` of stored data (a larger launch in pieces of
whole CTAs), pairs their records and hands each run on as a ``Chunk``: event, unit and
unmatched columns, and the rows of the launches that end in it. Launches of one kernel and
profile within a run decode together, so a thousand small launches cost about what one large
launch does. ``trace.Trace`` joins the chunks into tables; ``render.render_session`` writes
each chunk to the trace files and drops it, so its memory does not grow with the session.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from proton_ik.contract.buffer_view import BufferView
from proton_ik.contract.layout import BufferLayout
from proton_ik.contract.session_format import Capture
from proton_ik.contract.tags import RecordKind
from proton_ik.viewer.decode import (
    PROBLEM_COUNTS,
    UnitTable,
    decode_headers,
    decode_records,
    describe_problems,
)
from proton_ik.viewer.pairing import pair_records
from proton_ik.viewer.tables.chunk import Chunk, Columns, joined_columns
from proton_ik.viewer.tables.event_tables import AsyncParts, async_parts
from proton_ik.viewer.tables.runs import Launch, Piece, prepare, runs
from proton_ik.viewer.tables.shares import SmShare, crosses_sms, share_of_chunk
from proton_ik.viewer.tables.table import (
    HOST_SCOPE_SEPARATOR,
    LAUNCH_COUNTS,
    Labels,
    LaunchGroup,
    ScopeTable,
    TimeShift,
    event_columns,
    first_grid,
    host_scopes,
    launch_counts,
    launch_row,
    scope_codes,
    unit_columns,
    unmatched_columns,
)
from proton_ik.viewer.tables.timebase import ClockAnchors, LineFit, SmClocks, clocks_from_lines, fit_lines

# Launches whose views the clock fit keeps for the decoding pass, at most (``Pipeline``).
KEPT_VIEWS_AT_MOST = 1 << 16

# --- pass 1: clocks, from the headers -----------------------------------------------------------


def _header_groups(
    launches: Sequence[Launch], kept: dict[int, BufferView] | None = None
) -> Iterator[tuple[list[Launch], UnitTable]]:
    """The unit headers of ``launches``, read as little of each launch as its stored form allows:
    per run, the launches of each kernel and profile and their units decoded together. ``kept``:
    where to keep, by launch index, the views that hold the whole launch (a raw one's headers
    are read with its slots, in place in the mapped file), for the decoding pass to take
    instead of reading them again."""

    def view(launch: Launch) -> BufferView:
        seen = launch.view(headers_only=True)
        if kept is not None and launch.headers_view_keeps:
            kept[launch.index] = seen
        return seen

    for run in runs(launches, view, split=False):
        for key in dict.fromkeys(piece.launch.key for piece in run):
            group = [piece for piece in run if piece.launch.key == key]
            _, units = decode_headers([piece.view for piece in group], group[0].launch.layout)
            yield [piece.launch for piece in group], units


@dataclass(frozen=True)
class SessionClocks:
    """The session's per-(launch, SM) clock conversions, and its first unit start (ns)."""

    clocks: SmClocks
    start_ns: int


def fit_session(
    launches: Sequence[Launch], count: int | None = None, kept: dict[int, BufferView] | None = None
) -> SessionClocks:
    """Fit every launch's clocks from its unit headers, reading as little of each launch as its
    stored form allows; only the fitted lines (one per launch and SM) are kept. ``count``: the
    session's launches, where ``launches`` are some of them (a part: its lines borrow a rate
    from the part's launches only); ``kept``: as ``_header_groups`` keeps views."""
    lines, starts = [], []
    for group, units in _header_groups(launches, kept):
        index = np.array([launch.index for launch in group], dtype=np.int64)
        lines.append(fit_lines(unit_anchors(units, index)))
        starts.append(_start_range(units, index))
    line = LineFit.concat(lines)
    order = np.lexsort((line.sm, line.launch))
    clocks = clocks_from_lines(
        LineFit(*(getattr(line, f)[order] for f in LineFit.__dataclass_fields__)),
        len(launches) if count is None else count,
    )
    return SessionClocks(clocks, _first_start(clocks, starts))


def launch_spans(launches: Sequence[Launch], clocks: SmClocks) -> dict[str, np.ndarray]:
    """Each launch's span from its unit headers alone, as the units table times them: the first
    start and the last end of its finished units with a clock conversion (ns on the GPU's timer).
    Launches with no such unit are left out; the rest come in launch order. A pass over the
    headers, not the records: what matching launches to another tool's kernels needs."""
    numbers, starts, ends = (
        [np.zeros(0, dtype=np.int64)],
        [np.zeros(0, dtype=np.int64)],
        [np.zeros(0, dtype=np.int64)],
    )
    for group, units in _header_groups(launches):
        index = np.array([launch.index for launch in group], dtype=np.int64)
        number = np.array([int(launch.meta["launch"]) for launch in group], dtype=np.int64)
        rows = clocks.rows(units.smid, index[units.launch])
        timed = units.finished & (rows >= 0)
        numbers.append(number[units.launch[timed]])
        starts.append(clocks.convert(rows[timed], units.start_clock[timed]))
        ends.append(clocks.convert(rows[timed], units.end_clock[timed]))
    number, start, end = (np.concatenate(parts) for parts in (numbers, starts, ends))
    launch, at = np.unique(number, return_inverse=True)
    first = np.full(len(launch), np.iinfo(np.int64).max)
    last = np.full(len(launch), np.iinfo(np.int64).min)
    np.minimum.at(first, at, start)
    np.maximum.at(last, at, end)
    return {"launch": launch, "start_ns": first, "end_ns": last}


def unit_anchors(units: UnitTable, index: np.ndarray) -> ClockAnchors:
    """(clock64, globaltimer) pairs: both ends of finished units, and the start of decoded
    unfinished units on SMs where no unit of their launch finished, where their start was written
    (by kernels from before every header was written at the exit; today's runtime clears the
    headers, so an unfinished unit's times read 0). ``index``: each buffer's launch, by position
    in the session."""
    finished = units.finished
    launch = index[units.launch]
    extra = ~finished & units.decoded & (units.start_time != 0)
    if extra.any():
        key = launch * (int(units.smid.max()) + 1) + units.smid
        extra &= ~np.isin(key, key[finished])
    return ClockAnchors(
        sm=np.concatenate([units.smid[finished], units.smid[finished], units.smid[extra]]),
        clock=np.concatenate(
            [units.start_clock[finished], units.end_clock[finished], units.start_clock[extra]]
        ),
        time=np.concatenate([units.start_time[finished], units.end_time[finished], units.start_time[extra]]),
        launch=np.concatenate([launch[finished], launch[finished], launch[extra]]),
    )


def _start_range(
    units: UnitTable, index: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per (launch, SM): the earliest and latest unit start clock, whose conversions bound the
    earliest start in nanoseconds (a conversion is monotonic, rising or falling)."""
    launch = index[units.launch]
    key = launch * (int(units.smid.max(initial=0)) + 1) + units.smid
    keys, group = np.unique(key, return_inverse=True)
    low = np.full(len(keys), np.iinfo(np.int64).max)
    high = np.full(len(keys), np.iinfo(np.int64).min)
    np.minimum.at(low, group, units.start_clock)
    np.maximum.at(high, group, units.start_clock)
    first = np.zeros(len(keys), dtype=np.int64)
    first[group[::-1]] = np.arange(len(group))[::-1]
    return launch[first], units.smid[first], low, high


def _first_start(
    clocks: SmClocks, starts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
) -> int:
    """The session's first unit start, in ns: 0 when no unit has a clock conversion."""
    earliest = []
    for launch, sm, low, high in starts:
        rows = clocks.rows(sm, launch)
        timed = rows >= 0
        if timed.any():
            earliest.append(
                min(
                    clocks.convert(rows[timed], low[timed]).min(),
                    clocks.convert(rows[timed], high[timed]).min(),
                )
            )
    return int(min(earliest)) if earliest else 0


# --- pass 2: records, in runs of launches -------------------------------------------------------


@dataclass
class _Tally:
    """What the launch table needs of one launch, added up over its pieces."""

    counts: np.ndarray = field(default_factory=lambda: np.zeros(len(LAUNCH_COUNTS), np.int64))
    problems: np.ndarray = field(default_factory=lambda: np.zeros(len(PROBLEM_COUNTS), np.int64))
    unknown: int = 0
    unknown_ids: set[int] = field(default_factory=set)
    other: int = 0
    grid: list[int] | None = None


class Pipeline:
    """Decodes a session's launches run by run (see the module docstring)."""

    def __init__(
        self,
        captures: Sequence[Capture],
        shift: TimeShift,
        host_offset_ns: int = 0,
        *,
        only: tuple[int, int] | None = None,
        prepared: list[Launch] | None = None,
        share: SmShare | None = None,
    ):
        """``host_offset_ns``: added to every time, to put the session on another clock than its
        GPU's %globaltimer (the host's, for a merge of several GPUs' sessions). ``only``: decode
        and fit launches ``first`` to ``past - 1`` alone (a part of ``viewer.render.parts``;
        where none of them gives a clock rate, they borrow the session's); ``prepared``:
        ``prepare(captures)``, made once for several such pipelines; ``share``: only this share
        of the launches' SMs (``shares``; the launch rows are whole only in share 0)."""
        self.launches = prepare(captures) if prepared is None else prepared
        self.only = only
        self.share = share
        self._whole = False  # a shared launch whose rows cross SMs: drawn whole by share 0
        self.shift = shift
        self.kernels = Labels()
        self.scopes = Labels()
        self.files = Labels()
        self.host_scopes = Labels()
        self.host_scopes.code("")  # code 0: no host scope, as tables built by hand have it
        # The views the fit read whole, for ``chunks`` to decode: a launch read and checked once.
        # Only for a few launches' worth: each kept view holds a few hundred bytes of objects.
        self._kept: dict[int, BufferView] = {}
        try:
            fitted = self.launches if only is None else self.launches[only[0] : only[1]]
            kept = self._kept if len(fitted) <= KEPT_VIEWS_AT_MOST else None
            clocks = fit_session(fitted, len(self.launches), kept)
        except ValueError:
            self._kept.clear()
            if only is None:
                raise
            clocks = fit_session(self.launches)
        if host_offset_ns:
            clocks = SessionClocks(
                dataclasses.replace(clocks.clocks, time_ref=clocks.clocks.time_ref + host_offset_ns),
                clocks.start_ns + host_offset_ns,
            )
        self.session = clocks
        self.mhz, self.source = self.session.clocks.per_launch(len(self.launches))
        self.tallies: dict[int, _Tally] = {}

    def chunks(self) -> Iterator[Chunk]:
        """The session's chunks (or those of its ``only`` launches), in launch order."""
        launches = self.launches if self.only is None else self.launches[self.only[0] : self.only[1]]
        for run in runs(launches, self._view, split=True):
            yield self._chunk(run)

    def _view(self, launch: Launch) -> BufferView:
        kept = self._kept.pop(launch.index, None)
        return kept if kept is not None else launch.view()

    def _chunk(self, run: list[Piece]) -> Chunk:
        parts = [
            self._decode([piece for piece in run if piece.launch.key == key])
            for key in dict.fromkeys(piece.launch.key for piece in run)
        ]
        ending = [piece.launch for piece in run if piece.last]
        rows = [self._launch_row(launch) for launch in ending]
        start = self.session.start_ns
        for events, units, _, _ in parts:
            events["begin_rel_ns"] = events["begin_ns"] - start
            events["end_rel_ns"] = events["end_ns"] - start
            for name in ("start", "end"):
                units[f"{name}_rel_ns"] = units[f"{name}_ns"] - start
                units[f"{name}_rel_ns_missing"] = units[f"{name}_ns_missing"]
        joined = [joined_columns([part[i] for part in parts]) for i in range(3)]  # type: ignore[misc]
        chunk = Chunk(
            kernels=tuple(self.kernels.codes),
            scopes=tuple(self.scopes.codes),
            files=tuple(self.files.codes),
            events=joined[0],
            units=joined[1],
            unmatched=joined[2],
            launches=rows,
            widths={int(piece.launch.meta["launch"]): piece.launch.kernel.warps_per_unit for piece in run},
            host_scopes=tuple(self.host_scopes.codes),
            host_paths={int(launch.meta["launch"]): host_scopes(launch.meta) for launch in ending},
            async_parts=tuple(part[3] for part in parts if part[3] is not None),
        )
        if self.share is not None and self.share.draws_launch:
            return share_of_chunk(chunk, self.share, self._whole)
        return chunk

    def _decode(self, pieces: list[Piece]) -> tuple[Columns, Columns, Columns, AsyncParts | None]:
        """Decode and pair pieces of one kernel and profile; tally their launches' counts."""
        launch = pieces[0].launch
        views = [piece.view for piece in pieces]
        ctas, units = decode_headers(views, launch.layout, [piece.first_cta for piece in pieces])
        on_sms = None
        if (share := self.share) is not None:  # what every share reads alike decides it
            whole = self._whole = crosses_sms(ctas.cluster_ctas)
            if not share.draws_launch:
                on_sms = lambda sm: share.holds(sm) & (not whole)  # noqa: E731
        decoded = decode_records(views, launch.layout, ctas, units, on_sms)
        pairs, unmatched = pair_records(decoded.records, decoded.units)
        index = np.array([piece.launch.index for piece in pieces], dtype=np.int64)
        group = LaunchGroup(
            index=index,
            number=np.array([int(piece.launch.meta["launch"]) for piece in pieces], dtype=np.int64),
            kernel=self.kernels.code(str(launch.meta["kernel"])),
            host_scope=np.array(
                [
                    self.host_scopes.code(HOST_SCOPE_SEPARATOR.join(host_scopes(piece.launch.meta)))
                    for piece in pieces
                ],
                dtype=np.int64,
            ),
            scopes=ScopeTable.of_kernel(launch.kernel),
            warps_per_unit=launch.kernel.warps_per_unit,
            ctas=decoded.ctas,
            units=decoded.units,
            pairs=pairs,
            unmatched=unmatched,
        )
        self._tally(group, decoded.records, decoded.counts)
        clocks = self.session.clocks
        unit_rows = clocks.rows(group.units.smid, index[group.units.launch])
        codes = scope_codes(group, self.scopes)
        files = group.scopes.file_codes(self.files)
        timing = unit_rows, clocks, self.session.start_ns
        return (
            event_columns(group, clocks, unit_rows, codes, files, self.shift),
            unit_columns(group, clocks, unit_rows),
            unmatched_columns(group, codes, files),
            async_parts(decoded.units, decoded.records, launch.kernel, _piece_labels(pieces), *timing),
        )

    def _tally(self, group: LaunchGroup, records, problem_counts: np.ndarray) -> None:
        """Add each piece's counts, problems, unknown scope ids and grid to its launch's tally."""
        n = len(group.index)
        piece = group.units.launch[records.unit_row]
        scoped = records.kind == RecordKind.SCOPE
        unknown = scoped & group.scopes.unknown(records.scope)
        unknown_count = np.bincount(piece[unknown], minlength=n)
        # RecordKind's codes are 0 to n - 1 (tests/contract holds it): a range, not a set lookup
        other = np.bincount(piece[(records.kind < 0) | (records.kind >= len(RecordKind))], minlength=n)
        counts = launch_counts(group, np.bincount(piece, minlength=n))
        grids = first_grid(group)
        for i, launch in enumerate(group.index.tolist()):
            tally = self.tallies.setdefault(launch, _Tally())
            tally.counts += counts[i]
            tally.problems += problem_counts[i]
            tally.other += int(other[i])
            if unknown_count[i]:
                tally.unknown += int(unknown_count[i])
                tally.unknown_ids.update(np.unique(records.scope[unknown & (piece == i)]).tolist())
            if tally.grid is None and i in grids:
                tally.grid = grids[i]

    def _launch_row(self, launch: Launch) -> dict[str, Any]:
        """The launch-table row of a launch whose pieces are all decoded: what went wrong, too."""
        tally = self.tallies.pop(launch.index)
        meta = launch.meta
        problems = list(describe_problems(tally.problems.tolist(), launch.layout))
        ctas = int(tally.counts[LAUNCH_COUNTS.index("ctas")])
        expected = _expected_ctas(meta, launch.layout)
        if expected is not None and expected != ctas:
            problems.append(f"the buffer holds {ctas} CTAs but the launch had {expected}")
        if tally.unknown:
            problems.append(
                f"{tally.unknown} records name scope ids missing from the kernel's scope table: "
                f"{sorted(tally.unknown_ids)}"
            )
        if tally.other:
            problems.append(f"{tally.other} records of a kind this viewer does not know were ignored")
        return launch_row(
            meta,
            launch.kernel,
            tally.counts.tolist(),
            tally.grid,
            self.mhz[launch.index],
            self.source[launch.index],
            self.shift,
            problems,
        )


def _piece_labels(pieces: list[Piece]) -> Columns:
    """Kernel, launch number and host scope path of each piece, for ``event_tables``."""
    metas = [piece.launch.meta for piece in pieces]
    return {
        "kernel": np.array([str(meta["kernel"]) for meta in metas], dtype=object),
        "launch": np.array([int(meta["launch"]) for meta in metas], dtype=np.int64),
        "host_scope": np.array([HOST_SCOPE_SEPARATOR.join(host_scopes(m)) for m in metas], dtype=object),
    }


def _expected_ctas(meta: Mapping[str, Any], layout: BufferLayout) -> int | None:
    """The CTA regions the launch's buffer should hold: its stored ``num_ctas``, or the sampled
    CTAs of its grid (``contract.sampling``)."""
    if "num_ctas" in meta:
        return int(meta["num_ctas"])
    if meta.get("grid"):
        return layout.sampling.cta_slots(math.prod(int(g) for g in meta["grid"]))
    return None
