"""Segments sized at each launch, on the GPU: a persistent kernel whose loops run a number of
times computed from its arguments records every scope in the default mode, with nothing
overwritten, its results bitwise those of the plain kernel, at launches of different sizes,
from Triton's launcher and from a torch.compile'd program, and clean under memcheck."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import proton_ik

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
import triton  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import kernels  # noqa: E402
from profiling import memcheck_clean  # noqa: E402

PROGRAMS, BLOCK = 8, 128


def expected_counts(n_tiles: int, k: int, num_warps: int = 4) -> dict[tuple[int, int, str], int]:
    """Per (CTA, warp, scope): program p runs the tiles range(p, n_tiles, PROGRAMS), each with
    cdiv(k, BLOCK) "k" scopes."""
    counts = {}
    for cta in range(PROGRAMS):
        tiles = len(range(cta, n_tiles, PROGRAMS))
        for warp in range(num_warps):
            if tiles:
                counts[(cta, warp, "tile")] = tiles
                counts[(cta, warp, "k")] = tiles * triton.cdiv(k, BLOCK)
    return counts


def run(n_tiles: int, k: int):
    """The output and a launch of the persistent kernel over ``n_tiles`` tiles and ``k`` inputs."""
    x = torch.randn(k, device="cuda")
    out = torch.zeros(n_tiles * BLOCK, device="cuda")
    return out, lambda: kernels.persistent_kernel[(PROGRAMS,)](
        x, out, n_tiles, k, NUM_PROGRAMS=PROGRAMS, BLOCK=BLOCK
    )


@pytest.mark.parametrize("n_tiles, k", [(100, 64 * BLOCK), (20, 3 * BLOCK + 5)])
def test_a_persistent_kernel_records_every_scope_in_the_default_mode(tmp_path, n_tiles, k):
    out, launch = run(n_tiles, k)
    launch()
    plain = out.clone()
    out.zero_()
    proton_ik.start("persistent", out_dir=tmp_path)
    try:
        version = launch().metadata.proton_ik["layout"]["version"]
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    assert torch.equal(out, plain)
    launches = result.trace.launches
    assert int(launches["overwritten"].sum()) == 0
    counts = result.events.groupby(["cta", "warp", "scope"]).size().to_dict()
    assert counts == expected_counts(n_tiles, k)
    assert launches["capacity"].tolist() == [capacity(n_tiles, k, version)]


def capacity(n_tiles: int, k: int, version: int) -> int:
    """The launch's segments: its busiest unit's slots (a tile's begin and end are single
    records, each k scope one pair: one entry in layout 2, up to two slots in layout 3, which
    layout=auto gives this loop of no tensor-core instruction) rounded up to a power of two,
    not the compiled ring."""
    per_pair = 2 if version >= 3 else 1
    most = len(range(0, n_tiles, PROGRAMS)) * (2 + per_pair * triton.cdiv(k, BLOCK))
    return 1 << (most - 1).bit_length()


SIZES = ((100, 64 * BLOCK), (9, BLOCK), (300, 32 * BLOCK))


def test_launches_of_different_sizes_in_one_session_are_each_exact(tmp_path):
    launches = [run(n_tiles, k) for n_tiles, k in SIZES]
    proton_ik.start("sizes", out_dir=tmp_path)
    try:
        versions = {launch().metadata.proton_ik["layout"]["version"] for _, launch in launches}
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    assert int(result.trace.launches["overwritten"].sum()) == 0
    for number, (n_tiles, k) in enumerate(SIZES):
        events = result.events[result.events["launch"] == number]
        assert events.groupby(["cta", "warp", "scope"]).size().to_dict() == expected_counts(n_tiles, k)
    (version,) = versions
    assert result.trace.launches["capacity"].tolist() == [capacity(*size, version) for size in SIZES]


def test_a_persistent_user_kernel_under_torch_compile_is_sized_at_each_launch(tmp_path):
    n_tiles, k = 100, 64 * BLOCK
    x = torch.randn(k, device="cuda")

    def step(x):
        out = torch.zeros(n_tiles * BLOCK, device="cuda")
        kernels.persistent_kernel[(PROGRAMS,)](x, out, n_tiles, k, NUM_PROGRAMS=PROGRAMS, BLOCK=BLOCK)
        return out * 2

    eager = step(x)
    proton_ik.start("compiled_persistent", out_dir=tmp_path)
    try:
        compiled = torch.compile(step, fullgraph=True)
        got = compiled(x)
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    assert torch.equal(got, eager)
    ours = result.trace.launches[result.trace.launches["kernel"].str.contains("persistent")]
    assert len(ours) == 1 and int(ours["overwritten"].sum()) == 0
    events = result.events[result.events["launch"].isin(ours["launch"])]
    assert events.groupby(["cta", "warp", "scope"]).size().to_dict() == expected_counts(n_tiles, k)


def test_compute_sanitizer_memcheck_is_clean_on_a_launch_sized_kernel(tmp_path):
    memcheck_clean("sanitize_launch_sized.py", "launch-sized records ok", {"PROTON_IK_OUT": str(tmp_path)})
