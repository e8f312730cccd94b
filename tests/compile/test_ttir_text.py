"""``ttir_text``: facts read off TTIR text. TTIR in, op trees, constants and source lines out."""

from __future__ import annotations

import pytest

from proton_ik.lowering.ttir_text import (
    TtirMarker,
    integer_constants,
    loc_aliases,
    markers,
    parse_ops,
    source_line,
)

# The shapes Triton prints: an ``scf.for`` with iter_args and attributes after its region, an
# ``scf.if`` with an else region, an ``scf.while`` with a ``do`` region and block arguments.
TTIR = """\
#loc = loc("/src/k.py":3:0)
module {
  tt.func public @k(%n: i32 loc("n"(#loc))) attributes {noinline = false} {
    %c4_i32 = arith.constant 4 : i32 loc(#loc1)
    %c0_i32 = arith.constant 0 : i32 loc(#loc1)
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32> loc(#loc1)
    %c-2_i64 = arith.constant -2 : i64 loc(#loc1)
    %acc = scf.for %i = %c0_i32 to %c4_i32 step %c4_i32 iter_args(%a = %cst) -> (tensor<128xf32>)  : i32 {
      scf.yield %a : tensor<128xf32> loc(#loc2)
    } {tt.loop_unroll_factor = 1 : i32} loc(#loc3)
    %1 = arith.cmpi eq, %n, %c0_i32 : i32 loc(#loc4)
    scf.if %1 {
      tt.return loc(#loc4)
    } else {
    } loc(#loc5)
    %j = scf.while (%j_0 = %c0_i32) : (i32) -> i32 {
      scf.condition(%1) %j_0 : i32 loc(#loc4)
    } do {
    ^bb0(%j_0: i32 loc("j")):
      scf.yield %j_0 : i32 loc(#loc4)
    } loc(#loc6)
    tt.return loc(#loc4)
  } loc(#loc)
} loc(#loc)
#loc1 = loc(unknown)
#loc2 = loc("/src/k.py":5:8)
#loc3 = loc("acc"(#loc7))
#loc4 = loc("/src/k.py":9:4)
#loc5 = loc(callsite(#loc8 at #loc4))
#loc6 = loc("j"(#loc1))
#loc7 = loc("/src/k.py":4:4)
#loc8 = loc("/src/helpers.py":20:8)
"""


def test_ops_nest_by_their_regions():
    (module,) = parse_ops(TTIR)
    (function,) = module.regions[0]
    assert (module.name, function.name) == ("module", "tt.func")
    names = [op.name for op in function.regions[0]]
    assert names == ["arith.constant"] * 4 + ["scf.for", "arith.cmpi", "scf.if", "scf.while", "tt.return"]
    loop, if_op, while_op = (function.regions[0][i] for i in (4, 6, 7))
    assert [[op.name for op in region] for region in loop.regions] == [["scf.yield"]]
    assert [[op.name for op in region] for region in if_op.regions] == [["tt.return"], []]
    assert [[op.name for op in region] for region in while_op.regions] == [["scf.condition"], ["scf.yield"]]
    assert (loop.loc, if_op.loc, function.regions[0][5].loc) == ("#loc3", "#loc5", "#loc4")


def test_source_lines_follow_names_aliases_and_call_sites():
    aliases = loc_aliases(TTIR)
    assert source_line("#loc3", aliases) == "k.py:4"  # a name around an alias
    assert source_line("#loc5", aliases) == "helpers.py:20"  # the callee's line, where the code is
    assert source_line('"x"(#loc)', aliases) == "k.py:3"
    assert source_line("#loc6", aliases) is None  # a name around loc(unknown)
    assert source_line(None, aliases) is None


def test_integer_constants_are_read_and_tensors_are_not():
    (module,) = parse_ops(TTIR)
    assert integer_constants(module) == {"%c4_i32": 4, "%c0_i32": 0, "%c-2_i64": -2}


@pytest.mark.parametrize(
    ("text", "problem"),
    [("module {\n  }\n}", "unbalanced '}'"), ("module {\n  scf.if %1 {\n  }", "ends inside module")],
)
def test_unbalanced_text_is_refused(text: str, problem: str):
    with pytest.raises(ValueError, match=problem):
        parse_ops(text)


def _marker(kind: str, name: str, loc: str) -> str:
    return (
        f'%m = tt.elementwise_inline_asm "// pik.marker \\22pik.record\\22() <{{kind = \\22{kind}\\22, '
        f'scope = \\22{name}\\22}}> : () -> ()" {{constraints = "=r", packed_element = 1 : i32, pure = false}} '
        f"-> i32 loc({loc})"
    )


MARKED_TTIR = f"""\
module {{
  tt.func public @k(%n: i32) {{
    %c0_i32 = arith.constant 0 : i32 loc(#loc1)
    scf.for %i = %c0_i32 to %n step %c0_i32  : i32 {{
      {_marker("begin", "k step", "#loc2")}
      {_marker("end", "k step", "#loc3")}
    }} {{tt.warp_specialize}} loc(#loc4)
    scf.for %i = %c0_i32 to %n step %c0_i32  : i32 {{
      {_marker("begin", "plain (loop)", "#loc2")}
    }} loc(#loc5)
    {_marker("end", "tail", "#loc3")}
    tt.return loc(#loc1)
  }} loc(#loc1)
}} loc(#loc1)
#loc1 = loc(unknown)
#loc2 = loc("/src/k.py":7:8)
#loc3 = loc("/src/k.py":9:4)
#loc4 = loc("/src/k.py":6:4)
#loc5 = loc("/src/k.py":10:4)
"""


def test_markers_are_read_with_their_line_and_the_warp_specialized_loop_they_follow():
    assert markers(MARKED_TTIR) == [
        TtirMarker("k step", "k.py:7", "k.py:6", None),
        TtirMarker("k step", "k.py:9", "k.py:6", None),
        TtirMarker("plain (loop)", "k.py:7", None, "k.py:6"),
        TtirMarker("tail", "k.py:9", None, "k.py:6"),
    ]
    assert markers(TTIR) == []
