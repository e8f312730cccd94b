"""What a file proton_ik may be asked to read is, by its content, not its suffix, and the trace
read back where it is one: the one home of that choice for ``viewer.load`` and the command line."""

from __future__ import annotations

from pathlib import Path

from proton_ik.contract.session_format import is_session_file
from proton_ik.viewer.readback.chrome import read_chrome
from proton_ik.viewer.readback.perfetto import read_perfetto
from proton_ik.viewer.readback.trace_file import TraceFile
from proton_ik.viewer.session_file import SessionFileError

# A Perfetto trace is a protobuf ``Trace``: its first byte is the tag of field 1 (packet),
# length-delimited.
_PERFETTO_FIRST_BYTE = 0x0A
TRACE_KINDS = ("chrome", "perfetto")


def file_kind(path: Path) -> str:
    """What a file holds: a session file (and a path that is no file: reading it as one says
    why), a Chrome trace (JSON), a Perfetto trace, or nothing we read ("empty", "unknown";
    ``not_ours`` says so)."""
    if not path.is_file() or is_session_file(path):
        return "session"
    with open(path, "rb") as file:
        head = file.read(64)
    if not head:
        return "empty"
    if head.lstrip().startswith((b"{", b"[")):
        return "chrome"
    return "perfetto" if head[0] == _PERFETTO_FIRST_BYTE else "unknown"


def not_ours(path: Path, kind: str) -> SessionFileError | None:
    """The error for a file that is no session and no trace, else None."""
    if kind == "empty":
        return SessionFileError(
            f"{path} is empty (0 bytes): not a proton_ik session file nor a trace. A session file is "
            "written by proton_ik.finalize(); a killed process leaves NAME.pik.HOST-PID.partial instead"
        )
    if kind == "unknown":
        return SessionFileError(
            f"{path} is not a proton_ik file: it is neither a session file (.pik, a zip archive), a "
            "Chrome JSON trace nor a Perfetto trace. Pass a file proton_ik.finalize() wrote, or "
            "`proton-ik convert` made"
        )
    return None


def read_trace(path: str | Path, kind: str, for_writing: bool = False) -> TraceFile:
    """A trace (``kind``: one of ``TRACE_KINDS``) read back; ``for_writing`` keeps what the
    writers need too (times, units, lanes), which a summary does not, at about twice the memory."""
    if kind not in TRACE_KINDS:
        raise ValueError(f"a trace is one of {list(TRACE_KINDS)}, not {kind!r}")
    read = read_chrome if kind == "chrome" else read_perfetto
    return read(Path(path), for_writing=for_writing)
