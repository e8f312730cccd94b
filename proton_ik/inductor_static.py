"""Inductor's static CUDA launcher for kernels that record: part of the torch.compile integration
(``torch_compile`` installs it with the session's mode and removes it with the mode).

Why: Inductor launches the kernels it compiles through its static launcher, a call into C++
that skips Triton's Python launcher. It refuses a kernel with a profile buffer
(``profile_scratch_size > 0``) and one built while a launch hook is set, and Inductor then falls
back to Triton's launcher: measured on an H200 on the compiled transformer block of the
benchmarks (9 Triton launches a step), the step takes 0.26 ms with the static launcher and
0.46 ms without it, so a session that records every kernel paid 22 us a launch before recording
anything.

What: ``recording_kernels`` wraps Inductor's ``statically_launched_kernel_by_device`` so that a
CUDA kernel with a profile buffer gets a ``RecordingStaticKernel``: the static launcher's own
class, built by its own ``__init__`` from a view of the kernel with no profile buffer and a view
of Triton's knobs with no hooks (the only two checks that refuse it), whose ``run`` does what
Triton's launcher does around a launch, through Triton's own surfaces: the kernel's
``launch_metadata`` (which tells the session which kernel and grid launch next), the profile
allocator for the buffer, the launch-enter hooks, the launch with the buffer as the kernel's
last parameter, the launch-exit hooks. Anything else (global scratch, clusters, TMA descriptors,
another device type) goes to Inductor's own function, which refuses it as before.

A recording static kernel never crosses a process: it holds the compiled kernel it announces,
and pickling it raises (an instrumented binary run without its buffer would write through a
null pointer). So it never reaches the FX graph cache either: Inductor's bundle of statically
launched autotuners (``TritonBundler.put_static_autotuner``) leaves out autotuners that hold one
(``records``; ``torch_compile`` patches the bundler), and a program loaded from that cache
compiles them from source, under the mode it then runs in.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

__all__ = ["bundle_without_recording", "recording_kernels", "records", "without_fast_launcher"]

# What the static launcher's __init__ reads of Triton's knobs: the launch hooks, as none.
_NO_HOOKS = types.SimpleNamespace(
    runtime=types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
)


class _WithoutProfileBuffer:
    """The compiled kernel as the static launcher's ``__init__`` reads it, with no profile
    buffer: every attribute is the kernel's but ``metadata.profile_scratch_size``, 0."""

    def __init__(self, kernel: Any):
        self._kernel = kernel
        self.metadata = kernel.metadata._replace(profile_scratch_size=0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)


def _profile_bytes(kernel: Any) -> int:
    metadata = getattr(kernel, "metadata", None)
    size = getattr(metadata, "profile_scratch_size", 0)
    return size if isinstance(size, int) else 0


def _unhooked_init(static: types.ModuleType) -> tuple[type, Callable[..., None]] | None:
    """This torch's ``StaticallyLaunchedCudaKernel``, and the ``__init__`` of its base, run as it
    is, in a namespace whose Triton knobs have no hooks; None where the static launcher is not
    built as this module expects."""
    cuda = getattr(static, "StaticallyLaunchedCudaKernel", None)
    base = getattr(static, "StaticallyLaunchedTritonKernel", None)
    init: Any = getattr(base, "__init__", None)
    code = getattr(init, "__code__", None)
    if cuda is None or code is None or "triton_knobs" not in code.co_names:
        return None
    namespace = {**vars(static), "triton_knobs": _NO_HOOKS}
    return cuda, types.FunctionType(code, namespace, code.co_name, init.__defaults__, init.__closure__)


def _recording_class(static: types.ModuleType) -> type | None:
    """The recording subclass of this torch's ``StaticallyLaunchedCudaKernel``, or None where the
    static launcher is not built as this module expects."""
    found = _unhooked_init(static)
    if found is None:
        return None
    cuda, base_init = found
    from triton import knobs
    from triton.runtime import _allocation

    from proton_ik.runtime.hooks import direct_recorder

    class RecordingStaticKernel(cuda):  # type: ignore[misc, valid-type]
        """Inductor's static launcher for a kernel that records into a profile buffer."""

        def __init__(self, kernel: Any):
            self.cubin_raw = kernel.asm["cubin"]  # what StaticallyLaunchedCudaKernel.__init__ keeps
            base_init(self, _WithoutProfileBuffer(kernel))
            self.compiled = kernel
            self.profile_bytes = _profile_bytes(kernel)
            self.profile_align = int(getattr(kernel.metadata, "profile_scratch_align", 1) or 1)
            # The parameters after the kernel's own: no global scratch, then the profile buffer.
            self.scratch = (None,) if self.has_global_scratch else ()
            self.kinds_with_address = self.arg_tys + "O" * len(self.scratch) + "K"
            self.kinds_with_tensor = self.arg_tys + "O" * len(self.scratch) + "O"

        records_into_profile_buffer = True  # what ``records`` looks for

        def __deepcopy__(self, memo: dict) -> Any:
            # A copy in this process (Inductor copies autotuners to cache them): it shares the
            # compiled kernel and the loaded function, as the original's launches do.
            copied = object.__new__(type(self))
            copied.__dict__.update(self.__dict__)
            return copied

        def __getstate__(self) -> dict[str, Any]:
            raise TypeError(
                f"proton_ik: the recording launcher of {self.name} stays in the process that "
                "compiled it (its kernel writes records into a buffer that only this process's "
                "session allocates)"
            )

        def run(self, grid_x: int, grid_y: int, grid_z: int, stream: int, *args: Any) -> None:
            recorder = direct_recorder()
            if recorder is None or self.compiled.function is None:  # (the first launch loads it)
                self.run_through_hooks(grid_x, grid_y, grid_z, stream, *args)
                return
            # What Triton's surfaces below would do, with the session's recorder alone behind
            # them: the same calls on it, without the launch's metadata dict and the hook chains
            # (measured: docs/PERFORMANCE.md, "The recording static launcher").
            buffer = recorder.allocate_for(
                self.compiled,
                (grid_x, grid_y, grid_z),
                args,
                grid_x * grid_y * grid_z * self.profile_bytes,
                stream,
            )
            self._launch(grid_x, grid_y, grid_z, stream, args, buffer)
            recorder.exit_hook(None)

        def run_through_hooks(self, grid_x: int, grid_y: int, grid_z: int, stream: int, *args: Any) -> None:
            """As Triton's launcher: the launch's metadata (it announces the kernel and grid to
            the session, and loads the kernel in Triton), the buffer from the profile allocator,
            the hooks around the launch."""
            metadata = self.compiled.launch_metadata((grid_x, grid_y, grid_z), stream, *args)
            size = grid_x * grid_y * grid_z * self.profile_bytes
            buffer = _allocation._profile_allocator.get()(size, self.profile_align, stream)
            knobs.runtime.launch_enter_hook(metadata)
            self._launch(grid_x, grid_y, grid_z, stream, args, buffer)
            knobs.runtime.launch_exit_hook(metadata)

        def _launch(
            self, grid_x: int, grid_y: int, grid_z: int, stream: int, args: tuple, buffer: Any
        ) -> None:
            # An int address ('K', 64 bits), or a tensor inside a CUDA graph capture ('O').
            if isinstance(buffer, int):
                kinds, values = self.kinds_with_address, (*args, *self.scratch, buffer)
            else:
                kinds, values = self.kinds_with_tensor, (*args, *self.scratch, buffer)
            self.C_impl._launch_kernel(
                self.function, grid_x, grid_y, grid_z, self.num_warps, self.shared, kinds, values, stream
            )

    return RecordingStaticKernel


def records(autotuner: Any) -> bool:
    """Whether any launcher an Inductor autotuner compiled is a ``RecordingStaticKernel``."""
    results = getattr(autotuner, "compile_results", None) or ()
    return any(
        getattr(getattr(result, "kernel", None), "records_into_profile_buffer", False) for result in results
    )


def launches_records(launcher: Any) -> bool:
    """Whether an Inductor launcher (the function its compile result made) runs a
    ``RecordingStaticKernel``."""
    runner = (getattr(launcher, "__globals__", None) or {}).get("runner")
    return bool(getattr(getattr(runner, "__self__", None), "records_into_profile_buffer", False))


def without_fast_launcher(original):
    """Wrap ``CachingAutotuner._build_fast_launcher`` (torch 2.13 on): Inductor caches, for a
    statically launched kernel, a C launcher built from the kernel's CUfunction and argument
    types, which passes no profile buffer: a recording kernel would write its records through a
    null pointer. A launcher that ``launches_records`` keeps its own (through our ``run``)."""

    def _build_fast_launcher(self, launcher: Any) -> Any:
        if launches_records(launcher):
            return None
        return original(self, launcher)

    return _build_fast_launcher


def bundle_without_recording(original):
    """Wrap ``TritonBundler.put_static_autotuner`` (a classmethod): an autotuner that ``records``
    is left out of the FX graph cache's bundle; a later process compiles it from source."""
    function = original.__func__

    def put_static_autotuner(cls, key: str, kernel: Any) -> Any:
        if records(kernel):
            return None
        return function(cls, key, kernel)

    return classmethod(put_static_autotuner)


def recording_kernels(original, static: types.ModuleType):
    """Wrap Inductor's ``statically_launched_kernel_by_device``: a CUDA kernel with a profile
    buffer gets a ``RecordingStaticKernel``; any other goes to ``original``. With a static
    launcher not built as expected, ``original`` alone (kernels that record then fall back to
    Triton's launcher, as without this module)."""
    recording = _recording_class(static)
    if recording is None:
        return original

    def statically_launched_kernel_by_device(kernel: Any, device_type: str = "cuda") -> Any:
        if device_type == "cuda" and _profile_bytes(kernel) > 0:
            return recording(kernel)
        return original(kernel, device_type)

    return statically_launched_kernel_by_device
