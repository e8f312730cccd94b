"""``convert-pikgpu-to-ptx``: a ``pikgpu`` module and the kernel's PTX in, instrumented PTX out.

The output must also assemble: every test that splices hands the result to Triton's ptxas.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proton_ik.contract.layout import (
    CTA_HEADER_BYTES,
    ENTRY_BYTES,
    MAGIC,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    BufferLayout,
    Granularity,
    field_offset,
)
from proton_ik.contract.tags import make_tag
from proton_ik.dialect import make_context, parse_module
from proton_ik.dialect.markers import is_marker, marker_text
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering import placement
from proton_ik.lowering.assign_scope_ids import AssignScopeIds
from proton_ik.lowering.collect import collect_markers
from proton_ik.lowering.instrument import instrument
from proton_ik.lowering.pik_to_pikgpu import ConvertPikToPikGPU
from proton_ik.lowering.pikgpu_to_ptx import EXIT_LABEL, PASS_NAME, lower_to_ptx, plan_ptx
from proton_ik.mode import DEFAULT_RING_CAPACITY, Mode

# A single record: slot (and, mad), clock, store, count the entry, count the single.
INSTRUCTIONS_PER_SINGLE = 6
# A pair: the begin only reads the clock; the end reads it, finds the slot, stores, counts.
INSTRUCTIONS_PER_PAIR_BEGIN = 1
INSTRUCTIONS_PER_PAIR_END = 5
ENTRIES_OFFSET = field_offset(UNIT_HEADER_DTYPE, "entries")

# These tests read layout version 2's PTX, line by line; version 3's is read in
# test_compile_kernels.py and run by test_ptx_stores.py's interpreter.
V2 = 2


def pikgpu_text(sites: list[int], granularity: str = "warp", units: int = 4, capacity: int = 1024) -> str:
    layout = BufferLayout(units=units, capacity=capacity, version=V2)
    lines = [
        f'  pikgpu.segment_setup {{granularity = "{granularity}", units = {units} : i64, '
        f"capacity = {capacity} : i64, cta_bytes = {layout.cta_bytes} : i64, layout_version = {V2} : i64}}"
    ]
    for index, site in enumerate(sites):
        lines.append(f"  %{index} = pikgpu.read_clock {{site = {site} : i64}} : i32")
        tag = make_tag(0, is_end=index % 2 == 1)
        lines.append(f"  pikgpu.store_record %{index} tag {tag} {{site = {site} : i64}}")
    lines.append("  pikgpu.finalize")
    return 'builtin.module attributes {pik.kernel = "k"} {\n' + "\n".join(lines) + "\n}"


def marker_sites(ptx: str) -> list[int]:
    return [i for i, line in enumerate(ptx.splitlines()) if is_marker(line)]


def lower(ptx: str, **layout) -> str:
    return lower_to_ptx(parse_module(pikgpu_text(marker_sites(ptx), **layout)), ptx)


def site_blocks(ptx: str) -> list[tuple[str, list[str]]]:
    """Each ``// pik record``, ``// pik pair begin`` or ``// pik pair end`` comment, without its
    ``// pik ``, and the instructions after it that belong to it, in PTX order."""
    lines = ptx.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        match = re.fullmatch(r"\s*// pik (record|pair begin|pair end)", line)
        if match:
            block = []
            for following in lines[i + 1 :]:
                if "%pik_" not in following:
                    break
                block.append(following.strip())
            blocks.append((match.group(1), block))
    return blocks


def record_blocks(ptx: str) -> list[list[str]]:
    """The instructions of each single record."""
    return [block for kind, block in site_blocks(ptx) if kind == "record"]


def single(scope: int, is_end: bool, capacity: int) -> list[str]:
    slot = [f"and.b32 \t%pik_t, %pik_n, {capacity - 1};", "mad.wide.u32 \t%pik_a, %pik_t, 16, %pik_rec;"]
    clock = ["mov.u32 \t%pik_c, %clock;"]
    return [
        *(clock + slot if is_end else slot + clock),
        f"@%pik_w st.global.L2::cache_hint.v2.b32 \t[%pik_a], {{{make_tag(scope, is_end)}, %pik_c}}, %pik_pol;",
        "add.s32 \t%pik_n, %pik_n, 1;",
        "add.s32 \t%pik_tally, %pik_tally, 1;",
    ]


def pair_begin(register: int) -> list[str]:
    return [f"mov.u32 \t%pik_b{register}, %clock;"]


def pair_end(scope: int, register: int, capacity: int) -> list[str]:
    tags = make_tag(scope, False, paired=True), make_tag(scope, True)
    return [
        "mov.u32 \t%pik_c, %clock;",
        f"and.b32 \t%pik_t, %pik_n, {capacity - 1};",
        "mad.wide.u32 \t%pik_a, %pik_t, 16, %pik_rec;",
        f"@%pik_w st.global.L2::cache_hint.v4.b32 \t[%pik_a], {{{tags[0]}, %pik_b{register}, {tags[1]}, %pik_c}}, %pik_pol;",
        "add.s32 \t%pik_n, %pik_n, 1;",
    ]


@pytest.fixture
def lowered(kernel_ptx: str) -> str:
    assert marker_sites(kernel_ptx) == [28, 36]
    return lower_to_ptx(parse_module(pikgpu_text([28, 36])), kernel_ptx)


def test_pass_name():
    assert PASS_NAME == "convert-pikgpu-to-ptx"


def test_the_result_assembles(lowered: str, ptxas, tmp_path: Path):
    result = ptxas(lowered, tmp_path)
    assert result.returncode == 0, result.stderr


def test_the_prologue_and_the_epilogue_read_the_last_parameter(lowered: str):
    loads = [line.strip() for line in lowered.splitlines() if "%pik_scratch, [" in line]
    assert loads == ["ld.param.u64 \t%pik_scratch, [k_param_3];"] * 2


def test_declarations_and_prologue_follow_the_kernels_own_registers(lowered: str):
    lines = lowered.splitlines()
    last_own = max(
        i for i, line in enumerate(lines) if line.strip().startswith(".reg") and "%pik" not in line
    )
    assert lines[last_own].strip() == ".reg .b64 \t%rd<2>;"
    assert lines[last_own + 1].startswith("\t.reg .b32 \t%pik_n, ")
    assert lines[last_own + 2].startswith("\t.reg .b64 \t%pik_scratch, ")
    assert lines[last_own + 3] == "\t.reg .pred \t%pik_w, %pik_h;"
    # No pairs, so no begin-clock registers.
    assert lines[last_own + 4].startswith("\t// pik prologue")
    assert not re.search(r"%pik_b[<\d]", lowered)


def test_the_frame_writes_the_layouts_headers(lowered: str):
    layout = BufferLayout(units=4, capacity=1024, version=V2)
    assert f"\tmul.wide.u32 \t%pik_base, %pik_cta, {layout.cta_bytes};" in lowered
    assert f"\tmad.wide.u32 \t%pik_rec, %pik_unit, {layout.unit_bytes}, %pik_base;" in lowered
    assert f"\tadd.s64 \t%pik_rec, %pik_rec, {CTA_HEADER_BYTES + UNIT_HEADER_BYTES};" in lowered
    assert f"\tsub.s64 \t%pik_unit_base, %pik_rec, {UNIT_HEADER_BYTES};" in lowered
    assert f"{{{MAGIC}, {V2}, %pik_cta, %pik_sm}}" in lowered
    assert "{%pik_nx, %pik_ny, %pik_nz, 4}" in lowered


def test_the_counts_start_at_zero_and_no_header_is_written_before_the_exit(lowered: str):
    """A reused pool chunk must not show an earlier launch's counts or end marker; the prologue
    stores nothing, so the pool clears what a drained launch wrote (``runtime.drain``)."""
    stripped = [line.strip() for line in lowered.splitlines()]
    assert stripped.count("mov.u32 \t%pik_n, 0;") == stripped.count("mov.u32 \t%pik_tally, 0;") == 1
    first_record = min(i for i, line in enumerate(stripped) if line.startswith("// pik record"))
    assert not [line for line in stripped[:first_record] if " st." in line]


def test_records_sit_at_the_marker_sites(kernel_ptx: str, lowered: str):
    assert not any(is_marker(line) for line in lowered.splitlines())
    before = kernel_ptx.splitlines()
    after = lowered.splitlines()
    for site in (28, 36):
        # The record replaces the marker between the same two neighbours.
        context_before, context_after = before[site - 1], before[site + 1]
        assert (context_before, context_after) == ("\t// begin inline asm", "\t// end inline asm")
    starts = [i for i, line in enumerate(after) if line == "\t// pik record"]
    assert len(starts) == 2
    begin_at, end_at = starts
    # The end replaces its marker; the begin goes above the pure arithmetic before its marker
    # (lowering.placement): here the ld.param, up to the function's first label.
    assert after[end_at - 1] == "\t// begin inline asm"
    assert after[end_at + 1 + INSTRUCTIONS_PER_SINGLE] == "\t// end inline asm"
    assert after[end_at - 2] == "\t.loc\t1 14 8"
    assert after[begin_at - 1] == "$L__func_begin0:"
    assert after.index("\tld.param.b32 \t%r1, [k_param_1];") > begin_at + INSTRUCTIONS_PER_SINGLE
    assert after.index("\t@%p1 bra \t$pik_exit;") < end_at


def test_the_kernels_own_lines_are_kept_in_order(kernel_ptx: str, lowered: str):
    """The splice adds lines, drops the markers and turns each ``ret`` into a branch; nothing else."""
    own = [
        line.replace("ret;", f"bra \t{EXIT_LABEL};")
        for line in kernel_ptx.splitlines()
        if not is_marker(line)
    ]
    func_end = own.index("$L__func_end0:")
    expected = [*own[:func_end], f"{EXIT_LABEL}:", "\tret;", *own[func_end:]]
    kept = [line for line in lowered.splitlines() if not re.search(r"%pik_|// pik ", line)]
    assert kept == expected


def test_a_single_record_costs_six_instructions(lowered: str):
    """The fixture's begin and end lie on both sides of a ``@%p1 ret``: two single records."""
    begin, end = record_blocks(lowered)
    assert len(begin) == len(end) == INSTRUCTIONS_PER_SINGLE
    assert ENTRY_BYTES == 16
    assert begin == [
        "and.b32 \t%pik_t, %pik_n, 1023;",
        "mad.wide.u32 \t%pik_a, %pik_t, 16, %pik_rec;",
        "mov.u32 \t%pik_c, %clock;",
        f"@%pik_w st.global.L2::cache_hint.v2.b32 \t[%pik_a], {{{make_tag(0, False)}, %pik_c}}, %pik_pol;",
        "add.s32 \t%pik_n, %pik_n, 1;",
        "add.s32 \t%pik_tally, %pik_tally, 1;",
    ]
    # An end reads the clock first, so that its own arithmetic is outside the scope.
    assert end == [
        "mov.u32 \t%pik_c, %clock;",
        "and.b32 \t%pik_t, %pik_n, 1023;",
        "mad.wide.u32 \t%pik_a, %pik_t, 16, %pik_rec;",
        f"@%pik_w st.global.L2::cache_hint.v2.b32 \t[%pik_a], {{{make_tag(0, True)}, %pik_c}}, %pik_pol;",
        "add.s32 \t%pik_n, %pik_n, 1;",
        "add.s32 \t%pik_tally, %pik_tally, 1;",
    ]
    assert [begin, end] == [single(0, False, 1024), single(0, True, 1024)]


def test_every_ret_branches_to_the_one_epilogue(kernel_ptx: str, lowered: str):
    rets_before = [line for line in kernel_ptx.splitlines() if re.search(r"\bret\b", line)]
    assert rets_before == ["\t@%p1 ret;", "\tret;"]
    lines = lowered.splitlines()
    assert [line for line in lines if "bra" in line] == [
        f"\t@%p1 bra \t{EXIT_LABEL};",
        f"\tbra \t{EXIT_LABEL};",
    ]
    assert lines.count(f"{EXIT_LABEL}:") == 1
    assert sum("// pik epilogue" in line for line in lines) == 1
    rets = [i for i, line in enumerate(lines) if re.search(r"\bret\b", line)]
    exit_at = lines.index(f"{EXIT_LABEL}:")
    assert len(rets) == 1 and exit_at < rets[0]
    assert lines[rets[0] + 1] == "$L__func_end0:"


def test_the_epilogue_writes_the_counts_at_entries(lowered: str):
    lines = lowered.splitlines()
    exit_at = lines.index(f"{EXIT_LABEL}:")
    end_clock = field_offset(UNIT_HEADER_DTYPE, "end_clock")
    epilogue = [line.strip() for line in lines[exit_at + 2 :]]
    assert epilogue[:2] == ["mov.u64 \t%pik_clk64, %clock64;", "mov.u64 \t%pik_gtime, %globaltimer;"]
    unit_stores = [line for line in epilogue if "[%pik_unit_base+" in line]
    assert unit_stores == [
        "@%pik_w st.global.v2.u64 \t[%pik_unit_base+0], {%pik_start_clock64, %pik_start_time64};",
        f"@%pik_w st.global.v2.u64 \t[%pik_unit_base+{end_clock}], {{%pik_clk64, %pik_gtime}};",
        f"@%pik_w st.global.v4.b32 \t[%pik_unit_base+{ENTRIES_OFFSET}], {{%pik_n, {MAGIC}, %pik_tally, 0}};",
    ]
    assert epilogue[epilogue.index("ret;") - 1].startswith("@%pik_h st.global.v4.b32 \t[%pik_base+32]")
    assert lowered.count(f"[%pik_unit_base+{ENTRIES_OFFSET}]") == 1


def test_uniform_returns_are_redirected_too(kernel_ptx: str, ptxas, tmp_path: Path):
    ptx = kernel_ptx.replace("\t@%p1 ret;", "\t@!%p1 ret.uni;")
    lowered = lower(ptx)
    assert f"\t@!%p1 bra \t{EXIT_LABEL};" in lowered
    assert ptxas(lowered, tmp_path).returncode == 0


@pytest.mark.parametrize(
    ("granularity", "units", "unit_lines"),
    [
        (Granularity.WARP, 4, ["mov.u32 \t%pik_unit, %pik_warp;", "setp.eq.u32 \t%pik_w, %pik_lane, 0;"]),
        (
            Granularity.WARPGROUP,
            1,
            [
                "shr.u32 \t%pik_unit, %pik_warp, 2;",
                "and.b32 \t%pik_t, %pik_tid, 127;",
                "setp.eq.u32 \t%pik_w, %pik_t, 0;",
            ],
        ),
        (Granularity.CTA, 1, ["mov.u32 \t%pik_unit, 0;", "setp.eq.u32 \t%pik_w, %pik_tid, 0;"]),
    ],
)
def test_each_granularity_picks_its_unit_and_writer(
    kernel_ptx: str, ptxas, tmp_path: Path, granularity, units, unit_lines
):
    lowered = lower(kernel_ptx, granularity=granularity.value, units=units, capacity=64)
    stripped = [line.strip() for line in lowered.splitlines()]
    at = stripped.index(unit_lines[0])
    assert stripped[at : at + len(unit_lines)] == unit_lines
    assert all("and.b32 \t%pik_t, %pik_n, 63;" in block for block in record_blocks(lowered))
    assert ptxas(lowered, tmp_path).returncode == 0


def test_the_plan_needs_a_frame():
    module = parse_module("builtin.module {\n  %0 = pikgpu.read_clock {site = 3 : i64} : i32\n}")
    with pytest.raises(ValueError, match=re.escape("needs one pikgpu.segment_setup and a pikgpu.finalize")):
        plan_ptx(module, "k_param_3")


def test_a_store_needs_a_site():
    text = pikgpu_text([5]).replace(" {site = 5 : i64}\n  pikgpu.finalize", "\n  pikgpu.finalize")
    with pytest.raises(ValueError, match=re.escape("pikgpu.store_record without a site")):
        plan_ptx(parse_module(text), "k_param_3")


def test_a_site_outside_the_entry_is_refused(kernel_ptx: str):
    with pytest.raises(ValueError, match="outside the kernel's entry function"):
        lower_to_ptx(parse_module(pikgpu_text([3, 36])), kernel_ptx)


def test_a_kernel_without_parameters_is_refused():
    ptx = ".visible .entry k(\n)\n{\n\tret;\n}\n"
    with pytest.raises(ValueError, match="the kernel has no parameters"):
        lower_to_ptx(parse_module(pikgpu_text([])), ptx)


# Triton's inline asm (fp8 conversions, mbarrier waits, ...) opens its own `{ }` block, declares
# registers in it, and LLVM prints the closing brace at column 0.
INLINE_ASM_BLOCK = """\
	// begin inline asm
	{
.reg .b32 a;
mov.b32 a, %r1;
add.s32 %r2, a, 1;
}
	// end inline asm
	st.global.b32 	[%rd1], %r2;"""


def test_inline_asm_blocks_with_their_own_registers(kernel_ptx: str, ptxas, tmp_path: Path):
    ptx = kernel_ptx.replace("\tst.global.b32 \t[%rd1], %r1;", INLINE_ASM_BLOCK)
    assert ptxas(ptx, tmp_path).returncode == 0
    lowered = lower(ptx)
    lines = lowered.splitlines()
    assert lines.index("\t.reg .b64 \t%rd<2>;") + 1 == next(
        i for i, line in enumerate(lines) if line.startswith("\t.reg .b32 \t%pik_n, ")
    )
    result = ptxas(lowered, tmp_path)
    assert result.returncode == 0, result.stderr


def test_the_cta_stride_fits_its_32_bit_immediate(kernel_ptx: str):
    """``mul.wide.u32`` takes the CTA stride as a 32-bit immediate; ptxas silently truncates a
    larger one, and CTAs then overwrite each other. Such a layout must be refused."""
    mode = Mode(capacity=1 << 24, layout=V2)
    assert CTA_HEADER_BYTES + 32 * (UNIT_HEADER_BYTES + mode.capacity * ENTRY_BYTES) >= 1 << 32
    with pytest.raises(ValueError):
        instrument(kernel_ptx, mode, num_warps=32)


# --- pairs -----------------------------------------------------------------------------------


def _marker(kind: str, scope: str) -> str:
    return "\t// begin inline asm\n\t" + marker_text(RecordOp(kind, scope)) + "\n\t// end inline asm"


# Scopes "outer" (0) and "inner" (1) nest in one straight-line block; "twice" (2) runs twice in
# a row there; "if" (3) ends after a forward branch's target; "loop" (4) begins before a loop's
# header and ends after its back edge; "iteration" (5) is the loop's body.
PAIRS_PTX = f"""\
.version 8.7
.target sm_90a
.address_size 64

.visible .entry k(
	.param .u64 .ptr .global .align 1 k_param_0,
	.param .u32 k_param_1,
	.param .u64 .ptr .global .align 1 k_param_2
)
.reqntid 128
{{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<2>;

	ld.param.b32 	%r1, [k_param_1];
	ld.param.b64 	%rd1, [k_param_0];
{_marker("begin", "outer")}
{_marker("begin", "inner")}
	st.global.b32 	[%rd1], %r1;
{_marker("end", "inner")}
	add.s32 	%r2, %r1, 1;
{_marker("end", "outer")}
{_marker("begin", "twice")}
	st.global.b32 	[%rd1+4], %r2;
{_marker("end", "twice")}
{_marker("begin", "twice")}
	st.global.b32 	[%rd1+8], %r2;
{_marker("end", "twice")}
{_marker("begin", "if")}
	setp.lt.s32 	%p1, %r1, 1;
	@%p1 bra 	$L__BB0_2;
	st.global.b32 	[%rd1+12], %r1;
$L__BB0_2:
{_marker("end", "if")}
	mov.b32 	%r3, 0;
{_marker("begin", "loop")}
$L__BB0_3:
{_marker("begin", "iteration")}
	add.s32 	%r3, %r3, 1;
	setp.lt.s32 	%p2, %r3, %r1;
{_marker("end", "iteration")}
	@%p2 bra 	$L__BB0_3;
{_marker("end", "loop")}
	ret;
$L__func_end0:
}}
"""

# "iteration" is recorded inside a loop, and there is no TTIR to count its trips: with
# capacity=auto the kernel gets the default ring.
CAPACITY = DEFAULT_RING_CAPACITY
PAIRS_SITES = [
    ("pair begin", pair_begin(1)),
    ("pair begin", pair_begin(0)),
    ("pair end", pair_end(1, 0, CAPACITY)),
    ("pair end", pair_end(0, 1, CAPACITY)),
    ("pair begin", pair_begin(2)),
    ("pair end", pair_end(2, 2, CAPACITY)),
    ("pair begin", pair_begin(3)),
    ("pair end", pair_end(2, 3, CAPACITY)),
    ("record", single(3, False, CAPACITY)),
    ("record", single(3, True, CAPACITY)),
    ("record", single(4, False, CAPACITY)),
    ("pair begin", pair_begin(4)),
    ("pair end", pair_end(5, 4, CAPACITY)),
    ("record", single(4, True, CAPACITY)),
]


@pytest.fixture
def paired() -> str:
    result = instrument(PAIRS_PTX, Mode(layout=V2), num_warps=4)
    assert result is not None
    assert (result.capacity.source, result.layout.capacity) == ("ring", CAPACITY)
    return result.ptx


def test_the_plain_pairs_kernel_assembles(ptxas, tmp_path: Path):
    result = ptxas(PAIRS_PTX, tmp_path)
    assert result.returncode == 0, result.stderr


def test_scopes_in_one_block_pair_and_scopes_across_control_flow_do_not(paired: str):
    """Nested pairs both pair, each with a begin-clock register of its own; the innermost end
    stores the latest begin (LIFO); across a branch target or a back edge: two single records."""
    assert site_blocks(paired) == PAIRS_SITES


def test_a_pair_costs_one_instruction_at_the_begin_and_five_at_the_end(paired: str):
    blocks = site_blocks(paired)
    assert {len(b) for kind, b in blocks if kind == "pair begin"} == {INSTRUCTIONS_PER_PAIR_BEGIN}
    assert {len(b) for kind, b in blocks if kind == "pair end"} == {INSTRUCTIONS_PER_PAIR_END}
    assert {len(b) for kind, b in blocks if kind == "record"} == {INSTRUCTIONS_PER_SINGLE}
    lines = paired.splitlines()
    for index, line in enumerate(lines):
        if re.fullmatch(r"\t// pik (record|pair begin|pair end)", line):
            # In its marker's inline asm, or (a begin) above the pure arithmetic before it.
            above = lines[index - 1]
            assert above == "\t// begin inline asm" or (
                line != "\t// pik pair end" and not placement.is_pure(above.split("//")[0])
            )
    # Every entry is counted once, at a single or at a pair's end; singles are counted again.
    singles = [b for kind, b in blocks if kind == "record"]
    pair_ends = [b for kind, b in blocks if kind == "pair end"]
    assert paired.count("add.s32 \t%pik_tally, %pik_tally, 1;") == len(singles) == 4
    assert paired.count("add.s32 \t%pik_n, %pik_n, 1;") == len(singles) + len(pair_ends) == 9


def test_each_pair_has_a_begin_clock_register(paired: str):
    lines = paired.splitlines()
    declaration = lines.index("\t.reg .b32 \t%pik_b<5>;")
    assert lines[declaration - 1] == "\t.reg .pred \t%pik_w, %pik_h;"
    assert lines[declaration + 1].startswith("\t// pik prologue")
    begins = [b[0] for kind, b in site_blocks(paired) if kind == "pair begin"]
    assert sorted(begins) == [f"mov.u32 \t%pik_b{k}, %clock;" for k in range(5)]


def test_the_paired_kernel_assembles(paired: str, ptxas, tmp_path: Path):
    result = ptxas(paired, tmp_path)
    assert result.returncode == 0, result.stderr


def test_the_paired_kernels_own_lines_are_kept_in_order(paired: str):
    own = [
        line.replace("ret;", f"bra \t{EXIT_LABEL};") for line in PAIRS_PTX.splitlines() if not is_marker(line)
    ]
    func_end = own.index("$L__func_end0:")
    expected = [*own[:func_end], f"{EXIT_LABEL}:", "\tret;", *own[func_end:]]
    assert [line for line in paired.splitlines() if not re.search(r"%pik_|// pik ", line)] == expected


def lower_without_pairs(ptx: str) -> str:
    module = collect_markers(ptx)
    AssignScopeIds().apply(make_context(), module)
    ConvertPikToPikGPU(pair_scopes=False).apply(make_context(), module)
    module.verify()
    return lower_to_ptx(module, ptx)


def test_pair_scopes_off_gives_only_single_records(ptxas, tmp_path: Path):
    lowered = lower_without_pairs(PAIRS_PTX)
    blocks = site_blocks(lowered)
    assert [kind for kind, _ in blocks] == ["record"] * 14
    tags = [re.search(r"\{(\d+), %pik_c\}", b[3]).group(1) for _, b in blocks]
    scopes = [0, 1, 1, 0, 2, 2, 2, 2, 3, 3, 4, 5, 5, 4]
    ends = [False, False, True, True, False, True, False, True, False, True, False, False, True, True]
    assert tags == [str(make_tag(s, e)) for s, e in zip(scopes, ends, strict=True)]
    assert not re.search(r"%pik_b[<\d]", lowered)
    assert ptxas(lowered, tmp_path).returncode == 0


def _pair_module(begin_site: str, end_site: str) -> str:
    layout = BufferLayout(units=4, capacity=CAPACITY, version=V2)
    tags = make_tag(0, False, paired=True), make_tag(0, True)
    return (
        "builtin.module {\n"
        f'  pikgpu.segment_setup {{granularity = "warp", units = 4 : i64, capacity = {CAPACITY} : i64, '
        f"cta_bytes = {layout.cta_bytes} : i64, layout_version = {V2} : i64}}\n"
        f"  %0 = pikgpu.read_clock{begin_site} : i32\n"
        f"  %1 = pikgpu.read_clock{end_site} : i32\n"
        f"  pikgpu.store_pair %0, %1 tags {tags[0]}, {tags[1]}{end_site}\n"
        "  pikgpu.finalize\n}"
    )


def test_a_pair_is_planned_at_its_two_sites():
    plan = plan_ptx(parse_module(_pair_module(" {site = 5 : i64}", " {site = 9 : i64}")), "k_param_3")
    assert plan.sites == {
        5: ["\t// pik pair begin", *(f"\t{i}" for i in pair_begin(0))],
        9: ["\t// pik pair end", *(f"\t{i}" for i in pair_end(0, 0, CAPACITY))],
    }
    assert plan.declarations[-1] == "\t.reg .b32 \t%pik_b<1>;"


@pytest.mark.parametrize(
    ("begin_site", "end_site", "message"),
    [
        ("", " {site = 9 : i64}", "pikgpu.read_clock without a site"),
        (" {site = 5 : i64}", "", "pikgpu.store_pair without a site"),
    ],
)
def test_a_pair_needs_its_sites(begin_site: str, end_site: str, message: str):
    with pytest.raises(ValueError, match=re.escape(message)):
        plan_ptx(parse_module(_pair_module(begin_site, end_site)), "k_param_3")
