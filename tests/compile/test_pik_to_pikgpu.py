"""``convert-pik-to-pikgpu``: ``pik`` text in, ``pikgpu`` text out."""

from __future__ import annotations

import pytest

from proton_ik.contract.layout import VERSION, BufferLayout
from proton_ik.contract.tags import TAG_PAIR_BIT, make_tag
from proton_ik.dialect import make_context, parse_module
from proton_ik.dialect.pik import RecordOp
from proton_ik.dialect.pikgpu import SegmentSetupOp, StorePairOp, StoreRecordOp
from proton_ik.lowering.assign_scope_ids import AssignScopeIds
from proton_ik.lowering.pik_to_pikgpu import ConvertPikToPikGPU, find_pairs
from proton_ik.mode import DEFAULT_RING_CAPACITY

# No ``block``: as if collected before blocks existed, so nothing may pair.
PIK = """\
builtin.module attributes {pik.kernel = "k"} {
  pik.scope 0 : i64 "load" {line = 12 : i64}
  pik.scope 1 : i64 "store" {line = 17 : i64}
  pik.record "begin" "load" {line = 12 : i64, site = 28 : i64, scope_id = 0 : i64}
  pik.record "end" "load" {line = 14 : i64, site = 36 : i64, scope_id = 0 : i64}
  pik.record "begin" "store" {line = 17 : i64, site = 40 : i64, scope_id = 1 : i64}
  pik.record "end" "store" {line = 19 : i64, site = 52 : i64, scope_id = 1 : i64}
}"""

# "load" begins and ends in block 1; "store" begins in block 1 and ends in block 2.
PIK_BLOCKS = """\
builtin.module attributes {pik.kernel = "k"} {
  pik.scope 0 : i64 "load" {line = 12 : i64}
  pik.scope 1 : i64 "store" {line = 17 : i64}
  pik.record "begin" "load" {line = 12 : i64, site = 28 : i64, block = 1 : i64, scope_id = 0 : i64}
  pik.record "end" "load" {line = 14 : i64, site = 36 : i64, block = 1 : i64, scope_id = 0 : i64}
  pik.record "begin" "store" {line = 17 : i64, site = 40 : i64, block = 1 : i64, scope_id = 1 : i64}
  pik.record "end" "store" {line = 19 : i64, site = 52 : i64, block = 2 : i64, scope_id = 1 : i64}
}"""

# The pass on its own, as a command-line pass would run it: the default ring, 4 warps.
DEFAULT_LAYOUT = BufferLayout(units=4, capacity=DEFAULT_RING_CAPACITY)


def setup_text(granularity: str, layout: BufferLayout) -> str:
    return (
        f'pikgpu.segment_setup {{granularity = "{granularity}", units = {layout.units} : i64, '
        f"capacity = {layout.capacity} : i64, cta_bytes = {layout.cta_bytes} : i64, "
        f"layout_version = {VERSION} : i64}}"
    )


def expected(granularity: str, layout: BufferLayout) -> str:
    return f"""\
builtin.module attributes {{pik.kernel = "k"}} {{
  {setup_text(granularity, layout)}
  pik.scope 0 : i64 "load" {{line = 12 : i64}}
  pik.scope 1 : i64 "store" {{line = 17 : i64}}
  %0 = pikgpu.read_clock {{site = 28 : i64}} : i32
  pikgpu.store_record %0 tag {make_tag(0, False)} : i64 {{site = 28 : i64}}
  %1 = pikgpu.read_clock {{site = 36 : i64}} : i32
  pikgpu.store_record %1 tag {make_tag(0, True)} : i64 {{site = 36 : i64}}
  %2 = pikgpu.read_clock {{site = 40 : i64}} : i32
  pikgpu.store_record %2 tag {make_tag(1, False)} : i64 {{site = 40 : i64}}
  %3 = pikgpu.read_clock {{site = 52 : i64}} : i32
  pikgpu.store_record %3 tag {make_tag(1, True)} : i64 {{site = 52 : i64}}
  pikgpu.finalize
}}"""


EXPECTED_BLOCKS = f"""\
builtin.module attributes {{pik.kernel = "k"}} {{
  {setup_text("warp", DEFAULT_LAYOUT)}
  pik.scope 0 : i64 "load" {{line = 12 : i64}}
  pik.scope 1 : i64 "store" {{line = 17 : i64}}
  %0 = pikgpu.read_clock {{site = 28 : i64}} : i32
  %1 = pikgpu.read_clock {{site = 36 : i64}} : i32
  pikgpu.store_pair %0, %1 tags {make_tag(0, False, paired=True)} : i64, {make_tag(0, True)} : i64 \
{{site = 36 : i64}}
  %2 = pikgpu.read_clock {{site = 40 : i64}} : i32
  pikgpu.store_record %2 tag {make_tag(1, False)} : i64 {{site = 40 : i64}}
  %3 = pikgpu.read_clock {{site = 52 : i64}} : i32
  pikgpu.store_record %3 tag {make_tag(1, True)} : i64 {{site = 52 : i64}}
  pikgpu.finalize
}}"""


def convert(text: str, **options) -> str:
    module = parse_module(text)
    ConvertPikToPikGPU(**options).apply(make_context(), module)
    module.verify()
    return str(module)


def test_pass_name_and_defaults():
    convert_pass = ConvertPikToPikGPU()
    assert convert_pass.name == "convert-pik-to-pikgpu"
    assert (convert_pass.granularity, convert_pass.capacity, convert_pass.num_warps) == ("warp", 512, 4)
    assert convert_pass.capacity == DEFAULT_RING_CAPACITY
    assert convert_pass.pair_scopes is True


def test_records_become_clock_reads_and_tagged_stores():
    out = convert(PIK)
    assert out == expected("warp", DEFAULT_LAYOUT)
    assert str(parse_module(out)) == out


def test_a_begin_and_its_end_in_one_block_become_one_store_pair():
    out = convert(PIK_BLOCKS)
    assert out == EXPECTED_BLOCKS
    assert str(parse_module(out)) == out


def test_pair_scopes_off_gives_only_single_records():
    out = convert(PIK_BLOCKS, pair_scopes=False)
    assert out == expected("warp", DEFAULT_LAYOUT)
    assert "store_pair" not in out


def test_tags_are_the_layouts():
    assert [make_tag(0, False), make_tag(0, True), make_tag(1, False), make_tag(1, True)] == [
        0,
        2147483648,
        1,
        2147483649,
    ]
    assert make_tag(1, False, paired=True) == 1 | 1 << TAG_PAIR_BIT == 134217729


@pytest.mark.parametrize(
    ("granularity", "num_warps", "capacity", "units"),
    [("warp", 8, 256, 8), ("warpgroup", 8, 64, 2), ("warpgroup", 4, 1024, 1), ("cta", 4, 16, 1)],
)
def test_segment_setup_carries_the_layout(context, granularity, num_warps, capacity, units):
    module = parse_module(PIK)
    ConvertPikToPikGPU(granularity, capacity, num_warps).apply(context, module)
    module.verify()
    layout = BufferLayout(units=units, capacity=capacity)
    assert str(module) == expected(granularity, layout)
    setup = module.body.block.first_op
    assert isinstance(setup, SegmentSetupOp)
    assert setup.layout == layout
    assert setup.cta_bytes.value.data == layout.cta_bytes
    assert setup.cta_bytes.value.data % 128 == 0


def test_an_empty_module_still_gets_a_frame():
    assert convert('builtin.module attributes {pik.kernel = "k"} {\n}') == (
        'builtin.module attributes {pik.kernel = "k"} {\n'
        f"  {setup_text('warp', DEFAULT_LAYOUT)}\n"
        "  pikgpu.finalize\n}"
    )


def test_records_need_scope_ids(context):
    module = parse_module('builtin.module {\n  pik.record "begin" "a" {site = 1 : i64, block = 0 : i64}\n}')
    with pytest.raises(ValueError, match="run pik-assign-scope-ids first"):
        ConvertPikToPikGPU().apply(context, module)


def test_warpgroups_need_a_multiple_of_four_warps(context):
    with pytest.raises(
        ValueError, match="granularity=warpgroup needs a multiple of 4 warps, the kernel has 2"
    ):
        ConvertPikToPikGPU("warpgroup", 1024, 2).apply(context, parse_module(PIK))


def test_every_store_reads_its_own_clock(context):
    module = parse_module(PIK_BLOCKS)
    ConvertPikToPikGPU().apply(context, module)
    stores = [op for op in module.walk() if isinstance(op, StoreRecordOp)]
    pairs = [op for op in module.walk() if isinstance(op, StorePairOp)]
    clocks = [s.clock for s in stores] + [c for p in pairs for c in (p.begin_clock, p.end_clock)]
    assert len({id(c.owner) for c in clocks}) == len(clocks) == 4


# --- find_pairs ------------------------------------------------------------------------------


def pik_module(*records: tuple[str, str, int | None]):
    """Records ``(kind, scope, block)`` at sites 0, 1, 2, ..., with scope ids assigned."""
    lines = []
    for site, (kind, scope, block) in enumerate(records):
        block_prop = "" if block is None else f", block = {block} : i64"
        lines.append(f'  pik.record "{kind}" "{scope}" {{site = {site} : i64{block_prop}}}')
    module = parse_module('builtin.module attributes {pik.kernel = "k"} {\n' + "\n".join(lines) + "\n}")
    AssignScopeIds().apply(make_context(), module)
    return module


def pik_of(*records: tuple[str, str, int | None]) -> list[RecordOp]:
    return [op for op in pik_module(*records).walk() if isinstance(op, RecordOp)]


def site_pairs(records: list[RecordOp]) -> list[tuple[int, int]]:
    """find_pairs as (begin site, end site), in the order of the ends."""
    pairs = find_pairs(records)
    assert all(not begin.is_end and end.is_end for begin, end in pairs.items())
    return sorted(((b.site.value.data, e.site.value.data) for b, e in pairs.items()), key=lambda p: p[1])


@pytest.mark.parametrize(
    ("records", "pairs"),
    [
        pytest.param([("begin", "a", 1), ("end", "a", 1)], [(0, 1)], id="one-block"),
        pytest.param([("begin", "a", 1), ("end", "a", 2)], [], id="across-blocks"),
        pytest.param(
            [("begin", "outer", 0), ("begin", "inner", 0), ("end", "inner", 0), ("end", "outer", 0)],
            [(1, 2), (0, 3)],
            id="nested",
        ),
        pytest.param(
            [("begin", "a", 0), ("begin", "b", 0), ("end", "a", 0), ("end", "b", 0)],
            [(0, 2), (1, 3)],
            id="interleaved",
        ),
        pytest.param(
            [("begin", "s", 3), ("end", "s", 3), ("begin", "s", 3), ("end", "s", 3)],
            [(0, 1), (2, 3)],
            id="same-name-twice",
        ),
        pytest.param(
            [("begin", "s", 3), ("begin", "s", 3), ("end", "s", 3), ("end", "s", 3)],
            [(1, 2), (0, 3)],
            id="same-name-nested-lifo",
        ),
        pytest.param(
            [("begin", "s", 3), ("begin", "s", 3), ("end", "s", 3)], [(1, 2)], id="two-begins-one-end"
        ),
        pytest.param(
            [("begin", "s", 1), ("begin", "s", 2), ("end", "s", 2), ("end", "s", 3)],
            [(1, 2)],
            id="only-the-begin-of-the-ends-block",
        ),
        pytest.param([("end", "a", 1), ("begin", "a", 1)], [], id="end-before-begin-across-a-back-edge"),
        pytest.param(
            [("begin", "loop", 1), ("end", "loop", 2), ("begin", "loop", 2), ("end", "loop", 3)],
            [],
            id="scope-across-each-back-edge",
        ),
        pytest.param([("begin", "a", None), ("end", "a", None)], [], id="no-block"),
    ],
)
def test_find_pairs(records, pairs):
    assert site_pairs(pik_of(*records)) == pairs


def test_find_pairs_needs_scope_ids():
    module = parse_module(
        "builtin.module {\n"
        '  pik.record "begin" "a" {site = 0 : i64, block = 0 : i64}\n'
        '  pik.record "end" "a" {site = 1 : i64, block = 0 : i64}\n}'
    )
    assert find_pairs([op for op in module.walk() if isinstance(op, RecordOp)]) == {}


def test_nested_pairs_of_one_name_store_the_latest_begin_first():
    module = pik_module(("begin", "s", 0), ("begin", "s", 0), ("end", "s", 0), ("end", "s", 0))
    ConvertPikToPikGPU().apply(make_context(), module)
    module.verify()

    def sites(pair: StorePairOp) -> tuple[int, int, int]:
        return (
            pair.begin_clock.owner.site.value.data,
            pair.end_clock.owner.site.value.data,
            pair.site.value.data,
        )

    assert [sites(op) for op in module.walk() if isinstance(op, StorePairOp)] == [(1, 2, 2), (0, 3, 3)]
    assert not any(isinstance(op, StoreRecordOp) for op in module.walk())
