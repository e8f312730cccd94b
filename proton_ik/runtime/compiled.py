"""The launch path's common case in C (``launch_path/``), built at run time (``proton_ik.native``).
Where it cannot be built, or ``PROTON_IK_COMPILED=0`` asks for it, the Python in ``pool``,
``hooks`` and ``drain`` does everything, as it does every case the C hands back to it;
``why_python()`` says why.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import ModuleType

from proton_ik import native

SOURCES = Path(__file__).with_name("launch_path")
MODULE_NAME = "proton_ik_launch_path"


_built = native.part(SOURCES, MODULE_NAME)


def launch_path() -> ModuleType | None:
    """The compiled module (``Ring``, ``Route``, ``LaunchPath``), or None: use the Python."""
    return _built()[0]


def why_python() -> str | None:
    """Why launches take the Python path only; None when the C one is used."""
    return _built()[1]


def described() -> str:
    """The launch path a session's launches take, as its session info records it."""
    why = why_python()
    return "C" if why is None else f"Python ({why})"


def warn_if_not_built() -> None:
    """Say so where the C launch path was wanted and could not be had: every launch then costs
    some microseconds more (nothing is said where ``PROTON_IK_COMPILED=0`` asked for it)."""
    why = why_python()
    if why is not None and native.SWITCH not in why:
        warnings.warn(
            f"proton_ik: launches take the Python launch path, which adds several microseconds "
            f"to each: {why}. Profiles stay exact; set {native.SWITCH}=0 to choose it and silence "
            "this",
            stacklevel=4,
        )
