"""``vector_fields``: one PTX vector store's offset, from the layout's field names, or a refusal."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proton_ik.contract import tags
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
        (UNIT_HEADER_DTYPE, ["entries", "end_magic", "tally", "reserved"]),
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


@settings(max_examples=300, deadline=None)
@given(
    name_id=st.integers(0, tags.MAX_SCOPES - 1),
    is_end=st.booleans(),
    kind=st.sampled_from(list(tags.RecordKind)),
    paired=st.booleans(),
    index=st.integers(0, tags.MAX_EVENT_INSTANCES - 1),
)
def test_a_tag_reads_back_as_it_was_made_from_an_int_or_an_array(name_id, is_end, kind, paired, index):
    tag = tags.make_tag(name_id, is_end, kind, paired=paired, index=index)
    array = np.array([tag, tag], dtype=np.uint32)
    for value in (tag, array):
        assert np.all(tags.tag_name_id(value) == name_id) and np.all(tags.tag_is_end(value) == is_end)
        assert np.all(tags.tag_kind(value) == kind) and np.all(tags.tag_paired(value) == paired)
        assert np.all(tags.tag_index(value) == index)
        assert np.all(tags.tag_without_pair(value) == tags.make_tag(name_id, is_end, kind, index=index))
    assert tags.tag_without_pair(array).dtype == np.uint32


def test_record_kinds_are_numbered_from_zero_without_gaps():
    """The viewer tells a kind it does not know by its code's range (``tables.pipeline``)."""
    assert sorted(int(kind) for kind in tags.RecordKind) == list(range(len(tags.RecordKind)))
