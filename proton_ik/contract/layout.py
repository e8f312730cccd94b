"""The profile buffer layout: the one contract between the writer (lowering) and the reader (viewer).

Every launch gets ``num_ctas * cta_bytes`` bytes of Triton's ``profile_scratch``. CTA ``c`` owns
bytes ``[c * cta_bytes, (c + 1) * cta_bytes)``:

    +----------------------+  CTA header, written once by unit 0, lane 0
    | CTA_HEADER (64 B)    |  magic, version, linear CTA id, %smid, %nctaid, units, capacity
    +----------------------+
    | unit 0 segment       |  UNIT_HEADER (48 B): start/end clock64 and %globaltimer, the
    |   header + entries   |  entries and single records written; then ``capacity`` entries
    +----------------------+  of 16 bytes
    | unit 1 segment       |
    | ...                  |
    +----------------------+

A unit is a warp (or a warpgroup, or the whole CTA; see ``Granularity``). Only lane 0 of the
unit's first warp writes. A record is two 32-bit words: a tag (scope id, begin/end) and the
low 32 bits of %clock64. An entry holds either one record (the other 8 bytes are left as they
were), or, when a scope's begin and end sit in the same straight-line code, both records,
written by one 16-byte store at the end (the begin's tag then carries ``TAG_PAIR_BIT``): half
the stores, and the begin's clock read has the whole scope to complete. Entry ``i`` goes to
slot ``i % capacity``; the capacity is a power of two, so the slot is one AND, and no write
ever leaves the unit's segment. The header counts every entry written and every single
record among them, so records lost to the ring are known exactly (``records_written``).

Bump ``VERSION`` whenever anything in this file changes meaning.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

VERSION = 2
MAGIC = 0x314B4950  # b"PIK1" read as a little-endian u32
CTA_ALIGN = 128  # alignment of each CTA's region and of the whole buffer
RECORD_BYTES = 8
ENTRY_BYTES = 16  # one record, or a begin/end pair
MAX_CTA_BYTES = 0xFFFFFFFF  # the PTX multiplies the linear CTA id by a 32-bit immediate

# --- record tag: bit 31 = end, bits 30:28 = kind, bit 27 = paired, bits 15:0 = scope id -------
TAG_END_BIT = 31
TAG_KIND_SHIFT = 28
TAG_PAIR_BIT = 27  # on the first record of an entry: the entry's second record is its end
TAG_KIND_MASK = 0x7
TAG_SCOPE_MASK = 0xFFFF
MAX_SCOPES = TAG_SCOPE_MASK + 1


class RecordKind(enum.IntEnum):
    SCOPE = 0


def make_tag(scope_id: int, is_end: bool, kind: RecordKind = RecordKind.SCOPE, paired: bool = False) -> int:
    if not 0 <= scope_id < MAX_SCOPES:
        raise ValueError(f"scope id {scope_id} does not fit the {MAX_SCOPES}-entry tag field")
    return (
        (int(is_end) << TAG_END_BIT)
        | (int(kind) << TAG_KIND_SHIFT)
        | (int(paired) << TAG_PAIR_BIT)
        | scope_id
    )


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
        ("capacity", "<u4"),  # ring entries per unit
        ("reserved", "<u4", (7,)),
    ]
)
CTA_HEADER_BYTES = CTA_HEADER_DTYPE.itemsize

# --- unit header: 48 bytes -------------------------------------------------------------------
UNIT_HEADER_DTYPE = np.dtype(
    [
        ("start_clock", "<u8"),
        ("start_time", "<u8"),  # %globaltimer, ns
        ("end_clock", "<u8"),
        ("end_time", "<u8"),
        ("entries", "<u4"),  # entries written, including those the ring overwrote
        ("end_magic", "<u4"),  # MAGIC once the unit reached its epilogue
        ("singles", "<u4"),  # entries that hold one record (the others hold two)
        ("reserved", "<u4"),
    ]
)
UNIT_HEADER_BYTES = UNIT_HEADER_DTYPE.itemsize

RECORD_DTYPE = np.dtype([("tag", "<u4"), ("clock", "<u4")])
ENTRY_DTYPE = np.dtype([("first", RECORD_DTYPE), ("second", RECORD_DTYPE)])

assert CTA_HEADER_BYTES == 64 and UNIT_HEADER_BYTES == 48
assert RECORD_DTYPE.itemsize == RECORD_BYTES and ENTRY_DTYPE.itemsize == ENTRY_BYTES


def records_written(entries, singles):
    """Records a unit wrote, from its header: every entry holds two records but the singles."""
    return 2 * entries - singles


def field_offset(dtype: np.dtype, name: str) -> int:
    """Byte offset of a header field, for the PTX writer."""
    return int(dtype.fields[name][1])


class Granularity(str, enum.Enum):
    """Which threads share one segment. Lane 0 of the unit's first warp writes for the unit."""

    WARP = "warp"
    WARPGROUP = "warpgroup"  # 4 consecutive warps
    CTA = "cta"

    def warps_per_unit(self, num_warps: int) -> int:
        return {"warp": 1, "warpgroup": 4, "cta": num_warps}[self.value]


@dataclass(frozen=True)
class BufferLayout:
    """Sizes and offsets of one kernel's profile buffer, given its unit count and capacity."""

    units: int
    capacity: int

    def __post_init__(self) -> None:
        if self.units < 1:
            raise ValueError("a kernel has at least one recording unit")
        if self.capacity < 1 or self.capacity & (self.capacity - 1):
            raise ValueError(f"entries per unit must be a power of two, got {self.capacity}")
        if self.cta_bytes > MAX_CTA_BYTES:
            raise ValueError(
                f"{self.units} units of {self.capacity} entries need {self.cta_bytes} bytes per CTA, "
                f"over the {MAX_CTA_BYTES}-byte limit of the 32-bit CTA stride; lower the capacity "
                "or use granularity=warpgroup or cta"
            )

    @property
    def unit_bytes(self) -> int:
        return UNIT_HEADER_BYTES + self.capacity * ENTRY_BYTES

    @property
    def cta_bytes(self) -> int:
        raw = CTA_HEADER_BYTES + self.units * self.unit_bytes
        return -(-raw // CTA_ALIGN) * CTA_ALIGN

    def unit_offset(self, unit: int) -> int:
        return CTA_HEADER_BYTES + unit * self.unit_bytes

    def to_dict(self) -> dict[str, int]:
        return {
            "version": VERSION,
            "units": self.units,
            "capacity": self.capacity,
            "cta_bytes": self.cta_bytes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> BufferLayout:
        if data.get("version") != VERSION:
            raise ValueError(
                f"buffer layout version {data.get('version')} is not the version {VERSION} this "
                "proton_ik reads; render it with the proton_ik release that captured it"
            )
        return cls(units=int(data["units"]), capacity=int(data["capacity"]))
