"""``vector_fields``: one PTX vector store's offset, from the layout's field names, or a refusal."""

from __future__ import annotations

import pytest

from proton_ik.contract.layout import (
    CTA_HEADER_DTYPE,
    ENTRY_DTYPE,
    UNIT_HEADER_DTYPE,
    WARPS_PER_WARPGROUP,
    Granularity,
    field_offset,
    scalar_fields,
    vector_fields,
)


def test_scalars_are_named_inside_records_and_arrays():
    cta = scalar_fields(CTA_HEADER_DTYPE)
    assert cta["capacity"] == (field_offset(CTA_HEADER_DTYPE, "capacity"), 4)
    assert cta["reserved[3]"] == (CTA_HEADER_DTYPE.itemsize - 4, 4)
    assert [cta[name] for name in ("cluster", "cluster_rank", "cluster_ctas")] == [(36, 4), (40, 4), (44, 4)]
    assert list(scalar_fields(ENTRY_DTYPE).items()) == [
        ("first.tag", (0, 4)),
        ("first.clock", (4, 4)),
        ("second.tag", (8, 4)),
        ("second.clock", (12, 4)),
    ]


@pytest.mark.parametrize(
    ("dtype", "names"),
    [
        (CTA_HEADER_DTYPE, ["magic", "version", "cta", "smid"]),
        (CTA_HEADER_DTYPE, ["nctaid_x", "nctaid_y", "nctaid_z", "units"]),
        (UNIT_HEADER_DTYPE, ["start_clock", "start_time"]),
        (UNIT_HEADER_DTYPE, ["entries", "end_magic", "singles", "reserved"]),
        (ENTRY_DTYPE, ["first.tag", "first.clock"]),
        (ENTRY_DTYPE, ["second.tag", "second.clock"]),
    ],
)
def test_a_vector_starts_at_its_first_field(dtype, names):
    assert vector_fields(dtype, names) == scalar_fields(dtype)[names[0]][0]


@pytest.mark.parametrize(
    ("dtype", "names", "problem"),
    [
        (CTA_HEADER_DTYPE, ["version", "magic", "cta", "smid"], "one after another in this order"),
        (CTA_HEADER_DTYPE, ["magic", "version", "smid", "nctaid_x"], "one after another in this order"),
        (UNIT_HEADER_DTYPE, ["end_time", "entries"], "not 8-byte scalars"),
        (CTA_HEADER_DTYPE, ["version", "cta", "smid", "nctaid_x"], "16 bytes at offset 4 is not one aligned"),
        (UNIT_HEADER_DTYPE, ["start_clock", "start_time", "end_clock", "end_time"], "32 bytes at offset 0"),
        (CTA_HEADER_DTYPE, ["magic", "version", "cta"], "vectors of 2 or 4 elements"),
        (CTA_HEADER_DTYPE, ["magic", "reserved"], r"\['reserved'\] are not fields"),
    ],
)
def test_anything_but_one_aligned_run_of_fields_is_refused(dtype, names, problem):
    with pytest.raises(ValueError, match=problem):
        vector_fields(dtype, names)


def test_a_warpgroup_is_the_layouts_number_of_warps():
    assert Granularity.WARPGROUP.warps_per_unit(8) == WARPS_PER_WARPGROUP == 4
