"""The report's head: where and how the run ran, and the method."""

from __future__ import annotations

from typing import Any

from benchmarks.report.format import fmt


def markdown(results: dict[str, Any]) -> list[str]:
    """The title, the device, versions, date and command, the modes compared, and the method."""
    env = results["environment"]
    variants = results["variants"]
    return [
        "# proton_ik benchmark",
        "",
        f"- Device: {env['device']} ({env['sms']} SMs, sm_{env['capability'].replace('.', '')}), "
        f"driver {env['driver']}, max SM clock {env['max_sm_clock_mhz']}",
        f"- Host: {env.get('host_cpu', 'not recorded')}",
        f"- triton {env['triton']}, torch {env['torch']} (CUDA {env['cuda']}), python {env['python']}",
        f"- Date: {env['date_utc']}; run took {fmt(results.get('wall_s'), '.0f')} s"
        + ("; **--quick sizes**" if results["quick"] else ""),
        f"- Command: `{results['command']}`",
        f"- proton_ik modes: {', '.join(v['mode'] for v in variants if v['profiler'] == 'proton_ik')}; "
        f"Proton modes: {', '.join(v['mode'] for v in variants if v['profiler'] == 'proton')}",
        *_kept_sections(results),
        "",
        "Method: ../shared/BENCHMARKING.md. Every variant compiles from the same source "
        "(benchmarks/kernels.py, scopes from benchmarks/scopes.py) before any timing; device time "
        "comes from direct launches with hooks set to None, "
        f"{results.get('overhead', {}).get('rounds', '-')} interleaved rounds of "
        "`triton.testing.do_bench(return_mode='median')`; we report the median of the round medians "
        "and, in parentheses, the spread (max - min) / median of the rounds.",
    ]


def _kept_sections(results: dict[str, Any]) -> list[str]:
    """One line per earlier run whose sections this report keeps (run.py --merge)."""
    runs: dict[tuple[str, str, str, str], list[str]] = {}
    for name, run in results.get("kept_sections", {}).items():
        key = (run["date_utc"], run["device"], run.get("host_cpu", "a host not recorded"), run["command"])
        runs.setdefault(key, []).append(name)
    return [
        f"- Kept from the run of {date} on {device} ({host}; `{command}`): {', '.join(names)}"
        for (date, device, host, command), names in sorted(runs.items())
    ]
