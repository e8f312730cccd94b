"""Bounded reading of a session file's zip members and their ``.npy`` arrays.

A member is read straight from its place in the file (past its local header), checked against its
CRC, and never inflated past the size it declares; the file is mapped once, not copied.
Its ``.npy`` array is read as a view of those bytes, with no pickles; its header is capped
(``session_format.MAX_NPY_HEADER``). ``reader`` reads launches through these.
"""

from __future__ import annotations

import functools
import io
import math
import os
import struct
import zipfile
import zlib
from pathlib import Path
from tokenize import TokenError
from typing import BinaryIO, NamedTuple

import numpy as np

from proton_ik.contract import checksum
from proton_ik.contract.session_format import MAX_NPY_HEADER

DEFLATE_RATIO = 1032  # the most that deflate can expand its input


class MemberPlace(NamedTuple):
    """Where a member lies in the zip and what it holds, as the reads below use them: the fields
    of a ``zipfile.ZipInfo`` of the same names, kept where a session travels to a worker process
    (``reader.StoredSession.portable``), which rebuilds no ZipInfo."""

    filename: str
    header_offset: int
    compress_size: int
    file_size: int
    compress_type: int
    CRC: int

    @classmethod
    def of(cls, member: Member) -> MemberPlace:
        return cls(
            member.filename,
            member.header_offset,
            member.compress_size,
            member.file_size,
            member.compress_type,
            member.CRC,
        )


Member = zipfile.ZipInfo | MemberPlace  # a member as the reads take it


def member_problem(member: zipfile.ZipInfo, file_size: int) -> str | None:
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


def reason(error: BaseException) -> str:
    """An exception's message, or its kind where it has none."""
    return str(error) or type(error).__name__


_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, then the name and extra-field lengths


def read_member(path: Path, member: Member, whole: np.ndarray | None = None) -> np.ndarray:
    """The bytes of one zip member, checked against its CRC. A stored (uncompressed) member is
    the file's own bytes, mapped, not copied: the decoder reads it where it lies; a deflated one
    is inflated from them. ``whole``: the file as ``mapped_file`` gave it already. A file that
    cannot be mapped (some network or FUSE file systems) is read member by member instead."""
    if whole is None:
        whole = mapped_file(path)
    stored = _stored_bytes(path, member, whole)
    data: np.ndarray
    if member.compress_type == zipfile.ZIP_DEFLATED:
        data = np.frombuffer(_inflate(stored, member), dtype=np.uint8)
    else:
        data = stored
    if data.size != member.file_size or checksum.crc32(data) != member.CRC:
        raise zipfile.BadZipFile(f"{member.filename} fails its CRC check")
    return data


def _stored_bytes(path: Path, member: Member, whole: np.ndarray | None) -> np.ndarray:
    """A member's bytes as stored: a slice of the mapped file, or read from the file where it
    could not be mapped."""
    if whole is not None:
        start = _data_start(whole, member)
        if start + member.compress_size > whole.size:
            raise EOFError(f"the file ends inside {member.filename}")
        return whole[start : start + member.compress_size]
    with open(path, "rb") as file:
        start = _data_start(file, member)
        file.seek(start)
        stored = np.frombuffer(file.read(member.compress_size), dtype=np.uint8)
    if stored.size < member.compress_size:
        raise EOFError(f"the file ends inside {member.filename}")
    return stored


def mapped_file(path: Path) -> np.ndarray | None:
    """The whole file, mapped read-only: a session's launches are read from one map
    (``reader.MappedFile`` keeps it for the session) rather than by opening the file once for
    each, which cost a session of 20,000 small launches a tenth of its render. Not kept here: a
    map outlives the file's deletion, and would hold a deleted session's disk space. None where
    the file system cannot map it."""
    size = os.stat(path).st_size
    if size == 0:
        return np.zeros(0, dtype=np.uint8)
    try:
        return np.memmap(path, dtype=np.uint8, mode="r", shape=(size,)).view(np.ndarray)
    except (OSError, ValueError):
        return None


def _inflate(stored: np.ndarray, member: Member) -> bytes:
    """A deflated member's bytes, never more than it declares: a member that inflates further
    is refused before its surplus is held."""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    data = inflater.decompress(stored.data, member.file_size + 1)
    if len(data) > member.file_size or inflater.unconsumed_tail:
        raise zipfile.BadZipFile(
            f"{member.filename} inflates to more than its declared {member.file_size} bytes"
        )
    return data


def _read_member_front(path: Path, member: Member, size: int) -> np.ndarray:
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


def _data_start(file: BinaryIO | np.ndarray, member: Member) -> int:
    """Where a member's data starts in the zip (an open file, or the file mapped), past its
    local header."""
    if isinstance(file, np.ndarray):
        header = file[member.header_offset : member.header_offset + _LOCAL_HEADER.size].tobytes()
    else:
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


def read_npy(data: np.ndarray) -> np.ndarray:
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


def read_npy_front(path: Path, member: Member, wanted: int) -> np.ndarray:
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
        raise ValueError(f"its .npy header does not parse ({reason(error)})") from None
    if dtype.hasobject:
        raise ValueError("the buffer holds Python objects")
    return shape, fortran_order, dtype


_END = struct.Struct("<IHHHHIIH")  # end of central directory: signature ... comment length
_LOCATOR = struct.Struct("<IIQI")  # ZIP64 end locator: signature, disk, the ZIP64 end's offset, disks
_END64_ENTRIES = struct.Struct("<IQHHIIQQ")  # the ZIP64 end record up to its entry count


def member_count(path: Path) -> int | None:
    """How many members the zip's end records say it holds, from its last bytes alone (no
    directory is read); None where they are not found (a file never closed, or one with a
    comment after them)."""
    try:
        with open(path, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            if size < _END.size:
                return None
            file.seek(size - _END.size)
            end = _END.unpack(file.read(_END.size))
            if end[0] != 0x06054B50 or end[-1] != 0:
                return None
            if end[4] != 0xFFFF or size < _END.size + _LOCATOR.size:
                return end[4]
            file.seek(size - _END.size - _LOCATOR.size)
            locator = _LOCATOR.unpack(file.read(_LOCATOR.size))
            if locator[0] != 0x07064B50 or not 0 <= locator[2] <= size - _END64_ENTRIES.size:
                return None
            file.seek(locator[2])
            end64 = _END64_ENTRIES.unpack(file.read(_END64_ENTRIES.size))
            return int(end64[7]) if end64[0] == 0x06064B50 else None
    except OSError:
        return None
