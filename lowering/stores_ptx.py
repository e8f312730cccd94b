"""The stores of ``convert-pikgpu-to-ptx``: one vector store per slot or header field group,
its operands in the layout's order (``contract.layout``), and the L2 policy of the records'
(the records' own stores: ``slots_ptx.Ring.store``).

Every record's store keeps its line in L2 ahead of the kernel's own lines (``evict_last``).
In a loop of a memory-bound kernel, the entries of one line are written one at a time. The
kernel's stream can evict the line between them, and a record's cost is then its DRAM traffic.
With the policy, the line reaches DRAM once, after the kernel's stream has passed
(docs/PERFORMANCE.md, issue 10). ptxas keeps the policy in the store's memory descriptor, a
uniform register, so it costs the kernel no register. Targets before sm_80 have no policy and
no cache hints: there the records' stores are plain (``slots_ptx.Ring``'s ``policy``), and the
prologue makes no policy (``frame_ptx``).
"""

from __future__ import annotations

import numpy as np

from proton_ik.contract.layout import scalar_fields, vector_fields
from proton_ik.lowering.registers import RECORD_POLICY

# The records' L2 eviction policy, set once in the prologue; ``createpolicy`` and cache hints
# need sm_80 and later.
POLICY = f"\tcreatepolicy.fractional.L2::evict_last.b64 \t{RECORD_POLICY}, 1.0;"
POLICY_MIN_SM = 80
_STORE_TYPES = {4: "b32", 8: "u64"}  # vector element type by field size


def vector(dtype: np.dtype, values: dict[str, object]) -> tuple[int, str, str]:
    """One vector store of ``values`` into the scalars of ``dtype`` they name: its byte offset,
    its shape (``v4.b32``) and its operands, in the layout's order (``vector_fields`` checks it)."""
    names = list(values)
    offset = vector_fields(dtype, names)
    size = scalar_fields(dtype)[names[0]][1]
    return offset, f"v{len(names)}.{_STORE_TYPES[size]}", "{" + ", ".join(map(str, values.values())) + "}"


def has_policy(target_sm: int | None) -> bool:
    """Whether PTX for ``target_sm`` (None: a module without ``.target``, taken as the newest)
    has ``createpolicy`` and cache hints."""
    return target_sm is None or target_sm >= POLICY_MIN_SM


def header_store(guard: str, base: str, dtype: np.dtype, values: dict[str, object]) -> str:
    offset, shape, operands = vector(dtype, values)
    return f"\t@{guard} st.global.{shape} \t[{base}+{offset}], {operands};"
