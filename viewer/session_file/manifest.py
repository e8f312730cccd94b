"""The session manifest's schema: every field the viewer reads, with its type and range, and the
size each launch's buffer must have, checked before any buffer is read.

``check_manifest`` takes the parsed ``manifest.json`` and the uncompressed size of every zip
member, and raises ``ManifestError`` naming the first field that is wrong. What it accepts, the
viewer can decode in memory proportional to the file: each launch has a member of its own, and
the member's size agrees with the shape its metadata declares (``data_bytes``). The names and
versions come from ``contract.session_format``; each launch's kernel metadata is read by
``contract.metadata``, whose value rules (``contract.fields``) these checks share.
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proton_ik.contract.fields import MAX_INT64, SCALARS, SchemaError, integer, mapping, shown, text
from proton_ik.contract.layout import CTA_HEADER_BYTES, UNIT_HEADER_BYTES
from proton_ik.contract.metadata import MAX_WARPS, KernelMetadata
from proton_ik.contract.session_format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MAX_NPY_HEADER,
    READ_VERSIONS,
    STORED_KEY,
    TRIMMED,
    UNRECORDED,
)

MAX_CYCLES = (1 << 32) - 1  # a time shift longer than the 32-bit clock's wrap is no calibration
ManifestError = SchemaError  # a manifest field breaks the session format's rules


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
    manifest = mapping(manifest, "the manifest")
    if manifest.get("format") != FORMAT_NAME:
        raise ManifestError(f"its manifest does not name the format '{FORMAT_NAME}'")
    version = manifest.get("format_version")
    if version not in READ_VERSIONS or isinstance(version, bool):
        named = shown(version) if not isinstance(version, int) else str(version)
        read = ", ".join(map(str, READ_VERSIONS[:-1])) + f" and {READ_VERSIONS[-1]}"
        raise ManifestError(
            f"it is session format version {named}; this proton_ik reads versions {read} (it writes "
            f"{FORMAT_VERSION}). Open it with the proton_ik release that wrote it"
        )
    check_info(mapping(manifest.get("info", {}), "info"))
    launches = manifest.get("launches", [])
    if not isinstance(launches, list):
        raise ManifestError(f"'launches' is a {type(launches).__name__}, not a list")
    shapes, seen = [], set()
    profiles = CheckedProfiles()
    listed = _listed_profiles(manifest)
    for number, item in enumerate(launches):
        where = f"launch #{number}"
        item = mapping(item, where)
        entry = item.get("entry")
        if not isinstance(entry, str) or entry not in member_sizes:
            raise ManifestError(
                f"{where} names the buffer {reprlib.repr(entry)}, which the file does not hold"
            )
        if entry in seen:
            raise ManifestError(f"{where} names the buffer {entry}, which an earlier launch names too")
        seen.add(entry)
        where = f"{where} ({entry})"
        meta = mapping(item.get("meta"), f"{where}: meta")
        if listed is not None:
            _resolve_profile(meta, listed, where)
        shape = check_meta(meta, where, profiles)
        problem = _npy_size_problem(member_sizes[entry], shape)
        if problem:
            raise ManifestError(f"{where} {problem}")
        shapes.append(shape)
    return shapes


def check_info(info: Mapping[str, Any]) -> None:
    """The session info fields the viewer reads."""
    text(info, "name", "info", required=False)
    text(info, "device", "info", required=False)
    shift = info.get("time_shift_cycles", 0)
    parts = shift if isinstance(shift, Mapping) else {"single": shift, "pair": shift}
    for kind in ("single", "pair"):
        integer(parts, kind, "info.time_shift_cycles", 0, MAX_CYCLES)
    unrecorded = info.get(UNRECORDED) or []
    if not isinstance(unrecorded, list):
        raise ManifestError(f"info.unrecorded is a {type(unrecorded).__name__}, not a list")
    for number, item in enumerate(unrecorded):
        where = f"info.unrecorded[{number}]"
        item = mapping(item, where)
        text(item, "kernel", where)
        text(item, "reason", where)
        integer(item, "count", where, 0, MAX_INT64)


def _listed_profiles(manifest: Mapping[str, Any]) -> list[Any] | None:
    """A version 3 manifest's kernel metadata (``profiles``), or None for earlier versions."""
    if manifest.get("format_version") in (1, 2):
        return None
    listed = manifest.get("profiles", [])
    if not isinstance(listed, list):
        raise ManifestError(f"'profiles' is a {type(listed).__name__}, not a list")
    return listed


def _resolve_profile(meta: Mapping[str, Any], listed: list[Any], where: str) -> None:
    """A launch's ``profile`` given as an index into the manifest's ``profiles``, replaced by the
    listed metadata itself (the same object for every launch that names it); whole metadata (a
    recovered file's) stays as it is."""
    index = meta.get("profile")
    if not isinstance(index, int) or isinstance(index, bool):
        return  # whole metadata, or something that is neither: the check says what is wrong
    if not 0 <= index < len(listed):
        raise ManifestError(
            f"{where}: its profile is #{index}, but the manifest lists {len(listed)} kernel metadata"
        )
    if isinstance(meta, dict):
        meta["profile"] = listed[index]


class CheckedProfiles:
    """The kernel metadata a file's launches gave, each checked once: by identity (a version 3
    manifest gives every launch of a kernel the same dict), else by canonical JSON (each launch
    of a version 2 manifest carries a copy of its own)."""

    def __init__(self) -> None:
        self.by_id: dict[int, tuple[dict, KernelMetadata]] = {}
        self.by_json: dict[str, tuple[dict, KernelMetadata]] = {}


def check_meta(meta: Mapping[str, Any], where: str, profiles: CheckedProfiles | None = None) -> Shape:
    """One launch's metadata; returns the byte sizes its stored array may have. ``profiles``:
    the kernel metadata already checked in this file, by its JSON text (each launch carries its
    kernel's, and checking it again costs more than the rest of the launch's checks); a launch
    whose kernel metadata equals an earlier one's is given that one's dict, so that the launches
    of one kernel share it (and what reads them can tell so by identity)."""
    integer(meta, "launch", where, 0, MAX_INT64)
    kernel = text(meta, "kernel", where)
    if not kernel:
        raise ManifestError(f"{where}: its kernel name is empty")
    where = f"{where}, kernel {kernel}"
    integer(meta, "stream", where, 0, (1 << 64) - 1, required=False, nullable=True)
    for key in ("device", "graph", "replay"):
        integer(meta, key, where, 0, MAX_INT64, required=False, nullable=True)
    integer(meta, "num_warps", where, 1, MAX_WARPS, required=False)
    num_ctas = integer(meta, "num_ctas", where, 0, MAX_INT64, required=False)
    grid = meta.get("grid")
    if grid is not None and (
        not isinstance(grid, list)
        or not 1 <= len(grid) <= 3
        or not all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 1 << 32 for g in grid)
    ):
        raise ManifestError(f"{where}: grid is {reprlib.repr(grid)}, not a list of 1 to 3 whole numbers >= 0")
    _config(meta.get("config"), where)
    profile, kernel_metadata = _checked_profile(meta.get("profile"), where, profiles)
    if profile is not meta.get("profile") and isinstance(meta, dict):
        meta["profile"] = profile
    layout = kernel_metadata.layout
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
        slot = layout.slot_bytes
        return Shape(headers, headers + num_ctas * layout.units * layout.capacity * slot, slot)
    if num_ctas is None:
        return Shape(0, None, layout.cta_bytes)
    return Shape(num_ctas * layout.cta_bytes, num_ctas * layout.cta_bytes, layout.cta_bytes)


def check_profile(profile: object, where: str) -> KernelMetadata:
    """A kernel's metadata (``contract.metadata``), its scope names held to the scope-name rule."""
    return KernelMetadata.from_dict(profile, where, "profile", check_names=True)


def _checked_profile(
    profile: object, where: str, profiles: CheckedProfiles | None
) -> tuple[object, KernelMetadata]:
    """``check_profile``, once per distinct kernel metadata of a file: the first launch's dict of
    that metadata, and the metadata read."""
    if profiles is None or not isinstance(profile, dict):
        return profile, check_profile(profile, where)
    same = profiles.by_id.get(id(profile))
    if same is not None and same[0] is profile:
        return same
    try:
        key = json.dumps(profile, sort_keys=True)
    except (TypeError, ValueError):  # not JSON's own values: the check says what is wrong
        return profile, check_profile(profile, where)
    checked = profiles.by_json.get(key)
    if checked is None:
        checked = profiles.by_json[key] = (profile, check_profile(profile, where))
    if checked[0] is profile:  # the dict kept: the manifest holds it, so its id stays its own
        profiles.by_id[id(profile)] = checked
    return checked


def _npy_size_problem(size: int, shape: Shape) -> str | None:
    """Whether an .npy member of ``size`` bytes can hold a launch of ``shape``: its header is
    at least 10 bytes (magic, version, length) and at most ``MAX_NPY_HEADER``."""
    low = shape.low + 10
    high = None if shape.high is None else shape.high + MAX_NPY_HEADER
    if size < low or (high is not None and size > high):
        wanted = f"at least {low}" if high is None else f"{low} to {high}"
        return f"is {size} bytes, where its metadata declares an .npy array of {wanted} bytes"
    return None


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
        raise ManifestError(f"{where}: config is {shown(config)}, not a table of plain values")
