"""The Triton stage hook: run the lowering on every kernel's PTX while proton_ik is active.

Installed through ``triton.knobs.runtime.add_stages_inspection_hook``; it wraps the "ptx"
stage, so it runs after LLVM's optimizer and before ptxas, and the "ttir" stage (Triton kernels
only; Gluon starts at TTGIR), whose text bounds the records of scopes in loops with a constant
trip count (``lowering.bound``). Which mode is active is not kept here: ``proton_ik.compile_mode``
is its one home, and installs this hook while a mode is set. The mode travels in
``knobs.compilation.instrumentation_mode``, which is part of Triton's cache key, so plain and
instrumented binaries never mix. This works with no GPU: inside ``proton_ik.instrumented()``,
``triton.compile(src, target=GPUTarget("cuda", 90, 32))`` gives an instrumented cubin. Under
``occupancy=keep`` the hook also caps the instrumented kernel's registers from a ptxas run of
the plain PTX (``lowering.occupancy``).

A direct ``triton.compile(src, target, options)`` (how Inductor and other libraries compile)
does not copy the knob into its options, so its cache key would not tell a plain binary from
an instrumented one. While the hook is installed, ``triton.compile`` is wrapped to stamp the
mode of the compiling thread (``compile_mode.active_mode``) into the options it is given,
unless they name an ``instrumentation_mode`` of their own.
"""

from __future__ import annotations

import functools
from pathlib import Path

import triton
from triton import knobs

from proton_ik import compile_mode
from proton_ik.lowering import occupancy, staging
from proton_ik.lowering.errors import ProtonOverrideError
from proton_ik.lowering.pipeline import instrument, update_metadata
from proton_ik.mode import Mode

# The metadata dict is shared by all stages of one compile: the "ttir" stage leaves its text
# here for the "ptx" stage, which takes it out before Triton writes the metadata.
_TTIR_KEY = "proton_ik_ttir"


def _mode_for(options) -> Mode | None:
    configured = getattr(options, "instrumentation_mode", "") or ""
    if configured:
        return Mode.from_knob(configured)
    # A direct triton.compile() does not copy the knob into its options.
    return compile_mode.active_mode()


PROTON_RECORD_OP = "proton.record"


def _overrides(options) -> list[Path]:
    """IR files that this compile may take in place of a stage's output: the override folder
    (TRITON_KERNEL_OVERRIDE) and an autotune config's ``ir_override``."""
    files: list[Path] = []
    if knobs.compilation.override and knobs.cache.override_dir:
        folder = Path(knobs.cache.override_dir)
        if folder.is_dir():
            files += [p for p in folder.rglob("*") if p.suffix in (".ttir", ".ttgir", ".llir", ".ptx")]
    ir_override = getattr(options, "ir_override", None)
    if ir_override:
        files.append(Path(ir_override))
    return files


def _refuse_proton_overrides(options) -> None:
    """An override written for triton.profiler carries ``proton.record`` ops, which Triton's
    parser rejects here with a bare "Dialect 'proton' not found": say what to do instead."""
    for path in _overrides(options):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if PROTON_RECORD_OP in text:
            raise ProtonOverrideError(path)


def _stages_hook(backend, stages, options, language, capability) -> None:
    mode = _mode_for(options)
    if mode is None or "ptx" not in stages:
        return
    _refuse_proton_overrides(options)
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
        shared = int(metadata.get("shared") or 0)
        fits = (lambda units: staging.fits(shared, num_warps, units, capability)) if mode.stage else None
        result = instrument(ptx, mode, num_warps, ttir, fits)
        if result is None:
            return ptx
        if mode.occupancy == "keep":
            ptxas = occupancy.triton_ptxas(options, capability)
            result.ptx, result.occupancy = occupancy.keep(
                ptx, result.ptx, ptxas, capability, num_warps, shared
            )
        update_metadata(metadata, result, mode, num_warps)
        return result.ptx

    stages["ptx"] = instrumented_ptx


class _Chained:
    """The hook as installed: the hook it replaced (another tool's) runs first, then ours."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, backend, stages, options, language, capability) -> None:
        if self.previous is not None:
            self.previous(backend, stages, options, language, capability)
        _stages_hook(backend, stages, options, language, capability)


def _stamping(compile):
    """``triton.compile`` as installed: the options it passes on carry the compiling thread's
    mode. A function with ``compile``'s name and signature, for code that inspects it."""

    @functools.wraps(compile)
    def stamped_compile(src, target=None, options=None, _env_vars=None):
        options = dict(options or {})
        if not options.get("instrumentation_mode"):
            mode = compile_mode.active_mode()
            options["instrumentation_mode"] = "" if mode is None else mode.knob
        return compile(src, target=target, options=options, _env_vars=_env_vars)

    stamped_compile.unstamped = compile
    return stamped_compile


def install() -> None:
    """Put the stage hook into Triton's compiles; a second call changes nothing."""
    current = knobs.runtime.add_stages_inspection_hook
    if not isinstance(current, _Chained):
        knobs.runtime.add_stages_inspection_hook = _Chained(current)
    if not hasattr(triton.compile, "unstamped"):
        triton.compile = _stamping(triton.compile)


def uninstall() -> None:
    """Give Triton back the hook it had before ``install``; harmless when not installed."""
    current = knobs.runtime.add_stages_inspection_hook
    if isinstance(current, _Chained):
        knobs.runtime.add_stages_inspection_hook = current.previous
    if hasattr(triton.compile, "unstamped"):
        triton.compile = triton.compile.unstamped
