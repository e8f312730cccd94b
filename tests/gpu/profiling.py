"""One profiled run for the GPU tests: a session around ``launch()``, finalized whatever happens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import proton_ik


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
