"""1. The default mode on every kernel, and 2. the device bytes a launch takes against the bytes
it wrote."""

from __future__ import annotations

import contextlib
import math
import shutil
import traceback
from pathlib import Path
from typing import Any

import torch

from benchmarks import kernels
from benchmarks.buffers.sessions import end_leftover_session, ik_session, launch_table, output_error
from benchmarks.buffers.settings import Settings
from benchmarks.harness import fresh
from benchmarks.kernels import elementwise
from benchmarks.kernels.problem import Problem
from proton_ik.contract.layout import CTA_HEADER_BYTES, UNIT_HEADER_BYTES, slot_bytes


def default_mode(settings: Settings) -> dict[str, Any]:
    """One launch of each suite kernel and of four_scopes, each in a session of its own."""
    problems = [*kernels.suite(settings.quick, settings.num_sms), elementwise.four_scopes()]
    found: dict[str, Any] = {}
    for problem in problems:
        directory = settings.scratch / "default_mode" / problem.name
        try:
            found[problem.name] = profile_once(problem, directory)
        except Exception as error:
            traceback.print_exc()
            found[problem.name] = {"worked": False, "error": f"{error!r}"[:500]}
        finally:
            end_leftover_session()
            shutil.rmtree(directory, ignore_errors=True)
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
        entry = found[problem.name]
        settings.log(
            f"  default mode {problem.name}: worked={entry['worked']} "
            f"capacity={entry.get('capacity')} records={entry.get('records')}/{entry.get('records_expected')}"
        )
    return {"kernels": found}


def profile_once(problem: Problem, directory: Path) -> dict[str, Any]:
    """``problem`` launched once under ``proton_ik.start`` with no options."""
    launch = problem.make_launch()
    fn = fresh(problem.fn)
    with ik_session(problem.name, directory) as run:
        compiled = fn[launch.grid](*launch.args, **problem.options)
        torch.cuda.synchronize()
    profile = getattr(compiled.metadata, "proton_ik", None)
    if not profile:
        raise RuntimeError("compiled without proton_ik metadata: the default mode did not instrument it")
    table = launch_table(run)
    row = table.iloc[0]
    ctas = math.prod(launch.grid)
    entry: dict[str, Any] = {
        "grid": list(launch.grid),
        "warps": int(compiled.metadata.num_warps),
        "ctas": ctas,
        "capacity": dict(profile.get("capacity") or {}),
        "layout": dict(profile["layout"]),
        "launches_in_trace": len(table),
        "records": int(row["records"]),
        "records_expected": int(problem.records_per_warp(compiled.metadata.num_warps).sum()),
        "overwritten": int(row["overwritten"]),
        "events": int(row["events"]),
        "problems": _problems(row["problems"])[:3],
        "device_bytes": ctas * int(profile["layout"]["cta_bytes"]),
        "copied_bytes": run.copied_bytes(),
        "entries_in_table": int(row["entries"]) if "entries" in table.columns else None,
        "files": sorted(run.result.paths),
        "output_error": output_error(launch, problem.tolerance),
    }
    entry["exact"] = entry["launches_in_trace"] == 1 and entry["records"] == entry["records_expected"]
    entry["worked"] = entry["exact"] and not entry["output_error"]
    return entry


def _problems(value: Any) -> list[str]:
    if isinstance(value, str):
        return [p for p in value.split("; ") if p]
    return [str(p) for p in value]


# --- 2. device bytes against what was written ------------------------------------------------------


def device_bytes(default: dict[str, Any]) -> dict[str, Any]:
    """For each kernel of ``default_mode`` whose bound is known: bytes = CTAs x cta_bytes against
    written = CTAs x 64 + units x 48 + slots x the layout's slot bytes (16 in version 2, 8 in 3)."""
    rows: dict[str, Any] = {}
    for name, kernel in default.get("kernels", {}).items():
        capacity = kernel.get("capacity") or {}
        if capacity.get("source") != "bound" or "layout" not in kernel:
            continue
        units = kernel["ctas"] * int(kernel["layout"]["units"])
        entries, source = entries_written(kernel, capacity.get("bound"), units)
        slot = slot_bytes(int(kernel["layout"]["version"]))
        written = kernel["ctas"] * CTA_HEADER_BYTES + units * UNIT_HEADER_BYTES + entries * slot
        rows[name] = {
            "bytes": kernel["device_bytes"],
            "written": written,
            "ratio": kernel["device_bytes"] / written,
            "entries": entries,
            "slot_bytes": slot,
            "entries_source": source,
            "units": units,
            "entries_per_unit": entries / units,
            "capacity_entries": int(kernel["layout"]["capacity"]),
            "bound": capacity.get("bound"),
            "copied_bytes": kernel["copied_bytes"],
        }
    return {"kernels": rows}


def entries_written(kernel: dict[str, Any], bound: int | None, units: int) -> tuple[int, str]:
    """Ring slots (entries) the launch wrote, and where the number comes from. A slot holds at most
    2 records (a pair: version 2's entry, version 3's short pair), so records / 2 is exact when
    every slot holds a pair, and a lower bound otherwise."""
    if kernel.get("entries_in_table") is not None:
        return int(kernel["entries_in_table"]), "the launch table's entries column"
    records = int(kernel["records"])
    if bound is not None and records == 2 * int(bound) * units:
        return records // 2, "records / 2 (records = 2 x bound x units: every entry is a pair)"
    return -(-records // 2), "records / 2 (the fewest entries that hold them: the ratio is an upper bound)"
