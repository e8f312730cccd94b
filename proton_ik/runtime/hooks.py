"""Triton runtime hooks: our profile allocator, kernel loads and launch enter/exit.

Triton calls the profile allocator with ``grid * cta_bytes`` just before each launch of a
kernel whose metadata asks for ``profile_scratch``, then the launch-enter hook, then the
launch, then the launch-exit hook. The allocator takes a chunk from the pool of the current
device, the enter hook ties it to the kernel, and the exit hook queues it on that device's
drain: an event on the launch's stream and nothing more.

The allocator is not told which kernel launches. ``CompiledKernel.launch_metadata``, which
Triton calls just before the launch while an enter hook is set, is wrapped to say it (the
kernel and its grid, per thread). A kernel that samples CTAs then gets only the regions its
sampled CTAs write (``Sampling.buffer_bytes``), not a region for every CTA of the grid.

A launch captured into a CUDA graph gets a buffer of its own instead, from the graph's
private memory pool, so that every replay writes there and never into a pool chunk that has
since been handed to another launch; ``runtime.graphs`` copies it out after each replay.
"""

from __future__ import annotations

import json
import math
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from triton import knobs
from triton.compiler.compiler import CompiledKernel
from triton.runtime._allocation import set_profile_allocator

from proton_ik import host_scopes
from proton_ik.contract.layout import BufferLayout
from proton_ik.contract.metadata import SCRATCH_SIZE_KEY, KernelMetadata, read_compile_metadata
from proton_ik.runtime.drain import Drain, Launch, Sink
from proton_ik.runtime.pool import Chunk, PoolTooSmall


@dataclass(frozen=True)
class KernelInfo:
    name: str
    num_warps: int
    cta_bytes: int
    metadata: KernelMetadata
    profile: dict[str, Any]  # ``metadata.to_dict()``, made once: every launch's meta holds it

    @property
    def layout(self) -> BufferLayout:
        return self.metadata.layout

    @property
    def dense(self) -> bool:
        """Segments sized from the code's bound: a chunk is copied whole."""
        return self.metadata.sized_from_bound


# Filled as kernels load, across sessions: a kernel loaded in one session may launch in the next.
_kernels: dict[int, KernelInfo] = {}


def _on_kernel_load(module, function, name, metadata_group, hash) -> None:
    path = next((p for key, p in metadata_group.items() if key.endswith(".json")), None)
    if path is None or not function:
        return
    with open(path) as file:
        metadata = json.load(file)
    kernel = read_compile_metadata(metadata, f"kernel {metadata.get('name')}")
    if kernel is not None:
        _kernels[function] = KernelInfo(
            name=metadata["name"],
            num_warps=int(metadata["num_warps"]),
            cta_bytes=int(metadata[SCRATCH_SIZE_KEY]),
            metadata=kernel,
            profile=kernel.to_dict(),
        )


def grid_ctas(grid: Any) -> int | None:
    """The CTAs of a launch grid of 1 to 3 extents; None for a grid this cannot read (then
    Triton's request stands)."""
    try:
        extents = [int(extent) for extent in grid]
    except (TypeError, ValueError):
        return None
    if not 1 <= len(extents) <= 3 or min(extents) < 0:
        return None
    return math.prod(extents)


def buffer_request(size: int, upcoming: tuple[int, int] | None) -> tuple[int | None, int]:
    """The launch's CTAs, where known, and the bytes its buffer needs, for Triton's request of
    ``size`` bytes when ``upcoming`` (function, CTAs) announced the launch: only the sampled
    CTAs' regions where the launching kernel samples CTAs and Triton asked for a region for each
    CTA of that grid; anything else (a cluster launch, a kernel not ours) gets all ``size``
    bytes, as Triton asked."""
    kernel = _kernels.get(upcoming[0]) if upcoming is not None else None
    if kernel is None or upcoming is None or kernel.layout.sampling.every_cta:
        return None, size
    ctas = upcoming[1]
    if size != ctas * kernel.cta_bytes:
        return None, size
    return ctas, kernel.layout.sampling.buffer_bytes(ctas, kernel.cta_bytes)


def _ctas(allocation: _Allocation, kernel: KernelInfo) -> int:
    """The launch's CTAs: as the allocator learned them, or from Triton's request, a region each."""
    return allocation.ctas if allocation.ctas is not None else allocation.size // kernel.cta_bytes


class _Announcing:
    """The recorder that the wrapped ``CompiledKernel.launch_metadata`` tells of each launch."""

    recorder: LaunchRecorder | None = None


_announcing = _Announcing()
_plain_launch_metadata = CompiledKernel.launch_metadata


def _announced_launch_metadata(self: CompiledKernel, grid: Any, stream: int, *args: Any) -> Any:
    data = _plain_launch_metadata(self, grid, stream, *args)  # loads the kernel: its handle is set
    recorder = _announcing.recorder
    if recorder is not None:
        recorder.announce(self.function, grid)
    return data


def _launch_names(data: dict[str, Any]) -> dict[str, Any]:
    """The name and numeric metrics a kernel's ``launch_metadata`` gave a launch, as Proton's
    hook="triton" reads them."""
    named: dict[str, Any] = {}
    if isinstance(data.get("name"), str):
        named["name"] = data["name"]
    metrics = {
        str(key): value
        for key, value in data.items()
        if key not in ("name", "function", "stream")
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
    }
    if metrics:
        named["launch_metrics"] = metrics
    return named


class _DevicePointer:
    __slots__ = ("pointer",)

    def __init__(self, pointer: int):
        self.pointer = pointer

    def data_ptr(self) -> int:
        return self.pointer


@dataclass
class _Allocation:
    size: int
    ctas: int | None  # the grid's CTAs where the allocator knew them (a sampled buffer holds fewer)
    stream: int
    drain: Drain | None = None  # a pool chunk on this device's drain...
    chunk: Chunk | None = None
    buffer: Any = None  # ...or a buffer of a graph being captured (a torch tensor)


class _Launching(threading.local):
    """What one thread's launch in progress holds between Triton's allocator and hook calls."""

    upcoming: tuple[int, int] | None = None  # (function, CTAs): the kernel about to launch
    pending: _Allocation | None = None  # allocated, launch not yet entered
    current: tuple[_Allocation, KernelInfo | None, int, dict[str, Any]] | None = None


@dataclass
class CapturedLaunch:
    """An instrumented launch inside a CUDA graph: its metadata and the buffer it writes."""

    meta: dict[str, Any]
    kernel: KernelInfo
    buffer: Any  # torch tensor in the graph's private pool


@dataclass
class FlushPolicy:
    """When recorded launches go to the session file without waiting for the pool to fill: every
    ``launches`` launches, or once ``seconds`` have passed since the last flush (None: never)."""

    launches: int | None = None
    seconds: float | None = None
    _since: float = field(default_factory=lambda: time.monotonic())

    def due(self, recorded: int) -> bool:
        """Whether the ``recorded``-th launch (counting from 1) ends a flush period."""
        if self.launches is not None and recorded % self.launches == 0:
            self._since = time.monotonic()
            return True
        if self.seconds is not None and time.monotonic() - self._since >= self.seconds:
            self._since = time.monotonic()
            return True
        return False


class LaunchRecorder:
    """Installs the hooks and turns each instrumented launch into a drained capture."""

    def __init__(
        self, pool_bytes: int, sink: Sink, launch_metadata: bool = False, flush: FlushPolicy | None = None
    ):
        import torch

        self._torch = torch
        self.flush = flush or FlushPolicy()
        self.pool_bytes = pool_bytes
        # hook="triton": name each launch, and keep its metrics, from the kernel's launch_metadata
        self.launch_metadata = launch_metadata
        self.sink = sink
        self.drains: dict[int, Drain] = {}
        self.launches = 0
        self._numbering = threading.Lock()
        self.recording = False
        self.unrecorded: Counter[tuple[str, str]] = Counter()  # (kernel, why) -> launches
        self.refused: list[str] = []  # the pool's reason for each launch it refused (which never ran)
        # Set by runtime.graphs while a graph is being captured on this thread.
        self.on_captured: Callable[[CapturedLaunch], bool] | None = None
        # Set by runtime.autotune: the config an autotuner is launching, as plain data.
        self.current_config: Callable[[], dict[str, Any] | None] = lambda: None
        # Per thread: Triton calls the allocator, then the enter and exit hooks, on the thread
        # that launches, and several threads may launch at once.
        self._launching = _Launching()
        self._warned: set[str] = set()
        self._drain_of_stream: dict[int, Drain] = {}  # a stream handle belongs to one device

    def drain_for(self, device: int) -> Drain:
        drain = self.drains.get(device)
        if drain is None:
            with self._numbering:  # two threads' first launches on a device make one drain
                drain = self.drains.get(device)
                if drain is None:
                    drain = self.drains[device] = Drain(device, self.pool_bytes, self.sink)
        return drain

    # --- hooks -------------------------------------------------------------------------------
    def allocate(self, size: int, alignment: int, stream: int | None) -> Any:
        torch = self._torch
        launching = self._launching
        if launching.pending is not None:
            self._abandon(launching.pending)  # the previous allocation never reached a launch
        ctas, size = buffer_request(size, launching.upcoming)
        launching.upcoming = None
        # torch's C entry points: their Python wrappers cost microseconds on every launch.
        if torch._C._cuda_isCurrentStreamCapturing():
            buffer = torch.empty(size, dtype=torch.uint8, device="cuda")
            launching.pending = _Allocation(size, ctas, stream or 0, buffer=buffer)
            return buffer
        drain = self._drain_of_stream.get(stream) if stream else None
        if drain is None:
            # Handle 0, the legacy default stream, stands for a different stream on each device.
            drain = self.drain_for(torch._C._cuda_getDevice())
            if stream:
                self._drain_of_stream[stream] = drain
        try:
            chunk = drain.allocate(size)
        except PoolTooSmall as error:  # the launch does not run; finalize says why nothing was
            self.refused.append(str(error))
            raise
        launching.pending = _Allocation(size, ctas, stream or 0, drain=drain, chunk=chunk)
        return _DevicePointer(drain.base + chunk.offset)

    def enter(self, launch) -> None:
        launching = self._launching
        launching.upcoming = None  # told of this launch; never of the next, which tells its own
        allocation = launching.pending
        if allocation is None:
            return
        launching.pending = None
        # launch.get() runs the kernel's launch_metadata function: only when asked to.
        data = launch.get() if self.launch_metadata else launch.data
        stream = data.get("stream", allocation.stream)
        named = _launch_names(data) if self.launch_metadata else {}
        launching.current = (allocation, _kernels.get(data.get("function")), int(stream or 0), named)

    def exit(self, launch) -> None:
        launching = self._launching
        if launching.current is None:
            return
        allocation, kernel, stream, named = launching.current
        launching.current = None
        if allocation.buffer is not None:
            self._captured(allocation, kernel, stream, named)
            return
        assert allocation.drain is not None and allocation.chunk is not None
        if kernel is None or not self.recording:
            # Not one of ours (or recording is paused): free the chunk once the launch is done.
            drain = allocation.drain
            drain.submit(Launch(None, allocation.chunk, None, False, drain.event()), stream)
            return
        meta = self.launch_meta(kernel, _ctas(allocation, kernel), stream, allocation.drain.device, named)
        drain = allocation.drain
        drain.submit(Launch(meta, allocation.chunk, kernel.layout, kernel.dense, drain.event()), stream)
        if self.flush.due(meta["launch"] + 1):
            for each in list(self.drains.values()):
                each.flush_soon()

    # --- helpers ---------------------------------------------------------------------------
    def launch_meta(
        self, kernel: KernelInfo, ctas: int, stream: int, device: int, named: dict[str, Any]
    ) -> dict[str, Any]:
        """A launch's metadata for the session file; numbers it in the order launches are made."""
        return {"launch": self.next_launch(), **self._described(kernel, ctas, stream, device, named)}

    def next_launch(self) -> int:
        """The next launch number: launches are numbered in the order they are made."""
        with self._numbering:
            number = self.launches
            self.launches += 1
        return number

    def _described(
        self, kernel: KernelInfo, ctas: int, stream: int, device: int, named: dict[str, Any]
    ) -> dict[str, Any]:
        """What a launch's metadata says of it, but its number."""
        meta: dict[str, Any] = {
            "kernel": kernel.name,
            "stream": stream,
            "device": device,
            "num_warps": kernel.num_warps,
            "num_ctas": ctas,
            "profile": kernel.profile,
            **named,
        }
        config = self.current_config()
        if config is not None:
            meta["config"] = config
        scopes = host_scopes.open_scopes()
        if scopes:
            meta["host_scope"] = scopes
        return meta

    def _abandon(self, allocation: _Allocation) -> None:
        if allocation.drain is not None and allocation.chunk is not None:
            allocation.drain.pool.release(allocation.chunk)

    def _captured(
        self, allocation: _Allocation, kernel: KernelInfo | None, stream: int, named: dict[str, Any]
    ) -> None:
        if kernel is None:
            return
        device = self._torch.cuda.current_device()
        meta = self._described(kernel, _ctas(allocation, kernel), stream, device, named)
        captured = CapturedLaunch(meta, kernel, allocation.buffer)
        if self.on_captured is not None and self.on_captured(captured):
            return
        why = (
            "launched inside a CUDA graph capture that proton_ik did not see begin (only "
            "torch.cuda.CUDAGraph captures are followed); its replays are not recorded"
        )
        self.unrecorded[(kernel.name, why)] += 1
        self.warn_once(why, f"proton_ik: {kernel.name} was {why}.")

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, stacklevel=3)

    def unrecorded_info(self) -> list[dict[str, Any]]:
        return [
            {"kernel": kernel, "reason": why, "count": count}
            for (kernel, why), count in sorted(self.unrecorded.items())
        ]

    # --- lifetime --------------------------------------------------------------------------
    def install(self) -> None:
        knobs.runtime.kernel_load_end_hook.add(_on_kernel_load)
        knobs.runtime.launch_enter_hook.add(self.enter)
        knobs.runtime.launch_exit_hook.add(self.exit)
        set_profile_allocator(self.allocate)
        _announcing.recorder = self
        CompiledKernel.launch_metadata = _announced_launch_metadata
        self.recording = True

    def uninstall(self) -> None:
        self.recording = False
        _announcing.recorder = None
        if CompiledKernel.launch_metadata is _announced_launch_metadata:  # nobody wrapped ours since
            CompiledKernel.launch_metadata = _plain_launch_metadata
        knobs.runtime.kernel_load_end_hook.remove(_on_kernel_load)
        knobs.runtime.launch_enter_hook.remove(self.enter)
        knobs.runtime.launch_exit_hook.remove(self.exit)
        set_profile_allocator(None)

    def announce(self, function: int, grid: Any) -> None:
        """The kernel ``function`` is about to launch on ``grid`` in this thread: the allocator,
        called next, sizes its buffer from it."""
        ctas = grid_ctas(grid)
        self._launching.upcoming = None if ctas is None else (function, ctas)

    def close(self) -> None:
        """Copy everything off every device; stop the drain threads."""
        for drain in self.drains.values():
            drain.close()
