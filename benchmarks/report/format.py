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
