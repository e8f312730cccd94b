"""A session file that was never closed, read back: every complete launch, and where it ends.

A process killed before ``finalize`` (SIGKILL, out of memory, a crashed worker) leaves its
session file without the zip's central directory and without the manifest. Since session
format 2 the writer puts the session info first (``session.json``) and each launch's metadata
right after its buffer, and flushes after each launch (``contract.session_format``). So the
members can be found by walking their local headers from the start of the file, as they were
written, and each launch whose buffer and metadata are both whole is recovered; the walk stops
at the first member the file ends inside, or at anything that is not a local header.

Bounded like the other readers: one header read per member, each step moves forward by at least
a header, no member is trusted past the end of the file, and each metadata member is capped.
"""

from __future__ import annotations

import json
import reprlib
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proton_ik.contract.session_format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    SESSION_INFO,
    launch_meta_member,
)
from proton_ik.viewer.session_file.zip_members import member_problem, read_member

__all__ = ["Recovered", "recover"]

# signature, version, flags, method, time, date, CRC, compressed and uncompressed sizes, the
# name's and the extra field's lengths
_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_SIGNATURE = b"PK\x03\x04"
_ZIP64_EXTRA = 0x0001
_SIZES_FOLLOW_DATA = 0x8  # a member streamed to an unseekable file: its sizes come after it
MAX_META_BYTES = 1 << 20  # a launch's metadata member, or the session's info


@dataclass
class Recovered:
    """What a walk of an unclosed session file found."""

    members: dict[str, zipfile.ZipInfo]  # every member whole in the file
    manifest: dict[str, Any]  # built from session.json and the launches' metadata members
    complete_bytes: int  # where the last whole member ends
    file_bytes: int
    cut_inside: str | None  # the member the file ends inside, if it ends inside one

    def where_it_ends(self) -> str:
        launches = len(self.manifest["launches"])
        inside = f", inside {self.cut_inside}" if self.cut_inside else ""
        return (
            f"recovered {launches} complete launch{'es' * (launches != 1)}; the file's whole members "
            f"end at byte {self.complete_bytes:,} of {self.file_bytes:,}{inside}"
        )


def _sizes(extra: bytes, compressed: int, uncompressed: int) -> tuple[int, int]:
    """The sizes a local header gives, from its ZIP64 extra field where it says 0xFFFFFFFF."""
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, at)
        field = extra[at + 4 : at + 4 + length]
        if kind == _ZIP64_EXTRA:
            values = [v for (v,) in struct.iter_unpack("<Q", field[: len(field) // 8 * 8])]
            if uncompressed == 0xFFFFFFFF and values:
                uncompressed = values.pop(0)
            if compressed == 0xFFFFFFFF and values:
                compressed = values.pop(0)
        at += 4 + length
    return compressed, uncompressed


def _walk(path: Path, file_bytes: int) -> tuple[dict[str, zipfile.ZipInfo], int, str | None]:
    members: dict[str, zipfile.ZipInfo] = {}
    offset, cut = 0, None
    with open(path, "rb") as file:
        while True:
            file.seek(offset)
            header = file.read(_LOCAL.size)
            if len(header) < _LOCAL.size or header[:4] != _LOCAL_SIGNATURE:
                cut = "a zip header" if header and _LOCAL_SIGNATURE.startswith(header[:4]) else None
                break
            _, _, flags, method, _, _, crc, compressed, size, name_length, extra_length = _LOCAL.unpack(
                header
            )
            rest = file.read(name_length + extra_length)
            if len(rest) < name_length + extra_length:
                cut = "a zip header"
                break
            name = rest[:name_length].decode("utf-8", errors="replace")
            compressed, size = _sizes(rest[name_length:], compressed, size)
            end = offset + _LOCAL.size + name_length + extra_length + compressed
            if flags & _SIZES_FOLLOW_DATA or end > file_bytes:
                cut = name
                break
            member = zipfile.ZipInfo(name)
            member.header_offset, member.flag_bits, member.compress_type = offset, flags, method
            member.compress_size, member.file_size, member.CRC = compressed, size, crc
            if member_problem(member, file_bytes) is None and name not in members:
                members[name] = member
            offset = end
    return members, offset, cut


def _json(path: Path, member: zipfile.ZipInfo | None) -> Any:
    if member is None or member.file_size > MAX_META_BYTES:
        return None
    try:
        return json.loads(read_member(path, member).tobytes())
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, RecursionError):
        return None


def recover(path: Path, file_bytes: int) -> Recovered | None:
    """The members and a manifest of the complete launches of an unclosed session file, or None
    when the file holds no session info (not a session file of format 2 or later)."""
    members, complete, cut = _walk(path, file_bytes)
    info = _json(path, members.get(SESSION_INFO))
    if not isinstance(info, dict):
        return None
    launches = []
    buffers = [name for name in members if name.startswith("launches/") and name.endswith(".npy")]
    for entry in sorted(buffers, key=lambda name: (len(name), name)):  # numbered past 6 digits too
        meta = _json(path, members.get(launch_meta_member(entry)))
        if not isinstance(meta, dict):
            cut = cut or launch_meta_member(entry)
            break
        launches.append({"entry": entry, "meta": meta})
    manifest = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "info": info, "launches": launches}
    return Recovered(members, manifest, complete, file_bytes, reprlib.repr(cut) if cut else None)
