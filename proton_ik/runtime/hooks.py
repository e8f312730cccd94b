"""Triton runtime hooks: our profile allocator, kernel loads and launch enter/exit.

Triton calls the profile allocator with ``grid * cta_bytes`` just before each launch of a
kernel whose metadata asks for ``profile_scratch``, then the launch-enter hook, then the
launch, then the launch-exit hook. The allocator takes a chunk from the pool, the enter hook
ties it to the kernel, and the exit hook queues the asynchronous copy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from triton import knobs
from triton.runtime._allocation import set_profile_allocator

from proton_ik.lowering.pipeline import METADATA_KEY
from proton_ik.runtime.drain import Drain
from proton_ik.runtime.pool import Chunk, RingPool


@dataclass(frozen=True)
class KernelInfo:
    name: str
    num_warps: int
    cta_bytes: int
    profile: dict[str, Any]  # lowering.pipeline.kernel_metadata


# Filled as kernels load, across sessions: a kernel loaded in one session may launch in the next.
_kernels: dict[int, KernelInfo] = {}


def _on_kernel_load(module, function, name, metadata_group, hash) -> None:
    path = next((p for key, p in metadata_group.items() if key.endswith(".json")), None)
    if path is None or not function:
        return
    with open(path) as file:
        metadata = json.load(file)
    profile = metadata.get(METADATA_KEY)
    if profile:
        _kernels[function] = KernelInfo(
            name=metadata["name"],
            num_warps=int(metadata["num_warps"]),
            cta_bytes=int(metadata["profile_scratch_size"]),
            profile=profile,
        )


class _DevicePointer:
    __slots__ = ("pointer",)

    def __init__(self, pointer: int):
        self.pointer = pointer

    def data_ptr(self) -> int:
        return self.pointer


class LaunchRecorder:
    """Installs the hooks and turns each instrumented launch into a drained capture."""

    def __init__(self, pool: RingPool, arena, drain: Drain):
        self.pool = pool
        self.arena = arena
        self.base = arena.data_ptr()
        self.drain = drain
        self.launches = 0
        self.recording = False
        self._pending: tuple[Chunk, int] | None = None  # allocated, launch not yet entered
        self._current: tuple[Chunk, KernelInfo | None, int] | None = None

    def allocate(self, size: int, alignment: int, stream: int | None) -> _DevicePointer:
        if self._pending is not None:
            # The previous allocation never reached a launch (it raised): nothing was written.
            self.pool.release(self._pending[0])
        chunk = self.pool.allocate(size, self.drain.wait_for_oldest)
        self._pending = (chunk, stream or 0)
        return _DevicePointer(self.base + chunk.offset)

    def enter(self, launch) -> None:
        if self._pending is None:
            return
        chunk, stream = self._pending
        self._pending = None
        function = launch.data.get("function")
        self._current = (chunk, _kernels.get(function), launch.data.get("stream", stream))

    def exit(self, launch) -> None:
        if self._current is None:
            return
        chunk, kernel, stream = self._current
        self._current = None
        if kernel is None or not self.recording:
            # Not one of ours (or recording is paused): free the chunk once the launch is done.
            self.drain.submit(None, chunk, stream)
            return
        meta = {
            "launch": self.launches,
            "kernel": kernel.name,
            "stream": int(stream),
            "num_warps": kernel.num_warps,
            "num_ctas": chunk.size // kernel.cta_bytes,
            "profile": kernel.profile,
        }
        self.launches += 1
        self.drain.submit(meta, chunk, stream)

    def install(self) -> None:
        knobs.runtime.kernel_load_end_hook.add(_on_kernel_load)
        knobs.runtime.launch_enter_hook.add(self.enter)
        knobs.runtime.launch_exit_hook.add(self.exit)
        set_profile_allocator(self.allocate)
        self.recording = True

    def uninstall(self) -> None:
        self.recording = False
        knobs.runtime.kernel_load_end_hook.remove(_on_kernel_load)
        knobs.runtime.launch_enter_hook.remove(self.enter)
        knobs.runtime.launch_exit_hook.remove(self.exit)
        set_profile_allocator(None)
