"""The Triton stage hook: run the lowering on every kernel's PTX while proton_ik is active.

Installed through ``triton.knobs.runtime.add_stages_inspection_hook``; it wraps the "ptx"
stage, so it runs after LLVM's optimizer and before ptxas, and the "ttir" stage (Triton kernels
only; Gluon starts at TTGIR), whose text bounds the records of scopes in loops with a constant
trip count (``lowering.bound``). The mode is encoded in
``knobs.compilation.instrumentation_mode``, which is part of Triton's cache key, so plain and
instrumented binaries never mix. This works with no GPU: ``triton.compile(src,
target=GPUTarget("cuda", 90, 32))`` gives an instrumented cubin.
"""

from __future__ import annotations

from triton import knobs

from proton_ik.lowering.pipeline import instrument, update_metadata
from proton_ik.mode import Mode

_active_mode: Mode | None = None
_previous_hook = None
# The metadata dict is shared by all stages of one compile: the "ttir" stage leaves its text
# here for the "ptx" stage, which takes it out before Triton writes the metadata.
_TTIR_KEY = "proton_ik_ttir"


def active_mode() -> Mode | None:
    """The mode kernels compile under now, or None while proton_ik is inactive."""
    return _active_mode


def _mode_for(options) -> Mode | None:
    configured = getattr(options, "instrumentation_mode", "") or ""
    if configured:
        return Mode.from_knob(configured)
    # A direct triton.compile() does not copy the knob into its options.
    return _active_mode


def _stages_hook(backend, stages, options, language, capability) -> None:
    if _previous_hook is not None:
        _previous_hook(backend, stages, options, language, capability)
    mode = _mode_for(options)
    if mode is None or "ptx" not in stages:
        return
    make_ptx = stages["ptx"]
    if "ttir" in stages:
        make_ttir = stages["ttir"]

        def ttir_for_the_bound(src, metadata):
            module = make_ttir(src, metadata)
            metadata[_TTIR_KEY] = str(module)
            return module

        stages["ttir"] = ttir_for_the_bound

    def instrumented_ptx(src, metadata):
        ttir = metadata.pop(_TTIR_KEY, None)
        ptx = make_ptx(src, metadata)
        num_warps = int(metadata.get("num_warps") or options.num_warps)
        result = instrument(ptx, mode, num_warps, ttir)
        if result is None:
            return ptx
        update_metadata(metadata, result, mode, num_warps)
        return result.ptx

    stages["ptx"] = instrumented_ptx


def install(mode: Mode) -> None:
    """Compile annotated kernels instrumented, under ``mode``, from now on."""
    global _active_mode, _previous_hook
    if _active_mode is None:
        current = knobs.runtime.add_stages_inspection_hook
        _previous_hook = None if current is _stages_hook else current
        knobs.runtime.add_stages_inspection_hook = _stages_hook
    _active_mode = mode
    knobs.compilation.instrumentation_mode = mode.knob


def uninstall() -> None:
    """Compile kernels plain again; scope calls emit nothing."""
    global _active_mode, _previous_hook
    if _active_mode is None:
        return
    if knobs.runtime.add_stages_inspection_hook is _stages_hook:
        knobs.runtime.add_stages_inspection_hook = _previous_hook
    _previous_hook = None
    _active_mode = None
    knobs.compilation.instrumentation_mode = ""
