"""One profiled run for the GPU tests: a session around ``launch()``, finalized whatever happens."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import proton_ik

HERE = Path(__file__).parent


def profiled(tmp_path, name: str, launch: Callable[[], Any], **options) -> tuple[Any, proton_ik.Result]:
    """``launch()``'s output and the finalized session ``name`` (written under ``tmp_path``;
    ``options`` for ``proton_ik.start``), after a synchronize."""
    import torch

    proton_ik.start(name, out_dir=tmp_path, **options)
    try:
        output = launch()
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    return output, result


def memcheck_clean(target: str, done: str, env: dict[str, str] | None = None, timeout: int = 600) -> None:
    """Run ``target`` (a script beside this file) under compute-sanitizer memcheck, with no
    caching allocator, and assert no error was found and the script printed ``done``; skip
    where compute-sanitizer is not installed."""
    sanitizer = "compute-sanitizer"
    if subprocess.run(["which", sanitizer], capture_output=True).returncode != 0:
        pytest.skip("compute-sanitizer is not installed")
    run = subprocess.run(
        [sanitizer, "--tool", "memcheck", "--error-exitcode", "3", sys.executable, str(HERE / target)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", **(env or {})),
        timeout=timeout,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "ERROR SUMMARY: 0 errors" in run.stdout + run.stderr
    assert done in run.stdout
