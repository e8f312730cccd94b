"""``convert-pikgpu-to-ptx``: splice a ``pikgpu`` module into the kernel's PTX.

PTX registers are mutable, so a unit's record count lives in one register (``%pik_n``) across
loops and branches with no SSA plumbing. The pass emits:

- declarations of the ``%pik_*`` registers after the kernel's own;
- a prologue (``pikgpu.segment_setup``): the unit's segment from the ``profile_scratch``
  parameter, the linear CTA id and the warp; the CTA header; the unit's start clock64 and
  %globaltimer;
- at each single record (``pikgpu.read_clock`` + ``pikgpu.store_record``): a clock read and one
  8-byte store by the unit's writer lane into entry ``count & (capacity - 1)``, which never
  leaves the segment;
- at a paired begin, only a clock read into a register of its own (a begin goes above the pure
  arithmetic before its marker: ``placement``); at its end
  (``pikgpu.store_pair``), a clock read and one 16-byte store of both records;
- an epilogue (``pikgpu.finalize``) that every ``ret`` branches to: end clock64,
  %globaltimer and the counts of entries and single records.

In aggregate mode, ``aggregate_to_ptx`` adds its registers, prologue and begin and end sites;
``events_to_ptx`` adds the sites of event records with an index register, of value marks, and
the guards of predicated records.

All offsets come from ``proton_ik.contract.layout``, and so does the order of the operands of
every vector store: each names the layout fields it writes (``_vector``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from proton_ik.contract.layout import (
    CTA_HEADER_BYTES,
    CTA_HEADER_DTYPE,
    ENTRY_BYTES,
    ENTRY_DTYPE,
    MAGIC,
    THREADS_PER_WARP,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    VERSION,
    WARPS_PER_WARPGROUP,
    Granularity,
    scalar_fields,
    vector_fields,
)
from proton_ik.dialect.pikgpu import (
    AggregateBeginOp,
    AggregateEndOp,
    FinalizeOp,
    ReadClockOp,
    SegmentSetupOp,
    StorePairOp,
    StoreRecordOp,
)
from proton_ik.lowering import aggregate_to_ptx, events_to_ptx, placement, ptx_text
from proton_ik.lowering import sampling as sampling_ptx

PASS_NAME = "convert-pikgpu-to-ptx"
EXIT_LABEL = "$pik_exit"

_REG_DECL = re.compile(r"^\s*\.reg\s")
_RET = re.compile(r"^(?P<indent>\s*)(?P<guard>@!?%\w+\s+)?ret(?:\.uni)?\s*;")

_REGS_32 = [
    "n",
    "start_clock",
    "start_time",
    "singles",
    "t",
    "c",
    "tid",
    "warp",
    "lane",
    "unit",
    "x",
    "y",
    "z",
    "nx",
    "ny",
    "nz",
    "cta",
    "sm",
]
_REGS_64 = ["scratch", "base", "unit_base", "rec", "a", "clk64", "gtime", "start_clock64", "start_time64"]
_PREDS = ["w", "h"]
_STORE_TYPES = {4: "b32", 8: "u64"}  # vector element type by field size


@dataclass
class PtxPlan:
    """What goes where: replacement lines for each marker site, plus the frame around them."""

    declarations: list[str] = field(default_factory=list)
    prologue: list[str] = field(default_factory=list)
    sites: dict[int, list[str]] = field(default_factory=dict)
    epilogue: list[str] = field(default_factory=list)
    begins: set[int] = field(default_factory=set)  # sites of begins: placed by ``placement``


def _declarations(pairs: int) -> list[str]:
    return [
        "\t.reg .b32 \t" + ", ".join(f"%pik_{r}" for r in _REGS_32) + ";",
        "\t.reg .b64 \t" + ", ".join(f"%pik_{r}" for r in _REGS_64) + ";",
        "\t.reg .pred \t" + ", ".join(f"%pik_{r}" for r in _PREDS) + ";",
        # One register per pair holds its begin clock; nested pairs in one block need several.
        *([f"\t.reg .b32 \t%pik_b<{pairs}>;"] if pairs else []),
    ]


def _vector(dtype: np.dtype, values: dict[str, object]) -> tuple[int, str, str]:
    """One vector store of ``values`` into the scalars of ``dtype`` they name: its byte offset,
    its shape (``v4.b32``) and its operands, in the layout's order (``vector_fields`` checks it)."""
    names = list(values)
    offset = vector_fields(dtype, names)
    size = scalar_fields(dtype)[names[0]][1]
    return offset, f"v{len(names)}.{_STORE_TYPES[size]}", "{" + ", ".join(map(str, values.values())) + "}"


def _header_store(guard: str, base: str, dtype: np.dtype, values: dict[str, object]) -> str:
    offset, shape, operands = _vector(dtype, values)
    return f"\t@{guard} st.global.{shape} \t[{base}+{offset}], {operands};"


def _entry_store(values: dict[str, object]) -> str:
    """A store into the entry at ``%pik_a``: one record, or a begin/end pair."""
    offset, shape, operands = _vector(ENTRY_DTYPE, values)
    address = f"%pik_a+{offset}" if offset else "%pik_a"
    return f"\t@%pik_w st.global.{shape} \t[{address}], {operands};"


def _cta_region(setup: SegmentSetupOp, scratch_param: str) -> list[str]:
    """This CTA's region (``%pik_base``) and, for its header, the linear CTA id and the grid,
    from the kernel's parameter and special registers."""
    cta_lines, cta_slot = sampling_ptx.cta_slot(setup.layout.sampling, "%pik_cta")
    return [
        f"\tld.param.u64 \t%pik_scratch, [{scratch_param}];",
        "\tmov.u32 \t%pik_tid, %tid.x;",
        "\tmov.u32 \t%pik_x, %ctaid.x;",
        "\tmov.u32 \t%pik_y, %ctaid.y;",
        "\tmov.u32 \t%pik_z, %ctaid.z;",
        "\tmov.u32 \t%pik_nx, %nctaid.x;",
        "\tmov.u32 \t%pik_ny, %nctaid.y;",
        "\tmov.u32 \t%pik_nz, %nctaid.z;",
        "\tmad.lo.u32 \t%pik_cta, %pik_z, %pik_ny, %pik_y;",
        "\tmad.lo.u32 \t%pik_cta, %pik_cta, %pik_nx, %pik_x;",
        *cta_lines,
        f"\tmul.wide.u32 \t%pik_base, {cta_slot}, {setup.layout.cta_bytes};",
        "\tadd.s64 \t%pik_base, %pik_scratch, %pik_base;",
    ]


def _writer(setup: SegmentSetupOp) -> tuple[list[str], str]:
    """The lines that set ``%pik_w`` (the unit's writer lane, where its unit and CTA are sampled)
    after ``_cta_region``, and the register that holds the unit's slot."""
    layout = setup.layout
    granularity = setup.granularity_enum
    unit_lines, unit_slot = sampling_ptx.unit_slot(layout.sampling, "%pik_unit")
    lines = [
        f"\tshr.u32 \t%pik_warp, %pik_tid, {_log2(THREADS_PER_WARP)};",
        f"\tand.b32 \t%pik_lane, %pik_tid, {THREADS_PER_WARP - 1};",
    ]
    if granularity is Granularity.WARP:
        lines += ["\tmov.u32 \t%pik_unit, %pik_warp;", "\tsetp.eq.u32 \t%pik_w, %pik_lane, 0;"]
    elif granularity is Granularity.WARPGROUP:
        lines += [
            f"\tshr.u32 \t%pik_unit, %pik_warp, {_log2(WARPS_PER_WARPGROUP)};",
            f"\tand.b32 \t%pik_t, %pik_tid, {WARPS_PER_WARPGROUP * THREADS_PER_WARP - 1};",
            "\tsetp.eq.u32 \t%pik_w, %pik_t, 0;",
        ]
    else:
        lines += ["\tmov.u32 \t%pik_unit, 0;", "\tsetp.eq.u32 \t%pik_w, %pik_tid, 0;"]
    return [*lines, *unit_lines, *sampling_ptx.restrict_writer(layout.sampling, "%pik_w")], unit_slot


def _prologue(setup: SegmentSetupOp, scratch_param: str) -> list[str]:
    """The unit's entries (``%pik_rec``) and writer lane (``%pik_w``), and the low halves of its
    start times. No store: the kernel's first loads must not queue behind stores whose addresses
    and values wait on special-register reads (docs/PERFORMANCE.md, issue 10). Only the start's
    two 32-bit halves wait in registers (the time's in a uniform one); the epilogue writes every
    header."""
    layout = setup.layout
    writer, unit_slot = _writer(setup)
    return [
        "\t// pik prologue: this unit's entries and writer lane, the low halves of its start times",
        *_cta_region(setup, scratch_param),
        *writer,
        f"\tmad.wide.u32 \t%pik_rec, {unit_slot}, {layout.unit_bytes}, %pik_base;",
        f"\tadd.s64 \t%pik_rec, %pik_rec, {CTA_HEADER_BYTES + UNIT_HEADER_BYTES};",
        "\tmov.u32 \t%pik_n, 0;",
        "\tmov.u32 \t%pik_singles, 0;",
        "\tmov.u32 \t%pik_start_clock, %clock;",
        "\tmov.u32 \t%pik_start_time, %globaltimer_lo;",
    ]


def _slot(capacity: int) -> list[str]:
    return [
        f"\tand.b32 \t%pik_t, %pik_n, {capacity - 1};",
        f"\tmad.wide.u32 \t%pik_a, %pik_t, {ENTRY_BYTES}, %pik_rec;",
    ]


def _single(store: StoreRecordOp, capacity: int) -> list[str]:
    clock = ["\tmov.u32 \t%pik_c, %clock;"]
    store_lines = [
        _entry_store({"first.tag": store.tag.value.data, "first.clock": "%pik_c"}),
        "\tadd.s32 \t%pik_n, %pik_n, 1;",
        "\tadd.s32 \t%pik_singles, %pik_singles, 1;",
    ]
    # The clock is read as late as possible for a begin and as early as possible for an end,
    # so that the record's own address arithmetic is outside the measured scope.
    body = clock + _slot(capacity) if store.is_end else _slot(capacity) + clock
    return ["\t// pik record", *body, *store_lines]


def _pair_begin(pair: int) -> list[str]:
    return ["\t// pik pair begin", f"\tmov.u32 \t%pik_b{pair}, %clock;"]


def _pair_end(store: StorePairOp, capacity: int, pair: int) -> list[str]:
    tags = store.begin_tag.value.data, store.end_tag.value.data
    return [
        "\t// pik pair end",
        "\tmov.u32 \t%pik_c, %clock;",
        *_slot(capacity),
        _entry_store(
            {
                "first.tag": tags[0],
                "first.clock": f"%pik_b{pair}",
                "second.tag": tags[1],
                "second.clock": "%pik_c",
            }
        ),
        "\tadd.s32 \t%pik_n, %pik_n, 1;",
    ]


def _epilogue(setup: SegmentSetupOp, scratch_param: str) -> list[str]:
    """Every header, at the unit's exit. The unit header's address comes from the records'
    pointer, which lives across the kernel anyway; the CTA's region and the writer lane are
    computed again, so that nothing else of the prologue's stays live. The 64-bit start times are the end times less the 32-bit distances
    from the start's low halves: exact while a unit runs under 2**32 cycles (2 s at 2 GHz) and
    2**32 ns (4 s)."""
    layout = setup.layout
    cta, unit = CTA_HEADER_DTYPE, UNIT_HEADER_DTYPE
    return [
        f"{EXIT_LABEL}:",
        "\t// pik epilogue: the unit's start and end times and counts; thread 0 the CTA header",
        "\tmov.u64 \t%pik_clk64, %clock64;",
        "\tmov.u64 \t%pik_gtime, %globaltimer;",
        *_rebuilt_start("%pik_start_clock64", "%pik_clk64", "%pik_start_clock"),
        *_rebuilt_start("%pik_start_time64", "%pik_gtime", "%pik_start_time"),
        *_cta_region(setup, scratch_param),
        *_writer(setup)[0],
        f"\tsub.s64 \t%pik_unit_base, %pik_rec, {UNIT_HEADER_BYTES};",
        _header_store(
            "%pik_w",
            "%pik_unit_base",
            unit,
            {"start_clock": "%pik_start_clock64", "start_time": "%pik_start_time64"},
        ),
        _header_store(
            "%pik_w", "%pik_unit_base", unit, {"end_clock": "%pik_clk64", "end_time": "%pik_gtime"}
        ),
        _header_store(
            "%pik_w",
            "%pik_unit_base",
            unit,
            {"entries": "%pik_n", "end_magic": MAGIC, "singles": "%pik_singles", "reserved": 0},
        ),
        "\tsetp.eq.u32 \t%pik_h, %pik_tid, 0;",
        *sampling_ptx.restrict_header(layout.sampling, "%pik_h"),
        "\tmov.u32 \t%pik_sm, %smid;",
        _header_store(
            "%pik_h",
            "%pik_base",
            cta,
            {"magic": MAGIC, "version": VERSION, "cta": "%pik_cta", "smid": "%pik_sm"},
        ),
        _header_store(
            "%pik_h",
            "%pik_base",
            cta,
            {"nctaid_x": "%pik_nx", "nctaid_y": "%pik_ny", "nctaid_z": "%pik_nz", "units": layout.units},
        ),
        _header_store(
            "%pik_h",
            "%pik_base",
            cta,
            {"capacity": layout.capacity, "reserved[0]": 0, "reserved[1]": 0, "reserved[2]": 0},
        ),
        "\tret;",
    ]


def _rebuilt_start(full: str, end: str, start_low: str) -> list[str]:
    """``full`` = ``end`` - (low 32 bits of ``end`` - ``start_low``, modulo 2**32)."""
    return [
        f"\tcvt.u32.u64 \t%pik_t, {end};",
        f"\tsub.s32 \t%pik_t, %pik_t, {start_low};",
        f"\tcvt.u64.u32 \t{full}, %pik_t;",
        f"\tsub.s64 \t{full}, {end}, {full};",
    ]


def _log2(n: int) -> int:
    """The shift that divides by ``n``, a power of two."""
    if n & (n - 1):
        raise ValueError(f"{n} is not a power of two")
    return n.bit_length() - 1


def plan_ptx(module: ModuleOp, scratch_param: str) -> PtxPlan:
    """Turn a verified ``pikgpu`` module into PTX fragments keyed by marker site."""
    ops = list(module.body.block.ops)
    setups = [o for o in ops if isinstance(o, SegmentSetupOp)]
    if len(setups) != 1 or not any(isinstance(o, FinalizeOp) for o in ops):
        raise ValueError(f"{PASS_NAME} needs one pikgpu.segment_setup and a pikgpu.finalize")
    setup = setups[0]
    capacity = setup.layout.capacity
    pairs = [o for o in ops if isinstance(o, StorePairOp)]
    pair_of_begin = {store.begin_clock.owner: index for index, store in enumerate(pairs)}
    plan = PtxPlan(
        _declarations(len(pairs)), _prologue(setup, scratch_param), {}, _epilogue(setup, scratch_param)
    )
    plan.declarations += sampling_ptx.declarations(setup.layout.sampling)
    if setup.layout.aggregate:
        plan.declarations += aggregate_to_ptx.declarations(setup.layout)
        plan.prologue += aggregate_to_ptx.prologue(setup)

    def site_of(op) -> int:
        if op.site is None:
            raise ValueError(f"{PASS_NAME}: {op.name} without a site: {op}")
        return op.site.value.data

    for op in ops:
        if isinstance(op, ReadClockOp) and op in pair_of_begin:
            plan.sites[site_of(op)] = _pair_begin(pair_of_begin[op])
        elif isinstance(op, StorePairOp):
            plan.sites[site_of(op)] = _pair_end(op, capacity, pair_of_begin[op.begin_clock.owner])
        elif isinstance(op, StoreRecordOp):
            if not isinstance(op.clock.owner, ReadClockOp):
                raise ValueError(f"{PASS_NAME}: a record must store a pikgpu.read_clock result")
            plan.sites[site_of(op)] = _single(op, capacity)
        elif isinstance(op, AggregateBeginOp):
            plan.sites[site_of(op)] = aggregate_to_ptx.begin(op)
        elif isinstance(op, AggregateEndOp):
            plan.sites[site_of(op)] = aggregate_to_ptx.end(op, site_of(op))
    if events_to_ptx.plan_sites(ops, plan.sites, capacity):
        plan.declarations += events_to_ptx.declarations()
    plan.begins = {site_of(op) for op in ops if _is_begin(op, pair_of_begin)}
    return plan


def _is_begin(op, pair_of_begin) -> bool:
    """A scope's begin: a paired begin's clock read, a single begin record, an aggregate begin."""
    if isinstance(op, StoreRecordOp):
        return not op.is_end
    return (isinstance(op, ReadClockOp) and op in pair_of_begin) or isinstance(op, AggregateBeginOp)


def apply_plan(ptx: str, plan: PtxPlan) -> str:
    lines = ptx.splitlines()
    start, end = ptx_text.entry_body(lines)
    outside = [site for site in plan.sites if not start < site < end]
    if outside:
        raise ValueError(f"{PASS_NAME}: record sites {outside} lie outside the kernel's entry function")
    depths = dict(ptx_text.brace_depths(lines, start, end))
    # Only the function's own declarations: inline-asm blocks declare registers of their own.
    last_decl = max(
        (i for i, depth in depths.items() if depth == 1 and _REG_DECL.match(lines[i])), default=start
    )
    # The epilogue goes before the function-end label that debug info uses, inside its range.
    epilogue_at = next((i for i in range(start + 1, end) if lines[i].startswith("$L__func_end")), end)
    moved = {
        site: placement.hoisted(lines, site, last_decl)
        for site in sorted(plan.begins)
        if site in plan.sites and placement.reads_only_ours(plan.sites[site])
    }
    arriving: dict[int, list[str]] = {}
    for site, target in moved.items():
        arriving.setdefault(target, []).extend(plan.sites[site])
    out: list[str] = []
    for index, line in enumerate(lines):
        if index == epilogue_at:
            out.extend(plan.epilogue)
        out.extend(arriving.get(index, ()))
        if index in plan.sites:
            if index not in moved:
                out.extend(plan.sites[index])
            continue
        ret = _RET.match(line) if start < index < end else None
        if ret is not None:
            out.append(f"{ret.group('indent')}{ret.group('guard') or ''}bra \t{EXIT_LABEL};")
            continue
        out.append(line)
        if index == last_decl:
            out.extend(plan.declarations)
            out.extend(plan.prologue)
    return "\n".join(out) + "\n"


def lower_to_ptx(module: ModuleOp, ptx: str) -> str:
    """The pass: a ``pikgpu`` module and the PTX it was collected from -> instrumented PTX."""
    _, params = ptx_text.entry_params(ptx.splitlines())
    if not params:
        raise ValueError("the kernel has no parameters; Triton's profile_scratch must be the last one")
    return apply_plan(ptx, plan_ptx(module, params[-1]))
