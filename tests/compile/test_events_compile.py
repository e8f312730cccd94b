"""Events, marks, values and predicates in real Triton and Gluon compiles to sm_90 cubins, and
every misuse as a compile error that names the kernel, the name and the line."""

from __future__ import annotations

import inspect
import re

import pytest
import triton
import triton.language as tl
from triton.compiler.errors import CompilationError
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import proton_ik
import proton_ik.language as pl
from proton_ik.contract.metadata import KernelMetadata
from proton_ik.lowering.errors import ScopeError
from proton_ik.mode import Mode

SIGNATURE = {"x": "*fp32", "n": "i32", "BLOCK": "constexpr"}
CONSTEXPRS = {"BLOCK": 256}
STAGES = tl.constexpr(2)
LOAD = pl.event("load", instances=STAGES)


@triton.jit
def _finish(event, stage):
    """A helper that receives the event handle as an argument."""
    pl.end_event(event, index=stage)


@triton.jit
def triton_kernel(x, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    local = pl.event("local")
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    v = tl.zeros((BLOCK,), tl.float32)
    for i in range(4):
        pl.start_event(LOAD, index=i % STAGES, predicate=pid < n)
        v += tl.load(x + offs + i, mask=offs < n)
        pl.mark("iteration", value=i)
        _finish(LOAD, i % STAGES)
        pl.mark("sum", value=tl.sum(v, 0), predicate=i == 3)
    pl.start_event(local)
    pl.end_event(local)
    pl.mark("tile", value=7)
    pl.mark("unsigned", value=0x80000000)
    pl.mark("half", value=0.5)
    pl.mark("never", value=pid, predicate=False)
    with pl.scope("store", predicate=pid % 2 == 0):
        tl.store(x + offs, v, mask=offs < n)


@gluon.jit
def gluon_kernel(x, n, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    pid = gl.program_id(0)
    offs = pid * BLOCK + gl.arange(0, BLOCK, layout=layout)
    pl.start_event(LOAD, index=pid % STAGES, predicate=pid < n)
    v = gl.load(x + offs, mask=offs < n)
    pl.mark("tile", value=pid)
    pl.end_event(LOAD, index=pid % STAGES)
    pl.mark("phase", predicate=pid == 0)
    pl.enter_scope("store", predicate=pid >= 1)
    gl.store(x + offs, v, mask=offs < n)
    pl.exit_scope("store", predicate=pid >= 1)


def markers(ptx: str) -> list[str]:
    return re.findall(r"// pik\.marker (.*)", ptx)


@pytest.fixture(scope="module", params=["triton", "gluon"])
def compiled(request, compile_kernel):
    kernel = triton_kernel if request.param == "triton" else gluon_kernel
    return request.param, compile_kernel(kernel, SIGNATURE, CONSTEXPRS, mode=Mode(), num_warps=4)


def test_every_feature_compiles_to_a_cubin_with_its_name_table(compiled):
    dsl, kernel = compiled
    assert kernel.asm["cubin"]
    table = KernelMetadata.from_dict(kernel.metadata.proton_ik, "test").scopes
    kinds = {scope.name: (scope.kind, scope.instances) for scope in table}
    expected = {"store": ("scope", None), "load": ("event", 2), "tile": ("mark", None)}
    if dsl == "triton":
        expected |= {"local": ("event", 1), "iteration": ("mark", None), "sum": ("mark", None)}
        expected |= {"unsigned": ("mark", None), "half": ("mark", None)}
    else:
        expected |= {"phase": ("mark", None)}
    assert kinds == expected
    assert table[0].name == "store"  # scopes take the first ids
    assert "pik.marker" not in kernel.asm["ptx"]


def test_values_carry_their_type(compile_kernel):
    kernel = compile_kernel(triton_kernel, SIGNATURE, CONSTEXPRS, mode=Mode(), num_warps=4)
    types = re.findall(
        r"st\.global\.L2::cache_hint\.v4\.b32 \t\[%pik_a\], \{\d+, %pik_c, %\w+, (\d)\}, %pik_pol;",
        kernel.asm["ptx"],
    )
    # iteration and tile (i32), sum and half (f32), unsigned (u32): LLVM may unroll the loop,
    # and "never" was dropped.
    assert sorted(set(map(int, types))) == [0, 1, 2]
    assert types.count("1") == 1
    assert types.count("0") == types.count("2")


def test_nothing_is_emitted_while_inactive(compile_kernel):
    for kernel in (triton_kernel, gluon_kernel):
        plain = compile_kernel(kernel, SIGNATURE, CONSTEXPRS, num_warps=4)
        assert "pik" not in plain.asm["ptx"]
        assert plain.metadata.profile_scratch_size == 0


@triton.jit
def only_false_predicates(x):
    pl.mark("m", predicate=False)
    pl.start_event(LOAD, predicate=False)
    with pl.scope("s", predicate=False):
        tl.store(x, 1.0)


def test_a_constant_false_predicate_removes_the_record(compile_kernel):
    kernel = compile_kernel(only_false_predicates, {"x": "*fp32"}, mode=Mode())
    assert kernel.metadata.profile_scratch_size == 0
    assert "pik" not in kernel.asm["ptx"]


# --- misuse --------------------------------------------------------------------------------


@triton.jit
def index_out_of_range(x):
    pl.start_event(LOAD, index=2)


@triton.jit
def float_index(x):
    pl.end_event(LOAD, index=tl.load(x))


@triton.jit
def tensor_index(x):
    pl.start_event(LOAD, index=tl.arange(0, 4))


@triton.jit
def half_value(x):
    pl.mark("h", value=tl.load(x).to(tl.float16))


@triton.jit
def wide_value(x):
    pl.mark("w", value=tl.program_id(0).to(tl.int64))


@triton.jit
def huge_constant_value(x):
    pl.mark("c", value=1 << 40)


@triton.jit
def integer_predicate(x):
    pl.mark("p", predicate=tl.program_id(0))


@triton.jit
def constant_integer_predicate(x):
    pl.start_event(LOAD, predicate=1)


@triton.jit
def tensor_predicate(x):
    with pl.scope("s", predicate=tl.arange(0, 4) < 2):
        tl.store(x, 1.0)


@triton.jit
def tensor_mark_name(x):
    pl.mark(tl.program_id(0))


@triton.jit
def tensor_event_name(x):
    ev = pl.event(tl.program_id(0))
    pl.start_event(ev)


@triton.jit
def not_an_event(x):
    pl.start_event(3)


def line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn.fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


MISUSES = [
    (
        index_out_of_range,
        "event 'load'",
        "index 2 is outside the 2 declared instances (0..1)",
        "declare more",
    ),
    (
        float_index,
        "event 'load'",
        "index must be an integer of at most 32 bits, got a scalar of type fp32",
        ".to(tl.int32)",
    ),
    (
        tensor_index,
        "event 'load'",
        "index must be a scalar (one value for the whole program), got a tensor",
        "reduce it",
    ),
    (
        half_value,
        "mark 'h'",
        "a value is a 32-bit integer or float scalar, got a scalar of type fp16",
        ".to(tl.float32)",
    ),
    (
        wide_value,
        "mark 'w'",
        "a value is a 32-bit integer or float scalar, got a scalar of type int64",
        ".to(tl.int32)",
    ),
    (
        huge_constant_value,
        "mark 'c'",
        "a value is a 32-bit integer or float, got int 1099511627776",
        "int32, uint32",
    ),
    (integer_predicate, "mark 'p'", "predicate must be a boolean, got a scalar of type int32", "pid == 0"),
    (
        constant_integer_predicate,
        "event 'load'",
        "predicate must be a boolean, got int 1",
        "constant True or False",
    ),
    (
        tensor_predicate,
        "scope 's'",
        "predicate must be a scalar (one value for the whole program)",
        "reduce it",
    ),
]


@pytest.mark.parametrize("active", [True, False], ids=["active", "inactive"])
@pytest.mark.parametrize(("kernel", "what", "problem", "fix"), MISUSES, ids=[m[0].__name__ for m in MISUSES])
def test_misuse_names_kernel_name_and_line(compile_kernel, kernel, what, problem, fix, active):
    with pytest.raises(CompilationError) as error:
        compile_kernel(kernel, {"x": "*fp32"}, mode=Mode() if active else None)
    call = "pl." + re.search(r"pl\.(\w+\()", inspect.getsource(kernel.fn)).group(1)
    where = f"kernel '{kernel.__name__}' at test_events_compile.py:{line_of(kernel, call)}"
    assert f"proton_ik: {where}, {what}: {problem}" in str(error.value)
    assert "Fix: " in str(error.value) and fix in str(error.value)


@pytest.mark.parametrize(
    ("kernel", "message"),
    [
        (tensor_mark_name, "proton_ik: a mark name must be a compile-time constant string, got tensor"),
        (tensor_event_name, "proton_ik: an event name must be a compile-time constant string, got tensor"),
        (not_an_event, "an event is a pl.event handle or its name, got 3"),
    ],
)
def test_names_must_be_constant_strings(compile_kernel, kernel, message):
    with pytest.raises(CompilationError, match=re.escape(message)) as error:
        compile_kernel(kernel, {"x": "*fp32"}, mode=Mode())
    assert kernel.__name__ in str(error.value)


def test_an_event_outside_a_kernel_is_checked_at_once():
    with pytest.raises(ValueError, match=re.escape("instances = 0 is outside 1..2048")):
        pl.event("x", instances=0)
    with pytest.raises(ValueError, match=re.escape("an event name must not be empty")):
        pl.event("")
    assert pl.event("x", instances=3).value == pl.Event("x", 3)
    # The repr is code that makes the handle anew (Inductor copies constexpr globals by it).
    assert repr(pl.Event("x", 3)) == "proton_ik.language.Event('x', instances=3)"
    assert eval(repr(pl.Event("x", 3)), {"proton_ik": proton_ik}) == pl.Event("x", 3)


@triton.jit
def two_instance_counts(x):
    pl.start_event("clash")
    pl.end_event(pl.event("clash", instances=2), index=1)


@triton.jit
def started_never_ended(x):
    pl.start_event(LOAD, index=0)
    tl.store(x, 1.0)


def test_what_the_whole_kernel_shows_is_checked_after_collecting(compile_kernel):
    with pytest.raises(ScopeError, match=re.escape("event 'clash' at test_events_compile.py:")) as error:
        compile_kernel(two_instance_counts, {"x": "*fp32"}, mode=Mode())
    assert "the event has 2 instances here and 1 at" in str(error.value)
    line = line_of(started_never_ended, "start_event")
    with pytest.raises(
        ScopeError,
        match=re.escape(
            f"kernel 'started_never_ended', event 'load' at test_events_compile.py:{line}: the event is started"
        ),
    ):
        compile_kernel(started_never_ended, {"x": "*fp32"}, mode=Mode())
