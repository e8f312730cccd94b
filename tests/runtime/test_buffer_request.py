"""What the profile allocator hands a launch (``runtime.launch_sizing.buffer_request``): a kernel that
samples CTAs gets its sampled CTAs' regions, and only when the launch it was told of is the one
Triton asks for; every other request is served as Triton makes it."""

from __future__ import annotations

import pytest

from proton_ik.contract.layout import BufferLayout
from proton_ik.contract.metadata import KernelMetadata
from proton_ik.contract.sampling import Sampling
from proton_ik.runtime import launch_sizing, loaded

STRIDED, LISTED, ALL_CTAS = 101, 102, 103


@pytest.fixture(autouse=True)
def kernels(monkeypatch):
    """Three loaded kernels of 4 units of 4 entries: every 4th CTA, CTAs 3 and 40, all CTAs."""
    for function, sampling in (
        (STRIDED, Sampling(cta_stride=4)),
        (LISTED, Sampling(cta_ids=(3, 40))),
        (ALL_CTAS, Sampling()),
    ):
        metadata = KernelMetadata(layout=BufferLayout(units=4, capacity=4, sampling=sampling), num_warps=4)
        info = loaded.KernelInfo("k", 4, metadata.layout.cta_bytes, metadata, metadata.to_dict())
        monkeypatch.setitem(loaded.KERNELS, function, info)


def region() -> int:
    return loaded.KERNELS[STRIDED].cta_bytes


def test_a_sampling_kernel_gets_its_sampled_regions_only():
    assert launch_sizing.buffer_request(10 * region(), (STRIDED, (10,))) == (10, 3 * region())  # CTAs 0, 4, 8
    assert launch_sizing.buffer_request(50 * region(), (LISTED, (50,))) == (50, 2 * region())
    assert launch_sizing.buffer_request(8 * region(), (LISTED, (8,))) == (8, region())  # only CTA 3 runs
    assert launch_sizing.buffer_request(2 * region(), (LISTED, (2,))) == (
        2,
        region(),
    )  # none: one region still


@pytest.mark.parametrize(
    "size, upcoming",
    [
        (10 * 512, (ALL_CTAS, (10,))),  # no sampling: Triton's request is exact
        (20 * 512, (STRIDED, (10,))),  # a cluster launch (2 CTAs each) or a grid not as announced
        (10 * 512, None),  # no announcement: a launch that did not go through launch_metadata
        (10 * 512, (999, (10,))),  # a kernel that is not ours
        (10 * 512, (STRIDED, ("ten",))),  # a grid this cannot read
    ],
)
def test_anything_else_gets_what_triton_asked_for(size, upcoming):
    size = size // 512 * region()
    assert launch_sizing.buffer_request(size, upcoming) == (None, size)


@pytest.mark.parametrize(
    "grid, ctas",
    [((7,), 7), ((4, 3), 12), ((4, 3, 2), 24), ([5, 1, 1], 5), ((0,), 0), ((2, "x"), None), (None, None)],
)
def test_the_grid_an_announcement_gives(grid, ctas):
    assert launch_sizing.grid_ctas(grid) == ctas


def test_a_grid_of_more_than_three_extents_or_a_negative_one_is_not_read():
    assert launch_sizing.grid_ctas((1, 2, 3, 4)) is None
    assert launch_sizing.grid_ctas((4, -1)) is None
