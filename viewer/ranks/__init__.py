"""A job's sessions (its ranks, its GPUs) together: ``scopes`` sets their per-scope means side by
side (``proton-ik show`` of several sessions), ``merge`` draws them in one Perfetto trace on the
host's time axis. Outside this package, use what it exports here.
"""

from __future__ import annotations

from proton_ik.viewer.ranks.merge import files_named, merge_sessions, sessions_of
from proton_ik.viewer.ranks.scopes import label_of, side_by_side, side_by_side_text

__all__ = ["files_named", "label_of", "merge_sessions", "sessions_of", "side_by_side", "side_by_side_text"]
