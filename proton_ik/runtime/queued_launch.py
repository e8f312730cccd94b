"""A launch while the drain holds it: queued in the pool by the launch path (``QueuedLaunch``),
then copied to the host for the session file (``CopiedLaunch``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from proton_ik.runtime import compiled
from proton_ik.runtime.loaded import KernelInfo
from proton_ik.runtime.pool import PoolChunk


@dataclass(slots=True)
class QueuedLaunch:
    """One launch waiting in the pool: what the launch path keeps of it (the session file's
    metadata is made from it on the drain thread, ``meta``), its chunk, and its event."""

    chunk: PoolChunk
    number: int | None = None  # None: not recorded; only give the chunk back once it is done
    kernel: KernelInfo | None = None
    num_ctas: int = 0
    stream: int = 0
    device: int = 0
    extra: dict[str, Any] | None = None  # names, metrics, config, host scopes, graph replay: as stored
    # A torch.cuda.Event recorded on the launch's stream after it, shared by the launches of that
    # stream since the last one (None until it is recorded: the drain waits for it)
    launched: Any = None
    owns_event: bool = False  # the last launch of those that share it: it gives the event back

    def meta(self) -> dict[str, Any]:
        kernel = self.kernel
        assert kernel is not None and self.number is not None, "a launch not recorded has no metadata"
        meta = {
            "launch": self.number,
            "kernel": kernel.name,
            "stream": self.stream,
            "device": self.device,
            "num_warps": kernel.num_warps,
            "num_ctas": self.num_ctas,
            "profile": kernel.profile,
        }
        if self.extra:
            meta.update(self.extra)
        return meta


def queued_launch_type() -> type:
    """The class the launch path queues launches as: the compiled one where it is built (the
    same fields, and this class's methods), else ``QueuedLaunch``."""
    built = compiled.launch_path()
    return QueuedLaunch if built is None else _compiled_queued_launch(built)


@functools.cache
def _compiled_queued_launch(built: Any) -> type:
    """The compiled class, given ``QueuedLaunch``'s methods (its fields are the dataclass's)."""
    built.adopt("meta", QueuedLaunch.meta)
    return built.QueuedLaunch


@dataclass(slots=True)
class CopiedLaunch:
    """A launch taken off the queue, and what the writer thread is to write of it (nothing when
    ``meta`` is None: a launch not recorded, or a copy that failed)."""

    launch: QueuedLaunch
    meta: dict[str, Any] | None = None
    data: np.ndarray | None = None
    trimmed: bool = False

    @property
    def nbytes(self) -> int:
        return 0 if self.data is None else self.data.nbytes


def copied_whole(launch: QueuedLaunch) -> bool:
    """A recorded launch whose chunk is copied whole: segments sized from the code's bound (at
    most twice what was written), or an aggregate's statistics, every byte of which counts."""
    kernel = launch.kernel
    return launch.number is not None and kernel is not None and (kernel.dense or kernel.layout.aggregate)
