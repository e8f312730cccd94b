"""The Triton stage hook: run the lowering on every kernel's PTX while proton_ik is active.

Installed through ``triton.knobs.runtime.add_stages_inspection_hook``; it wraps the "ptx"
stage, so it runs after LLVM's optimizer and before ptxas, and the "ttir" stage (Triton kernels
only; Gluon starts at TTGIR), whose text bounds the records of scopes in loops with a constant
trip count (``lowering.bound``). Which mode is active is not kept here: ``proton_ik.compile_mode``
is its one home, and installs this hook while a mode is set, handing it the function that reads
the compiling thread's mode. The mode travels in
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

An IR override written for triton.profiler (``proton.record`` ops, ``TRITON_KERNEL_OVERRIDE`` or
an autotune config's ``ir_override``) is read through ``lowering.proton_records``: Triton is
handed a copy with those ops translated into our markers.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import triton
import triton.compiler.compiler as compiler_module
from triton import knobs

from proton_ik.lowering import occupancy, staging
from proton_ik.lowering.instrument import instrument, may_instrument, update_metadata
from proton_ik.lowering.proton_records import TranslatedCopies
from proton_ik.mode import Mode

# The metadata dict is shared by all stages of one compile: the "ttir" stage leaves its text
# here for the "ptx" stage, which takes it out before Triton writes the metadata.
_TTIR_KEY = "proton_ik_ttir"


def _mode_for(options) -> Mode | None:
    configured = getattr(options, "instrumentation_mode", "") or ""
    if configured:
        return Mode.from_knob(configured)
    # A direct triton.compile() does not copy the knob into its options.
    return _active_mode()


_copies = TranslatedCopies()


def _translating(get_override_manager):
    """Triton's ``get_override_manager``, as installed: the files its manager hands a compile
    (``TRITON_KERNEL_OVERRIDE``) are our translated copies where they carry ``proton.record``."""

    @functools.wraps(get_override_manager)
    def translated_override_manager(key):
        manager = get_override_manager(key)
        get_file = manager.get_file

        def get_translated_file(filename):
            found = get_file(filename)
            if found is None:
                return None
            copy = _copies.of(found)
            if str(copy) != str(found):  # it carries proton.record ops
                _warn_of_later_stages(found, filename, get_file)
            return str(copy)

        manager.get_file = get_translated_file
        return manager

    translated_override_manager.untranslated = get_override_manager
    return translated_override_manager


# The stages of a CUDA compile that Triton can take from an override folder, in order.
_STAGES = (".ttir", ".ttgir", ".llir", ".ptx", ".cubin")
_warned_overrides: set[str] = set()


def _warn_of_later_stages(found: str, filename: str, get_file: Callable[[str], object]) -> None:
    """Warn (once per file) where the override folder also holds a later stage of the kernel:
    Triton takes that stage as it is, so the records are compiled away."""
    stem, dot, suffix = filename.rpartition(".")
    if not dot or f".{suffix}" not in _STAGES or found in _warned_overrides:
        return
    later = [stem + stage for stage in _STAGES[_STAGES.index(f".{suffix}") + 1 :] if get_file(stem + stage)]
    if later:
        _warned_overrides.add(found)
        warnings.warn(
            f"proton_ik: the IR override {found} carries proton.record ops, but its folder also "
            f"holds {', '.join(later)}: Triton takes those later stages as they are, so the "
            f"records are compiled away and {stem} records nothing. Keep only {filename} in the "
            "folder (Proton's dump_ttgir.sh deletes the other stages of the dump)",
            stacklevel=2,
        )


def _translate_ir_override(stages, metadata_key: str = "ir_override") -> None:
    """An autotune config's ``ir_override`` (Triton parses it after the stage of its suffix):
    each stage points it at the translated copy first."""
    for ext, make in list(stages.items()):

        def translated_stage(src, metadata, make=make):
            module = make(src, metadata)
            if metadata.get(metadata_key):
                metadata[metadata_key] = str(_copies.of(metadata[metadata_key]))
            return module

        stages[ext] = translated_stage


def _stages_hook(backend, stages, options, language, capability) -> None:
    mode = _mode_for(options)
    if mode is None or "ptx" not in stages:
        return
    if getattr(options, "ir_override", None):
        _translate_ir_override(stages)
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
        # occupancy=keep: the plain PTX's ptxas runs while the PTX is instrumented
        plain = None
        if mode.occupancy == "keep" and may_instrument(ptx, mode):
            plain = occupancy.start_plain(ptx, options, capability)
        try:
            result = instrument(ptx, mode, num_warps, ttir, fits)
            if result is None:
                return ptx
            if plain is not None:
                result.ptx, result.occupancy = occupancy.keep_measured(
                    plain.result, result.ptx, capability, num_warps, shared
                )
        finally:
            if plain is not None:
                plain.cancel()  # where its count was not needed; nothing once it is read
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
            mode = _active_mode()
            options["instrumentation_mode"] = "" if mode is None else mode.knob
        return compile(src, target=target, options=options, _env_vars=_env_vars)

    stamped_compile.unstamped = compile
    return stamped_compile


def _no_mode() -> Mode | None:
    return None


# The compiling thread's mode, as the switch that installs the hook tells it (``install``): the
# switch (``proton_ik.compile_mode``) imports this module, so this one does not import it back.
_active_mode: Callable[[], Mode | None] = _no_mode


def install(active_mode: Callable[[], Mode | None] | None = None) -> None:
    """Put the stage hook into Triton's compiles; a second call changes nothing but
    ``active_mode``, the function that gives the compiling thread's mode
    (``compile_mode.active_mode``), where given."""
    global _active_mode
    if active_mode is not None:
        _active_mode = active_mode
    current = knobs.runtime.add_stages_inspection_hook
    if not isinstance(current, _Chained):
        knobs.runtime.add_stages_inspection_hook = _Chained(current)
    if not hasattr(triton.compile, "unstamped"):
        triton.compile = _stamping(triton.compile)
    if not hasattr(compiler_module.get_override_manager, "untranslated"):
        compiler_module.get_override_manager = _translating(compiler_module.get_override_manager)


def uninstall() -> None:
    """Give Triton back the hook it had before ``install``; harmless when not installed."""
    current = knobs.runtime.add_stages_inspection_hook
    if isinstance(current, _Chained):
        knobs.runtime.add_stages_inspection_hook = current.previous
    if hasattr(triton.compile, "unstamped"):
        triton.compile = triton.compile.unstamped
    if hasattr(compiler_module.get_override_manager, "untranslated"):
        compiler_module.get_override_manager = compiler_module.get_override_manager.untranslated
