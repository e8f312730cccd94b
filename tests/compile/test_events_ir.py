"""Events, marks, values and predicates through each pass, as IR text in and text out.

``pik.record`` kinds ``event_start``, ``event_end`` and ``mark``, with runtime operands named by
PTX registers; the ``pikgpu`` ops that read them (``pikgpu_operands``); and the PTX each becomes.
"""

from __future__ import annotations

import re

import pytest
from xdsl.utils.exceptions import VerifyException

from proton_ik.contract.layout import BufferLayout
from proton_ik.contract.tags import TAG_INDEX_MASK, TAG_INDEX_SHIFT, RecordKind, ValueType, make_tag
from proton_ik.dialect import make_context, parse_module
from proton_ik.dialect.markers import marker_text, parse_marker
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering.assign_scope_ids import AssignScopeIds, scope_table
from proton_ik.lowering.check_scopes import CheckScopes
from proton_ik.lowering.collect import collect_markers
from proton_ik.lowering.errors import ScopeError
from proton_ik.lowering.pik_to_pikgpu import ConvertPikToPikGPU, find_pairs
from proton_ik.lowering.pikgpu_to_ptx import plan_ptx

MODULE = 'builtin.module attributes {{pik.kernel = "kern"}} {{\n{body}\n}}'

# These tests read layout version 2's PTX, line by line; version 3's is read in
# test_compile_kernels.py and run by test_ptx_stores.py's interpreter.
V2 = 2


def module_of(*lines: str):
    return parse_module(MODULE.format(body="\n".join(f"  {line}" for line in lines)))


# --- the pik dialect ------------------------------------------------------------------------

RECORDS = [
    'pik.record "event_start" "tma" {instances = 4 : i64, index_reg = "%r7", predicate = "%r9"}',
    'pik.record "event_end" "tma" {instances = 4 : i64, index = 3 : i64}',
    'pik.record "mark" "tile" {value = "%r4", value_type = "f32"}',
    'pik.record "mark" "phase" {predicate = "%r2"}',
    'pik.record "begin" "load" {predicate = "$1"}',
]


def test_every_record_kind_round_trips_as_text():
    text = MODULE.format(body="\n".join(f"  {line}" for line in RECORDS))
    assert str(parse_module(text)) == text


def test_records_read_back_as_typed_values():
    start, end, value, mark, scope = (op for op in module_of(*RECORDS).walk() if isinstance(op, RecordOp))
    assert (start.name_kind, start.record_kind, start.is_end, start.event_instances) == (
        "event",
        RecordKind.EVENT,
        False,
        4,
    )
    assert start.registers == {"predicate": "%r9", "index_reg": "%r7"}
    assert (end.is_end, end.index.value.data, end.registers) == (True, 3, {})
    assert (value.record_kind, value.registers) == (RecordKind.VALUE, {"value": "%r4"})
    assert (mark.record_kind, mark.what) == (RecordKind.MARK, "mark 'phase'")
    assert not scope.pairable and not start.pairable
    assert RecordOp("begin", "x").pairable


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            '"event_start" "e" {instances = 4 : i64, index = 4 : i64}',
            "index 4 is outside the 4 declared instances",
        ),
        ('"event_start" "e" {instances = 0 : i64}', "instances = 0 is outside 1..2048"),
        ('"event_start" "e" {index = 0 : i64, index_reg = "%r1"}', "exclude each other"),
        ('"begin" "s" {instances = 2 : i64}', "instances belongs to event records, not 'begin'"),
        ('"mark" "m" {index_reg = "%r1"}', "index_reg belongs to event records"),
        ('"event_end" "e" {value = "%r1", value_type = "i32"}', "only a mark records a value"),
        ('"mark" "m" {value = "%r1"}', "a value and its value_type come together"),
        ('"mark" "m" {value = "%r1", value_type = "f64"}', "value_type must be one of ['i32', 'u32', 'f32']"),
        ('"mark" "m" {predicate = "r1"}', "predicate = 'r1' is not a PTX register or an asm operand"),
        ('"mark" "m" {predicate = "%r1; trap"}', "is not a PTX register"),
    ],
)
def test_the_record_verifier_refuses(record: str, message: str):
    with pytest.raises(VerifyException, match=re.escape(message)):
        module_of(f"pik.record {record}")


def test_a_scope_row_carries_its_kind_and_instances():
    text = MODULE.format(body='  pik.scope 0 : i64 "tma" {kind = "event", instances = 4 : i64}')
    assert str(parse_module(text)) == text
    with pytest.raises(VerifyException, match=r"instances .* belong to events only"):
        module_of('pik.scope 0 : i64 "m" {kind = "mark", instances = 4 : i64}')
    with pytest.raises(VerifyException, match=r"pik\.scope kind must be one of"):
        module_of('pik.scope 0 : i64 "m" {kind = "value"}')


# --- markers and collect ----------------------------------------------------------------------


def test_a_marker_names_its_operands_for_llvm_to_replace():
    op = RecordOp("event_start", "tma", instances=4, index_reg="$1", predicate="$2")
    text = marker_text(op)
    assert text == (
        '// pik.marker "pik.record"() <{kind = "event_start", scope = "tma", instances = 4 : i64, '
        'index_reg = "$1", predicate = "$2"}> : () -> ()'
    )
    named = parse_marker(text.replace("$1", "%r12").replace("$2", "%r3"))
    assert named is not None and named.registers == {"predicate": "%r3", "index_reg": "%r12"}


def _ptx(*markers: RecordOp, replace: dict[str, str]) -> str:
    body = []
    for marker in markers:
        text = marker_text(marker)
        for operand, register in replace.items():
            text = text.replace(operand, register)
        body.append(f"\t// begin inline asm\n\t{text}\n\t// end inline asm")
    return ".visible .entry kern(\n\t.param .u64 kern_param_0\n)\n{\n" + "\n".join(body) + "\n\tret;\n}\n"


def test_collect_keeps_what_the_marker_says_and_the_registers_llvm_named():
    ptx = _ptx(
        RecordOp("event_start", "tma", instances=2, index_reg="$1", predicate="$2"),
        RecordOp("mark", "tile", value="$1", value_type="u32"),
        replace={"$1": "%r5", "$2": "%r6"},
    )
    assert str(collect_markers(ptx)) == MODULE.format(
        body='  pik.record "event_start" "tma" {site = 5 : i64, block = 0 : i64, instances = 2 : i64, '
        'index_reg = "%r5", predicate = "%r6"}\n'
        '  pik.record "mark" "tile" {site = 8 : i64, block = 0 : i64, value = "%r5", value_type = "u32"}'
    )


def test_collect_refuses_an_operand_llvm_did_not_name():
    ptx = _ptx(RecordOp("mark", "tile", predicate="$1"), replace={})
    with pytest.raises(
        ScopeError, match=re.escape("kernel 'kern', mark 'tile' at <kernel>:?: the marker's operands")
    ):
        collect_markers(ptx)


# --- ids and checks ---------------------------------------------------------------------------


def test_scopes_take_the_first_ids_and_every_name_its_kind():
    module = module_of(
        'pik.record "event_start" "tma" {instances = 2 : i64, line = 3 : i64}',
        'pik.record "mark" "tile" {line = 4 : i64}',
        'pik.record "begin" "load" {line = 5 : i64}',
        'pik.record "event_end" "tma" {instances = 2 : i64, line = 6 : i64}',
        'pik.record "end" "load" {line = 7 : i64}',
    )
    AssignScopeIds().apply(make_context(), module)
    module.verify()
    assert scope_table(module) == [
        {"id": 0, "name": "load", "line": 5},
        {"id": 1, "name": "tma", "line": 3, "kind": "event", "instances": 2},
        {"id": 2, "name": "tile", "line": 4, "kind": "mark"},
    ]
    ids = [op.assigned_id for op in module.walk() if isinstance(op, RecordOp)]
    assert ids == [1, 2, 0, 1, 0]


def checked(*lines: str):
    module = module_of(*lines)
    context = make_context()
    AssignScopeIds().apply(context, module)
    CheckScopes().apply(context, module)
    return module


def test_an_event_may_start_and_end_anywhere_and_is_never_paired():
    """An end before its start in program order (a consumer partition placed first), starts in
    two blocks, and a start and end in one block: all accepted, none paired as a scope."""
    module = checked(
        'pik.record "event_end" "e" {block = 1 : i64, site = 10 : i64}',
        'pik.record "event_start" "e" {block = 2 : i64, site = 20 : i64}',
        'pik.record "event_start" "e" {block = 3 : i64, site = 30 : i64}',
        'pik.record "event_end" "e" {block = 3 : i64, site = 31 : i64}',
    )
    assert find_pairs([op for op in module.walk() if isinstance(op, RecordOp)]) == {}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            ['"event_start" "e" {line = 3 : i64, file = "k.py"}'],
            "kernel 'kern', event 'e' at k.py:3: the event is started but never ended anywhere in the kernel. "
            "Fix: add pl.end_event",
        ),
        (
            ['"event_end" "e" {line = 4 : i64}'],
            "event 'e' at <kernel>:4: the event is ended but never started",
        ),
        (
            ['"begin" "x" {line = 2 : i64}', '"end" "x"', '"mark" "x" {line = 9 : i64}'],
            "mark 'x' at <kernel>:9: the name is used for a mark here and for a scope at <kernel>:2",
        ),
        (
            [
                '"event_start" "e" {instances = 2 : i64, line = 1 : i64}',
                '"event_end" "e" {instances = 4 : i64, line = 5 : i64}',
            ],
            "event 'e' at <kernel>:5: the event has 4 instances here and 2 at <kernel>:1",
        ),
    ],
)
def test_what_is_provably_wrong_with_events_is_refused(lines: list[str], message: str):
    with pytest.raises(ScopeError, match=re.escape(message)):
        checked(*(f"pik.record {line}" for line in lines))


# --- convert-pik-to-pikgpu --------------------------------------------------------------------

PIK = [
    'pik.scope 0 : i64 "s"',
    'pik.scope 1 : i64 "e" {kind = "event", instances = 4 : i64}',
    'pik.scope 2 : i64 "m" {kind = "mark"}',
    'pik.record "begin" "s" {site = 10 : i64, block = 1 : i64, scope_id = 0 : i64, predicate = "%r1"}',
    'pik.record "event_start" "e" {site = 11 : i64, block = 1 : i64, scope_id = 1 : i64, instances = 4 : i64, index_reg = "%r2"}',
    'pik.record "event_end" "e" {site = 12 : i64, block = 1 : i64, scope_id = 1 : i64, instances = 4 : i64, index = 3 : i64}',
    'pik.record "mark" "m" {site = 13 : i64, block = 1 : i64, scope_id = 2 : i64, value = "%r3", value_type = "f32"}',
    'pik.record "mark" "m" {site = 14 : i64, block = 1 : i64, scope_id = 2 : i64}',
    'pik.record "end" "s" {site = 15 : i64, block = 1 : i64, scope_id = 0 : i64, predicate = "%r1"}',
]


def _setup(layout: BufferLayout) -> str:
    extra = f"aggregate_scopes = {layout.aggregate_scopes} : i64, " if layout.aggregate else ""
    return (
        f'pikgpu.segment_setup {{granularity = "warp", units = 4 : i64, capacity = {layout.capacity} : i64, '
        f"cta_bytes = {layout.cta_bytes} : i64, layout_version = {V2} : i64{', ' + extra[:-2] if extra else ''}}}"
    )


def test_each_record_beyond_plain_scopes_becomes_a_single_entry():
    """The predicated scope's begin and end share a block but do not pair: a false predicate
    could skip one and not the other."""
    module = module_of(*PIK)
    ConvertPikToPikGPU(capacity=64, layout_version=V2).apply(make_context(), module)
    module.verify()
    tag = {
        "begin": make_tag(0, False),
        "end": make_tag(0, True),
        "start": make_tag(1, False, RecordKind.EVENT),
        "stop": make_tag(1, True, RecordKind.EVENT, index=3),
        "value": make_tag(2, False, RecordKind.VALUE),
        "mark": make_tag(2, False, RecordKind.MARK),
    }
    body = "\n".join(f"  {line}" for line in PIK[:3])
    assert str(module) == MODULE.format(
        body=f"""\
  {_setup(BufferLayout(units=4, capacity=64, version=V2))}
{body}
  %0 = pikgpu.register "%r1" {{site = 10 : i64}} : i32
  pikgpu.guard %0 {{site = 10 : i64}}
  %1 = pikgpu.read_clock {{site = 10 : i64}} : i32
  pikgpu.store_record %1 tag {tag["begin"]} : i64 {{site = 10 : i64}}
  %2 = pikgpu.read_clock {{site = 11 : i64}} : i32
  %3 = pikgpu.register "%r2" {{site = 11 : i64}} : i32
  pikgpu.store_event %2 index %3 tag {tag["start"]} : i64 {{site = 11 : i64}}
  %4 = pikgpu.read_clock {{site = 12 : i64}} : i32
  pikgpu.store_record %4 tag {tag["stop"]} : i64 {{site = 12 : i64}}
  %5 = pikgpu.read_clock {{site = 13 : i64}} : i32
  %6 = pikgpu.register "%r3" {{site = 13 : i64}} : i32
  pikgpu.store_value %5 value %6 tag {tag["value"]} : i64 type "f32" {{site = 13 : i64}}
  %7 = pikgpu.read_clock {{site = 14 : i64}} : i32
  pikgpu.store_record %7 tag {tag["mark"]} : i64 {{site = 14 : i64}}
  %8 = pikgpu.register "%r1" {{site = 15 : i64}} : i32
  pikgpu.guard %8 {{site = 15 : i64}}
  %9 = pikgpu.read_clock {{site = 15 : i64}} : i32
  pikgpu.store_record %9 tag {tag["end"]} : i64 {{site = 15 : i64}}
  pikgpu.finalize"""
    )
    assert str(parse_module(str(module))) == str(module)


def test_aggregate_mode_guards_scopes_and_drops_events_and_marks_with_a_warning():
    module = module_of(*PIK)
    with pytest.warns(UserWarning) as caught:
        ConvertPikToPikGPU(capacity=0, aggregate_scopes=3).apply(make_context(), module)
    dropped = [re.search(r"keeps statistics of scopes only; the (.*) at", str(w.message)) for w in caught]
    assert [m.group(1) if m else None for m in dropped] == ["event 'e'", "event 'e'", "mark 'm'", "mark 'm'"]
    module.verify()
    text = str(module)
    assert "store_" not in text and "pikgpu.register" in text
    assert re.findall(r"pikgpu\.(guard|aggregate_begin|aggregate_end)", text) == [
        "guard",
        "aggregate_begin",
        "guard",
        "aggregate_end",
    ]


# --- the pikgpu ops and their PTX -------------------------------------------------------------

_CLOCK = '%0 = pikgpu.read_clock {site = 5 : i64} : i32\n  %1 = pikgpu.register "%r4" {site = 5 : i64} : i32'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('%0 = pikgpu.register "r4" : i32', "'r4' is not a PTX register"),
        (
            f"{_CLOCK}\n  pikgpu.guard %0 {{site = 5 : i64}}",
            "its predicate must be the result of a pikgpu.register",
        ),
        (
            f"{_CLOCK}\n  pikgpu.store_event %0 index %1 tag {make_tag(1, False)}",
            "must be an unpaired EVENT record's",
        ),
        (
            f"{_CLOCK}\n  pikgpu.store_event %0 index %1 tag {make_tag(1, False, RecordKind.EVENT, index=2)}",
            "has index bits; the index operand sets them",
        ),
        (
            f"{_CLOCK}\n  pikgpu.store_event %1 index %1 tag {make_tag(1, False, RecordKind.EVENT)}",
            "its clock must be",
        ),
        (
            f'{_CLOCK}\n  pikgpu.store_value %0 value %1 tag {make_tag(1, False, RecordKind.MARK)} type "i32"',
            "must be an unpaired VALUE record's",
        ),
        (
            f'{_CLOCK}\n  pikgpu.store_value %0 value %1 tag {make_tag(1, False, RecordKind.VALUE)} type "i64"',
            "type must be one of ['i32', 'u32', 'f32']",
        ),
    ],
)
def test_the_operand_ops_verifier_refuses(body: str, message: str):
    with pytest.raises(VerifyException, match=re.escape(message)):
        parse_module(f"builtin.module {{\n  {body}\n}}")


def _plan(body: str, capacity: int = 8) -> dict[int, list[str]]:
    layout = BufferLayout(units=4, capacity=capacity, version=V2)
    module = parse_module(f"builtin.module {{\n  {_setup(layout)}\n  {body}\n  pikgpu.finalize\n}}")
    return {
        site: [line.strip() for line in lines] for site, lines in plan_ptx(module, "k_param_0").sites.items()
    }


def test_an_event_index_register_goes_into_the_tags_index_bits():
    start = make_tag(1, False, RecordKind.EVENT)
    end = make_tag(1, True, RecordKind.EVENT)
    sites = _plan(
        f"{_CLOCK}\n  pikgpu.store_event %0 index %1 tag {start} {{site = 5 : i64}}\n"
        f'  %2 = pikgpu.read_clock {{site = 9 : i64}} : i32\n  %3 = pikgpu.register "%r4" {{site = 9 : i64}} : i32\n'
        f"  pikgpu.store_event %2 index %3 tag {end} {{site = 9 : i64}}"
    )
    tag = [
        "shl.b32 \t%pik_ev_tag, %r4, 16;",
        f"and.b32 \t%pik_ev_tag, %pik_ev_tag, {TAG_INDEX_MASK << TAG_INDEX_SHIFT};",
    ]
    slot = ["and.b32 \t%pik_t, %pik_n, 7;", "mad.wide.u32 \t%pik_a, %pik_t, 16, %pik_rec;"]
    store = [
        "@%pik_w st.global.L2::cache_hint.v2.b32 \t[%pik_a], {%pik_ev_tag, %pik_c}, %pik_pol;",
        "add.s32 \t%pik_n, %pik_n, 1;",
        "add.s32 \t%pik_tally, %pik_tally, 1;",
    ]
    clock = "mov.u32 \t%pik_c, %clock;"
    # A start reads the clock last, an end first: the record's own work stays outside.
    assert sites[5] == [
        "// pik event record",
        *tag,
        f"or.b32 \t%pik_ev_tag, %pik_ev_tag, {start};",
        *slot,
        clock,
        *store,
    ]
    assert sites[9] == [
        "// pik event record",
        clock,
        *tag,
        f"or.b32 \t%pik_ev_tag, %pik_ev_tag, {end};",
        *slot,
        *store,
    ]


def test_a_value_is_one_sixteen_byte_entry_and_a_guard_branches_around_its_site():
    tag = make_tag(2, False, RecordKind.VALUE)
    sites = _plan(
        f'{_CLOCK}\n  %2 = pikgpu.register "%r8" {{site = 5 : i64}} : i32\n  pikgpu.guard %2 {{site = 5 : i64}}\n'
        f'  pikgpu.store_value %0 value %1 tag {tag} type "u32" {{site = 5 : i64}}'
    )
    assert sites[5] == [
        "// pik guard: nothing is recorded here where the predicate is 0",
        "setp.ne.b32 \t%pik_ev_on, %r8, 0;",
        "@!%pik_ev_on bra \t$pik_skip_5;",
        "// pik value record",
        "and.b32 \t%pik_t, %pik_n, 7;",
        "mad.wide.u32 \t%pik_a, %pik_t, 16, %pik_rec;",
        "mov.u32 \t%pik_c, %clock;",
        f"@%pik_w st.global.L2::cache_hint.v4.b32 \t[%pik_a], {{{tag}, %pik_c, %r4, {int(ValueType.UINT32)}}}, %pik_pol;",
        "add.s32 \t%pik_n, %pik_n, 1;",
        "add.s32 \t%pik_tally, %pik_tally, 1;",
        "$pik_skip_5:",
    ]


def test_a_guard_needs_a_record_at_its_site():
    with pytest.raises(ValueError, match=r"pikgpu\.guard of site 7, where nothing is recorded"):
        _plan('%0 = pikgpu.register "%r8" : i32\n  pikgpu.guard %0 {site = 7 : i64}')
