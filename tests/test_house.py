"""The house rules of docs/ARCHITECTURE.md, checked: which room may import which, and room size.

Imports are read from the source (module level and inside functions alike), so a lazy import
that crosses a wall counts as much as a top-level one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from package_layout import FOLDERS, modules

PACKAGE = FOLDERS["proton_ik"]
MAX_LINES = 450

# room -> the rooms of ours it must never import. A room is a module path prefix.
FORBIDDEN = {
    "proton_ik.contract": ["proton_ik."],  # imports nothing of ours but the contract itself
    "proton_ik.dialect": ["proton_ik.lowering", "proton_ik.runtime", "proton_ik.viewer", "proton_ik.session"],
    # The switch installs the lowering's stage hook and hands it the mode: no import back.
    "proton_ik.lowering": [
        "proton_ik.runtime",
        "proton_ik.viewer",
        "proton_ik.session",
        "proton_ik.compile_mode",
    ],
    # Proton's modes are read into Mode's fields; mode.py makes the Mode: no import back.
    "proton_ik.proton_modes": ["proton_ik.mode"],
    "proton_ik.language": [
        "proton_ik.lowering",
        "proton_ik.runtime",
        "proton_ik.viewer",
        "proton_ik.session",
    ],
    "proton_ik.runtime": ["proton_ik.lowering", "proton_ik.viewer"],
    # Patches of PyTorch's internals: they follow the compile mode and touch nothing else of ours.
    "proton_ik.torch_compile": [
        "proton_ik.lowering",
        "proton_ik.runtime",
        "proton_ik.viewer",
        "proton_ik.session",
    ],
    # Triton's surfaces, as Triton's launcher, and the recorder's direct entry (ALLOWED)
    "proton_ik.inductor_static": ["proton_ik."],
    "proton_ik.inductor_source": ["proton_ik."],  # Inductor's source text: nothing else of ours
    "proton_ik.after_import": ["proton_ik."],
    "proton_ik.session_files": ["proton_ik."],  # file names and claims: nothing else of ours
    "proton_ik.native": ["proton_ik."],  # builds and loads the C parts: nothing else of ours
    "proton_ik.viewer": ["proton_ik.lowering", "proton_ik.runtime", "proton_ik.session", "proton_ik.dialect"],
}
# The crossings that do work rather than fetch a constant: calibration decodes its own records
# with the viewer's decoder; the recording static launcher calls the session's recorder directly
# while nothing else is behind Triton's launch surfaces (``hooks.direct_recorder``).
ALLOWED = {
    ("proton_ik.runtime.calibrate", "proton_ik.viewer"),
    ("proton_ik.inductor_static", "proton_ik.runtime.hooks"),
}


# every module of the four folders (proton_ik/, dialect/, lowering/, viewer/), by import name
NAMES = {path: name for name, path in modules().items()}


def _module_name(path: Path) -> str:
    return NAMES[path]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


MODULES = sorted(NAMES, key=_module_name)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_imports_follow_the_data_flow(path: Path) -> None:
    name = _module_name(path)
    for room, walls in FORBIDDEN.items():
        if name != room and not name.startswith(room + "."):
            continue
        for imported in _imports(path):
            for wall in walls:
                crosses = imported.startswith(wall) and not imported.startswith(room)
                if crosses and not any(name == a and imported.startswith(b) for a, b in ALLOWED):
                    pytest.fail(f"{name} imports {imported}: {room} must not import {wall}")


NAMEDTUPLE_API = {"_make", "_replace", "_fields", "_asdict", "_field_defaults"}  # public, underscored


def _private_imports(path: Path) -> list[str]:
    """``module._name`` for each underscore name the module takes from another of ours: imported
    by name, or read as an attribute of a module of ours that it imported."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found, modules = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("proton_ik")):
            found += [f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_")]
            modules |= {alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            modules |= {alias.asname: alias.name for alias in node.names if alias.asname}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and node.attr not in NAMEDTUPLE_API
        ):
            found.append(f"{modules[node.value.id]}.{node.attr}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_no_module_imports_another_modules_private_names(path: Path) -> None:
    """What a module shares has a public name; an underscore name stays inside its module."""
    private = _private_imports(path)
    assert not private, (
        f"{_module_name(path)} imports {', '.join(private)}: give what is shared a public name, "
        "or move it to the module that uses it"
    )


# The viewer's packages by concept (perfetto, chrome, readback, diff, ...): outside each, only
# what its __init__ exports is used.
VIEWER_PACKAGES = sorted(
    name
    for path, name in NAMES.items()
    if path.name == "__init__.py" and name.startswith("proton_ik.viewer.")
)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_a_viewer_package_is_used_through_its_surface(path: Path) -> None:
    name = _module_name(path)
    modules = set(NAMES.values())
    for package in VIEWER_PACKAGES:
        if name != package and not name.startswith(package + "."):
            inside = sorted(m for m in _imports(path) if m.startswith(package + ".") and m in modules)
            assert not inside, f"{name} imports {', '.join(inside)}: use what {package} exports"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_rooms_stay_small(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, (
        f"{_module_name(path)} has {lines} lines; split it by job (at most {MAX_LINES})"
    )


def test_the_rules_see_imports() -> None:
    """The checker itself: it finds a lazy import inside a function and a relative import."""
    language = _imports(PACKAGE / "language.py")
    assert any(m.startswith("triton") for m in language)
    calibrate = _imports(PACKAGE / "runtime" / "calibrate.py")
    assert any(m.startswith("proton_ik.viewer") for m in calibrate)


def test_the_private_rule_sees_private_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from __future__ import annotations\nfrom numpy import _private\n"
        "from proton_ik.viewer.decode.buffers import _hidden, shown\n"
        "from proton_ik.viewer.pairing import events\n"
        "import proton_ik.viewer.tables.table as table\n"
        "def f():\n    from .sibling import _lazy\n    return events._starts, table.__name__, shown._x\n"
    )
    assert sorted(_private_imports(source)) == [
        "proton_ik.viewer.decode.buffers._hidden",
        "proton_ik.viewer.decode.buffers.shown._x",
        "proton_ik.viewer.pairing.events._starts",
        "sibling._lazy",
    ]


def test_the_surface_rule_knows_the_viewers_packages() -> None:
    names = {package.rpartition(".")[2] for package in VIEWER_PACKAGES}
    assert {
        "session_file",
        "decode",
        "pairing",
        "arrays",
        "tables",
        "summary",
        "tracks",
        "render",
        "ranks",
        "perfetto",
        "chrome",
        "readback",
        "diff",
        "proton",
        "torch_profiler",
        "report",
    } <= names


def test_the_viewers_top_level_holds_only_its_entry_points() -> None:
    """Each concept of the viewer is a package, found by its folder's name: beside the viewer's
    ``__init__`` sits only ``trace`` (``load``: a session's tables)."""
    viewer = FOLDERS["proton_ik.viewer"]
    assert sorted(path.name for path in viewer.glob("*.py")) == ["__init__.py", "trace.py"]


def test_the_rules_see_every_folder() -> None:
    """The mapped folders are read under their import names, each module once."""
    names = set(NAMES.values())
    assert len(names) == len(NAMES)
    for package, folder in FOLDERS.items():
        assert package in names and NAMES[folder / "__init__.py"] == package
    assert "proton_ik.viewer.report" in names and "proton_ik.lowering.triton_hook" in names
