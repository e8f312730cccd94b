"""Events, marks and values of a session as columns and pandas tables.

``pipeline`` decodes launches group by group; for a group whose kernel declares events or marks
(its name table says so), ``async_parts`` pairs the event records across the units of each CTA
(``pairing.async_events``), picks out the marks, and converts cycles to nanoseconds with the session's
fitted SM clocks, as ``table`` does for scopes; ``*_rel_ns`` count from the session's first unit
start. The chunks carry these parts to the Perfetto writer; ``frames`` joins them into tables.

``async_events``: one row per event: a start and an end of one instance (``index``) of an event,
each with the warp and unit that recorded it, and ``status`` "matched"; or a start with no end
("no end") or an end with no start ("no start"), whose missing side is NA. An instance that one
warp starts and several warps end (a producer and a consumer partition of several warps) is one
row per ending warp. ``marks``: one row per mark without a value; ``values``: one row per mark
with one, ``value`` the number (int32, uint32 and float32 values are all exact as float64),
``value_type`` how its bits read ("i32", "u32", "f32"), ``bits`` the raw 32 bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from proton_ik.contract.metadata import KernelMetadata
from proton_ik.contract.tags import ValueType
from proton_ik.viewer.decode import RecordTable, UnitTable
from proton_ik.viewer.pairing import MATCHED, STATUSES, Marks, Spans, marks, pair_events
from proton_ik.viewer.tables.timebase import SmClocks

if TYPE_CHECKING:  # imported where it is used: a render worker never imports it
    import pandas as pd

Columns = dict[str, np.ndarray]
ASYNC_EVENT_COLUMNS = [
    "kernel", "launch", "host_scope", "cta", "sm", "cluster", "cluster_rank", "event", "event_id", "index", "status", "start_warp",
    "start_unit", "end_warp", "end_unit", "start_cycles", "end_cycles", "dur_cycles", "start_ns", "end_ns",
    "dur_ns", "start_rel_ns", "end_rel_ns", "line", "start_record", "end_record",
]  # fmt: skip
MARK_COLUMNS = [
    "kernel", "launch", "host_scope", "cta", "sm", "cluster", "cluster_rank", "warp", "unit", "mark", "mark_id", "cycles", "ns",
    "rel_ns", "line", "record",
]  # fmt: skip
VALUE_COLUMNS = [*MARK_COLUMNS, "value", "value_type", "bits"]
VALUE_TYPE_NAMES = {int(ValueType.INT32): "i32", int(ValueType.UINT32): "u32", int(ValueType.FLOAT32): "f32"}
_LABELS = ("kernel", "host_scope", "event", "mark", "status", "value_type")
_NULLABLE = {
    "start_warp", "start_unit", "end_warp", "end_unit", "start_cycles", "end_cycles", "dur_cycles", "start_ns",
    "end_ns", "dur_ns", "start_rel_ns", "end_rel_ns", "line", "start_record", "end_record", "ns", "rel_ns",
}  # fmt: skip


@dataclass(frozen=True)
class AsyncParts:
    """The events, marks and values columns of launches decoded together (a ``pipeline`` group),
    as ``frames`` joins them and the Perfetto writer draws them. A column ``<name>_missing``
    masks the rows where ``<name>`` has no value."""

    events: Columns
    marks: Columns
    values: Columns


def declares_events(kernel: KernelMetadata) -> bool:
    """Whether a kernel's name table has events or marks (a trace with none has no parts)."""
    return any(scope.kind != "scope" for scope in kernel.scopes)


def async_parts(
    units: UnitTable,
    records: RecordTable,
    kernel: KernelMetadata,
    labels: Columns,
    unit_rows: np.ndarray,
    clocks: SmClocks,
    start_ns: int,
) -> AsyncParts | None:
    """The columns of a group's events, marks and values; None where its kernel declares none.
    ``labels``: per piece of the group (``units.launch``), its "kernel", "launch" number and
    "host_scope"; ``unit_rows``: each unit's row in ``clocks``."""
    if not declares_events(kernel):
        return None
    names = {scope.id: scope.name for scope in kernel.scopes}
    lines = {scope.id: -1 if scope.line is None else scope.line for scope in kernel.scopes}
    timing = _Timing(units, unit_rows, clocks, start_ns, kernel.warps_per_unit, labels)
    spans, found = pair_events(records, units), marks(records)
    valued = found.has_value
    return AsyncParts(
        _span_columns(spans, timing, names, lines),
        _mark_columns(_subset(found, ~valued), timing, names, lines),
        _value_columns(_subset(found, valued), timing, names, lines),
    )


def frames(parts: Sequence[AsyncParts]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The async events, marks and values tables (the module docstring's columns), in launch and
    time order."""
    return (
        _frame([part.events for part in parts], ASYNC_EVENT_COLUMNS, "at_cycles"),
        _frame([part.marks for part in parts], MARK_COLUMNS, "cycles"),
        _frame([part.values for part in parts], VALUE_COLUMNS, "cycles"),
    )


def parts_of(async_events: pd.DataFrame, marks: pd.DataFrame, values: pd.DataFrame) -> AsyncParts:
    """``frames``' tables as the columns the trace writers draw (for ``Trace.write_perfetto`` and
    ``Trace.write_chrome``)."""
    return AsyncParts(*(_columns(table) for table in (async_events, marks, values)))


def _columns(table: pd.DataFrame) -> Columns:
    import pandas as pd

    columns: Columns = {}
    for name in table.columns:
        column = table[name]
        if isinstance(column.dtype, pd.CategoricalDtype):
            columns[name] = column.astype(object).to_numpy()
        elif name in _NULLABLE:
            columns[f"{name}_missing"] = column.isna().to_numpy()
            columns[name] = column.fillna(0).to_numpy(np.int64)
        else:
            columns[name] = column.to_numpy()
    return columns


class _Timing:
    """Where each unit row ran, what its piece is called, and how its clocks convert."""

    def __init__(
        self,
        units: UnitTable,
        rows: np.ndarray,
        clocks: SmClocks,
        start_ns: int,
        warps_per_unit: int,
        labels: Columns,
    ):
        self.units, self.rows, self.clocks, self.start_ns = units, rows, clocks, start_ns
        self.warps_per_unit = warps_per_unit
        self.labels = labels

    def ns(self, unit_row: np.ndarray, cycles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Nanoseconds of ``cycles`` read by each unit (-1: none), and where there are none."""
        row = np.where(unit_row >= 0, self.rows[np.maximum(unit_row, 0)], -1)
        missing = row < 0
        out = np.zeros(len(row), np.int64)
        out[~missing] = self.clocks.convert(row[~missing], cycles[~missing])
        return out, missing

    def where(self, unit_row: np.ndarray) -> Columns:
        """Kernel, launch, host scope, CTA, SM and cluster of each unit row."""
        units = self.units
        piece = units.launch[unit_row]
        return {
            **{key: column[piece] for key, column in self.labels.items()},
            "cta": units.cta[unit_row],
            "sm": units.smid[unit_row],
            "cluster": units.cluster[unit_row],
            "cluster_rank": units.cluster_rank[unit_row],
        }


def _names(ids: np.ndarray, names: dict[int, str], what: str) -> np.ndarray:
    table = {i: names.get(i, f"<{what} {i}>") for i in np.unique(ids).tolist()}
    return np.array([table[i] for i in ids.tolist()], dtype=object)


def _lines(ids: np.ndarray, lines: dict[int, int]) -> np.ndarray:
    return np.array([lines.get(i, -1) for i in ids.tolist()], dtype=np.int64)


def _span_columns(spans: Spans, timing: _Timing, names: dict, lines: dict) -> Columns:
    units = timing.units
    has_start, has_end = spans.start_unit_row >= 0, spans.end_unit_row >= 0
    either = np.where(has_start, spans.start_unit_row, spans.end_unit_row)
    start_ns, start_missing = timing.ns(spans.start_unit_row, spans.start_clock)
    end_ns, end_missing = timing.ns(spans.end_unit_row, spans.end_clock)
    both = spans.status == MATCHED
    start_unit = np.where(has_start, units.unit[np.maximum(spans.start_unit_row, 0)], 0)
    end_unit = np.where(has_end, units.unit[np.maximum(spans.end_unit_row, 0)], 0)
    columns = {
        **timing.where(either),
        "event": _names(spans.event, names, "event"),
        "event_id": spans.event,
        "index": spans.instance,
        "status": np.array(list(STATUSES.values()), dtype=object)[spans.status],
        "start_warp": start_unit * timing.warps_per_unit,
        "start_unit": start_unit,
        "end_warp": end_unit * timing.warps_per_unit,
        "end_unit": end_unit,
        "start_cycles": spans.start_clock,
        "end_cycles": spans.end_clock,
        "dur_cycles": spans.end_clock - spans.start_clock,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "dur_ns": end_ns - start_ns,
        "start_rel_ns": start_ns - timing.start_ns,
        "end_rel_ns": end_ns - timing.start_ns,
        "line": _lines(spans.event, lines),
        "start_record": spans.start_record,
        "end_record": spans.end_record,
        "at_cycles": np.where(has_start, spans.start_clock, spans.end_clock),  # the order of rows
    }
    no_start, no_end = ~has_start | start_missing, ~has_end | end_missing
    masks = {
        **dict.fromkeys(("start_warp", "start_unit", "start_cycles", "start_record"), ~has_start),
        **dict.fromkeys(("end_warp", "end_unit", "end_cycles", "end_record"), ~has_end),
        **dict.fromkeys(("start_ns", "start_rel_ns"), no_start),
        **dict.fromkeys(("end_ns", "end_rel_ns"), no_end),
        "dur_cycles": ~both,
        "dur_ns": no_start | no_end | ~both,
        "line": columns["line"] < 0,
    }
    return {**columns, **{f"{key}_missing": mask for key, mask in masks.items()}}


def _subset(found: Marks, keep: np.ndarray) -> Marks:
    return Marks(*(getattr(found, name)[keep] for name in Marks.__dataclass_fields__))


def _mark_columns(found: Marks, timing: _Timing, names: dict, lines: dict) -> Columns:
    units, row = timing.units, found.unit_row
    ns, missing = timing.ns(row, found.clock)
    line = _lines(found.mark, lines)
    return {
        **timing.where(row),
        "warp": units.unit[row] * timing.warps_per_unit,
        "unit": units.unit[row],
        "mark": _names(found.mark, names, "mark"),
        "mark_id": found.mark,
        "cycles": found.clock,
        "ns": ns,
        "ns_missing": missing,
        "rel_ns": ns - timing.start_ns,
        "rel_ns_missing": missing,
        "line": line,
        "line_missing": line < 0,
        "record": found.record,
    }


def _value_columns(found: Marks, timing: _Timing, names: dict, lines: dict) -> Columns:
    columns = _mark_columns(found, timing, names, lines)
    bits = found.value.astype(np.uint32)
    numbers = np.where(
        found.value_type == ValueType.FLOAT32,
        bits.view(np.float32).astype(np.float64),
        np.where(found.value_type == ValueType.INT32, bits.view(np.int32), bits).astype(np.float64),
    )
    kinds = [VALUE_TYPE_NAMES.get(t, f"<type {t}>") for t in found.value_type.tolist()]
    return {**columns, "value": numbers, "value_type": np.array(kinds, dtype=object), "bits": bits}


def _frame(parts: list[Columns], names: list[str], time: str) -> pd.DataFrame:
    import pandas as pd

    keys = {*names, time, *(key for part in parts for key in part if key.endswith("_missing"))}
    columns = {
        name: np.concatenate([part[name] for part in parts]) if parts else np.zeros(0, np.int64)
        for name in keys
    }
    order = np.lexsort((columns[time], columns["launch"])) if parts else np.zeros(0, np.int64)
    data: dict[str, object] = {}
    for name in names:
        values = columns[name][order]
        if name in _LABELS:
            data[name] = pd.Categorical(values.astype(object) if len(values) else [])
        elif name in _NULLABLE:
            missing = columns.get(f"{name}_missing", np.zeros(len(columns[name]), bool))[order]
            data[name] = pd.arrays.IntegerArray(np.where(missing, 0, values).astype(np.int64), missing)
        else:
            data[name] = values
    return pd.DataFrame(data, columns=names)
