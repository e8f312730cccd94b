"""Autotuning inside a session: the autotuner times the plain kernel, the user's calls are recorded.

``triton.autotune`` benchmarks each config by launching it many times. Profiled, those launches
would time the profiler (and fill the trace with benchmark runs), so while the autotuner
benchmarks, the session is paused: kernels compile and run plain, nothing is recorded. The
config the autotuner then launches for the user is named in each recorded launch.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from typing import Any

from triton.runtime.autotuner import Autotuner


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


class AutotuneFollower:
    """Wraps ``Autotuner._bench`` (run plain) and ``Autotuner.run`` (name the chosen config)."""

    def __init__(self, plain: Callable[[], contextlib.AbstractContextManager[None]]):
        self._plain = plain
        self._running = threading.local()
        self._saved: dict[str, Any] = {}

    def current_config(self) -> dict[str, Any] | None:
        """The config the innermost running autotuner launches now, or None."""
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

        def named_run(tuner, *args, **kwargs):
            stack = follower._running.__dict__.setdefault("stack", [])
            stack.append(tuner)
            try:
                return run(tuner, *args, **kwargs)
            finally:
                stack.pop()

        Autotuner._bench = plain_bench
        Autotuner.run = named_run

    def uninstall(self) -> None:
        for name, original in self._saved.items():
            setattr(Autotuner, name, original)
        self._saved = {}
