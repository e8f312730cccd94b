"""How the report writes a number and a table."""

from __future__ import annotations

import math
from typing import Any


def fmt(value: Any, spec: str | None = None) -> str:
    """A number for the report: ints with separators, floats to ``spec`` (default .1f)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and spec is None:
        return f"{value:,}"
    return format(value, spec or ".1f") if isinstance(value, (int, float)) else str(value)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def timing_cells(entry: dict[str, Any], labels: list[str]) -> list[str]:
    """A kernel's timing cells: plain's median ms, then each variant's overhead in %, each with
    the spread of the rounds in parentheses (FAIL where a variant has no overhead)."""
    timing = entry.get("timing", {})
    plain = timing.get("plain")
    cells = [f"{fmt(plain['median_ms'], '.4f')} ({fmt(plain['spread_pct'])}%)" if plain else "-"]
    for label in labels:
        value = entry.get("overhead_pct", {}).get(label)
        spread = timing.get(label, {}).get("spread_pct")
        cells.append(f"{fmt(value, '+.1f')} ({fmt(spread)}%)" if value is not None else "FAIL")
    return cells
