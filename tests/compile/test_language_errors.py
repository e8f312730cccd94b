"""Mistakes in a kernel's scopes surface from ``triton.compile`` with what to fix and where."""

from __future__ import annotations

import inspect
import re

import pytest
import triton
import triton.language as tl
from triton.compiler.errors import CompilationError

import proton_ik.language as pl
from proton_ik.contract.names import MAX_NAME_LENGTH
from proton_ik.lowering.errors import ScopeError
from proton_ik.mode import Mode

SIGNATURE = {"x": "*fp32"}
LONG_NAME = tl.constexpr("n" * (MAX_NAME_LENGTH + 1))


@triton.jit
def tensor_name(x):
    pid = tl.program_id(0)
    pl.enter_scope(pid)


@triton.jit
def int_name(x):
    pl.enter_scope(3)


@triton.jit
def empty_name(x):
    with pl.scope(""):
        tl.store(x, 1.0)


@triton.jit
def long_name(x):
    pl.exit_scope(LONG_NAME)


@triton.jit
def dollar_name(x):
    pl.enter_scope("cost$")
    pl.exit_scope("cost$")


@triton.jit
def exit_never_entered(x):
    with pl.scope("fine"):
        tl.store(x, 1.0)
    pl.exit_scope("orphan")


@triton.jit
def enter_never_exited(x):
    pl.enter_scope("dangling")
    tl.store(x, 1.0)


@triton.jit(noinline=True)
def scoped_helper(x, pid):
    with pl.scope("inside"):
        tl.store(x + pid, 1.0)


@triton.jit
def calls_scoped_helper(x):
    scoped_helper(x, tl.program_id(0))


BAD_NAMES = [
    (tensor_name, "proton_ik: a scope name must be a compile-time constant string, got tensor"),
    (int_name, "proton_ik: a scope name must be a compile-time constant string, got int 3"),
    (empty_name, "proton_ik: a scope name must not be empty"),
    (
        long_name,
        f"proton_ik: scope name 'nnnn{'n' * 36}'... is {MAX_NAME_LENGTH + 1} characters; the limit is",
    ),
    (dollar_name, "proton_ik: scope name 'cost$' has characters ['$']"),
]


@pytest.mark.parametrize("active", [True, False], ids=["active", "inactive"])
@pytest.mark.parametrize(("kernel", "message"), BAD_NAMES, ids=[k.__name__ for k, _ in BAD_NAMES])
def test_bad_names_are_compilation_errors(compile_kernel, kernel, message: str, active: bool):
    with pytest.raises(CompilationError) as error:
        compile_kernel(kernel, SIGNATURE, mode=Mode() if active else None)
    assert message in str(error.value)
    # A literal that breaks the rule is to be renamed; anything else is to become a literal.
    literal = kernel in (empty_name, long_name, dollar_name)
    assert ("Rename it" if literal else "Pass a string literal") in str(error.value)
    assert kernel.__name__ in str(error.value)
    # the message as written, not the repr of a string whose quotes Triton's report escapes again
    assert "Error('" not in str(error.value) and 'Error("' not in str(error.value)


def line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn.fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_exit_never_entered_names_kernel_scope_and_line(compile_kernel):
    with pytest.raises(ScopeError) as error:
        compile_kernel(exit_never_entered, SIGNATURE, mode=Mode())
    where = f"test_language_errors.py:{line_of(exit_never_entered, 'exit_scope(')}"
    assert str(error.value) == (
        f"proton_ik: kernel 'exit_never_entered', scope 'orphan' at {where}: the scope is exited but "
        'never entered. Fix: add pl.enter_scope("orphan") before it, or use `with pl.scope("orphan"):`'
    )


def test_enter_never_exited_names_kernel_scope_and_line(compile_kernel):
    with pytest.raises(
        ScopeError,
        match=re.escape(
            f"kernel 'enter_never_exited', scope 'dangling' at "
            f"test_language_errors.py:{line_of(enter_never_exited, 'enter_scope(')}: the scope is entered but never"
        ),
    ):
        compile_kernel(enter_never_exited, SIGNATURE, mode=Mode())


def test_unbalanced_scopes_compile_while_inactive(compile_kernel):
    kernel = compile_kernel(exit_never_entered, SIGNATURE)
    assert kernel.metadata.profile_scratch_size == 0


def test_a_scope_in_a_noinline_function_is_refused(compile_kernel):
    with pytest.raises(ValueError) as error:
        compile_kernel(calls_scoped_helper, SIGNATURE, mode=Mode())
    message = str(error.value)
    assert "kernel 'calls_scoped_helper', scope 'inside' at test_language_errors.py:" in message
    assert "did not inline" in message and "drop noinline=True" in message
