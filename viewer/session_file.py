"""The raw session file: every launch's buffer and metadata exactly as captured, in one zip.

A session file (``name.pik``) holds::

    launches/000000.npy   one uint8 buffer per launch, streamed in as the launch is drained
    launches/000001.npy
    ...
    manifest.json         written last, by ``close()``: format name and version, the session
                          info, and one entry per launch (its metadata and its buffer's name)

Buffers are plain ``.npy`` (read back with ``allow_pickle=False``), metadata is JSON, so the
file is self-describing and safe to open. A file whose manifest is missing was never closed.
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import reprlib
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from tokenize import TokenError
from typing import IO, Any, BinaryIO, Protocol, TypeVar

import numpy as np

from proton_ik.layout import BufferLayout
from proton_ik.viewer.decode import BufferView, raw_view
from proton_ik.viewer.manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MAX_NPY_HEADER,
    STORED_KEY,
    TRIMMED,
    ManifestError,
    Shape,
    check_manifest,
)
from proton_ik.viewer.trim import header_bytes, inflate, trimmed_view
from proton_ik.viewer.trim import trim as trim_buffer

MANIFEST = "manifest.json"
REQUIRED_META = ("launch", "kernel", "profile")
# The manifest is small beside the buffers it lists; one larger than this is no manifest.
MANIFEST_BYTES, MANIFEST_PER_FILE_BYTE = 1 << 20, 32
DEFLATE_RATIO = 1032  # the most that deflate can expand its input
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
        front = self._reading(lambda: _read_npy_front(self.path, self.member, wanted))
        return self._decoding(lambda: trimmed_view(front, layout, self._num_ctas(), headers_only=True))

    def _stored(self) -> np.ndarray:
        """The launch's array as stored, checked against its CRC."""
        array = self._reading(lambda: _read_npy(_read_member(self.path, self.member)))
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
            _write_npy(file, np.ascontiguousarray(array).reshape(-1))
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


def _write_npy(file: IO[bytes], array: np.ndarray) -> None:
    """``array`` as ``.npy`` bytes, written from where it lies: ``np.save`` copies a non-file
    stream's data chunk by chunk first, which doubles the cost of a launch of megabytes."""
    np.lib.format.write_array_header_2_0(file, np.lib.format.header_data_from_array_1_0(array))
    file.write(memoryview(array).cast("B"))


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
            f"{path} is not a complete proton_ik session file ({_reason(error)}): it is truncated or "
            "corrupt, e.g. the capturing process was killed or the copy was cut short. Capture the "
            "session again, or copy the whole file"
        ) from None
    except OSError as error:
        raise SessionFileError(f"{path} cannot be read ({_reason(error)})") from None
    for member in members.values():
        problem = _member_problem(member, file_size)
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
        manifest = json.loads(_read_member(path, members[MANIFEST]).tobytes())
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as error:
        raise SessionFileError(
            f"{path}: its {MANIFEST} is corrupt ({_reason(error)}); capture the session again"
        ) from None
    except (ValueError, RecursionError) as error:
        raise SessionFileError(
            f"{path}: {MANIFEST} is not valid JSON ({_reason(error)}); the file is corrupt"
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


def _member_problem(member: zipfile.ZipInfo, file_size: int) -> str | None:
    """Why a zip member cannot be read in memory proportional to the file, or None."""
    if member.flag_bits & 0x1:
        return "is encrypted"
    if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        return (
            f"is compressed with method {member.compress_type}; proton_ik writes stored or deflated members"
        )
    if member.header_offset + member.compress_size > file_size:
        return "lies past the end of the file"
    most = member.compress_size * (DEFLATE_RATIO if member.compress_type == zipfile.ZIP_DEFLATED else 1)
    if member.file_size > most:
        return f"declares {member.file_size:,} bytes, more than its {member.compress_size:,} stored bytes can hold"
    return None


def _reason(error: BaseException) -> str:
    """An exception's message, or its kind where it has none."""
    return str(error) or type(error).__name__


_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, then the name and extra-field lengths


MAP_BYTES = 1 << 24  # stored members at least this large are mapped, not read


def _read_member(path: Path, member: zipfile.ZipInfo) -> np.ndarray:
    """The bytes of one zip member, checked against its CRC. A large stored (uncompressed)
    member is mapped from the file rather than copied: the decoder reads it where it lies."""
    with open(path, "rb") as file:
        start = _data_start(file, member)
        if start + member.compress_size > os.fstat(file.fileno()).st_size:
            raise EOFError(f"the file ends inside {member.filename}")
        mapped = member.compress_type == zipfile.ZIP_STORED and member.compress_size >= MAP_BYTES
        if not mapped:
            file.seek(start)
            stored = file.read(member.compress_size)
    if mapped:
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=start, shape=(member.compress_size,))
        data = data.view(np.ndarray)
    elif member.compress_type == zipfile.ZIP_DEFLATED:
        data = np.frombuffer(_inflate(stored, member), dtype=np.uint8)
    else:
        data = np.frombuffer(stored, dtype=np.uint8)
    if data.size != member.file_size or zlib.crc32(data) != member.CRC:
        raise zipfile.BadZipFile(f"{member.filename} fails its CRC check")
    return data


def _inflate(stored: bytes, member: zipfile.ZipInfo) -> bytes:
    """A deflated member's bytes, never more than it declares: a member that inflates further
    is refused before its surplus is held."""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    data = inflater.decompress(stored, member.file_size + 1)
    if len(data) > member.file_size or inflater.unconsumed_tail:
        raise zipfile.BadZipFile(
            f"{member.filename} inflates to more than its declared {member.file_size} bytes"
        )
    return data


def _read_member_front(path: Path, member: zipfile.ZipInfo, size: int) -> np.ndarray:
    """Up to the first ``size`` bytes of one zip member."""
    with open(path, "rb") as file:
        file.seek(_data_start(file, member))
        if member.compress_type == zipfile.ZIP_STORED:
            return np.frombuffer(file.read(min(size, member.compress_size)), dtype=np.uint8)
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        out, held, left = [], 0, member.compress_size
        while left > 0 and held < size:
            chunk = file.read(min(left, 1 << 16))
            if not chunk:
                raise EOFError(f"the file ends inside {member.filename}")
            left -= len(chunk)
            out.append(inflater.decompress(chunk, size - held))
            held += len(out[-1])
    return np.frombuffer(b"".join(out)[:size], dtype=np.uint8)


def _data_start(file: BinaryIO, member: zipfile.ZipInfo) -> int:
    """Where a member's data starts in the zip, past its local header."""
    file.seek(member.header_offset)
    header = file.read(_LOCAL_HEADER.size)
    if len(header) < _LOCAL_HEADER.size:
        raise EOFError("the file ends inside a zip header")
    signature, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    if signature != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"no zip header where {member.filename} should start")
    return member.header_offset + _LOCAL_HEADER.size + name_length + extra_length


_NPY_HEADERS = {
    (1, 0): (np.lib.format.read_array_header_1_0, "<H"),
    (2, 0): (np.lib.format.read_array_header_2_0, "<I"),
}


def _read_npy(data: np.ndarray) -> np.ndarray:
    """The array in ``.npy`` bytes, as a view of them (no pickles, no copy)."""
    header_end, shape, fortran_order, dtype = _npy_layout(data)
    if dtype.itemsize == 0 or any(length < 0 for length in shape):
        raise ValueError(f"the .npy header declares an impossible array ({dtype}, shape {shape})")
    count = math.prod(shape)
    if header_end + count * dtype.itemsize != data.size:
        raise ValueError(
            f"the .npy header declares {count * dtype.itemsize} bytes of data, but "
            f"{data.size - header_end} follow it"
        )
    body = data[header_end:]
    return body.view(dtype).reshape(shape, order="F" if fortran_order else "C")


def _npy_layout(data: np.ndarray) -> tuple[int, tuple[int, ...], bool, np.dtype]:
    """Where an ``.npy`` array's data starts, and its shape, order and dtype."""
    version = (int(data[6]), int(data[7])) if data.size >= 8 else None
    if version not in _NPY_HEADERS:
        raise ValueError(f"not an .npy array of a format version this reads ({version})")
    length_format = _NPY_HEADERS[version][1]
    start = 8 + struct.calcsize(length_format)
    if data.size < start:
        raise EOFError("the .npy header is cut short")
    header_end = start + struct.unpack_from(length_format, data[:start].tobytes(), 8)[0]
    if header_end > MAX_NPY_HEADER:
        raise ValueError(f"the .npy header declares {header_end} bytes, more than a launch's can take")
    if data.size < header_end:
        raise EOFError("the .npy header is cut short")
    return header_end, *_npy_header(data[:header_end].tobytes())


_NPY_FRONT = 1024  # bytes read for an .npy header; a longer one is read again in full


def _read_npy_front(path: Path, member: zipfile.ZipInfo, wanted: int) -> np.ndarray:
    """The first ``wanted`` bytes of the 1-D uint8 array in a member, without reading the rest
    (and so without its CRC check: the full read checks it)."""
    front = _read_member_front(path, member, _NPY_FRONT + wanted)
    header_end, shape, _, dtype = _npy_layout(front)
    if header_end > _NPY_FRONT:
        front = _read_member_front(path, member, header_end + wanted)
    if dtype != np.uint8 or len(shape) != 1:
        raise ValueError(f"{member.filename} holds a {dtype} array of shape {shape}, not a launch buffer")
    body = front[header_end : header_end + wanted]
    if body.size != wanted:
        raise EOFError("the array's data is shorter than its headers")
    return body


@functools.lru_cache(maxsize=64)
def _npy_header(header: bytes) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, order and dtype from an .npy header; launches of one kernel share theirs."""
    file = io.BytesIO(header)
    try:
        read_header = _NPY_HEADERS[np.lib.format.read_magic(file)][0]
        shape, fortran_order, dtype = read_header(file)
    except (ValueError, TypeError, SyntaxError, RecursionError, KeyError, OverflowError, TokenError) as error:
        raise ValueError(f"its .npy header does not parse ({_reason(error)})") from None
    if dtype.hasobject:
        raise ValueError("the buffer holds Python objects")
    return shape, fortran_order, dtype


def _to_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"the {what} must be JSON-serialisable plain data: {error}") from None
