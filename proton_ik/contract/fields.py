"""The value rules of the JSON that the writer and the reader exchange: whole numbers in a range,
printable text, tables of plain values. A reader applies them to files that may be damaged or
hostile, so each check names the field, and shows a bad value bounded."""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from typing import Any

MAX_TEXT = 4096  # characters in a kernel name, a reason or a config value
MAX_INT64 = (1 << 63) - 1
SCALARS = (str, int, float, bool, type(None))


class SchemaError(ValueError):
    """A field with the wrong type or an impossible value; the message names it."""


def mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise SchemaError(f"{what} is {shown(value)}, not a JSON object")
    return value


def integer(
    table: Mapping[str, Any],
    key: str,
    where: str,
    low: int,
    high: int,
    *,
    required: bool = True,
    nullable: bool = False,
) -> Any:
    """A whole number in range; an optional one may be left out (or be null where ``nullable``)."""
    if key not in table and not required:
        return None
    value = table.get(key)
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SchemaError(f"{where}: '{key}' is {shown(value)}, not a whole number from {low} to {high}")
    return value


def text(table: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> Any:
    value = table.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or len(value) > MAX_TEXT or not value.isprintable():
        raise SchemaError(
            f"{where}: '{key}' is {shown(value)}, not printable text of at most {MAX_TEXT} characters"
        )
    return value


def plain_table(value: object) -> bool:
    """Whether ``value`` is a JSON object of plain values (no nested tables or lists)."""
    return isinstance(value, dict) and all(isinstance(v, SCALARS) for v in value.values())


def shown(value: object) -> str:
    """A value from a hostile file, bounded: ``reprlib`` stops at a few levels and items, so a
    deeply nested or huge value neither recurses nor floods the message."""
    bounded = reprlib.repr(value)
    bounded = bounded if len(bounded) <= 60 else f"{bounded[:57]}..."
    return f"{bounded} (a {type(value).__name__})"
