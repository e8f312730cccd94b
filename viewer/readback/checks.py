"""What the values in a trace file proton_ik wrote must be, and how a file that breaks them is
refused: shared by the Chrome and Perfetto readers (``chrome``, ``perfetto``).

Each check raises ``SessionFileError`` naming the file and what is wrong in it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal, overload

from proton_ik.viewer.session_file import SessionFileError

MAX_WARPS_PER_UNIT = 1 << 10  # a unit is a block of a CTA's warps; a CTA has at most 32
INT64_RANGE = (-(1 << 63), (1 << 63) - 1)
NOT_A_TRACE = "is not a proton_ik session (.pik), Chrome JSON (.json) or Perfetto (.pftrace) file"


def refuse(path: Path, problem: str) -> SessionFileError:
    return SessionFileError(
        f"{path}: {problem}. Show or convert the session file (.pik) it was written from, or write "
        "the trace again"
    )


@overload
def whole_number(value: object, what: str, path: Path, *, missing: Literal[False] = False) -> int: ...


@overload
def whole_number(value: object, what: str, path: Path, *, missing: bool) -> int | None: ...


def whole_number(value: object, what: str, path: Path, *, missing: bool = False) -> int | None:
    """A JSON or annotation value that must be a whole number in int64 (or None if ``missing``)."""
    if missing and (value is None or (isinstance(value, float) and math.isnan(value))):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a pandas column with gaps is float: 7.0 is launch 7
    if isinstance(value, bool) or not isinstance(value, int) or not INT64_RANGE[0] <= value <= INT64_RANGE[1]:
        raise refuse(path, f"{what} is {value!r:.60}, not a whole number")
    return value


def checked_warps_per_unit(value: object, what: str, path: Path) -> int:
    """A launch's warps per unit (1 where the trace does not say), which numbers its units."""
    width = whole_number(value, what, path, missing=True)
    if width is None:
        return 1
    if not 1 <= width <= MAX_WARPS_PER_UNIT:
        raise refuse(path, f"{what} is {width}, not 1 to {MAX_WARPS_PER_UNIT}")
    return width
