"""``collect-pik-markers``: a kernel's PTX becomes a ``pik`` module, in program order.

Each marker (see ``proton_ik.dialect.markers``) becomes its ``pik.record`` with ``site`` set to
the marker's PTX line and ``line``/``file`` set from the nearest preceding ``.loc``.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp, StringAttr

from proton_ik.dialect.markers import parse_marker
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering import ptx_text

PASS_NAME = "collect-pik-markers"
KERNEL_ATTR = "pik.kernel"


def collect_markers(ptx: str) -> ModuleOp:
    files = ptx_text.source_files(ptx)
    records: list[RecordOp] = []
    line_no: int | None = None
    file_name: str | None = None
    for site, text in enumerate(ptx.splitlines()):
        loc = ptx_text.LOC.match(text)
        if loc is not None:
            line_no = int(loc.group("line"))
            file_name = files.get(int(loc.group("file")))
            continue
        op = parse_marker(text)
        if op is None:
            continue
        records.append(RecordOp(op.kind.data, op.scope.data, line=line_no or None, file=file_name, site=site))
    module = ModuleOp(records)
    module.attributes[KERNEL_ATTR] = StringAttr(ptx_text.kernel_name(ptx))
    return module


def kernel_of(module: ModuleOp) -> str:
    attr = module.attributes.get(KERNEL_ATTR)
    return attr.data if isinstance(attr, StringAttr) else "<kernel>"
