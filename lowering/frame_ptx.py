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
    MAGIC,
    THREADS_PER_WARP,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    min_capacity,
)
from proton_ik.dialect.pikgpu import SegmentSetupOp
from proton_ik.lowering import sampling_ptx, staging
from proton_ik.lowering.registers import (
    CAPACITY,
    CAPACITY_SHIFT,
    CLUSTER,
    CLUSTER_COORD,
    CLUSTER_CTAS,
    CLUSTER_DIM,
    CLUSTER_RANK,
    COUNT,
    CTA,
    CTA_BASE,
    CTA_BYTES,
    CTA_X,
    CTA_Y,
    CTA_Z,
    END_CLOCK64,
    END_TIME64,
    GRID_X,
    GRID_Y,
    GRID_Z,
    HEADER_WRITER,
    LANE,
    RECORDS,
    SCRATCH,
    SLOT_MASK,
    SM,
    START_CLOCK,
    START_CLOCK64,
    START_TIME,
    START_TIME64,
    TALLY,
    TEMP,
    TID,
    UNIT,
    UNIT_BASE,
    UNIT_BYTES,
    WARP,
    WRITER,
)
from proton_ik.lowering.stores_ptx import POLICY, header_store

EXIT_LABEL = "$pik_exit"
CLUSTER_MIN_SM = 90  # %clusterid, %cluster_ctarank and %cluster_nctarank exist from sm_90 on


def slot_mask(setup: SegmentSetupOp) -> str:
    """The operand that finds an entry's slot (``count & mask``): the capacity less one, as an
    immediate, or as the register (``SLOT_MASK``) a launch-sized kernel reads it into."""
    return SLOT_MASK if setup.sized_at_launch else str(setup.layout.capacity - 1)


def _launch_sizes(units: int, slot_bytes: int, least_shift: int) -> list[str]:
    """A launch-sized kernel's unit and CTA strides, from the capacity's log2 in the buffer
    pointer's low bits (``contract.layout.CAPACITY_SHIFT_MASK``), which are then cleared: as
    ``BufferLayout`` computes them."""
    return [
        f"\tcvt.u32.u64 \t{CAPACITY_SHIFT}, {SCRATCH};",
        f"\tand.b32 \t{CAPACITY_SHIFT}, {CAPACITY_SHIFT}, {CAPACITY_SHIFT_MASK};",
        # an address that carries no capacity (a launch the allocator was not told of) reads
        # the smallest ring the layout allows, as the runtime reads it (``min_capacity``)
        *([f"\tmax.u32 \t{CAPACITY_SHIFT}, {CAPACITY_SHIFT}, {least_shift};"] if least_shift else []),
        f"\tand.b64 \t{SCRATCH}, {SCRATCH}, {0xFFFFFFFFFFFFFFFF ^ (CTA_ALIGN - 1):#x};",
        f"\tmov.u32 \t{UNIT_BYTES}, {slot_bytes};",
        f"\tshl.b32 \t{UNIT_BYTES}, {UNIT_BYTES}, {CAPACITY_SHIFT};",
        f"\tadd.s32 \t{UNIT_BYTES}, {UNIT_BYTES}, {UNIT_HEADER_BYTES};",
        f"\tmad.lo.u32 \t{CTA_BYTES}, {UNIT_BYTES}, {units}, {CTA_HEADER_BYTES + CTA_ALIGN - 1};",
        f"\tand.b32 \t{CTA_BYTES}, {CTA_BYTES}, {0xFFFFFFFF ^ (CTA_ALIGN - 1):#x};",
    ]


def _capacity(register: str) -> list[str]:
    """``register`` = the launch's capacity (1 << shift)."""
    return [f"\tmov.u32 \t{register}, 1;", f"\tshl.b32 \t{register}, {register}, {CAPACITY_SHIFT};"]


def _mask() -> list[str]:
    """``SLOT_MASK`` = the launch's capacity less one: live across the kernel, one register."""
    return [*_capacity(SLOT_MASK), f"\tadd.s32 \t{SLOT_MASK}, {SLOT_MASK}, -1;"]


def has_clusters(target_sm: int | None) -> bool:
    """Whether PTX for ``target_sm`` (None: a module without ``.target``, taken as the newest)
    has the cluster registers."""
    return target_sm is None or target_sm >= CLUSTER_MIN_SM


def _cta_region(setup: SegmentSetupOp, scratch_param: str) -> list[str]:
    """This CTA's region (``CTA_BASE``) and, for its header, the linear CTA id and the grid,
    from the kernel's parameter and special registers."""
    layout = setup.layout
    cta_lines, cta_slot = sampling_ptx.cta_slot(layout.sampling, CTA)
    sized = setup.sized_at_launch
    return [
        f"\tld.param.u64 \t{SCRATCH}, [{scratch_param}];",
        *(
            _launch_sizes(layout.units, layout.slot_bytes, log2(min_capacity(layout.version)))
            if sized
            else []
        ),
        f"\tmov.u32 \t{TID}, %tid.x;",
        f"\tmov.u32 \t{CTA_X}, %ctaid.x;",
        f"\tmov.u32 \t{CTA_Y}, %ctaid.y;",
        f"\tmov.u32 \t{CTA_Z}, %ctaid.z;",
        f"\tmov.u32 \t{GRID_X}, %nctaid.x;",
        f"\tmov.u32 \t{GRID_Y}, %nctaid.y;",
        f"\tmov.u32 \t{GRID_Z}, %nctaid.z;",
        f"\tmad.lo.u32 \t{CTA}, {CTA_Z}, {GRID_Y}, {CTA_Y};",
        f"\tmad.lo.u32 \t{CTA}, {CTA}, {GRID_X}, {CTA_X};",
        *cta_lines,
        f"\tmul.wide.u32 \t{CTA_BASE}, {cta_slot}, {CTA_BYTES if sized else setup.layout.cta_bytes};",
        f"\tadd.s64 \t{CTA_BASE}, {SCRATCH}, {CTA_BASE};",
    ]


def _writer(setup: SegmentSetupOp) -> tuple[list[str], str]:
    """The lines that set ``WRITER`` (the unit's writer lane, where its unit and CTA are sampled)
    after ``_cta_region``, and the register that holds the unit's slot."""
    layout = setup.layout
    granularity = setup.granularity_enum
    unit_lines, unit_slot = sampling_ptx.unit_slot(layout.sampling, UNIT)
    lines = [
        f"\tshr.u32 \t{WARP}, {TID}, {log2(THREADS_PER_WARP)};",
        f"\tand.b32 \t{LANE}, {TID}, {THREADS_PER_WARP - 1};",
    ]
    warps = granularity.fixed_warps
    if warps == 1:
        lines += [f"\tmov.u32 \t{UNIT}, {WARP};", f"\tsetp.eq.u32 \t{WRITER}, {LANE}, 0;"]
    elif warps is not None:  # a unit of several warps: lane 0 of its first warp writes
        lines += [
            f"\tshr.u32 \t{UNIT}, {WARP}, {log2(warps)};",
            f"\tand.b32 \t{TEMP}, {TID}, {warps * THREADS_PER_WARP - 1};",
            f"\tsetp.eq.u32 \t{WRITER}, {TEMP}, 0;",
        ]
    else:
        lines += [f"\tmov.u32 \t{UNIT}, 0;", f"\tsetp.eq.u32 \t{WRITER}, {TID}, 0;"]
    return [*lines, *unit_lines, *sampling_ptx.restrict_writer(layout.sampling, WRITER)], unit_slot


def _entries(setup: SegmentSetupOp, scratch_param: str) -> list[str]:
    """The unit's entries (``RECORDS``) and writer lane (``WRITER``), from the kernel's parameter
    and special registers."""
    writer, unit_slot = _writer(setup)
    unit_bytes = UNIT_BYTES if setup.sized_at_launch else setup.layout.unit_bytes
    return [
        *_cta_region(setup, scratch_param),
        *writer,
        f"\tmad.wide.u32 \t{RECORDS}, {unit_slot}, {unit_bytes}, {CTA_BASE};",
        f"\tadd.s64 \t{RECORDS}, {RECORDS}, {CTA_HEADER_BYTES + UNIT_HEADER_BYTES};",
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
        f"\tmov.u32 \t{COUNT}, 0;",
        f"\tmov.u32 \t{TALLY}, 0;",
        *([POLICY] if policy else []),  # the L2 policy of the records' stores (``stores_ptx``)
        *(staging.prologue(_writer(setup)[1]) if staged else []),
        f"\tmov.u32 \t{START_CLOCK}, %clock;",
        f"\tmov.u32 \t{START_TIME}, %globaltimer_lo;",
    ]


def epilogue(setup: SegmentSetupOp, scratch_param: str, staged: bool, clusters: bool) -> list[str]:
    """Every header, at the unit's exit: the unit's (``_unit_exit``), then the CTA's
    (``_cta_header``). ``clusters``: the target has thread-block clusters (``CLUSTER_MIN_SM``)."""
    return [
        f"{EXIT_LABEL}:",
        "\t// pik epilogue: the unit's start and end times and counts; thread 0 the CTA header",
        f"\tmov.u64 \t{END_CLOCK64}, %clock64;",
        f"\tmov.u64 \t{END_TIME64}, %globaltimer;",
        *_unit_exit(setup, scratch_param, staged),
        *_cta_header(setup, clusters),
        "\tret;",
    ]


def _unit_exit(setup: SegmentSetupOp, scratch_param: str, staged: bool) -> list[str]:
    """The unit header, and the CTA's region again for the CTA header. The 64-bit start times
    are the end times less the 32-bit distances from the start's low halves: exact while a unit
    runs under 2**32 cycles (2 s at 2 GHz) and 2**32 ns (4 s).

    Unstaged, the unit header's address comes from the records' pointer, which lives across the
    kernel anyway; the CTA's region and the writer lane are computed again, so that nothing else
    of the prologue's stays live. Staged, the records use the stage, not the pointer: the unit's
    entries are computed again too, then the stage is copied, then the headers are written."""
    starts = [
        *_rebuilt_start(START_CLOCK64, END_CLOCK64, START_CLOCK),
        *_rebuilt_start(START_TIME64, END_TIME64, START_TIME),
    ]
    if not staged:
        return [*starts, *_cta_region(setup, scratch_param), *_writer(setup)[0], *_unit_header()]
    return [
        *_entries(setup, scratch_param),
        *staging.epilogue(setup.layout.slot_bytes),
        *starts,
        *_unit_header(),
        # The CTA's region again, rather than kept from above, so that none of it lives across
        # the unit header's stores.
        *_cta_region(setup, scratch_param),
    ]


def _cta_header(setup: SegmentSetupOp, clusters: bool) -> list[str]:
    """Thread 0's CTA header, with the CTA's cluster where the target has clusters; elsewhere it
    stores 0 there ("not recorded")."""
    layout = setup.layout
    sized = setup.sized_at_launch
    cta = CTA_HEADER_DTYPE
    cluster: dict[str, object] = (
        {"cluster": CLUSTER, "cluster_rank": CLUSTER_RANK, "cluster_ctas": CLUSTER_CTAS}
        if clusters
        else {"cluster": 0, "cluster_rank": 0, "cluster_ctas": 0}
    )
    return [
        f"\tsetp.eq.u32 \t{HEADER_WRITER}, {TID}, 0;",
        *sampling_ptx.restrict_header(layout.sampling, HEADER_WRITER),
        f"\tmov.u32 \t{SM}, %smid;",
        *(_cluster() if clusters else []),
        *(_capacity(CAPACITY) if sized else []),
        header_store(
            HEADER_WRITER, CTA_BASE, cta, {"magic": MAGIC, "version": layout.version, "cta": CTA, "smid": SM}
        ),
        header_store(
            HEADER_WRITER,
            CTA_BASE,
            cta,
            {"nctaid_x": GRID_X, "nctaid_y": GRID_Y, "nctaid_z": GRID_Z, "units": layout.units},
        ),
        header_store(
            HEADER_WRITER, CTA_BASE, cta, {"capacity": CAPACITY if sized else layout.capacity, **cluster}
        ),
    ]


def _cluster() -> list[str]:
    """The CTA's cluster: its linear id (x + y * nx + z * nx * ny over %clusterid and
    %nclusterid), the CTA's rank in it and its CTAs."""
    return [
        f"\tmov.u32 \t{CLUSTER}, %clusterid.z;",
        f"\tmov.u32 \t{CLUSTER_DIM}, %nclusterid.y;",
        f"\tmov.u32 \t{CLUSTER_COORD}, %clusterid.y;",
        f"\tmad.lo.u32 \t{CLUSTER}, {CLUSTER}, {CLUSTER_DIM}, {CLUSTER_COORD};",
        f"\tmov.u32 \t{CLUSTER_DIM}, %nclusterid.x;",
        f"\tmov.u32 \t{CLUSTER_COORD}, %clusterid.x;",
        f"\tmad.lo.u32 \t{CLUSTER}, {CLUSTER}, {CLUSTER_DIM}, {CLUSTER_COORD};",
        f"\tmov.u32 \t{CLUSTER_RANK}, %cluster_ctarank;",
        f"\tmov.u32 \t{CLUSTER_CTAS}, %cluster_nctarank;",
    ]


def _unit_header() -> list[str]:
    """The unit header's three stores, from ``RECORDS`` and the end and rebuilt start times."""
    unit = UNIT_HEADER_DTYPE
    return [
        f"\tsub.s64 \t{UNIT_BASE}, {RECORDS}, {UNIT_HEADER_BYTES};",
        header_store(WRITER, UNIT_BASE, unit, {"start_clock": START_CLOCK64, "start_time": START_TIME64}),
        header_store(WRITER, UNIT_BASE, unit, {"end_clock": END_CLOCK64, "end_time": END_TIME64}),
        header_store(
            WRITER,
            UNIT_BASE,
            unit,
            {"entries": COUNT, "end_magic": MAGIC, "tally": TALLY, "reserved": 0},
        ),
    ]


def _rebuilt_start(full: str, end: str, start_low: str) -> list[str]:
    """``full`` = ``end`` - (low 32 bits of ``end`` - ``start_low``, modulo 2**32)."""
    return [
        f"\tcvt.u32.u64 \t{TEMP}, {end};",
        f"\tsub.s32 \t{TEMP}, {TEMP}, {start_low};",
        f"\tcvt.u64.u32 \t{full}, {TEMP};",
        f"\tsub.s64 \t{full}, {end}, {full};",
    ]


def log2(n: int) -> int:
    """The shift that divides by ``n``, a power of two."""
    if n & (n - 1):
        raise ValueError(f"{n} is not a power of two")
    return n.bit_length() - 1
