"""``collect-pik-markers``: a kernel's PTX becomes a ``pik`` module, in program order.

Each marker (see ``proton_ik.dialect.markers``) becomes its ``pik.record`` with ``site`` set to
the marker's PTX line, ``block`` to its straight-line stretch of PTX, and ``line``/``file``
set from the nearest preceding ``.loc``.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp, StringAttr

from proton_ik.dialect.markers import parse_marker
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering import ptx_text
from proton_ik.lowering.errors import ScopeError

PASS_NAME = "collect-pik-markers"
KERNEL_ATTR = "pik.kernel"


def collect_markers(ptx: str) -> ModuleOp:
    files = ptx_text.source_files(ptx)
    kernel = ptx_text.kernel_name(ptx)
    lines = ptx.splitlines()
    body_start, body_end = ptx_text.entry_body(lines)
    blocks = ptx_text.straight_line_blocks(lines, body_start, body_end)
    records: list[RecordOp] = []
    line_no: int | None = None
    file_name: str | None = None
    for site, text in enumerate(lines):
        loc = ptx_text.LOC.match(text)
        if loc is not None:
            line_no = int(loc.group("line"))
            file_name = files.get(int(loc.group("file")))
            continue
        op = parse_marker(text)
        if op is None:
            continue
        record = RecordOp(
            op.kind.data, op.scope.data, line=line_no or None, file=file_name, site=site, block=blocks[site]
        )
        if not body_start < site < body_end:
            raise ScopeError(
                kernel,
                op.scope.data,
                record.source_location,
                "the scope sits in a function that Triton did not inline into the kernel",
                "drop noinline=True from that function, or move the scope into the kernel",
            )
        records.append(record)
    module = ModuleOp(records)
    module.attributes[KERNEL_ATTR] = StringAttr(kernel)
    return module


def kernel_of(module: ModuleOp) -> str:
    attr = module.attributes.get(KERNEL_ATTR)
    return attr.data if isinstance(attr, StringAttr) else "<kernel>"
