"""Where the checkout keeps each package of proton_ik: the card's top level, as pyproject.toml's
package-dir maps it (tests/test_packaging.py checks that the two agree)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# import name -> folder in the checkout
FOLDERS = {
    "proton_ik": ROOT / "proton_ik",
    "proton_ik.dialect": ROOT / "dialect",
    "proton_ik.lowering": ROOT / "lowering",
    "proton_ik.viewer": ROOT / "viewer",
}


def modules() -> dict[str, Path]:
    """Every module of the package in the checkout, by import name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def packages() -> set[str]:
    """Every package (a folder with an __init__.py) of proton_ik in the checkout."""
    return {name for name, path in modules().items() if path.name == "__init__.py"}
