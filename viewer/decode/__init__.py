"""Bytes in, numpy arrays out: launches' profile buffers decoded into CTA, unit and record tables.

``buffers`` views the buffers in place and gathers their records (``decode_buffer``,
``decode_views``; ``decode_headers`` for the headers alone, then ``decode_records``), ``slots`` reads layout version 3's
8-byte slots as version 2's entries, ``clock_extension`` makes each record's 32-bit clock whole
again, and ``problems`` counts what went wrong in each buffer and says it in words. Every offset and dtype is ``proton_ik.contract.layout``'s. Outside this
package, use what it exports here.
"""

from __future__ import annotations

from proton_ik.viewer.decode.buffers import (
    CtaTable,
    RecordTable,
    UnitTable,
    decode_buffer,
    decode_headers,
    decode_records,
    decode_views,
)
from proton_ik.viewer.decode.problems import PROBLEM_COUNTS, describe_problems

__all__ = [
    "PROBLEM_COUNTS",
    "CtaTable",
    "RecordTable",
    "UnitTable",
    "decode_buffer",
    "decode_headers",
    "decode_records",
    "decode_views",
    "describe_problems",
]
