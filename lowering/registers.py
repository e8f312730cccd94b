"""Every ``%pik_*`` PTX register of ``convert-pikgpu-to-ptx``: its name, its type, and the
kernels that declare it.

The other modules of the lowering name registers through these constants (PTX registers are
mutable, so each holds one role across loops and branches), and ``declarations`` writes the
``.reg`` lines of a kernel from the groups below: the frame's in every instrumented kernel, the
rest only where the kernel uses them, so that no kernel declares a register it never reads.
``PREFIX`` tells our registers from the kernel's (``placement``).
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "%pik_"


@dataclass(frozen=True)
class Group:
    """Registers of one PTX type, declared in one ``.reg`` line."""

    ptx_type: str
    names: tuple[str, ...]

    def declaration(self) -> str:
        return f"\t.reg {self.ptx_type} \t{', '.join(self.names)};"


@dataclass(frozen=True)
class NumberedRegister:
    """As many registers of one PTX type as a kernel needs, ``stem0``, ``stem1``, ...: one
    ``.reg`` line declares ``count`` of them (``%pik_b<3>``)."""

    stem: str
    ptx_type: str

    def __getitem__(self, index: int) -> str:
        return f"{self.stem}{index}"

    def declaration(self, count: int) -> str:
        return f"\t.reg {self.ptx_type} \t{self.stem}<{count}>;"


# The frame (``frame_ptx``), declared in every instrumented kernel.
# .b32
COUNT = "%pik_n"  # the unit's slots so far: the next goes to ring position ``COUNT & mask``
START_CLOCK = "%pik_start_clock"  # the low 32 bits of %clock at the unit's start
START_TIME = "%pik_start_time"  # the low 32 bits of %globaltimer at the unit's start
TALLY = "%pik_tally"  # twice the unit's slots less its records (``layout.records_written``)
TEMP = "%pik_t"  # short-lived: a slot, a distance, a loop counter
CLOCK = "%pik_c"  # a record's clock read
TID = "%pik_tid"
WARP = "%pik_warp"
LANE = "%pik_lane"
UNIT = "%pik_unit"  # the thread's unit in its CTA
CTA_X, CTA_Y, CTA_Z = "%pik_x", "%pik_y", "%pik_z"  # %ctaid
GRID_X, GRID_Y, GRID_Z = "%pik_nx", "%pik_ny", "%pik_nz"  # %nctaid
CTA = "%pik_cta"  # the linear CTA id
SM = "%pik_sm"
# The CTA's cluster for its header. Declared everywhere, read only where the target has clusters.
CLUSTER = "%pik_cluster"  # the linear cluster id
CLUSTER_RANK = "%pik_cluster_rank"
CLUSTER_CTAS = "%pik_cluster_ctas"
CLUSTER_COORD = "%pik_cluster_t"  # one coordinate of %clusterid at a time
CLUSTER_DIM = "%pik_cluster_n"  # one dimension of %nclusterid at a time
# .b64
SCRATCH = "%pik_scratch"  # the profile_scratch parameter: the buffer
CTA_BASE = "%pik_base"  # the CTA's region (its header first)
UNIT_BASE = "%pik_unit_base"  # the unit's header
RECORDS = "%pik_rec"  # the unit's first slot
ADDRESS = "%pik_a"  # the slot a record goes to
RECORD_POLICY = "%pik_pol"  # the L2 eviction policy of the records' stores (``stores_ptx``)
END_CLOCK64 = "%pik_clk64"  # %clock64 at the unit's exit
END_TIME64 = "%pik_gtime"  # %globaltimer at the unit's exit
START_CLOCK64 = "%pik_start_clock64"  # the start's, rebuilt from the exit's and the low halves
START_TIME64 = "%pik_start_time64"
# .pred
WRITER = "%pik_w"  # the unit's writer lane (and its unit and CTA are sampled)
HEADER_WRITER = "%pik_h"  # thread 0 of a sampled CTA
FRAME = (
    Group(
        ".b32",
        (
            *(COUNT, START_CLOCK, START_TIME, TALLY, TEMP, CLOCK, TID, WARP, LANE, UNIT),
            *(CTA_X, CTA_Y, CTA_Z, GRID_X, GRID_Y, GRID_Z, CTA, SM),
            *(CLUSTER, CLUSTER_RANK, CLUSTER_CTAS, CLUSTER_COORD, CLUSTER_DIM),
        ),
    ),
    Group(
        ".b64",
        (
            *(SCRATCH, CTA_BASE, UNIT_BASE, RECORDS, ADDRESS, RECORD_POLICY),
            *(END_CLOCK64, END_TIME64, START_CLOCK64, START_TIME64),
        ),
    ),
    Group(".pred", (WRITER, HEADER_WRITER)),
)

# One per scope pair of the kernel: its begin's clock (nested pairs in one block need several).
PAIR_BEGIN = NumberedRegister("%pik_b", ".b32")
# A kernel with scope pairs in layout version 3 (``slots_ptx.pair_end``).
PAIR_WORD = "%pik_pw"  # the pair's duration, then its compact tag
LONG_PAIR = "%pik_pl"  # the pair is too long for one slot
COMPACT_PAIRS = (Group(".b32", (PAIR_WORD,)), Group(".pred", (LONG_PAIR,)))

# A kernel sized at launch (``frame_ptx``): its sizes, from the buffer pointer's low bits.
CAPACITY_SHIFT = "%pik_shift"  # log2 of the entries per unit
UNIT_BYTES = "%pik_unit_bytes"
CTA_BYTES = "%pik_cta_bytes"
SLOT_MASK = "%pik_mask"  # the capacity less one, live across the kernel
CAPACITY = "%pik_capacity"  # for the CTA header
LAUNCH_SIZES = Group(".b32", (CAPACITY_SHIFT, UNIT_BYTES, CTA_BYTES, SLOT_MASK, CAPACITY))

# A kernel that samples CTAs or units (``sampling_ptx``).
CTA_SLOT = "%pik_cs"  # the CTA's rank among the sampled CTAs
UNIT_SLOT = "%pik_us"  # the unit's rank among the sampled units
CTA_SAMPLED = "%pik_sc"
ID_MATCH = "%pik_m"  # an id equals the listed one at hand
SAMPLING = (Group(".b32", (CTA_SLOT, UNIT_SLOT)), Group(".pred", (CTA_SAMPLED, ID_MATCH)))

# Aggregate mode (``aggregate_to_ptx``).
SCOPE_BEGIN = NumberedRegister("%pik_begin", ".b32")  # one per scope: its latest begin's clock
OPEN = NumberedRegister("%pik_open", ".b32")  # one bit per scope: a begin waits for its end
OPEN_BITS = 32  # scopes per ``OPEN`` register
DURATION = "%pik_d"
DURATION_INVERTED = "%pik_dn"  # ~DURATION, whose max is the min
DURATION64 = "%pik_d64"
STATS = "%pik_stats"  # the lane's first chunk of the unit's statistics
AGGREGATE_GUARD = "%pik_q"  # the prologue's lane zeroes a chunk; an end's scope was open
FIRST_WARP = "%pik_f"  # the thread is in its unit's first warp
AGGREGATE = (
    Group(".b32", (DURATION, DURATION_INVERTED)),
    Group(".b64", (DURATION64, STATS)),
    Group(".pred", (AGGREGATE_GUARD, FIRST_WARP)),
)

# A kernel with events, marks or predicated records (``events_to_ptx``).
EVENT_TAG = "%pik_ev_tag"  # a tag with the event's runtime index in it
EVENT_ON = "%pik_ev_on"  # a guarded record's predicate is not 0
EVENTS = (Group(".b32", (EVENT_TAG,)), Group(".pred", (EVENT_ON,)))

# A kernel whose pairs are staged in shared memory (``staging``).
STAGE = "%pik_sh"  # the unit's stage
STAGE_SLOT = "%pik_ss"  # a pair's slot in it; at the exit, the bytes to copy
STAGE_COPY = "%pik_sq"  # the writer lane has slots to copy
STAGING = (Group(".b32", (STAGE, STAGE_SLOT)), Group(".pred", (STAGE_COPY,)))


def declarations(
    *,
    pairs: int = 0,
    compact_pairs: bool = False,
    sampled: bool = False,
    launch_sized: bool = False,
    aggregate_scopes: int = 0,
    events: bool = False,
    staged: bool = False,
) -> list[str]:
    """The ``.reg`` lines of a kernel's registers: the frame's, then those of each group the
    kernel uses, in this order."""
    lines = [group.declaration() for group in FRAME]
    if pairs:
        lines.append(PAIR_BEGIN.declaration(pairs))
    if pairs and compact_pairs:
        lines += [group.declaration() for group in COMPACT_PAIRS]
    if sampled:
        lines += [group.declaration() for group in SAMPLING]
    if launch_sized:
        lines.append(LAUNCH_SIZES.declaration())
    if aggregate_scopes:
        lines += [
            SCOPE_BEGIN.declaration(aggregate_scopes),
            OPEN.declaration(-(-aggregate_scopes // OPEN_BITS)),
            *(group.declaration() for group in AGGREGATE),
        ]
    if events:
        lines += [group.declaration() for group in EVENTS]
    if staged:
        lines += [group.declaration() for group in STAGING]
    return lines
