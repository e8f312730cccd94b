"""The targets of the overhead issue, judged from a run's results: met or not, and why not.

Every number comes from the results dict that run.py builds; only the reasons are prose.
"""

from __future__ import annotations

import math
from typing import Any

from benchmarks.report import compiled, event_cost, jobs

OURS = "proton_ik"
PROTON = ("proton_global", "proton_shared")
# Proton's buffer (../shared/ANCHORS.md): a per-CTA header of 40 bytes and 4 per warp, then one
# circular segment per warp, a power of two in bytes, of 8-byte records.
PROTON_HEADER_BYTES, PROTON_HEADER_BYTES_PER_WARP, PROTON_RECORD_BYTES = 40, 4, 8
HALF_OF_PROTON_KERNELS = ("matmul", "attention", "attention_causal")

# No reason here is typed prose: each is computed from the same run's numbers (issue 13).


def _fmt(value: float, spec: str = ".2f") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def judge(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target: name, the goal, what was measured, met or not, and why not (the
    numbers that decided it)."""
    rows: list[dict[str, Any]] = []

    def add(key: str, goal: str, measured: str, met: bool | None, why_not: str = "") -> None:
        rows.append(
            {
                "key": key,
                "goal": goal,
                "measured": measured,
                "met": met,
                "why_not": "" if met else why_not if met is False else "not measured in this run",
            }
        )

    kernels = results.get("overhead", {}).get("kernels", {})
    summary = results.get("overhead", {}).get("summary", {})
    geomean = summary.get(OURS, {}).get("geomean_overhead_pct")
    worst = sorted(
        ((k["overhead_pct"][OURS], name) for name, k in kernels.items() if OURS in k.get("overhead_pct", {})),
        reverse=True,
    )[:2]
    add(
        "geomean",
        "kernel overhead geomean <= 1.0% (default mode)",
        f"{_fmt(geomean)}%",
        None if geomean is None else geomean <= 1.0,
        "the largest overheads: " + ", ".join(f"{name} {pct:+.1f}%" for pct, name in worst),
    )

    verdicts, shown, why = [], [], []
    for name in HALF_OF_PROTON_KERNELS:
        kernel = kernels.get(name, {})
        pct = kernel.get("overhead_pct", {})
        if OURS not in pct or not all(p in pct for p in PROTON):
            continue
        best = min(pct[p] for p in PROTON)
        verdicts.append(pct[OURS] <= 0.5 * best)
        noise = _within_noise(kernel, pct[OURS], best)
        shown.append(f"{name}: {pct[OURS]:+.1f}% vs Proton best {best:+.1f}%{noise}")
        if pct[OURS] > 0.5 * best:
            why.append(f"{name} {pct[OURS]:+.1f}% against {0.5 * best:+.1f}% allowed")
    add(
        "half_of_proton",
        "matmul and attention: at most half of Proton's best mode",
        "; ".join(shown) or "-",
        all(verdicts) if verdicts else None,
        "; ".join(why),
    )

    record = results.get("record", {}).get("variants", {}).get(OURS, {})
    longest = max(record, key=lambda k: int(k), default=None) if record else None
    cycles = record.get(longest, {}).get("cycles_per_record") if longest else None
    add(
        "record",
        "at most 10 cycles per record (tight loop of empty scopes)",
        f"{_fmt(cycles, '.1f')} cycles",
        None if cycles is None else cycles <= 10,
        f"{_fmt(cycles, '.1f')} cycles per record over a loop of {longest} scopes "
        "(the breakdown by part of a record is in its own section)",
    )

    # Judged on the band that holds 90% of the scopes (5th to 95th percentile of the error), not
    # on the median alone.
    accuracy = [a for a in results.get("accuracy", {}).get(OURS, []) if a.get("spun_median")]
    long_rows = [a for a in accuracy if 1000 <= a["target_cycles"] <= 100000]
    short_rows = [a for a in accuracy if a["target_cycles"] < 1000]

    def band(row: dict[str, Any]) -> float:
        return max(
            abs(row.get("error_p05", row["error_median"])), abs(row.get("error_p95", row["error_median"]))
        )

    worst_long = max(long_rows, key=lambda a: band(a) / a["target_cycles"], default=None)
    worst_long_pct = None if worst_long is None else 100 * band(worst_long) / worst_long["target_cycles"]
    worst_short = max(short_rows, key=band, default=None)
    add(
        "accuracy_long",
        "scopes of N >= 1000 cycles within 2% (5th to 95th percentile)",
        f"worst {_fmt(worst_long_pct)}%",
        None if worst_long_pct is None else worst_long_pct <= 2.0,
        ""
        if worst_long is None
        else f"at N={worst_long['target_cycles']}: the p05..p95 error reaches {band(worst_long):.0f} cycles",
    )
    add(
        "accuracy_short",
        "scopes of N < 1000 cycles within +-20 cycles (5th to 95th percentile)",
        f"worst {_fmt(None if worst_short is None else band(worst_short), '.0f')} cycles",
        None if worst_short is None else band(worst_short) <= 20,
        ""
        if worst_short is None
        else f"at N={worst_short['target_cycles']}: p05 "
        f"{worst_short.get('error_p05')} and p95 {worst_short.get('error_p95')} cycles",
    )

    host = results.get("host", {}).get(OURS, {})
    ratio = host.get("ratio_vs_plain")
    add(
        "host",
        "1000 profiled launches, finalize and trace included: <= 1.3x unprofiled wall time",
        f"{_fmt(ratio, '.1f')}x",
        None if ratio is None else ratio <= 1.3,
        f"the launch loop took {_fmt(host.get('loop_s'))} s and finalize {_fmt(host.get('finalize_s'))} s "
        f"of {_fmt(host.get('wall_s'))} s",
    )
    per_event = host.get("bytes_per_million_events", {}).get("pftrace")
    per_event = None if per_event is None else per_event / 1e6
    add(
        "pftrace",
        "at most 25 bytes per event in .pftrace",
        f"{_fmt(per_event, '.1f')} bytes",
        None if per_event is None else per_event <= 25,
        f"{_fmt(per_event, '.1f')} bytes per event",
    )
    per_million = host.get("finalize_s_per_million_records")
    add(
        "finalize",
        "finalize at most 1 s per 10M records",
        f"{_fmt(None if per_million is None else 10 * per_million)} s per 10M",
        None if per_million is None else 10 * per_million <= 1.0,
        f"{_fmt(host.get('finalize_s'))} s for {host.get('records', 0):,} records "
        "(where the time goes: docs/PERFORMANCE.md)",
    )
    return (
        rows
        + occupancy_rows(results)
        + event_rows(results)
        + buffer_rows(results.get("buffers", {}))
        + compiled.target_rows(results)
        + jobs.target_rows(results)
    )


def _within_noise(kernel: dict[str, Any], ours: float, best: float) -> str:
    """ " (within noise)" when ours and Proton's best differ by less than the rounds' spread."""
    timing = kernel.get("timing", {})
    spreads = [timing.get(v, {}).get("spread_pct") for v in (OURS, "plain", *PROTON)]
    spread = max((s for s in spreads if s is not None), default=None)
    return " (within noise)" if spread is not None and abs(ours - best) < spread else ""


# --- records that do not cost occupancy (issue 10) ---------------------------------------------------

ISSUE10_GEOMEAN_MAX = 2.0  # % over plain, default mode
ISSUE10_GELU_MAX = 4.0
ISSUE10_CYCLES_MAX = 12.0  # per record, tight loop of empty scopes


# The record experiments (benchmarks/record_variants.py) that split a pair's cost in two: edits
# of layout 2's pairs, so split against them ("pairs=on (default)" in results from before
# layout=auto, when layout 2 was every kernel's).
PAIRS, PAIRS_NO_STORE, PAIRS_NO_CLOCK = "pairs=on, layout=2", "pairs: no store", "pairs: no clock read"
PAIRS_BEFORE_AUTO = "pairs=on (default)"


def record_parts(results: dict[str, Any]) -> str:
    """What the record experiments say of the tight loop's pairs: their cycles with no store,
    and with no clock read; empty when they did not run."""
    parts = {
        name: r["cycles_per_record"]
        for name, r in results.get("breakdown", {}).items()
        if isinstance(r, dict) and "cycles_per_record" in r
    }
    pairs = PAIRS if PAIRS in parts else PAIRS_BEFORE_AUTO
    if not all(name in parts for name in (pairs, PAIRS_NO_STORE, PAIRS_NO_CLOCK)):
        return ""
    whole, no_store, no_clock = parts[pairs], parts[PAIRS_NO_STORE], parts[PAIRS_NO_CLOCK]
    larger = "the store" if whole - no_store >= whole - no_clock else "the clock reads"
    return (
        f"; in the record experiments a pair costs {whole:.1f} cycles per record, {no_store:.1f} with no "
        f"store and {no_clock:.1f} with no clock read: {larger} take{'s' if larger == 'the store' else ''} "
        f"the larger part ({max(whole - no_store, whole - no_clock):.1f} cycles)"
    )


def occupancy_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets of issue 10, one row each."""
    overhead = results.get("overhead", {})
    kernels = overhead.get("kernels", {})
    geomean = overhead.get("summary", {}).get(OURS, {}).get("geomean_overhead_pct")
    gelu = kernels.get("gelu", {}).get("overhead_pct", {}).get(OURS)
    record = results.get("record", {}).get("variants", {}).get(OURS, {})
    longest = max(record, key=int, default=None)
    cycles = record[longest].get("cycles_per_record") if longest else None
    worst = sorted(
        ((k["overhead_pct"][OURS], name) for name, k in kernels.items() if OURS in k.get("overhead_pct", {})),
        reverse=True,
    )[:2]
    return [
        _proton_row(kernels, results.get("occupancy", {}).get("kernels", {}), results.get("sampling")),
        _row(
            "issue10_geomean",
            f"issue 10: kernel overhead geomean <= {ISSUE10_GEOMEAN_MAX:g}% (default mode)",
            f"{_fmt(geomean)}%",
            None if geomean is None else geomean <= ISSUE10_GEOMEAN_MAX,
            "not measured in this run"
            if geomean is None
            else "the largest overheads: " + ", ".join(f"{name} {pct:+.1f}%" for pct, name in worst),
        ),
        _row(
            "issue10_gelu",
            f"issue 10: gelu overhead <= {ISSUE10_GELU_MAX:g}% (default mode)",
            f"{_fmt(gelu, '+.1f')}%",
            None if gelu is None else gelu <= ISSUE10_GELU_MAX,
            "not measured in this run"
            if gelu is None
            else f"gelu +{gelu:.1f}% over plain{_within_noise(kernels['gelu'], gelu, ISSUE10_GELU_MAX)}",
        ),
        _row(
            "issue10_record",
            f"issue 10: at most {ISSUE10_CYCLES_MAX:g} cycles per record (tight loop of empty scopes)",
            f"{_fmt(cycles, '.1f')} cycles",
            None if cycles is None else cycles <= ISSUE10_CYCLES_MAX,
            "not measured in this run"
            if cycles is None
            else f"{cycles:.1f} cycles per record over a loop of {longest} scopes" + record_parts(results),
        ),
        _ctas_row(results.get("occupancy", {}), kernels, results.get("environment", {}).get("sms")),
    ]


def proton_records_kept(variant: str, occupancy: dict[str, Any]) -> int | None:
    """The most records per warp that a Proton variant's circular buffer keeps, from a kernel's
    occupancy entry: its buffer (the shared memory it adds, or its per-CTA scratch less the
    header) split between the warps, rounded down to a power of two, 8 bytes a record."""
    variants = occupancy.get("variants", {})
    plain, theirs = variants.get("plain"), variants.get(variant)
    if not plain or not theirs or not theirs.get("warps"):
        return None
    warps = theirs["warps"]
    if variant == "proton_shared":
        buffer = theirs["shared"] - plain["shared"]
    else:
        buffer = (
            theirs["profile_scratch_per_cta"] - PROTON_HEADER_BYTES - PROTON_HEADER_BYTES_PER_WARP * warps
        )
    segment = buffer // warps
    return (1 << segment.bit_length() - 1) // PROTON_RECORD_BYTES if segment > 0 else 0


def _sampled_clause(name: str, sampling: dict[str, Any]) -> str:
    """What the cheapest sampling mode measured on kernel ``name`` cost, where the run sampled it
    (the "sampling" section): the choice a user has to pay less and keep fewer records."""
    entry = sampling.get("kernels", {}).get(name, {})
    labels = {m["label"]: text for text, m in sampling.get("modes", {}).items() if "label" in m}
    measured = {label: pct for label, pct in entry.get("overhead_pct", {}).items() if label in labels}
    if not measured:
        return ""
    label = min(measured, key=lambda key: measured[key])
    return f"; sampled with `{labels[label].split(':', 1)[-1]}` it costs {measured[label]:+.1f}%"


def _proton_row(
    kernels: dict[str, Any], occupancy: dict[str, dict[str, Any]], sampling: dict[str, Any] | None = None
) -> dict[str, Any]:
    key, goal = (
        "issue10_vs_proton",
        "issue 10: on every suite kernel, the default mode costs no more than Proton's best mode",
    )
    compared, over = 0, []
    for name, kernel in kernels.items():
        pct = kernel.get("overhead_pct", {})
        theirs = [pct[p] for p in PROTON if p in pct]
        if OURS not in pct or not theirs:
            continue
        compared += 1
        if pct[OURS] > min(theirs):
            noise = _within_noise(kernel, pct[OURS], min(theirs))
            best = min((p for p in PROTON if p in pct), key=lambda p: pct[p])
            kept = proton_records_kept(best, occupancy.get(name, {}))
            most = kernel.get("records_per_warp", {}).get("max")
            drops = (
                f" ({best} keeps at most {kept} of a warp's {most} records; its circular buffer drops the rest)"
                if kept is not None and most is not None and kept < most
                else ""
            )
            sampled = _sampled_clause(name, sampling or {})
            over.append(
                f"{name} {pct[OURS]:+.1f}% against Proton's best {min(theirs):+.1f}%{noise}{drops}{sampled}"
            )
    if not compared:
        return _row(key, goal, "-", None, "not measured in this run")
    measured = f"{compared - len(over)} of {compared} kernels"
    return _row(key, goal, measured, not over, "; ".join(over))


def _grid_fits(grid: Any, sms: Any, ctas_per_sm: int) -> str:
    """Where a launch's whole grid is resident at once with ``ctas_per_sm`` CTAs per SM: a clause
    saying that the lost CTA slot holds none of its CTAs; else empty."""
    if not isinstance(grid, list) or not isinstance(sms, int) or sms <= 0:
        return ""
    ctas = math.prod(int(extent) for extent in grid)
    if ctas > sms * ctas_per_sm:
        return ""
    return f"; its grid of {ctas:,} CTAs is resident at once with {ctas_per_sm} per SM, so none of them waits"


def _ctas_row(
    occupancy: dict[str, Any], kernels: dict[str, Any] | None = None, sms: Any = None
) -> dict[str, Any]:
    key, goal = "issue10_ctas", "issue 10: no suite kernel loses a resident CTA per SM to the default mode"
    if not occupancy.get("kernels"):
        return _unmeasured(key, goal, occupancy)
    both = {
        name: (e["variants"]["plain"], e["variants"][OURS])
        for name, e in occupancy["kernels"].items()
        if "plain" in e["variants"] and OURS in e["variants"]
    }
    if not both:
        return _row(key, goal, "-", None, "no kernel compiled both plain and in the default mode")
    lost = {name: rows for name, rows in both.items() if rows[1]["ctas"] < rows[0]["ctas"]}
    measured = f"{len(both) - len(lost)} of {len(both)} kernels keep their CTAs"
    why = "; ".join(
        f"{name}: {plain['ctas']} -> {ours['ctas']} CTAs per SM ({plain['registers']} -> {ours['registers']} "
        "registers"
        + (
            f", {plain['shared']:,} -> {ours['shared']:,} bytes shared"
            if ours["shared"] != plain["shared"]
            else ""
        )
        + f"; limited by {ours['limited_by']})"
        + _grid_fits((kernels or {}).get(name, {}).get("grid"), sms, ours["ctas"])
        for name, (plain, ours) in lost.items()
    )
    return _row(key, goal, measured, not lost, why)


# --- events against scopes (issue 11): benchmarks/event_cost.py ---------------------------------------

ISSUE11_EVENT_RATIO_MAX = 1.25  # an event record's cycles over a scope record's, by the clock
ISSUE11_EVENT_KERNELS = ("event", "event_const")


def event_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 11's target, one row; none when the events section did not run, so that a run
    without it renders as before."""
    if "events" not in results:
        return []
    events = results["events"]
    key = "issue11_event"
    goal = f"issue 11: an event record costs at most {ISSUE11_EVENT_RATIO_MAX:g}x a scope record (clock)"
    scope = event_cost.per_record(events, event_cost.BASELINE)
    ratios = {name: event_cost.against_scope(events, name) for name in ISSUE11_EVENT_KERNELS}
    measured = {name: ratio for name, ratio in ratios.items() if ratio is not None}
    if not measured:
        return [_unmeasured(key, goal, events)]
    over = [name for name, ratio in measured.items() if ratio > ISSUE11_EVENT_RATIO_MAX]
    why = "; ".join(
        f"{name}: {_fmt(event_cost.per_record(events, name), '.1f')} cycles per record against "
        f"{_fmt(scope, '.1f')} for a scope, {_fmt(ISSUE11_EVENT_RATIO_MAX * scope, '.1f')} allowed"
        for name in over
    )
    shown = ", ".join(f"{name} {ratio:.2f}x" for name, ratio in measured.items())
    return [_row(key, goal, f"{shown} (scope {_fmt(scope, '.1f')} cycles)", not over, why)]


# --- buffers sized from the code (issue 7): benchmarks/buffers/ -------------------------------------
# Here the reasons are computed from the run's numbers too.

BYTES_RATIO_MAX = 2.0  # device bytes per launch / (headers + entries written)
HOST_ADDED_US_MAX = 25.0
LAUNCH_ADDED_US_MAX = 5.0  # issue 24: launch only, pointer and TensorDescriptor arguments
# issue 23: against plain, or against moving the records off the device and into the file
# (pinned copy + sequential write) where that is longer
E2E_RATIO_MAX = 1.2
FINALIZE_MIN_RECORDS_PER_S = 10e6
FINALIZE_ONE_CORE_MIN_RECORDS_PER_S = 2e6  # issue 24


def _row(key: str, goal: str, measured: str, met: bool | None, why_not: str) -> dict[str, Any]:
    return {"key": key, "goal": goal, "measured": measured, "met": met, "why_not": "" if met else why_not}


def _unmeasured(key: str, goal: str, step: dict[str, Any]) -> dict[str, Any]:
    why = f"failed: {step['error'][:200]}" if "error" in step else "not measured in this run"
    return _row(key, goal, "-", None, why)


def buffer_rows(buffers: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets of issue 7, one row each, from results["buffers"]."""
    return [
        _default_mode_row(buffers),
        _bytes_row(buffers),
        _host_row(buffers),
        *_launch_only_rows(buffers),
        _e2e_row(buffers),
        _finalize_row(buffers),
        *_finalize_shape_rows(buffers),
        _graph_row(buffers),
        _autotune_row(buffers),
    ]


def _kernel_failure(kernel: dict[str, Any]) -> str:
    if kernel.get("error"):
        return kernel["error"][:200]
    if kernel["launches_in_trace"] != 1:
        return f"{kernel['launches_in_trace']} launches in the trace for the one made"
    if kernel["records"] != kernel["records_expected"]:
        capacity = kernel.get("capacity") or {}
        if kernel["records"] + kernel.get("overwritten", 0) == kernel["records_expected"]:
            return (
                f"a ring of {capacity.get('entries')} entries per warp kept {kernel['records']:,} of the "
                f"{kernel['records_expected']:,} records and counted the {kernel['overwritten']:,} it "
                f"overwrote ({capacity.get('reason', 'no bound')})"
            )
        return f"{kernel['records']:,} records in the trace; the scopes give {kernel['records_expected']:,}"
    return f"output differs from torch: {kernel['output_error'][:150]}"


def _default_mode_row(buffers: dict[str, Any]) -> dict[str, Any]:
    key = "buffers_default_mode"
    goal = "default mode, no options: every suite kernel and four_scopes (16384 CTAs x 8 warps) profiled, records exact"
    step = buffers.get("default_mode", {})
    kernels = step.get("kernels", {})
    if not kernels:
        return _unmeasured(key, goal, step)
    failed = {name: _kernel_failure(k) for name, k in kernels.items() if not k.get("worked")}
    measured = f"{len(kernels) - len(failed)} of {len(kernels)} kernels"
    return _row(key, goal, measured, not failed, "; ".join(f"{n}: {why}" for n, why in failed.items()))


def _bytes_row(buffers: dict[str, Any]) -> dict[str, Any]:
    key = "buffers_bytes"
    goal = f"device bytes per launch <= {BYTES_RATIO_MAX:g}x the headers and entries written (kernels with a bound)"
    rows = buffers.get("device_bytes", {}).get("kernels", {})
    if not rows:
        step = buffers.get("default_mode", {})
        if step.get("kernels"):
            return _row(key, goal, "-", None, "no kernel of the run had a bound the compiler could see")
        return _unmeasured(key, goal, step)
    measured = ", ".join(f"{name} {r['ratio']:.2f}x" for name, r in rows.items())
    over = {name: r for name, r in rows.items() if r["ratio"] > BYTES_RATIO_MAX}
    why = "; ".join(
        f"{name}: {r['capacity_entries']} entries per warp for {r['entries_per_unit']:.2f} written, "
        f"{r['bytes']:,} bytes for {r['written']:,} written"
        for name, r in over.items()
    )
    return _row(key, goal, measured, not over, why)


def _host_row(buffers: dict[str, Any]) -> dict[str, Any]:
    key = "buffers_host"
    goal = f"host time added per launch (launch + synchronize, finalize excluded) <= {HOST_ADDED_US_MAX:g} us"
    host = buffers.get("host", {})
    added = host.get("added_us", {})
    ours = added.get("proton_ik")
    if ours is None:
        errors = host.get("errors", {}).get("proton_ik")
        return _unmeasured(key, goal, {"error": errors[0]} if errors else host)
    timing = host["us_per_launch"]
    plain, profiled = timing["plain"]["median"], timing["proton_ik"]["median"]
    theirs = added.get("proton")
    measured = f"proton_ik +{ours:.1f} us, Proton +{_fmt(theirs, '.1f')} us (plain {plain:.1f} us)"
    copied = max(host.get("proton_ik_copied_bytes_in_loop", []), default=0)
    why = (
        f"a launch and its synchronize take {profiled:.1f} us in a session against {plain:.1f} us plain: "
        f"{ours - HOST_ADDED_US_MAX:.1f} us over"
        + (f"; the drain copied {copied / 2**20:.1f} MiB during a loop" if copied else "")
    )
    return _row(key, goal, measured, ours <= HOST_ADDED_US_MAX, why)


def _launch_only_rows(buffers: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 24: host time added per launch, launch only, one row per kind of arguments."""
    step = buffers.get("launch_only", {})
    rows = []
    for name, what in (
        ("short_add", "pointer arguments"),
        ("descriptor_add", "TensorDescriptor arguments"),
        ("sized_sum", "pointer arguments, segments sized at launch"),
        ("sized_descriptor_sum", "TensorDescriptor arguments, segments sized at launch"),
    ):
        key = f"buffers_launch_only_{name}"
        goal = (
            f"host time added per launch, launch only, {what} (2000 launches): <= {LAUNCH_ADDED_US_MAX:g} us"
        )
        found = step.get(name, {})
        ours = found.get("added_us", {}).get("proton_ik")
        if ours is None:
            errors = found.get("errors", {}).get("proton_ik")
            rows.append(_unmeasured(key, goal, {"error": errors[0]} if errors else step))
            continue
        timing = found["us_per_launch"]
        plain = timing["plain"]["median"]
        measured = (
            f"proton_ik +{ours:.1f} us, Proton +{_fmt(found['added_us'].get('proton'), '.1f')} us "
            f"(plain {plain:.1f} us); outputs equal: {'yes' if found.get('outputs_equal') else 'no'}"
        )
        why = f"{timing['proton_ik']['median']:.1f} us a launch in a session against {plain:.1f} us plain"
        rows.append(_row(key, goal, measured, ours <= LAUNCH_ADDED_US_MAX, why))
    return rows


def _e2e_row(buffers: dict[str, Any]) -> dict[str, Any]:
    key = "buffers_end_to_end"
    goal = (
        f"end to end, 100 launches of four_scopes, hooks on: <= {E2E_RATIO_MAX:g}x the larger of plain and "
        "moving the records off the device and into the file (pinned copy + sequential write, same run)"
    )
    e2e = buffers.get("end_to_end", {})
    if "flushed_ms" not in e2e:
        return _unmeasured(key, goal, e2e)
    plain, profiled = e2e["plain_ms"]["median"], e2e["flushed_ms"]["median"]
    copy = e2e["copy_ms"]["median"]
    write = e2e.get("write_ms", {}).get("median", 0.0)  # runs before issue 23 did not measure it
    moved = copy + write
    bound, against = (moved, "copy + write") if moved > plain else (plain, "plain kernel")
    measured = (
        f"{profiled / bound:.2f}x the {against} ({profiled:.3f} ms per launch; plain {plain:.3f} ms, "
        f"copy {copy:.3f} ms, file write {write:.3f} ms)"
    )
    why = (
        f"{profiled:.3f} ms per launch against {E2E_RATIO_MAX * bound:.3f} ms allowed ({E2E_RATIO_MAX:g} x the "
        f"{against}); the drain moved {e2e['copied_bytes_per_launch'] / 2**20:.1f} MiB a launch at "
        f"{e2e['drain_gb_per_s']:.1f} GB/s where one pinned copy runs at {e2e['copy_gb_per_s']:.1f} GB/s"
    )
    return _row(key, goal, measured, profiled <= E2E_RATIO_MAX * bound, why)


def _finalize_row(buffers: dict[str, Any]) -> dict[str, Any]:
    key = "buffers_finalize"
    goal = f"finalize (.pik + .pftrace) >= {FINALIZE_MIN_RECORDS_PER_S / 1e6:g}M records/s"
    fin = buffers.get("finalize", {})
    if "records_per_s" not in fin:
        return _unmeasured(key, goal, fin)
    rate, records = fin["records_per_s"], fin["records"]
    seconds = fin["flush_s"] + fin["finalize_s"]
    measured = f"{rate / 1e6:.2f}M records/s ({records / 1e6:.1f}M records in {seconds:.2f} s)"
    pftrace = fin.get("bytes_per_event", {}).get("pftrace")
    why = (
        f"flush {fin['flush_s']:.2f} s + finalize {fin['finalize_s']:.2f} s for {records / 1e6:.1f}M records, "
        f"where {FINALIZE_MIN_RECORDS_PER_S / 1e6:g}M records/s allows {records / FINALIZE_MIN_RECORDS_PER_S:.2f} s"
        + (f"; .pftrace {pftrace:.1f} bytes per event" if pftrace is not None else "")
    )
    return _row(key, goal, measured, rate >= FINALIZE_MIN_RECORDS_PER_S, why)


def _finalize_shape_rows(buffers: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 24's finalize targets, one row a shape the run measured (none from runs before it
    measured them)."""
    rows = []
    for shape in buffers.get("finalize", {}).get("shapes", []):
        one_core = bool(shape.get("one_core"))
        least = FINALIZE_ONE_CORE_MIN_RECORDS_PER_S if one_core else FINALIZE_MIN_RECORDS_PER_S
        where = "on one core" if one_core else "on this host"
        session = f"{shape['launches']:,} launches of {shape['kernel']}"
        key = f"buffers_finalize_{shape['kernel']}_{shape['launches']}" + ("_one_core" if one_core else "")
        goal = f"issue 24: finalize (.pik + .pftrace) of {session} {where} >= {least / 1e6:g}M records/s"
        if "records_per_s" not in shape:
            rows.append(_unmeasured(key, goal, shape))
            continue
        rate, records = shape["records_per_s"], shape["records"]
        seconds = shape["flush_s"] + shape["finalize_s"]
        measured = f"{rate / 1e6:.2f}M records/s ({records:,} records in {seconds:.2f} s)"
        why = (
            f"flush {shape['flush_s']:.2f} s + finalize {shape['finalize_s']:.2f} s, where "
            f"{least / 1e6:g}M records/s allows {records / least:.2f} s"
        )
        rows.append(_row(key, goal, measured, rate >= least, why))
    return rows


def _graph_row(buffers: dict[str, Any]) -> dict[str, Any]:
    key = "buffers_graph"
    goal = "CUDA graph replayed 10 times: 10 launch rows, replay 0..9, exact records"
    graph = buffers.get("graph", {})
    if "exact" not in graph:
        return _unmeasured(key, goal, graph)
    expected, records = graph["records_expected"], graph["records_per_replay"]
    measured = (
        f"{graph['replay_rows']} replay rows of {graph['launch_rows']}, replays {graph['replay_indices']}"
    )
    wrong = [r for r in records if r != expected]
    problems = [
        f"the launch table lacks {graph['missing_columns']}" if graph["missing_columns"] else "",
        f"replays {graph['replay_indices']} for 0..{graph['replays_made'] - 1}"
        if graph["replay_indices"] != list(range(graph["replays_made"]))
        else "",
        f"{len(wrong)} replays with {sorted(set(wrong))} records for {expected:,}" if wrong else "",
        f"{graph['overwritten']:,} records overwritten" if graph["overwritten"] else "",
        f"output: {graph['output_error'][:120]}" if graph["output_error"] else "",
    ]
    return _row(key, goal, measured, graph["exact"], "; ".join(p for p in problems if p))


def _autotune_row(buffers: dict[str, Any]) -> dict[str, Any]:
    key = "buffers_autotune"
    goal = "autotune in a session: the config chosen outside it, and exactly the user's calls recorded"
    tune = buffers.get("autotune", {})
    if "same_config" not in tune:
        return _unmeasured(key, goal, tune)
    measured = (
        f"{tune['config_inside']} in the session, {tune['config_outside']} outside; "
        f"{tune['launch_rows']} launches recorded for {tune['calls']} calls"
    )
    expected = tune["records_expected"]
    wrong = [r for r in tune["records_per_launch"] if r != expected]
    problems = [
        ""
        if tune["same_config"]
        else f"benchmarked in the session {tune['timings_inside_ms']}, outside {tune['timings_outside_ms']} (ms)",
        f"{tune['launch_rows']} launches recorded for {tune['calls']} calls"
        if tune["launch_rows"] != tune["calls"]
        else "",
        f"{len(wrong)} launches with {sorted(set(wrong))} records for {expected:,}" if wrong else "",
        f"output: {tune['output_error']}" if tune["output_error"] else "",
    ]
    met = tune["same_config"] and tune["exact"]
    return _row(key, goal, measured, met, "; ".join(p for p in problems if p))


def markdown(results: dict[str, Any]) -> list[str]:
    lines = ["## Targets", "", "| target | measured | met | why not |", "|---|---|---|---|"]
    for row in judge(results):
        met = "not measured" if row["met"] is None else ("yes" if row["met"] else "**no**")
        lines.append(f"| {row['goal']} | {row['measured']} | {met} | {row['why_not']} |")
    return lines
