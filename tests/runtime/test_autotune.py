"""The autotune follower, without a GPU: each config's benchmark call runs once recorded and is
then timed inside the session's plain block, and the config the autotuner launches is named as
plain data."""

from __future__ import annotations

import contextlib

import pytest
import triton
from triton.runtime.autotuner import Autotuner
from triton.runtime.errors import OutOfResources

from proton_ik.runtime.autotune import BENCHMARK, AutotuneFollower, describe_config
from proton_ik.runtime.pool import PoolTooSmall


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


def _logged_plain(log: list[object]):
    """The session's plain block, as a log of its entries and exits."""

    @contextlib.contextmanager
    def plain():
        log.append("plain")
        yield
        log.append("profiled")

    return plain


def test_benchmarks_run_plain_and_the_launched_config_is_named(monkeypatch):
    log: list[object] = []

    follower = AutotuneFollower(_logged_plain(log))
    chosen = triton.Config({"BLOCK": 1024}, num_warps=4)

    def bench(tuner, *args, config, **kwargs):
        log.append(("bench", config.kwargs["BLOCK"], follower.current_config()))
        return [1.0, 1.0, 1.0]

    def run(tuner, *args, **kwargs):
        Autotuner._bench(tuner, config=triton.Config({"BLOCK": 64}))
        log.append(("launch", follower.current_config(), follower.active))
        return "ran"

    monkeypatch.setattr(Autotuner, "_bench", bench)
    monkeypatch.setattr(Autotuner, "run", run)
    follower.install()
    try:
        tuner = _Tuner(chosen)
        assert Autotuner.run(tuner) == "ran"
        assert follower.current_config() is None  # outside the autotuner's run
        assert follower.active == 0  # the launch path then asks nothing
    finally:
        follower.uninstall()
    assert Autotuner._bench is bench and Autotuner.run is run
    assert log[0] == "plain" and log[2] == "profiled"
    assert log[1][:2] == ("bench", 64)
    assert log[3] == ("launch", describe_config(chosen), 1)


class _TimedTuner(_Tuner):
    """A tuner whose timer logs what it times."""

    def __init__(self, config, log):
        super().__init__(config)
        self.log = log

    def do_bench(self, kernel_call, quantiles):
        self.log.append("timed")
        kernel_call()
        return [2.0, 2.0, 2.0]


def test_each_config_runs_once_recorded_then_is_timed_plain(monkeypatch):
    log: list[object] = []

    follower = AutotuneFollower(_logged_plain(log))

    def bench(tuner, *args, config, **kwargs):  # as Triton's: the config's call, through do_bench
        return tuner.do_bench(
            lambda: log.append(("call", follower.current_config(), follower.active)), quantiles=(0.5,)
        )

    monkeypatch.setattr(Autotuner, "_bench", bench)
    follower.install()
    try:
        tuner = _TimedTuner(None, log)
        tried = triton.Config({"BLOCK": 64}, num_warps=2)
        assert Autotuner._bench(tuner, config=tried) == [2.0, 2.0, 2.0]
    finally:
        follower.uninstall()
    benchmark = {**describe_config(tried), **BENCHMARK}
    # Once recorded (named as the autotuner's benchmark of that config), then timed plain.
    assert log == [("call", benchmark, 1), "plain", "timed", ("call", None, 0), "profiled"]
    assert "do_bench" not in tuner.__dict__  # the tuner's own timer is back


@pytest.mark.parametrize(
    "failure",
    [OutOfResources(300000, 232448, "shared memory"), PoolTooSmall("one launch needs more than the pool")],
    ids=["out of resources", "pool too small"],
)
def test_a_config_that_cannot_be_recorded_is_left_to_the_plain_timing(monkeypatch, failure):
    log: list[object] = []
    follower = AutotuneFollower(contextlib.nullcontext)

    def bench(tuner, *args, config, **kwargs):
        def call():
            log.append("call")
            if len(log) == 1:  # the recorded call fails; the timing's call, here, runs
                raise failure

        return tuner.do_bench(call, quantiles=(0.5,))

    monkeypatch.setattr(Autotuner, "_bench", bench)
    follower.install()
    try:
        timings = Autotuner._bench(_TimedTuner(None, log), config=triton.Config({"BLOCK": 1 << 16}))
    finally:
        follower.uninstall()
    assert timings == [2.0, 2.0, 2.0] and log == ["call", "timed", "call"]  # the timing decides
