"""The parts of proton_ik written in C, built at run time, each one extension module: the
launch path's common case (``runtime/launch_path/``) and the Perfetto trace's event stream
(``viewer/perfetto/packets/``).

Each is compiled once per source, Python and machine, with the C compiler that Triton's own
launchers need (``CC``, else gcc, clang or cc) and the Python headers, into a cache folder
(``PROTON_IK_CACHE_DIR``, else ``$XDG_CACHE_HOME/proton_ik``, else ``~/.cache/proton_ik``; the
temporary folder where that cannot be written), and loaded from there afterwards. Nothing is built at install. Every C part has its Python twin, the
reference, which runs where the C cannot be built or where ``PROTON_IK_COMPILED=0`` asks for it.
The C parts rely on the GIL: none is built for a Python without one.

Not Triton's ``triton.runtime.build.compile_module_from_src``, which the launch path first used:
that is Triton's internal, builds a single source, and keeps what it builds in Triton's cache,
which programs and tests move and clear for their own kernels.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

SWITCH = "PROTON_IK_COMPILED"  # "0": every part in Python
CACHE_VARIABLE = "PROTON_IK_CACHE_DIR"


def build(sources: Path, name: str) -> tuple[ModuleType | None, str | None]:
    """The C extension named ``name`` built from the ``.c`` and ``.h`` files of the folder
    ``sources``, or None and why not."""
    if os.environ.get(SWITCH, "").strip() == "0":
        return None, f"{SWITCH}=0"
    if sysconfig.get_config_var("Py_GIL_DISABLED") or not getattr(sys, "_is_gil_enabled", lambda: True)():
        return None, "this Python runs without the GIL, which the C parts rely on"
    try:
        return _load(_built_file(sources, name), name), None
    except Exception as error:  # no compiler, no Python headers, no writable cache: Python instead
        return None, f"{sources.name} could not be built ({type(error).__name__}: {error})"


def part(sources: Path, name: str) -> Callable[[], tuple[ModuleType | None, str | None]]:
    """``build(sources, name)``, run at the first call and remembered: a C part is built, or
    loaded from the cache, only where it is used."""
    return functools.lru_cache(maxsize=1)(lambda: build(sources, name))


def cache_dir() -> Path:
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "proton_ik"


def _temporary_cache() -> Path:
    user = os.getuid() if hasattr(os, "getuid") else os.getlogin()
    return Path(tempfile.gettempdir()) / f"proton_ik-{user}"


def _built_file(sources: Path, name: str) -> Path:
    files = sorted(path for path in sources.iterdir() if path.suffix in (".c", ".h"))
    texts = {path.name: path.read_bytes() for path in files}
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key = hashlib.sha256(suffix.encode() + sys.version.encode() + platform.machine().encode())
    for file_name, text in texts.items():
        key.update(b"\0" + file_name.encode() + b"\0" + text)
    built = cache_dir() / key.hexdigest()[:32] / f"{name}{suffix}"
    if built.exists():
        return built
    try:
        built.parent.mkdir(parents=True, exist_ok=True)
    except OSError:  # a home one cannot write (a batch job's): the machine's temporary folder
        built = _temporary_cache() / key.hexdigest()[:32] / f"{name}{suffix}"
        if built.exists():
            return built
        built.parent.mkdir(parents=True, exist_ok=True)
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang") or shutil.which("cc")
    if compiler is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc)")
    scheme = sysconfig.get_default_scheme()
    # Debian's Python names its own scheme; its headers sit where the standard one says.
    include = sysconfig.get_paths(scheme="posix_prefix" if scheme == "posix_local" else scheme)["include"]
    with tempfile.TemporaryDirectory(dir=built.parent) as scratch:
        for file_name, text in texts.items():
            (Path(scratch) / file_name).write_bytes(text)
        made = Path(scratch) / built.name
        units = [str(Path(scratch) / file_name) for file_name in texts if file_name.endswith(".c")]
        command = [*compiler.split(), *units, "-O2", "-shared", "-fPIC", "-fvisibility=hidden"]
        command += [f"-I{scratch}", f"-I{include}", "-o", str(made)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{command[0]} failed: {done.stderr.strip()[-600:]}")
        os.replace(made, built)  # whole or not at all: another process building it loses nothing
    return built


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
