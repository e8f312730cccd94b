"""The Chrome JSON writer (chrome://tracing, and tools that read the legacy format): ``writer``
draws the track model as processes and threads, chunk by chunk; ``events`` adds the events,
marks and values beside the scope slices."""

from proton_ik.viewer.chrome.writer import ChromeWriter, write_chrome

__all__ = ["ChromeWriter", "write_chrome"]
