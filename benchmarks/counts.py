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
            # Per (CTA, warp): records in events, plus those a ring overwrote and those left
            # without a partner, must add up to what the scopes imply.
            in_events = _per_warp(expected, result.events.groupby(["cta", "warp"], observed=True).size(), 2)
            trace = result.trace
            overwritten = _per_warp(
                expected, trace.units.groupby(["cta", "warp"], observed=True)["overwritten"].sum()
            )
            unmatched = _per_warp(expected, trace.unmatched.groupby(["cta", "warp"], observed=True).size())
            accounted = in_events + overwritten + unmatched
            results[problem.name] = {
                "expected_total": int(expected.sum()),
                "trace_total": int(in_events.sum()),
                "decoded_records": int(result.records),
                "exact": bool((accounted == expected).all()),
                # Records a ring overwrote in the default mode (counted, but not in the trace)
                "overwritten": int(overwritten.sum()),
                "same_multiset": bool((np.sort(accounted, axis=None) == np.sort(expected, axis=None)).all()),
                "expected_per_warp_max": int(expected.max()),
            }
            log(f"  counts {problem.name}: {results[problem.name]}")
            del launch
        except Exception as error:
            results[problem.name] = {"error": repr(error)[:500]}
            log(f"  counts {problem.name} FAILED: {error!r}"[:400])
            traceback.print_exc()
    return results


def _per_warp(expected: np.ndarray, counts: Any, scale: int = 1) -> np.ndarray:
    """``counts`` indexed by (CTA, warp) as an array shaped like ``expected``, times ``scale``."""
    array = np.zeros_like(expected)
    for (cta, warp), count in counts.items():
        array[int(cta), int(warp)] = scale * int(count)
    return array
