"""Which CTAs and units of a launch record (the mode's ``ctas=`` and ``warps=``), and which region
of the buffer each one owns: part of the buffer contract, read by the lowering (writer), the
drain (what to copy) and the viewer (who wrote a region).

The buffer holds the sampled CTAs only, one after another in linear-id order: CTA region ``s``
belongs to linear CTA ``s * cta_stride``, or to ``cta_ids[s]``. Each CTA region holds the
sampled units only, in unit order: segment ``u`` belongs to unit ``unit_ids[u]``. A CTA or unit
that is not sampled writes nothing, not even a header.

Triton's launcher asks the profile allocator for ``grid * cta_bytes`` whatever the kernel writes.
A launch writes only its first ``cta_slots(grid)`` regions, so the runtime's allocator hands it
``buffer_bytes`` where it knows which kernel is launching, and copies no more than those regions.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_LISTED_CTAS = 64  # each listed CTA costs every thread one compare in the prologue
MAX_CTA_ID = (1 << 31) - 1
MAX_UNIT_ID = 31  # a CTA has at most 32 warps; the prologue tests a unit against a 32-bit mask


def _increasing(values: tuple[int, ...], low: int, high: int, what: str) -> None:
    if any(isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high for v in values):
        raise ValueError(f"{what} {list(values)}: each must be a whole number from {low} to {high}")
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise ValueError(f"{what} {list(values)} must be listed once each, in increasing order")


@dataclass(frozen=True)
class Sampling:
    """Every ``cta_stride``-th CTA by linear id (1: all), or the CTAs ``cta_ids``; the units
    ``unit_ids`` of each (empty: all)."""

    cta_stride: int = 1
    cta_ids: tuple[int, ...] = ()
    unit_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "cta_ids", tuple(self.cta_ids))
        object.__setattr__(self, "unit_ids", tuple(self.unit_ids))
        stride = self.cta_stride
        if isinstance(stride, bool) or not isinstance(stride, int) or not 1 <= stride <= MAX_CTA_ID:
            raise ValueError(f"a CTA stride is a whole number from 1 to {MAX_CTA_ID}, got {stride!r}")
        if self.cta_ids and stride != 1:
            raise ValueError("sample CTAs by a stride or by a list, not both")
        if len(self.cta_ids) > MAX_LISTED_CTAS:
            raise ValueError(
                f"{len(self.cta_ids)} CTAs listed; at most {MAX_LISTED_CTAS}, each costs a compare "
                "in every thread's prologue; sample by a stride instead"
            )
        _increasing(self.cta_ids, 0, MAX_CTA_ID, "CTAs")
        _increasing(self.unit_ids, 0, MAX_UNIT_ID, "units")

    @property
    def every_cta(self) -> bool:
        return self.cta_stride == 1 and not self.cta_ids

    @property
    def every_unit(self) -> bool:
        return not self.unit_ids

    def cta_slots(self, ctas: int) -> int:
        """CTA regions that a launch of ``ctas`` CTAs writes: the sampled CTAs among them."""
        if self.cta_ids:
            return bisect.bisect_left(self.cta_ids, ctas)
        return -(-ctas // self.cta_stride)

    def buffer_bytes(self, ctas: int, cta_bytes: int) -> int:
        """The profile buffer a launch of ``ctas`` CTAs writes into: its sampled CTAs' regions, and
        at least one region (a launch whose listed CTAs all lie past its grid writes none)."""
        return max(1, self.cta_slots(ctas)) * cta_bytes

    def cta_of_slot(self, slots: np.ndarray) -> np.ndarray:
        """The linear CTA id that owns each CTA region (int64); -1 for a region no CTA owns."""
        slots = np.asarray(slots, dtype=np.int64)
        if not self.cta_ids:
            return slots * self.cta_stride
        ids = np.asarray((*self.cta_ids, -1), dtype=np.int64)
        return ids[np.clip(slots, 0, len(self.cta_ids))]

    def unit_of_slot(self, slots: np.ndarray) -> np.ndarray:
        """The unit that owns each unit segment of a CTA region (int64)."""
        slots = np.asarray(slots, dtype=np.int64)
        return slots if not self.unit_ids else np.asarray(self.unit_ids, dtype=np.int64)[slots]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.cta_stride != 1:
            data["cta_stride"] = self.cta_stride
        if self.cta_ids:
            data["cta_ids"] = list(self.cta_ids)
        if self.unit_ids:
            data["unit_ids"] = list(self.unit_ids)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sampling:
        """What ``to_dict`` wrote; ValueError names what is wrong."""
        unknown = set(data) - {"cta_stride", "cta_ids", "unit_ids"}
        if unknown:
            raise ValueError(f"sampling has unknown fields {sorted(unknown)}")
        lists = {key: data.get(key, []) for key in ("cta_ids", "unit_ids")}
        for key, value in lists.items():
            if not isinstance(value, list):
                raise ValueError(f"sampling.{key} is {type(value).__name__}, not a list")
        return cls(data.get("cta_stride", 1), tuple(lists["cta_ids"]), tuple(lists["unit_ids"]))


ALL = Sampling()


def held_ctas(meta: dict[str, Any], sampling: Sampling) -> tuple[dict[str, Any], int]:
    """The CTA regions a launch of ``meta["num_ctas"]`` CTAs holds something in, and its metadata
    as stored. A launch that samples CTAs writes only the first ``cta_slots`` regions, and only
    those are copied: the stored ``num_ctas`` says how many."""
    launched = int(meta["num_ctas"])
    held = sampling.cta_slots(launched)
    return (meta if held == launched else {**meta, "num_ctas": held}), held
