"""The stores of ``convert-pikgpu-to-ptx``: one vector store per entry or header field group,
its operands in the layout's order (``contract.layout``), and the L2 policy of the records'.

Every record's store keeps its line in L2 ahead of the kernel's own lines (``evict_last``).
In a loop of a memory-bound kernel, the entries of one line are written one at a time. The
kernel's stream can evict the line between them, and a record's cost is then its DRAM traffic.
With the policy, the line reaches DRAM once, after the kernel's stream has passed
(docs/PERFORMANCE.md, issue 10). ptxas keeps the policy in the store's memory descriptor, a
uniform register, so it costs the kernel no register.
"""

from __future__ import annotations

import re

import numpy as np

from proton_ik.contract.layout import scalar_fields, vector_fields

# The records' L2 eviction policy, set once in the prologue; ``createpolicy`` and cache hints
# need sm_80 and later (``without_policy``).
RECORD_POLICY = "%pik_pol"
POLICY = f"\tcreatepolicy.fractional.L2::evict_last.b64 \t{RECORD_POLICY}, 1.0;"
POLICY_MIN_SM = 80
_HINTED = re.compile(
    rf"^(\t@%pik_w st\.global)\.L2::cache_hint(\.\S+ \t\[[^\]]+\], \{{[^}}]*\}}), {RECORD_POLICY};$", re.M
)
_STORE_TYPES = {4: "b32", 8: "u64"}  # vector element type by field size


def vector(dtype: np.dtype, values: dict[str, object]) -> tuple[int, str, str]:
    """One vector store of ``values`` into the scalars of ``dtype`` they name: its byte offset,
    its shape (``v4.b32``) and its operands, in the layout's order (``vector_fields`` checks it)."""
    names = list(values)
    offset = vector_fields(dtype, names)
    size = scalar_fields(dtype)[names[0]][1]
    return offset, f"v{len(names)}.{_STORE_TYPES[size]}", "{" + ", ".join(map(str, values.values())) + "}"


def entry_store(dtype: np.dtype, values: dict[str, object]) -> str:
    """The writer lane's store of ``values`` into the entry at ``%pik_a`` (fields named by
    ``dtype``: ``ENTRY_DTYPE``, ``VALUE_ENTRY_DTYPE``), its line kept in L2 ahead of the
    kernel's own (``RECORD_POLICY``, set by ``POLICY``)."""
    offset, shape, operands = vector(dtype, values)
    address = f"%pik_a+{offset}" if offset else "%pik_a"
    return f"\t@%pik_w st.global.L2::cache_hint.{shape} \t[{address}], {operands}, {RECORD_POLICY};"


def without_policy(ptx: str) -> str:
    """Instrumented PTX for a GPU before sm_80: the records' stores without their L2 policy."""
    return _HINTED.sub(r"\1\2;", ptx.replace(POLICY + "\n", ""))


def header_store(guard: str, base: str, dtype: np.dtype, values: dict[str, object]) -> str:
    offset, shape, operands = vector(dtype, values)
    return f"\t@{guard} st.global.{shape} \t[{base}+{offset}], {operands};"
