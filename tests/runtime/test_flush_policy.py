"""start(flush_every=N) and flush_seconds=S: the launch-exit hook has the drains write what is
queued that often, without waiting for it (``runtime.flush_policy.FlushPolicy``)."""

from __future__ import annotations

import pytest

import proton_ik
from proton_ik.contract.layout import BufferLayout
from proton_ik.contract.metadata import KernelMetadata
from proton_ik.runtime import flush_policy, hooks, loaded
from proton_ik.runtime.flush_policy import FlushPolicy

pytest.importorskip("torch")


class _Drain:
    device = 0

    def __init__(self):
        self.submitted, self.flushes = 0, []

    def event(self):
        return None

    def submit(self, launch, stream):
        self.submitted += 1

    def flush_soon(self):
        self.flushes.append(self.submitted)


def _launches(recorder: hooks.LaunchRecorder, drain: _Drain, count: int) -> None:
    """``count`` launches through the exit hook, as the allocator leaves them."""
    metadata = KernelMetadata(layout=BufferLayout(units=4, capacity=4), num_warps=4)
    kernel = loaded.KernelInfo("k", 4, metadata.layout.cta_bytes, metadata, metadata.to_dict())
    for _ in range(count):
        chunk = object()
        recorder._launching.pending = (kernel, 1, kernel.cta_bytes, 0, drain, chunk, None)
        recorder.exit(None)


def test_every_nth_launch_has_the_drains_write_what_is_queued():
    drain = _Drain()
    recorder = hooks.LaunchRecorder(1 << 20, lambda *args: None, flush=FlushPolicy(launches=3))
    recorder.recording, recorder.drains = True, {0: drain}
    _launches(recorder, drain, 10)
    assert drain.submitted == 10 and drain.flushes == [3, 6, 9]


def test_a_period_in_seconds_flushes_once_it_has_passed(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(flush_policy.time, "monotonic", lambda: now[0])
    policy = FlushPolicy(seconds=5.0)
    assert not policy.due(1)
    now[0] = 105.0
    assert policy.due(2) and not policy.due(3)  # the period starts again at the flush
    assert not FlushPolicy().due(1000)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"flush_every": 0}, "flush_every=0"),
        ({"flush_seconds": -1}, "flush_seconds=-1"),
        ({"flush_every": 2.5}, "2.5"),
    ],
)
def test_bad_flush_options_say_what_to_pass(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        proton_ik.start("flushing", out_dir=tmp_path, **options)
