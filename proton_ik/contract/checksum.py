"""The session file's CRC-32, the checksum of its zip members: written by the runtime
(``runtime.stored_zip``) and checked by the viewer as it reads each member back.

zlib-ng's where it is installed (a dependency of the package; folded with carry-less multiplies,
25x the standard library's zlib 1.3 on one thread of a GPU host), else zlib's: the same checksum
either way, and both let go of the GIL."""

from __future__ import annotations

try:
    from zlib_ng.zlib_ng import crc32
except ImportError:  # a platform with no zlib-ng wheel
    from zlib import crc32

__all__ = ["crc32"]
