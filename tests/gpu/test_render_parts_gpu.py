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


def test_finalize_draws_large_launches_in_shares_of_their_sms_as_read_whole(tmp_path, monkeypatch):
    """Two launches of 2048 CTAs x 8 warps (about 2 MiB each), on a host taken to have 8 cores,
    a part a launch and launches of 1 MiB counted large: each is drawn in 4 shares of its SMs
    (``plan.share_out``); the trace reads back as the render of the whole launches: every
    record, each SM once under its launch, the same events."""
    from proton_ik.viewer.readback import read_packets
    from proton_ik.viewer.readback.perfetto import read_perfetto
    from proton_ik.viewer.render import session as render_session_module

    monkeypatch.setattr(render_session_module, "default_workers", lambda: 8)
    monkeypatch.setattr(render_plan, "PART_BYTES", 1 << 20)  # a part a launch
    monkeypatch.setattr(render_plan, "SHARED_LAUNCH_BYTES", 1 << 20)
    monkeypatch.setattr(render_plan, "SHARE_BYTES", 256 << 10)
    n, block = 2048 * 2048, 2048
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    proton_ik.start("shares", out_dir=tmp_path)
    try:
        for _ in range(2):
            kernels.four_scopes_kernel[(n // block,)](x, out, n, BLOCK=block, num_warps=8)
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    torch.testing.assert_close(out, (x * 2.0 + 1.0) ** 2)
    assert result.records == 2 * 2048 * 8 * 8
    stored = read_session(result.paths["session"])
    sizes = render_plan.stored_sizes(stored)
    plan = render_plan.share_out(render_plan.plan_parts(sizes), sizes, 8)
    assert len(plan) == 8 and {part.shares for part in plan} == {4}
    monkeypatch.setattr(render_session_module, "default_workers", lambda: 1)  # no shares
    whole = tmp_path / "whole.pftrace"
    render_session(result.paths["session"], {"pftrace": whole})
    shared, expected = read_perfetto(result.paths["pftrace"]).trace, read_perfetto(whole).trace
    keys = ["launch", "scope", "cta", "sm", "warp", "dur_cycles", "dur_ns"]
    assert len(shared.events) == 2 * 2048 * 8 * 4
    assert (
        shared.events[keys]
        .sort_values(keys)
        .reset_index(drop=True)
        .equals(expected.events[keys].sort_values(keys).reset_index(drop=True))
    )
    launch_keys = ["launch", "events", "records", "ctas", "units"]
    assert shared.launches[launch_keys].equals(expected.launches[launch_keys])

    def sm_tracks(path):
        packets = read_packets(path)
        return sorted(
            (p.track_descriptor.parent_uuid, p.track_descriptor.name)
            for p in packets
            if p.HasField("track_descriptor") and p.track_descriptor.name.startswith("SM ")
        )

    tracks = sm_tracks(result.paths["pftrace"])
    assert len(tracks) == len(set(tracks)) == len(sm_tracks(whole))
