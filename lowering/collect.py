"""``collect-pik-markers``: a kernel's PTX becomes a ``pik`` module, in program order.

Each marker (see ``proton_ik.dialect.markers``) becomes its ``pik.record`` with ``site`` set to
the marker's PTX line, ``block`` to its straight-line stretch of PTX, and ``line``/``file``
as the marker carries them (the annotation call's), else from the nearest preceding ``.loc``.
Its runtime operands (predicate, event index, value) arrive as the registers LLVM put in the
marker's text in place of ``$1``, ``$2``, ...
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp, StringAttr

from proton_ik.dialect.markers import parse_marker
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering import ptx_text
from proton_ik.lowering.errors import ScopeError

PASS_NAME = "collect-pik-markers"
# What a marker's op says beyond its kind and name: an event's instances and index, a mark's
# value, a predicate (registers, named by LLVM in the PTX).
RUNTIME_PROPERTIES = ("instances", "index", "index_reg", "value", "value_type", "predicate")
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
        # The marker's own place (the annotation call's, from Triton's builder) over the PTX's
        # nearest .loc, which LLVM may have left from code it moved before the marker.
        record = RecordOp(
            op.kind.data,
            op.scope.data,
            line=op.line.value.data if op.line is not None else line_no or None,
            file=op.file.data if op.file is not None else file_name,
            site=site,
            block=blocks[site],
        )
        record.properties.update(
            {key: op.properties[key] for key in RUNTIME_PROPERTIES if key in op.properties}
        )
        if not body_start < site < body_end:
            raise ScopeError(
                kernel,
                op.scope.data,
                record.source_location,
                f"the {record.name_kind} sits in a function that Triton did not inline into the kernel",
                f"drop noinline=True from that function, or move the {record.name_kind} into the kernel",
                what=record.name_kind,
            )
        unnamed = [
            f"{key} = {register}"
            for key, register in record.registers.items()
            if not register.startswith("%")
        ]
        if unnamed:
            raise ScopeError(
                kernel,
                op.scope.data,
                record.source_location,
                f"the marker's operands {unnamed} were not replaced by registers in the PTX",
                "report this with the kernel: the PTX does not name what the record needs",
                what=record.name_kind,
            )
        records.append(record)
    module = ModuleOp(records)
    module.attributes[KERNEL_ATTR] = StringAttr(kernel)
    return module


def kernel_of(module: ModuleOp) -> str:
    attr = module.attributes.get(KERNEL_ATTR)
    return attr.data if isinstance(attr, StringAttr) else "<kernel>"
