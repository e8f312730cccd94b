"""What Triton's own profiler tools read, written from a session: ``hatchet`` (Proton's tree of
per-scope metrics, for ``proton-viewer``) and ``chrome_trace`` (Proton's ``.chrome_trace``, in
Proton's schema)."""

from proton_ik.viewer.proton.chrome_trace import ProtonChromeWriter
from proton_ik.viewer.proton.hatchet import HatchetWriter

__all__ = ["HatchetWriter", "ProtonChromeWriter"]
