"""Memory that arrays have freed, handed back to the operating system.

Arrays of a few hundred kilobytes (a chunk's columns) come from the C library's heap, and glibc
keeps what they free there: after large arrays are freed, it raises the size from which it maps
memory apart, so a process that decodes a session chunk by chunk and then joins the chunks'
columns held the freed chunks and the joined tables side by side (``proton-ik show`` of 24.6M
records peaked at 3.2 GB, 2.1 GB with the heap trimmed as the columns are joined).
``malloc_trim`` gives the heap's free pages back; elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None)


_TRIM = _malloc_trim()


def release_freed_memory() -> None:
    """Give the heap's free pages back to the operating system, where the C library can."""
    if _TRIM is not None:
        _TRIM(0)
