"""One timeline with torch.profiler, on the GPU (issue 27): a session inside
``torch.profiler.profile`` around steps of a compiled function and a scoped kernel of 10 us to
10 ms; every launch matched to the kernel CUPTI recorded, within 2 us at the median."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))


def test_every_launch_lines_up_with_its_cupti_kernel(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import capture_torch_profiler

    found = capture_torch_profiler.capture(tmp_path)
    steps = 3
    said = {key: found[key] for key in ("launches", "matched", "unmatched", "streams", "errors")}
    assert found["launches"] == steps * (1 + len(capture_torch_profiler.SPINS)) + 2, said
    assert found["matched"] == found["launches"] and found["unmatched"] == [], found["unmatched_detail"]
    assert len(found["streams"]) == 2 and len(set(found["streams"].values())) == 2, said
    errors = found["errors"]
    assert errors["kernels"] >= steps * 3, said  # the 100 us, 1 ms and 10 ms launches at least
    assert errors["begin_median_ns"] < 2_000 and errors["end_median_ns"] < 2_000, said
