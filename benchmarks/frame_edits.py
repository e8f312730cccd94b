"""The frame and record experiments of ``frame_variants`` as text edits of an instrumented
kernel's PTX (``lowering/pikgpu_to_ptx.py`` emits it), each refused when it finds nothing to
edit, so that no variant times the frame unchanged. ``scope_parts`` applies them to a part named
``frame/<name>`` or ``full/<name>``; ``frame_variants`` times them.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from proton_ik.lowering.stores_ptx import POLICY

EXIT = "$pik_exit:"
STORE = re.compile(r"^\t@%pik_[hw] st\.global\.\S+\s+\[[^\]]+\], \{[^}]*\};$", re.MULTILINE)
START_READS = ("\tmov.u32 \t%pik_start_clock, %clock;", "\tmov.u32 \t%pik_start_time, %globaltimer_lo;")
END_READS = ("\tmov.u64 \t%pik_clk64, %clock64;", "\tmov.u64 \t%pik_gtime, %globaltimer;")


def _split(ptx: str) -> tuple[str, str]:
    """(before the epilogue, the epilogue on)."""
    at = ptx.index(EXIT)
    return ptx[:at], ptx[at:]


def _changed(name: str, before: str, after: str) -> str:
    if after == before:
        raise RuntimeError(f"{name}: the frame's PTX holds none of the text it edits")
    return after


def no_globaltimer(ptx: str) -> str:
    """%globaltimer never read: the start and end times are the clocks."""
    edited = ptx.replace(START_READS[1], "\tmov.u32 \t%pik_start_time, %pik_start_clock;")
    return _changed(
        "no_globaltimer", ptx, edited.replace(END_READS[1], "\tmov.u64 \t%pik_gtime, %pik_clk64;")
    )


def no_time_reads(ptx: str) -> str:
    """Neither the clock nor %globaltimer read, at the start or the end: constants in their place."""
    edited = ptx
    for read in (*START_READS, *END_READS):
        edited = edited.replace(read, read.split(", %")[0] + ", 0;")
    return _changed("no_time_reads", ptx, edited)


def no_smid(ptx: str) -> str:
    """%smid never read."""
    return _changed("no_smid", ptx, ptx.replace("\tmov.u32 \t%pik_sm, %smid;", "\tmov.u32 \t%pik_sm, 0;"))


def no_header_stores(ptx: str) -> str:
    """No header written: neither the unit's times and counts nor the CTA's."""
    head, tail = _split(ptx)
    return _changed("no_header_stores", ptx, head + STORE.sub("", tail))


def no_cta_header(ptx: str) -> str:
    """The CTA header not written (thread 0's three stores); the unit headers are."""
    head, tail = _split(ptx)
    kept = "\n".join(line for line in tail.split("\n") if not line.startswith("\t@%pik_h st.global"))
    return _changed("no_cta_header", ptx, head + kept)


def no_unit_times(ptx: str) -> str:
    """The unit header's start and end times not written; its counts are, and so is the CTA header."""
    head, tail = _split(ptx)
    kept = "\n".join(
        line
        for line in tail.split("\n")
        if not (line.startswith("\t@%pik_w st.global.v2.u64") and "%pik_unit_base" in line)
    )
    return _changed("no_unit_times", ptx, head + kept)


def region_first(ptx: str) -> str:
    """The epilogue computes the CTA's region and the writer lane before it reads the end
    times, so that the special-register reads' latency is behind it when the stores issue."""
    head, tail = _split(ptx)
    lines = tail.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("\tld.param.u64 \t%pik_scratch"))
    end = next(i for i, line in enumerate(lines) if line.startswith("\tsub.s64 \t%pik_unit_base"))
    block = lines[start : end + 1]
    rest = lines[:start] + lines[end + 1 :]
    late = [line for line in rest if line.startswith(("\tsetp.eq.u32 \t%pik_h", "\tmov.u32 \t%pik_sm"))]
    rest = [line for line in rest if line not in late]
    at = next(i for i, line in enumerate(rest) if line == END_READS[0])
    return _changed("region_first", ptx, head + "\n".join(rest[:at] + block + late + rest[at:]))


def one_cta_store(ptx: str) -> str:
    """The CTA header's first 16 bytes only (magic, version, CTA id, %smid): the grid, the unit
    count and the capacity are the host's already."""
    head, tail = _split(ptx)
    kept = "\n".join(
        line
        for line in tail.split("\n")
        if not line.startswith(
            ("\t@%pik_h st.global.v4.b32 \t[%pik_base+16]", "\t@%pik_h st.global.v4.b32 \t[%pik_base+32]")
        )
    )
    return _changed("one_cta_store", ptx, head + kept)


def region_first_one_cta_store(ptx: str) -> str:
    """Both of the above."""
    return one_cta_store(region_first(ptx))


def full_cta_header(ptx: str) -> str:
    """The CTA header's last 16 bytes written too, so that no 32-byte sector of it is partial."""
    line = "\t@%pik_h st.global.v4.b32 \t[%pik_base+32], {"
    at = ptx.index(line)
    end = ptx.index("\n", at) + 1
    extra = "\t@%pik_h st.global.v4.b32 \t[%pik_base+48], {0, 0, 0, 0};\n"
    return _changed("full_cta_header", ptx, ptx[:end] + extra + ptx[end:])


def prologue_stores(ptx: str) -> str:
    """The frame before issue 10's change, for comparison: the CTA header and the unit's start
    times written (and its counts cleared) in the prologue, before the kernel's first loads.
    The epilogue stays as it is: it writes them again."""
    head, tail = _split(ptx)
    cta_stores = [line for line in STORE.findall(tail) if line.startswith("\t@%pik_h")]
    stores = [
        "\tsub.s64 \t%pik_unit_base, %pik_rec, 48;",
        "\tsetp.eq.u32 \t%pik_h, %pik_tid, 0;",
        "\tmov.u32 \t%pik_sm, %smid;",
        *cta_stores,
        *END_READS,
        "\t@%pik_w st.global.v2.u64 \t[%pik_unit_base+0], {%pik_clk64, %pik_gtime};",
        "\t@%pik_w st.global.v4.b32 \t[%pik_unit_base+32], {0, 0, 0, 0};",
    ]
    edited = head.replace(START_READS[1], START_READS[1] + "\n" + "\n".join(stores), 1)
    return _changed("prologue_stores", ptx, edited + tail)


UNIT_HEADER_STORE = re.compile(
    r"^\t@%pik_w st\.global(?P<shape>\.\S+) \t\[%pik_unit_base\+(?P<offset>\d+)\], (?P<values>\{[^}]*\});$",
    re.MULTILINE,
)
CTA_HEADER_STORE = re.compile(
    r"^\t@%pik_h st\.global(?P<shape>\.\S+) \t\[%pik_base\+(?P<offset>\d+)\], (?P<values>\{[^}]*\});$",
    re.MULTILINE,
)
HEADER_WARPS = 32  # a CTA's warps at most: each stages its unit header in 48 bytes of its own
HEADER_BYTES = 48  # what the frame writes of a unit header, and of the CTA header


def headers_bulk(ptx: str) -> str:
    """The unit header and the CTA header written into shared memory and copied out by one bulk
    copy each (``cp.async.bulk``), the exit waiting only until shared memory has been read, not
    for the writes to land: whether the exit's cost (the frame's whole cost on short CTAs) is
    its stores' global writes, which the copy engine would then carry after the CTA retires."""
    head, tail = _split(ptx)

    def staged(match: re.Match[str], predicate: str, base: str) -> str:
        return (
            f"\t@%pik_{predicate} st.shared{match['shape']} \t[{base}+{match['offset']}], {match['values']};"
        )

    def copy(predicate: str, target: str, stage: str) -> str:
        return (
            f"\t@%pik_{predicate} fence.proxy.async.shared::cta;\n"
            f"\t@%pik_{predicate} cp.async.bulk.global.shared::cta.bulk_group \t[{target}], [{stage}], {HEADER_BYTES};\n"
            f"\t@%pik_{predicate} cp.async.bulk.commit_group;\n"
        )

    edited = UNIT_HEADER_STORE.sub(lambda m: staged(m, "w", "%pik_hs"), tail)
    edited = CTA_HEADER_STORE.sub(lambda m: staged(m, "h", "%pik_hc"), edited)
    last_unit = edited.rindex("[%pik_hs+")
    at = edited.index("\n", last_unit) + 1
    edited = edited[:at] + copy("w", "%pik_unit_base", "%pik_hs") + edited[at:]
    last_cta = edited.rindex("[%pik_hc+")
    at = edited.index("\n", last_cta) + 1
    edited = edited[:at] + copy("h", "%pik_base", "%pik_hc") + edited[at:]
    edited = edited.replace(
        "\tsub.s64 \t%pik_unit_base, %pik_rec, 48;\n",
        "\tsub.s64 \t%pik_unit_base, %pik_rec, 48;\n\tmov.u32 \t%pik_hc, pik_headers;\n"
        f"\tmad.lo.u32 \t%pik_hs, %pik_warp, {HEADER_BYTES}, %pik_hc;\n"
        f"\tadd.u32 \t%pik_hc, %pik_hc, {HEADER_WARPS * HEADER_BYTES};\n",
        1,
    )
    edited = edited.replace("\tret;", "\tcp.async.bulk.wait_group.read \t0;\n\tret;")
    whole = (
        head.replace("\t.reg .pred \t%pik_w", "\t.reg .b32 \t%pik_hs, %pik_hc;\n\t.reg .pred \t%pik_w", 1)
        + edited
    )
    at = whole.index(".visible .entry")
    stage = f".shared .align 16 .b8 pik_headers[{(HEADER_WARPS + 1) * HEADER_BYTES}];\n\n"
    return _changed("headers_bulk", ptx, whole[:at] + stage + whole[at:])


FRAME_EXPERIMENTS: dict[str, Callable[[str], str]] = {
    change.__name__: change
    for change in (
        no_globaltimer,
        no_time_reads,
        no_smid,
        no_header_stores,
        no_cta_header,
        no_unit_times,
        full_cta_header,
        prologue_stores,
        region_first,
        one_cta_store,
        region_first_one_cta_store,
        headers_bulk,
    )
}
RECORD_STORE = re.compile(
    r"^\t@%pik_w st\.global\.L2::cache_hint(?P<shape>\.v[24]\.(?:b32|u64)) \t\[%pik_a\], "
    r"(?P<values>\{[^}]*\}), %pik_pol;$",
    re.MULTILINE,
)
MAX_WARPS = 32
_COUNT = "\tadd.s32 \t%pik_n, %pik_n, 1;\n"


def _to_shared(ptx: str, warp_bytes: int, registers: str = "", slot: str = "[%pik_sh]") -> str:
    """Every record's store sent to shared memory, at ``slot`` in the warp's ``warp_bytes``
    (``%pik_sh``) of one static array, which ``registers`` (declarations) may address."""
    edited = RECORD_STORE.sub(lambda m: f"\t@%pik_w st.shared{m['shape']} \t{slot}, {m['values']};", ptx)
    edited = edited.replace(
        "\t.reg .pred \t%pik_w", f"\t.reg .b32 \t%pik_sh;\n{registers}\t.reg .pred \t%pik_w", 1
    )
    edited = edited.replace(
        "\tmov.u32 \t%pik_n, 0;",
        f"\tmov.u32 \t%pik_n, 0;\n\tmov.u32 \t%pik_sh, pik_records;\n"
        f"\tmad.lo.u32 \t%pik_sh, %pik_warp, {warp_bytes}, %pik_sh;",
        1,
    )
    at = edited.index(".visible .entry")
    return edited[:at] + f".shared .align 16 .b8 pik_records[{MAX_WARPS * warp_bytes}];\n\n" + edited[at:]


def _copied_every(ptx: str, every: int, copy: tuple[str, ...]) -> str:
    """After each entry's count, the lines ``copy`` where the count is a multiple of ``every``."""
    pieces = ptx.split(_COUNT)
    out = pieces[0]
    for index, piece in enumerate(pieces[1:]):
        label = f"$pik_copied_{index}"
        guard = (
            f"\tand.b32 \t%pik_cq, %pik_n, {every - 1};",
            "\tsetp.ne.u32 \t%pik_cf, %pik_cq, 0;",
            f"\t@%pik_cf bra \t{label};",
        )
        out += _COUNT + "".join(f"{line}\n" for line in (*guard, *copy, f"{label}:")) + piece
    return out


def records_to_shared(ptx: str) -> str:
    """Each record's store goes to a 16-byte slot of the warp's in shared memory instead of the
    global buffer (the records are lost: a timing experiment). Whether a global store per record
    is what a record costs a memory-bound loop, where Proton's shared-memory mode wins."""
    return _changed("records_to_shared", ptx, _to_shared(ptx, 16))


COPY_EVERY = 16  # entries per bulk copy in records_copied_every_16


def records_copied_every_16(ptx: str) -> str:
    """``records_to_shared``, and every 16th entry one bulk copy of 256 bytes of the warp's
    shared memory to the start of its ring, as a stage double-buffered in shared memory would
    copy (the records are lost: a timing experiment). What such copies would cost a loop."""
    edited = _to_shared(ptx, 2 * COPY_EVERY * 16, "\t.reg .b32 \t%pik_cq;\n\t.reg .pred \t%pik_cf;\n")
    copy = (
        "\t@%pik_w fence.proxy.async.shared::cta;",
        f"\t@%pik_w cp.async.bulk.global.shared::cta.bulk_group \t[%pik_rec], [%pik_sh], {COPY_EVERY * 16};",
        "\t@%pik_w cp.async.bulk.commit_group;",
        "\t@%pik_w cp.async.bulk.wait_group.read \t1;",
    )
    head, tail = _copied_every(edited, COPY_EVERY, copy).rsplit("\tret;", 1)
    return _changed(
        "records_copied_every_16", ptx, head + "\t@%pik_w cp.async.bulk.wait_group.read \t0;\n\tret;" + tail
    )


def records_lane_copied(ptx: str) -> str:
    """Each record's store into slot ``count % 8`` of 128 bytes of the warp's shared memory, and
    every 8th entry the warp's lanes copy those 128 bytes to the start of its ring, one 32-bit
    word each: one shared load and one coalesced global store, no proxy fence (the records are
    lost: a timing experiment). What a copy that waits for nothing would cost a loop."""
    registers = (
        "\t.reg .b32 \t%pik_cq, %pik_cs, %pik_cl, %pik_cv;\n\t.reg .b64 \t%pik_ca;\n\t.reg .pred \t%pik_cf;\n"
    )
    edited = _to_shared(ptx, 128, registers, "[%pik_cs]")
    # Each store's slot, count % 8, just before it.
    edited = re.sub(
        r"^(\t@%pik_w st\.shared\.)",
        "\tand.b32 \t%pik_cq, %pik_n, 7;\n\tmad.lo.u32 \t%pik_cs, %pik_cq, 16, %pik_sh;\n\\1",
        edited,
        flags=re.MULTILINE,
    )
    copy = (
        "\tbar.warp.sync \t-1;",
        "\tmov.u32 \t%pik_cl, %laneid;",
        "\tmad.lo.u32 \t%pik_cs, %pik_cl, 4, %pik_sh;",
        "\tld.shared.b32 \t%pik_cv, [%pik_cs];",
        "\tmul.wide.u32 \t%pik_ca, %pik_cl, 4;",
        "\tadd.s64 \t%pik_ca, %pik_ca, %pik_rec;",
        "\tst.global.b32 \t[%pik_ca], %pik_cv;",
    )
    return _changed("records_lane_copied", ptx, _copied_every(edited, 8, copy))


_SLOT = re.compile(r"^\tand\.b32 \t%pik_t, %pik_n, \d+;$", re.MULTILINE)


def records_never_stored(ptx: str) -> str:
    """Every record's store stays in the code, predicated off at run time by a test ptxas cannot
    fold (the buffer's address is never 1): the record's instructions, issued, with no memory
    request (the records are lost: a timing experiment). Whether a loop pays for a record's
    instructions or for its write."""
    never = "\tsetp.eq.and.u64 \t%pik_w, %pik_scratch, 1, %pik_w;\n"
    edited = ptx.replace("\tmov.u32 \t%pik_n, 0;\n", never + "\tmov.u32 \t%pik_n, 0;\n", 1)
    return _changed("records_never_stored", ptx, edited)


def records_to_one_slot(ptx: str) -> str:
    """Every record stored to its unit's first slot, over and over: the same global stores, all
    hitting one line of L2, so nothing of ours reaches DRAM (the records are lost: a timing
    experiment). Whether a loop pays for the writes' path through the SM or for their traffic
    to DRAM."""
    return _changed("records_to_one_slot", ptx, _SLOT.sub("\tmov.u32 \t%pik_t, 0;", ptx))


_PAIR_STORE = re.compile(
    r"^\t@%pik_w st\.global\.L2::cache_hint\.v4\.b32 \t\[%pik_a\], "
    r"\{\w+, (?P<begin>%pik_b\d+), \w+, %pik_c\}, %pik_pol;$",
    re.MULTILINE,
)


def records_default_l2_policy(ptx: str) -> str:
    """Every record's store without its L2 eviction policy (``stores_ptx``: ``evict_last``), as
    before it: what the policy gains."""
    edited = RECORD_STORE.sub(lambda m: f"\t@%pik_w st.global{m['shape']} \t[%pik_a], {m['values']};", ptx)
    return _changed("records_default_l2_policy", ptx, edited)


def records_evict_first(ptx: str) -> str:
    """Every record's line the first to leave L2 (``L2::evict_first``) instead of the last:
    whether the records' lines cost the kernel its own lines in L2."""
    return _changed(
        "records_evict_first", ptx, ptx.replace(POLICY, POLICY.replace("L2::evict_last", "L2::evict_first"))
    )


def records_half_bytes(ptx: str) -> str:
    """Each pair written as 8 bytes (its two clocks, no tags) at an 8-byte stride: half the bytes
    of a 16-byte entry, as a layout of 8-byte pairs would write (the records are lost: a timing
    experiment). What halving the bytes would gain."""
    edited = ptx.replace(
        "\tmad.wide.u32 \t%pik_a, %pik_t, 16, %pik_rec;", "\tmad.wide.u32 \t%pik_a, %pik_t, 8, %pik_rec;"
    )
    edited = _PAIR_STORE.sub(
        lambda m: (
            f"\t@%pik_w st.global.L2::cache_hint.v2.b32 \t[%pik_a], {{{m['begin']}, %pik_c}}, %pik_pol;"
        ),
        edited,
    )
    return _changed("records_half_bytes", ptx, edited)


_RECORD_CLOCK = re.compile(r"^\tmov\.u32 \t(?P<register>%pik_(?:b\d+|c)), %clock;$", re.MULTILINE)


def records_without_clocks(ptx: str) -> str:
    """Every record's clock read replaced by a copy of the count, the stores kept: whether a loop
    pays for its records' clock reads, which ptxas moves nothing across (the records are wrong:
    a timing experiment)."""
    return _changed(
        "records_without_clocks", ptx, _RECORD_CLOCK.sub(r"\tmov.u32 \t\g<register>, %pik_n;", ptx)
    )


_PAIR_END = re.compile(
    r"^(?P<clock>\tmov\.u32 \t%pik_c, %clock;\n)(?P<slot>\tand\.b32 \t%pik_t, %pik_n, \d+;\n"
    r"\tmad\.wide\.u32 \t%pik_a, %pik_t, \d+, %pik_rec;\n)(?P<store>\t@%pik_w st\.global\S* \t\[%pik_a\], "
    r"\{[^}]*%pik_c\}(?:, %pik_pol)?;\n)(?P<count>\tadd\.s32 \t%pik_n, %pik_n, 1;\n)",
    re.MULTILINE,
)


def records_slot_before_end_clock(ptx: str) -> str:
    """Each pair's slot, address and count computed before its end's clock read, not after: only
    the store follows the clock read, where the kernel's next instructions wait behind whatever
    comes after it (ptxas moves nothing across a clock read). The records are as before; the
    slot arithmetic moves inside the scope's end."""
    edited = _PAIR_END.sub(lambda m: m["slot"] + m["count"] + m["clock"] + m["store"], ptx)
    return _changed("records_slot_before_end_clock", ptx, edited)


RECORD_EXPERIMENTS: dict[str, Callable[[str], str]] = {
    change.__name__: change
    for change in (
        records_to_shared,
        records_copied_every_16,
        records_lane_copied,
        records_never_stored,
        records_to_one_slot,
        records_default_l2_policy,
        records_evict_first,
        records_half_bytes,
        records_without_clocks,
        records_slot_before_end_clock,
    )
}
