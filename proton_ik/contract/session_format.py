"""The session file format: what the writer (``runtime.session_writer``) and the reader
(``viewer.session_file``, which checks the manifest with ``viewer.session_file.manifest``) agree on.

A session file (``name.pik``) is a zip that holds::

    session.json          written first (version 2 on): the session info as it started
    launches/000000.npy   one uint8 buffer per launch, streamed in as the launch is drained
    launches/000000.json  (version 2 on) that launch's metadata, right after its buffer
    launches/000001.npy
    launches/000001.json
    ...
    manifest.json         written last: format name and version, the session info, each
                          kernel's metadata once (version 3 on: ``profiles``), and one entry per
                          launch (its metadata, whose ``profile`` is an index into ``profiles``,
                          and its buffer's member name)

Buffers are plain ``.npy`` (version 2.0 headers, read back without pickles), metadata is JSON,
so the file is self-describing and safe to open. A launch stored trimmed (``contract.trimmed``)
says so in its metadata.

A file whose manifest is missing was never closed: its process was killed, or crashed, before
finalize. Since version 2 every launch carries its metadata in its own member, and the writer
flushes the file after each launch, so a reader can walk the members' local headers from the
start (``launch_meta_member`` pairs each buffer with its metadata) and recover every complete
launch of a file cut anywhere (``viewer.session_file.recover``).

Bump ``FORMAT_VERSION`` whenever anything here changes meaning; ``READ_VERSIONS`` are those
the readers still read.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypedDict, cast

import numpy as np

from proton_ik.contract.metadata import METADATA_KEY

FORMAT_NAME = "proton_ik-session"
FORMAT_VERSION = 3
# 1: no session.json and no per-launch metadata members; 2: each launch's kernel metadata whole in
# the manifest (a launch's own metadata member carries it whole in every version)
READ_VERSIONS = (1, 2, 3)
MANIFEST = "manifest.json"
SESSION_INFO = "session.json"
ZIP_MAGIC = b"PK"  # how every zip file starts
STORED_KEY, TRIMMED = "stored", "trimmed"  # a launch stored in the trimmed form, not raw
MAX_NPY_HEADER = 1 << 16  # bytes an .npy header may take before a launch's data


class _RequiredLaunchMeta(TypedDict):
    launch: int  # launches are numbered in the order they were made
    kernel: str
    profile: dict[str, Any]  # the kernel's metadata: ``contract.metadata.KernelMetadata.to_dict``


class LaunchMeta(_RequiredLaunchMeta, total=False):
    """One launch's metadata in the manifest. Only the first three are required: sessions from
    older runtimes lack the others."""

    stream: int | None
    device: int | None
    num_warps: int
    num_ctas: int  # CTAs the buffer holds; else the product of ``grid``
    grid: list[int]
    name: str  # the launch's name from the kernel's ``launch_metadata``
    launch_metrics: dict[str, float]  # the numbers ``launch_metadata`` gave besides the name
    config: dict[str, Any]  # the autotuner config: plain values, its kernel arguments under "kwargs"
    host_scope: list[str]  # host scopes open at the launch, outermost first
    graph: int  # a CUDA graph replay: the graph's number and the replay's index
    replay: int
    stored: str  # STORED_KEY: TRIMMED where the buffer is stored trimmed


REQUIRED_META = tuple(key for key in LaunchMeta.__annotations__ if key in LaunchMeta.__required_keys__)


class ManifestLaunch(TypedDict):
    entry: str  # the zip member holding the launch's buffer
    meta: LaunchMeta  # in the manifest (version 3 on), "profile" is an index into its profiles


class _RequiredManifest(TypedDict):
    format: str  # FORMAT_NAME
    format_version: int  # FORMAT_VERSION
    info: dict[str, Any]  # the session: name, device, time_shift_cycles, unrecorded, ...
    launches: list[ManifestLaunch]


class Manifest(_RequiredManifest, total=False):
    profiles: list[dict[str, Any]]  # version 3 on: each kernel's metadata once


class WrittenMember(NamedTuple):
    """A stored (uncompressed) member of a session file as its writer placed it: what the zip's
    central directory says of it."""

    name: str
    header_offset: int  # where its local header starts
    size: int
    crc: int


class WrittenSession(NamedTuple):
    """A session file as its writer closed it: its manifest's JSON and where each member lies.
    The process that wrote it renders it from these (``viewer.session_file.session_from_written``)
    without reading the file's directory and manifest back."""

    manifest_json: bytes
    members: list[WrittenMember]


class Capture(Protocol):
    """One launch as a session holds it: its metadata and its raw profile buffer."""

    @property
    def meta(self) -> Mapping[str, Any]: ...

    @property
    def buffer(self) -> np.ndarray: ...


def launch_member(number: int) -> str:
    """The zip member of the ``number``-th launch stored (counting from 0)."""
    return f"launches/{number:06d}.npy"


def launch_meta_member(entry: str) -> str:
    """The member that holds the metadata of the launch stored in ``entry`` (version 2 on)."""
    return entry.removesuffix(".npy") + ".json"


def numbered_profiles(metas: Iterable[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """Each distinct kernel metadata (``profile``) of ``metas`` once, and each meta's index into
    that list: the manifest's ``profiles`` (version 3 on), and a session handed to a render worker.
    The launches of a kernel share one dict, so most are found by identity; equal dicts that are
    not one object are found by their JSON."""
    profiles: list[dict[str, Any]] = []
    by_id: dict[int, int] = {}
    by_text: dict[str, int] = {}
    indexes = []
    for meta in metas:
        profile = meta["profile"]
        index = by_id.get(id(profile))
        if index is None:
            index = by_text.setdefault(json.dumps(profile, sort_keys=True), len(profiles))
            if index == len(profiles):
                profiles.append(profile)
            by_id[id(profile)] = index  # the metas keep their dicts alive: ids stay unique
        indexes.append(index)
    return profiles, indexes


def manifest(info: Mapping[str, Any], launches: list[ManifestLaunch]) -> Manifest:
    """The manifest of ``launches`` (their metadata with each kernel's metadata whole): each
    distinct kernel metadata listed once in ``profiles``, each launch naming its index."""
    profiles, indexes = numbered_profiles(launch["meta"] for launch in launches)
    entries: list[ManifestLaunch] = [
        {"entry": launch["entry"], "meta": cast(LaunchMeta, {**launch["meta"], "profile": index})}
        for launch, index in zip(launches, indexes, strict=True)
    ]
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "info": dict(info),
        "profiles": profiles,
        "launches": entries,
    }


def check_required_meta(meta: Mapping[str, Any]) -> None:
    """Raise if a launch's metadata lacks what the reader needs."""
    missing = [key for key in REQUIRED_META if key not in meta]
    if missing:
        raise ValueError(
            f"launch metadata {reprlib.repr(dict(meta))} lacks {missing}; the runtime must record "
            f"{list(REQUIRED_META)} for every launch (profile = the kernel's '{METADATA_KEY}' metadata)"
        )


def is_session_file(path: str | Path) -> bool:
    """Whether ``path`` is a file that starts as a session file does (a zip): by content, not suffix."""
    try:
        with open(path, "rb") as file:
            return file.read(len(ZIP_MAGIC)) == ZIP_MAGIC
    except OSError:
        return False


# Session info: the launches that ran but could not be recorded, a list of {"kernel", "reason",
# "count"} (``unrecorded_warnings`` words them).
UNRECORDED = "unrecorded"


def unrecorded_warnings(info: Mapping[str, Any]) -> list[str]:
    """One line per kernel and reason that the runtime could not record launches of."""
    return [
        f"{int(item['count']):,} launch(es) of {item['kernel']} ran but were not recorded: {item['reason']}"
        for item in info.get(UNRECORDED) or []
    ]


# Session info: (host ns, %globaltimer ns) pairs read at the session's start and finalize
# (``runtime.clock_sync``), each {"host_ns", "globaltimer_ns", "read_ns"}.
CLOCK_PAIRS = "clock_pairs"


def host_offset_ns(info: Mapping[str, Any]) -> int | None:
    """What to add to a session's %globaltimer times to put them on the host's clock: the mean
    offset of its clock pairs (None where it has none, as sessions from before they were read)."""
    pairs = info.get(CLOCK_PAIRS)
    if not isinstance(pairs, list):
        return None
    offsets = [
        pair["host_ns"] - pair["globaltimer_ns"]
        for pair in pairs
        if isinstance(pair, dict)
        and isinstance(pair.get("host_ns"), int)
        and isinstance(pair.get("globaltimer_ns"), int)
    ]
    return round(sum(offsets) / len(offsets)) if offsets else None
