"""The profile buffer layout: the one contract between the writer (lowering) and the reader (viewer).

Every launch gets ``num_ctas * cta_bytes`` bytes of Triton's ``profile_scratch``. CTA ``c`` owns
bytes ``[c * cta_bytes, (c + 1) * cta_bytes)``:

    +----------------------+  CTA header, written once by thread 0, at its exit
    | CTA_HEADER (64 B)    |  magic, version, linear CTA id, %smid, %nctaid, units, capacity,
    |                      |  the CTA's thread-block cluster: its id, the CTA's rank, its CTAs
    +----------------------+
    | unit 0 segment       |  UNIT_HEADER (48 B): start/end clock64 and %globaltimer, the
    |   header + slots     |  slots and the records' tally written; then ``capacity`` slots
    +----------------------+  (8 bytes each in version 3, 16 in version 2)
    | unit 1 segment       |
    | ...                  |
    +----------------------+

A unit is a warp (or a warpgroup, or the whole CTA; see ``Granularity``). Only lane 0 of the
unit's first warp writes. A record is two 32-bit words: a tag (scope id, begin/end:
``contract.tags``) and the low 32 bits of %clock. Slot ``i`` goes to ring position ``i % capacity``; the capacity is a
power of two, so the position is one AND, and no write ever leaves the unit's segment.

**Version 3** (what ``layout=auto``, the default, writes for a kernel whose records sit in a
loop that moves global memory and that has no tensor-core instruction, and ``layout=3`` for
every kernel; docs/PERFORMANCE.md): 8-byte slots, each one self-describing by the top four bits
of its first word (``slot_form``):

- a single record: ``{tag, clock}`` (forms 0 to 3 and 8 to 11: the tag's end bit and kind);
- a scope pair whose duration fits ``COMPACT_DURATION_BITS`` and whose scope id fits
  ``COMPACT_SCOPE_BITS``: one slot ``{compact tag, begin clock}``, the compact tag holding
  ``FORM_COMPACT``, the scope id and the duration in cycles (``compact_tag``), written by one
  8-byte store at the end;
- any other scope pair: two slots, the begin's record (its tag carries ``TAG_PAIR_BIT``: the
  next slot holds its end) and the end's, written at the end;
- a value mark: its record, then ``{payload tag, value}`` (``FORM_PAYLOAD``, the value's
  ``ValueType`` in the payload tag's low bits).

A unit header counts the slots written (``entries``) and ``tally``, twice the slots less the
records (+1 per single record, +2 per two-slot pair, +3 per value mark, 0 for a one-slot pair),
so ``records_written`` is exact however the ring overwrote, in either version.

**Version 2** (``VERSION``, what every other kernel gets): 16-byte entries, each
holding one record (the other 8 bytes left as they were) or a pair (the begin's tag carries
``TAG_PAIR_BIT``); a value mark is one ``VALUE_ENTRY_DTYPE`` entry. Its header's ``tally``
counts the entries that hold one record: twice the entries less the records, as in version 3.

Both headers are written at the exit, so that no store of ours comes before the kernel's first
loads: the start's clock and %globaltimer wait in registers as their low 32 bits, and the
epilogue rebuilds them as the end's values less the 32-bit distances (exact while a unit runs
under 2**32 cycles and 2**32 ns, about 2 s and 4 s). The runtime clears the headers of every
launch it has drained, so a unit that never reached its exit reads as unfinished, with no
entries and no times.

Records of other kinds (``RecordKind``) share the ring: an event's start or end and a mark are
one record each, their tag's ``TAG_INDEX`` bits holding an event's instance (``index=``). A
false predicate writes no slot and counts none.

With sampling (``BufferLayout.sampling``, ``contract.sampling``) the regions are the sampled
CTAs' only and the segments the sampled units' only, each CTA header still naming its linear
CTA id.

In aggregate mode (``BufferLayout.aggregate_scopes`` > 0) there is no ring (the CTA header's
capacity is 0): a unit's segment holds, after its header, one ``AGGREGATE_STATS_DTYPE`` per
scope id (sum, max, inverted min and a log2 histogram of durations in cycles), so its size
depends on the scope count alone. The prologue zeroes them and the writer lane adds each
duration with fire-and-forget reductions (``red.global``); zero is every field's identity,
the minimum being kept as the maximum of ``~duration``. The unit header is as in a trace, with
no entries.

The CTA header's cluster fields (sm_90 and later: ``%clusterid``, ``%cluster_ctarank``,
``%cluster_nctarank``) sit where three reserved words were, which every writer before them set
to 0. A ``cluster_ctas`` of 0 reads "not recorded": an older file, or a kernel compiled for a
target before sm_90, whose epilogue stores 0 there. A CTA launched without clusters records a
cluster of one CTA, its own.

A kernel whose segments are sized at each launch (``contract.launch_bound``: a loop whose trip
count the launch computes from the kernel's arguments) reads its capacity from the low bits of
its ``profile_scratch`` pointer: the runtime adds log2(capacity) to the CTA_ALIGN-aligned buffer
address (``CAPACITY_SHIFT_MASK``), and the kernel masks the bits off before any address is
made. Its CTA headers hold that launch's capacity, and its launch's metadata that launch's
layout, so a reader sees an ordinary buffer.

Bump ``VERSION`` whenever anything in this file changes meaning; additions that keep the
meaning of the bytes written before them (events, sampling, clusters) did not.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from proton_ik.contract.sampling import ALL, Sampling
from proton_ik.contract.tags import MAX_SCOPES

VERSION = 2  # what the lowering writes unless the mode or ``layout=auto`` picks 3 (``Mode.layout``)
READ_VERSIONS = (2, 3)
MAGIC = 0x314B4950  # b"PIK1" read as a little-endian u32
CTA_ALIGN = 128  # alignment of each CTA's region and of the whole buffer
RECORD_BYTES = 8
SLOT_BYTES = 8  # version 3: a record, a one-slot pair or a value's payload
ENTRY_BYTES = 16  # version 2: one record, or a begin/end pair
# A launch-sized kernel's log2(capacity), in its buffer pointer's low bits (below CTA_ALIGN)
CAPACITY_SHIFT_MASK = 0x1F
MAX_CTA_BYTES = 0xFFFFFFFF  # the PTX multiplies the linear CTA id by a 32-bit immediate
THREADS_PER_WARP = 32
WARPS_PER_WARPGROUP = 4
VECTOR_WIDTHS = (2, 4)  # PTX's st.global.v2 and .v4
VECTOR_BYTES = 16  # the widest vector store PTX has

# --- CTA header: 64 bytes --------------------------------------------------------------------
CTA_HEADER_DTYPE = np.dtype(
    [
        ("magic", "<u4"),
        ("version", "<u4"),
        ("cta", "<u4"),  # linear CTA id: x + y * nx + z * nx * ny
        ("smid", "<u4"),
        ("nctaid_x", "<u4"),
        ("nctaid_y", "<u4"),
        ("nctaid_z", "<u4"),
        ("units", "<u4"),
        ("capacity", "<u4"),  # ring slots per unit
        ("cluster", "<u4"),  # linear cluster id: %clusterid x + y * nx + z * nx * ny (%nclusterid)
        ("cluster_rank", "<u4"),  # %cluster_ctarank: the CTA's rank in its cluster
        ("cluster_ctas", "<u4"),  # %cluster_nctarank: CTAs in the cluster; 0: not recorded
        ("reserved", "<u4", (4,)),
    ]
)
CTA_HEADER_BYTES = CTA_HEADER_DTYPE.itemsize

# --- unit header: 48 bytes -------------------------------------------------------------------
UNIT_HEADER_DTYPE = np.dtype(
    [
        ("start_clock", "<u8"),  # rebuilt at the exit from the start's low 32 bits
        ("start_time", "<u8"),  # %globaltimer, ns; rebuilt like start_clock
        ("end_clock", "<u8"),
        ("end_time", "<u8"),
        ("entries", "<u4"),  # entries written, including those the ring overwrote
        ("end_magic", "<u4"),  # MAGIC once the unit reached its epilogue
        ("tally", "<u4"),  # twice the slots less the records written (``records_written``)
        ("reserved", "<u4"),
    ]
)
UNIT_HEADER_BYTES = UNIT_HEADER_DTYPE.itemsize

RECORD_DTYPE = np.dtype([("tag", "<u4"), ("clock", "<u4")])
SLOT_DTYPE = RECORD_DTYPE  # version 3: a record, or a one-slot pair {compact tag, begin clock}
# Version 3: the slot after a value mark's record.
PAYLOAD_DTYPE = np.dtype([("tag", "<u4"), ("value", "<u4")])
ENTRY_DTYPE = np.dtype([("first", RECORD_DTYPE), ("second", RECORD_DTYPE)])
# Version 2: a value mark's entry: its record, then the value's 32 bits and their ``ValueType``.
VALUE_ENTRY_DTYPE = np.dtype([("tag", "<u4"), ("clock", "<u4"), ("value", "<u4"), ("value_type", "<u4")])

assert CTA_HEADER_BYTES == 64 and UNIT_HEADER_BYTES == 48
assert RECORD_DTYPE.itemsize == RECORD_BYTES and ENTRY_DTYPE.itemsize == ENTRY_BYTES
assert SLOT_DTYPE.itemsize == PAYLOAD_DTYPE.itemsize == SLOT_BYTES
assert VALUE_ENTRY_DTYPE.itemsize == ENTRY_BYTES
assert CAPACITY_SHIFT_MASK < CTA_ALIGN and (CAPACITY_SHIFT_MASK + 1) & CAPACITY_SHIFT_MASK == 0


def next_power_of_two(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for ``n`` <= 1): the capacity that holds ``n``
    entries, as the PTX finds a slot with one AND."""
    return 1 << max(n - 1, 0).bit_length()


def min_capacity(version: int) -> int:
    """The fewest ring slots a unit may have: 2 in version 3, where an odd count would leave the
    next unit header off the 16-byte alignment of its vector stores."""
    return 2 if version >= 3 else 1


def ring_capacity(slots: int, version: int = VERSION) -> int:
    """The ring that holds ``slots`` slots: a power of two, as the PTX finds a slot with one AND,
    and at least ``min_capacity``."""
    return max(next_power_of_two(slots), min_capacity(version))


def slot_bytes(version: int) -> int:
    """Bytes of one ring slot of a layout version."""
    return SLOT_BYTES if version >= 3 else ENTRY_BYTES


def slot_dtype(version: int) -> np.dtype:
    """The dtype a layout version's ring slots are read as."""
    return SLOT_DTYPE if version >= 3 else ENTRY_DTYPE


def records_written(entries, tally):
    """Records a unit wrote, from its header's ``entries`` and ``tally`` (ints or int64 arrays):
    every slot (v2: entry) holds two records, less the tally, which counts what each slot
    holding fewer than two leaves out."""
    return 2 * entries - tally


def field_offset(dtype: np.dtype, name: str) -> int:
    """Byte offset of a header field, for the PTX writer."""
    fields = dtype.fields
    if fields is None or name not in fields:
        raise KeyError(f"{name!r} is not a field of {dtype}")
    return int(fields[name][1])


def scalar_fields(dtype: np.dtype, prefix: str = "", start: int = 0) -> dict[str, tuple[int, int]]:
    """Every scalar of a header or entry dtype, by name, with its byte offset and size: ``name``,
    ``name.field`` inside a nested record (``first.tag``), ``name[i]`` in an array (``reserved[0]``)."""
    if dtype.names is None or dtype.fields is None:
        raise ValueError(f"{dtype} is not a record dtype: its scalars have no names")
    scalars: dict[str, tuple[int, int]] = {}
    for name in dtype.names:
        field, offset = dtype.fields[name][:2]
        where = start + offset
        if field.names:
            scalars.update(scalar_fields(field, f"{prefix}{name}.", where))
        elif field.subdtype is not None:
            element, shape = field.subdtype
            for i in range(math.prod(shape)):
                scalars[f"{prefix}{name}[{i}]"] = (where + i * element.itemsize, element.itemsize)
        else:
            scalars[prefix + name] = (where, field.itemsize)
    return scalars


def vector_fields(dtype: np.dtype, names: Sequence[str]) -> int:
    """Byte offset of one PTX vector store that writes the scalars ``names`` of ``dtype``, in that
    order (names as ``scalar_fields`` gives them). They must be of one size, one after another in
    the layout, and the store aligned to its whole width; anything else raises, so that a change
    of the layout cannot silently change what the PTX writes where."""
    scalars = scalar_fields(dtype)
    what = f"a vector store of {list(names)}"
    unknown = [name for name in names if name not in scalars]
    if unknown:
        raise ValueError(f"{what}: {unknown} are not fields of the layout's {dtype.names}")
    if len(names) not in VECTOR_WIDTHS:
        raise ValueError(f"{what}: PTX stores vectors of {' or '.join(map(str, VECTOR_WIDTHS))} elements")
    first, size = scalars[names[0]]
    if any(scalars[name] != (first + i * size, size) for i, name in enumerate(names)):
        placed = {name: scalars[name] for name in names}
        raise ValueError(
            f"{what}: the fields are not {size}-byte scalars one after another in this order "
            f"(offset, size): {placed}"
        )
    width = len(names) * size
    if width > VECTOR_BYTES or first % width:
        raise ValueError(f"{what}: {width} bytes at offset {first} is not one aligned vector store")
    return first


class Granularity(str, enum.Enum):
    """Which threads share one segment: a warp, 2, 4 or 8 consecutive warps, a warpgroup
    (WARPS_PER_WARPGROUP consecutive warps), 2, 4 or 8 consecutive warpgroups, or the CTA. Lane 0
    of the unit's first warp writes for the unit."""

    WARP = "warp"
    WARP_2 = "warp_2"
    WARP_4 = "warp_4"
    WARP_8 = "warp_8"
    WARPGROUP = "warpgroup"
    WARPGROUP_2 = "warpgroup_2"
    WARPGROUP_4 = "warpgroup_4"
    WARPGROUP_8 = "warpgroup_8"
    CTA = "cta"

    @property
    def fixed_warps(self) -> int | None:
        """Warps in one unit, or None for the CTA (as many as the kernel has)."""
        if self is Granularity.CTA:
            return None
        kind, _, times = self.value.partition("_")
        return (WARPS_PER_WARPGROUP if kind == "warpgroup" else 1) * int(times or 1)

    def warps_per_unit(self, num_warps: int) -> int:
        fixed = self.fixed_warps
        return num_warps if fixed is None else fixed


# --- aggregate mode: per-scope statistics instead of a ring ------------------------------------
HISTOGRAM_BINS = 32
AGGREGATE_STATS_DTYPE = np.dtype(
    [
        ("sum", "<u8"),  # cycles, over every duration
        ("max", "<u4"),  # cycles
        ("min_inverted", "<u4"),  # ~(the shortest duration); 0 while there is none
        ("bins", "<u4", (HISTOGRAM_BINS,)),  # durations by ``histogram_bin``; the count is their sum
    ]
)
AGGREGATE_STATS_BYTES = AGGREGATE_STATS_DTYPE.itemsize
# Bin b holds durations of bit length b (bin 0: zero cycles), the last bin all longer ones too.
HISTOGRAM_LOWER = np.array([0] + [1 << (b - 1) for b in range(1, HISTOGRAM_BINS)], dtype=np.int64)
HISTOGRAM_UPPER = np.array([1 << b for b in range(HISTOGRAM_BINS - 1)] + [1 << 32], dtype=np.int64)

assert AGGREGATE_STATS_BYTES == 144 and AGGREGATE_STATS_BYTES % ENTRY_BYTES == 0


def histogram_bin(cycles):
    """The bin of each duration (u32 cycles): its bit length, at most ``HISTOGRAM_BINS - 1``,
    as the PTX computes it (``min(31, 32 - clz(d))``)."""
    return np.searchsorted(HISTOGRAM_LOWER, np.asarray(cycles, dtype=np.int64), side="right") - 1


@dataclass(frozen=True)
class BufferLayout:
    """Sizes and offsets of one kernel's profile buffer, given its unit count and capacity (ring
    slots per unit), or, in aggregate mode, the number of scopes each unit keeps statistics of
    (``aggregate_scopes``; the capacity is then 0). ``units`` counts the unit segments of a CTA
    region: the sampled units only (``sampling``, ``contract.sampling``). ``version``: the
    layout version its ring slots are written in (``READ_VERSIONS``)."""

    units: int
    capacity: int
    aggregate_scopes: int = 0
    sampling: Sampling = ALL
    version: int = VERSION

    def __post_init__(self) -> None:
        if self.version not in READ_VERSIONS:
            raise ValueError(
                f"buffer layout version {self.version} is not one this proton_ik reads "
                f"({', '.join(map(str, READ_VERSIONS))}); render it with the proton_ik release that captured it"
            )
        if self.units < 1:
            raise ValueError("a kernel has at least one recording unit")
        if self.aggregate_scopes and self.sampling != ALL:
            raise ValueError(
                "an aggregate layout keeps every CTA's and unit's statistics: it takes no sampling"
            )
        if self.sampling.unit_ids and len(self.sampling.unit_ids) != self.units:
            raise ValueError(
                f"{self.units} unit segments per CTA, but {len(self.sampling.unit_ids)} sampled units"
            )
        if self.aggregate_scopes:
            if not 0 < self.aggregate_scopes <= MAX_SCOPES or self.capacity:
                raise ValueError(
                    f"an aggregate layout keeps 1 to {MAX_SCOPES} scopes' statistics and no ring, "
                    f"got {self.aggregate_scopes} scopes and capacity {self.capacity}"
                )
        elif self.capacity < min_capacity(self.version) or self.capacity & (self.capacity - 1):
            raise ValueError(
                f"ring slots per unit must be a power of two of at least {min_capacity(self.version)} "
                f"in layout version {self.version}, got {self.capacity}"
            )
        if self.cta_bytes > MAX_CTA_BYTES:
            what, fewer = (
                (f"{self.aggregate_scopes} scopes' statistics", "use fewer scopes")
                if self.aggregate
                else (f"{self.capacity} slots", "lower the capacity")
            )
            raise ValueError(
                f"{self.units} units of {what} need {self.cta_bytes} bytes per CTA, over the "
                f"{MAX_CTA_BYTES}-byte limit of the 32-bit CTA stride; {fewer} or use "
                "granularity=warpgroup or cta"
            )

    @property
    def aggregate(self) -> bool:
        """Whether units keep per-scope statistics (aggregate mode) instead of a ring of records."""
        return self.aggregate_scopes > 0

    @property
    def slot_bytes(self) -> int:
        """Bytes of one ring slot."""
        return slot_bytes(self.version)

    @property
    def slot_dtype(self) -> np.dtype:
        """The dtype ring slots are read as: ``SLOT_DTYPE`` (v3) or ``ENTRY_DTYPE`` (v2)."""
        return slot_dtype(self.version)

    # Cached: a render reads them dozens of times a launch (the cache lives in the instance's
    # __dict__, outside the frozen fields that equality and hashing see).
    @functools.cached_property
    def unit_bytes(self) -> int:
        if self.aggregate:
            return UNIT_HEADER_BYTES + self.aggregate_scopes * AGGREGATE_STATS_BYTES
        return UNIT_HEADER_BYTES + self.capacity * self.slot_bytes

    @functools.cached_property
    def cta_bytes(self) -> int:
        raw = CTA_HEADER_BYTES + self.units * self.unit_bytes
        return -(-raw // CTA_ALIGN) * CTA_ALIGN

    def unit_offset(self, unit: int) -> int:
        return CTA_HEADER_BYTES + unit * self.unit_bytes

    def stats_offset(self, unit: int, scope: int = 0) -> int:
        """Byte offset in a CTA's region of a unit's statistics of a scope (aggregate mode)."""
        return self.unit_offset(unit) + UNIT_HEADER_BYTES + scope * AGGREGATE_STATS_BYTES

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": self.version,
            "units": self.units,
            "capacity": self.capacity,
            "cta_bytes": self.cta_bytes,
        }
        if self.aggregate:
            data["aggregate_scopes"] = self.aggregate_scopes
        if self.sampling != ALL:
            data["sampling"] = self.sampling.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BufferLayout:
        version = data.get("version")
        if version not in READ_VERSIONS:
            raise ValueError(
                f"buffer layout version {version} is not one this proton_ik reads "
                f"({', '.join(map(str, READ_VERSIONS))}); render it with the proton_ik release that captured it"
            )
        return cls(
            version=int(version),
            units=int(data["units"]),
            capacity=int(data["capacity"]),
            aggregate_scopes=int(data.get("aggregate_scopes", 0)),
            sampling=Sampling.from_dict(data.get("sampling", {})),
        )
