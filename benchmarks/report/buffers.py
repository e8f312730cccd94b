"""The '## Buffers (issue 7)' section: its tables, from results["buffers"]."""

from __future__ import annotations

import math
from typing import Any

from benchmarks.report.format import table
from proton_ik.contract.layout import CTA_HEADER_BYTES, ENTRY_BYTES, UNIT_HEADER_BYTES


def _fmt(value: Any, spec: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return format(value, spec) if isinstance(value, float) else str(value)


def _mib(nbytes: float) -> str:
    return _fmt(nbytes / 2**20, ".2f")


def markdown(results: dict[str, Any]) -> list[str]:
    """The '## Buffers (issue 7)' section; empty when the section did not run."""
    if not results:
        return []
    lines = [
        "",
        "## Buffers (issue 7)",
        "",
        f"Default mode `{results.get('default_mode_string')}`, pool of "
        f"{_mib(results.get('pool_bytes', 0))} MiB: `proton_ik.start` with no mode, pool or format options. "
        "`benchmarks/buffers.py`; the targets above are judged from these numbers.",
    ]
    for part in (
        _default_mode_md,
        _device_bytes_md,
        _host_md,
        _launch_only_md,
        _sustained_md,
        _e2e_md,
        _finalize_md,
        _checks_md,
    ):
        lines += part(results)
    failed = [(name, r["error"]) for name, r in results.items() if isinstance(r, dict) and "error" in r]
    if failed:
        lines += ["", *(f"- {name} failed: {error}" for name, error in failed)]
    return lines


def _default_mode_md(results: dict[str, Any]) -> list[str]:
    found = results.get("default_mode", {}).get("kernels", {})
    if not found:
        return []
    rows = []
    for name, k in found.items():
        capacity = k.get("capacity") or {}
        rows.append(
            [
                name,
                f"{k.get('grid', '-')} x {k.get('warps', '-')}",
                f"{_fmt(capacity.get('entries'))} ({capacity.get('source', '-')})",
                _fmt(capacity.get("bound")),
                str(capacity.get("reason", "-"))[:140],
                f"{_fmt(k.get('records'))} / {_fmt(k.get('records_expected'))}",
                _fmt(k.get("overwritten")),
                _mib(k["device_bytes"]) if "device_bytes" in k else "-",
                _mib(k["copied_bytes"]) if "copied_bytes" in k else "-",
                ", ".join(k.get("files", [])) or "-",
                _fmt(k.get("worked")) + (f": {k['error'][:120]}" if k.get("error") else ""),
            ]
        )
    header = ["kernel", "grid x warps", "entries per warp (source)", "bound", "reason"]
    header += ["records / expected", "overwritten", "device MiB", "copied MiB", "files", "worked"]
    return [
        "",
        "### The default mode on every kernel",
        "",
        "One launch each, a session each. Records: written, from the unit headers (overwritten ones "
        "included); expected: the count the scope structure gives. Worked: no exception, one launch "
        "in the trace, exact records, outputs equal to torch's.",
        "",
        *table(header, rows),
    ]


def _device_bytes_md(results: dict[str, Any]) -> list[str]:
    found = results.get("device_bytes", {}).get("kernels", {})
    if not found:
        return []
    rows = [
        [
            name,
            f"{r['capacity_entries']} (bound {r['bound']})",
            _fmt(r["entries_per_unit"], ".2f"),
            _fmt(r["bytes"]),
            _fmt(r["written"]),
            _fmt(r["ratio"], ".3f"),
            _fmt(r["copied_bytes"]),
            r["entries_source"],
        ]
        for name, r in found.items()
    ]
    header = ["kernel", "entries per warp", "written per warp", "device bytes", "written bytes", "ratio"]
    header += ["copied bytes", "entries from"]
    # Results from before slots had a size of their own were all version 2's 16-byte entries.
    slot_sizes = " or ".join(map(str, sorted({r.get("slot_bytes", ENTRY_BYTES) for r in found.values()})))
    return [
        "",
        "### Device bytes per launch against what the launch wrote",
        "",
        f"Kernels whose bound is known. Device bytes = CTAs x cta_bytes; written = CTAs x {CTA_HEADER_BYTES} + "
        f"units x {UNIT_HEADER_BYTES} + entries x {slot_sizes}; copied: what the drain moved to the host.",
        "",
        *table(header, rows),
    ]


def _host_md(results: dict[str, Any]) -> list[str]:
    host = results.get("host", {})
    if "us_per_launch" not in host:
        return []
    rows = []
    for variant, timing in host["us_per_launch"].items():
        added = host["added_us"].get(variant)
        rows.append(
            [
                variant,
                _fmt(timing["median"], ".1f"),
                _fmt(timing["spread_pct"], ".1f"),
                "-" if added is None else _fmt(added, "+.1f"),
                ", ".join(str(n) for n in host["launches_done"][variant]),
            ]
        )
    copied = host["proton_ik_copied_bytes_in_loop"]
    return [
        "",
        "### Host time added per launch",
        "",
        f"{host['kernel']} ({host['size']}, {host['records_per_launch']:,} records a launch): "
        f"{host['launches']:,} launches, each followed by `torch.cuda.synchronize()`; start, one "
        f"untimed first launch and finalize excluded; {host['rounds']} interleaved rounds. Proton: "
        f"mode `{host['proton']['mode']}`, data `{host['proton']['data']}`. Added: median over rounds "
        "of (variant - plain) in the same round.",
        "",
        *table(["variant", "us per launch (median)", "spread %", "added us", "launches per round"], rows),
        "",
        f"proton_ik recorded {host['proton_ik_recorded_launches']} launches per round (the first "
        f"included); its drain copied {_mib(max(copied, default=0))} MiB during a loop at most.",
        "",
        *(f"- {variant} failed: {errors[0]}" for variant, errors in host["errors"].items() if errors),
    ]


def _launch_only_md(results: dict[str, Any]) -> list[str]:
    step = results.get("launch_only", {})
    found = [k for k in step.values() if isinstance(k, dict) and "us_per_launch" in k]
    if not found:
        return []
    rows = []
    for kernel in found:
        for variant, timing in kernel["us_per_launch"].items():
            added = kernel["added_us"].get(variant)
            rows.append(
                [
                    kernel["kernel"],
                    variant,
                    _fmt(timing["median"], ".1f"),
                    _fmt(timing["spread_pct"], ".1f"),
                    "-" if added is None else _fmt(added, "+.1f"),
                ]
            )
    first = found[0]
    return [
        "",
        "### Host time added per launch, launch only",
        "",
        f"{first['launches']:,} launches in a loop, one synchronize after it (not timed); start, one "
        f"untimed first launch and finalize excluded; {first['rounds']} interleaved rounds; proton_ik "
        "with a pool of 2 GiB, which no loop fills to the drain mark (sustained launches: below); "
        "Proton's loops are of 200 launches, as it synchronizes after each. "
        + " ".join(f"{k['kernel']}: {k['size']}; arguments {k['arguments']}." for k in found)
        + " Added: median over rounds of (variant - plain) in the same round.",
        "",
        *table(["kernel", "variant", "us per launch (median)", "spread %", "added us"], rows),
        "",
        *(
            f"- {k['kernel']}: outputs equal to torch's in every round: {_fmt(k['outputs_equal'])}; "
            f"proton_ik recorded {k['proton_ik_recorded_launches']} launches per round (the first included)"
            for k in found
        ),
        *(
            f"- {k['kernel']} {variant} failed: {errors[0]}"
            for k in found
            for variant, errors in k["errors"].items()
            if errors
        ),
    ]


def _sustained_md(results: dict[str, Any]) -> list[str]:
    step = results.get("sustained", {})
    found = [k for k in step.values() if isinstance(k, dict) and "us_per_launch" in k]
    if not found:
        return []
    rows = [
        [
            k["kernel"],
            _fmt(k["us_per_launch"].get("plain", {}).get("median"), ".1f"),
            _fmt(k["us_per_launch"].get("proton_ik", {}).get("median"), ".1f"),
            "-" if k["added_us"] is None else _fmt(k["added_us"], "+.1f"),
            _fmt(k["copied_during_loop_mib"], ".0f"),
            _fmt(k["drain_gb_per_s"], ".2f"),
            ", ".join(str(w) for w in k["pool_waits"]),
            _fmt(k["finalize_s"], ".2f"),
        ]
        for k in found
    ]
    first = found[0]
    return [
        "",
        "### Sustained launches: the drain running during the loop",
        "",
        f"{first['launches']:,} launches in a loop, plain and under proton_ik with its default pool, "
        f"{first['rounds']} interleaved rounds: the loop's buffers are about three pools' worth, so records "
        "leave the device while launches go on. Added: median over rounds of (proton_ik - plain). Drain: "
        "bytes copied off the device during the loop per second of the loop. "
        + " ".join(f"{k['kernel']}: {k['size']}." for k in found),
        "",
        *table(
            [
                "kernel",
                "plain us per launch",
                "proton_ik us per launch",
                "added us",
                "MiB drained in the loop",
                "drain GB/s",
                "pool waits per round",
                "finalize s",
            ],
            rows,
        ),
        *(
            f"- {k['kernel']} {variant} failed: {errors[0]}"
            for k in found
            for variant, errors in k["errors"].items()
            if errors
        ),
    ]


def _e2e_md(results: dict[str, Any]) -> list[str]:
    e2e = results.get("end_to_end", {})
    if "plain_ms" not in e2e:
        return []
    plain, copy = e2e["plain_ms"]["median"], e2e["copy_ms"]["median"]

    def row(label: str, timing: dict[str, Any], against_copy: str | None = None) -> list[str]:
        """ms per launch, its spread, and its ratios to the plain launch and to the copy."""
        median = timing["median"]
        ratio = _fmt(median / copy, ".2f") if against_copy is None else against_copy
        return [label, _fmt(median, ".3f"), _fmt(timing["spread_pct"]), _fmt(median / plain, ".2f"), ratio]

    rows = [row("plain", e2e["plain_ms"], "-")]
    rows += [
        row(label, e2e[key])
        for key, label in (
            ("loop_ms", "proton_ik: loop + sync"),
            ("flushed_ms", "proton_ik: + drain flushed"),
        )
    ]
    rows.append(row(f"pinned copy of {e2e['written_bytes_per_launch']:,} bytes", e2e["copy_ms"], "1.00"))
    if "write_ms" in e2e:
        walked = " a launch (walked)" if "write_one_ms" in e2e else ""
        label = f"sequential file write of {e2e['copied_bytes_per_launch']:,.0f} bytes{walked}"
        rows.append(row(label, e2e["write_ms"]))
    if "write_one_ms" in e2e:
        rows.append(row("the same bytes from one window, 20 times (cache)", e2e["write_one_ms"]))
    return [
        "",
        "### End to end",
        "",
        f"{e2e['kernel']} ({e2e['size']}): {e2e['launches']} launches, hooks on, no synchronize inside "
        f"the loop, one at the end; finalize excluded; {e2e['rounds']} interleaved rounds (plain, "
        "profiled, copy). 'drain flushed': until every record is on the host. The copy: the bytes a "
        f"launch writes, device to pinned host memory ({_fmt(e2e['copy_gb_per_s'], '.1f')} GB/s); the "
        f"drain moved {_mib(e2e['copied_bytes_per_launch'])} MiB per launch "
        f"({_fmt(e2e['drain_gb_per_s'], '.1f')} GB/s over the whole loop). Launches recorded in each "
        f"session exact: {_fmt(e2e['launches_exact'])}; these sessions write the session file only."
        + (
            " The file write (walked): the loop's launches' bytes written one after another into one file "
            "of that folder, each from the next window of a pinned source the size of the drain's pool, "
            "as the drain writes them; (cache): the median of 20 writes of one window, whose source stays "
            "in the CPU's cache, the measure of runs before 2026-11-27 22:00 UTC."
            if "write_one_ms" in e2e
            else ""
        ),
        "",
        *table(["", "ms per launch (median)", "spread %", "x plain", "x copy"], rows),
    ]


def _finalize_md(results: dict[str, Any]) -> list[str]:
    fin = results.get("finalize", {})
    if "records" not in fin:
        return []
    shapes = fin.get("shapes", [])
    rows = [_finalize_cells(session) for session in [fin, *shapes]]
    return [
        "",
        "### Finalize",
        "",
        "After the launches and a synchronize: the drain flushed (timed apart), then "
        "`proton_ik.finalize()` writing .pik and .pftrace. Rate = records / (flush + finalize)."
        + (
            " The rows after the first are issue 24's shapes; 'one core': the whole session, its "
            "threads and its render, on one core."
            if shapes
            else ""
        ),
        "",
        *table(["session", "records / expected", "flush s", "finalize s", "M records/s", "files"], rows),
    ]


def _finalize_cells(session: dict[str, Any]) -> list[str]:
    """One session's row of the finalize table (a shape that failed says so)."""
    name = f"{session['launches']:,} x {session['kernel']}" + (
        ", one core" if session.get("one_core") else ""
    )
    if "records" not in session:
        return [name, f"failed: {session.get('error', '?')[:120]}", "-", "-", "-", "-"]
    sizes = ", ".join(
        f"{kind} {_mib(size)} MiB ({_fmt(session['bytes_per_event'].get(kind), '.1f')} B/event)"
        for kind, size in session["file_bytes"].items()
    )
    return [
        name,
        f"{session['records']:,} / {session['records_expected']:,}",
        _fmt(session["flush_s"], ".2f"),
        _fmt(session["finalize_s"], ".2f"),
        _fmt(session["records_per_s"] / 1e6, ".2f"),
        sizes,
    ]


def _checks_md(results: dict[str, Any]) -> list[str]:
    rows = []
    graph = results.get("graph", {})
    if "replay_rows" in graph:
        rows.append(
            [
                f"CUDA graph, {graph['replays_made']} replays",
                f"{graph['replays_made']} rows, replay 0..{graph['replays_made'] - 1}, "
                f"{graph['records_expected']:,} records each",
                f"{graph['replay_rows']} rows of {graph['launch_rows']}, replays {graph['replay_indices']}, "
                f"records {sorted(set(graph['records_per_replay']))}"
                + (f"; missing columns {graph['missing_columns']}" if graph["missing_columns"] else ""),
                _fmt(graph["exact"]),
            ]
        )
    tune = results.get("autotune", {})
    if "config_inside" in tune:
        expected = f"config {tune['config_outside']} (tuned outside a session); {tune['calls']} rows of {tune['records_expected']:,} records"
        if "user_records" in tune:  # runs since the benchmark rows are told apart
            expected += ", and one row marked autotune=benchmark per config tried"
            found = (
                f"{len(tune['user_records'])} rows of records {sorted(set(tune['user_records']))}, "
                f"{tune['benchmark_rows']} benchmark rows of {tune['configs_tried']} configs"
            )
        else:
            found = f"{tune['launch_rows']} rows, records {sorted(set(tune['records_per_launch']))}"
        rows.append(
            [
                f"autotune, {tune['calls']} calls",
                expected,
                f"config {tune['config_inside']}; {found}; config column {tune['config_column']}",
                _fmt(tune["same_config"] and tune["exact"]),
            ]
        )
    if not rows:
        return []
    return ["", "### CUDA graphs and autotuning", "", *table(["check", "expected", "found", "exact"], rows)]


def summary(results: dict[str, Any]) -> list[str]:
    """The buffers line of the table printed last."""
    if not results:
        return []
    host, e2e, fin = results.get("host", {}), results.get("end_to_end", {}), results.get("finalize", {})
    added = host.get("added_us", {})
    parts = [
        f"host +{_fmt(added.get('proton_ik'))} us/launch (Proton +{_fmt(added.get('proton'))})",
        f"end to end {_fmt(e2e.get('x_plain'), '.2f')}x plain, {_fmt(e2e.get('x_copy'), '.2f')}x copy",
        f"finalize {_fmt(fin.get('records_per_s', float('nan')) / 1e6, '.2f')}M records/s",
        f"graph exact {_fmt(results.get('graph', {}).get('exact'))}",
        f"autotune same config {_fmt(results.get('autotune', {}).get('same_config'))}",
    ]
    return ["buffers: " + "; ".join(parts)]
