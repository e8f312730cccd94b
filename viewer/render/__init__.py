"""A session file straight to trace files, chunk by chunk: what ``finalize`` runs.

``session`` holds ``render_session`` (every format asked for, in memory that does not grow with
the session); ``parts`` writes a large session's Perfetto trace in parts, on worker processes
that run that module, the same bytes however many. Outside this package, use what it exports
here.
"""

from __future__ import annotations

from proton_ik.viewer.render.parts import Workers, start_workers_for
from proton_ik.viewer.render.session import RenderStats, render_session

__all__ = ["RenderStats", "Workers", "render_session", "start_workers_for"]
