"""``ctas=``, ``warps=`` and ``occupancy=`` in the mode string: parsed, checked with errors that
say what to type, round-tripped, and in Triton's cache key."""

from __future__ import annotations

import dataclasses

import pytest

from proton_ik.contract.layout import Granularity
from proton_ik.contract.sampling import MAX_LISTED_CTAS
from proton_ik.mode import Mode


@pytest.mark.parametrize(
    "text, fields",
    [
        ("instrumentation:ctas=4", {"ctas": 4}),
        ("instrumentation:ctas=0,5,9", {"ctas": (0, 5, 9)}),
        ("instrumentation:ctas=9,0,5", {"ctas": (0, 5, 9)}),  # listed in any order
        ("instrumentation:ctas=5,", {"ctas": (5,)}),  # a list of one CTA, not a stride of 5
        ("instrumentation:warps=0,4", {"warps": (0, 4)}),
        ("instrumentation:warps=3", {"warps": (3,)}),
        (
            "instrumentation:granularity=warpgroup:warps=4",
            {"granularity": Granularity.WARPGROUP, "warps": (4,)},
        ),
        ("instrumentation:occupancy=keep", {"occupancy": "keep"}),
        (
            "instrumentation:ctas=2:warps=1:occupancy=keep:pairs=off",
            {"ctas": 2, "warps": (1,), "occupancy": "keep", "pairs": False},
        ),
    ],
)
def test_sampling_options_parse_and_round_trip(text, fields):
    mode = Mode.parse(text)
    assert mode == Mode(**fields)
    assert Mode.parse(str(mode)) == mode
    assert Mode.from_knob(mode.knob) == mode


def test_a_list_of_one_cta_and_a_stride_print_apart():
    assert str(Mode(ctas=(5,))).endswith(":ctas=5,")
    assert str(Mode(ctas=5)).endswith(":ctas=5")
    assert Mode(ctas=(5,)).knob != Mode(ctas=5).knob


def test_defaults_leave_the_string_and_the_cache_key_as_they_were():
    assert (
        str(Mode(ctas=1, warps=(), occupancy="keep"))
        == "instrumentation:granularity=warp:capacity=auto:pairs=on"
    )
    assert Mode.parse("instrumentation:ctas=1:occupancy=keep") == Mode()
    assert str(Mode(occupancy="free")).endswith(":pairs=on:occupancy=free")  # the default before issue 28
    assert not Mode().sampled and Mode(ctas=2).sampled and Mode(warps=(0,)).sampled


def test_every_option_makes_its_own_cache_key():
    modes = [
        Mode(),
        Mode(ctas=4),
        Mode(ctas=(4,)),
        Mode(ctas=(0, 4)),
        Mode(warps=(0,)),
        Mode(occupancy="free"),
    ]
    assert len({mode.knob for mode in modes}) == len(modes)


@pytest.mark.parametrize(
    "text, message",
    [
        ("instrumentation:ctas=0", r"ctas=0: use ctas=N for every N-th CTA .* one CTA: ctas=5,"),
        ("instrumentation:ctas=every4", r"ctas='every4': use ctas=N"),
        ("instrumentation:ctas=,", r"ctas=',': use ctas=N"),
        ("instrumentation:ctas=1,1", r"ctas=1,1 lists 1 more than once"),
        ("instrumentation:ctas=-1,3", r"ctas=-1,3: each must be a linear CTA id from 0 to"),
        ("instrumentation:warps=32", r"warps=32: each must be a warp id within the CTA from 0 to 31"),
        ("instrumentation:warps=a", r"warps='a': list warp ids with commas, e.g. warps=0,4"),
        ("instrumentation:warps=2,2", r"warps=2,2 lists 2 more than once"),
        ("instrumentation:granularity=cta:warps=0", r"warps=0 has no meaning with granularity=cta.*ctas="),
        (
            "instrumentation:granularity=warpgroup:warps=1,5",
            r"a warpgroup is named by its first warp .* use warps=0,4",
        ),
        (
            "instrumentation:granularity=warp_2:warps=3",
            r"granularity=warp_2: a unit is named by its first warp \(0, 2, 4, ...\); use warps=2",
        ),
        ("instrumentation:aggregate=on:ctas=2", r"not supported with aggregate=on yet"),
        ("instrumentation:aggregate=on:warps=0", r"not supported with aggregate=on yet"),
        ("instrumentation:occupancy=max", r"occupancy='max': use occupancy=free or occupancy=keep"),
    ],
)
def test_nonsense_is_refused_with_what_to_type(text, message):
    with pytest.raises(ValueError, match=message):
        Mode.parse(text)


def test_a_long_list_of_ctas_is_refused_for_a_stride():
    listed = ",".join(map(str, range(MAX_LISTED_CTAS + 1)))
    with pytest.raises(
        ValueError, match=rf"lists {MAX_LISTED_CTAS + 1} CTAs: list 1 to {MAX_LISTED_CTAS}.*ctas=N"
    ):
        Mode.parse(f"instrumentation:ctas={listed}")
    assert len(Mode.parse(f"instrumentation:ctas={listed.rsplit(',', 1)[0]}").ctas) == MAX_LISTED_CTAS  # type: ignore[arg-type]


def test_python_values_are_checked_as_strings_are():
    assert Mode(ctas=[3, 1]).ctas == (1, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ctas=True"):
        Mode(ctas=True)
    with pytest.raises(ValueError, match="occupancy="):
        Mode(occupancy="all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="granularity=cta"):
        dataclasses.replace(Mode(warps=(0,)), granularity=Granularity.CTA)
