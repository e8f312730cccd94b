"""Reading sessions needs no GPU stack: ``import proton_ik.viewer`` (on a laptop, to open a
colleague's capture) imports neither Triton nor torch."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_viewer_imports_neither_triton_nor_torch():
    probe = (
        "import json, sys, proton_ik.viewer, proton_ik.viewer.report;"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'triton', 'torch'})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
