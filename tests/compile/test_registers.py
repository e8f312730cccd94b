"""``lowering.registers``: every ``%pik_*`` register named once, with its type, and declared only
by the kernels that use its group."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from proton_ik.lowering import placement, registers
from proton_ik.lowering.registers import FRAME, PAIR_BEGIN, declarations

sys.path.insert(0, str(Path(__file__).parents[1]))
from package_layout import FOLDERS

GROUPS = {
    "frame": FRAME,
    "launch sizes": (registers.LAUNCH_SIZES,),
    "compact pairs": registers.COMPACT_PAIRS,
    "sampling": registers.SAMPLING,
    "aggregate": registers.AGGREGATE,
    "events": registers.EVENTS,
    "staging": registers.STAGING,
}
NAMED = [name for groups in GROUPS.values() for group in groups for name in group.names]
NUMBERED = [PAIR_BEGIN, registers.SCOPE_BEGIN, registers.OPEN]
REGISTER = re.compile(r"%pik_\w+")
# ``%pik_proton_record_N`` names a value of the TTIR that ``proton_records`` writes, not a PTX register.
NOT_PTX = {"proton_records.py"}


def _code_strings(path: Path) -> list[str]:
    """The string constants of a module's code: docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


@pytest.mark.parametrize(
    "path",
    sorted(p for p in FOLDERS["proton_ik.lowering"].glob("*.py") if p.name not in {"registers.py", *NOT_PTX}),
    ids=lambda p: p.name,
)
def test_no_other_module_spells_a_register(path: Path):
    spelled = sorted({r for text in _code_strings(path) for r in REGISTER.findall(text)})
    assert not spelled, f"{path.name} spells {spelled}: name them through lowering.registers"


def test_each_register_has_one_group_and_the_prefix():
    assert len(NAMED) == len(set(NAMED))
    stems = [numbered.stem for numbered in NUMBERED]
    assert all(name.startswith(registers.PREFIX) for name in NAMED + stems)
    assert not set(stems) & set(NAMED)
    constants = {v for k, v in vars(registers).items() if k.isupper() and isinstance(v, str)}
    assert constants - {registers.PREFIX} == set(NAMED)


def test_a_plain_kernel_declares_the_frame_only():
    assert declarations() == [group.declaration() for group in FRAME]
    assert declarations()[2] == "\t.reg .pred \t%pik_w, %pik_h;"


def test_each_group_is_declared_where_the_kernel_uses_it_in_one_order():
    every = declarations(
        pairs=3, sampled=True, launch_sized=True, aggregate_scopes=33, events=True, staged=True
    )
    frame = [group.declaration() for group in FRAME]
    assert every == [
        *frame,
        "\t.reg .b32 \t%pik_b<3>;",
        "\t.reg .b32 \t%pik_cs, %pik_us;",
        "\t.reg .pred \t%pik_sc, %pik_m;",
        "\t.reg .b32 \t%pik_shift, %pik_unit_bytes, %pik_cta_bytes, %pik_mask, %pik_capacity;",
        "\t.reg .b32 \t%pik_begin<33>;",
        "\t.reg .b32 \t%pik_open<2>;",  # 33 scopes, 32 bits a register
        "\t.reg .b32 \t%pik_d, %pik_dn;",
        "\t.reg .b64 \t%pik_d64, %pik_stats;",
        "\t.reg .pred \t%pik_q, %pik_f;",
        "\t.reg .b32 \t%pik_ev_tag;",
        "\t.reg .pred \t%pik_ev_on;",
        "\t.reg .b32 \t%pik_sh, %pik_ss;",
        "\t.reg .pred \t%pik_sq;",
    ]
    assert declarations(staged=True) == [*frame, "\t.reg .b32 \t%pik_sh, %pik_ss;", "\t.reg .pred \t%pik_sq;"]


def test_placement_knows_every_register_as_ours():
    ours = [*NAMED, *(numbered[7] for numbered in NUMBERED)]
    assert placement.reads_only_ours([f"\tmov.u32 \t{register}, %clock;" for register in ours])
    assert not placement.reads_only_ours(["\tmov.u32 \t%pik_n, %r1;"])
    assert not placement.sinkable("\tadd.s32 \t%r1, %r1, %tid.x;")
    assert placement.sinkable(f"\tadd.s32 \t%r1, %r1, {registers.COUNT};")
