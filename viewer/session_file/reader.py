"""The session file read back: every launch's buffer and metadata exactly as captured.

The format (``contract.session_format``) is written by ``runtime.session_writer``. Here it is
read: ``read_session`` checks the zip's members and the manifest (``manifest``) before
any buffer is read, then hands out launches whose buffers are read lazily, within bounds, by
``zip_members``.
"""

from __future__ import annotations

import json
import reprlib
import struct
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from proton_ik.contract.buffer_view import BufferView, raw_view
from proton_ik.contract.layout import BufferLayout
from proton_ik.contract.metadata import KernelMetadata
from proton_ik.contract.session_format import (
    MANIFEST,
    STORED_KEY,
    TRIMMED,
    WrittenSession,
    numbered_profiles,
)
from proton_ik.contract.trimmed import header_bytes, inflate, trimmed_view
from proton_ik.viewer.arrays import collector_paused
from proton_ik.viewer.session_file.manifest import ManifestError, Shape, check_manifest
from proton_ik.viewer.session_file.recover import recover
from proton_ik.viewer.session_file.zip_members import (
    Member,
    MemberPlace,
    mapped_file,
    member_count,
    member_problem,
    read_member,
    read_npy,
    read_npy_front,
    reason,
)

# The manifest is small beside the buffers it lists; one larger than this is no manifest.
MANIFEST_BYTES, MANIFEST_PER_FILE_BYTE = 1 << 20, 32
_T = TypeVar("_T")


class SessionFileError(ValueError):
    """A file proton_ik cannot read (a session ``.pik``, a ``.pftrace`` or a Chrome ``.json``):
    the message says what is wrong and what to do. Every reader raises this, and only this, for
    a bad file."""


@dataclass(frozen=True)
class LaunchCapture:
    """A launch held in memory."""

    meta: Mapping[str, Any]
    buffer: np.ndarray


class MappedFile:
    """A session file mapped once, at its first launch read, for all its launches: a launch's
    read is then a slice of the map (``zip_members.mapped_file``), with no call on the file."""

    def __init__(self, path: Path):
        self.path = path
        self._array: np.ndarray | None = None
        self._mapped = False

    def array(self) -> np.ndarray | None:
        """The map; None where the file system cannot map the file (then each read opens it)."""
        if not self._mapped:
            self._array, self._mapped = mapped_file(self.path), True
        return self._array


class StoredLaunch:
    """A launch inside a session file; its buffer is read from the zip each time it is asked for,
    so that iterating over a long session holds one buffer at a time.

    The buffer is read straight from its place in the file (found once, from the zip's central
    directory, by ``read_session``): reopening the zip per launch would parse the whole directory
    each time, which grows with the number of launches.
    """

    def __init__(
        self,
        path: Path,
        member: Member,
        meta: Mapping[str, Any],
        shape: Shape,
        file: MappedFile | None = None,
    ):
        self.path = path
        self.member = member
        self.meta = meta
        self.shape = shape
        self._file = file or MappedFile(path)

    @property
    def entry(self) -> str:
        return self.member.filename

    @property
    def read_in_place(self) -> bool:
        """Whether the launch's bytes are read where the mapped file holds them, not copied:
        stored uncompressed, in a file the file system lets us map. Its views then cost no memory
        to keep beyond the map's pages."""
        return self.member.compress_type == zipfile.ZIP_STORED and self._file.array() is not None

    @property
    def trimmed(self) -> bool:
        """Stored in the trimmed form (``contract.trimmed``): headers and kept ring slots only."""
        return self.meta.get(STORED_KEY) == TRIMMED

    @property
    def buffer(self) -> np.ndarray:
        """The raw buffer, rebuilt from the trimmed form where the launch was stored trimmed."""
        if not self.trimmed:
            return self._stored()
        return self._decoding(lambda: inflate(self._stored(), self._layout(), self._num_ctas()))

    def view(self, layout: BufferLayout, *, headers_only: bool = False) -> BufferView:
        """The launch's headers and ring slots read where the file keeps them, trimmed or raw. With
        ``headers_only``, only the front of a trimmed launch is read (its slots are left out)."""
        if not self.trimmed:
            return raw_view(self._stored(), layout)
        if not headers_only:
            return self._decoding(lambda: trimmed_view(self._stored(), layout, self._num_ctas()))
        wanted = header_bytes(layout, self._num_ctas())
        front = self._reading(lambda: read_npy_front(self.path, self.member, wanted))
        return self._decoding(lambda: trimmed_view(front, layout, self._num_ctas(), headers_only=True))

    def _stored(self) -> np.ndarray:
        """The launch's array as stored, checked against its CRC."""
        array = self._reading(lambda: read_npy(read_member(self.path, self.member, self._file.array())))
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
        return KernelMetadata.from_dict(
            self.meta["profile"], f"launch {self.meta['launch']}", "profile"
        ).layout

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
class StoredSession:
    """A session file read back: its info and its launches, in launch order."""

    path: Path | None
    info: Mapping[str, Any]
    launches: list[StoredLaunch]

    def __iter__(self) -> Iterator[StoredLaunch]:
        return iter(self.launches)

    def portable(self) -> dict[str, Any]:
        """The session as read and checked here, in JSON's values, for a render worker process
        (``render.parts``): rebuilt there by ``session_from_portable`` in a fraction of the time
        that reading and checking the file again takes (a ZipInfo a launch, and its metadata
        checked). Plain data, reading it runs no code; in columns, which JSON writes and parses
        several times faster than a dict and two lists a launch (for 20,000 launches, 0.4 s of
        a finalize's serial work on a 2-core machine): each launch's place in the file and its
        shape, and its metadata as values under one of a few key lists, its kernel metadata an
        index into ``profiles`` (one per distinct dict). The buffers are still read, and checked
        against their CRCs, where used."""
        profiles, indexes = numbered_profiles(launch.meta for launch in self.launches)
        places = [MemberPlace.of(launch.member) for launch in self.launches]
        key_lists: dict[tuple[str, ...], int] = {}
        metas = []
        for launch, index in zip(self.launches, indexes, strict=True):
            keys = tuple(launch.meta)
            number = key_lists.setdefault(keys, len(key_lists))
            metas.append(
                [number, *(index if key == "profile" else value for key, value in launch.meta.items())]
            )
        return {
            "path": str(self.path),
            "info": dict(self.info),
            "profiles": profiles,
            "places": {field: [getattr(place, field) for place in places] for field in MemberPlace._fields},
            "shapes": {
                field: [getattr(launch.shape, field) for launch in self.launches] for field in _SHAPE_FIELDS
            },
            "meta_keys": [list(keys) for keys in key_lists],
            "metas": metas,
        }


_SHAPE_FIELDS = ("low", "high", "multiple")


@collector_paused()  # thousands of launches' objects: no collection while they are made
def session_from_portable(data: Mapping[str, Any]) -> StoredSession:
    """The session ``StoredSession.portable`` gave, its launches sharing their kernel metadata
    dicts as they did where it was read."""
    path = Path(data["path"])
    file = MappedFile(path)
    profiles = data["profiles"]
    key_lists = data["meta_keys"]
    places = data["places"]
    shapes = data["shapes"]
    launches = []
    for place, shape, (number, *values) in zip(
        zip(*(places[field] for field in MemberPlace._fields), strict=True),
        zip(*(shapes[field] for field in _SHAPE_FIELDS), strict=True),
        data["metas"],
        strict=True,
    ):
        meta = dict(zip(key_lists[number], values, strict=True))
        meta["profile"] = profiles[meta["profile"]]  # in place: the keys keep their order
        launches.append(StoredLaunch(path, MemberPlace._make(place), meta, Shape(*shape), file))
    return StoredSession(path, data["info"], launches)


@collector_paused()
def read_session(path: str | Path) -> StoredSession:
    """Open a session file and check its manifest against the schema (``manifest``) and
    the zip's members, before any buffer is read; buffers are read lazily, per launch. A file
    that was never closed (its process killed before finalize) gives its complete launches,
    with a warning that says where it ends (``recover``)."""
    path = Path(path)
    try:
        file_size = path.stat().st_size
    except FileNotFoundError:
        raise SessionFileError(f"{path} does not exist; check the path") from None
    except OSError as error:
        raise SessionFileError(f"{path} cannot be read ({reason(error)})") from None
    if path.is_dir():
        raise SessionFileError(f"{path} is a folder, not a session file")
    members, unclosed = _members(path, file_size)
    if unclosed is None and MANIFEST not in members:
        unclosed = "it has no manifest"
    if unclosed is not None:
        recovered = recover(path, file_size)
        if recovered is None:
            raise SessionFileError(
                f"{path} is not a complete proton_ik session file ({unclosed}): it was never closed "
                "(the capturing process was killed before finalize), or it is truncated or corrupt "
                "(the copy was cut short), and it holds no session info to recover launches from "
                "(files written before session format 2 hold none). Capture the session again, or "
                "copy the whole file"
            ) from None
        warnings.warn(
            f"proton_ik: {path} was never closed (its process stopped before proton_ik.finalize(), "
            f"or the file was cut short): {recovered.where_it_ends()}",
            stacklevel=2,
        )
        members, manifest = recovered.members, recovered.manifest
        manifest["info"] = {**manifest["info"], "recovered": recovered.where_it_ends()}
    else:
        manifest = _manifest(path, members[MANIFEST], file_size)
    return _checked_session(path, manifest, members)


@collector_paused()
def session_from_written(path: str | Path, written: WrittenSession) -> StoredSession:
    """The session file at ``path`` as the process that wrote it knows it (``SessionWriter.written``):
    its manifest checked as ``read_session`` checks a file's, its members where the writer put
    them. The file's directory and manifest are not read back: for 20,000 launches that took a
    finalize 0.3 s on a 2-core machine. Buffers are read, and checked against their CRCs, as
    ``read_session``'s launches are."""
    path = Path(path)
    members: dict[str, Member] = {
        member.name: MemberPlace(
            member.name, member.header_offset, member.size, member.size, zipfile.ZIP_STORED, member.crc
        )
        for member in written.members
    }
    try:
        manifest = json.loads(written.manifest_json)
    except ValueError as error:
        raise SessionFileError(f"{path}: the manifest written is not valid JSON ({reason(error)})") from None
    return _checked_session(path, manifest, members)


def _checked_session(path: Path, manifest: Any, members: Mapping[str, Member]) -> StoredSession:
    """The session whose ``manifest`` lists launches among ``members``, once the manifest is checked."""
    sizes = {name: member.file_size for name, member in members.items() if name != MANIFEST}
    try:
        shapes = check_manifest(manifest, sizes)
    except ManifestError as error:
        raise SessionFileError(
            f"{path} is not a session file this proton_ik can read: {error}. The file is damaged or "
            "was not written by proton_ik: capture the session again"
        ) from None
    file = MappedFile(path)
    launches = [
        StoredLaunch(path, members[item["entry"]], item["meta"], shape, file)
        for item, shape in zip(manifest.get("launches", []), shapes, strict=True)
    ]
    return StoredSession(path, manifest.get("info", {}), launches)


def _members(path: Path, file_size: int) -> tuple[dict[str, zipfile.ZipInfo], str | None]:
    """The zip's members from its central directory, and None; or none and why the file has no
    readable directory (it was never closed, or it is cut short or corrupt)."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = {member.filename: member for member in archive.infolist()}
    except (
        zipfile.BadZipFile,
        EOFError,
        ValueError,
        NotImplementedError,
        struct.error,
        OverflowError,
    ) as error:
        return {}, reason(error)
    except OSError as error:
        raise SessionFileError(f"{path} cannot be read ({reason(error)})") from None
    for member in members.values():
        problem = member_problem(member, file_size)
        if problem:
            raise SessionFileError(
                f"{path}: zip member {reprlib.repr(member.filename)} {problem}; the file is corrupt or was not "
                "written by proton_ik: capture the session again"
            )
    return members, None


def _manifest(path: Path, member: zipfile.ZipInfo, file_size: int) -> Any:
    manifest_cap = MANIFEST_BYTES + MANIFEST_PER_FILE_BYTE * file_size
    if member.file_size > manifest_cap:
        raise SessionFileError(
            f"{path}: its {MANIFEST} is {member.file_size:,} bytes, more than a session "
            f"file of {file_size:,} bytes can need ({manifest_cap:,}); the file is corrupt or was not "
            "written by proton_ik"
        )
    try:
        return json.loads(read_member(path, member).tobytes())
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as error:
        raise SessionFileError(
            f"{path}: its {MANIFEST} is corrupt ({reason(error)}); capture the session again"
        ) from None
    except (ValueError, RecursionError) as error:
        raise SessionFileError(
            f"{path}: {MANIFEST} is not valid JSON ({reason(error)}); the file is corrupt"
        ) from None


def stored_launches_hint(path: str | Path) -> int:
    """About how many launches a closed session file holds, from its zip's end records alone:
    for sizing work before the file is read; 0 where the end records are not found. Counted as
    format version 2 stores them (each launch its buffer and its metadata, beside the session
    info and the manifest); a version 1 file (a buffer a launch, and the manifest) reads half."""
    members = member_count(Path(path))
    return max(0, (members - 1) // 2) if members else 0
