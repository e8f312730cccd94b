"""The benchmark suite and the microbenchmark kernels, one module per kernel family.

Every kernel takes its scopes from ``benchmarks.scopes``, so its plain, proton_ik and Proton
variants all compile from one source. A ``Problem`` (``problem.py``) is one kernel at one size:
its compile options and constexprs, the argument types for a GPU-less compile
(``compile_check.py``), its grid, a builder of fresh random inputs with a torch reference, and
the exact number of records each warp writes per launch, derived from where the scopes sit.

torch is imported only inside the input builders, so these modules import on a machine without it.
"""

from __future__ import annotations

from benchmarks.kernels import attention, elementwise, gluon_ws, matmul, norms, softmax
from benchmarks.kernels.problem import Problem


def suite(quick: bool, num_sms: int) -> list[Problem]:
    """The benchmark suite, in report order."""
    return [
        # 64M floats (256 MiB each way, 16384 CTAs): Proton's global buffer, 64 KiB per 4-warp CTA,
        # faults past 2 GiB in all, so the elementwise kernel stays below 32768 CTAs.
        elementwise.gelu(1 << (22 if quick else 26)),
        softmax.softmax(quick, num_sms),
        norms.layer_norm(quick),
        norms.add_rms_norm(quick, num_sms),
        matmul.matmul(quick),
        attention.attention(quick, causal=False),
        attention.attention(quick, causal=True),
        matmul.matmul_tma_persistent(quick, num_sms),
        gluon_ws.ws_add(quick),
    ]
