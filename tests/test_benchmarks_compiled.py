"""The torch.compile section of the report (issue 22) and run.py --merge, from results written
here: each target judged from its numbers, and sections kept from an earlier run named with it.

Run from the repository root in a subprocess, as the other report tests do: xdsl installs a
top-level package also named ``benchmarks``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = json.loads((ROOT / "benchmarks" / "results" / "results.json").read_text())

SCRIPT = """
import json, sys
from benchmarks import report, run
from benchmarks.report import compiled
cases = json.load(sys.stdin)
merged = dict(cases["fresh"])
run.merge_kept_sections(merged, cases["earlier"], ["compiled"])
print(json.dumps({
    "rows": {name: compiled.target_rows(results) for name, results in cases.items()},
    "text": report.render(cases["met"]),
    "merged_keys": sorted(merged), "kept": merged["kept_sections"],
    "merged_text": report.render(merged),
}))
"""


def _compiled(step_ratio: float, same_kernels: bool = True) -> dict:
    plain = 0.3
    return {
        "mode": "instrumentation:unscoped=kernel",
        "steps": 50,
        "short_steps": 10,
        "rounds": 3,
        "block": {"batch": 4, "seq": 1024, "width": 512, "heads": 8},
        "exact": {
            "launches": 9,
            "cupti_triton_launches": 9 if same_kernels else 8,
            "same_kernels": same_kernels,
            "kernels": ["block_attention_kernel", "triton_poi_fused_gelu_0"],
            "records": 1000,
            "overwritten": 0,
            "unmatched": 0,
            "inexact_kernels": [],
        },
        "outputs_equal": True,
        "step_ms": {
            "plain": plain,
            "session": plain * step_ratio,
            "session_short": plain * 1.2,
            "session_user": plain * 1.1,
            "session_user_short": plain * 1.05,
            "rounds": {},
            "finalize_s": {"session": 0.5, "session_user": 0.1},
        },
        "session_modes": {"session_user": "instrumentation", "session": "instrumentation:unscoped=kernel"},
        "proton_integration": {"step_ms": 10.0, "steps": 10},
        "first_call_s": {"plain": 10.0, "session": 12.0, "session_workers": 13.0, "rounds": {}},
    }


def _render(cases: dict) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout)


def test_each_target_is_judged_from_its_numbers_and_the_section_renders():
    fresh = {key: COMMITTED[key] for key in ("environment", "quick", "command", "variants")}
    fresh["environment"] = {
        **fresh["environment"],
        "date_utc": "2026-12-01 00:00 UTC",
        "device": "NVIDIA H200",
    }
    out = _render(
        {
            "met": {**COMMITTED, "compiled": _compiled(1.4)},
            "missed": {**COMMITTED, "compiled": _compiled(2.0, same_kernels=False)},
            "failed": {**COMMITTED, "compiled": {"error": "RuntimeError('no GPU')"}},
            "fresh": {**fresh, "compiled": _compiled(1.4)},
            "earlier": COMMITTED,
        }
    )
    met = {row["key"]: row for row in out["rows"]["met"]}
    assert all(row["met"] for row in met.values()), met
    assert "1.40x" in met["compiled_step"]["measured"] and "33.3x" in met["compiled_step"]["measured"]
    missed = {row["key"]: row for row in out["rows"]["missed"]}
    assert missed["compiled_step"]["met"] is False and missed["compiled_exact"]["met"] is False
    assert "9 launches recorded, CUPTI saw 8" in missed["compiled_exact"]["why_not"]
    assert all(row["met"] is None and "no GPU" in row["why_not"] for row in out["rows"]["failed"])
    text = out["text"]
    assert "## torch.compile" in text and "(batch 4, sequence 1024, width 512, 8 heads, fp16)" in text
    # run.py --merge: this run's section, the others kept and named with the run they came from.
    assert set(out["kept"]) == {
        name
        for name in COMMITTED
        if name
        not in (
            "environment",
            "quick",
            "command",
            "variants",
            "wall_s",
            "smi_mhz_all_samples_median",
            "compiled",
            "kept_sections",
        )
    }
    # The overhead section is kept with the run that measured it: the committed results' own run,
    # or the earlier run they kept it from.
    measured = COMMITTED.get("kept_sections", {}).get("overhead") or COMMITTED["environment"]
    assert "overhead" in out["merged_keys"] and out["kept"]["overhead"]["device"] == measured["device"]
    assert f"- Kept from the run of {measured['date_utc']} on {measured['device']}" in out["merged_text"]


def test_a_merge_that_measures_the_overhead_keeps_its_own_variants_whatever_else_it_keeps():
    """The overhead table is labelled by this run's variants; the sampling section, kept from an
    earlier run, labels its own rows, so it brings no variants with it."""
    script = """
import json, sys
from benchmarks import run
earlier, fresh = json.load(sys.stdin)
run.merge_kept_sections(fresh, earlier, ["overhead"])
print(json.dumps(fresh["variants"]))
"""
    earlier = {**COMMITTED, "variants": [{"label": "proton_ik[occupancy=keep]"}]}
    fresh = {"environment": COMMITTED["environment"], "variants": [{"label": "proton_ik[occupancy=free]"}]}
    assert "sampling" in earlier
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps([earlier, fresh]),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == [{"label": "proton_ik[occupancy=free]"}]
    fresh = {"environment": COMMITTED["environment"], "variants": [{"label": "x"}]}
    done = subprocess.run(
        [sys.executable, "-c", script.replace('["overhead"]', '["compiled"]')],
        input=json.dumps([earlier, fresh]),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == [{"label": "proton_ik[occupancy=keep]"}]  # overhead kept: its variants
