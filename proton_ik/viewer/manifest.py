"""The session manifest's schema: every field the viewer reads, with its type and range, and the
size each launch's buffer must have, checked before any buffer is read.

``check_manifest`` takes the parsed ``manifest.json`` and the uncompressed size of every zip
member, and raises ``ManifestError`` naming the first field that is wrong. What it accepts, the
viewer can decode in memory proportional to the file: each launch has a member of its own, and
the member's size agrees with the shape its metadata declares (``data_bytes``).
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proton_ik.contract.layout import (
    CTA_HEADER_BYTES,
    ENTRY_BYTES,
    MAX_SCOPES,
    UNIT_HEADER_BYTES,
    VERSION,
    BufferLayout,
)
from proton_ik.dialect.pik import scope_name_problem

FORMAT_NAME = "proton_ik-session"
FORMAT_VERSION = 1
STORED_KEY, TRIMMED = "stored", "trimmed"  # a launch stored by viewer.trim, not raw
MAX_NPY_HEADER = 1 << 16  # bytes an .npy header may take before a launch's data
MAX_TEXT = 4096  # characters in a kernel name, a reason or a config value
MAX_WARPS = 64
MAX_INT64 = (1 << 63) - 1
MAX_CYCLES = (1 << 32) - 1  # a time shift longer than the 32-bit clock's wrap is no calibration
SCALARS = (str, int, float, bool, type(None))


class ManifestError(ValueError):
    """A manifest field with the wrong type or an impossible value; the message names it."""


@dataclass(frozen=True)
class Shape:
    """What a launch's metadata says its stored array holds: at least ``low`` and at most
    ``high`` bytes, a whole number of ``multiple`` bytes (raw buffers are whole CTAs)."""

    low: int
    high: int | None
    multiple: int

    def problem(self, size: int) -> str | None:
        """Why ``size`` data bytes cannot be this launch's buffer, or None."""
        if size < self.low or (self.high is not None and size > self.high) or size % self.multiple:
            wanted = f"{self.low}" if self.high == self.low else f"{self.low} to {self.high}"
            return f"holds {size} bytes of data, where its metadata declares {wanted} (in steps of {self.multiple})"
        return None


def check_manifest(manifest: object, member_sizes: Mapping[str, int]) -> list[Shape]:
    """Raise ``ManifestError`` unless ``manifest`` is a session manifest whose launches fit the
    members (name -> uncompressed bytes); return each launch's declared shape."""
    manifest = _mapping(manifest, "the manifest")
    if manifest.get("format") != FORMAT_NAME:
        raise ManifestError(f"its manifest does not name the format '{FORMAT_NAME}'")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        shown = _shown(version) if not isinstance(version, int) else str(version)
        raise ManifestError(
            f"it is session format version {shown}; this proton_ik reads version {FORMAT_VERSION}. "
            "Open it with the proton_ik release that wrote it"
        )
    check_info(_mapping(manifest.get("info", {}), "info"))
    launches = manifest.get("launches", [])
    if not isinstance(launches, list):
        raise ManifestError(f"'launches' is a {type(launches).__name__}, not a list")
    shapes, seen = [], set()
    for number, item in enumerate(launches):
        where = f"launch #{number}"
        item = _mapping(item, where)
        entry = item.get("entry")
        if not isinstance(entry, str) or entry not in member_sizes:
            raise ManifestError(
                f"{where} names the buffer {reprlib.repr(entry)}, which the file does not hold"
            )
        if entry in seen:
            raise ManifestError(f"{where} names the buffer {entry}, which an earlier launch names too")
        seen.add(entry)
        where = f"{where} ({entry})"
        shape = check_meta(_mapping(item.get("meta"), f"{where}: meta"), where)
        problem = _npy_size_problem(member_sizes[entry], shape)
        if problem:
            raise ManifestError(f"{where} {problem}")
        shapes.append(shape)
    return shapes


def check_info(info: Mapping[str, Any]) -> None:
    """The session info fields the viewer reads."""
    _text(info, "name", "info", required=False)
    _text(info, "device", "info", required=False)
    shift = info.get("time_shift_cycles", 0)
    parts = shift if isinstance(shift, Mapping) else {"single": shift, "pair": shift}
    for kind in ("single", "pair"):
        _integer(parts, kind, "info.time_shift_cycles", 0, MAX_CYCLES)
    unrecorded = info.get("unrecorded") or []
    if not isinstance(unrecorded, list):
        raise ManifestError(f"info.unrecorded is a {type(unrecorded).__name__}, not a list")
    for number, item in enumerate(unrecorded):
        where = f"info.unrecorded[{number}]"
        item = _mapping(item, where)
        _text(item, "kernel", where)
        _text(item, "reason", where)
        _integer(item, "count", where, 0, MAX_INT64)


def check_meta(meta: Mapping[str, Any], where: str) -> Shape:
    """One launch's metadata; returns the byte sizes its stored array may have."""
    _integer(meta, "launch", where, 0, MAX_INT64)
    kernel = _text(meta, "kernel", where)
    if not kernel:
        raise ManifestError(f"{where}: its kernel name is empty")
    where = f"{where}, kernel {kernel}"
    _integer(meta, "stream", where, 0, (1 << 64) - 1, required=False, nullable=True)
    for key in ("device", "graph", "replay"):
        _integer(meta, key, where, 0, MAX_INT64, required=False, nullable=True)
    _integer(meta, "num_warps", where, 1, MAX_WARPS, required=False)
    num_ctas = _integer(meta, "num_ctas", where, 0, MAX_INT64, required=False)
    grid = meta.get("grid")
    if grid is not None and (
        not isinstance(grid, list)
        or not 1 <= len(grid) <= 3
        or not all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 1 << 32 for g in grid)
    ):
        raise ManifestError(f"{where}: grid is {reprlib.repr(grid)}, not a list of 1 to 3 whole numbers >= 0")
    _config(meta.get("config"), where)
    layout = check_profile(_mapping(meta.get("profile"), f"{where}: profile"), where)
    stored = meta.get(STORED_KEY)
    if stored is not None and stored != TRIMMED:
        raise ManifestError(
            f"{where}: '{STORED_KEY}' is {reprlib.repr(stored)}; the only stored form is '{TRIMMED}'"
        )
    if num_ctas is None and grid:
        num_ctas = math.prod(grid)
    if stored == TRIMMED:
        if num_ctas is None:
            raise ManifestError(f"{where}: a trimmed launch must say how many CTAs it holds (num_ctas)")
        headers = num_ctas * (CTA_HEADER_BYTES + layout.units * UNIT_HEADER_BYTES)
        return Shape(headers, headers + num_ctas * layout.units * layout.capacity * ENTRY_BYTES, ENTRY_BYTES)
    if num_ctas is None:
        return Shape(0, None, layout.cta_bytes)
    return Shape(num_ctas * layout.cta_bytes, num_ctas * layout.cta_bytes, layout.cta_bytes)


def check_profile(profile: Mapping[str, Any], where: str) -> BufferLayout:
    """A kernel's 'proton_ik' metadata: its buffer layout and scope table."""
    layout = _mapping(profile.get("layout"), f"{where}: profile.layout")
    if layout.get("version") != VERSION:
        raise ManifestError(
            f"{where}: buffer layout version {reprlib.repr(layout.get('version'))} is not the version {VERSION} "
            "this proton_ik reads; render it with the proton_ik release that captured it"
        )
    units = _integer(layout, "units", f"{where}: profile.layout", 1, 1 << 16)
    capacity = _integer(layout, "capacity", f"{where}: profile.layout", 1, 1 << 32)
    try:
        buffer_layout = BufferLayout(units=units, capacity=capacity)
    except ValueError as error:
        raise ManifestError(f"{where}: {error}") from None
    cta_bytes = layout.get("cta_bytes", buffer_layout.cta_bytes)
    if cta_bytes != buffer_layout.cta_bytes:
        raise ManifestError(
            f"{where}: profile.layout.cta_bytes is {reprlib.repr(cta_bytes)}, but {units} units of {capacity} "
            f"entries take {buffer_layout.cta_bytes}"
        )
    _integer(profile, "warps_per_unit", f"{where}: profile", 1, MAX_WARPS, required=False)
    _integer(profile, "num_warps", f"{where}: profile", 1, MAX_WARPS, required=False)
    _text(profile, "mode", f"{where}: profile", required=False)
    capacity_info = profile.get("capacity")
    if capacity_info is not None and not (
        isinstance(capacity_info, dict) and all(isinstance(v, SCALARS) for v in capacity_info.values())
    ):
        raise ManifestError(
            f"{where}: profile.capacity is {reprlib.repr(capacity_info)}, not a table of plain values"
        )
    scopes = profile.get("scopes", [])
    if not isinstance(scopes, list):
        raise ManifestError(f"{where}: profile.scopes is a {type(scopes).__name__}, not a list")
    ids: set[int] = set()
    for number, scope in enumerate(scopes):
        here = f"{where}: profile.scopes[{number}]"
        scope = _mapping(scope, here)
        scope_id = _integer(scope, "id", here, 0, MAX_SCOPES - 1)
        if scope_id in ids:
            raise ManifestError(f"{here}: scope id {scope_id} is listed twice")
        ids.add(scope_id)
        problem = scope_name_problem(scope.get("name"))
        if problem:
            raise ManifestError(f"{here}: {problem}")
        _integer(scope, "line", here, 0, 1 << 31, required=False, nullable=True)
    return buffer_layout


def _npy_size_problem(size: int, shape: Shape) -> str | None:
    """Whether an .npy member of ``size`` bytes can hold a launch of ``shape``: its header is
    at least 10 bytes (magic, version, length) and at most ``MAX_NPY_HEADER``."""
    low = shape.low + 10
    high = None if shape.high is None else shape.high + MAX_NPY_HEADER
    if size < low or (high is not None and size > high):
        wanted = f"at least {low}" if high is None else f"{low} to {high}"
        return f"is {size} bytes, where its metadata declares an .npy array of {wanted} bytes"
    return None


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError(f"{what} is {_shown(value)}, not a JSON object")
    return value


def _integer(
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
        raise ManifestError(f"{where}: '{key}' is {_shown(value)}, not a whole number from {low} to {high}")
    return value


def _text(table: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> Any:
    value = table.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or len(value) > MAX_TEXT or not value.isprintable():
        raise ManifestError(
            f"{where}: '{key}' is {_shown(value)}, not printable text of at most {MAX_TEXT} characters"
        )
    return value


def _config(config: object, where: str) -> None:
    """An autotuner config: plain values, and its kernel arguments under 'kwargs'."""
    if config is None:
        return
    values = dict(config) if isinstance(config, dict) else None
    kwargs = values.pop("kwargs", None) if values is not None else None
    if (
        values is None
        or not all(isinstance(v, SCALARS) for v in values.values())
        or not (kwargs is None or isinstance(kwargs, dict))
        or not all(isinstance(v, SCALARS) for v in (kwargs or {}).values())
    ):
        raise ManifestError(f"{where}: config is {_shown(config)}, not a table of plain values")


def _shown(value: object) -> str:
    """A value from a hostile file, bounded: ``reprlib`` stops at a few levels and items, so a
    deeply nested or huge value neither recurses nor floods the message."""
    text = reprlib.repr(value)
    text = text if len(text) <= 60 else f"{text[:57]}..."
    return f"{text} (a {type(value).__name__})"
