"""A real session's trace rendered in parts at finalize, by this CUDA process and forks of the
session's fork server (``viewer.render.parts``): the same bytes as one process's render."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import proton_ik
from proton_ik.viewer import render_session
from proton_ik.viewer.render import forkserver
from proton_ik.viewer.render import parts as render_parts
from proton_ik.viewer.render import plan as render_plan
from proton_ik.viewer.session_file import read_session

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
import kernels  # noqa: E402


def test_finalize_renders_its_parts_here_and_on_forks_as_one_process_would(tmp_path, monkeypatch):
    monkeypatch.setattr(render_plan, "PART_BYTES", 64 << 10)  # a few launches a part
    monkeypatch.setattr(render_plan, "LAUNCH_BYTES", 0)
    for module in (forkserver, render_parts):  # a fork server and 4 workers, whatever the host
        monkeypatch.setattr(module, "default_workers", lambda: 4)
    n, block = 64 * 512, 512
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    proton_ik.start("parts", out_dir=tmp_path)
    try:
        session = proton_ik._session  # private: the running session, to see its fork server
        assert session is not None and session._fork_server is not None
        server = session._fork_server
        for _ in range(60):
            kernels.four_scopes_kernel[(64,)](x, out, n, BLOCK=block, num_warps=4)
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    assert not server.alive  # ended with the render
    assert result.launches == 60
    stored = read_session(result.paths["session"])
    assert len(render_plan.plan_parts(render_plan.stored_sizes(stored))) > 4
    render_session(result.paths["session"], {"pftrace": tmp_path / "one.pftrace"}, workers=1)
    assert Path(result.paths["pftrace"]).read_bytes() == (tmp_path / "one.pftrace").read_bytes()
