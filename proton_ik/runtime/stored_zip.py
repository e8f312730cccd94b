"""The session file's container written with no serial pass: a ZIP64 archive of stored members,
each member's checksum computed before it is written, on several threads.

Why not ``zipfile``: it checksums a member as it writes it, on the writing thread, one piece
after another. On the GPU hosts that checksum runs at 1.2 GB/s (zlib 1.3, a Xeon), slower than
the file takes the bytes, so a launch of 16 MiB waited on it (docs/PERFORMANCE.md). Here a
member's CRC-32 is the combination of its pieces' CRCs, each computed on a thread of a pool,
with the CRC-32 of ``contract.checksum`` (zlib-ng's), so the checksum takes a fraction of the
write.

What is written is what ``zipfile`` reads, and what ``viewer.session_file.recover`` walks in a file never
closed: each member's local header carries its sizes (in its ZIP64 field) and its CRC, with no
data descriptor; a large member's CRC is computed while the file writes its data and patched
into its header after it (``add``), before anything that follows: a file cut between the two
holds a member that fails its checksum, and no metadata after it, so its launch is not
recovered, as it was not complete. ``close`` writes the central directory, the ZIP64 end record
and locator, and the end record.
"""

from __future__ import annotations

import functools
import os
import struct
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, NamedTuple

from proton_ik.contract import checksum
from proton_ik.contract.session_format import WrittenMember

__all__ = ["StoredZipWriter", "crc32", "crc32_combine"]

PIECE_BYTES = 1 << 20  # a thread's share of a checksum
PARALLEL_FROM = 4 << 20  # smaller members are checksummed on the calling thread
SMALL_MEMBER = 16 << 10  # a member this small is written with its header, in one piece
TOGETHER_BYTES = 4 << 20  # small members gathered into one write, up to about this much
ZIP64_VERSION = 45
_LOCAL = struct.Struct("<IHHHHHIIIHH")
# A local header with its zip64 extra field (id, size, then the sizes), up to the name between them
_LOCAL_ZIP64_EXTRA = struct.Struct("<HHQQ")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_CENTRAL_EXTRA = struct.Struct("<HHQQQ")  # a central entry's ZIP64 field: id, size, the sizes, the offset
_ZIP64_END = struct.Struct("<IQHHIIQQQQ")
_ZIP64_LOCATOR = struct.Struct("<IIQI")
_END = struct.Struct("<IHHHHIIH")
_MAX32 = 0xFFFFFFFF
_CRC_AT = 14  # the CRC's offset in a local header


# --- CRC-32 of pieces, combined (zlib's crc32_combine, which Python's zlib does not offer) ----


def _times(matrix: Sequence[int], vector: int) -> int:
    """A 32x32 matrix over GF(2) (its columns) times a vector."""
    total, column = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[column]
        vector >>= 1
        column += 1
    return total


def _square(matrix: Sequence[int]) -> list[int]:
    return [_times(matrix, matrix[n]) for n in range(32)]


def _byte_powers(count: int = 48) -> list[list[int]]:
    """The operators that append 2**k zero bytes to a CRC's message, k = 0 .. count - 1."""
    one_bit = [0xEDB88320, *(1 << n for n in range(31))]  # the CRC-32 polynomial, reflected
    two_bits = _square(one_bit)
    four_bits = _square(two_bits)
    powers = [_square(four_bits)]  # eight bits: one byte
    while len(powers) < count:
        powers.append(_square(powers[-1]))
    return powers


_BYTE_POWERS = _byte_powers()


def crc32_combine(first: int, second: int, second_length: int) -> int:
    """The CRC-32 of A + B from A's (``first``), B's (``second``) and B's length in bytes."""
    k = 0
    while second_length:
        if second_length & 1:
            first = _times(_BYTE_POWERS[k], first)
        second_length >>= 1
        k += 1
    return first ^ second


def crc32(data: memoryview, pool: ThreadPoolExecutor | None) -> int:
    """The CRC-32 of ``data``; with ``pool``, its pieces on the pool's threads."""
    if pool is None or data.nbytes < PARALLEL_FROM:
        return checksum.crc32(data)
    starts = range(0, data.nbytes, PIECE_BYTES)
    pieces = list(pool.map(lambda start: checksum.crc32(data[start : start + PIECE_BYTES]), starts))
    total = pieces[0]
    for start, piece in zip(starts[1:], pieces[1:], strict=True):
        total = crc32_combine(total, piece, min(PIECE_BYTES, data.nbytes - start))
    return total


# --- the archive -------------------------------------------------------------------------------


class _Member(NamedTuple):
    """What the central directory says of a member (a tuple: thousands are made a second)."""

    name: bytes
    offset: int
    size: int
    crc: int
    dos_time: int
    dos_date: int


@functools.lru_cache(maxsize=4)
def _dos_time_of(seconds: int) -> tuple[int, int]:
    local = time.localtime(seconds)
    year = max(local.tm_year, 1980)
    return (local.tm_hour << 11) | (local.tm_min << 5) | (local.tm_sec // 2), (
        ((year - 1980) << 9) | (local.tm_mon << 5) | local.tm_mday
    )


def _dos_time(seconds: float) -> tuple[int, int]:
    """A member's time and date as a zip stores them (to the even second), the local time of
    each second worked out once: a session writes thousands of members a second."""
    return _dos_time_of(int(seconds))


class StoredZipWriter:
    """Stored (uncompressed) members appended to ``file`` front to back; ``close`` writes the
    central directory. ``file`` needs ``write`` and ``tell`` only."""

    def __init__(self, file: IO[bytes] | Any, workers: int | None = None):
        self._file = file
        self._members: list[_Member] = []
        self._names: set[bytes] = set()
        count = workers if workers is not None else min(8, os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(count, thread_name_prefix="proton_ik-crc") if count > 1 else None
        self._patch = getattr(file, "patch", None)
        self._closed = False

    def add(self, name: str, parts: Sequence[bytes | memoryview]) -> None:
        """One member, the concatenation of ``parts``, written now (the parts are handed to
        ``file.write`` as they are: they must stay unchanged until the file has written them).

        Where ``file`` can ``patch`` (``session_writer.OverlappedFile``: a write at an offset,
        queued behind the writes before it), the member's data is queued first and its checksum
        computed while the file writes it; the CRC then goes into the local header by a patch.
        Anywhere else the checksum comes first."""
        self.add_many([(name, parts)])

    def add_many(self, members: Sequence[tuple[str, Sequence[bytes | memoryview]]]) -> None:
        """Members as ``add`` writes them, one after another, in as few writes as their sizes
        allow: the small ones' headers and parts go to the file together (a drain batch's
        launches, two members each, in one write rather than two a launch)."""
        if self._closed:
            raise ValueError("the archive is closed")
        dos_time, dos_date = _dos_time(time.time())
        offset = self._file.tell()
        together: list[bytes | memoryview] = []  # small members not yet written
        gathered = 0
        try:  # every member listed below is written, also when a later one fails
            for name, parts in members:
                encoded = name.encode("utf-8")
                if encoded in self._names:
                    raise ValueError(f"the archive already holds a member named {name!r}")
                views = [memoryview(part).cast("B") for part in parts]
                size = sum(view.nbytes for view in views)
                patch = self._patch if size >= PARALLEL_FROM else None
                crc = 0 if patch is not None else self._crc(views)
                header = self._local_header(encoded, crc, size, dos_time, dos_date)
                if size < SMALL_MEMBER:  # written with the others: each write costs the file a call
                    together.append(header)
                    together.extend(views)
                    gathered += len(header) + size
                    if gathered >= TOGETHER_BYTES:
                        self._write_together(together)
                        gathered = 0
                else:
                    self._write_together(together)
                    gathered = 0
                    self._file.write(header)
                    for view in views:
                        self._file.write(view)
                    if patch is not None:  # the checksum while the file writes the data
                        crc = self._crc(views)
                        patch(offset + _CRC_AT, struct.pack("<I", crc))
                self._members.append(_Member(encoded, offset, size, crc, dos_time, dos_date))
                self._names.add(encoded)
                offset += len(header) + size
        finally:
            self._write_together(together)

    def _write_together(self, pieces: list[bytes | memoryview]) -> None:
        """Write ``pieces`` as one (copied: the caller may reuse them once written), then forget them."""
        if pieces:
            self._file.write(b"".join(pieces))
            pieces.clear()

    @staticmethod
    def _local_header(encoded: bytes, crc: int, size: int, dos_time: int, dos_date: int) -> bytes:
        """A member's local header, with its sizes in its ZIP64 field."""
        fields = (0x04034B50, ZIP64_VERSION, 0x800, 0, dos_time, dos_date, crc, _MAX32, _MAX32)
        return (
            _LOCAL.pack(*fields, len(encoded), _LOCAL_ZIP64_EXTRA.size)
            + encoded
            + _LOCAL_ZIP64_EXTRA.pack(0x0001, 16, size, size)
        )

    def _crc(self, views: list[memoryview]) -> int:
        crc, done = 0, 0
        for view in views:
            if self._pool is None or view.nbytes < PARALLEL_FROM:
                crc = checksum.crc32(view, crc)  # continued from the views before: no combine
            else:
                piece = crc32(view, self._pool)
                crc = crc32_combine(crc, piece, view.nbytes) if done else piece
            done += view.nbytes
        return crc

    def written(self) -> list[WrittenMember]:
        """Each member added so far, where it lies and what its directory entry says."""
        return [
            WrittenMember(member.name.decode("utf-8"), member.offset, member.size, member.crc)
            for member in self._members
        ]

    def close(self) -> None:
        """The central directory and the end records; the file itself stays open."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown()
        start = self._file.tell()
        # Every member's entry has the same fields but its own; one pack of each a member.
        fixed = (0x02014B50, ZIP64_VERSION | (3 << 8), ZIP64_VERSION, 0x800, 0)
        after_sizes = (_CENTRAL_EXTRA.size, 0, 0, 0, 0o100644 << 16, _MAX32)
        directory = []
        for name, offset, size, crc, dos_time, dos_date in self._members:
            directory.append(
                _CENTRAL.pack(*fixed, dos_time, dos_date, crc, _MAX32, _MAX32, len(name), *after_sizes)
                + name
                + _CENTRAL_EXTRA.pack(0x0001, 24, size, size, offset)
            )
        central = b"".join(directory)
        end64 = start + len(central)
        count = len(self._members)
        sizes = (count, count, len(central), start)
        self._file.write(
            central
            + _ZIP64_END.pack(0x06064B50, _ZIP64_END.size - 12, ZIP64_VERSION, ZIP64_VERSION, 0, 0, *sizes)
            + _ZIP64_LOCATOR.pack(0x07064B50, 0, end64, 1)
            + _END.pack(0x06054B50, 0, 0, min(count, 0xFFFF), min(count, 0xFFFF), _MAX32, _MAX32, 0)
        )
