"""A program written for triton.profiler's instrumentation mode, in the style of Proton's
intra-kernel tutorial and tests, with only the imports changed to proton_ik."""

from __future__ import annotations

import json

import pytest
import triton
import triton.language as tl

import proton_ik as proton
import proton_ik.language as pl

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def _named(grid, kernel, args):
    return {"name": f"add_{args['n'] // grid[0]}", "bytes": 3 * 4 * args["n"]}


@triton.jit(launch_metadata=_named)
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    pl.enter_scope("load")
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    pl.exit_scope("load")
    with pl.scope("store"):
        tl.store(out_ptr + offsets, x + y, mask=mask)


@pytest.mark.parametrize(
    "mode",
    [
        "default",
        "default:buffer_type=global",
        "default:metric_type=cycle:buffer_size=4096",
        proton.mode.Default(metric_type="cycle", optimizations="clock32", buffer_type="global"),
    ],
    ids=["default", "global", "sized", "Default"],
)
def test_a_triton_profiler_program_runs_with_only_the_import_changed(tmp_path, mode):
    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    pl.enable_semantic("triton")
    proton.start(str(tmp_path / "add"), backend="instrumentation", mode=mode, data="trace", hook="triton")
    with proton.scope("warmup"):
        add[(n // 1024,)](x, y, out, n, BLOCK=1024)
    with proton.scope("main"):
        for block in (256, 512):
            add[(n // block,)](x, y, out, n, BLOCK=block)
    torch.cuda.synchronize()
    result = proton.finalize()
    assert torch.equal(out, x + y)
    # Where triton.profiler's code looks for it, in Chrome's format.
    chrome = json.loads((tmp_path / "add.chrome_trace").read_text())
    slices = [e for e in chrome["traceEvents"] if e.get("ph") == "X" and e.get("name") in ("load", "store")]
    launches = result.trace.launches
    expected = sum((n // block) * 4 * 2 for block in (1024, 256, 512))
    assert len(slices) == len(result.events) == expected
    assert sorted(launches["name"]) == ["add_1024", "add_256", "add_512"]
    assert sorted(launches["host_scope"]) == ["main", "main", "warmup"]
    assert set(result.events["host_scope"]) == {"main", "warmup"}


def _named_by_block(grid, kernel, args):
    return {"name": f"add_{args['BLOCK_SIZE']}"}


@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 256}), triton.Config({"BLOCK_SIZE": 1024})], key=["n"])
@triton.jit(launch_metadata=_named_by_block)
def tuned_add(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    with pl.scope("add"):
        tl.store(
            out_ptr + offsets,
            tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
            mask=mask,
        )


def test_an_autotuned_kernel_named_by_launch_metadata_writes_protons_tree(tmp_path):
    n = 1 << 22
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_SIZE"]),)

    proton.start(
        str(tmp_path / "tuned"), backend="instrumentation", mode="default", hook="triton", data="tree"
    )
    for _ in range(2):
        tuned_add[grid](x, y, out, n)
    torch.cuda.synchronize()
    result = proton.finalize()
    assert torch.equal(out, x + y)
    block = tuned_add.best_config.kwargs["BLOCK_SIZE"]
    launches = result.trace.launches
    # Each config the autotuner tried, once, as Proton's tree names every config it ran; then
    # the user's calls, named.
    assert list(launches["name"]) == ["add_256", "add_1024", f"add_{block}", f"add_{block}"]
    assert list(launches["config"].astype(str).str.contains("autotune=benchmark")) == [
        True,
        True,
        False,
        False,
    ]
    blocks = [256, 1024, block, block]
    assert list(result.events.groupby("launch").size()) == [(n // b) * 4 for b in blocks]
    tree = json.loads((tmp_path / "tuned.hatchet").read_text())
    assert {child["frame"]["name"] for child in tree[0]["children"]} == {"add_256", "add_1024"}
    assert "normalized_cycles" in json.dumps(tree)
