"""The carrier: a ``pik`` op in MLIR generic syntax, inside a PTX comment.

While proton_ik is active, each scope call in a kernel emits a non-pure scalar inline-asm op
whose text is ``marker_text(op)``. Triton and LLVM keep it in program order with the kernel's
other side effects, and it reaches the PTX as

    // pik.marker "pik.record"() <{kind = "begin", scope = "load"}> : () -> ()

The ``collect-pik-markers`` pass reads it back with ``parse_marker``. Both directions live here.
"""

from __future__ import annotations

import io
import re

from xdsl.parser import Parser
from xdsl.printer import Printer

from proton_ik.dialect import make_context
from proton_ik.dialect.pik import RecordOp

MARKER_PREFIX = "// pik.marker "
_MARKER_LINE = re.compile(r"^\s*" + re.escape(MARKER_PREFIX) + r"(?P<op>.*?)\s*$")


def marker_text(op: RecordOp) -> str:
    """The inline-asm text that carries ``op`` into the PTX."""
    op.verify()
    stream = io.StringIO()
    Printer(stream=stream, print_generic_format=True).print_op(op)
    return MARKER_PREFIX + stream.getvalue().strip()


def parse_marker(line: str) -> RecordOp | None:
    """The ``pik.record`` a PTX line carries, or None if the line is not a marker."""
    match = _MARKER_LINE.match(line)
    if match is None:
        return None
    op = Parser(make_context(), match.group("op")).parse_op()
    if not isinstance(op, RecordOp):
        raise ValueError(f"a pik marker must carry a pik.record, got {op.name}: {line.strip()}")
    op.verify()
    return op


def is_marker(line: str) -> bool:
    return _MARKER_LINE.match(line) is not None
