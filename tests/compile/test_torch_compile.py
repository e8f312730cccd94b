"""torch.compile on the CPU (torch's CPU build, Triton compiling to sm_90 cubins): Inductor's
copy of a user kernel's source compiles in every import style of proton_ik.language, its compile
path keys plain and instrumented binaries apart, Dynamo's mutation analysis sees only the
kernel's stores, and an autotuner follows the mode in and out of a session."""

from __future__ import annotations

import itertools
import logging
import re
import sys
import types
import uuid
from pathlib import Path

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

import proton_ik
from proton_ik import after_import, inductor_source, torch_compile

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parents[1] / "gpu"))
import compiled_kernels  # noqa: E402  (the GPU tests' kernels: every import style)

wrapper = pytest.importorskip("torch._inductor.codegen.wrapper")
TARGET = GPUTarget("cuda", 90, 32)
SIGNATURE = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


def _inductor_source(kernel) -> str:
    return wrapper.user_defined_triton_kernel_transitive_closure_source_code(kernel)


def _load(source: str, name: str):
    """The kernel ``name`` of a module made from ``source`` with the imports Inductor writes."""
    from torch._inductor.codecache import PyCodeCache

    header = "import triton\nimport triton.language as tl\n@triton.jit\n"
    return getattr(PyCodeCache.load(header + source), name)


def test_inductors_copy_of_a_kernel_keeps_every_import_of_proton_ik():
    source = _inductor_source(compiled_kernels.scaled_kernel)
    assert "import proton_ik.language as pl" in source
    assert "import proton_ik.language as prof" in source  # the helper's alias
    for name in ("scope", "enter_scope", "exit_scope"):
        assert f"from proton_ik.language import {name} as {name}" in source
    assert "HANDOFF = tl.constexpr(proton_ik.language.Event('handoff', instances=2))" in source
    # The imports follow the kernel and precede the globals Inductor writes after it.
    assert source.index("def scaled_kernel") < source.index("import proton_ik.language as pl")
    assert source.index("import proton_ik.language\n") < source.index("HANDOFF =")


def test_a_kernel_that_uses_nothing_of_ours_is_copied_as_inductor_copies_it():
    source = _inductor_source(compiled_kernels.autotuned_kernel.fn)
    # the kernel's own, then a last line that points its source locations at the user's file
    source, relocation = source.split("import proton_ik.inductor_source\n")
    assert source.count("proton_ik") == 3  # pl.scope, and the two imports it needs
    assert relocation.startswith("proton_ik.inductor_source.relocate(globals(), {'autotuned_kernel': (")
    plain = types.SimpleNamespace(fn=None)
    assert inductor_source.proton_ik_imports(plain) == []


def test_the_copy_compiles_instrumented_in_a_session_and_plain_outside():
    from triton.compiler import ASTSource

    kernel = _load(_inductor_source(compiled_kernels.scaled_kernel), "scaled_kernel")
    source = ASTSource(kernel, SIGNATURE, {"BLOCK": 1024})
    plain = triton.compile(source, target=TARGET)
    with proton_ik.instrumented():
        instrumented = triton.compile(source, target=TARGET)
    assert plain.metadata.profile_scratch_size == 0
    assert instrumented.metadata.profile_scratch_size > 0
    scopes = {s["name"] for s in instrumented.metadata.proton_ik["scopes"]}
    assert scopes >= {"load", "compute", "helper", "handoff", "tile", "even_tile"}


def _load_as_inductor_writes(source: str, name: str):
    """The ``@triton.jit`` function of ``name`` in a module written as Inductor writes a user
    kernel's (its imports, then its autotuner's decorator over ``@triton.jit``): the autotuner
    holds the function."""
    from torch._inductor.codegen.triton import TritonKernel

    device = (
        "DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, "
        "regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, "
        "max_threads_per_block=1024, warp_size=32)"
    )
    decorator = (
        "@triton_heuristics.user_autotune(\n"
        "    configs=[],\n"
        f"    inductor_meta={{'kernel_name': {name!r}}},\n"
        f"    triton_meta={{'signature': {SIGNATURE!r}, 'device': {device}, 'constants': {{}}, 'configs': []}},\n"
        "    filename=__file__,\n"
        "    custom_kernel=True,\n"
        ")\n@triton.jit\n"
    )
    from torch._inductor.codecache import PyCodeCache

    module = PyCodeCache.load(TritonKernel.gen_common_triton_imports() + decorator + source)
    return getattr(module, name).fn


@pytest.mark.parametrize("renamed", [False, True], ids=["as_written", "unique_name"])
def test_the_copys_scopes_name_the_users_file_and_lines_not_inductors(renamed):
    """Inductor's copy lives in a generated file; its scopes (the kernel's and a helper's) name
    the file and lines the user wrote, where Inductor wraps the kernel in its autotuner and
    where it renames the kernel (``unique_user_kernel_names``)."""
    from triton.compiler import ASTSource

    source = _inductor_source(compiled_kernels.scaled_kernel)
    name = "scaled_kernel"
    if renamed:
        name = "scaled_kernel_0"
        source = source.replace("def scaled_kernel(", f"def {name}(")  # as Inductor renames it
    kernel = _load_as_inductor_writes(source, name)
    with proton_ik.instrumented():
        binary = triton.compile(ASTSource(kernel, SIGNATURE, {"BLOCK": 1024}), target=TARGET)
    written = Path(compiled_kernels.__file__)
    lines = written.read_text().splitlines()

    def line_of(text: str) -> int:
        (number,) = [index + 1 for index, line in enumerate(lines) if text in line]
        return number

    expected = {
        "load": line_of('with scope("load")'),
        "compute": line_of('enter_scope("compute")'),
        "helper": line_of('with prof.scope("helper")'),
    }
    scopes = {s["name"]: s for s in binary.metadata.proton_ik["scopes"]}
    for name, line in expected.items():
        assert (scopes[name].get("file"), scopes[name]["line"]) == (written.name, line), name


def test_a_copy_already_hashed_is_not_relocated():
    """Triton's hash of a function holds its first line: one hashed before the copy's module
    finishes loading keeps it, and its locations."""
    kernel = _load(_inductor_source(compiled_kernels.scaled_kernel), "scaled_kernel")
    assert kernel.cache_key  # hashed
    before = kernel.starting_line_number
    inductor_source.relocate({"scaled_kernel": kernel}, {"scaled_kernel": ("elsewhere.py", 1000)})
    assert kernel.starting_line_number == before
    assert kernel.fn.__code__.co_filename == compiled_kernels.__file__
    kernel.hash = None
    inductor_source.relocate({"scaled_kernel": kernel}, {"scaled_kernel": ("elsewhere.py", 1000)})
    assert kernel.fn.__code__.co_filename == "elsewhere.py"


def test_from_import_of_scope_works_in_a_plain_jit_kernel():
    """Triton admits only builtins among a kernel's globals: ``scope`` is marked as one."""
    from triton.compiler import ASTSource

    with proton_ik.instrumented():
        binary = triton.compile(
            ASTSource(compiled_kernels.scaled_kernel, SIGNATURE, {"BLOCK": 1024}), target=TARGET
        )
    assert "load" in {s["name"] for s in binary.metadata.proton_ik["scopes"]}


@triton.jit
def unannotated_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2.0, mask=offsets < n)


_AUTOTUNERS = itertools.count()
_RUN = uuid.uuid4().hex  # Inductor caches autotune results on disk by source, across processes


def _user_autotuner(kernel, configs: tuple[int, ...] = ()):
    """A new user kernel's autotuner as Inductor builds it (its source re-emitted, as Inductor's
    wrapper writes it), compiling for sm_90 with no GPU. Inductor caches modules by source: a
    comment numbered within this run makes each one new."""
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.runtime.hints import DeviceProperties

    device = DeviceProperties(type="cuda", index=0, multi_processor_count=132, cc=90, major=9, warp_size=32)
    constants = {} if configs else {"BLOCK": 1024}
    meta = {"signature": SIGNATURE, "device": device, "constants": constants, "configs": [{}]}
    meta["device_type"] = "cuda"
    tuned = [{"BLOCK": block, "num_warps": 4, "num_stages": 1} for block in configs]
    source = (
        f"# autotuner {_RUN}-{next(_AUTOTUNERS)}\nimport triton\nimport triton.language as tl\n"
        "from torch._inductor.runtime import triton_heuristics\n"
        "from torch._inductor.runtime.hints import DeviceProperties\n"
        f"@triton_heuristics.user_autotune(configs={tuned!r}, inductor_meta={{}}, triton_meta={meta!r}, "
        "filename=__file__, custom_kernel=True)\n@triton.jit\n" + _inductor_source(kernel)
    )
    return getattr(PyCodeCache.load(source), kernel.__name__)


@pytest.fixture
def inductor_autotuner(monkeypatch):
    """A user kernel's autotuner as Inductor builds it, compiling for sm_90 with no GPU."""
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime import triton_helpers

    monkeypatch.setattr(triton_helpers, "set_driver_to_gpu", lambda: None)
    with inductor_config.patch(use_static_triton_launcher=False):
        yield _user_autotuner(compiled_kernels.scaled_kernel)


def test_inductors_compile_path_keys_plain_and_instrumented_binaries_apart(inductor_autotuner):
    config = inductor_autotuner.configs[0]
    plain = inductor_autotuner._precompile_config(config).kernel
    with proton_ik.instrumented():
        instrumented = inductor_autotuner._precompile_config(config).kernel
    again = inductor_autotuner._precompile_config(config).kernel
    assert plain.hash != instrumented.hash and again.hash == plain.hash
    assert plain.metadata.profile_scratch_size == again.metadata.profile_scratch_size == 0
    assert instrumented.metadata.profile_scratch_size > 0


def test_a_user_kernel_with_no_scope_keeps_its_plain_binary_in_a_session(inductor_autotuner):
    tuner = _user_autotuner(unannotated_kernel)
    config = tuner.configs[0]
    plain = tuner._precompile_config(config).kernel
    with proton_ik.instrumented():
        assert tuner._precompile_config(config).kernel.hash == plain.hash
    with proton_ik.instrumented("instrumentation:unscoped=kernel"):
        assert tuner._precompile_config(config).kernel.hash != plain.hash


def test_cpp_wrapper_compiles_plain_inside_a_session_with_a_warning(inductor_autotuner):
    import torch._inductor.config as inductor_config

    config = inductor_autotuner.configs[0]
    plain = inductor_autotuner._precompile_config(config).kernel
    with (
        inductor_config.patch(cpp_wrapper=True),
        proton_ik.instrumented(),
        pytest.warns(UserWarning, match=r"cpp_wrapper = False"),
    ):
        binary = inductor_autotuner._precompile_config(config).kernel
    assert binary.hash == plain.hash and binary.metadata.profile_scratch_size == 0


def test_a_cpp_wrapper_graph_from_the_fx_graph_cache_is_said_to_run_plain(monkeypatch):
    """A graph loaded from the FX graph cache compiles no kernel, so only its post_compile, which
    runs on a hit as on a miss, can say that its C++ wrapper's kernels are not recorded."""
    import warnings

    from torch._inductor import output_code

    ran = []
    monkeypatch.setattr(output_code.CompiledFxGraph, "post_compile", lambda *args: ran.append(args[3]))
    fake = output_code.CompiledFxGraph.__dict__["post_compile"]

    def graph(devices):
        return types.SimpleNamespace(device_types=set(devices))

    with proton_ik.instrumented():
        post_compile = output_code.CompiledFxGraph.__dict__["post_compile"]
        assert post_compile is not fake
        with pytest.warns(UserWarning, match=r"cpp_wrapper = False"):
            post_compile(graph(["cuda"]), [], None, {"cpp_wrapper": True})
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            post_compile(graph(["cuda"]), [], None, {"cpp_wrapper": False})
            post_compile(graph(["cpu"]), [], None, {"cpp_wrapper": True})
    assert ran == [{"cpp_wrapper": True}, {"cpp_wrapper": False}, {"cpp_wrapper": True}]
    assert output_code.CompiledFxGraph.__dict__["post_compile"] is fake


def test_inductors_own_kernels_compile_plain_unless_every_kernel_records(inductor_autotuner):
    inductor_autotuner.custom_kernel = False  # as for a kernel Inductor wrote
    config = inductor_autotuner.configs[0]
    plain = inductor_autotuner._precompile_config(config).kernel
    with proton_ik.instrumented():
        assert inductor_autotuner._precompile_config(config).kernel.hash == plain.hash
    with proton_ik.instrumented("instrumentation:unscoped=kernel"):
        every = inductor_autotuner._precompile_config(config).kernel
    assert every.hash != plain.hash and every.metadata.profile_scratch_size > 0


class _Launcher:
    def __init__(self, config):
        self.config = config


class _Autotuner:
    """What the switch reads and writes of an Inductor autotuner."""

    custom_kernel = True

    def __init__(self):
        self.configs = None
        self.launchers = [_Launcher("best")]
        self.compile_results = ["compiled plain"]
        self.fn = types.SimpleNamespace(fn=object())
        self._cached_launcher = self.launchers[0]


def test_an_autotuner_switches_to_the_modes_launchers_and_back():
    tuner = _Autotuner()
    plain_launchers = tuner.launchers
    torch_compile._switch(tuner, "knob")
    # Nothing compiled under the mode yet: its run compiles the config it had settled on.
    assert tuner.launchers == [] and tuner.compile_results == [] and tuner.configs == ["best"]
    assert tuner._cached_launcher is None
    tuner.launchers, tuner.compile_results = [_Launcher("best")], ["compiled instrumented"]
    instrumented = tuner.launchers
    torch_compile._switch(tuner, "")
    assert tuner.launchers is plain_launchers and tuner.compile_results == ["compiled plain"]
    torch_compile._switch(tuner, "knob")
    assert tuner.launchers is instrumented  # kept from the first session: nothing recompiles


def test_the_patches_come_with_the_mode_and_go_with_it():
    from torch._inductor.runtime import triton_heuristics

    from proton_ik import compile_mode

    patched = ["run"] + ["_build_fast_launcher"] * (
        "_build_fast_launcher" in vars(triton_heuristics.CachingAutotuner)
    )
    before = {name: triton_heuristics.CachingAutotuner.__dict__[name] for name in patched}
    with proton_ik.instrumented():
        assert compile_mode.active_mode() is not None
        for name in patched:
            assert triton_heuristics.CachingAutotuner.__dict__[name] is not before[name], name
    for name in patched:
        assert triton_heuristics.CachingAutotuner.__dict__[name] is before[name], name


class _FakeDriver:
    def get_current_target(self):
        return TARGET

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


def test_mutation_analysis_of_a_scoped_kernel_finds_exactly_its_stores(monkeypatch, caplog):
    from torch._higher_order_ops import triton_kernel_wrap

    monkeypatch.setattr(triton.runtime.driver, "_active", _FakeDriver())
    analyse = getattr(triton_kernel_wrap, "identify_accessed_tensors", None)
    x, out = torch.empty(4096), torch.empty(4096)
    kwargs = {"x_ptr": x, "out_ptr": out, "n": 4096, "BLOCK": 1024}
    with proton_ik.instrumented(), caplog.at_level(logging.WARNING):
        if analyse is not None:
            writes = {
                dep.name
                for dep in analyse(compiled_kernels.scaled_kernel, dict(kwargs), {}).read_writes.writes
            }
        else:
            writes = set(
                triton_kernel_wrap.identify_mutated_tensors(compiled_kernels.scaled_kernel, dict(kwargs), {})
            )
    assert writes == {"out_ptr"}
    assert "assuming every input is mutated" not in caplog.text


def test_a_moved_internal_is_named_with_the_torch_version():
    module = types.ModuleType("torch._inductor.somewhere")
    expected = rf"torch {re.escape(torch.__version__)}: torch\._inductor\.somewhere has no Gone\.away"
    with pytest.warns(UserWarning, match=expected + r" .*are not recorded"):
        assert torch_compile._missing(module, "Gone.away")
    assert not torch_compile._missing(torch, "compile")


def test_after_import_calls_back_once_the_module_is_imported(tmp_path, monkeypatch):
    (tmp_path / "pik_after_import_probe.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    after_import.call("pik_after_import_probe", lambda module: seen.append(module.VALUE))
    assert seen == []
    import pik_after_import_probe  # noqa: F401

    assert seen == [7]
    after_import.call("pik_after_import_probe", lambda module: seen.append(-module.VALUE))
    assert seen == [7, -7]  # already imported: at once
    assert not any(type(f).__name__ == "_AfterImport" for f in sys.meta_path)


def test_cuda_graph_trees_recorded_in_a_session_are_refused_with_what_to_do():
    from torch._inductor import cudagraph_trees

    record = cudagraph_trees.CUDAGraphNode.__dict__["_record"]
    with proton_ik.instrumented():
        patched = cudagraph_trees.CUDAGraphNode.__dict__["_record"]
        assert patched is not record
        with pytest.raises(RuntimeError, match=r"mode='reduce-overhead'.*cudagraphs = False"):
            patched(object(), None, [])
    assert cudagraph_trees.CUDAGraphNode.__dict__["_record"] is record


class _NoDevice:
    """DeviceGuard with no GPU: the launchers below load nothing."""

    def __init__(self, *args):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@pytest.fixture
def no_gpu_launchers(monkeypatch):
    """Inductor's autotuner with no GPU: launchers note the binary they were made from (made)
    and what each launch ran (launched: its profile scratch bytes); benchmarks time BLOCK=512
    fastest and note the binaries they ran (benchmarked)."""
    import torch._dynamo.device_interface as device_interface
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime import triton_helpers, triton_heuristics

    noted = types.SimpleNamespace(made=[], launched=[], benchmarked=[])

    def make_launcher(result):
        noted.made.append(result.kernel.hash)
        scratch = result.kernel.metadata.profile_scratch_size

        def launcher(*args, stream=None, **kwargs):
            noted.launched.append(scratch)

        launcher.config, launcher.cache_hash, launcher.store_cubin = result.config, result.kernel.hash, False
        launcher.scratch, launcher.n_regs, launcher.n_spills, launcher.shared = scratch, 0, 0, 0
        return launcher

    def bench(tuner, launcher, *args, **kwargs):
        noted.benchmarked.append(launcher.scratch)
        return 1.0 if launcher.config.kwargs.get("BLOCK") == 512 else 2.0

    monkeypatch.setattr(triton_helpers, "set_driver_to_gpu", lambda: None)
    monkeypatch.setattr(triton_heuristics.TritonCompileResult, "make_launcher", make_launcher)
    monkeypatch.setattr(triton_heuristics.CachingAutotuner, "get_device_interface", lambda self: None)
    monkeypatch.setattr(triton_heuristics.CachingAutotuner, "bench", bench)
    monkeypatch.setattr(device_interface, "DeviceGuard", _NoDevice)
    with inductor_config.patch(use_static_triton_launcher=False, autotune_local_cache=False):
        yield noted


def test_a_compiled_kernel_runs_plain_then_recorded_then_plain_compiling_each_mode_once(no_gpu_launchers):
    """Inductor's autotuner through its own run(): the mode picks the binary at each launch, and
    each mode compiles once."""
    noted = no_gpu_launchers
    x = torch.empty(4096)
    tuner = _user_autotuner(compiled_kernels.scaled_kernel)
    tuner.run(x, x, 4096, stream=0)
    for _ in range(2):  # two sessions, each with two launches, and plain after each
        with proton_ik.instrumented():
            tuner.run(x, x, 4096, stream=0)
            tuner.run(x, x, 4096, stream=0)
        tuner.run(x, x, 4096, stream=0)
    recorded = noted.launched[1]
    assert recorded > 0 and noted.launched == [0, recorded, recorded, 0, recorded, recorded, 0]
    assert len(noted.made) == 2 and noted.made[0] != noted.made[1]  # plain and instrumented, once each


def test_autotuning_in_a_session_benchmarks_plain_binaries_and_records_the_choice(no_gpu_launchers):
    """First run inside a session of an autotuner with two configs: both compile plain and are
    benchmarked plain (no benchmark launch would be recorded), then only the chosen one compiles
    instrumented, and the user's launch runs it."""
    noted = no_gpu_launchers
    x = torch.empty(4096)
    tuner = _user_autotuner(compiled_kernels.scaled_kernel, configs=(256, 512))
    with proton_ik.instrumented():
        tuner.run(x, x, 4096, stream=0)
    assert noted.benchmarked == [0, 0]
    assert len(noted.made) == 3  # two plain for the benchmark, one instrumented for the choice
    assert len(noted.launched) == 1 and noted.launched[0] > 0
    assert [launcher.config.kwargs["BLOCK"] for launcher in tuner.launchers] == [512]
    tuner.run(x, x, 4096, stream=0)  # after the session: the plain binary of the choice, kept
    assert noted.launched[-1] == 0 and len(noted.made) == 3


def test_a_renamed_kernel_is_not_taken_for_a_helper_named_like_it():
    """Inductor renames the kernel ``<name>_<n>``; a helper of the copy that is itself called
    ``<name>_<m>`` keeps its own place, and the kernel gets the kernel's."""

    def kernel_body(x):
        return x

    def helper_body(x):
        return x

    kernel, helper = triton.jit(kernel_body), triton.jit(helper_body)
    namespace = {"scaled_1": helper, "scaled_0": kernel}  # the helper first, as a dict may hold them
    inductor_source.relocate(namespace, {"scaled": ("user.py", 100), "scaled_1": ("helpers.py", 200)})
    assert kernel.fn.__code__.co_filename == "user.py"
    assert helper.fn.__code__.co_filename == "helpers.py"
