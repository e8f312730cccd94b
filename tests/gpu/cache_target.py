"""A program whose compiled function is cached by Inductor between runs (the GPU test of
``test_torch_compile_gpu``): ``python cache_target.py session_first|plain_first OUT_DIR``, with
TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR set by the caller. It compiles a LayerNorm + GELU
on its first call, inside a session that records every kernel or outside one, then runs it in
the other state, and prints, as JSON, the launches recorded and whether the outputs equal
eager's."""

from __future__ import annotations

import json
import sys

import torch

import proton_ik


def block(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(a + b, (a.shape[-1],)))


def main(order: str, out_dir: str) -> dict:
    compiled = torch.compile(block)
    a = torch.randn(512, 2048, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    b = torch.randn(512, 2048, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    expected = block(a, b)
    found: dict = {"order": order}
    for state in ("session", "plain") if order == "session_first" else ("plain", "session"):
        if state == "session":
            proton_ik.start(
                f"cache_{order}", mode="instrumentation:unscoped=kernel", out_dir=out_dir, formats=()
            )
        out = compiled(a, b)
        torch.cuda.synchronize()
        found[f"{state}_close"] = bool(torch.allclose(out, expected, atol=1e-5, rtol=1e-5))
        if state == "session":
            found["launches"] = proton_ik.finalize().launches
    return found


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
