"""Reading sessions needs no GPU stack: ``import proton_ik.viewer`` (on a laptop, to open a
colleague's capture) imports neither Triton nor torch."""

from __future__ import annotations

import json
import subprocess
import sys


def _probe(code: str) -> object:
    """What a fresh interpreter prints (JSON, its last line) after running ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_viewer_imports_neither_triton_nor_torch():
    probe = (
        "import json, sys, proton_ik.viewer, proton_ik.viewer.report;"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'triton', 'torch'})))"
    )
    assert _probe(probe) == []


def test_a_render_worker_imports_only_what_its_part_needs():
    """A worker process (``render.parts``) starts by importing its modules, about a second on a
    GPU host; pandas, the summaries and the other formats' writers were half of it."""
    probe = (
        "import json, sys, proton_ik.viewer.render.parts;"
        "print(json.dumps(sorted(m for m in ('pandas', 'proton_ik.viewer.chrome', 'proton_ik.viewer.summary',"
        " 'proton_ik.viewer.trace', 'proton_ik.viewer.render.session') if m in sys.modules)))"
    )
    assert _probe(probe) == []


def test_the_viewer_exports_still_resolve_and_render_is_the_function():
    probe = (
        "import json, proton_ik.viewer as v, proton_ik.viewer.render.session;"
        "from proton_ik.viewer import Trace, load, render_session, Summary, read_session;"
        "print(json.dumps([callable(v.render), v.render.__module__, all(hasattr(v, n) for n in v.__all__),"
        " set(v.__all__) <= set(dir(v))]))"
    )
    assert _probe(probe) == [True, "proton_ik.viewer", True, True]


def test_finalize_renders_a_perfetto_trace_without_pandas(tmp_path):
    """``finalize`` renders in the user's process, which has not imported pandas: importing it
    (and the other formats' writers) there cost about a tenth of a second of every finalize."""
    out = tmp_path / "demo.pftrace"
    probe = (
        "import json, sys, importlib.resources as r;"
        "from pathlib import Path;"
        "from proton_ik import viewer;"
        "demo = r.files('proton_ik') / 'data' / 'demo.pik';"
        f"stats = viewer.render_session(Path(str(demo)), {{'pftrace': Path({str(out)!r})}}, progress=False);"
        "print(json.dumps([stats.records > 0, 'pandas' in sys.modules]))"
    )
    assert _probe(probe) == [True, False]
    assert out.stat().st_size > 0
