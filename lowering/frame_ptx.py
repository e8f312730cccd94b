"""The frame of ``convert-pikgpu-to-ptx``: each unit's prologue and epilogue, and the header stores.

The prologue (``pikgpu.segment_setup``) stores nothing: it finds the unit's entries in the
``profile_scratch`` parameter and its writer lane, and reads the low 32 bits of the start's
clock and %globaltimer, and makes the records' L2 policy (``stores_ptx``) where the target has
one. The epilogue (``pikgpu.finalize``), which every ``ret`` branches to,
reads the end's clock64 and %globaltimer, rebuilds the start's, and writes the unit header and,
in thread 0, the CTA header (docs/PERFORMANCE.md, issue 10: stores before the kernel's first
loads cost short CTAs the most), with the CTA's thread-block cluster where the target has
clusters (sm_90 and later; 0s before, which read "not recorded"). Staged kernels (``staging``)
copy their entries there too.

All offsets come from ``proton_ik.contract.layout``, and so does the order of the operands of
every vector store: each names the layout fields it writes (``stores_ptx.vector``).
"""

from __future__ import annotations

from proton_ik.contract.layout import (
    CAPACITY_SHIFT_MASK,
    CTA_ALIGN,
    CTA_HEADER_BYTES,
    CTA_HEADER_DTYPE,
    ENTRY_BYTES,
    MAGIC,
    THREADS_PER_WARP,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    VERSION,
)
from proton_ik.dialect.pikgpu import SegmentSetupOp
from proton_ik.lowering import sampling_ptx, staging
from proton_ik.lowering.stores_ptx import POLICY, header_store

EXIT_LABEL = "$pik_exit"
CLUSTER_MIN_SM = 90  # %clusterid, %cluster_ctarank and %cluster_nctarank exist from sm_90 on
# The epilogue's registers of the CTA's cluster: ``pikgpu_to_ptx`` declares them with its own.
CLUSTER_REGISTERS = ("cluster", "cluster_rank", "cluster_ctas", "cluster_t", "cluster_n")


# A launch-sized kernel's sizes (``contract.layout.CAPACITY_SHIFT_MASK``), read from its buffer
# pointer: ``pikgpu_to_ptx`` declares these registers where the kernel is sized at launch.
LAUNCH_SIZE_REGISTERS = ("shift", "unit_bytes", "cta_bytes", "mask", "capacity")
SLOT_MASK = "%pik_mask"


def slot_mask(setup: SegmentSetupOp) -> str:
    """The operand that finds an entry's slot (``count & mask``): the capacity less one, as an
    immediate, or as the register a launch-sized kernel reads it into."""
    return SLOT_MASK if setup.sized_at_launch else str(setup.layout.capacity - 1)


def slot(mask: str) -> list[str]:
    """The address (``%pik_a``) of the entry that count ``%pik_n`` goes to: never outside the ring."""
    return [
        f"\tand.b32 \t%pik_t, %pik_n, {mask};",
        f"\tmad.wide.u32 \t%pik_a, %pik_t, {ENTRY_BYTES}, %pik_rec;",
    ]


def _launch_sizes(units: int) -> list[str]:
    """A launch-sized kernel's unit and CTA strides, from the capacity's log2 in the buffer
    pointer's low bits, which are then cleared: as ``BufferLayout`` computes them."""
    return [
        "\tcvt.u32.u64 \t%pik_shift, %pik_scratch;",
        f"\tand.b32 \t%pik_shift, %pik_shift, {CAPACITY_SHIFT_MASK};",
        f"\tand.b64 \t%pik_scratch, %pik_scratch, {0xFFFFFFFFFFFFFFFF ^ (CTA_ALIGN - 1):#x};",
        f"\tmov.u32 \t%pik_unit_bytes, {ENTRY_BYTES};",
        "\tshl.b32 \t%pik_unit_bytes, %pik_unit_bytes, %pik_shift;",
        f"\tadd.s32 \t%pik_unit_bytes, %pik_unit_bytes, {UNIT_HEADER_BYTES};",
        f"\tmad.lo.u32 \t%pik_cta_bytes, %pik_unit_bytes, {units}, {CTA_HEADER_BYTES + CTA_ALIGN - 1};",
        f"\tand.b32 \t%pik_cta_bytes, %pik_cta_bytes, {0xFFFFFFFF ^ (CTA_ALIGN - 1):#x};",
    ]


def _capacity(register: str) -> list[str]:
    """``register`` = the launch's capacity (1 << shift)."""
    return [f"\tmov.u32 \t{register}, 1;", f"\tshl.b32 \t{register}, {register}, %pik_shift;"]


def _mask() -> list[str]:
    """``SLOT_MASK`` = the launch's capacity less one: live across the kernel, one register."""
    return [*_capacity(SLOT_MASK), f"\tadd.s32 \t{SLOT_MASK}, {SLOT_MASK}, -1;"]


def has_clusters(target_sm: int | None) -> bool:
    """Whether PTX for ``target_sm`` (None: a module without ``.target``, taken as the newest)
    has the cluster registers."""
    return target_sm is None or target_sm >= CLUSTER_MIN_SM


def _cta_region(setup: SegmentSetupOp, scratch_param: str) -> list[str]:
    """This CTA's region (``%pik_base``) and, for its header, the linear CTA id and the grid,
    from the kernel's parameter and special registers."""
    cta_lines, cta_slot = sampling_ptx.cta_slot(setup.layout.sampling, "%pik_cta")
    sized = setup.sized_at_launch
    return [
        f"\tld.param.u64 \t%pik_scratch, [{scratch_param}];",
        *(_launch_sizes(setup.layout.units) if sized else []),
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
        f"\tmul.wide.u32 \t%pik_base, {cta_slot}, {'%pik_cta_bytes' if sized else setup.layout.cta_bytes};",
        "\tadd.s64 \t%pik_base, %pik_scratch, %pik_base;",
    ]


def _writer(setup: SegmentSetupOp) -> tuple[list[str], str]:
    """The lines that set ``%pik_w`` (the unit's writer lane, where its unit and CTA are sampled)
    after ``_cta_region``, and the register that holds the unit's slot."""
    layout = setup.layout
    granularity = setup.granularity_enum
    unit_lines, unit_slot = sampling_ptx.unit_slot(layout.sampling, "%pik_unit")
    lines = [
        f"\tshr.u32 \t%pik_warp, %pik_tid, {log2(THREADS_PER_WARP)};",
        f"\tand.b32 \t%pik_lane, %pik_tid, {THREADS_PER_WARP - 1};",
    ]
    warps = granularity.fixed_warps
    if warps == 1:
        lines += ["\tmov.u32 \t%pik_unit, %pik_warp;", "\tsetp.eq.u32 \t%pik_w, %pik_lane, 0;"]
    elif warps is not None:  # a unit of several warps: lane 0 of its first warp writes
        lines += [
            f"\tshr.u32 \t%pik_unit, %pik_warp, {log2(warps)};",
            f"\tand.b32 \t%pik_t, %pik_tid, {warps * THREADS_PER_WARP - 1};",
            "\tsetp.eq.u32 \t%pik_w, %pik_t, 0;",
        ]
    else:
        lines += ["\tmov.u32 \t%pik_unit, 0;", "\tsetp.eq.u32 \t%pik_w, %pik_tid, 0;"]
    return [*lines, *unit_lines, *sampling_ptx.restrict_writer(layout.sampling, "%pik_w")], unit_slot


def _entries(setup: SegmentSetupOp, scratch_param: str) -> list[str]:
    """The unit's entries (``%pik_rec``) and writer lane (``%pik_w``), from the kernel's parameter
    and special registers."""
    writer, unit_slot = _writer(setup)
    unit_bytes = "%pik_unit_bytes" if setup.sized_at_launch else setup.layout.unit_bytes
    return [
        *_cta_region(setup, scratch_param),
        *writer,
        f"\tmad.wide.u32 \t%pik_rec, {unit_slot}, {unit_bytes}, %pik_base;",
        f"\tadd.s64 \t%pik_rec, %pik_rec, {CTA_HEADER_BYTES + UNIT_HEADER_BYTES};",
    ]


def prologue(setup: SegmentSetupOp, scratch_param: str, staged: bool, policy: bool) -> list[str]:
    """The unit's entries and writer lane (and its stage, when staged), and the low halves of its
    start times. No store: the kernel's first loads must not queue behind stores whose addresses
    and values wait on special-register reads (docs/PERFORMANCE.md, issue 10). Only the start's
    two 32-bit halves wait in registers (the time's in a uniform one); the epilogue writes every
    header. ``policy``: the target has L2 cache hints (``stores_ptx.POLICY_MIN_SM``)."""
    return [
        "\t// pik prologue: this unit's entries and writer lane, the low halves of its start times",
        *_entries(setup, scratch_param),
        *(_mask() if setup.sized_at_launch else []),
        "\tmov.u32 \t%pik_n, 0;",
        "\tmov.u32 \t%pik_singles, 0;",
        *([POLICY] if policy else []),  # the L2 policy of the records' stores (``stores_ptx``)
        *(staging.prologue(_writer(setup)[1]) if staged else []),
        "\tmov.u32 \t%pik_start_clock, %clock;",
        "\tmov.u32 \t%pik_start_time, %globaltimer_lo;",
    ]


def epilogue(setup: SegmentSetupOp, scratch_param: str, staged: bool, clusters: bool) -> list[str]:
    """Every header, at the unit's exit. The 64-bit start times are the end times less the
    32-bit distances from the start's low halves: exact while a unit runs under 2**32 cycles (2 s
    at 2 GHz) and 2**32 ns (4 s).

    Unstaged, the unit header's address comes from the records' pointer, which lives across the
    kernel anyway; the CTA's region and the writer lane are computed again, so that nothing else
    of the prologue's stays live. Staged, the records use the stage, not the pointer: the unit's
    entries are computed again too, then the stage is copied, then the headers are written.

    ``clusters``: the target has thread-block clusters (``CLUSTER_MIN_SM``), whose registers
    thread 0 reads into the CTA header; elsewhere it stores 0 there ("not recorded")."""
    layout = setup.layout
    starts = [
        *_rebuilt_start("%pik_start_clock64", "%pik_clk64", "%pik_start_clock"),
        *_rebuilt_start("%pik_start_time64", "%pik_gtime", "%pik_start_time"),
    ]
    if staged:
        unit_header = [
            *_entries(setup, scratch_param),
            *staging.epilogue(),
            *starts,
            *_unit_header(),
            # The CTA's region again, rather than kept from above, so that none of it lives
            # across the unit header's stores.
            *_cta_region(setup, scratch_param),
        ]
    else:
        unit_header = [*starts, *_cta_region(setup, scratch_param), *_writer(setup)[0], *_unit_header()]
    cta = CTA_HEADER_DTYPE
    cluster: dict[str, object] = (
        {"cluster": "%pik_cluster", "cluster_rank": "%pik_cluster_rank", "cluster_ctas": "%pik_cluster_ctas"}
        if clusters
        else {"cluster": 0, "cluster_rank": 0, "cluster_ctas": 0}
    )
    return [
        f"{EXIT_LABEL}:",
        "\t// pik epilogue: the unit's start and end times and counts; thread 0 the CTA header",
        "\tmov.u64 \t%pik_clk64, %clock64;",
        "\tmov.u64 \t%pik_gtime, %globaltimer;",
        *unit_header,
        "\tsetp.eq.u32 \t%pik_h, %pik_tid, 0;",
        *sampling_ptx.restrict_header(layout.sampling, "%pik_h"),
        "\tmov.u32 \t%pik_sm, %smid;",
        *(_cluster() if clusters else []),
        *(_capacity("%pik_capacity") if setup.sized_at_launch else []),
        header_store(
            "%pik_h",
            "%pik_base",
            cta,
            {"magic": MAGIC, "version": VERSION, "cta": "%pik_cta", "smid": "%pik_sm"},
        ),
        header_store(
            "%pik_h",
            "%pik_base",
            cta,
            {"nctaid_x": "%pik_nx", "nctaid_y": "%pik_ny", "nctaid_z": "%pik_nz", "units": layout.units},
        ),
        header_store(
            "%pik_h",
            "%pik_base",
            cta,
            {"capacity": "%pik_capacity" if setup.sized_at_launch else layout.capacity, **cluster},
        ),
        "\tret;",
    ]


def _cluster() -> list[str]:
    """The CTA's cluster: its linear id (x + y * nx + z * nx * ny over %clusterid and
    %nclusterid), the CTA's rank in it and its CTAs, into ``CLUSTER_REGISTERS``."""
    return [
        "\tmov.u32 \t%pik_cluster, %clusterid.z;",
        "\tmov.u32 \t%pik_cluster_n, %nclusterid.y;",
        "\tmov.u32 \t%pik_cluster_t, %clusterid.y;",
        "\tmad.lo.u32 \t%pik_cluster, %pik_cluster, %pik_cluster_n, %pik_cluster_t;",
        "\tmov.u32 \t%pik_cluster_n, %nclusterid.x;",
        "\tmov.u32 \t%pik_cluster_t, %clusterid.x;",
        "\tmad.lo.u32 \t%pik_cluster, %pik_cluster, %pik_cluster_n, %pik_cluster_t;",
        "\tmov.u32 \t%pik_cluster_rank, %cluster_ctarank;",
        "\tmov.u32 \t%pik_cluster_ctas, %cluster_nctarank;",
    ]


def _unit_header() -> list[str]:
    """The unit header's three stores, from ``%pik_rec`` and the end and rebuilt start times."""
    unit = UNIT_HEADER_DTYPE
    return [
        f"\tsub.s64 \t%pik_unit_base, %pik_rec, {UNIT_HEADER_BYTES};",
        header_store(
            "%pik_w",
            "%pik_unit_base",
            unit,
            {"start_clock": "%pik_start_clock64", "start_time": "%pik_start_time64"},
        ),
        header_store("%pik_w", "%pik_unit_base", unit, {"end_clock": "%pik_clk64", "end_time": "%pik_gtime"}),
        header_store(
            "%pik_w",
            "%pik_unit_base",
            unit,
            {"entries": "%pik_n", "end_magic": MAGIC, "singles": "%pik_singles", "reserved": 0},
        ),
    ]


def _rebuilt_start(full: str, end: str, start_low: str) -> list[str]:
    """``full`` = ``end`` - (low 32 bits of ``end`` - ``start_low``, modulo 2**32)."""
    return [
        f"\tcvt.u32.u64 \t%pik_t, {end};",
        f"\tsub.s32 \t%pik_t, %pik_t, {start_low};",
        f"\tcvt.u64.u32 \t{full}, %pik_t;",
        f"\tsub.s64 \t{full}, {end}, {full};",
    ]


def log2(n: int) -> int:
    """The shift that divides by ``n``, a power of two."""
    if n & (n - 1):
        raise ValueError(f"{n} is not a power of two")
    return n.bit_length() - 1
