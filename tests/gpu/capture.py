"""Capture the small real session files that the CPU tests decode, and the demo's bundled one.

Run on a GPU machine from the repository root: ``python tests/gpu/capture.py OUT_DIR``. It
writes ``add.pik`` (three scopes, no ring wrap), ``ring.pik`` (a ring that wraps),
``spin.pik`` (scopes of known length, with the reference spans in the session info),
``slots.pik`` (layout version 3: a persistent kernel's one-slot pairs, sized at launch, and a
spin's pairs too long for one slot) and ``demo.pik`` (the demo matmul), each a few hundred kB
at most.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch

import proton_ik
from proton_ik import demo

sys.path.insert(0, str(Path(__file__).parent))
import kernels


def capture(out_dir: Path, name: str, launch, mode: str = "instrumentation") -> Path:
    proton_ik.start(name, mode=mode, out_dir=out_dir / "work", formats=())
    launch()
    torch.cuda.synchronize()
    result = proton_ik.finalize()
    target = out_dir / f"{name}.pik"
    shutil.copy(result.paths["session"], target)
    print(
        f"{target}: {result.launches} launches, {result.trace.record_count} records, {target.stat().st_size} bytes"
    )
    return target


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    n = 16 * 1024
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    capture(
        out_dir,
        "add",
        lambda: kernels.add_kernel[(16,)](x, y, out, n, BLOCK=1024),
        "instrumentation:capacity=8",
    )

    ring_in = torch.randn(4 * 512, device="cuda")
    ring_out = torch.empty_like(ring_in)
    capture(
        out_dir,
        "ring",
        lambda: kernels.loop_kernel[(4,)](ring_in, ring_out, ITERS=20, BLOCK=512, num_warps=4),
        "instrumentation:capacity=16",
    )

    spans = torch.zeros(8, dtype=torch.int64, device="cuda")
    capture(
        out_dir,
        "spin",
        lambda: kernels.spin_kernel[(8,)](spans, CYCLES=20000, num_warps=1),
        "instrumentation:capacity=2",
    )
    (out_dir / "spin_reference.txt").write_text(" ".join(str(v) for v in spans.cpu().tolist()) + "\n")

    tiles_out = torch.zeros(24 * 128, device="cuda")
    tiles_in = torch.randn(4 * 128, device="cuda")
    long_spans = torch.zeros(4, dtype=torch.int64, device="cuda")

    def slots() -> None:
        kernels.persistent_kernel[(8,)](tiles_in, tiles_out, 24, 4 * 128, NUM_PROGRAMS=8, BLOCK=128)
        kernels.spin_kernel[(4,)](long_spans, CYCLES=300_000, num_warps=1)  # over 2**18 cycles

    capture(out_dir, "slots", slots, "instrumentation:layout=3")

    capture(out_dir, "demo", demo.launch_demo, demo.DEMO_MODE)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
