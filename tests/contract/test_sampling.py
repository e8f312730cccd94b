"""The sampling contract (``contract.sampling``): which region belongs to which CTA and unit, how
many regions a launch writes, and its place in the layout and the kernel metadata."""

from __future__ import annotations

import numpy as np
import pytest

from proton_ik.contract.fields import SchemaError
from proton_ik.contract.layout import BufferLayout
from proton_ik.contract.metadata import KernelMetadata, Occupancy
from proton_ik.contract.sampling import ALL, MAX_LISTED_CTAS, Sampling, held_ctas


@pytest.mark.parametrize(
    "sampling, grid, owners",
    [
        (ALL, 5, [0, 1, 2, 3, 4]),
        (Sampling(cta_stride=4), 9, [0, 4, 8]),
        (Sampling(cta_stride=4), 8, [0, 4]),
        (Sampling(cta_stride=4), 1, [0]),
        (Sampling(cta_ids=(1, 4, 20)), 12, [1, 4]),  # CTA 20 is past the grid: no region
        (Sampling(cta_ids=(1, 4, 20)), 1, []),
    ],
)
def test_regions_belong_to_the_sampled_ctas_in_order(sampling, grid, owners):
    slots = sampling.cta_slots(grid)
    assert slots == len(owners)
    assert sampling.cta_of_slot(np.arange(slots)).tolist() == owners


def test_a_listed_region_past_the_list_belongs_to_no_cta():
    assert Sampling(cta_ids=(3, 7)).cta_of_slot(np.array([0, 1, 2, 9])).tolist() == [3, 7, -1, -1]


def test_unit_segments_belong_to_the_sampled_units():
    assert Sampling(unit_ids=(1, 3)).unit_of_slot(np.array([0, 1])).tolist() == [1, 3]
    assert ALL.unit_of_slot(np.arange(3)).tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"cta_stride": 0}, "a CTA stride is a whole number from 1"),
        ({"cta_stride": 2, "cta_ids": (0,)}, "by a stride or by a list, not both"),
        ({"cta_ids": (4, 2)}, "listed once each, in increasing order"),
        ({"cta_ids": tuple(range(MAX_LISTED_CTAS + 1))}, "sample by a stride instead"),
        ({"unit_ids": (32,)}, "each must be a whole number from 0 to 31"),
        ({"unit_ids": ("0",)}, "each must be a whole number"),
    ],
)
def test_a_sampling_that_cannot_be_written_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        Sampling(**fields)


def test_the_layout_carries_its_sampling_and_an_unsampled_layout_is_as_before():
    layout = BufferLayout(units=2, capacity=4, sampling=Sampling(cta_stride=3, unit_ids=(0, 5)))
    assert layout.to_dict()["sampling"] == {"cta_stride": 3, "unit_ids": [0, 5]}
    assert BufferLayout.from_dict(layout.to_dict()) == layout
    assert "sampling" not in BufferLayout(units=2, capacity=4).to_dict()
    # A sampled layout is sized by its sampled units: 2 segments, whatever the kernel's warps.
    assert layout.cta_bytes == BufferLayout(units=2, capacity=4).cta_bytes


def test_a_layout_refuses_a_unit_count_other_than_its_sampled_units_and_aggregate_sampling():
    with pytest.raises(ValueError, match="3 unit segments per CTA, but 2 sampled units"):
        BufferLayout(units=3, capacity=4, sampling=Sampling(unit_ids=(0, 1)))
    with pytest.raises(ValueError, match="it takes no sampling"):
        BufferLayout(units=1, capacity=0, aggregate_scopes=2, sampling=Sampling(cta_stride=2))


def test_kernel_metadata_round_trips_sampling_and_occupancy():
    kernel = KernelMetadata(
        layout=BufferLayout(units=1, capacity=8, sampling=Sampling(cta_ids=(0, 9), unit_ids=(2,))),
        num_warps=4,
        occupancy=Occupancy(72, 7, 72, "plain: 72 registers"),
    )
    assert KernelMetadata.from_dict(kernel.to_dict(), "test") == kernel


@pytest.mark.parametrize(
    "sampling, message",
    [
        ([1], r"test: proton_ik.layout.sampling is .*not a JSON object"),
        ({"cta_stride": "4"}, r"test: a CTA stride is a whole number"),
        ({"cta_ids": 3}, r"test: sampling.cta_ids is int, not a list"),
        ({"unit_ids": [1, 1]}, r"test: units \[1, 1\] must be listed once each"),
        ({"units": [1]}, r"test: sampling has unknown fields \['units'\]"),
    ],
)
def test_bad_sampling_in_metadata_is_a_schema_error_that_says_where(sampling, message):
    data = KernelMetadata(layout=BufferLayout(units=1, capacity=8)).to_dict()
    data["layout"]["sampling"] = sampling
    with pytest.raises(SchemaError, match=message):
        KernelMetadata.from_dict(data, "test")


def test_the_drain_keeps_only_the_regions_a_sampled_launch_writes():
    """The drain copies and stores the written regions only, and the stored num_ctas says how
    many; the launch's buffer holds those regions and no more."""
    layout = BufferLayout(units=4, capacity=4, sampling=Sampling(cta_stride=4))
    meta = {"launch": 3, "num_ctas": 10}
    stored, held = held_ctas(meta, layout.sampling)
    assert (held, stored["num_ctas"], meta["num_ctas"]) == (3, 3, 10)
    assert layout.sampling.buffer_bytes(10, layout.cta_bytes) == 3 * layout.cta_bytes
    unsampled = BufferLayout(units=4, capacity=4)
    assert held_ctas(meta, unsampled.sampling) == (meta, 10)
    assert unsampled.sampling.buffer_bytes(10, unsampled.cta_bytes) == 10 * unsampled.cta_bytes


def test_a_launch_whose_listed_ctas_lie_past_its_grid_still_gets_one_region():
    listed = Sampling(cta_ids=(40, 50))
    assert listed.cta_slots(8) == 0
    assert listed.buffer_bytes(8, 512) == 512
    assert listed.buffer_bytes(45, 512) == 512 and listed.buffer_bytes(51, 512) == 1024
