"""The PTX of aggregate mode: per-scope statistics instead of a trace, for ``convert-pikgpu-to-ptx``.

Each scope ``k`` has one mutable register, ``SCOPE_BEGIN[k]``, holding its latest begin clock
(the low 32 bits of the SM clock, as trace records hold), and one bit in ``OPEN[k // 32]``
saying that a begin is waiting for its end. So a begin and its end may lie in different blocks
or loop iterations, and the buffer's size depends on the scope count alone:

- a begin (``pikgpu.aggregate_begin``) sets the scope's bit, then reads the clock (the bit's
  update is outside the measured time);
- an end (``pikgpu.aggregate_end``) reads the clock first, clears the scope's bit and computes
  the operands of ``d = end - begin`` (wrapping u32 arithmetic); if the bit was set, the
  unit's writer lane (``WRITER``, as in a trace) branches into four fire-and-forget
  reductions, which never wait for memory: ``red.add.u64`` of ``d`` to the sum,
  ``red.max.u32`` of ``d`` to the max and of ``~d`` to the inverted min, and ``red.add.u32``
  of one to histogram bin ``min(31, bfind(d) + 1)``, ``layout.histogram_bin``. An end whose
  scope is not open counts nothing;
- in the prologue, the lanes of the unit's first warp zero its statistics, 16 bytes each per
  round, and ``bar.warp.sync`` orders those stores before the writer lane's reductions (it
  orders memory among the threads that take part in it). The pool reuses chunks without
  clearing them, and zero is every statistic's identity (``layout.AGGREGATE_STATS_DTYPE``).
  Every ``SCOPE_BEGIN`` starts at 0, so that an end with no begin before it reads a written
  register.

The reductions address the unit's statistics from ``STATS``, each lane's own first chunk
of them, which for the writer lane 0 is the statistics themselves: ptxas turns a reduction
whose address it sees is uniform across the warp into a warp-aggregated one (a vote, a warp
reduce and an elected lane, behind a branch each), several times the cost of four plain
``RED`` instructions behind one branch. The branch is the PTX's, not one ``@p red`` each:
ptxas turns every predicated reduction into a branch of its own. The offsets of a scope's
fields are fixed at compile time (``layout.BufferLayout.stats_offset``), inside the unit's own
segment. docs/PERFORMANCE.md ("Aggregate mode") has the SASS of the shapes tried.
"""

from __future__ import annotations

from proton_ik.contract.layout import (
    AGGREGATE_STATS_BYTES,
    AGGREGATE_STATS_DTYPE,
    HISTOGRAM_BINS,
    THREADS_PER_WARP,
    field_offset,
)
from proton_ik.dialect.pikgpu import AggregateBeginOp, AggregateEndOp, SegmentSetupOp
from proton_ik.lowering.registers import (
    ADDRESS,
    AGGREGATE_GUARD,
    CLOCK,
    DURATION,
    DURATION64,
    DURATION_INVERTED,
    FIRST_WARP,
    LANE,
    OPEN,
    OPEN_BITS,
    RECORDS,
    SCOPE_BEGIN,
    STATS,
    TEMP,
    WARP,
    WRITER,
)

ZERO_LABEL = "$pik_zero_stats"
END_LABEL = "$pik_end_"  # and the end's PTX line: where an end without its reductions goes on
CHUNK_BYTES = 16  # one st.global.v4.b32 of zeros

_SUM = field_offset(AGGREGATE_STATS_DTYPE, "sum")
_MAX = field_offset(AGGREGATE_STATS_DTYPE, "max")
_MIN_INVERTED = field_offset(AGGREGATE_STATS_DTYPE, "min_inverted")
_BINS = field_offset(AGGREGATE_STATS_DTYPE, "bins")
_BIN_BYTES = AGGREGATE_STATS_DTYPE["bins"].base.itemsize


def prologue(setup: SegmentSetupOp) -> list[str]:
    """After the trace prologue (which leaves the unit's first statistics at ``RECORDS``):
    zero the unit's statistics and close every scope."""
    layout = setup.layout
    chunks = layout.aggregate_scopes * AGGREGATE_STATS_BYTES // CHUNK_BYTES
    rounds = -(-chunks // THREADS_PER_WARP)
    granularity = setup.granularity_enum
    # Lanes of the unit's first warp zero it: every warp for warps, one in four or one in all.
    warps = granularity.fixed_warps
    if warps == 1:
        first_warp: list[str] = []
        in_range = f"\tsetp.lt.u32 \t{AGGREGATE_GUARD}, {TEMP}, {chunks};"
    else:
        if warps is not None:  # the first warp of each unit of several warps
            first_warp = [
                f"\tand.b32 \t{DURATION}, {WARP}, {warps - 1};",
                f"\tsetp.eq.u32 \t{FIRST_WARP}, {DURATION}, 0;",
            ]
        else:
            first_warp = [f"\tsetp.eq.u32 \t{FIRST_WARP}, {WARP}, 0;"]
        in_range = f"\tsetp.lt.and.u32 \t{AGGREGATE_GUARD}, {TEMP}, {chunks}, {FIRST_WARP};"
    flags = -(-layout.aggregate_scopes // OPEN_BITS)
    return [
        "\t// pik aggregate prologue: zero the unit's statistics, then order them before its reductions",
        *first_warp,
        f"\tmad.wide.u32 \t{STATS}, {LANE}, {CHUNK_BYTES}, {RECORDS};",
        f"\tmov.b64 \t{ADDRESS}, {STATS};",
        f"\tmov.u32 \t{TEMP}, {LANE};",
        f"{ZERO_LABEL}:",
        in_range,
        f"\t@{AGGREGATE_GUARD} st.global.v4.b32 \t[{ADDRESS}], {{0, 0, 0, 0}};",
        f"\tadd.s64 \t{ADDRESS}, {ADDRESS}, {THREADS_PER_WARP * CHUNK_BYTES};",
        f"\tadd.s32 \t{TEMP}, {TEMP}, {THREADS_PER_WARP};",
        # lane + 32 r < 32 rounds exactly while r < rounds, for every lane: the branch is uniform.
        f"\tsetp.lt.u32 \t{AGGREGATE_GUARD}, {TEMP}, {rounds * THREADS_PER_WARP};",
        f"\t@{AGGREGATE_GUARD} bra.uni \t{ZERO_LABEL};",
        "\tbar.warp.sync \t-1;",
        *(f"\tmov.u32 \t{OPEN[word]}, 0;" for word in range(flags)),
        *(f"\tmov.u32 \t{SCOPE_BEGIN[scope]}, 0;" for scope in range(layout.aggregate_scopes)),
    ]


def _flag(scope: int) -> tuple[str, int]:
    return OPEN[scope // OPEN_BITS], 1 << scope % OPEN_BITS


def begin(op: AggregateBeginOp) -> list[str]:
    scope = op.scope_id
    flags, bit = _flag(scope)
    return [
        "\t// pik aggregate begin",
        f"\tor.b32 \t{flags}, {flags}, {bit:#x};",
        f"\tmov.u32 \t{SCOPE_BEGIN[scope]}, %clock;",
    ]


def end(op: AggregateEndOp, site: int) -> list[str]:
    """The end at PTX line ``site``, which names its label."""
    scope = op.scope_id
    flags, bit = _flag(scope)
    stats = scope * AGGREGATE_STATS_BYTES
    done = f"{END_LABEL}{site}"
    return [
        "\t// pik aggregate end",
        f"\tmov.u32 \t{CLOCK}, %clock;",
        f"\tand.b32 \t{TEMP}, {flags}, {bit:#x};",
        f"\tsetp.ne.and.u32 \t{AGGREGATE_GUARD}, {TEMP}, 0, {WRITER};",
        f"\tand.b32 \t{flags}, {flags}, {~bit & 0xFFFFFFFF:#x};",
        f"\tsub.u32 \t{DURATION}, {CLOCK}, {SCOPE_BEGIN[scope]};",
        f"\tcvt.u64.u32 \t{DURATION64}, {DURATION};",
        f"\tnot.b32 \t{DURATION_INVERTED}, {DURATION};",
        # bfind: the top set bit's position, 0xFFFFFFFF for 0, so + 1 is the bit length, 0 for 0.
        f"\tbfind.u32 \t{TEMP}, {DURATION};",
        f"\tadd.u32 \t{TEMP}, {TEMP}, 1;",
        f"\tmin.u32 \t{TEMP}, {TEMP}, {HISTOGRAM_BINS - 1};",
        f"\tmad.wide.u32 \t{ADDRESS}, {TEMP}, {_BIN_BYTES}, {STATS};",
        # Only the reductions behind the branch: ptxas then keeps the constant 1 in a register.
        f"\t@!{AGGREGATE_GUARD} bra \t{done};",
        f"\tred.global.add.u64 \t[{STATS}+{stats + _SUM}], {DURATION64};",
        f"\tred.global.max.u32 \t[{STATS}+{stats + _MAX}], {DURATION};",
        f"\tred.global.max.u32 \t[{STATS}+{stats + _MIN_INVERTED}], {DURATION_INVERTED};",
        f"\tred.global.add.u32 \t[{ADDRESS}+{stats + _BINS}], 1;",
        f"{done}:",
    ]
