"""pandas tables of one launch: scope events, unit lifetimes, unmatched records, launch statistics.

Times are absolute %globaltimer nanoseconds (int64), converted from cycles with the launch's
per-SM clock fits, so events and lifetimes share one time axis; ``*_rel_ns`` columns, added
once the whole session is known, count from the session's first unit start.

Event columns that need a word: ``warp`` is the unit's first warp; ``depth`` counts the scopes
open on the unit when this one began; ``lane`` is 0 unless the scope overlaps an earlier one
without nesting (trace writers put lanes on separate tracks); ``begin_record`` and
``end_record`` number the unit's records, overwritten ones included; ``line`` is the source
line of the scope's first marker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from proton_ik.viewer.decode import CtaTable, UnitTable
from proton_ik.viewer.events import (
    LOST_TO_RING,
    UNMATCHED_BEGIN,
    UNMATCHED_END,
    UNMATCHED_KINDS,
    Pairs,
    Unmatched,
)
from proton_ik.viewer.timebase import SmClocks

EVENT_COLUMNS = [
    "kernel", "launch", "cta", "sm", "warp", "unit", "lane", "scope", "scope_id", "depth",
    "begin_cycles", "end_cycles", "dur_cycles", "begin_ns", "end_ns", "dur_ns", "line",
    "begin_record", "end_record",
]  # fmt: skip


@dataclass(frozen=True)
class ScopeTable:
    """A kernel's scope ids as names and source lines, tolerant of ids the table lacks."""

    names: dict[int, str]
    lines: dict[int, int | None]

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any]) -> ScopeTable:
        scopes = profile.get("scopes", [])
        return cls(
            {int(s["id"]): str(s["name"]) for s in scopes}, {int(s["id"]): s.get("line") for s in scopes}
        )

    def name_of(self, ids: np.ndarray) -> np.ndarray:
        unique, inverse = np.unique(ids, return_inverse=True)
        names = np.array([self.names.get(int(i), f"<scope {int(i)}>") for i in unique], dtype=object)
        return names[inverse]

    def line_of(self, ids: np.ndarray) -> pd.arrays.IntegerArray:
        unique, inverse = np.unique(ids, return_inverse=True)
        lines = np.array([self.lines.get(int(i)) for i in unique], dtype=object)
        return pd.array(lines[inverse], dtype="Int64")

    def unknown(self, ids: np.ndarray) -> np.ndarray:
        return ~np.isin(ids, np.fromiter(self.names, dtype=np.int64, count=len(self.names)))


def warps_per_unit(meta: Mapping[str, Any]) -> int:
    return int(meta["profile"].get("warps_per_unit", 1))


def events_frame(meta: Mapping[str, Any], units: UnitTable, pairs: Pairs, clocks: SmClocks) -> pd.DataFrame:
    """One row per scope event of a launch."""
    scopes = ScopeTable.from_profile(meta["profile"])
    row = pairs.unit_row
    sm = units.smid[row]
    begin_ns = clocks.to_ns(sm, pairs.begin_clock)
    end_ns = clocks.to_ns(sm, pairs.end_clock)
    return pd.DataFrame(
        {
            "kernel": str(meta["kernel"]),
            "launch": int(meta["launch"]),
            "cta": units.cta[row],
            "sm": sm,
            "warp": units.unit[row] * warps_per_unit(meta),
            "unit": units.unit[row],
            "lane": pairs.lane,
            "scope": scopes.name_of(pairs.scope),
            "scope_id": pairs.scope,
            "depth": pairs.depth,
            "begin_cycles": pairs.begin_clock,
            "end_cycles": pairs.end_clock,
            "dur_cycles": pairs.end_clock - pairs.begin_clock,
            "begin_ns": begin_ns,
            "end_ns": end_ns,
            "dur_ns": end_ns - begin_ns,
            "line": scopes.line_of(pairs.scope),
            "begin_record": pairs.begin_index,
            "end_record": pairs.end_index,
        },
        columns=EVENT_COLUMNS,
    )


def units_frame(meta: Mapping[str, Any], units: UnitTable, clocks: SmClocks) -> pd.DataFrame:
    """One row per unit of the launch's valid CTAs: when it ran and what it recorded."""
    # A unit that failed on an SM where no unit finished has no time conversion.
    timed = clocks.covers(units.smid)
    start_ns = np.zeros(len(units), dtype=np.int64)
    end_ns = np.zeros(len(units), dtype=np.int64)
    start_ns[timed] = clocks.to_ns(units.smid[timed], units.start_clock[timed])
    end_ns[timed] = clocks.to_ns(units.smid[timed], units.end_clock[timed])
    unfinished = ~units.finished
    return pd.DataFrame(
        {
            "kernel": str(meta["kernel"]),
            "launch": int(meta["launch"]),
            "cta": units.cta,
            "sm": units.smid,
            "warp": units.unit * warps_per_unit(meta),
            "unit": units.unit,
            "start_cycles": units.start_clock,
            "end_cycles": _masked(units.end_clock, unfinished),
            "start_ns": _masked(start_ns, ~timed),
            "end_ns": _masked(end_ns, unfinished),
            "dur_ns": _masked(end_ns - start_ns, unfinished),
            "globaltimer_start_ns": units.start_time,
            "globaltimer_end_ns": _masked(units.end_time, unfinished),
            "count": _masked(units.count, ~units.decoded),
            "kept": units.kept,
            "overwritten": units.overwritten,
            "finished": units.finished,
            "decoded": units.decoded,
        }
    )


def unmatched_frame(meta: Mapping[str, Any], units: UnitTable, unmatched: Unmatched) -> pd.DataFrame:
    """One row per record left without a partner, with why."""
    scopes = ScopeTable.from_profile(meta["profile"])
    row = unmatched.unit_row
    return pd.DataFrame(
        {
            "kernel": str(meta["kernel"]),
            "launch": int(meta["launch"]),
            "cta": units.cta[row],
            "sm": units.smid[row],
            "warp": units.unit[row] * warps_per_unit(meta),
            "unit": units.unit[row],
            "scope": scopes.name_of(unmatched.scope),
            "scope_id": unmatched.scope,
            "record": unmatched.index,
            "cycles": unmatched.clock,
            "kind": pd.Categorical.from_codes(unmatched.kind, categories=list(UNMATCHED_KINDS.values())),
            "line": scopes.line_of(unmatched.scope),
        }
    )


def launch_stats(
    meta: Mapping[str, Any],
    ctas: CtaTable,
    units: UnitTable,
    records: int,
    pairs: Pairs,
    unmatched: Unmatched,
    clocks: SmClocks,
    problems: list[str],
) -> dict[str, Any]:
    """One row of the launch table: what was captured, lost and inferred."""
    valid = np.flatnonzero(ctas.valid)
    grid = meta.get("grid") or (ctas.nctaid[valid[0]].tolist() if valid.size else None)
    kinds = np.bincount(unmatched.kind, minlength=len(UNMATCHED_KINDS))
    return {
        "launch": int(meta["launch"]),
        "kernel": str(meta["kernel"]),
        "stream": meta.get("stream"),
        "grid": None if grid is None else "x".join(str(int(g)) for g in grid),
        "warps_per_unit": warps_per_unit(meta),
        "ctas": len(ctas.slot),
        "ctas_missing": int((~ctas.ran).sum()),
        "ctas_bad_header": int((ctas.ran & ~ctas.valid).sum()),
        "units": len(units),
        "units_unfinished": int((~units.finished).sum()),
        "units_skipped": int((~units.decoded).sum()),
        "records": records,
        "overwritten": int(units.overwritten.sum()),
        "events": len(pairs),
        "overlapping": int((pairs.lane > 0).sum()),
        "unmatched_begin": int(kinds[UNMATCHED_BEGIN]),
        "unmatched_end": int(kinds[UNMATCHED_END]),
        "lost_to_ring": int(kinds[LOST_TO_RING]),
        "mhz": clocks.mhz,
        "clock_source": clocks.rate_source,
        "problems": list(problems),
    }


def _masked(values: np.ndarray, missing: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(np.where(missing, 0, values).astype(np.int64), missing.astype(bool))
