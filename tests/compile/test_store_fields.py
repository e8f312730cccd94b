"""The vector stores of ``convert-pikgpu-to-ptx`` take their operands' order from the layout.

Each ``st.global.v*`` the lowering emits is read back from the PTX text and its operands are
matched, by byte offset, to the scalars of the layout dtype its base register points at; every
field must get its value. A layout whose fields move makes the stores follow (new offsets), and
one that reorders fields a store writes together makes the lowering refuse, rather than write
the old order.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from proton_ik.contract.layout import (
    CTA_HEADER_DTYPE,
    ENTRY_DTYPE,
    MAGIC,
    UNIT_HEADER_DTYPE,
    BufferLayout,
    scalar_fields,
)
from proton_ik.contract.tags import make_tag
from proton_ik.dialect import parse_module
from proton_ik.lowering import frame_ptx
from proton_ik.lowering.pikgpu_to_ptx import plan_ptx

# Layout version 2's stores; version 3's are run by test_ptx_stores.py's interpreter.
V2 = 2
LAYOUT = BufferLayout(units=4, capacity=64, version=V2)
SINGLE_TAG = make_tag(0, False)
PAIR_TAGS = make_tag(1, False, paired=True), make_tag(1, True)
MODULE = f"""builtin.module attributes {{pik.kernel = "k"}} {{
  pikgpu.segment_setup {{granularity = "warp", units = {LAYOUT.units} : i64, capacity = {LAYOUT.capacity} : i64, \
cta_bytes = {LAYOUT.cta_bytes} : i64, layout_version = {V2} : i64}}
  %0 = pikgpu.read_clock {{site = 10 : i64}} : i32
  pikgpu.store_record %0 tag {SINGLE_TAG} {{site = 10 : i64}}
  %1 = pikgpu.read_clock {{site = 11 : i64}} : i32
  %2 = pikgpu.read_clock {{site = 12 : i64}} : i32
  pikgpu.store_pair %1, %2 tags {PAIR_TAGS[0]}, {PAIR_TAGS[1]} {{site = 12 : i64}}
  pikgpu.finalize
}}"""
STORE = re.compile(
    r"st\.global(?:\.L2::cache_hint)?\.v(?P<width>\d)\.(?P<type>b32|u64) \t\[(?P<base>%pik_\w+)(?:\+(?P<offset>\d+))?\], \{(?P<ops>[^}]*)\}(?:, %pik_pol)?;"
)
TYPE_BYTES = {"b32": 4, "u64": 8}


def stores(dtypes: dict[str, np.dtype]) -> list[dict[str, str]]:
    """Each vector store of the lowered module as {field: operand}, the fields found by offset in
    the dtype that its base register points at."""
    plan = plan_ptx(parse_module(MODULE), "k_param_3")
    lines = [*plan.prologue, *(line for site in plan.sites.values() for line in site), *plan.epilogue]
    written = []
    for match in filter(None, map(STORE.search, lines)):
        by_offset = {place: name for name, place in scalar_fields(dtypes[match["base"]]).items()}
        size, start = TYPE_BYTES[match["type"]], int(match["offset"] or 0)
        operands = match["ops"].split(", ")
        assert len(operands) == int(match["width"])
        written.append({by_offset[(start + i * size, size)]: op for i, op in enumerate(operands)})
    return written


BASES = {"%pik_base": CTA_HEADER_DTYPE, "%pik_unit_base": UNIT_HEADER_DTYPE, "%pik_a": ENTRY_DTYPE}


def test_every_store_writes_each_field_the_value_the_layout_names():
    assert stores(BASES) == [
        {"first.tag": str(SINGLE_TAG), "first.clock": "%pik_c"},
        {
            "first.tag": str(PAIR_TAGS[0]),
            "first.clock": "%pik_b0",
            "second.tag": str(PAIR_TAGS[1]),
            "second.clock": "%pik_c",
        },
        {"start_clock": "%pik_start_clock64", "start_time": "%pik_start_time64"},
        {"end_clock": "%pik_clk64", "end_time": "%pik_gtime"},
        {"entries": "%pik_n", "end_magic": str(MAGIC), "tally": "%pik_tally", "reserved": "0"},
        {"magic": str(MAGIC), "version": str(V2), "cta": "%pik_cta", "smid": "%pik_sm"},
        {"nctaid_x": "%pik_nx", "nctaid_y": "%pik_ny", "nctaid_z": "%pik_nz", "units": str(LAYOUT.units)},
        {
            "capacity": str(LAYOUT.capacity),
            "cluster": "%pik_cluster",
            "cluster_rank": "%pik_cluster_rank",
            "cluster_ctas": "%pik_cluster_ctas",
        },
    ]


def test_stores_follow_fields_that_move(monkeypatch):
    """The CTA header's fields 16 bytes later (still 64 bytes): every header store moves with them."""
    fields = [(name, CTA_HEADER_DTYPE.fields[name][0]) for name in CTA_HEADER_DTYPE.names[:-1]]
    moved = np.dtype([("pad", "<u4", (4,)), *fields])
    assert moved.itemsize == CTA_HEADER_DTYPE.itemsize
    written = stores(BASES)[-3:]
    monkeypatch.setattr(frame_ptx, "CTA_HEADER_DTYPE", moved)
    plan = plan_ptx(parse_module(MODULE), "k_param_3")
    assert [line.split("[")[1].split("]")[0] for line in plan.epilogue if "%pik_h st" in line] == [
        "%pik_base+16",
        "%pik_base+32",
        "%pik_base+48",
    ]
    assert stores({**BASES, "%pik_base": moved})[-3:] == written


def swapped(dtype: np.dtype, first: str, second: str) -> np.dtype:
    """``dtype`` with two fields of one size in each other's place."""
    order = list(dtype.names)
    i, j = order.index(first), order.index(second)
    order[i], order[j] = order[j], order[i]
    return np.dtype([(field, dtype.fields[field][0]) for field in order])


@pytest.mark.parametrize(
    ("name", "reordered"),
    [
        ("CTA_HEADER_DTYPE", swapped(CTA_HEADER_DTYPE, "magic", "version")),
        ("UNIT_HEADER_DTYPE", swapped(UNIT_HEADER_DTYPE, "entries", "end_magic")),
    ],
)
def test_a_layout_that_reorders_a_stores_fields_is_refused(monkeypatch, name, reordered):
    """Swapping two fields keeps every offset a store uses valid, so only the names can tell."""
    dtype = getattr(frame_ptx, name)
    assert reordered.itemsize == dtype.itemsize
    monkeypatch.setattr(frame_ptx, name, reordered)
    with pytest.raises(ValueError, match=r"not 4-byte scalars one after another in this order"):
        plan_ptx(parse_module(MODULE), "k_param_3")


@pytest.mark.parametrize("sm", [75, 80, 90, None])
def test_the_plan_emits_only_what_the_target_has(sm):
    """The target decides what is emitted, nothing is emitted and taken out again: a cache hint
    and its policy from sm_80 on, the cluster's registers from sm_90 on (None: no ``.target``,
    the newest)."""
    plan = plan_ptx(parse_module(MODULE), "k_param_3", target_sm=sm)
    text = "\n".join(
        [*plan.prologue, *(line for site in plan.sites.values() for line in site), *plan.epilogue]
    )
    newest = sm is None
    assert ("createpolicy" in text, "cache_hint" in text) == (newest or sm >= 80,) * 2
    assert ("%cluster_ctarank" in text, "%clusterid.x" in text) == (newest or sm >= 90,) * 2
    record_stores = [line for line in text.splitlines() if "[%pik_a" in line]
    assert len(record_stores) == 2 and all(
        ("%pik_pol" in line) == (newest or sm >= 80) for line in record_stores
    )
