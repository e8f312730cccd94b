"""A kernel's scope pairs held in the warp's lanes, one record per lane, stored 16 entries at once.

In loops a record's cost is its global store (docs/PERFORMANCE.md, issue 10): dropping the
stores took softmax from +2.5% to -0.2%, and every copy through shared memory gave most of that
back. So, where every entry of a kernel is a scope pair, the unit's warp keeps its newest
records in registers instead, one record per lane: entry ``count``'s begin goes to lane
``2 * count % 32`` and its end to the next lane, whose predicated moves write the clock (and,
where the pairs' tags differ, the tag) into ``%pik_lc`` (``%pik_lt``); the other lanes' moves do
nothing. When a pair's end fills lane 31, the warp's 32 lanes store their records to the 16
entries' slots: one coalesced 256-byte store per field, where the writer lane stored 16 times.
The epilogue stores the lanes that hold records not stored yet.

One register per lane for a record, not three for an entry: the entry's registers stay live
across the loop, and in softmax three of them took ptxas from 31 registers to 40 (6 resident
CTAs of 8). Each record's lane comes from the count at its site, so no predicate lives across
the kernel's code. A pair with another pair's end between its begin and its end keeps its
begin in its own register until its end, as without lanes.

Only where a group's slots are 16 consecutive ones: a capacity that is a multiple of 16, or a
bound the capacity holds (no group fills before the epilogue stores it). Only scope pairs (a
single begin's store would come inside its scope), granularity=warp (every lane of the unit's
warp holds a record), and no aggregate mode. The buffer's bytes are what they were, entry for
entry (``contract.layout``), so nothing downstream changes.
"""

from __future__ import annotations

from proton_ik.contract.layout import (
    ENTRY_DTYPE,
    RECORD_BYTES,
    RECORD_DTYPE,
    THREADS_PER_WARP,
    make_tag,
    scalar_fields,
)

LANES = THREADS_PER_WARP
GROUP = LANES // 2  # entries a group store writes: two records, two lanes, each
_CLOCK, _TAG = "%pik_lc", "%pik_lt"  # the record this lane holds
_TAKES = "%pik_lp"  # this lane takes the record at this site
_FULL = "%pik_lf"  # the group is full (at a pair's end), or this lane holds a record (the epilogue)
# A pair's end tag from its begin tag: the begin carries the pair bit, the end the end bit.
_END_FROM_BEGIN = (make_tag(0, True) - make_tag(0, False, paired=True)) & 0xFFFFFFFF
_TAG_OFFSET, _CLOCK_OFFSET = (scalar_fields(RECORD_DTYPE)[name][0] for name in ("tag", "clock"))
assert scalar_fields(ENTRY_DTYPE)["second.tag"][0] == RECORD_BYTES  # lane 2k + 1: entry k's end


def applies(capacity: int, bound: int | None) -> bool:
    """Whether a unit's ring of ``capacity`` entries takes a group's 16 entries as 16 consecutive
    slots: a multiple of 16, or a bound (``None``: none) it holds, so that no group fills before
    the epilogue stores it."""
    return capacity % GROUP == 0 or (bound is not None and bound <= capacity)


def declarations(one_tag: bool) -> list[str]:
    """The lane's record registers; ``one_tag``: every pair has the same tags, which the stores
    compute from the lane."""
    record = [_CLOCK] if one_tag else [_CLOCK, _TAG]
    return [f"\t.reg .b32 \t{', '.join(record)};", f"\t.reg .pred \t{_TAKES}, {_FULL};"]


def _takes(end: bool) -> list[str]:
    """``%pik_lp``: this lane takes the pair's begin (lane ``2 * count % 32``) or its end."""
    return [
        "\tmov.u32 \t%pik_lane, %laneid;",
        "\tshl.b32 \t%pik_t, %pik_n, 1;",
        *(["\tadd.s32 \t%pik_t, %pik_t, 1;"] if end else []),
        f"\tand.b32 \t%pik_t, %pik_t, {LANES - 1};",
        f"\tsetp.eq.u32 \t{_TAKES}, %pik_t, %pik_lane;",
    ]


def begin_into_lane(tag: int | None) -> list[str]:
    """A pair's begin read straight into the lane that takes it (``tag``: where tags differ)."""
    return [
        "\t// pik pair begin, into its lane",
        *_takes(end=False),
        *([] if tag is None else [f"\t@{_TAKES} mov.u32 \t{_TAG}, {tag};"]),
        f"\t@{_TAKES} mov.u32 \t{_CLOCK}, %clock;",
    ]


def pair_end(begin: str | None, tag: int, one_tag: bool, capacity: int, site: int) -> list[str]:
    """A pair's end: its clock into the lane that takes it (and first its begin, from register
    ``begin``, where it waited there); the pair that fills lane 31 stores the group."""
    kept = f"$pik_kept_{site}"
    nested_begin = []
    if begin is not None:
        nested_begin = [
            *_takes(end=False),
            *([] if one_tag else [f"\t@{_TAKES} mov.u32 \t{_TAG}, {tag};"]),
            f"\t@{_TAKES} mov.u32 \t{_CLOCK}, {begin};",
        ]
    end_tag = (tag + _END_FROM_BEGIN) & 0xFFFFFFFF
    return [
        "\t// pik pair end, into its lane",
        "\tmov.u32 \t%pik_c, %clock;",
        *nested_begin,
        *_takes(end=True),
        *([] if one_tag else [f"\t@{_TAKES} mov.u32 \t{_TAG}, {end_tag};"]),
        f"\t@{_TAKES} mov.u32 \t{_CLOCK}, %pik_c;",
        "\tadd.s32 \t%pik_n, %pik_n, 1;",
        f"\tand.b32 \t%pik_t, %pik_n, {GROUP - 1};",
        f"\tsetp.ne.u32 \t{_FULL}, %pik_t, 0;",
        f"\t@{_FULL} bra.uni \t{kept};",
        f"\tsub.s32 \t%pik_t, %pik_n, {GROUP};",
        *_store("%pik_w", tag if one_tag else None, capacity),
        f"{kept}:",
    ]


def epilogue(tag: int | None, capacity: int) -> list[str]:
    """The records the lanes hold that no group store has stored: lanes below
    ``2 * (count % 16)``, before the epilogue sets ``%pik_w`` to the writer lane again."""
    return [
        "\t// pik lanes: the records not stored yet",
        f"\tand.b32 \t%pik_t, %pik_n, {GROUP - 1};",
        "\tshl.b32 \t%pik_c, %pik_t, 1;",
        f"\tsetp.lt.and.u32 \t{_FULL}, %pik_lane, %pik_c, %pik_w;",
        "\tsub.s32 \t%pik_t, %pik_n, %pik_t;",
        *_store(_FULL, tag, capacity),
    ]


def _store(guard: str, tag: int | None, capacity: int) -> list[str]:
    """Each lane's record to its half of entry (``%pik_t``, the group's first entry, + lane / 2):
    begins in even lanes, ends in odd ones. ``tag``: the one begin tag of a kernel whose pairs all
    have it (a lane's tag is then the begin's or the end's, by its parity), else each lane's
    ``%pik_lt``. A 4-byte store each, not one of 8: a vector store's registers must be an aligned
    pair, which would hold the lane's record in one across the kernel's code."""
    tag_lines = []
    if tag is not None:
        tag_lines = [
            "\tand.b32 \t%pik_c, %pik_lane, 1;",
            f"\tmad.lo.u32 \t%pik_c, %pik_c, {_END_FROM_BEGIN}, {tag};",
        ]
    record_tag = _TAG if tag is None else "%pik_c"
    return [
        "\tmov.u32 \t%pik_lane, %laneid;",
        "\tshr.u32 \t%pik_c, %pik_lane, 1;",
        "\tadd.s32 \t%pik_t, %pik_t, %pik_c;",
        f"\tand.b32 \t%pik_t, %pik_t, {capacity - 1};",
        "\tshl.b32 \t%pik_t, %pik_t, 1;",
        "\tand.b32 \t%pik_c, %pik_lane, 1;",
        "\tadd.s32 \t%pik_t, %pik_t, %pik_c;",  # the record's index: entry * 2 + (end or not)
        f"\tmad.wide.u32 \t%pik_a, %pik_t, {RECORD_BYTES}, %pik_rec;",
        *tag_lines,
        f"\t@{guard} st.global.b32 \t[%pik_a+{_TAG_OFFSET}], {record_tag};",
        f"\t@{guard} st.global.b32 \t[%pik_a+{_CLOCK_OFFSET}], {_CLOCK};",
    ]
