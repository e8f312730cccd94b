"""Trace files proton_ik wrote (Chrome ``.json``, Perfetto ``.pftrace``) read back into tables.

What ``summary`` and the trace writers need comes back: one row per scope event (kernel, launch,
scope, CTA, SM, warp, unit, lane, begin and duration in ns and cycles, source line, and the place
of its begin and end on its track), the finished units' lifetimes (the denominator of a scope's
share of kernel time) and the launch table, so that ``proton-ik show`` prints the same per-scope
statistics for a trace as for its session file, and ``proton-ik convert`` writes a ``.pftrace``
as Chrome JSON and back (``TraceFile.write_perfetto``, ``write_chrome``).

Events, marks and values come back too (``events``), so a trace's event statistics are its
session's; what the trace does not carry of them (host scope, SM, record numbers, a matched
event's own start and end cycles, a value's type and bits) is NA.

What a trace does not carry is left out or shown as unknown:

- Records left unpaired are not slices, so per-scope unmatched counts are unknown (``<NA>``)
  wherever the kernel lost any; the per-kernel totals are known (the launch statistics carry them).
- A ``.pftrace`` carries each launch's metadata and totals as its launch slice's args (no
  problems list, no skipped units); a Chrome trace carries the whole launch table.
- A scope that only ever left unmatched records has no row.
- A ``.pftrace`` widens a unit's lifetime to cover its scopes where the unit's clocks disagree, so
  there a share can differ slightly from the session's.

Reading is per packet or per JSON object, in Python: fine for a summary, slower than writing.
A ``.pftrace`` is read as a stream, packet by packet (compressed bundles inflated as they are
read), into compact columns: memory grows with the slices, not with the packets' objects. A
file that is not a trace proton_ik wrote raises ``SessionFileError`` saying what is wrong.

This package's surface is here; the work is done in ``chrome`` (Chrome JSON), ``perfetto`` (a
``.pftrace``'s packets and track tree), ``events`` (events, marks and values), ``packets`` (the
packet stream), ``trace_file`` (``TraceFile`` and the tables built from the columns read),
``nesting_order`` and ``checks`` (the values' checks and refusals); ``kinds`` tells a session
file from a trace by content.
"""

from __future__ import annotations

from proton_ik.viewer.readback.checks import MAX_WARPS_PER_UNIT
from proton_ik.viewer.readback.chrome import read_chrome
from proton_ik.viewer.readback.kinds import TRACE_KINDS, file_kind, not_ours, read_trace
from proton_ik.viewer.readback.packets import MAX_PACKET_BYTES, iter_packets, read_packets
from proton_ik.viewer.readback.perfetto import TrackTree, read_perfetto
from proton_ik.viewer.readback.trace_file import TraceFile

__all__ = [
    "EVENT_COLUMNS",
    "MAX_PACKET_BYTES",
    "MAX_WARPS_PER_UNIT",
    "TRACE_KINDS",
    "TraceFile",
    "TrackTree",
    "file_kind",
    "iter_packets",
    "not_ours",
    "read_chrome",
    "read_packets",
    "read_perfetto",
    "read_trace",
]

EVENT_COLUMNS = ["kernel", "launch", "scope", "cta", "sm", "warp", "dur_ns", "dur_cycles", "line"]
