"""Accuracy against scopes of known length, the inferred SM clock and cross-CTA alignment."""

from __future__ import annotations

from typing import Any

from benchmarks.report.format import fmt, table


def markdown(results: dict[str, Any]) -> list[str]:
    """'## Accuracy: a scope around a %clock64 spin'; empty when the section did not run."""
    lines: list[str] = []
    accuracy = results.get("accuracy", {})
    if accuracy.get("proton_ik"):
        lines += [
            "",
            "## Accuracy: a scope around a %clock64 spin",
            "",
            "Error = scope duration in the trace - cycles the spin really took (read inside the spin).",
            "",
        ]
        proton_rows = (
            {r["target_cycles"]: r for r in accuracy.get("proton", []) if isinstance(r, dict)}
            if isinstance(accuracy.get("proton"), list)
            else {}
        )
        header = ["N", "spun (median)", "ours (median)", "ours error (median)", "ours error p5..p95"]
        header += ["ours abs(error)/spun %", "events / expected", "Proton (us x 1000)", "Proton error"]
        rows = []
        for r in accuracy["proton_ik"]:
            p = proton_rows.get(r["target_cycles"], {})
            rows.append(
                [
                    str(r["target_cycles"]),
                    fmt(r["spun_median"], ".0f"),
                    fmt(r["measured_median"], ".0f"),
                    fmt(r["error_median"], "+.0f"),
                    f"{fmt(r['error_p05'], '+.0f')} .. {fmt(r['error_p95'], '+.0f')}",
                    fmt(r["relative_error_median_pct"], ".2f"),
                    f"{r['events']} / {r['events_expected']}",
                    fmt(p.get("measured_median"), ".0f"),
                    fmt(p.get("error_median"), "+.0f"),
                ]
            )
        lines += table(header, rows)
        problems = [f"N={r['target_cycles']}: {p}" for r in accuracy["proton_ik"] for p in r["problems"]]
        lines += [
            "",
            "Proton converts cycles at an assumed 1 GHz, so its microseconds x 1000 are its cycles.",
        ]
        lines += [f"- trace problem: {p}" for p in problems]
        clock, align = accuracy["clock"], accuracy["alignment"]
        lines += [
            "",
            f"- SM clock inferred from our trace: {fmt(clock['inferred_mhz'], '.0f')} MHz from the spins of "
            f"10000 cycles or more ({fmt(clock['launch_table_mhz_median'], '.0f')} MHz in the trace's launch "
            f"table for the long spins); nvidia-smi during the long spins: {fmt(clock['smi_mhz_median'], '.0f')} "
            f"MHz ({clock['smi_samples']} samples).",
            f"- Cross-CTA alignment: after a grid barrier over {align['ctas']} CTAs, the begins of one scope "
            f"spread over {fmt(align['begin_spread_ns_median'], '.0f')} ns (median of {align['launches']} "
            f"launches; max {fmt(align['begin_spread_ns_max'], '.0f')} ns; std "
            f"{fmt(align['begin_std_ns_median'], '.0f')} ns). This bounds our alignment error from above: "
            "it includes the barrier's own release skew.",
        ]
    return lines


def summary(results: dict[str, Any]) -> list[str]:
    """The accuracy lines of the table printed last."""
    lines: list[str] = []
    accuracy = results.get("accuracy", {})
    if accuracy.get("proton_ik"):
        lines.append(
            "accuracy (ours, median error cycles by N): "
            + ", ".join(
                f"{r['target_cycles']}: {fmt(r['error_median'], '+.0f')}" for r in accuracy["proton_ik"]
            )
        )
        lines.append(
            f"SM clock: trace {fmt(accuracy['clock']['inferred_mhz'], '.0f')} MHz vs nvidia-smi "
            f"{fmt(accuracy['clock']['smi_mhz_median'], '.0f')} MHz; cross-CTA begin spread "
            f"{fmt(accuracy['alignment']['begin_spread_ns_median'], '.0f')} ns"
        )
    return lines
