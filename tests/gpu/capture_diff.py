"""Capture the two sessions that ``tests/viewer/test_diff.py`` compares: one kernel, two block sizes.

Run on a GPU machine from the repository root: ``python tests/gpu/capture_diff.py OUT_DIR``, then
copy ``diff_a.pik`` and ``diff_b.pik`` into ``tests/data/``. Both run ``add_kernel`` (scopes
load, compute, store; 4 warps) once over the same N elements: A with BLOCK 256 (384 CTAs), B
with BLOCK 1024 (96 CTAs, each warp moving 4x the elements). Each file stays under 300 kB.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch

import proton_ik

sys.path.insert(0, str(Path(__file__).parent))
import kernels

N = 96 * 1024
BLOCKS = {"diff_a": 256, "diff_b": 1024}
NUM_WARPS = 4
MAX_BYTES = 300_000
WARMUP = 20  # plain launches first, so that the SM clocks have ramped up


def capture(out_dir: Path, name: str, block: int) -> Path:
    x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    out = torch.empty_like(x)
    grid = (N // block,)
    for _ in range(WARMUP):
        kernels.add_kernel[grid](x, y, out, N, BLOCK=block, num_warps=NUM_WARPS)
    torch.cuda.synchronize()
    proton_ik.start(name, mode="instrumentation", out_dir=out_dir / "work", formats=())
    kernels.add_kernel[grid](x, y, out, N, BLOCK=block, num_warps=NUM_WARPS)
    torch.cuda.synchronize()
    result = proton_ik.finalize()
    torch.testing.assert_close(out, x * y + x)
    target = out_dir / f"{name}.pik"
    shutil.copy(result.paths["session"], target)
    size = target.stat().st_size
    if size > MAX_BYTES:
        raise SystemExit(f"{target} is {size:,} bytes, over {MAX_BYTES:,}: lower N in {__file__}")
    print(f"{target}: BLOCK {block}, {grid[0]} CTAs, {result.trace.record_count} records, {size:,} bytes")
    return target


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, block in BLOCKS.items():
        capture(out_dir, name, block)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
