"""The ``pik`` dialect as text: parse, verify, print, in custom and generic syntax."""

from __future__ import annotations

import io
import re

import pytest
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from proton_ik.contract.names import MAX_NAME_LENGTH
from proton_ik.contract.tags import MAX_SCOPES
from proton_ik.dialect import make_context, parse_module
from proton_ik.dialect.pik import RECORD_KINDS, RecordOp, ScopeOp

PIK_TEXT = """\
builtin.module attributes {pik.kernel = "matmul"} {
  pik.scope 0 : i64 "k_step" {line = 41 : i64}
  pik.scope 1 : i64 "epilogue" {line = 50 : i64}
  pik.record "begin" "k_step" {line = 41 : i64, file = "mm.py", site = 212 : i64, scope_id = 0 : i64}
  pik.record "end" "k_step" {line = 44 : i64, file = "mm.py", site = 251 : i64, scope_id = 0 : i64}
  pik.record "begin" "epilogue" {line = 50 : i64, site = 260 : i64, scope_id = 1 : i64}
  pik.record "end" "epilogue"
}
"""

PIK_GENERIC = """\
"builtin.module"() ({
  "pik.scope"() <{scope_id = 0 : i64, scope = "k_step", line = 41 : i64}> : () -> ()
  "pik.scope"() <{scope_id = 1 : i64, scope = "epilogue", line = 50 : i64}> : () -> ()
  "pik.record"() <{kind = "begin", scope = "k_step", line = 41 : i64, file = "mm.py", site = 212 : i64, \
scope_id = 0 : i64}> : () -> ()
  "pik.record"() <{kind = "end", scope = "k_step", line = 44 : i64, file = "mm.py", site = 251 : i64, \
scope_id = 0 : i64}> : () -> ()
  "pik.record"() <{kind = "begin", scope = "epilogue", line = 50 : i64, site = 260 : i64, \
scope_id = 1 : i64}> : () -> ()
  "pik.record"() <{kind = "end", scope = "epilogue"}> : () -> ()
}) {pik.kernel = "matmul"} : () -> ()
"""


def generic(op) -> str:
    stream = io.StringIO()
    Printer(stream=stream, print_generic_format=True).print_op(op)
    return stream.getvalue() + "\n"


def test_custom_syntax_round_trips():
    assert str(parse_module(PIK_TEXT)) + "\n" == PIK_TEXT


def test_generic_syntax_prints_and_parses_back():
    module = parse_module(PIK_TEXT)
    assert generic(module) == PIK_GENERIC
    again = parse_module(PIK_GENERIC)
    assert str(again) + "\n" == PIK_TEXT
    assert generic(again) == PIK_GENERIC


def test_ops_read_back_as_typed_python_values():
    records = [op for op in parse_module(PIK_TEXT).walk() if isinstance(op, RecordOp)]
    assert [(r.kind.data, r.scope.data, r.is_end) for r in records] == [
        ("begin", "k_step", False),
        ("end", "k_step", True),
        ("begin", "epilogue", False),
        ("end", "epilogue", True),
    ]
    assert records[0].source_location == "mm.py:41"
    assert records[2].source_location == "<kernel>:50"
    assert records[3].source_location == "<kernel>:?"


def test_python_constructors_print_the_documented_text():
    record = RecordOp("begin", "load", line=12, site=80)
    scope = ScopeOp(0, "load", 12)
    record.verify()
    scope.verify()
    assert str(record) == 'pik.record "begin" "load" {line = 12 : i64, site = 80 : i64}'
    assert str(scope) == 'pik.scope 0 : i64 "load" {line = 12 : i64}'


def test_the_scope_id_type_may_be_left_out():
    module = parse_module('builtin.module {\n  pik.scope 3 "a"\n}')
    assert str(module) == 'builtin.module {\n  pik.scope 3 : i64 "a"\n}'


def test_the_context_knows_both_dialects():
    names = {d.name for d in make_context().loaded_dialects}
    assert {"builtin", "pik", "pikgpu"} <= names


@pytest.mark.parametrize(
    ("op_text", "message"),
    [
        ('pik.record "middle" "a"', f"pik.record kind must be one of {RECORD_KINDS}, got 'middle'"),
        ('pik.record "begin" ""', "a scope name must not be empty"),
        ('pik.record "begin" "a\\"b"', "scope name 'a\"b' has characters ['\"']"),
        ('pik.record "begin" "a$b"', "scope name 'a$b' has characters ['$']"),
        ('pik.record "begin" "a\\\\b"', "has characters ['\\\\']"),
        ('pik.record "begin" "tab\\09"', "has characters ['\\t']"),
        (
            f'pik.record "end" "{"n" * (MAX_NAME_LENGTH + 1)}"',
            f"is {MAX_NAME_LENGTH + 1} characters; the limit",
        ),
        (f'pik.record "begin" "a" {{scope_id = {MAX_SCOPES} : i64}}', f"scope_id {MAX_SCOPES} is outside"),
        ('pik.record "begin" "a" {scope_id = -1 : i64}', "scope_id -1 is outside [0, 65536)"),
        (f'pik.scope {MAX_SCOPES} "a"', f"scope id {MAX_SCOPES} is outside [0, {MAX_SCOPES})"),
        ('pik.scope -1 "a"', "scope id -1 is outside"),
        ('pik.scope 0 ""', "a scope name must not be empty"),
        ('pik.scope 0 "x$y"', "has characters ['$']"),
    ],
)
def test_verifier_refuses(op_text: str, message: str):
    with pytest.raises(VerifyException, match=re.escape(message)):
        parse_module(f"builtin.module {{\n  {op_text}\n}}")


def test_the_longest_legal_name_passes():
    name = "n" * MAX_NAME_LENGTH
    parse_module(
        f'builtin.module {{\n  pik.record "begin" "{name}" {{scope_id = {MAX_SCOPES - 1} : i64}}\n}}'
    )


def test_python_built_ops_are_verified_too():
    with pytest.raises(VerifyException, match="must not be empty"):
        RecordOp("begin", "").verify()
    with pytest.raises(VerifyException, match="outside"):
        ScopeOp(MAX_SCOPES, "a").verify()
