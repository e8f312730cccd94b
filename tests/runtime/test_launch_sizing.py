"""Segments sized at each launch (``runtime.launch_sizing`` through ``runtime.hooks``): a kernel
whose loops run a number of times computed from its arguments gets, at each launch, the capacity
its busiest unit needs, told to the kernel in the buffer address's low bits; where the launch
cannot be sized, a ring, and the launch's capacity says why."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from triton.compiler.compiler import CompiledKernel, LazyDict

from proton_ik.contract.launch_bound import LaunchBound
from proton_ik.contract.layout import CAPACITY_SHIFT_MASK, CTA_ALIGN, BufferLayout, min_capacity
from proton_ik.contract.metadata import Capacity, KernelMetadata
from proton_ik.runtime import hooks, loaded

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))
from fake_drain import FakeDrain

FUNCTION = 7101
RING = 512
UNITS = 4
# for tile in range(pid, n_tiles, NUM_SMS): enter and exit "tile" (NUM_SMS a constexpr, 132)
PERSISTENT = LaunchBound(
    ["loop", 0, ["pid", 0], ["arg", "n_tiles"], ["const", 132], 2], "the loop at k.py:9 runs ..."
)


class _Compiled:
    """A loaded ``persistent(x_ptr, n_tiles, NUM_SMS: constexpr)``, as launch_metadata reads it."""

    name = "persistent"
    function = FUNCTION
    src = SimpleNamespace(
        fn=SimpleNamespace(arg_names=["x_ptr", "n_tiles", "NUM_SMS"], launch_metadata=None),
        signature={"x_ptr": "*fp32", "n_tiles": "i32", "NUM_SMS": "constexpr"},
    )

    def _init_handles(self) -> None:
        """Loaded already."""


def recorder_of(monkeypatch, pool_bytes: int = 1 << 26) -> hooks.LaunchRecorder:
    capacity = Capacity(RING, "launch", None, "sized at each launch")
    metadata = KernelMetadata(
        layout=BufferLayout(units=UNITS, capacity=RING),
        num_warps=4,
        capacity=capacity,
        launch_bound=PERSISTENT,
    )
    kernel = loaded.KernelInfo("persistent", 4, metadata.layout.cta_bytes, metadata, metadata.to_dict())
    monkeypatch.setitem(loaded.KERNELS, FUNCTION, kernel)
    recorder = hooks.LaunchRecorder(
        pool_bytes, lambda *args: None, is_capturing=lambda: False, current_device=lambda: 0
    )
    recorder.drains = {0: FakeDrain(pool_bytes)}
    recorder.install()
    return recorder


@pytest.fixture
def recorder(monkeypatch, launch_path_kind):
    recorder = recorder_of(monkeypatch)
    yield recorder
    recorder.uninstall()


def launch(recorder: hooks.LaunchRecorder, args: tuple, grid: tuple = (132, 1, 1)) -> tuple[int, Any]:
    """launch_metadata, the allocator (asked for Triton's size: the compiled ring's regions), the
    exit hook; the address handed out and the launch the drain got."""
    data = CompiledKernel.launch_metadata(_Compiled(), grid, 5, *args)  # type: ignore[arg-type]
    ctas = grid[0] * grid[1] * grid[2]
    address = recorder.allocator(ctas * loaded.KERNELS[FUNCTION].cta_bytes, 128, 5)
    recorder.exit_hook(data)
    return address, recorder.drains[0].submitted[-1][0]


def capacity_of(address: int) -> int:
    return 1 << (address & CAPACITY_SHIFT_MASK)


@pytest.mark.parametrize(
    "args",
    [(0xDEAD, 1000, 132), (0xDEAD, 1000)],  # Triton's JIT passes constexprs too, Inductor does not
    ids=["jit", "inductor"],
)
def test_a_launch_gets_the_segments_its_arguments_call_for(recorder, args):
    address, queued = launch(recorder, args)
    tiles = -(-1000 // 132)  # program 0 runs the most tiles: 8
    capacity = 16  # 8 tiles x 2 records, a power of two already
    assert capacity_of(address) == capacity and (address & ~CAPACITY_SHIFT_MASK) % CTA_ALIGN == 0
    assert tiles * 2 == capacity
    layout = BufferLayout(units=UNITS, capacity=capacity)
    assert queued.kernel.layout == layout and queued.num_ctas == 132
    assert queued.chunk.size >= 132 * layout.cta_bytes
    assert queued.kernel.dense  # at most twice what was written: copied whole
    profile = queued.meta()["profile"]
    assert profile["layout"] == layout.to_dict()
    assert profile["capacity"]["source"] == "launch" and profile["capacity"]["entries"] == capacity
    assert KernelMetadata.from_dict(profile, "launch").launch_bound == PERSISTENT


def test_launches_of_one_capacity_share_one_kernel_variant(recorder):
    _, first = launch(recorder, (0, 1000, 132))
    _, second = launch(recorder, (0, 1050, 132))  # still 8 tiles for program 0
    _, third = launch(recorder, (0, 10, 132))  # one tile: 2 entries
    assert first.kernel is second.kernel and third.kernel is not first.kernel
    assert third.kernel.layout.capacity == 2


def test_arguments_that_match_no_parameter_list_get_the_ring(recorder):
    address, queued = launch(recorder, (1, 2, 3, 4))
    assert capacity_of(address) == RING and queued.kernel.layout.capacity == RING
    capacity = queued.meta()["profile"]["capacity"]
    assert capacity["source"] == "ring"
    assert "the launch passed 4 arguments" in capacity["reason"] and "['n_tiles']" in capacity["reason"]


def test_an_argument_that_is_not_a_whole_number_gets_the_ring(recorder):
    address, queued = launch(recorder, (0, "many", 132))
    assert capacity_of(address) == RING
    assert "this launch's arguments give no bound" in queued.meta()["profile"]["capacity"]["reason"]


def test_a_bound_the_pool_cannot_hold_gets_the_largest_ring_that_fits(monkeypatch, launch_path_kind):
    recorder = recorder_of(monkeypatch, pool_bytes=1 << 22)
    try:
        address, queued = launch(recorder, (0, 10**6, 132))  # 7576 tiles for program 0
        capacity = queued.kernel.layout.capacity
        assert capacity_of(address) == capacity < 2 * 7576
        assert (
            132 * queued.kernel.cta_bytes
            <= (1 << 22) // 2
            < 132 * BufferLayout(units=UNITS, capacity=2 * capacity).cta_bytes
        )
        reason = queued.meta()["profile"]["capacity"]["reason"]
        assert "up to 15152 slots" in reason and "raise pool_bytes" in reason
    finally:
        recorder.uninstall()


def test_a_launch_that_announced_nothing_is_read_as_the_smallest_ring(recorder):
    """Its address carried no capacity, so the kernel wrote the smallest ring its layout allows
    (one in version 2, two slots in version 3, which keep the unit headers aligned): the launch's layout says so,
    rather than the compiled ring's, which the buffer does not hold."""
    address = recorder.allocator(132 * loaded.KERNELS[FUNCTION].cta_bytes, 128, 5)
    recorder.exit_hook(LazyDict({"name": "persistent", "function": FUNCTION, "stream": 5}))
    ((queued, _),) = recorder.drains[0].submitted
    assert address & CAPACITY_SHIFT_MASK == 0
    smallest = min_capacity(loaded.KERNELS[FUNCTION].layout.version)
    assert queued.kernel.layout.capacity == smallest and queued.num_ctas == 132
    assert "did not announce the launch" in queued.meta()["profile"]["capacity"]["reason"]


def test_a_launch_that_repeats_earlier_sizes_is_not_evaluated_again(recorder, monkeypatch):
    kernel = loaded.KERNELS[FUNCTION]
    evaluated: list[tuple] = []
    evaluate = kernel.bound_entries
    assert evaluate is not None

    def counted(grid, arguments):
        evaluated.append((tuple(grid), dict(arguments)))
        return evaluate(grid, arguments)

    object.__setattr__(kernel, "bound_entries", counted)
    first = [launch(recorder, (0, 1000, 132))[1].kernel for _ in range(3)]
    other = launch(recorder, (0, 10, 132))[1].kernel  # other sizes: evaluated, 2 entries
    wider = launch(recorder, (0, 1000, 132), grid=(264, 1, 1))[1].kernel  # another grid: evaluated
    assert first[0] is first[1] is first[2] and first[0].layout.capacity == 16
    assert other.layout.capacity == 2 and wider is first[0]  # the step is NUM_SMS, not the grid
    assert [arguments["n_tiles"] for _, arguments in evaluated] == [1000, 10, 1000]
    assert [grid[0] for grid, _ in evaluated] == [132, 132, 264]


def test_sizes_that_keep_changing_are_not_all_remembered(recorder, monkeypatch):
    from proton_ik.runtime import launch_sizing

    monkeypatch.setattr(launch_sizing, "SIZES_REMEMBERED", 4)
    for tiles in range(1, 20):
        _, queued = launch(recorder, (0, tiles * 132, 132))
        assert queued.kernel.layout.capacity == 1 << (2 * tiles - 1).bit_length()
    assert len(loaded.KERNELS[FUNCTION].sized_launches) <= 4


def test_a_launch_whose_grid_cannot_be_a_key_is_sized_each_time(recorder):
    """A launcher that passes its grid as a list: the buffer is worked out at each launch, as
    for a tuple, and nothing is remembered for it."""
    by_tuple = [launch(recorder, (0, 1000, 132))[1].kernel for _ in range(2)]
    remembered = len(loaded.KERNELS[FUNCTION].sized_launches)
    by_list = [launch(recorder, (0, 1000, 132), grid=[132, 1, 1])[1].kernel for _ in range(2)]  # type: ignore[arg-type]
    assert by_tuple[0] is by_tuple[1] is by_list[0] is by_list[1]
    assert len(loaded.KERNELS[FUNCTION].sized_launches) == remembered


def test_a_bound_that_reads_only_the_grid_is_evaluated_once_per_grid(monkeypatch, launch_path_kind):
    """A loop over the grid's programs and no argument: what the buffer depends on is known at
    the first launch (no argument of the bound's to find), and the next launches of that grid
    look it up."""
    grid_only = LaunchBound(
        ["loop", 0, ["pid", 0], ["const", 4096], ["programs", 0], 2], "the loop at k.py:9 runs ..."
    )
    recorder = recorder_of(monkeypatch)
    try:
        kernel = loaded.KERNELS[FUNCTION]
        metadata = KernelMetadata(
            layout=kernel.layout, num_warps=4, capacity=kernel.metadata.capacity, launch_bound=grid_only
        )
        kernel = loaded.KernelInfo("persistent", 4, metadata.layout.cta_bytes, metadata, metadata.to_dict())
        monkeypatch.setitem(loaded.KERNELS, FUNCTION, kernel)
        evaluated: list[tuple] = []
        evaluate = kernel.bound_entries
        assert evaluate is not None
        object.__setattr__(kernel, "bound_entries", lambda g, a: evaluated.append(tuple(g)) or evaluate(g, a))
        launched = [launch(recorder, (0, 1000, 132))[1].kernel for _ in range(3)]
        assert launched[0] is launched[1] is launched[2] and len(evaluated) == 1
        assert launched[0].layout.capacity == 64  # 4096 / 132 programs: 32 tiles, 2 slots each
    finally:
        recorder.uninstall()
