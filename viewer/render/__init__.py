"""A session file straight to trace files, chunk by chunk: what ``finalize`` runs.

``session`` holds ``render_session`` (every format asked for, in memory that does not grow with
the session); ``plan`` cuts a large session into parts (a large launch into shares of its SMs),
and ``parts`` writes its Perfetto trace in those parts, on worker processes that run that
module, the same bytes however many: forks of a ``forkserver`` the session started, or
processes started ``ahead`` of the render. Outside this package, use what it exports
here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proton_ik.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from proton_ik.viewer.render.ahead import Workers, start_workers_for
    from proton_ik.viewer.render.forkserver import ForkServer, start_fork_server
    from proton_ik.viewer.render.parts import StartedRunners
    from proton_ik.viewer.render.session import RenderStats, render_session

__all__ = [
    "ForkServer",
    "RenderStats",
    "StartedRunners",
    "Workers",
    "render_session",
    "start_fork_server",
    "start_workers_for",
]

# Imported when first asked for (PEP 562): a worker process runs ``parts`` alone, without the
# writers of the other formats that ``session`` imports.
_EXPORTED_FROM = {
    "ForkServer": "proton_ik.viewer.render.forkserver",
    "start_fork_server": "proton_ik.viewer.render.forkserver",
    "StartedRunners": "proton_ik.viewer.render.parts",
    "Workers": "proton_ik.viewer.render.ahead",
    "start_workers_for": "proton_ik.viewer.render.ahead",
    "RenderStats": "proton_ik.viewer.render.session",
    "render_session": "proton_ik.viewer.render.session",
}


__getattr__, __dir__ = lazy_exports("proton_ik.viewer.render", globals(), _EXPORTED_FROM)
