"""Buffers sized from the code (issue 7): what the default mode records, and what it costs.

    python -m benchmarks.run --only buffers [--quick]

Eight measurements, each a function in a module of this package that returns plain data for
results.json (``measure`` runs them all; a failure in one is recorded and the others go on):

1. ``default_mode``: ``proton_ik.start`` with no options and one launch of every suite kernel
   and of ``four_scopes`` (16384 CTAs x 8 warps, four straight-line scopes): the capacity the
   compiler chose, the records in the trace against the count the scopes give, the outputs.
2. ``device_bytes``: from those launches, for the kernels whose bound is known, the device
   bytes a launch takes against the headers and entries it wrote.
3. ``host_per_launch``: a loop of launches of ``short_add``, each followed by a synchronize,
   plain, under proton_ik and under Triton's Proton, in interleaved rounds: microseconds added.
4. ``end_to_end``: 100 launches of ``four_scopes`` with the hooks on, one synchronize at the
   end, against plain launches and against a pinned copy of the bytes the launches wrote.
5. ``finalize_rate``: records per second of ``proton_ik.finalize()`` for a session of about
   26M records (.pik and .pftrace), and for issue 24's shapes: 5 launches of 1M records, 20,000
   launches of 128 records, the 5 launches on one core.
6. ``graph_replays`` and ``autotune_choice``: a CUDA graph replayed 10 times, and an autotuned
   kernel, each checked against what should have been recorded.
7. ``launch_only``: loops of launches with pointer and with TensorDescriptor arguments, in
   straight-line kernels and in kernels sized at launch, one synchronize after each loop, plain,
   under proton_ik (with a pool the loop does not fill) and under Proton: microseconds added.
8. ``sustained``: loops long enough that the drain runs during them, plain and under proton_ik
   with its default pool: microseconds added, and the drain's rate.

The targets are judged in ``report/targets.py`` from these numbers; ``report/buffers.py``
writes the tables. Private runtime state is read in one place, ``sessions.IkRun``.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable
from typing import Any

import torch

import proton_ik
from benchmarks.buffers.default_mode import default_mode, device_bytes
from benchmarks.buffers.end_to_end import end_to_end
from benchmarks.buffers.finalize import finalize_rate
from benchmarks.buffers.host import host_per_launch
from benchmarks.buffers.launch_only import launch_only
from benchmarks.buffers.real_programs import autotune_choice, graph_replays
from benchmarks.buffers.sessions import end_leftover_session
from benchmarks.buffers.settings import Settings
from benchmarks.buffers.sustained import sustained
from benchmarks.harness import Context, log


def measure(ctx: Context) -> dict[str, Any]:
    """Every measurement, in order; each failure is recorded as {"error": ...}."""
    settings = Settings(ctx.args.quick, ctx.num_sms, ctx.scratch / "buffers", ctx.rounds, log)
    steps: dict[str, Callable[[Settings], dict[str, Any]]] = {
        "default_mode": default_mode,
        "host": host_per_launch,
        "launch_only": launch_only,
        "sustained": sustained,
        "end_to_end": end_to_end,
        "finalize": finalize_rate,
        "graph": graph_replays,
        "autotune": autotune_choice,
    }
    results: dict[str, Any] = {
        "default_mode_string": str(proton_ik.Mode()),
        "pool_bytes": proton_ik.DEFAULT_POOL_BYTES,
        "quick": settings.quick,
    }
    for name, step in steps.items():
        settings.log(f"  buffers: {name}")
        try:
            results[name] = step(settings)
        except Exception as error:
            traceback.print_exc()
            results[name] = {"error": f"{error!r}"[:1000]}
            settings.log(f"  buffers: {name} FAILED: {error!r}"[:400])
        finally:
            end_leftover_session()
            with contextlib.suppress(Exception):  # after a device fault the next step reports it
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        if name == "default_mode":
            results["device_bytes"] = device_bytes(results["default_mode"])
    return results
