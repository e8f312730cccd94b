"""The autotune follower, without a GPU: benchmarks run inside the session's plain block, and
the config the autotuner launches is named as plain data."""

from __future__ import annotations

import contextlib

import triton
from triton.runtime.autotuner import Autotuner

from proton_ik.runtime.autotune import AutotuneFollower, describe_config


def test_a_config_is_described_as_plain_data():
    config = triton.Config({"BLOCK": 64, "EVEN": True, "dtype": object()}, num_warps=2, num_stages=3)
    described = describe_config(config)
    assert described["kwargs"]["BLOCK"] == 64 and described["kwargs"]["EVEN"] is True
    assert described["kwargs"]["dtype"].startswith("<object")  # not JSON: its repr
    assert (described["num_warps"], described["num_stages"], described["num_ctas"]) == (2, 3, 1)


class _Tuner:
    """Just enough of an Autotuner for the wrapped methods."""

    def __init__(self, config):
        self.best_config = config


def test_benchmarks_run_plain_and_the_launched_config_is_named(monkeypatch):
    log: list[object] = []

    @contextlib.contextmanager
    def plain():
        log.append("plain")
        yield
        log.append("profiled")

    follower = AutotuneFollower(plain)
    chosen = triton.Config({"BLOCK": 1024}, num_warps=4)

    def bench(tuner, *args, config, **kwargs):
        log.append(("bench", config.kwargs["BLOCK"], follower.current_config()))
        return [1.0, 1.0, 1.0]

    def run(tuner, *args, **kwargs):
        Autotuner._bench(tuner, config=triton.Config({"BLOCK": 64}))
        log.append(("launch", follower.current_config()))
        return "ran"

    monkeypatch.setattr(Autotuner, "_bench", bench)
    monkeypatch.setattr(Autotuner, "run", run)
    follower.install()
    try:
        tuner = _Tuner(chosen)
        assert Autotuner.run(tuner) == "ran"
        assert follower.current_config() is None  # outside the autotuner's run
    finally:
        follower.uninstall()
    assert Autotuner._bench is bench and Autotuner.run is run
    assert log[0] == "plain" and log[2] == "profiled"
    assert log[1][:2] == ("bench", 64)
    assert log[3] == ("launch", describe_config(chosen))
