"""Record counts: one launch of each suite kernel at its --quick size under a proton_ik session,
the records per warp in the trace against the exact count its scopes imply."""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np
import torch

import proton_ik
from benchmarks import kernels
from benchmarks.harness import Context, fresh, ik_session, log


def measure(ctx: Context) -> dict[str, Any]:
    """One launch of each suite kernel at its --quick size under a proton_ik session: the records
    per warp in the trace against the exact count the scopes imply."""
    results = {}
    for problem in kernels.suite(True, ctx.num_sms):
        try:
            launch = problem.make_launch()
            fn = fresh(problem.fn)
            ik_session(f"counts_{problem.name}", ctx.scratch / "counts")
            try:
                compiled = fn[launch.grid](*launch.args, **problem.options)
                torch.cuda.synchronize()
            finally:
                result = proton_ik.finalize()
            expected = problem.records_per_warp(compiled.metadata.num_warps)
            measured = np.zeros_like(expected)
            per_warp = result.events.groupby(["cta", "warp"], observed=True).size()
            for (cta, warp), count in per_warp.items():
                measured[int(cta), int(warp)] = 2 * int(count)
            capacity = compiled.metadata.proton_ik["layout"]["capacity"]
            results[problem.name] = {
                "expected_total": int(expected.sum()),
                "trace_total": int(measured.sum()),
                "decoded_records": int(result.records),
                "exact": bool((np.minimum(expected, capacity) == measured).all()),
                "same_multiset": bool(
                    (np.sort(np.minimum(expected, capacity), axis=None) == np.sort(measured, axis=None)).all()
                ),
                "expected_per_warp_max": int(expected.max()),
            }
            log(f"  counts {problem.name}: {results[problem.name]}")
            del launch
        except Exception as error:
            results[problem.name] = {"error": repr(error)[:500]}
            log(f"  counts {problem.name} FAILED: {error!r}"[:400])
            traceback.print_exc()
    return results
