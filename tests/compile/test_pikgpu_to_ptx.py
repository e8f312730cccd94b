"""``convert-pikgpu-to-ptx``: a ``pikgpu`` module and the kernel's PTX in, instrumented PTX out.

The output must also assemble: every test that splices hands the result to Triton's ptxas.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proton_ik.dialect import parse_module
from proton_ik.dialect.markers import is_marker
from proton_ik.layout import (
    CTA_HEADER_BYTES,
    MAGIC,
    RECORD_BYTES,
    UNIT_HEADER_BYTES,
    VERSION,
    BufferLayout,
    Granularity,
    make_tag,
)
from proton_ik.lowering.pikgpu_to_ptx import EXIT_LABEL, PASS_NAME, lower_to_ptx, plan_ptx
from proton_ik.lowering.pipeline import instrument
from proton_ik.mode import Mode

INSTRUCTIONS_PER_RECORD = 5


def pikgpu_text(sites: list[int], granularity: str = "warp", units: int = 4, capacity: int = 1024) -> str:
    layout = BufferLayout(units=units, capacity=capacity)
    lines = [
        f'  pikgpu.segment_setup {{granularity = "{granularity}", units = {units} : i64, '
        f"capacity = {capacity} : i64, cta_bytes = {layout.cta_bytes} : i64, layout_version = {VERSION} : i64}}"
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


def record_blocks(ptx: str) -> list[list[str]]:
    """Each ``// pik record`` and the lines after it that belong to it."""
    lines = ptx.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() == "// pik record":
            block = []
            for following in lines[i + 1 :]:
                if "%pik_" not in following:
                    break
                block.append(following.strip())
            blocks.append(block)
    return blocks


@pytest.fixture
def lowered(kernel_ptx: str) -> str:
    assert marker_sites(kernel_ptx) == [28, 36]
    return lower_to_ptx(parse_module(pikgpu_text([28, 36])), kernel_ptx)


def test_pass_name():
    assert PASS_NAME == "convert-pikgpu-to-ptx"


def test_the_result_assembles(lowered: str, ptxas, tmp_path: Path):
    result = ptxas(lowered, tmp_path)
    assert result.returncode == 0, result.stderr


def test_the_prologue_reads_the_last_parameter(lowered: str):
    loads = [line.strip() for line in lowered.splitlines() if "%pik_scratch, [" in line]
    assert loads == ["ld.param.u64 \t%pik_scratch, [k_param_3];"]


def test_declarations_and_prologue_follow_the_kernels_own_registers(lowered: str):
    lines = lowered.splitlines()
    last_own = max(
        i for i, line in enumerate(lines) if line.strip().startswith(".reg") and "%pik" not in line
    )
    assert lines[last_own].strip() == ".reg .b64 \t%rd<2>;"
    assert lines[last_own + 1].startswith("\t.reg .b32 \t%pik_n, ")
    assert lines[last_own + 2].startswith("\t.reg .b64 \t%pik_scratch, ")
    assert lines[last_own + 3] == "\t.reg .pred \t%pik_w, %pik_h;"
    assert lines[last_own + 4].startswith("\t// pik prologue")


def test_the_prologue_writes_the_layouts_header(lowered: str):
    layout = BufferLayout(units=4, capacity=1024)
    assert f"\tmul.wide.u32 \t%pik_base, %pik_cta, {layout.cta_bytes};" in lowered
    assert f"\tmad.wide.u32 \t%pik_unit_base, %pik_unit, {layout.unit_bytes}, %pik_base;" in lowered
    assert f"\tadd.s64 \t%pik_unit_base, %pik_unit_base, {CTA_HEADER_BYTES};" in lowered
    assert f"\tadd.s64 \t%pik_rec, %pik_unit_base, {UNIT_HEADER_BYTES};" in lowered
    assert f"{{{MAGIC}, {VERSION}, %pik_cta, %pik_sm}}" in lowered
    assert "{%pik_nx, %pik_ny, %pik_nz, 4}" in lowered


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
    for start in starts:
        assert after[start - 1] == "\t// begin inline asm"
        assert after[start + 1 + INSTRUCTIONS_PER_RECORD] == "\t// end inline asm"
    begin_at, end_at = starts
    assert after[begin_at - 2] == "\t.loc\t1 12 4"
    assert after[end_at - 2] == "\t.loc\t1 14 8"
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


def test_a_record_costs_five_instructions(lowered: str):
    begin, end = record_blocks(lowered)
    assert len(begin) == len(end) == INSTRUCTIONS_PER_RECORD
    assert begin == [
        "and.b32 \t%pik_t, %pik_n, 1023;",
        "mad.wide.u32 \t%pik_a, %pik_t, 8, %pik_rec;",
        "mov.u32 \t%pik_c, %clock;",
        f"@%pik_w st.global.v2.b32 \t[%pik_a], {{{make_tag(0, False)}, %pik_c}};",
        "add.s32 \t%pik_n, %pik_n, 1;",
    ]
    # An end reads the clock first, so that its own arithmetic is outside the scope.
    assert end[0] == "mov.u32 \t%pik_c, %clock;"
    assert end[3] == f"@%pik_w st.global.v2.b32 \t[%pik_a], {{{make_tag(0, True)}, %pik_c}};"


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
    assert "{%pik_n, " + str(MAGIC) + "}" in lowered


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
        i for i, line in enumerate(lines) if "%pik_n, %pik_t" in line
    )
    result = ptxas(lowered, tmp_path)
    assert result.returncode == 0, result.stderr


def test_the_cta_stride_fits_its_32_bit_immediate(kernel_ptx: str):
    """``mul.wide.u32`` takes the CTA stride as a 32-bit immediate; ptxas silently truncates a
    larger one, and CTAs then overwrite each other. Such a layout must be refused."""
    mode = Mode(capacity=1 << 24)
    assert CTA_HEADER_BYTES + 32 * (UNIT_HEADER_BYTES + mode.capacity * RECORD_BYTES) >= 1 << 32
    with pytest.raises(ValueError):
        instrument(kernel_ptx, mode, num_warps=32)
