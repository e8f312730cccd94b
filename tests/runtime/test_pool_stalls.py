"""A full device pool holds the program back: finalize says so, with the pool that would not
have, and the result carries the seconds waited."""

from __future__ import annotations

import types
import warnings

import pytest

from proton_ik.runtime import hooks
from proton_ik.runtime.pool import RingPool
from proton_ik.runtime.pool_stalls import STALL_WARN_SECONDS, PoolStall, warn_of_stalls


def test_the_pool_counts_every_byte_it_hands_out_even_when_reused():
    pool = RingPool(1024)
    for _ in range(5):
        chunk = pool.try_allocate(300)
        assert chunk is not None
        pool.release(chunk)
    assert pool.handed_out == 5 * 384  # rounded up to the CTA alignment (128)
    assert pool.high_water == 384


def test_the_recorder_reports_only_devices_that_waited():
    recorder = hooks.LaunchRecorder(1 << 20, lambda *args: None)

    def drain(waits: int, seconds: float):
        pool = types.SimpleNamespace(capacity=512 << 20, handed_out=3 << 30)
        return types.SimpleNamespace(waits=waits, waited_seconds=seconds, pool=pool)

    recorder.drains = {1: drain(7, 0.5), 0: drain(0, 0.0)}
    (stall,) = recorder.pool_stalls()
    assert stall == PoolStall(1, 7, 0.5, 512 << 20, 3 << 30)


def test_a_stall_is_said_once_with_the_pool_that_would_have_held_everything():
    stalls = [
        PoolStall(0, 120, 1.5, 512 << 20, (5 << 30) + 1),
        PoolStall(1, 3, 0.25, 1 << 30, 1 << 30),
    ]
    with pytest.warns(UserWarning) as caught:
        assert warn_of_stalls(stalls) == pytest.approx(1.75)
    (warning,) = caught
    text = str(warning.message)
    assert "device 0: its pool of 512 MiB filled" in text and "120 times, 1.50 s" in text
    assert "pool_bytes=8 << 30 would have held them" in text  # 5 GiB and a byte: a power of two up
    assert "device 1" in text and "pool_bytes=1 << 30" in text
    assert "profile fewer steps" in text


@pytest.mark.parametrize(
    ("needed", "typed"),
    [
        (1, "1 << 20"),
        (30 << 20, "32 << 20"),
        (512 << 20, "512 << 20"),
        ((512 << 20) + 1, "1 << 30"),
        (3 << 30, "4 << 30"),
    ],
)
def test_the_pool_suggested_is_the_next_power_of_two_as_a_user_types_it(needed, typed):
    with pytest.warns(UserWarning, match=f"pool_bytes={typed} would have held them"):
        warn_of_stalls([PoolStall(0, 1, 1.0, 1 << 20, needed)])


def test_a_wait_too_short_to_matter_goes_unsaid():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_of_stalls([PoolStall(0, 1, STALL_WARN_SECONDS / 2, 1 << 20, 1 << 20)]) > 0
        assert warn_of_stalls([]) == 0
