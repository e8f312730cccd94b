"""pandas tables of a session: scope events, unit lifetimes, unmatched records, launch statistics.

Times are absolute %globaltimer nanoseconds (int64), converted from cycles with the launch's
per-SM clock fits, so events and lifetimes share one time axis; ``*_rel_ns`` columns, added
once the whole session is known, count from the session's first unit start.

Event columns that need a word: ``cluster`` and ``cluster_rank`` are the CTA's thread-block
cluster (its linear id) and its rank there, -1 where not recorded (before sm_90, older files);
``warp`` is the unit's first warp; ``depth`` counts the scopes
open on the unit when this one began; ``lane`` is 0 unless the scope overlaps an earlier one
without nesting (trace writers put lanes on separate tracks); ``begin_record`` and
``end_record`` number the unit's records, overwritten ones included; ``line`` and ``file`` are
the source line and file (base name) of the scope's first marker (no file in sessions from
before it was recorded).

``host_scope`` is the path of host-side scopes (``proton_ik.scope``) open when the event's launch
was made, joined by "/" ("" when none): the launch table has it too, with ``name``, the launch's
name as the kernel's ``launch_metadata`` gave it (the kernel's name otherwise).

``begin_cycles`` is the begin record's clock moved later by the session's calibrated time shift
(``time_shift_cycles`` in the session info: what an empty scope measures, i.e. the recording's
own cost that lands inside every scope), but never past the unit's next record, so durations
stay at or above zero and scopes stay nested; ``begin_cycles_raw`` is the clock as recorded.

Columns are built per group of launches decoded together (``LaunchGroup``), as numpy arrays; the
session's tables are those arrays joined in launch order, made into DataFrames once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from proton_ik.contract.metadata import KernelMetadata
from proton_ik.contract.tags import MAX_SCOPES
from proton_ik.viewer.decode import CtaTable, UnitTable
from proton_ik.viewer.pairing import (
    LOST_TO_RING,
    UNMATCHED_BEGIN,
    UNMATCHED_END,
    UNMATCHED_KINDS,
    Pairs,
    Unmatched,
)
from proton_ik.viewer.tables.sampled import sampled_text
from proton_ik.viewer.tables.timebase import SmClocks

if TYPE_CHECKING:  # imported where it is used: a render worker never imports it
    import pandas as pd

EVENT_COLUMNS = [
    "kernel", "launch", "host_scope", "cta", "sm", "cluster", "cluster_rank", "warp", "unit", "lane", "scope",
    "scope_id", "depth", "begin_cycles", "begin_cycles_raw", "end_cycles", "dur_cycles", "begin_ns", "end_ns",
    "dur_ns", "line", "file", "begin_record", "end_record",
]  # fmt: skip
UNIT_COLUMNS = [
    "kernel", "launch", "cta", "sm", "cluster", "cluster_rank", "warp", "unit", "start_cycles", "end_cycles",
    "start_ns", "end_ns", "dur_ns", "globaltimer_start_ns", "globaltimer_end_ns", "count", "kept", "overwritten",
    "finished", "decoded",
]  # fmt: skip
UNMATCHED_COLUMNS = [
    "kernel", "launch", "cta", "sm", "cluster", "cluster_rank", "warp", "unit", "scope", "scope_id", "record",
    "cycles", "kind", "line", "file",
]  # fmt: skip
_INT64_MASKED = {
    "end_cycles", "start_ns", "end_ns", "dur_ns", "globaltimer_end_ns", "count", "line", "start_rel_ns",
    "end_rel_ns",
}  # fmt: skip
HOST_SCOPE_SEPARATOR = "/"  # between the names of a host scope path, in tables and text


@dataclass(frozen=True)
class ScopeTable:
    """A kernel's scope ids as names, source lines and files, tolerant of ids the table lacks."""

    names: dict[int, str]
    lines: dict[int, int | None]
    files: dict[int, str | None]

    @classmethod
    def of_kernel(cls, kernel: KernelMetadata) -> ScopeTable:
        return cls(
            {s.id: s.name for s in kernel.scopes},
            {s.id: s.line for s in kernel.scopes},
            {s.id: s.file for s in kernel.scopes},
        )

    def name_of(self, scope_id: int) -> str:
        return self.names.get(int(scope_id), f"<scope {int(scope_id)}>")

    def unknown(self, ids: np.ndarray) -> np.ndarray:
        return ~np.isin(ids, np.fromiter(self.names, dtype=np.int64, count=len(self.names)))

    def line_lookup(self) -> np.ndarray:
        """Source line by scope id, -1 where there is none."""
        lines = np.full(MAX_SCOPES, -1, dtype=np.int64)
        for scope_id, line in self.lines.items():
            if line is not None:
                lines[scope_id] = int(line)
        return lines

    def file_codes(self, labels: Labels) -> np.ndarray:
        """Code of the source file among ``labels`` by scope id, -1 where there is none."""
        codes = np.full(MAX_SCOPES, -1, dtype=np.int64)
        for scope_id, file in self.files.items():
            if file is not None:
                codes[scope_id] = labels.code(file)
        return codes


class Labels:
    """The labels of a categorical column, gathered over the session: codes as first seen (see
    ``categories`` for the sorted categories at the end)."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def code(self, label: str) -> int:
        return self.codes.setdefault(label, len(self.codes))


@dataclass(frozen=True)
class LaunchGroup:
    """Launches of one kernel and profile (or pieces of them: whole CTAs) decoded and paired together.

    Rows of ``ctas`` and ``units`` name their piece in ``launch``; ``index`` and ``number`` map a
    piece to its launch.
    """

    index: np.ndarray  # each piece's launch, by position in the session (0, 1, ...), as clock fits know it
    number: np.ndarray  # each piece's launch, by the "launch" number in its metadata
    kernel: int  # code of the kernel's name among the session's kernel labels
    host_scope: np.ndarray  # each piece's code of its host scope path among the session's labels
    scopes: ScopeTable
    warps_per_unit: int
    ctas: CtaTable
    units: UnitTable
    pairs: Pairs
    unmatched: Unmatched


def categories(labels: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Labels (by code, as first seen) sorted, and each code's position among them."""
    ordered = sorted(labels)
    position = {label: i for i, label in enumerate(ordered)}
    return ordered, np.array([position[label] for label in labels] or [0], dtype=np.int64)


def scope_codes(group: LaunchGroup, labels: Labels) -> np.ndarray:
    """Code of each scope id's name (indexed by id) for the ids this group's records use."""
    used = np.zeros(MAX_SCOPES, dtype=bool)
    used[group.pairs.scope] = True
    used[group.unmatched.scope] = True
    codes = np.zeros(MAX_SCOPES, dtype=np.int64)
    for scope_id in np.flatnonzero(used).tolist():
        codes[scope_id] = labels.code(group.scopes.name_of(scope_id))
    return codes


@dataclass(frozen=True)
class TimeShift:
    """Cycles each scope's begin moves later: what an empty scope measures, for scopes written
    as single records (the begin's own store lands inside the scope) and as pairs."""

    single: int = 0
    pair: int = 0

    def __str__(self) -> str:
        if self.single == self.pair:
            return f"{self.single} cycles"
        return f"{self.single} cycles ({self.pair} for paired scopes)"


TIME_SHIFT_KEY = "time_shift_cycles"  # the session info's calibration, read by ``time_shift_cycles``


def time_shift_cycles(info: Mapping[str, Any]) -> TimeShift:
    """The session's calibrated cost of an empty scope, for single records and for pairs: one
    number for both, or ``{"single": s, "pair": p}`` (0 in files from before it was measured)."""
    shift = info.get(TIME_SHIFT_KEY, 0)
    values = shift if isinstance(shift, Mapping) else {"single": shift, "pair": shift}
    for kind in ("single", "pair"):
        value = values.get(kind)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"the session info's {TIME_SHIFT_KEY} is {shift!r}, not a whole number of cycles >= 0 "
                "for single records and pairs; the runtime that wrote the session is broken: capture again"
            )
    return TimeShift(single=values["single"], pair=values["pair"])


def _where(group: LaunchGroup, row: np.ndarray) -> dict[str, np.ndarray]:
    """Kernel, launch, CTA, SM, cluster, warp and unit of each of ``row``'s units."""
    units = group.units
    return {
        "kernel": np.full(len(row), group.kernel),
        "launch": group.number[units.launch[row]],
        "cta": units.cta[row],
        "sm": units.smid[row],
        "cluster": units.cluster[row],
        "cluster_rank": units.cluster_rank[row],
        "warp": units.unit[row] * group.warps_per_unit,
        "unit": units.unit[row],
    }


def event_columns(
    group: LaunchGroup,
    clocks: SmClocks,
    unit_rows: np.ndarray,
    codes: np.ndarray,
    files: np.ndarray,
    shift: TimeShift,
) -> dict[str, np.ndarray]:
    """Event columns of a group; ``unit_rows``: each unit's row in ``clocks``; ``codes`` and
    ``files``: the codes of each scope id's name and file (``scope_codes``, ``file_codes``)."""
    pairs, units = group.pairs, group.units
    row = pairs.unit_row
    moved = pairs.begin_clock + np.where(pairs.paired, shift.pair, shift.single)
    begin = np.minimum(moved, np.maximum(pairs.next_clock, pairs.begin_clock))
    begin_ns = clocks.convert(unit_rows[row], begin)
    end_ns = clocks.convert(unit_rows[row], pairs.end_clock)
    line = group.scopes.line_lookup()[pairs.scope]
    return {
        **_where(group, row),
        "host_scope": group.host_scope[units.launch[row]],
        "lane": pairs.lane,
        "scope": codes[pairs.scope],
        "scope_id": pairs.scope,
        "depth": pairs.depth,
        "begin_cycles": begin,
        "begin_cycles_raw": pairs.begin_clock,
        "end_cycles": pairs.end_clock,
        "dur_cycles": pairs.end_clock - begin,
        "begin_ns": begin_ns,
        "end_ns": end_ns,
        "dur_ns": end_ns - begin_ns,
        "line": line,
        "line_missing": line < 0,
        "file": files[pairs.scope],
        "begin_record": pairs.begin_index,
        "end_record": pairs.end_index,
        "order": group.index[units.launch[row]],
    }


def unit_columns(group: LaunchGroup, clocks: SmClocks, unit_rows: np.ndarray) -> dict[str, np.ndarray]:
    """One row per unit of the group's valid CTAs: when it ran and what it recorded."""
    units = group.units
    # A unit that failed on an SM where no unit finished has no time conversion.
    timed = unit_rows >= 0
    start_ns = np.zeros(len(units), dtype=np.int64)
    end_ns = np.zeros(len(units), dtype=np.int64)
    start_ns[timed] = clocks.convert(unit_rows[timed], units.start_clock[timed])
    end_ns[timed] = clocks.convert(unit_rows[timed], units.end_clock[timed])
    unfinished = ~units.finished
    return {
        "kernel": np.full(len(units), group.kernel),
        "launch": group.number[units.launch],
        "cta": units.cta,
        "sm": units.smid,
        "cluster": units.cluster,
        "cluster_rank": units.cluster_rank,
        "warp": units.unit * group.warps_per_unit,
        "unit": units.unit,
        "start_cycles": units.start_clock,
        "end_cycles": units.end_clock,
        "end_cycles_missing": unfinished,
        "start_ns": start_ns,
        "start_ns_missing": ~timed,
        "end_ns": end_ns,
        "end_ns_missing": unfinished,
        "dur_ns": end_ns - start_ns,
        "dur_ns_missing": unfinished,
        "globaltimer_start_ns": units.start_time,
        "globaltimer_end_ns": units.end_time,
        "globaltimer_end_ns_missing": unfinished,
        "count": units.count,
        "count_missing": ~units.decoded,
        "kept": units.kept,
        "overwritten": units.overwritten,
        "finished": units.finished,
        "decoded": units.decoded,
        "order": group.index[units.launch],
    }


def unmatched_columns(group: LaunchGroup, codes: np.ndarray, files: np.ndarray) -> dict[str, np.ndarray]:
    """One row per record left without a partner, with why."""
    unmatched, units = group.unmatched, group.units
    row = unmatched.unit_row
    line = group.scopes.line_lookup()[unmatched.scope]
    return {
        **_where(group, row),
        "scope": codes[unmatched.scope],
        "scope_id": unmatched.scope,
        "record": unmatched.index,
        "cycles": unmatched.clock,
        "kind": unmatched.kind,
        "line": line,
        "line_missing": line < 0,
        "file": files[unmatched.scope],
        "order": group.index[units.launch[row]],
    }


# Counted per launch for the launch table; the counts of pieces of one launch add up.
LAUNCH_COUNTS = (
    "ctas", "ctas_missing", "ctas_bad_header", "units", "units_unfinished", "units_skipped", "records",
    "overwritten", "events", "overlapping", "unmatched_begin", "unmatched_end", "lost_to_ring",
)  # fmt: skip


def launch_counts(group: LaunchGroup, records: np.ndarray) -> np.ndarray:
    """The LAUNCH_COUNTS of each launch (or piece of one) of a group; ``records``: their records."""
    n = len(group.index)
    ctas, units, pairs, unmatched = group.ctas, group.units, group.pairs, group.unmatched

    def count(launch: np.ndarray, flags: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(launch if flags is None else launch[flags], minlength=n)

    pair_launch = units.launch[pairs.unit_row]
    unmatched_launch = units.launch[unmatched.unit_row]
    columns = [
        count(ctas.launch),
        count(ctas.launch, ~ctas.ran),
        count(ctas.launch, ctas.ran & ~ctas.valid),
        count(units.launch),
        count(units.launch, ~units.finished),
        count(units.launch, ~units.decoded),
        records,
        np.bincount(units.launch, units.overwritten, minlength=n),
        count(pair_launch),
        count(pair_launch, pairs.lane > 0),
        count(unmatched_launch, unmatched.kind == UNMATCHED_BEGIN),
        count(unmatched_launch, unmatched.kind == UNMATCHED_END),
        count(unmatched_launch, unmatched.kind == LOST_TO_RING),
    ]
    return np.stack(columns, axis=1).astype(np.int64)


def first_grid(group: LaunchGroup) -> dict[int, list[int]]:
    """%nctaid of each launch (or piece) of a group, from its first valid CTA header."""
    valid = np.flatnonzero(group.ctas.valid)
    launch, first = np.unique(group.ctas.launch[valid], return_index=True)
    return dict(zip(launch.tolist(), group.ctas.nctaid[valid[first]].tolist(), strict=True))


def launch_row(
    meta: Mapping[str, Any],
    kernel: KernelMetadata,
    counts: Sequence[int],
    grid: Sequence[int] | None,
    mhz: float,
    clock_source: str,
    shift: TimeShift,
    problems: Sequence[str],
) -> dict[str, Any]:
    """One row of the launch table: what was captured, lost and inferred, and what tells the
    launch apart from others of its kernel (device, stream, CUDA graph replay, autotuner config).
    Metadata a session from an older runtime lacks is None."""
    grid = meta.get("grid") or grid
    capacity = kernel.capacity
    config = meta.get("config")
    return {
        "launch": int(meta["launch"]),
        "kernel": str(meta["kernel"]),
        "name": launch_name(meta),
        "host_scope": HOST_SCOPE_SEPARATOR.join(host_scopes(meta)),
        "launch_metrics": launch_metrics(meta),
        "stream": meta.get("stream"),
        "device": meta.get("device"),
        "graph": meta.get("graph"),
        "replay": meta.get("replay"),
        "config": config_text(config),
        "config_args": config,
        "grid": "x".join(str(int(g)) for g in grid) if grid else None,
        "warps_per_unit": kernel.warps_per_unit,
        "capacity": kernel.layout.capacity,
        "capacity_source": None if capacity is None else capacity.source,
        "capacity_bound": None if capacity is None else capacity.bound,
        "capacity_reason": None if capacity is None else capacity.reason,
        "sampled": sampled_text(kernel.layout.sampling, grid, kernel.warps_per_unit, kernel.num_warps),
        **dict(zip(LAUNCH_COUNTS, counts, strict=True)),
        "mhz": float(mhz),
        "clock_source": str(clock_source),
        "time_shift_cycles": shift.single,
        "time_shift_pair_cycles": shift.pair,
        "problems": list(problems),
    }


def launch_name(meta: Mapping[str, Any]) -> str:
    """The launch's name from the kernel's ``launch_metadata`` (Proton's hook="triton"), or the kernel's."""
    name = meta.get("name")
    return name if isinstance(name, str) and name else str(meta["kernel"])


def host_scopes(meta: Mapping[str, Any]) -> tuple[str, ...]:
    """The host scopes open when the launch was made, outermost first (none in older sessions)."""
    scopes = meta.get("host_scope") or ()
    return tuple(str(scope) for scope in scopes) if isinstance(scopes, (list, tuple)) else ()


def launch_metrics(meta: Mapping[str, Any]) -> dict[str, float] | None:
    """The numbers ``launch_metadata`` gave besides the name (e.g. "flops", "bytes"); None if none."""
    metrics = meta.get("launch_metrics")
    if not isinstance(metrics, Mapping):
        return None
    numbers = {
        str(key): value
        for key, value in metrics.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }
    return numbers or None


def config_text(config: Mapping[str, Any] | None) -> str | None:
    """An autotuner config in one short line: ``BLOCK_M=128 BLOCK_N=64 num_warps=4 num_stages=3``."""
    if not config:
        return None
    settings = {**(config.get("kwargs") or {}), **{k: v for k, v in config.items() if k != "kwargs"}}
    return " ".join(f"{name}={value}" for name, value in settings.items() if value is not None)


def frame(
    columns: dict[str, np.ndarray], names: Sequence[str], categories: Mapping[str, list[str]]
) -> pd.DataFrame:
    """A DataFrame of the named columns: ``<name>_missing`` masks make nullable Int64 columns,
    ``categories`` make categoricals of codes, and ``kind`` is the unmatched kind."""
    import pandas as pd

    data = {}
    for name in names:
        values = columns[name]
        if name in categories:
            data[name] = pd.Categorical.from_codes(values, categories=categories[name])
        elif name == "kind":
            data[name] = pd.Categorical.from_codes(values, categories=list(UNMATCHED_KINDS.values()))
        elif name in _INT64_MASKED and f"{name}_missing" in columns:
            missing = columns[f"{name}_missing"]
            data[name] = pd.arrays.IntegerArray(np.where(missing, 0, values).astype(np.int64), missing.copy())
        else:
            data[name] = values
    # copy=False: one block per column, as built; consolidating would copy every column.
    return pd.DataFrame(data, columns=list(names), copy=False)
