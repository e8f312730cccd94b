"""Sampled launches in the viewer: a buffer that holds only the sampled CTAs and units decodes to
their own CTA and warp ids, and the launch table, traces and summary say who was sampled."""

from __future__ import annotations

import numpy as np
import pytest

from proton_ik.contract.layout import CTA_HEADER_DTYPE, BufferLayout
from proton_ik.contract.sampling import ALL, Sampling
from proton_ik.viewer import LaunchCapture, Trace
from proton_ik.viewer.tables.sampled import sampled_text

T0 = 1_700_000_000_000_000_000
SCOPE = 0
GRID_CTAS = 7  # CTAs 0, 3 and 6 are sampled by ctas=3
SAMPLING = Sampling(cta_stride=3, unit_ids=(1, 3))


def _sampled_launch(fake_launch, header_ctas=(0, 3, 6)) -> LaunchCapture:
    """Three CTA regions of two unit segments, as a kernel of 4 warps with ``ctas=3:warps=1,3``
    writes them on a grid of 7 CTAs; each unit one pair whose clocks name its CTA and unit."""
    fake = fake_launch(units=2, capacity=4, num_ctas=3)
    fake.layout = BufferLayout(units=2, capacity=4, sampling=SAMPLING)
    for slot, cta in enumerate(header_ctas):
        fake.cta(slot, smid=slot, nctaid_x=GRID_CTAS)
        np.ndarray((), CTA_HEADER_DTYPE, fake.buffer, slot * fake.layout.cta_bytes)["cta"] = cta
        for segment, unit in enumerate(SAMPLING.unit_ids):
            writer = fake.unit(slot, segment, 1000, T0 + 1000)
            writer.pair(SCOPE, 2000 + 100 * cta + unit, 3000 + 100 * cta + unit)
            writer.finish(9000, T0 + 9000)
    meta = fake.meta(scopes=["work"], grid=[GRID_CTAS, 1, 1], num_ctas=3)
    meta["profile"]["num_warps"] = meta["num_warps"] = 4
    return LaunchCapture(meta, fake.buffer.copy())


def test_regions_decode_as_the_sampled_ctas_and_segments_as_the_sampled_warps(fake_launch):
    trace = Trace.from_captures({"name": "sampled"}, [_sampled_launch(fake_launch)])
    events = trace.events
    assert sorted(zip(events["cta"], events["warp"], strict=True)) == [
        (cta, warp) for cta in (0, 3, 6) for warp in (1, 3)
    ]
    # Each pair's clocks say which CTA and unit wrote it: the labels are the writers' own.
    expected = 2000 + 100 * events["cta"] + events["warp"]
    assert (events["begin_cycles_raw"] == expected).all() and (events["dur_cycles"] == 1000).all()
    launch = trace.launches.iloc[0]
    assert launch["problems"] == [] and launch["ctas"] == 3
    assert launch["sampled"] == "CTAs 0, 3, 6, ... (3 of 7); warps 1, 3 of 4"


def test_the_summary_says_who_was_sampled(fake_launch):
    text = str(Trace.from_captures({"name": "sampled"}, [_sampled_launch(fake_launch)]).summary())
    assert "sampled: CTAs 0, 3, 6, ... (3 of 7); warps 1, 3 of 4; the others recorded nothing" in text


def test_a_region_whose_header_names_another_cta_is_skipped_and_reported(fake_launch):
    trace = Trace.from_captures({"name": "sampled"}, [_sampled_launch(fake_launch, header_ctas=(0, 1, 6))])
    assert sorted(set(trace.events["cta"])) == [0, 6]
    (problems,) = trace.launches["problems"].tolist()
    assert any("1 CTAs have a header that disagrees" in problem for problem in problems)


@pytest.mark.parametrize(
    "sampling, grid, warps_per_unit, num_warps, text",
    [
        (ALL, [8, 1, 1], 1, 4, None),
        (Sampling(cta_stride=4), [6, 2, 1], 1, 4, "CTAs 0, 4, 8, ... (3 of 12)"),
        (Sampling(cta_ids=(0, 5, 20)), [8, 1, 1], 1, 4, "CTAs 0, 5, 20 (2 of 8)"),
        (Sampling(cta_ids=(2,)), None, 1, 4, "CTAs 2"),
        (Sampling(unit_ids=(0, 2)), None, 1, 8, "warps 0, 2 of 8"),
        (Sampling(unit_ids=(1,)), None, 4, 8, "warpgroups of warps 4-7 of 8"),
    ],
)
def test_the_sampling_in_words(sampling, grid, warps_per_unit, num_warps, text):
    assert sampled_text(sampling, grid, warps_per_unit, num_warps) == text


def test_a_launch_that_names_only_its_grid_expects_the_sampled_ctas_of_it(fake_launch):
    capture = _sampled_launch(fake_launch)
    del capture.meta["num_ctas"]  # a session from elsewhere: the grid alone
    launch = Trace.from_captures({"name": "sampled"}, [capture]).launches.iloc[0]
    assert launch["problems"] == [] and launch["ctas"] == 3
