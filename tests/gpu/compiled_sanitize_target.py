"""Run under compute-sanitizer memcheck: a compiled program in a session, with Inductor's own
kernels recorded (unscoped=kernel) beside a scoped user kernel."""

from __future__ import annotations

import os

import compiled_kernels
import torch

import proton_ik

block = compiled_kernels.Block(256).cuda()
x = torch.randn(128, 256, device="cuda")


def step(t: torch.Tensor) -> torch.Tensor:
    return compiled_kernels.scaled(block(t))


compiled = torch.compile(step)
with torch.no_grad():
    expected = compiled(x)
    proton_ik.start(
        "memcheck", out_dir=os.environ.get("PROTON_IK_OUT", "."), mode="instrumentation:unscoped=kernel"
    )
    out = compiled(x)
    torch.cuda.synchronize()
    result = proton_ik.finalize()
assert torch.equal(out, expected)
assert result.launches >= 2, result.launches
print("compiled records ok", result.launches)
