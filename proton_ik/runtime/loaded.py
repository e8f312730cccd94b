"""The instrumented kernels this process has loaded, as the launch path and the drain need them.

Triton's kernel-load hook (``on_kernel_load``) reads each kernel's compile metadata once, when
it loads; every launch then finds it by its CUfunction handle in ``KERNELS``. The registry
outlives sessions: a kernel loaded in one session may launch in the next.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proton_ik.contract.layout import BufferLayout
from proton_ik.contract.metadata import SCRATCH_SIZE_KEY, KernelMetadata, read_compile_metadata


@dataclass(frozen=True)
class KernelInfo:
    name: str
    num_warps: int
    cta_bytes: int
    metadata: KernelMetadata
    profile: dict[str, Any]  # ``metadata.to_dict()``, made once: every launch's meta holds it
    # Read on every launch: plain attributes rather than properties of the metadata.
    layout: BufferLayout = field(init=False)
    dense: bool = field(init=False)  # segments sized from the code's bound: a chunk is copied whole
    every_cta: bool = field(init=False)  # no CTA sampling: every CTA of the grid gets a region
    # Segments sized at each launch (``runtime.launch_sizing``): the bound's evaluator, the
    # launch arguments' positions by their count, the kernel's variants by capacity...
    bound_entries: Callable[[Sequence[int], Mapping[str, int]], int | None] | None = field(init=False)
    positions: dict[int, Any] = field(init=False, default_factory=dict, compare=False, repr=False)
    variants: dict[tuple, KernelInfo] = field(init=False, default_factory=dict, compare=False, repr=False)
    # ... and the buffer each launch's sizes got, by those sizes (``launch_sizing.launch_buffer``)
    sized_launches: dict[tuple, tuple] = field(init=False, default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layout", self.metadata.layout)
        object.__setattr__(self, "dense", self.metadata.sized_from_bound)
        object.__setattr__(self, "every_cta", self.metadata.layout.sampling.every_cta)
        bound = self.metadata.launch_bound
        object.__setattr__(self, "bound_entries", None if bound is None else bound.compile())


KERNELS: dict[int, KernelInfo] = {}
NOT_OURS: set[int] = set()  # loaded kernels with a profile buffer that is not ours (Proton's)


def on_kernel_load(module, function, name, metadata_group, hash) -> None:
    """Triton's ``kernel_load_end_hook``: register the kernel if it is one of ours."""
    path = next((p for key, p in metadata_group.items() if key.endswith(".json")), None)
    if path is None or not function:
        return
    with open(path) as file:
        _register(function, json.load(file))


def register_loaded(compiled: Any) -> KernelInfo | None:
    """A kernel of ours that was loaded while no session's load hook was set (run under
    ``proton_ik.instrumented()``, or loaded before ``start``): registered at its first launch in
    a session, from its ``CompiledKernel``. None for any other kernel."""
    function = getattr(compiled, "function", None)
    as_dict = getattr(getattr(compiled, "metadata", None), "_asdict", None)
    if not function or as_dict is None or function in NOT_OURS:
        return None
    _register(function, as_dict())
    if function not in KERNELS:
        NOT_OURS.add(function)  # another profiler's instrumented kernel: read once, not per launch
    return KERNELS.get(function)


def _register(function: int, metadata: dict[str, Any]) -> None:
    kernel = read_compile_metadata(metadata, f"kernel {metadata.get('name')}")
    if kernel is not None:
        KERNELS[function] = KernelInfo(
            name=metadata["name"],
            num_warps=int(metadata["num_warps"]),
            cta_bytes=int(metadata[SCRATCH_SIZE_KEY]),
            metadata=kernel,
            profile=kernel.to_dict(),
        )
