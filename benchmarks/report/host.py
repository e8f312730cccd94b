"""The host side: many launches, trace bytes and finalize, ours against Proton's."""

from __future__ import annotations

from typing import Any

from benchmarks.kernels.micro import HOST_ELEMENTS
from benchmarks.report.format import fmt, table


def markdown(results: dict[str, Any]) -> list[str]:
    """'## Host side'; empty when the section did not run."""
    lines: list[str] = []
    host = results.get("host", {})
    if host.get("plain"):
        lines += [
            "",
            "## Host side",
            "",
            f"A short kernel (GELU, {HOST_ELEMENTS:,} elements, {host['events_per_launch']} scope events per "
            "launch) launched in a loop, wall clock from start to finalize, trace written.",
            "",
        ]
        header = ["profiler", "launches", "wall s", "loop s", "finalize s", "ms/launch", "x plain", "events"]
        header += ["trace bytes per million events", "finalize s per million records", "error"]
        rows = []
        for label in ("plain", "proton_ik", "proton"):
            h = host.get(label, {})
            per_m = h.get("bytes_per_million_events", {})
            rows.append(
                [
                    label,
                    fmt(h.get("launches")),
                    fmt(h.get("wall_s"), ".3f"),
                    fmt(h.get("loop_s"), ".3f"),
                    fmt(h.get("finalize_s"), ".3f"),
                    fmt(h.get("per_launch_ms"), ".3f"),
                    fmt(h.get("ratio_vs_plain"), ".1f"),
                    fmt(h.get("events")),
                    ", ".join(f"{k}: {v / 1e6:.1f} MB" for k, v in per_m.items()) or "-",
                    fmt(h.get("finalize_s_per_million_records"), ".2f"),
                    h.get("error", "")[:100],
                ]
            )
        lines += table(header, rows)
        lines += [
            "",
            "loop s: start, the launches and a synchronize; finalize s: finalize with the traces written. "
            "Proton synchronizes, copies and parses after every launch, inside the loop. Ours writes what "
            "a session writes by default, the session file (.pik) and its Perfetto trace (.pftrace); "
            "bytes per million events for each.",
        ]
    return lines


def summary(results: dict[str, Any]) -> list[str]:
    """The host lines of the table printed last."""
    lines: list[str] = []
    host = results.get("host", {})
    for label in ("proton_ik", "proton"):
        h = host.get(label, {})
        if "wall_s" in h:
            lines.append(
                f"host {label}: {fmt(h['ratio_vs_plain'], '.1f')}x plain over {h['launches']} launches; "
                f"trace bytes/M events {', '.join(f'{k} {v / 1e6:.1f} MB' for k, v in h['bytes_per_million_events'].items())}; "
                f"finalize {fmt(h['finalize_s_per_million_records'], '.2f')} s/M records"
            )
    return lines
