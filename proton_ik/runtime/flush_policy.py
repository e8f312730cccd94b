"""When a session's recorded launches go to its file without waiting for the pool to fill
(``proton_ik.start(flush=...)``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class FlushPolicy:
    """When recorded launches go to the session file without waiting for the pool to fill: every
    ``launches`` launches, or once ``seconds`` have passed since the last flush (None: never)."""

    launches: int | None = None
    seconds: float | None = None
    _since: float = field(default_factory=lambda: time.monotonic())

    @property
    def never(self) -> bool:
        return self.launches is None and self.seconds is None

    def due(self, recorded: int) -> bool:
        """Whether the ``recorded``-th launch (counting from 1) ends a flush period."""
        if self.launches is not None and recorded % self.launches == 0:
            self._since = time.monotonic()
            return True
        if self.seconds is not None and time.monotonic() - self._since >= self.seconds:
            self._since = time.monotonic()
            return True
        return False
