"""``contract.launch_bound``: a bound each launch evaluates, checked as any field of a file, and
evaluated as intervals over the grid's program ids, never below what a program really runs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proton_ik.contract.launch_bound import MAX_DEPTH, MAX_NODES, BoundError, LaunchBound, parse

PERSISTENT = [
    "loop",
    0,
    ["pid", 0],
    ["arg", "n_tiles"],
    ["const", 132],
    ["sum", 2, ["loop", 1, ["const", 0], ["arg", "k"], ["const", 1], 1]],
]


def test_a_bound_round_trips_through_its_dict():
    bound = LaunchBound(PERSISTENT, "the loops at k.py:9, at k.py:12 run ...")
    assert parse(bound.to_dict(), "profile.launch_bound") == bound
    assert bound.arguments == ("n_tiles", "k")


@pytest.mark.parametrize(
    "count, problem",
    [
        (["loop", 0, ["pid", 3], ["const", 1], ["const", 1], 1], "is not a value node"),  # no axis 3
        (["loop", 0, ["const", 0], ["iv", 0], ["const", 1], 1], "is not a value node"),  # its own iv
        (
            [
                "loop",
                0,
                ["const", 0],
                ["const", 4],
                ["const", 1],
                ["loop", 0, ["const", 0], ["const", 1], ["const", 1], 1],
            ],
            "is not a count",
        ),
        (["add", 32, 1, 2], "is not a count"),
        (["sum"], "is not a count"),
        ([["const", 1]], "not a node"),
        (
            ["loop", 0, ["add", True, ["const", 1], ["const", 1]], ["const", 1], ["const", 1], 1],
            "is not a value node",
        ),
        (["loop", 0, ["arg", ""], ["const", 1], ["const", 1], 1], "is not a value node"),
        (-1, "not a node"),
        ("many", "not a node"),
    ],
)
def test_a_malformed_bound_is_refused_naming_the_node(count, problem):
    with pytest.raises(BoundError, match=problem):
        parse({"count": count, "reason": "r"}, "launch 3: profile.launch_bound")


def test_a_bound_too_deep_or_too_large_is_refused():
    deep: object = 1
    for _ in range(MAX_DEPTH + 2):
        deep = ["sum", deep]
    with pytest.raises(BoundError, match="nests over"):
        parse({"count": deep, "reason": "r"}, "b")
    with pytest.raises(BoundError, match="over 4096 nodes"):
        parse({"count": ["sum", *[["most", 1] for _ in range(MAX_NODES)]], "reason": "r"}, "b")
    with pytest.raises(BoundError, match="reason"):
        parse({"count": 1, "reason": 7}, "b")


def busiest(lb: tuple[int, int], ub: int, step: int, grid: int, inner: int) -> int:
    """What the busiest program writes: ``range(lb0 + pid * lb1, ub, step)`` trips of ``inner``."""
    return max(len(range(lb[0] + pid * lb[1], ub, step)) * inner for pid in range(grid))


@settings(max_examples=300, deadline=None)
@given(
    start=st.integers(-50, 50),
    scale=st.integers(0, 5),
    ub=st.integers(-100, 2000),
    step=st.integers(1, 300),
    grid=st.integers(1, 40),
    inner=st.integers(0, 7),
)
def test_the_bound_holds_every_program_and_is_exact_when_program_zero_is_busiest(
    start, scale, ub, step, grid, inner
):
    count = [
        "loop",
        0,
        ["add", 32, ["const", start], ["mul", 32, ["pid", 0], ["const", scale]]],
        ["arg", "n"],
        ["arg", "s"],
        inner,
    ]
    entries = LaunchBound(count, "r").compile()([grid], {"n": ub, "s": step})
    truth = busiest((start, scale), ub, step, grid, inner)
    assert entries is not None and entries >= truth
    if scale == 0 or truth == 0 or inner == 0:
        assert entries == truth


@pytest.mark.parametrize(
    "arguments, why",
    [
        ({"n": 10, "s": 0}, "a step that is not positive"),
        ({"n": 10, "s": -2}, "negative step"),
        ({"n": 10}, "a missing argument"),
        ({"n": 1.5, "s": 1}, "a float"),
    ],
)
def test_a_launch_whose_arguments_give_no_bound_gets_none(arguments, why):
    count = ["loop", 0, ["const", 0], ["arg", "n"], ["arg", "s"], 1]
    assert LaunchBound(count, "r").compile()([4], arguments) is None, why


def test_arithmetic_that_would_wrap_in_the_kernel_gives_no_bound():
    count = ["loop", 0, ["const", 0], ["mul", 32, ["arg", "n"], ["const", 1 << 20]], ["const", 1], 1]
    entries = LaunchBound(count, "r").compile()
    assert entries([1], {"n": 1000}) == 1000 << 20
    assert entries([1], {"n": 1 << 12}) is None  # 2**32: past int32, the kernel's loop would wrap


def test_an_inner_loop_bounded_by_the_outer_induction_variable():
    """Causal attention: ``for n in range(0, (m + 1) * B, B)`` inside ``for m in range(pid, M, G)``."""
    inner = [
        "loop",
        1,
        ["const", 0],
        ["mul", 32, ["add", 32, ["iv", 0], ["const", 1]], ["const", 16]],
        ["const", 16],
        1,
    ]
    count = ["loop", 0, ["pid", 0], ["arg", "M"], ["programs", 0], inner]
    entries = LaunchBound(count, "r").compile()([4], {"M": 10})
    truth = max(sum(m + 1 for m in range(pid, 10, 4)) for pid in range(4))
    assert entries is not None and entries >= truth


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 70), 1 << 70)
    | st.text(max_size=5)
    | st.sampled_from(
        [
            "loop",
            "sum",
            "most",
            "const",
            "arg",
            "pid",
            "programs",
            "iv",
            "add",
            "mul",
            "div",
            "cast",
            "either",
        ]
    ),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=40,
)


@settings(max_examples=500, deadline=None)
@given(
    count=JSON,
    grid=st.lists(st.integers(0, 1 << 31), min_size=1, max_size=3),
    n=st.integers(-(1 << 40), 1 << 40),
)
def test_any_json_is_refused_or_evaluates_to_a_count_or_none(count, grid, n):
    """What a damaged or hostile file holds in ``launch_bound``: a BoundError, or a bound whose
    evaluation never raises."""
    try:
        bound = parse({"count": count, "reason": "r"}, "profile.launch_bound")
    except BoundError:
        return
    entries = bound.compile()(grid, {name: n for name in bound.arguments})
    assert entries is None or (isinstance(entries, int) and entries >= 0)


def values(loops: tuple[int, ...]):
    leaves = [
        st.builds(lambda v: ["const", v], st.integers(-(1 << 40), 1 << 40)),
        st.builds(lambda a: ["arg", a], st.sampled_from(["n", "k"])),
        st.builds(lambda a: ["pid", a], st.integers(0, 2)),
        st.builds(lambda a: ["programs", a], st.integers(0, 2)),
        *([st.builds(lambda k: ["iv", k], st.sampled_from(loops))] if loops else []),
    ]
    return st.recursive(
        st.one_of(leaves),
        lambda inner: st.one_of(
            st.builds(
                lambda op, w, a, b: [op, w, a, b],
                st.sampled_from(
                    ["add", "sub", "mul", "div", "ceildiv", "rem", "min", "max", "divu", "ceildivu", "remu"]
                ),
                st.sampled_from([32, 64]),
                inner,
                inner,
            ),
            st.builds(lambda w, a: ["cast", w, a], st.sampled_from([32, 64]), inner),
            st.builds(lambda a, b: ["either", a, b], inner, inner),
        ),
        max_leaves=8,
    )


@st.composite
def counts(draw, loops: tuple[int, ...] = (), depth: int = 0):
    if depth >= 3:
        return draw(st.integers(0, 10))
    kind = draw(st.sampled_from(["int", "sum", "most", "loop"]))
    if kind == "int":
        return draw(st.integers(0, 10))
    if kind == "loop":
        loop = len(loops)
        return [
            "loop",
            loop,
            draw(values(loops)),
            draw(values(loops)),
            draw(values(loops)),
            draw(counts((*loops, loop), depth + 1)),
        ]
    return [kind, *draw(st.lists(counts(loops, depth + 1), min_size=1, max_size=3))]


@settings(max_examples=200, deadline=None)
@given(
    count=counts(),
    grid=st.lists(st.integers(1, 1 << 20), min_size=1, max_size=3),
    n=st.integers(-(1 << 33), 1 << 33),
    k=st.integers(-100, 1 << 20),
)
def test_any_well_formed_bound_evaluates_without_raising(count, grid, n, k):
    bound = parse({"count": count, "reason": "r"}, "b")
    entries = bound.compile()(grid, {"n": n, "k": k})
    assert entries is None or (isinstance(entries, int) and entries >= 0)
