"""Triton runtime hooks: our profile allocator, kernel loads and launch exits.

Triton calls the profile allocator with ``grid * cta_bytes`` just before each launch of a
kernel whose metadata asks for ``profile_scratch``, then the launch, then the launch-exit hook.
The allocator takes a chunk from the pool of the current device, and the exit hook queues it on
that device's drain, which records an event on the launch's stream after every few launches.

The allocator is not told which kernel launches. ``CompiledKernel.launch_metadata``, which
Triton calls just before each launch, is wrapped to say it (the kernel, its grid and its
arguments, per thread). A kernel that samples CTAs then gets only the regions its sampled CTAs
write (``Sampling.buffer_bytes``), not a region for every CTA of the grid, and a kernel whose
segments are sized at launch gets the segments its arguments call for (``launch_sizing``).

Where ``launch_path/`` is built (``runtime.compiled``), Triton calls its allocator and exit
hook: they take the common case and hand every other to the methods here, the reference.

A launch captured into a CUDA graph gets a buffer of its own instead, from the graph's
private memory pool, so that every replay writes there and never into a pool chunk that has
since been handed to another launch; ``runtime.graphs`` copies it out after each replay.
"""

from __future__ import annotations

import threading
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triton import knobs
from triton.compiler.compiler import CompiledKernel
from triton.runtime import _allocation

from proton_ik import host_scopes
from proton_ik.runtime import compiled, launch_sizing
from proton_ik.runtime.drain import Drain, Sink
from proton_ik.runtime.flush_policy import FlushPolicy
from proton_ik.runtime.loaded import KERNELS, KernelInfo, on_kernel_load, register_loaded
from proton_ik.runtime.pool import PoolChunk, PoolTooSmall
from proton_ik.runtime.pool_stalls import PoolStall
from proton_ik.runtime.queued_launch import QueuedLaunch, queued_launch_type

if TYPE_CHECKING:
    from proton_ik.runtime.autotune import AutotuneFollower


class _Launching(threading.local):
    """What one thread's launch in progress holds between Triton's calls: the kernel announced
    by ``launch_metadata``, then the buffer the allocator handed it, until the exit hook."""

    upcoming: launch_sizing.Upcoming | None = None  # the kernel about to launch
    pending: _Allocation | None = None  # allocated, launch not yet exited


class _Announcing:
    """The thread states that the wrapped ``CompiledKernel.launch_metadata`` tells of each
    launch, and the recorder they belong to, while a recorder is installed."""

    launching: _Launching | None = None
    recorder: LaunchRecorder | None = None


_announcing = _Announcing()
_plain_launch_metadata = CompiledKernel.launch_metadata


def _announced_launch_metadata(self: CompiledKernel, grid: Any, stream: int, *args: Any) -> Any:
    data = _plain_launch_metadata(self, grid, stream, *args)  # loads the kernel: its handle is set
    launching = _announcing.launching
    if launching is not None:
        launching.upcoming = (self.function, grid, self, args)
    return data


def direct_recorder() -> LaunchRecorder | None:
    """The installed recorder, where a launcher that knows the kernel it launches may call it
    directly (``LaunchRecorder.allocate_for``, then ``exit``) instead of going through Triton's
    ``launch_metadata``, profile allocator and launch hooks: only while those surfaces would
    reach this recorder alone (no other launch hook is set, the profile allocator is ours) and
    no launch is named from its ``launch_metadata`` (hook="triton"). None otherwise: the
    launcher then goes through Triton's surfaces, as Triton's own launcher does."""
    recorder = _announcing.recorder
    if recorder is None or recorder.launch_metadata:
        return None
    runtime = knobs.runtime
    exits = getattr(runtime.launch_exit_hook, "calls", None)
    if (
        exits is None
        or len(exits) != 1
        or exits[0] is not recorder.exit_hook
        or getattr(runtime.launch_enter_hook, "calls", True)
        or _allocation._profile_allocator.get() is not recorder.allocator
    ):
        return None
    return recorder


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


# What a launch holds between the allocator and the exit hook, as a tuple (made on every
# launch: a tuple costs a fraction of an object's __init__):
# (kernel or None, the grid's CTAs where the allocator knew them or None, bytes, stream, then
#  the drain and its pool chunk, or, inside a CUDA graph capture, None, None and a tensor of the
#  graph's pool)
_Allocation = tuple[Any, "int | None", int, int, "Drain | None", "PoolChunk | None", Any]


def _num_ctas(kernel: KernelInfo, ctas: int | None, size: int) -> int:
    """The launch's CTAs: as the allocator learned them, or from Triton's request, a region each
    (a sampled buffer holds fewer)."""
    return ctas if ctas is not None else size // kernel.cta_bytes


@dataclass
class CapturedLaunch:
    """An instrumented launch inside a CUDA graph: what its records will say, and the buffer it
    writes (a torch tensor in the graph's private pool). Numbered at each replay."""

    kernel: KernelInfo
    num_ctas: int
    stream: int
    device: int
    extra: dict[str, Any] | None
    buffer: Any


class LaunchRecorder:
    """Installs the hooks and turns each instrumented launch into a drained capture.

    Every microsecond here is added to every launch of the user's program, so the launch path
    (the ``launch_metadata`` wrapper, ``allocate``, ``exit``) makes no Python object it can avoid
    and takes no lock another thread holds for long; the session file's metadata of a launch is
    made later, on the drain thread (``queued_launch.QueuedLaunch.meta``). There is no enter hook: the
    allocator and the exit hook see everything it would.
    """

    def __init__(
        self,
        pool_bytes: int,
        sink: Sink,
        launch_metadata: bool = False,
        flush: FlushPolicy | None = None,
        *,
        is_capturing: Callable[[], bool] | None = None,
        current_device: Callable[[], int] | None = None,
    ):
        """``is_capturing`` and ``current_device``: the two CUDA queries each launch makes
        (whether the current stream captures a graph, the current device); by default torch's
        C entry points, whose Python wrappers cost microseconds a launch. A test on a machine
        with no GPU passes its own."""
        import torch

        self._torch = torch
        if is_capturing is None:
            is_capturing = getattr(
                torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing
            )
        if current_device is None:
            current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
        self._capturing: Callable[[], bool] = is_capturing
        self._current_device: Callable[[], int] = current_device
        self.flush = flush or FlushPolicy()
        self._flush_checked = not self.flush.never
        self.pool_bytes = pool_bytes
        # hook="triton": name each launch, and keep its metrics, from the kernel's launch_metadata
        self.launch_metadata = launch_metadata
        self.sink = sink
        self.drains: dict[int, Drain] = {}
        self._numbering = threading.Lock()
        self.unrecorded: Counter[tuple[str, str]] = Counter()  # (kernel, why) -> launches
        self.refused: list[str] = []  # the pool's reason for each launch it refused (which never ran)
        # Set by runtime.graphs while a graph is being captured on this thread.
        self.on_captured: Callable[[CapturedLaunch], bool] | None = None
        # Set by the session: what names the config an autotuner is launching.
        self.autotune: AutotuneFollower | None = None
        # Per thread: Triton calls the allocator, then the exit hook, on the thread that
        # launches, and several threads may launch at once.
        self._launching = _Launching()
        self._warned: set[str] = set()
        self._drain_of_stream: dict[int, Drain] = {}  # a stream handle belongs to one device
        self._path = self._compiled_path()  # numbers the launches where it is built
        self._launches = 0  # numbered so far, where the Python path numbers them
        self.recording = False
        # The callables installed as Triton's exit hook and profile allocator: the very objects
        # ``direct_recorder`` finds there while nothing else is installed.
        self.exit_hook = self.exit if self._path is None else self._path.exit
        self.allocator = self.allocate if self._path is None else self._path.allocate

    def _compiled_path(self) -> Any:
        """The compiled launch path over this one (None where not built): it calls ``allocate``,
        ``exit`` and ``sized`` as they are now."""
        built = compiled.launch_path()
        if built is None:
            return None
        return built.LaunchPath(
            launching=self._launching,
            kernels=KERNELS,
            capturing=self._capturing,
            current_device=self._current_device,
            allocate=self.allocate,
            exit=self.exit,
            sized=self.sized,
            host_scopes=host_scopes,
            recorder=self,
            queued_launch=queued_launch_type(),
        )

    @property
    def recording(self) -> bool:
        """Whether launches are recorded (False while the session is paused)."""
        return self._recording

    @recording.setter
    def recording(self, recording: bool) -> None:
        self._recording = recording
        if self._path is not None:  # what the compiled path takes: nothing to add to a launch
            self._path.plain = recording and not self.launch_metadata and self.flush.never

    @property
    def launches(self) -> int:
        """Launches numbered so far."""
        return self._launches if self._path is None else self._path.launches

    def drain_for(self, device: int) -> Drain:
        drain = self.drains.get(device)
        if drain is None:
            with self._numbering:  # two threads' first launches on a device make one drain
                drain = self.drains.get(device)
                if drain is None:
                    drain = self.drains[device] = Drain(device, self.pool_bytes, self.sink)
        return drain

    # --- hooks -------------------------------------------------------------------------------
    def allocate_for(
        self, kernel: Any, grid: tuple[int, int, int], args: tuple, size: int, stream: int
    ) -> Any:
        """``allocate`` for a launch of ``kernel`` (a ``CompiledKernel``) that a launcher announces
        itself (see ``direct_recorder``): what ``launch_metadata`` would have told the allocator."""
        self._launching.upcoming = (kernel.function, grid, kernel, args)
        return self.allocator(size, 0, stream)

    def allocate(self, size: int, alignment: int, stream: int | None) -> Any:
        launching = self._launching
        upcoming = launching.upcoming
        launching.upcoming = None  # told of this launch; never of the next, which tells its own
        if launching.pending is not None:
            self._abandon(launching.pending)  # the previous allocation never reached a launch
        kernel = KERNELS.get(upcoming[0]) if upcoming is not None else None
        if kernel is None and upcoming is not None:
            kernel = register_loaded(upcoming[2])
        ctas, tag = None, 0
        if kernel is not None and (kernel.bound_entries is not None or not kernel.every_cta):
            kernel, ctas, size, tag = self.sized(kernel, upcoming, size)
        stream = stream or 0
        if self._capturing():
            buffer = self._torch.empty(size, dtype=self._torch.uint8, device="cuda")
            launching.pending = (kernel, ctas, size, stream, None, None, buffer)
            return buffer.data_ptr() + tag if tag else buffer
        drain = self._drain_of_stream.get(stream) if stream else None
        if drain is None:
            # Handle 0, the legacy default stream, stands for a different stream on each device.
            device = self._current_device()
            drain = self.drains.get(device) or self.drain_for(device)
            if stream:
                self._drain_of_stream[stream] = drain
            if self._path is not None and drain.route is not None:
                self._path.add_route(stream or -1 - device, drain.route)
        try:
            # The ring's fast path first; drain.allocate waits for room when the ring is full.
            chunk = drain.pool.try_allocate(size) or drain.allocate(size)
        except PoolTooSmall as error:  # the launch does not run; finalize says why nothing was
            self.refused.append(str(error))
            raise
        launching.pending = (kernel, ctas, size, stream, drain, chunk, None)
        # An int: the launcher passes it on as it is, where an object costs a data_ptr() call
        # and a driver query of the pointer on every launch.
        return drain.base + chunk.offset + tag

    def sized(
        self, kernel: KernelInfo, upcoming: launch_sizing.Upcoming | None, size: int
    ) -> tuple[KernelInfo, int | None, int, int]:
        """The buffer of a launch of a kernel whose segments are sized at launch, or that samples
        CTAs, where Triton asked for ``size`` (a region for each CTA of the grid): the kernel as
        launched (a launch-sized variant), its CTAs, the bytes it needs, and the tag of its
        address (log2 of a launch-sized kernel's capacity, in the low bits; else 0)."""
        assert upcoming is not None
        if kernel.bound_entries is None:
            ctas, size = launch_sizing.buffer_request(size, upcoming)
            return kernel, ctas, size, 0
        return launch_sizing.launch_buffer(kernel, upcoming, size, self.pool_bytes // 2)

    def exit(self, launch) -> None:
        launching = self._launching
        allocation = launching.pending
        if allocation is None:
            return
        launching.pending = None
        kernel, ctas, size, stream, drain, chunk, buffer = allocation
        if kernel is None:
            # A launch path that bound launch_metadata before the session wrapped it announces
            # nothing: the launch's own metadata (Triton's LazyDict) still names the kernel.
            data = getattr(launch, "data", None)
            function = data.get("function") if isinstance(data, dict) else None
            kernel = KERNELS.get(function) if isinstance(function, int) else None
            if kernel is not None and kernel.bound_entries is not None:
                # Its buffer came untagged: the kernel read a capacity of 1 from the address.
                ctas = size // kernel.cta_bytes
                kernel = launch_sizing.untagged(kernel)
        if buffer is not None:
            self._captured(kernel, ctas, size, stream, buffer, launch)
            return
        assert drain is not None and chunk is not None
        if kernel is None or not self.recording:
            # Not one of ours (or recording is paused): free the chunk once the launch is done.
            drain.submit(QueuedLaunch(chunk), stream)
            return
        number = self.next_launch()
        autotune = self.autotune
        if self.launch_metadata or host_scopes.open_count or (autotune is not None and autotune.active):
            extra = self._extra(launch)
        else:
            extra = None  # the common case, without a call
        num_ctas = ctas if ctas is not None else size // kernel.cta_bytes
        drain.submit(QueuedLaunch(chunk, number, kernel, num_ctas, stream, drain.device, extra), stream)
        if self._flush_checked and self.flush.due(number + 1):
            for each in list(self.drains.values()):
                each.flush_soon()

    # --- helpers ---------------------------------------------------------------------------
    def _extra(self, launch: Any) -> dict[str, Any] | None:
        """What a launch's metadata says beyond its kernel, grid and stream, read now, while the
        launch is the current one: its names and metrics (hook="triton"), the config an
        autotuner is launching, the host scopes open around it. None when there is nothing."""
        extra: dict[str, Any] | None = None
        if self.launch_metadata and launch is not None:
            # launch.get() runs the kernel's launch_metadata function: only when asked to.
            extra = _launch_names(launch.get()) or None
        autotune = self.autotune
        config = autotune.current_config() if autotune is not None and autotune.active else None
        if config is not None:
            extra = {**(extra or {}), "config": config}
        scopes = host_scopes.open_scopes() if host_scopes.open_count else None
        if scopes:
            extra = {**(extra or {}), "host_scope": scopes}
        return extra

    def next_launch(self) -> int:
        """The next launch number: launches are numbered in the order they are made."""
        if self._path is not None:
            return self._path.next_number()
        with self._numbering:
            number = self._launches
            self._launches = number + 1
        return number

    def _abandon(self, allocation: _Allocation) -> None:
        drain, chunk = allocation[4], allocation[5]
        if drain is not None and chunk is not None:
            drain.pool.release(chunk)

    def _captured(
        self, kernel: KernelInfo | None, ctas: int | None, size: int, stream: int, buffer: Any, launch: Any
    ) -> None:
        if kernel is None:
            return
        captured = CapturedLaunch(
            kernel,
            _num_ctas(kernel, ctas, size),
            stream,
            self._torch.cuda.current_device(),
            self._extra(launch),
            buffer,
        )
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
        knobs.runtime.kernel_load_end_hook.add(on_kernel_load)
        knobs.runtime.launch_exit_hook.add(self.exit_hook)
        _allocation.set_profile_allocator(self.allocator)
        _announcing.launching, _announcing.recorder = self._launching, self
        CompiledKernel.launch_metadata = _announced_launch_metadata
        self.recording = True

    def uninstall(self) -> None:
        self.recording = False
        _announcing.launching, _announcing.recorder = None, None
        if CompiledKernel.launch_metadata is _announced_launch_metadata:  # nobody wrapped ours since
            CompiledKernel.launch_metadata = _plain_launch_metadata
        knobs.runtime.kernel_load_end_hook.remove(on_kernel_load)
        knobs.runtime.launch_exit_hook.remove(self.exit_hook)
        _allocation.set_profile_allocator(None)

    def pool_stalls(self) -> list[PoolStall]:
        """The devices whose pool filled, so that a launch waited for room."""
        return [
            PoolStall(device, drain.waits, drain.waited_seconds, drain.pool.capacity, drain.pool.handed_out)
            for device, drain in sorted(self.drains.items())
            if drain.waits
        ]

    def close(self) -> None:
        """Copy everything off every device; stop the drain threads."""
        for drain in self.drains.values():
            drain.close()
