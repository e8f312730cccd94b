"""What a new user meets first: the README's no-GPU snippet runs as printed, the demo's outputs
are ignored by git, and the package metadata builds without setuptools' license deprecation."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def readme_block(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(heading) :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_no_gpu_snippet_compiles_an_instrumented_kernel_as_printed(tmp_path):
    code = readme_block("### Compiling with no GPU")
    check = "\nassert [s['name'] for s in compiled.metadata.proton_ik['scopes']] == ['load']\n"
    script = tmp_path / "snippet.py"  # Triton reads a @jit function's source from its file
    script.write_text(code + check)
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
@pytest.mark.parametrize("name", ["proton_ik_demo.pftrace", "proton_ik_demo.json", "proton_ik_demo.pik"])
def test_git_ignores_what_the_demo_writes_here(name):
    ignored = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT)
    assert ignored.returncode == 0, f"{name} is not in .gitignore"


def test_the_license_is_an_spdx_expression():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert any(req.startswith("setuptools>=77") for req in project["build-system"]["requires"])


def _readme_columns() -> dict[str, list[str]]:
    """The README's table of tables: each table's name (its first code span) and its columns."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### The tables") : text.index("### Modes")]
    tables = {}
    for row in re.findall(r"^\| `([^`]+)`[^|]*\| (.+) \|$", section, re.M):
        name, columns = row
        tables[name] = re.findall(r"`([a-z_0-9]+)`", re.sub(r"\([^)]*\)", "", columns))
    return tables


def test_the_readme_names_every_column_of_the_tables_in_order():
    """The README's list of columns is the tables' own, so that it stays true."""
    from proton_ik import viewer

    trace = viewer.load(ROOT / "proton_ik" / "data" / "demo.pik")
    tables = _readme_columns()
    assert set(tables) == {"events", "units", "launches", "unmatched", "result.summary().scopes"}
    for name in ("events", "units", "launches", "unmatched"):
        assert tables[name] == list(getattr(trace, name).columns), name
    assert tables["result.summary().scopes"] == list(trace.summary().scopes.columns)
