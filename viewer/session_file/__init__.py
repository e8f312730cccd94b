"""A session file (``.pik``) read back: every launch's buffer and metadata, exactly as captured.

``reader`` opens the file (``read_session``) and hands out launches whose buffers are read
lazily; ``manifest`` checks the manifest against its schema before any buffer is read;
``zip_members`` reads members and their ``.npy`` arrays in bounded memory; ``recover`` finds the
complete launches of a file that was never closed. The format itself is
``proton_ik.contract.session_format``'s. Outside this package, use what it exports here.
"""

from __future__ import annotations

from proton_ik.viewer.session_file.manifest import ManifestError, check_info
from proton_ik.viewer.session_file.reader import (
    LaunchCapture,
    SessionFileError,
    StoredLaunch,
    StoredSession,
    read_session,
    session_from_portable,
    session_from_written,
    stored_launches_hint,
)

__all__ = [
    "LaunchCapture",
    "ManifestError",
    "SessionFileError",
    "StoredLaunch",
    "StoredSession",
    "check_info",
    "read_session",
    "session_from_portable",
    "session_from_written",
    "stored_launches_hint",
]
