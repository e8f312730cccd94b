"""The card's top level and the tools that must see through it: setuptools' package list and
mapping, mypy's list of modules, and the wheel's files all hold every module of the four folders
under its import name."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from package_layout import FOLDERS, ROOT, modules, packages


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_setuptools_installs_every_package_from_its_folder():
    config = _pyproject()["tool"]["setuptools"]
    mapping = {package: ROOT / folder for package, folder in config["package-dir"].items()}
    assert mapping == FOLDERS
    missing = packages() - set(config["packages"])
    assert not missing, f"add {sorted(missing)} to [tool.setuptools] packages in pyproject.toml"
    assert set(config["packages"]) == packages()


def test_mypy_checks_every_module_under_its_import_name():
    """mypy names modules by path and cannot see the package-dir mapping or an editable install's
    import hook: modules it does not list are typed as Any, silently."""
    pytest.importorskip("mypy")
    from mypy.config_parser import parse_config_file
    from mypy.find_sources import create_source_list
    from mypy.options import Options

    options = Options()
    parse_config_file(options, lambda: None, str(ROOT / "pyproject.toml"), io.StringIO(), io.StringIO())
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)  # the configured paths are the checkout's
        sources = create_source_list(options.files or [], options)
    checked = {source.module: Path(source.path or "").resolve() for source in sources}
    assert len(checked) == len(sources)
    assert checked == modules(), "mypy's modules differ from the package's: see [tool.mypy] files"


def test_the_wheel_holds_every_module_and_data_file(tmp_path):
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} here; the build needs 77 or later")
    source = tmp_path / "source"  # a copy, so that the build leaves nothing in the checkout
    for folder in FOLDERS.values():
        shutil.copytree(folder, source / folder.name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            tmp_path,
            source,
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("proton_ik-*.whl")
    held = {name for name in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in name}
    expected = {
        name.replace(".", "/") + ("/__init__.py" if p.name == "__init__.py" else ".py")
        for name, p in modules().items()
    }
    data = {f"proton_ik/data/{path.name}" for path in (FOLDERS["proton_ik"] / "data").iterdir()}
    assert "proton_ik/data/demo.pik" in data
    # The C parts, which proton_ik/native.py builds at run time
    compiled_at_run_time = {
        f"proton_ik/{installed}/{path.name}"
        for installed, folder in (
            ("runtime/launch_path", FOLDERS["proton_ik"] / "runtime" / "launch_path"),
            ("viewer/perfetto/packets", FOLDERS["proton_ik.viewer"] / "perfetto" / "packets"),
        )
        for path in folder.iterdir()
        if path.suffix in (".c", ".h")
    }
    assert held == expected | data | compiled_at_run_time
