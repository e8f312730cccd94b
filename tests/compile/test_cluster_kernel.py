"""The cluster capture's kernel (``tests/gpu/cluster_kernels.py``) compiles instrumented for sm_90
with ``num_ctas=2``, its K loop's scopes bounded, and its epilogue reads the CTA's cluster."""

from __future__ import annotations

import sys
from pathlib import Path

from proton_ik.contract.layout import BufferLayout
from proton_ik.mode import Mode

sys.path.insert(0, str(Path(__file__).parents[1] / "gpu"))
import cluster_kernels as ck

SIGNATURE = {
    "a": "*fp16", "b": "*fp16", "c": "*fp32", "N": "constexpr", "K": "constexpr", "BLOCK_M": "constexpr",
    "BLOCK_N": "constexpr", "BLOCK_K": "constexpr",
}  # fmt: skip


def test_the_cluster_matmul_compiles_with_two_ctas_a_cluster(compile_kernel):
    constexprs = {"N": ck.N, "K": ck.K, "BLOCK_M": ck.BLOCK_M, "BLOCK_N": ck.BLOCK_N, "BLOCK_K": ck.BLOCK_K}
    kernel = compile_kernel(
        ck.cluster_matmul_kernel, SIGNATURE, constexprs, mode=Mode(), num_warps=ck.NUM_WARPS, num_ctas=2
    )
    assert kernel.metadata.num_ctas == 2 and kernel.asm["cubin"]
    ptx = kernel.asm["ptx"]
    for register in ("%clusterid.x", "%nclusterid.x", "%cluster_nctarank"):
        assert "%pik_cluster" in ptx and f", {register};" in ptx
    # One K step a scope: the bound, not a ring, keeps the session small.
    capacity = kernel.metadata.proton_ik["capacity"]
    assert capacity["source"] == "bound" and capacity["bound"] <= 2 * (ck.K // ck.BLOCK_K)
    layout = BufferLayout.from_dict(kernel.metadata.proton_ik["layout"])
    assert layout.units == ck.NUM_WARPS and layout.cta_bytes <= 1024
