"""``pik-check-scopes``: only what is provably wrong is an error, with a message users can act on."""

from __future__ import annotations

import re

import pytest

from proton_ik.contract.tags import MAX_SCOPES
from proton_ik.dialect import make_context, parse_module
from proton_ik.lowering.assign_scope_ids import AssignScopeIds
from proton_ik.lowering.check_scopes import CheckScopes
from proton_ik.lowering.errors import ScopeError


def module_of(*records: str):
    body = "\n".join(f"  pik.record {r}" for r in records)
    return parse_module(f'builtin.module attributes {{pik.kernel = "kern"}} {{\n{body}\n}}')


def check(module, **options) -> None:
    CheckScopes(**options).apply(make_context(), module)


def test_pass_name_and_default_limit():
    assert CheckScopes.name == "pik-check-scopes"
    assert CheckScopes().max_scopes == MAX_SCOPES


def test_exit_never_entered():
    module = module_of(
        '"begin" "a" {line = 3 : i64, file = "k.py"}',
        '"end" "a" {line = 4 : i64, file = "k.py"}',
        '"end" "b" {line = 9 : i64, file = "k.py"}',
    )
    with pytest.raises(ScopeError) as error:
        check(module)
    assert str(error.value) == (
        "proton_ik: kernel 'kern', scope 'b' at k.py:9: the scope is exited but never entered. "
        'Fix: add pl.enter_scope("b") before it, or use `with pl.scope("b"):`'
    )
    assert (error.value.kernel, error.value.scope, error.value.where) == ("kern", "b", "k.py:9")


def test_enter_never_exited():
    module = module_of('"begin" "open" {line = 7 : i64, file = "k.py"}', '"begin" "open" {line = 8 : i64}')
    with pytest.raises(ScopeError) as error:
        check(module)
    assert str(error.value) == (
        "proton_ik: kernel 'kern', scope 'open' at k.py:7: the scope is entered but never exited. "
        'Fix: add pl.exit_scope("open") where it ends, or use `with pl.scope("open"):`'
    )


def test_a_record_without_a_source_line_is_still_named():
    with pytest.raises(ScopeError, match=re.escape("kernel 'kern', scope 'x' at <kernel>:?")):
        check(module_of('"end" "x"'))


def test_too_many_scopes_names_the_first_one_over_the_limit():
    module = module_of(
        *(
            f'"{kind}" "{name}" {{line = {line} : i64, file = "k.py"}}'
            for name, line in (("a", 1), ("b", 2), ("c", 3))
            for kind in ("begin", "end")
        )
    )
    check(module, max_scopes=3)
    with pytest.raises(ScopeError) as error:
        check(module, max_scopes=2)
    assert str(error.value) == (
        "proton_ik: kernel 'kern', scope 'c' at k.py:3: the kernel has 3 distinct scopes; a record tag "
        "holds at most 2. Fix: reuse scope names (one name per kind of work, not per iteration)"
    )


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(['"begin" "a"', '"end" "a"'], id="straight-line"),
        pytest.param(['"end" "a" {line = 9 : i64}', '"begin" "a" {line = 3 : i64}'], id="exit-before-enter"),
        pytest.param(
            ['"begin" "a"', '"end" "a"', '"end" "a"', '"begin" "a"'], id="enter-in-branches-exit-in-loop"
        ),
        pytest.param(['"begin" "a"', '"begin" "a"', '"end" "a"'], id="enter-in-two-branches-one-exit"),
        pytest.param(['"begin" "o"', '"end" "i"', '"begin" "i"', '"end" "o"'], id="pipelined-nesting"),
        pytest.param([], id="no-records"),
    ],
)
def test_legal_orders_are_not_errors(records: list[str], context):
    module = module_of(*records)
    before = str(module)
    check(module)
    assert str(module) == before
    AssignScopeIds().apply(context, module)
    check(module)
