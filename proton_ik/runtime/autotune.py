"""Autotuning inside a session: the autotuner times the plain kernel; each config it tries is
recorded once, and the user's calls are recorded.

``triton.autotune`` benchmarks each config by launching it many times. Profiled, those launches
would time the profiler (and fill the trace with benchmark runs), so while the autotuner times a
config, the session is paused: kernels compile and run plain, nothing is recorded. Before the
timing, the config's benchmark call runs once recorded (the autotuner runs it dozens of times
anyway, with its hooks restoring what it overwrites), so the trace holds one launch of each
config tried, its config marked ``autotune=benchmark``: every config's scopes side by side, as
Proton's trace names every config it ran. The config the autotuner then launches for the user is
named in each recorded launch.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from typing import Any

from triton.compiler.errors import CompileTimeAssertionFailure
from triton.runtime.autotuner import Autotuner
from triton.runtime.errors import OutOfResources, PTXASError

from proton_ik.runtime.pool import PoolTooSmall

# Why a config's recorded call may not run: it cannot compile or run (the plain timing, which
# follows, fails the same way and rules the config out), or its records need more than the pool
# (finalize lists the refused launch; the plain timing decides as it would).
_NOT_RECORDED = (OutOfResources, CompileTimeAssertionFailure, PTXASError, PoolTooSmall)
BENCHMARK = {"autotune": "benchmark"}  # what a benchmark launch's config carries


def _plain_data(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def describe_config(config: Any) -> dict[str, Any]:
    """A ``triton.Config`` as plain data: its kwargs, warps, stages and CTAs."""
    return {
        "kwargs": {str(key): _plain_data(value) for key, value in dict(config.kwargs).items()},
        "num_warps": int(config.num_warps),
        "num_stages": int(config.num_stages),
        "num_ctas": int(getattr(config, "num_ctas", 1) or 1),
    }


def _times_through_do_bench() -> bool:
    """Whether this Triton's ``Autotuner._bench`` times a config through ``self.do_bench`` (Triton
    3.4 to 3.6): the recorded call goes there. Another Triton's autotuner benchmarks all plain,
    with no config recorded, rather than risk timing a profiled kernel."""
    code = getattr(Autotuner._bench, "__code__", None)
    return code is not None and "do_bench" in code.co_names


class AutotuneFollower:
    """Wraps ``Autotuner._bench`` (one recorded call, then timed plain) and ``Autotuner.run``
    (name the chosen config)."""

    def __init__(self, plain: Callable[[], contextlib.AbstractContextManager[None]]):
        self._plain = plain
        self._running = threading.local()
        # Autotuner runs in progress, in every thread: while none is, no launch is a config's
        # (the launch path reads this attribute before it asks ``current_config``).
        self.active = 0
        self._counting = threading.Lock()
        self._saved: dict[str, Any] = {}

    def current_config(self) -> dict[str, Any] | None:
        """The config the innermost running autotuner launches now, or None."""
        benchmarked = getattr(self._running, "benchmarked", None)
        if benchmarked is not None:
            return {**describe_config(benchmarked), **BENCHMARK}
        stack = getattr(self._running, "stack", None)
        if not stack:
            return None
        config = getattr(stack[-1], "best_config", None)
        return None if config is None else describe_config(config)

    def install(self) -> None:
        follower = self
        bench, run = Autotuner._bench, Autotuner.run
        self._saved = {"_bench": Autotuner.__dict__["_bench"], "run": Autotuner.__dict__["run"]}

        def plain_bench(tuner, *args, **kwargs):
            with follower._plain():
                return bench(tuner, *args, **kwargs)

        def recorded_once_then_plain(tuner, *args, config, **kwargs):
            # The autotuner's timer (a cached property) is replaced on this tuner for this config.
            cached = tuner.__dict__.get("do_bench")
            timer = tuner.do_bench

            def time_plain(kernel_call, quantiles):
                follower._record_once(kernel_call, config)
                with follower._plain():
                    return timer(kernel_call, quantiles=quantiles)

            tuner.__dict__["do_bench"] = time_plain
            try:
                return bench(tuner, *args, config=config, **kwargs)
            finally:
                if cached is None:
                    del tuner.__dict__["do_bench"]
                else:
                    tuner.__dict__["do_bench"] = cached

        def named_run(tuner, *args, **kwargs):
            stack = follower._running.__dict__.setdefault("stack", [])
            stack.append(tuner)
            follower._count(1)
            try:
                return run(tuner, *args, **kwargs)
            finally:
                follower._count(-1)
                stack.pop()

        Autotuner._bench = recorded_once_then_plain if _times_through_do_bench() else plain_bench
        Autotuner.run = named_run

    def _count(self, change: int) -> None:
        with self._counting:
            self.active += change

    def _record_once(self, kernel_call: Callable[[], None], config: Any) -> None:
        """One benchmark call of ``config``, recorded and named as the autotuner's."""
        self._running.benchmarked = config
        self._count(1)
        try:
            kernel_call()
        except _NOT_RECORDED:
            pass
        finally:
            self._count(-1)
            self._running.benchmarked = None

    def uninstall(self) -> None:
        for name, original in self._saved.items():
            setattr(Autotuner, name, original)
        self._saved = {}
