"""The per-record experiments (benchmarks/record_variants.py): each variant assembles, and keeps or
drops in the SASS exactly what its name says, so that the GPU times what the table claims.

The SASS is the judge because ptxas drops a clock read whose value nothing uses: a variant that
takes the stores away must keep the clocks alive some other way, or it times an empty loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, subprocess, tempfile, triton
from pathlib import Path
from triton.backends.nvidia.compiler import get_ptxas
from benchmarks import record_variants
triton.knobs.cache.dir = tempfile.mkdtemp()
cuobjdump = Path(get_ptxas(90).path).with_name("cuobjdump")
found = {}
for name, (mode, transform) in record_variants.VARIANTS.items():
    compiled = record_variants.compile_variant(mode, transform)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"]); cubin.flush()
        sass = subprocess.run([str(cuobjdump), "-sass", cubin.name], capture_output=True, text=True, check=True).stdout
    found[name] = {
        "clock_reads": sass.count("SR_CLOCKLO"),
        "global_stores": sass.count("STG."),
        "shared_stores": sass.count("STS."),
    }
print(json.dumps(found))
"""


def test_each_variant_keeps_what_it_says() -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stderr[-4000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    singles, pairs = found["single records (pairs=off)"], found["pairs=on, layout=2"]
    # The loop's 4 scopes: 8 single records, or 4 pairs of two clock reads; the frame reads the
    # clock at the start and the end.
    assert (
        singles["clock_reads"] == pairs["clock_reads"] == found["pairs=on (default)"]["clock_reads"] == 8 + 2
    )
    assert singles["global_stores"] - pairs["global_stores"] == 4
    # the default, layout=auto, leaves this loop in layout 2: it moves no memory of its own
    assert found["pairs=on (default)"]["global_stores"] == pairs["global_stores"]
    for name in ("no store", "pairs: no store"):
        baseline = singles if name == "no store" else pairs
        assert found[name]["clock_reads"] == baseline["clock_reads"], name
        assert baseline["global_stores"] - found[name]["global_stores"] == (8 if name == "no store" else 4)
    for name in ("no clock read", "pairs: no clock read"):
        assert found[name]["clock_reads"] == 2, name
        assert (
            found[name]["global_stores"] == (singles if name == "no clock read" else pairs)["global_stores"]
        )
    assert found["shared memory"]["shared_stores"] == 8
    assert found["shared memory"]["clock_reads"] == singles["clock_reads"]
