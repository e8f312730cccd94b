"""Aggregate mode (``aggregate=on``) through the whole compile path, and what its PTX does.

Real Triton kernels compile to sm_90 cubins in aggregate mode: a scope in a loop whose trip
count is known only at run time, a scope that begins in a branch and ends after it, and nested
scopes. Their segment size is the scope count's, whatever the trip count. Then
``test_ptx_stores``'s interpreter runs the instrumentation for every thread of a grid, and the
statistics each unit's writer added must be what a model of the contract computes from the
clocks that writer read: an end adds ``end - begin`` of its scope's latest open begin, an end
with none open adds nothing, every reduction lands in its own unit's statistics, and the
statistics were zeroed by the unit's first warp before the first reduction. The bin the PTX
computes is ``layout.histogram_bin``'s for every bit length, and ptxas keeps each end one
branch around four plain reductions.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import triton
import triton.language as tl

import proton_ik.language as pl
from proton_ik.contract.layout import (
    AGGREGATE_STATS_BYTES,
    AGGREGATE_STATS_DTYPE,
    CTA_HEADER_DTYPE,
    HISTOGRAM_BINS,
    MAGIC,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    VERSION,
    BufferLayout,
    Granularity,
    histogram_bin,
)
from proton_ik.dialect import parse_module
from proton_ik.dialect.pikgpu import AggregateBeginOp, AggregateEndOp, FinalizeOp, SegmentSetupOp
from proton_ik.lowering.pikgpu_to_ptx import lower_to_ptx
from proton_ik.mode import Mode

sys.path.insert(0, str(Path(__file__).parent))
import test_ptx_stores as interpreter

AGGREGATE = Mode(aggregate=True)
U32 = 0xFFFFFFFF
RED_PER_END = 4  # sum, max, inverted min, histogram bin


@triton.jit
def runtime_loop_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.load(x + offs)
    for _ in range(n):
        with pl.scope("step"):
            acc = acc * 1.0001 + 0.25
    tl.store(out + offs, acc)


@triton.jit
def constant_loop_kernel(x, out, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.load(x + offs)
    for _ in range(ITERS):
        with pl.scope("step"):
            acc = acc * 1.0001 + 0.25
    tl.store(out + offs, acc)


@triton.jit
def branch_kernel(x, out, n, BLOCK: tl.constexpr):
    """The scope "half" begins in a branch and ends after it: odd programs end it with none open."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    if pid % 2 == 0:
        pl.enter_scope("half")
        v = v * 2
    pl.exit_scope("half")
    tl.store(out + offs, v, mask=offs < n)


@triton.jit
def nested_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("outer"):
        with pl.scope("inner"):
            v = tl.load(x + offs, mask=offs < n)
        v = v * 2 + 1
    tl.store(out + offs, v, mask=offs < n)


LOOP_SIGNATURE = {"x": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}
KERNELS = {
    "runtime_loop": (runtime_loop_kernel, LOOP_SIGNATURE, ["step"]),
    "branch": (branch_kernel, LOOP_SIGNATURE, ["half"]),
    "nested": (nested_kernel, LOOP_SIGNATURE, ["outer", "inner"]),
}


@pytest.fixture(scope="module", params=list(KERNELS))
def compiled(request, compile_kernel):
    fn, signature, scopes = KERNELS[request.param]
    return compile_kernel(fn, signature, {"BLOCK": 256}, mode=AGGREGATE, num_warps=4), scopes


def sites(ptx: str) -> list[tuple[str, int]]:
    """("begin" or "end", scope id) of each aggregate site, in the PTX's text order."""
    found = []
    for line in ptx.splitlines():
        if begin := re.search(r"mov\.u32 \t%pik_begin(\d+), %clock;", line):
            found.append(("begin", int(begin[1])))
        elif end := re.search(r"sub\.u32 \t%pik_d, %pik_c, %pik_begin(\d+);", line):
            found.append(("end", int(end[1])))
    return found


def expected_stats(sequence: list[tuple[str, int]], clocks: list[int], scopes: int) -> np.ndarray:
    """The contract, modelled: each end adds the time since its scope's latest open begin."""
    stats = np.zeros(scopes, AGGREGATE_STATS_DTYPE)
    open_begins: dict[int, int] = {}
    for (kind, scope), clock in zip(sequence, clocks, strict=True):
        if kind == "begin":
            open_begins[scope] = clock
        elif scope in open_begins:
            d = (clock - open_begins.pop(scope)) & U32
            stats["sum"][scope] += d
            stats["max"][scope] = max(int(stats["max"][scope]), d)
            stats["min_inverted"][scope] = max(int(stats["min_inverted"][scope]), ~d & U32)
            stats["bins"][scope, histogram_bin(d)] += 1
    return stats


def test_each_kernel_compiles_to_a_cubin_with_an_aggregate_layout(compiled):
    kernel, scopes = compiled
    assert kernel.asm["cubin"]
    profile = kernel.metadata.proton_ik
    layout = BufferLayout.from_dict(profile["layout"])
    assert layout == BufferLayout(units=4, capacity=0, aggregate_scopes=len(scopes))
    assert kernel.metadata.profile_scratch_size == layout.cta_bytes
    assert profile["capacity"]["source"] == "aggregate" and profile["capacity"]["entries"] == 0
    assert [scope["name"] for scope in profile["scopes"]] == scopes


def test_every_end_adds_with_four_reductions_and_nothing_counts_entries(compiled):
    kernel, scopes = compiled
    ptx = kernel.asm["ptx"]
    ends = [scope for kind, scope in sites(ptx) if kind == "end"]
    assert sorted(set(ends)) == list(range(len(scopes)))
    assert len(re.findall(r"\tred\.global\.", ptx)) == RED_PER_END * len(ends)
    assert not re.search(r"add\.s32 \t%pik_n,", ptx)  # no ring index: nothing grows per iteration
    assert "pik.marker" not in ptx


def opcodes(sass: str) -> list[str]:
    """The opcode of each SASS instruction, in order (``triton.tools.disasm``'s text)."""
    return [m[1] for m in re.finditer(r"^\S+\t(?:@!?U?P\w+ )?([\w.]+)", sass, re.MULTILINE)]


def test_ptxas_keeps_one_branch_around_four_plain_reductions_per_end(compiled):
    """The end's PTX is shaped for this (aggregate_to_ptx): a predicated ``red`` becomes a branch
    each, and a warp-uniform address a warp-aggregated sequence (a vote, an elected lane)."""
    kernel, _ = compiled
    ends = [scope for kind, scope in sites(kernel.asm["ptx"]) if kind == "end"]
    runs, run = [], 0  # the reductions between two control-flow instructions
    for opcode in opcodes(kernel.asm["sass"]):
        if opcode.startswith(("BRA", "BSSY", "BSYNC", "EXIT", "RET")):
            if run:
                runs.append(run)
            run = 0
        run += opcode.startswith("REDG")
        assert not opcode.startswith(("VOTE", "REDUX", "MATCH", "ELECT", "ATOMG")), opcode
    assert runs == [RED_PER_END] * len(ends)


def test_the_segment_size_does_not_depend_on_the_trip_count(compile_kernel):
    def scratch(mode: Mode, iters: int) -> int:
        constants = {"ITERS": iters, "BLOCK": 256}
        signature = {"x": "*fp32", "out": "*fp32", "ITERS": "constexpr", "BLOCK": "constexpr"}
        kernel = compile_kernel(constant_loop_kernel, signature, constants, mode=mode, num_warps=4)
        return kernel.metadata.profile_scratch_size

    assert scratch(AGGREGATE, 4) == scratch(AGGREGATE, 256) == BufferLayout(4, 0, 1).cta_bytes
    assert scratch(Mode(), 4) < scratch(Mode(), 256)  # a trace's is sized by it


def check_launch(case: interpreter.Case, result: interpreter.Launch, grid) -> None:
    """The statistics, headers and writes of an interpreted aggregate launch."""
    layout, memory = case.layout, result.memory
    scopes = layout.aggregate_scopes
    sequence = sites(case.ptx)
    raw = memory.data.reshape(-1, layout.cta_bytes)
    warps_per_unit = case.granularity.warps_per_unit(case.num_warps)
    for linear in range(int(np.prod(grid))):
        cta = raw[linear, : CTA_HEADER_DTYPE.itemsize].copy().view(CTA_HEADER_DTYPE)[0]
        assert (int(cta["magic"]), int(cta["version"]), int(cta["capacity"])) == (MAGIC, VERSION, 0)
        for unit in range(layout.units):
            writer = result.threads[linear, unit * case.threads_per_unit]
            start = layout.stats_offset(unit)
            header = raw[linear, start - UNIT_HEADER_BYTES : start].copy().view(UNIT_HEADER_DTYPE)[0]
            assert (int(header["entries"]), int(header["end_magic"])) == (0, MAGIC)
            stats = (
                raw[linear, start : start + scopes * AGGREGATE_STATS_BYTES].copy().view(AGGREGATE_STATS_DTYPE)
            )
            expected = expected_stats(sequence, writer.record_clocks, scopes)
            assert stats.tobytes() == expected.tobytes(), (linear, unit)
            zeroed = memory.writer[
                linear * layout.cta_bytes + start : linear * layout.cta_bytes + start + stats.nbytes
            ]
            first_warp = unit * warps_per_unit
            assert ((zeroed % case.threads) // 32 == first_warp).all()  # by the unit's first warp, all of it
    for byte, size, thread in memory.reductions:
        linear, tid = divmod(thread, case.threads)
        unit, lane = divmod(tid, case.threads_per_unit)
        assert lane == 0, "only the unit's writer reduces"
        region = linear * layout.cta_bytes + layout.stats_offset(unit)
        assert region <= byte and byte + size <= region + scopes * AGGREGATE_STATS_BYTES
    assert memory.conflicts == []


GRANULARITIES = {
    "warp": (Granularity.WARP, 4),
    "warpgroup": (Granularity.WARPGROUP, 8),
    "warp_2": (Granularity.WARP_2, 4),
    "cta": (Granularity.CTA, 4),
}


@pytest.mark.parametrize("granularity", list(GRANULARITIES))
@pytest.mark.parametrize("kernel", ["nested", "runtime_loop", "branch"])
def test_each_unit_adds_what_its_writer_timed_inside_its_own_statistics(compile_kernel, kernel, granularity):
    fn, signature, _ = KERNELS[kernel]
    gran, num_warps = GRANULARITIES[granularity]
    mode = Mode(granularity=gran, aggregate=True)
    compiled = compile_kernel(fn, signature, {"BLOCK": 1024}, mode=mode, num_warps=num_warps)
    layout = BufferLayout.from_dict(compiled.metadata.proton_ik["layout"])
    case = interpreter.Case(compiled.asm["ptx"], layout, gran, num_warps, paired=False)
    grid = (2, 1, 2)
    check_launch(case, interpreter.launch(case, grid), grid)


# A straight-line kernel of two warps whose sites the test chooses: ``// site`` lines.
SITES_PTX = """\
.version 8.7
.target sm_90a
.address_size 64

	// .globl	k
.visible .entry k(
	.param .u64 .ptr .global .align 1 k_param_0,
	.param .u64 .ptr .global .align 1 k_param_1
)
.reqntid 64
{
	.reg .b32 	%r<2>;
{sites}
	ret;
}
"""


def lowered_sites(ops: list[tuple[str, int]]) -> tuple[str, BufferLayout]:
    ptx = SITES_PTX.replace("{sites}", "\n".join("\t// site" for _ in ops))
    lines = [i for i, line in enumerate(ptx.splitlines()) if line == "\t// site"]
    layout = BufferLayout(units=2, capacity=0, aggregate_scopes=2)
    body = [str(SegmentSetupOp(Granularity.WARP, layout))]
    for (kind, scope), line in zip(ops, lines, strict=True):
        op = AggregateBeginOp if kind == "begin" else AggregateEndOp
        body.append(str(op(scope, line)))
    body.append(str(FinalizeOp()))
    module = parse_module("builtin.module {\n" + "\n".join(body) + "\n}")
    return lower_to_ptx(module, ptx), layout


def test_an_end_closes_the_latest_begin_and_an_end_with_none_open_adds_nothing(ptxas, tmp_path: Path):
    # Scope 1 spans everything; scope 0 ends first with nothing open, begins twice, ends twice.
    ops = [("begin", 1), ("end", 0), ("begin", 0), ("begin", 0), ("end", 0), ("end", 0), ("end", 1)]
    ptx, layout = lowered_sites(ops)
    assert ptxas(ptx, tmp_path).returncode == 0
    case = interpreter.Case(ptx, layout, Granularity.WARP, 2, paired=False)
    result = interpreter.launch(case, (1, 1, 1))
    check_launch(case, result, (1, 1, 1))
    clocks = result.threads[0, 0].record_clocks
    stats = result.memory.data[layout.stats_offset(0) :][: 2 * AGGREGATE_STATS_BYTES].copy()
    stats = stats.view(AGGREGATE_STATS_DTYPE)
    assert stats["bins"].sum(axis=1).tolist() == [1, 1]
    assert stats["sum"].tolist() == [clocks[4] - clocks[3], clocks[6] - clocks[0]]
    assert (~stats["min_inverted"]).tolist() == stats["max"].tolist() == stats["sum"].tolist()


# 0 and both ends of every bit length from 1 to 32: bins 0 to 31, the last with every length from 31.
DURATIONS = [0] + [d for length in range(1, 33) for d in (1 << (length - 1), (1 << length) - 1)]


def test_the_ptx_bins_every_duration_as_the_layout_decodes_it():
    """An end's histogram bin, computed by the PTX, is ``layout.histogram_bin`` of its duration."""
    ptx, layout = lowered_sites([("begin", 0), ("end", 0)])
    case = interpreter.Case(ptx, layout, Granularity.WARP, 2, paired=False)
    start = layout.stats_offset(0)
    bins = []
    for d in DURATIONS:
        memory = interpreter.launch(case, (1, 1, 1), clock_step=d).memory  # end's read: begin's + d
        stats = memory.data[start : start + AGGREGATE_STATS_BYTES].copy().view(AGGREGATE_STATS_DTYPE)
        assert (int(stats["sum"][0]), int(stats["max"][0]), ~int(stats["min_inverted"][0]) & U32) == (d, d, d)
        assert int(stats["bins"].sum()) == 1
        bins.append(int(stats["bins"][0].argmax()))
    assert bins == histogram_bin(DURATIONS).tolist()
    assert sorted(set(bins)) == list(range(HISTOGRAM_BINS))


def test_durations_wrap_as_32_bit_clocks():
    """A begin just below 2**32 and its end just past it: the clock's low 32 bits wrap."""
    stats = expected_stats([("begin", 0), ("end", 0)], [U32 - 10, 25], 1)
    assert int(stats["sum"][0]) == 36 and int(stats["bins"][0, 6]) == 1
