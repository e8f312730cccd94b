"""The raw session file: every launch's buffer and metadata exactly as captured, in one zip.

A session file (``name.pik``) holds::

    launches/000000.npy   one uint8 buffer per launch, streamed in as the launch is drained
    launches/000001.npy
    ...
    manifest.json         written last, by ``close()``: format name and version, the session
                          info, and one entry per launch (its metadata and its buffer's name)

Buffers are plain ``.npy`` (read back with ``allow_pickle=False``), metadata is JSON, so the
file is self-describing and safe to open. A file whose manifest is missing was never closed.
Members are read and written, within bounds, by ``zip_members``.
"""

from __future__ import annotations

import json
import reprlib
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from proton_ik.contract.layout import BufferLayout
from proton_ik.viewer.decode import BufferView, raw_view
from proton_ik.viewer.manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    STORED_KEY,
    TRIMMED,
    ManifestError,
    Shape,
    check_manifest,
)
from proton_ik.viewer.trim import header_bytes, inflate, trimmed_view
from proton_ik.viewer.trim import trim as trim_buffer
from proton_ik.viewer.zip_members import (
    member_problem,
    read_member,
    read_npy,
    read_npy_front,
    reason,
    write_npy,
)

MANIFEST = "manifest.json"
REQUIRED_META = ("launch", "kernel", "profile")
# The manifest is small beside the buffers it lists; one larger than this is no manifest.
MANIFEST_BYTES, MANIFEST_PER_FILE_BYTE = 1 << 20, 32
_T = TypeVar("_T")


class SessionFileError(ValueError):
    """A file proton_ik cannot read (a session ``.pik``, a ``.pftrace`` or a Chrome ``.json``):
    the message says what is wrong and what to do. Every reader raises this, and only this, for
    a bad file."""


class Capture(Protocol):
    """One launch as the viewer needs it: its metadata and its raw profile buffer."""

    @property
    def meta(self) -> Mapping[str, Any]: ...

    @property
    def buffer(self) -> np.ndarray: ...


@dataclass(frozen=True)
class LaunchCapture:
    """A launch held in memory."""

    meta: Mapping[str, Any]
    buffer: np.ndarray


class StoredLaunch:
    """A launch inside a session file; its buffer is read from the zip each time it is asked for,
    so that iterating over a long session holds one buffer at a time.

    The buffer is read straight from its place in the file (found once, from the zip's central
    directory, by ``read_session``): reopening the zip per launch would parse the whole directory
    each time, which grows with the number of launches.
    """

    def __init__(self, path: Path, member: zipfile.ZipInfo, meta: Mapping[str, Any], shape: Shape):
        self.path = path
        self.member = member
        self.meta = meta
        self.shape = shape

    @property
    def entry(self) -> str:
        return self.member.filename

    @property
    def trimmed(self) -> bool:
        """Stored by ``viewer.trim``: headers and kept entries only."""
        return self.meta.get(STORED_KEY) == TRIMMED

    @property
    def buffer(self) -> np.ndarray:
        """The raw buffer, rebuilt from the trimmed form where the launch was stored trimmed."""
        if not self.trimmed:
            return self._stored()
        return self._decoding(lambda: inflate(self._stored(), self._layout(), self._num_ctas()))

    def view(self, layout: BufferLayout, *, headers_only: bool = False) -> BufferView:
        """The launch's headers and entries read where the file keeps them, trimmed or raw. With
        ``headers_only``, only the front of a trimmed launch is read (its entries are left out)."""
        if not self.trimmed:
            return raw_view(self._stored(), layout)
        if not headers_only:
            return self._decoding(lambda: trimmed_view(self._stored(), layout, self._num_ctas()))
        wanted = header_bytes(layout, self._num_ctas())
        front = self._reading(lambda: read_npy_front(self.path, self.member, wanted))
        return self._decoding(lambda: trimmed_view(front, layout, self._num_ctas(), headers_only=True))

    def _stored(self) -> np.ndarray:
        """The launch's array as stored, checked against its CRC."""
        array = self._reading(lambda: read_npy(read_member(self.path, self.member)))
        if array.dtype != np.uint8 or array.ndim != 1:
            raise SessionFileError(
                f"{self.path}: {self.entry} holds a {array.dtype} array of shape {array.shape}, not "
                "the 1-D uint8 buffer a launch needs; this is not a proton_ik session file"
            )
        problem = self.shape.problem(array.size)
        if problem:
            raise SessionFileError(
                f"{self.path}: the buffer of launch {self.meta['launch']} ({self.entry}) {problem}; "
                "the file is damaged: capture the session again"
            )
        return array

    def _layout(self) -> BufferLayout:
        return BufferLayout.from_dict(self.meta["profile"]["layout"])

    def _num_ctas(self) -> int:
        return int(self.meta["num_ctas"])

    def _reading(self, read: Callable[[], np.ndarray]) -> np.ndarray:
        try:
            return read()
        except (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError, SyntaxError) as error:
            raise SessionFileError(
                f"{self.path}: the buffer of launch {self.meta.get('launch')} ({self.entry}) is "
                f"corrupt ({error}); the file was damaged after it was written: capture the session again"
            ) from None

    def _decoding(self, decode: Callable[[], _T]) -> _T:
        try:
            return decode()
        except (KeyError, TypeError, ValueError) as error:
            raise SessionFileError(
                f"{self.path}: the trimmed buffer of launch {self.meta.get('launch')} ({self.entry}) "
                f"does not decode ({error}); capture the session again"
            ) from None


@dataclass(frozen=True)
class Session:
    """A session read back: its info and its launches, in launch order."""

    path: Path | None
    info: Mapping[str, Any]
    launches: list[StoredLaunch]

    def __iter__(self) -> Iterator[StoredLaunch]:
        return iter(self.launches)


def check_meta(meta: Mapping[str, Any]) -> None:
    """Raise if a launch's metadata lacks what the viewer needs."""
    missing = [key for key in REQUIRED_META if key not in meta]
    if missing:
        raise ValueError(
            f"launch metadata {reprlib.repr(dict(meta))} lacks {missing}; the runtime must record "
            f"{list(REQUIRED_META)} for every launch (profile = the kernel's 'proton_ik' metadata)"
        )


class SessionWriter:
    """Streams launches into a session file as they come, so memory stays bounded.

    ``add_launch`` writes the buffer straight into the zip (with ``trim``, only its headers and
    kept ring entries: see ``viewer.trim``); ``close`` writes the manifest. Use it as a context
    manager, or call ``close`` in a ``finally``: without a manifest the file is unreadable.
    """

    def __init__(
        self, path: str | Path, info: Mapping[str, Any], *, compress: bool = True, trim: bool = False
    ):
        self.path = Path(path)
        self.trim = trim
        self.info = dict(info)
        _to_json(self.info, "session info")
        self._entries: list[dict[str, Any]] = []
        self._archive = zipfile.ZipFile(
            self.path,
            "w",
            compression=zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED,
            compresslevel=1 if compress else None,
            allowZip64=True,
        )

    def add_launch(
        self, meta: Mapping[str, Any], buffer: np.ndarray, *, trimmed_on_device: bool = False
    ) -> None:
        """Append one launch: its metadata (JSON-serialisable) and its raw uint8 buffer, or, with
        ``trimmed_on_device``, a buffer the runtime already trimmed (``meta["num_ctas"]`` says
        how many CTAs it holds)."""
        if self._archive is None:
            raise ValueError(f"session file {self.path} is already closed; start a new session")
        check_meta(meta)
        meta = dict(meta)
        _to_json(meta, f"metadata of launch {meta['launch']}")
        array = np.asarray(buffer)
        if array.dtype != np.uint8:
            raise ValueError(f"launch {meta['launch']}: the profile buffer must be uint8, got {array.dtype}")
        if trimmed_on_device:
            meta[STORED_KEY] = TRIMMED
        elif self.trim:
            # Only the headers and the kept ring entries: a mostly empty ring costs nothing.
            layout = BufferLayout.from_dict(meta["profile"]["layout"])
            meta[STORED_KEY], meta["num_ctas"] = TRIMMED, array.size // layout.cta_bytes
            array = trim_buffer(array, layout)
        entry = f"launches/{len(self._entries):06d}.npy"
        with self._archive.open(entry, "w", force_zip64=True) as file:
            write_npy(file, np.ascontiguousarray(array).reshape(-1))
        self._entries.append({"entry": entry, "meta": meta})

    def close(self) -> Path:
        """Write the manifest and close the file; closing twice is harmless."""
        if self._archive is None:
            return self.path
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "info": self.info,
            "launches": self._entries,
        }
        self._archive.writestr(MANIFEST, json.dumps(manifest, indent=1))
        self._archive.close()
        self._archive = None
        return self.path

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def write_session(path: str | Path, info: Mapping[str, Any], launches: list[Capture]) -> Path:
    """Write a whole session at once (for tests and tools; the runtime streams with SessionWriter)."""
    with SessionWriter(path, info) as writer:
        for launch in launches:
            writer.add_launch(launch.meta, launch.buffer)
    return Path(path)


def read_session(path: str | Path) -> Session:
    """Open a session file and check its manifest against the schema (``viewer.manifest``) and
    the zip's members, before any buffer is read; buffers are read lazily, per launch."""
    path = Path(path)
    try:
        file_size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            members = {member.filename: member for member in archive.infolist()}
    except FileNotFoundError:
        raise SessionFileError(f"{path} does not exist; check the path") from None
    except IsADirectoryError:
        raise SessionFileError(f"{path} is a folder, not a session file") from None
    except (
        zipfile.BadZipFile,
        EOFError,
        ValueError,
        NotImplementedError,
        struct.error,
        OverflowError,
    ) as error:
        raise SessionFileError(
            f"{path} is not a complete proton_ik session file ({reason(error)}): it is truncated or "
            "corrupt, e.g. the capturing process was killed or the copy was cut short. Capture the "
            "session again, or copy the whole file"
        ) from None
    except OSError as error:
        raise SessionFileError(f"{path} cannot be read ({reason(error)})") from None
    for member in members.values():
        problem = member_problem(member, file_size)
        if problem:
            raise SessionFileError(
                f"{path}: zip member {reprlib.repr(member.filename)} {problem}; the file is corrupt or was not "
                "written by proton_ik: capture the session again"
            )
    if MANIFEST not in members:
        raise SessionFileError(
            f"{path} has no {MANIFEST}: the session was never closed (the capturing process "
            "stopped before proton_ik.finalize()). Its launches cannot be trusted; capture again"
        )
    manifest_cap = MANIFEST_BYTES + MANIFEST_PER_FILE_BYTE * file_size
    if members[MANIFEST].file_size > manifest_cap:
        raise SessionFileError(
            f"{path}: its {MANIFEST} is {members[MANIFEST].file_size:,} bytes, more than a session "
            f"file of {file_size:,} bytes can need ({manifest_cap:,}); the file is corrupt or was not "
            "written by proton_ik"
        )
    try:
        manifest = json.loads(read_member(path, members[MANIFEST]).tobytes())
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as error:
        raise SessionFileError(
            f"{path}: its {MANIFEST} is corrupt ({reason(error)}); capture the session again"
        ) from None
    except (ValueError, RecursionError) as error:
        raise SessionFileError(
            f"{path}: {MANIFEST} is not valid JSON ({reason(error)}); the file is corrupt"
        ) from None
    sizes = {name: member.file_size for name, member in members.items() if name != MANIFEST}
    try:
        shapes = check_manifest(manifest, sizes)
    except ManifestError as error:
        raise SessionFileError(
            f"{path} is not a session file this proton_ik can read: {error}. The file is damaged or "
            "was not written by proton_ik: capture the session again"
        ) from None
    launches = [
        StoredLaunch(path, members[item["entry"]], item["meta"], shape)
        for item, shape in zip(manifest.get("launches", []), shapes, strict=True)
    ]
    return Session(path, manifest.get("info", {}), launches)


def _to_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"the {what} must be JSON-serialisable plain data: {error}") from None
