"""The ``torch.compile`` integration: scoped kernels compile under Inductor, and what a
compiled program launches is recorded inside a session and plain outside it.

Everything that patches PyTorch's internals lives here (with ``inductor_static``, the launcher
it installs, and ``inductor_source``, the imports it adds to a kernel's copy) and checks what it patches first (``_missing``): where the internals moved, it
warns once, naming the torch version, and the compiled program runs plain.

**Permanent: Inductor's copy of a user kernel's source** gets the imports of proton_ik the
kernel uses (``inductor_source`` says why). It must hold whether or not a session runs (outside
one the kernel compiles plain, but it must compile), so it is installed when Inductor's module
is imported and never removed.

**With the mode** (installed when a mode is set, removed when none is; docs/ARCHITECTURE.md
says why each is where it is):

- *Dynamo's mutation analysis* (``generate_ttir``) cannot follow our markers (inline asm): it
  makes the TTIR with them off (``compile_mode.plain``).
- *Which binary a kernel runs* is decided in Inductor's ``CachingAutotuner``, the one place
  that holds binaries (its caches above hold source): ``_precompile_config`` compiles under the
  mode a kernel that records (a user's kernel that uses ``proton_ik.language``, or any under
  ``unscoped=kernel``), and ``run`` switches an autotuner built under another mode to that
  mode's launchers (kept, or compiled for the configs it had chosen). Removing the mode
  switches every autotuner back to plain.
- *Autotuning*: several configs compile and are benchmarked plain (``_choose_plain``), then the
  one chosen compiles under the mode: the choice is the unprofiled one, no benchmark is recorded.
- *Compile workers* never see the mode: what they compile comes back plain and ``run`` switches
  it. Under ``unscoped=kernel`` every kernel records, so compiles stay in this process
  (``AsyncCompile.use_process_pool``), each kernel compiled once rather than twice.
- *Launch paths*: kernels that record keep the static launcher (``inductor_static``), never
  get the C launcher that torch 2.13 on caches for a static kernel (it passes no profile
  buffer), and stay out of the FX graph cache's bundle. The C++ wrapper (``cpp_wrapper``, AOTInductor) would give
  a whole grid one CTA's buffer: its kernels compile plain, with a warning, also where its graph
  comes from the FX graph cache and compiles no kernel (``CompiledFxGraph.post_compile``). CUDA graph trees (``mode="reduce-overhead"``) check every allocation of
  their pool, which a captured profile buffer fails: one recorded in a session is refused,
  saying what to do.
"""

from __future__ import annotations

import sys
import threading
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any

from proton_ik import after_import, compile_mode, inductor_source, inductor_static
from proton_ik.mode import Mode

__all__ = ["follow"]

TESTED_TORCH = ("2.11", "2.13")  # what this module was checked against, on a GPU or in CI
_WRAPPER = "torch._inductor.codegen.wrapper"
_HEURISTICS = "torch._inductor.runtime.triton_heuristics"
_KERNEL_WRAP = "torch._higher_order_ops.triton_kernel_wrap"
_ASYNC_COMPILE = "torch._inductor.async_compile"
_GRAPH_TREES = "torch._inductor.cudagraph_trees"
_STATIC_LAUNCHER = "torch._inductor.runtime.static_triton_launcher"
_BUNDLER = "torch._inductor.triton_bundler"
_OUTPUT_CODE = "torch._inductor.output_code"
_PACKAGE = "proton_ik"


# --- the checks of what is patched ------------------------------------------------------------

_warned: set[str] = set()
_NOT_RECORDED = "kernels that torch.compile runs are not recorded"
_NOT_COMPILED = "a kernel with scopes fails to compile under torch.compile (NameError)"


def _torch_version() -> str:
    torch = sys.modules.get("torch")
    return str(getattr(torch, "__version__", "unknown"))


def _missing(module: types.ModuleType, *names: str, then: str = _NOT_RECORDED) -> bool:
    """True (with a warning, once per module, saying ``then``: what the user loses) when
    ``module`` lacks any of ``names``."""
    absent = []
    for name in names:
        target: Any = module
        for part in name.split("."):
            target = getattr(target, part, None)
        if target is None:
            absent.append(name)
    if absent and module.__name__ not in _warned:
        _warned.add(module.__name__)
        warnings.warn(
            f"proton_ik: torch {_torch_version()}: {module.__name__} has no {', '.join(absent)} "
            f"(proton_ik was checked with torch {' and '.join(TESTED_TORCH)}), so {then}. Run the "
            "kernels outside torch.compile, or use a torch version named here",
            stacklevel=3,
        )
    return bool(absent)


# --- permanent: the imports of a user kernel's source as Inductor writes it ------------------


def _patch_kernel_source(wrapper: types.ModuleType) -> None:
    name = "user_defined_triton_kernel_transitive_closure_source_code"
    if _missing(wrapper, name, then=_NOT_COMPILED):
        return
    setattr(wrapper, name, inductor_source.with_imports(getattr(wrapper, name)))


# --- with the mode: which binary each compiled kernel runs -----------------------------------


@dataclass
class _Launchers:
    """What one Inductor autotuner runs: the mode its launchers were built under ("" plain),
    and the launchers (with their compile results) it had under other modes."""

    built_under: str = ""
    kept: dict[str, tuple[list, list]] = field(default_factory=dict)
    uses_ours: bool | None = None  # whether a user's kernel uses proton_ik.language (None: not known yet)


class _State:
    mode: Mode | None = None
    knob: str = ""  # the mode's knob: what an autotuner's launchers are built under
    installed: bool = False


_state = _State()
_autotuners: weakref.WeakKeyDictionary[Any, _Launchers] = weakref.WeakKeyDictionary()
_switching = threading.Lock()
_originals: dict[tuple[str, str], Any] = {}  # (module, attribute) -> what was there


def _wanted(autotuner) -> str:
    """The mode ``autotuner``'s launchers should be built under now: the mode where the kernel
    records (a user's kernel that uses proton_ik.language, or any under unscoped=kernel), else
    plain."""
    mode = compile_mode.active_mode()
    if mode is None:
        return ""
    if mode.unscoped == "kernel":
        return _state.knob
    if not getattr(autotuner, "custom_kernel", False):
        return ""
    launchers = _autotuners.get(autotuner)
    if launchers is None:
        with _switching:
            launchers = _autotuners.setdefault(autotuner, _Launchers())
    if launchers.uses_ours is None:
        launchers.uses_ours = _uses_ours(autotuner)
    return _state.knob if launchers.uses_ours else ""


def _uses_ours(autotuner) -> bool:
    """Whether a user's kernel, as Inductor compiles it, uses proton_ik.language: its module then
    holds ``proton_ik``, which the imports that ``_with_imports`` writes bind. Unknown: True."""
    scope = getattr(getattr(getattr(autotuner, "fn", None), "fn", None), "__globals__", None)
    if isinstance(scope, dict):
        return _PACKAGE in scope
    try:  # compiled in a worker: the function came back without its globals; its module's file
        with open(autotuner.filename, encoding="utf-8", errors="replace") as file:
            return f"import {_PACKAGE}.language" in file.read(1 << 24)
    except (AttributeError, OSError, TypeError):
        return True


def _cpp_wrapper() -> bool:
    """Whether Inductor compiles for its C++ wrapper now (AOTInductor turns it on too)."""
    config = sys.modules.get("torch._inductor.config")
    return getattr(config, "cpp_wrapper", False) is True


def _warn_cpp_wrapper() -> None:
    # One place, so Python's warnings filter shows it once however many kernels or graphs meet it
    warnings.warn(
        "proton_ik: Inductor's C++ wrapper (torch._inductor.config.cpp_wrapper, or AOTInductor) "
        "launches kernels without Triton's profile allocator, so the kernels it compiles run "
        "plain and are not recorded. Set torch._inductor.config.cpp_wrapper = False to record them",
        stacklevel=1,
    )


def _graph_post_compile(original):
    """A compiled graph, compiled now or loaded from the FX graph cache (which compiles no kernel,
    so ``_precompile_config`` never sees it): its C++ wrapper's kernels run plain, said here."""

    def post_compile(self, example_inputs, constants, graph_kwargs, *args, **kwargs):
        if (
            _state.mode is not None
            and graph_kwargs.get("cpp_wrapper")
            and "cuda" in getattr(self, "device_types", ("cuda",))
        ):
            _warn_cpp_wrapper()
        return original(self, example_inputs, constants, graph_kwargs, *args, **kwargs)

    return post_compile


def _choosing(autotuner) -> bool:
    """Whether ``autotuner`` has more than one config left to choose from (it compiles them all,
    then benchmarks them): it chooses among plain binaries, as it would with no session."""
    configs = autotuner.configs or autotuner.compile_results or []
    return len(autotuner.launchers) > 1 or (not autotuner.launchers and len(configs) > 1)


def _choose_plain(autotuner, args: tuple, kwargs: dict) -> None:
    """Compile ``autotuner``'s configs plain and benchmark them, as Inductor's ``run`` would,
    so that it settles on what it would pick with no session and no benchmark launch records."""
    benchmark = {key: value for key, value in kwargs.items() if key not in ("stream", "benchmark_run")}
    with compile_mode.plain():
        if autotuner.launchers and _autotuners.get(autotuner, _Launchers()).built_under:
            with _switching:
                _switch(autotuner, "")  # launchers compiled under a mode: benchmark plain ones
        if not autotuner.launchers:
            autotuner.precompile()
        if len(autotuner.launchers) > 1:
            autotuner.autotune_to_one_config(*args, **benchmark)


def _precompile_config(original):
    def precompile_config(self, config):
        knob = "" if _choosing(self) else _wanted(self)
        if knob and _cpp_wrapper():
            knob = ""
            _warn_cpp_wrapper()
        with _switching:
            _autotuners.setdefault(self, _Launchers()).built_under = knob
        if knob:
            return original(self, config)
        with compile_mode.plain():
            return original(self, config)

    return precompile_config


def _switch(autotuner, knob: str) -> None:
    """Give ``autotuner`` the launchers built under ``knob``: those it had before, or none, with
    the configs it had settled on, which its ``run`` then compiles."""
    launchers = _autotuners.setdefault(autotuner, _Launchers())
    if launchers.built_under == knob:
        return
    if len(autotuner.launchers) == 1:  # settled on a config: worth keeping; unsettled sets are not
        launchers.kept[launchers.built_under] = (autotuner.launchers, autotuner.compile_results)
    kept = launchers.kept.pop(knob, None)
    if kept is not None:
        autotuner.launchers, autotuner.compile_results = kept
    else:
        configs = (
            [launcher.config for launcher in autotuner.launchers]
            or [result.config for result in autotuner.compile_results]
            or list(autotuner.configs or [])
        )
        if getattr(autotuner.fn, "fn", None) is None:  # compiled in a worker: the parent reloads it
            autotuner.fn = autotuner._reload_kernel().fn
        autotuner.launchers, autotuner.compile_results, autotuner.configs = [], [], configs
    if hasattr(autotuner, "_cached_launcher"):
        autotuner._cached_launcher = None  # the fast path keeps the launcher it last ran
    launchers.built_under = knob


def _run(original):
    def run(self, *args, **kwargs):
        knob = _wanted(self)
        if knob and _choosing(self):
            _choose_plain(self, args, kwargs)
        launchers = _autotuners.get(self)
        if (launchers.built_under if launchers is not None else "") != knob:
            with _switching:
                _switch(self, knob)
        return original(self, *args, **kwargs)

    return run


def _mutation_analysis(original):
    def generate_ttir(*args, **kwargs):
        with compile_mode.plain():  # markers are inline asm, which the analysis cannot follow
            return original(*args, **kwargs)

    return generate_ttir


def _compile_workers(original):
    def use_process_pool(cls):
        if _state.mode is not None and _state.mode.unscoped == "kernel":
            return False  # every kernel records: compile each once, here, under the mode
        return original.__func__(cls)

    return classmethod(use_process_pool)


def _replace(module: types.ModuleType, owner_name: str, attribute: str, make) -> None:
    owner = getattr(module, owner_name) if owner_name else module
    key = (f"{module.__name__}.{owner_name}", attribute)
    if key in _originals:
        return
    original = owner.__dict__[attribute] if isinstance(owner, type) else getattr(owner, attribute)
    _originals[key] = (owner, original)
    setattr(owner, attribute, make(original))


def _patch_heuristics(module: types.ModuleType) -> None:
    names = (
        "CachingAutotuner.run",
        "CachingAutotuner._precompile_config",
        "CachingAutotuner.precompile",
        "CachingAutotuner.autotune_to_one_config",
    )
    if _state.installed and not _missing(module, *names):
        _replace(module, "CachingAutotuner", "_precompile_config", _precompile_config)
        _replace(module, "CachingAutotuner", "run", _run)
        if "_build_fast_launcher" in vars(module.CachingAutotuner):  # torch 2.13 on
            _replace(
                module, "CachingAutotuner", "_build_fast_launcher", inductor_static.without_fast_launcher
            )
        static = sys.modules.get(_STATIC_LAUNCHER)
        if static is not None and getattr(module, "statically_launched_kernel_by_device", None) is not None:
            _replace(
                module,
                "",
                "statically_launched_kernel_by_device",
                lambda original: inductor_static.recording_kernels(original, static),
            )


def _patch_output_code(module: types.ModuleType) -> None:
    if _state.installed and not _missing(module, "CompiledFxGraph.post_compile"):
        _replace(module, "CompiledFxGraph", "post_compile", _graph_post_compile)


def _patch_bundler(module: types.ModuleType) -> None:
    if _state.installed and not _missing(module, "TritonBundler.put_static_autotuner"):
        _replace(module, "TritonBundler", "put_static_autotuner", inductor_static.bundle_without_recording)


def _patch_kernel_wrap(module: types.ModuleType) -> None:
    if _state.installed and not _missing(module, "generate_ttir"):
        _replace(module, "", "generate_ttir", _mutation_analysis)


def _patch_async_compile(module: types.ModuleType) -> None:
    if _state.installed and not _missing(module, "AsyncCompile.use_process_pool"):
        _replace(module, "AsyncCompile", "use_process_pool", _compile_workers)


REDUCE_OVERHEAD_REFUSED = (
    "proton_ik: torch.compile(mode='reduce-overhead') is recording a CUDA graph (CUDA graph trees) "
    "inside a session: the profile buffers of its instrumented kernels would be captured into the "
    "graph's memory pool, which CUDA graph trees check and refuse. Profile this program with "
    "torch.compile's default mode (or mode='max-autotune-no-cudagraphs'), or set "
    "torch._inductor.config.triton.cudagraphs = False; torch.cuda.CUDAGraph captures are recorded"
)


def _graph_trees(original):
    def record(self, *args, **kwargs):
        if _state.mode is not None:
            raise RuntimeError(REDUCE_OVERHEAD_REFUSED)
        return original(self, *args, **kwargs)

    return record


def _patch_graph_trees(module: types.ModuleType) -> None:
    if _state.installed and not _missing(module, "CUDAGraphNode._record"):
        _replace(module, "CUDAGraphNode", "_record", _graph_trees)


_WITH_THE_MODE = (
    (_HEURISTICS, _patch_heuristics),
    (_KERNEL_WRAP, _patch_kernel_wrap),
    (_ASYNC_COMPILE, _patch_async_compile),
    (_GRAPH_TREES, _patch_graph_trees),
    (_BUNDLER, _patch_bundler),
    (_OUTPUT_CODE, _patch_output_code),
)


def _install() -> None:
    _state.installed = True
    for name, patch in _WITH_THE_MODE:
        after_import.call(name, patch)


def _uninstall() -> None:
    """Every autotuner back to plain launchers, then every patch undone."""
    _state.installed = False
    for name, patch in _WITH_THE_MODE:
        after_import.cancel(name, patch)
    with _switching:
        for autotuner, launchers in list(_autotuners.items()):
            if launchers.built_under:
                _switch(autotuner, "")
    for (_, attribute), (owner, original) in _originals.items():
        setattr(owner, attribute, original)
    _originals.clear()


def _on_mode_change(mode: Mode | None) -> None:
    _state.mode, _state.knob = mode, "" if mode is None else mode.knob
    if mode is not None and not _state.installed:
        _install()
    elif mode is None and _state.installed:
        _uninstall()


def follow() -> None:
    """Patch Inductor's copy of kernel sources whenever Inductor is imported, and follow the
    compile mode from now on; a second call changes nothing."""
    after_import.call(_WRAPPER, _patch_kernel_source)
    compile_mode.on_change(_on_mode_change)
