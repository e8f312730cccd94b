"""The launch path's common case in C (``launch_path.c``), built once per source and Python with
Triton's own C build: every machine that launches Triton kernels has the compiler Triton's
launchers need. Where it cannot be built, or ``PROTON_IK_LAUNCH_PATH=python`` asks for it, the
Python in ``pool``, ``hooks`` and ``drain`` does everything, as it does every case the C hands
back to it; ``why_python()`` says why.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import warnings
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("launch_path.c")
MODULE_NAME = "proton_ik_launch_path"
CHOICE_VARIABLE = "PROTON_IK_LAUNCH_PATH"  # "python": the Python launch path, not the C one


@functools.lru_cache(maxsize=1)
def _built() -> tuple[ModuleType | None, str | None]:
    if os.environ.get(CHOICE_VARIABLE, "").strip().lower() == "python":
        return None, f"{CHOICE_VARIABLE}=python"
    if sysconfig.get_config_var("Py_GIL_DISABLED") or not getattr(sys, "_is_gil_enabled", lambda: True)():
        return None, "this Python runs without the GIL, which the C launch path relies on"
    try:
        from triton.runtime.build import compile_module_from_src

        return compile_module_from_src(SOURCE.read_text(), MODULE_NAME), None
    except Exception as error:  # no compiler, no Python headers, Triton's build moved: run in Python
        return None, f"the C launch path could not be built ({type(error).__name__}: {error})"


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
    some microseconds more (nothing is said where ``PROTON_IK_LAUNCH_PATH=python`` asked for it)."""
    why = why_python()
    if why is not None and CHOICE_VARIABLE not in why:
        warnings.warn(
            f"proton_ik: launches take the Python launch path, which adds several microseconds "
            f"to each: {why}. Profiles stay exact; set {CHOICE_VARIABLE}=python to choose it and "
            "silence this",
            stacklevel=4,
        )
