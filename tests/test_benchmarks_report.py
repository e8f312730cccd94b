"""The benchmark report is a pure function of the run's results: the committed results.json
renders again into the committed BENCHMARKS.md and benchmarks/results/results.md, byte for byte.

This is the oracle for changes to benchmarks/ that should not change the report (a module moved,
a section split): the numbers and the prose around them come out as the GPU run wrote them. It
runs the command a user runs, ``python -m benchmarks.run --report-only``, from the repository
root: xdsl installs a top-level package also named ``benchmarks``, which an import from inside
pytest would find instead of ours.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def report_only(out: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--report-only", "--out", str(out), *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_committed_results_render_into_the_committed_report(tmp_path: Path) -> None:
    shutil.copy(RESULTS / "results.json", tmp_path / "results.json")
    run = report_only(tmp_path, "--benchmarks-md", str(tmp_path / "BENCHMARKS.md"))
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "BENCHMARKS.md").read_text() == (ROOT / "BENCHMARKS.md").read_text()
    assert (tmp_path / "results.md").read_text() == (RESULTS / "results.md").read_text()
    device = json.loads((RESULTS / "results.json").read_text())["environment"]["device"]
    assert f"proton_ik benchmark on {device}" in run.stdout  # the summary table, printed last


def test_report_only_refuses_the_options_of_a_measurement(tmp_path: Path) -> None:
    shutil.copy(RESULTS / "results.json", tmp_path / "results.json")
    run = report_only(tmp_path, "--quick", "--only", "buffers")
    assert run.returncode == 2
    assert "--quick, --only would be ignored" in run.stderr
    assert not (tmp_path / "results.md").exists()
