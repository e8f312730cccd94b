"""What ``proton_ik.finalize`` returns: the files a session wrote, and its trace, events and
summary read from its file when first asked for."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Result:
    """What ``finalize`` returns: the files written, and the decoded events on demand (the
    session is decoded again, from its file, the first time they are asked for)."""

    name: str
    paths: dict[str, str] = field(default_factory=dict)
    launches: int = 0
    records: int = 0  # counted while a trace is written; 0 with formats=()
    finalize_seconds: float = 0.0
    # Seconds the program waited for room in a full device pool (``warn_of_stalls``).
    pool_wait_seconds: float = 0.0
    session_path: Path | None = None
    _trace: Any = field(default=None, repr=False)

    @property
    def trace(self):
        """The whole session as a ``proton_ik.viewer.Trace``, or None when nothing ran."""
        if self._trace is None and self.launches and self.session_path is not None:
            from proton_ik import viewer

            self._trace = viewer.load(self.session_path)
        return self._trace

    def _trace_or_empty(self):
        """The trace, or an empty one (its tables with their columns, a summary that says nothing
        was captured) where nothing ran: code written for a GPU runs the same without one."""
        if self.trace is not None:
            return self.trace
        from proton_ik import viewer

        return viewer.Trace.from_captures({"name": self.name}, [])

    @property
    def events(self):
        return self._trace_or_empty().events

    def summary(self):
        """Per-scope statistics of the session: read off its file chunk by chunk (no events
        table: ``viewer.summarize_session``), or off the trace where it is loaded already."""
        if self._trace is None and self.launches and self.session_path is not None:
            from proton_ik import viewer

            return viewer.summarize_session(self.session_path).summary
        return self._trace_or_empty().summary()
