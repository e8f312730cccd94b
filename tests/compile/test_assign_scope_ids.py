"""``pik-assign-scope-ids``: ``pik`` text in, ``pik`` text out with the scope table and ids."""

from __future__ import annotations

from proton_ik.dialect import parse_module
from proton_ik.lowering.assign_scope_ids import AssignScopeIds, scope_table

BEFORE = """\
builtin.module attributes {pik.kernel = "k"} {
  pik.record "begin" "load" {line = 12 : i64, site = 28 : i64}
  pik.record "begin" "compute" {site = 30 : i64}
  pik.record "end" "load" {line = 14 : i64, site = 36 : i64}
  pik.record "end" "compute" {line = 15 : i64, site = 40 : i64}
  pik.record "end" "store" {line = 20 : i64, site = 50 : i64}
  pik.record "begin" "store" {line = 18 : i64, site = 60 : i64}
}"""

AFTER = """\
builtin.module attributes {pik.kernel = "k"} {
  pik.scope 0 : i64 "load" {line = 12 : i64}
  pik.scope 1 : i64 "compute"
  pik.scope 2 : i64 "store" {line = 18 : i64}
  pik.record "begin" "load" {line = 12 : i64, site = 28 : i64, scope_id = 0 : i64}
  pik.record "begin" "compute" {site = 30 : i64, scope_id = 1 : i64}
  pik.record "end" "load" {line = 14 : i64, site = 36 : i64, scope_id = 0 : i64}
  pik.record "end" "compute" {line = 15 : i64, site = 40 : i64, scope_id = 1 : i64}
  pik.record "end" "store" {line = 20 : i64, site = 50 : i64, scope_id = 2 : i64}
  pik.record "begin" "store" {line = 18 : i64, site = 60 : i64, scope_id = 2 : i64}
}"""


def test_pass_name():
    assert AssignScopeIds.name == "pik-assign-scope-ids"


def test_ids_follow_first_appearance_and_land_on_every_record(context):
    """Ids in the order names first appear; a scope's line is its first begin's, where an end
    comes first (LLVM rotating a loop puts the previous iteration's end before the begin)."""
    module = parse_module(BEFORE)
    AssignScopeIds().apply(context, module)
    module.verify()
    assert str(module) == AFTER


def test_the_table_as_plain_data(context):
    module = parse_module(BEFORE)
    AssignScopeIds().apply(context, module)
    assert scope_table(module) == [
        {"id": 0, "name": "load", "line": 12},
        {"id": 1, "name": "compute", "line": None},
        {"id": 2, "name": "store", "line": 18},  # its begin's line, though its end comes first
    ]


WITH_FILES = """\
builtin.module attributes {pik.kernel = "k"} {
  pik.record "begin" "load" {line = 12 : i64, file = "k.py"}
  pik.record "begin" "compute" {site = 30 : i64}
  pik.record "end" "load" {line = 14 : i64, file = "helpers.py"}
  pik.record "end" "compute" {line = 15 : i64, file = "k.py"}
}"""


def test_the_table_carries_the_file_of_each_names_first_record(context):
    module = parse_module(WITH_FILES)
    AssignScopeIds().apply(context, module)
    module.verify()
    assert str(module).splitlines()[1:3] == [
        '  pik.scope 0 : i64 "load" {line = 12 : i64, file = "k.py"}',
        '  pik.scope 1 : i64 "compute"',  # its first record has neither line nor file
    ]
    assert scope_table(module) == [
        {"id": 0, "name": "load", "line": 12, "file": "k.py"},
        {"id": 1, "name": "compute", "line": None},
    ]


def test_running_twice_rebuilds_the_same_table(context):
    module = parse_module(AFTER)
    AssignScopeIds().apply(context, module)
    assert str(module) == AFTER


def test_stale_ids_are_replaced(context):
    stale = BEFORE.replace('"begin" "load" {', '"begin" "load" {scope_id = 7 : i64, ').replace(
        'builtin.module attributes {pik.kernel = "k"} {\n',
        'builtin.module attributes {pik.kernel = "k"} {\n  pik.scope 7 : i64 "load"\n',
    )
    module = parse_module(stale)
    AssignScopeIds().apply(context, module)
    assert str(module) == AFTER.replace(
        '"begin" "load" {line = 12 : i64, site = 28 : i64, scope_id = 0 : i64}',
        '"begin" "load" {scope_id = 0 : i64, line = 12 : i64, site = 28 : i64}',
    )


def test_an_empty_module_gets_an_empty_table(context):
    module = parse_module('builtin.module attributes {pik.kernel = "k"} {\n}')
    AssignScopeIds().apply(context, module)
    assert scope_table(module) == []
    assert str(module) == 'builtin.module attributes {pik.kernel = "k"} {\n}'
