"""torch.compile (issue 22): the compiled transformer block's section and its targets."""

from __future__ import annotations

from typing import Any

from benchmarks.report.format import fmt, table

STEP_RATIO_GOAL = 1.5  # a compiled step in a session, finalize excluded, against the plain step
FIRST_CALL_RATIO_GOAL = 1.5  # the first call (trace, compile, run) in a session against plain


def _ratio(compiled: dict[str, Any], key: str, label: str = "session") -> float | None:
    numbers = compiled.get(key, {})
    plain, session = numbers.get("plain"), numbers.get(label)
    return None if not plain or session is None else session / plain


GOALS = {
    "compiled_exact": "issue 22: a torch.compile'd transformer block (attention a scoped user kernel, the "
    "rest Inductor's), unscoped=kernel: every launch recorded, counts exact",
    "compiled_step": f"issue 22: a compiled step in a session at most {STEP_RATIO_GOAL}x the unprofiled "
    "step (finalize excluded)",
    "compiled_first": f"issue 22: the first compile in a session at most {FIRST_CALL_RATIO_GOAL}x the "
    "unprofiled first compile",
}


def _window_text(compiled: dict[str, Any]) -> str:
    """The step with every kernel recording into a pool that holds the timed steps' records."""
    ratio = _ratio(compiled, "step_ms", "session_window")
    if ratio is None:
        return ""
    waited = compiled["step_ms"].get("pool_wait_s", {}).get("session", 0.0)
    return (
        f"; every kernel recording into a pool of {compiled['window_pool_bytes'] >> 30} GiB that holds the "
        f"steps' records {ratio:.2f}x (the default pool's steps waited {waited:.2f} s a round for the drain)"
    )


def target_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets of issue 22, one row each."""
    compiled = results.get("compiled", {})
    if not compiled or "error" in compiled:
        why = f"failed: {compiled['error'][:200]}" if "error" in compiled else "not measured in this run"
        return [{"key": k, "goal": g, "measured": "-", "met": None, "why_not": why} for k, g in GOALS.items()]
    exact = compiled["exact"]
    problems = [
        ""
        if exact["same_kernels"]
        else f"{exact['launches']} launches recorded, CUPTI saw {exact['cupti_triton_launches']}",
        f"inexact: {', '.join(exact['inexact_kernels'])}" if exact["inexact_kernels"] else "",
        f"{exact['overwritten']:,} overwritten" if exact["overwritten"] else "",
        f"{exact['unmatched']:,} unmatched" if exact["unmatched"] else "",
        "" if compiled["outputs_equal"] else "outputs differ from the unprofiled step",
    ]
    step_ratio, first_ratio = _ratio(compiled, "step_ms"), _ratio(compiled, "first_call_s")
    steps, first = compiled["step_ms"], compiled["first_call_s"]
    proton = compiled.get("proton_integration", {})
    proton_text = (
        f"; PyTorch's Proton integration {fmt(proton['step_ms'], '.2f')} ms ({proton['step_ms'] / steps['plain']:.1f}x)"
        if proton.get("step_ms") and steps.get("plain")
        else ""
    )
    return [
        {
            "key": "compiled_exact",
            "goal": GOALS["compiled_exact"],
            "measured": f"{exact['launches']} launches of {len(exact['kernels'])} kernels, CUPTI saw "
            f"{exact['cupti_triton_launches']}; {exact['records']:,} records",
            "met": not any(problems),
            "why_not": "; ".join(p for p in problems if p),
        },
        {
            "key": "compiled_step",
            "goal": GOALS["compiled_step"],
            "measured": f"{fmt(steps['session'], '.3f')} ms against {fmt(steps['plain'], '.3f')} ms "
            f"({fmt(step_ratio, '.2f')}x); the first {compiled['short_steps']} steps of a session "
            f"{fmt(_ratio(compiled, 'step_ms', 'session_short'), '.2f')}x; the user kernel alone recording "
            f"{fmt(_ratio(compiled, 'step_ms', 'session_user'), '.2f')}x{_window_text(compiled)}{proton_text}",
            "met": step_ratio is not None and step_ratio <= STEP_RATIO_GOAL,
            "why_not": f"{fmt(step_ratio, '.2f')}x over rounds of {compiled['steps']} steps, "
            f"{fmt(_ratio(compiled, 'step_ms', 'session_short'), '.2f')}x over the first "
            f"{compiled['short_steps']}, with {exact['launches']} profiled launches a step",
        },
        {
            "key": "compiled_first",
            "goal": GOALS["compiled_first"],
            "measured": f"{fmt(first['session'], '.1f')} s against {fmt(first['plain'], '.1f')} s "
            f"({fmt(first_ratio, '.2f')}x); with Inductor's compile workers kept "
            f"{fmt(_ratio(compiled, 'first_call_s', 'session_workers'), '.2f')}x",
            "met": first_ratio is not None and first_ratio <= FIRST_CALL_RATIO_GOAL,
            "why_not": f"{fmt(first_ratio, '.2f')}x",
        },
    ]


def _row(label: str, steps: dict[str, Any], key: str, finalize: str, first: str) -> list[str]:
    plain = steps.get("plain")
    ratio = lambda ms: fmt(ms / plain, ".2f") if ms is not None and plain else "-"  # noqa: E731
    short = steps.get(f"{key}_short")
    return [
        label,
        fmt(steps.get(key), ".3f"),
        ratio(steps.get(key)),
        fmt(short, ".3f"),
        ratio(short),
        finalize,
        first,
    ]


def _shape(compiled: dict[str, Any]) -> str:
    """The block's sizes as the run recorded them (runs before they were recorded: none)."""
    block = compiled.get("block")
    if not block:
        return ""
    return f" (batch {block['batch']}, sequence {block['seq']}, width {block['width']}, {block['heads']} heads, fp16)"


def markdown(results: dict[str, Any]) -> list[str]:
    """'## torch.compile'; empty when the section did not run."""
    compiled = results.get("compiled", {})
    if not compiled or "error" in compiled:
        return []
    exact, steps, first = compiled["exact"], compiled["step_ms"], compiled["first_call_s"]
    proton = compiled.get("proton_integration", {})
    finalize = steps["finalize_s"]
    modes = compiled["session_modes"]
    rows = [
        _row("unprofiled", steps, "plain", "-", fmt(first["plain"], ".1f")),
        _row(f"proton_ik, `{modes['session_user']}` (the user kernel records)", steps, "session_user",
             fmt(finalize["session_user"], ".2f"), "-"),
        _row(f"proton_ik, `{modes['session']}` (every kernel records)", steps, "session",
             fmt(finalize["session"], ".2f"), fmt(first["session"], ".1f")),
        *(
            [_row(f"proton_ik, every kernel, `pool_bytes={compiled['window_pool_bytes'] >> 30} << 30` (the steps' "
                  "records stay on the device)", steps, "session_window", fmt(finalize["session_window"], ".2f"), "-")]
            if "session_window" in steps
            else []
        ),
        ["proton_ik, every kernel, Inductor's compile workers kept", "-", "-", "-", "-", "-",
         fmt(first.get("session_workers"), ".1f")],
        [
            "PyTorch's Proton integration (`TORCHINDUCTOR_TRITON_PROTON_PROFILING=1`)",
            fmt(proton.get("step_ms"), ".3f"),
            fmt(proton["step_ms"] / steps["plain"], ".1f") if proton.get("step_ms") else "-",
            "-", "-", "in every step", "-",
        ],
    ]  # fmt: skip
    header = [
        "profiler",
        "step ms",
        "x unprofiled",
        "first steps ms",
        "x unprofiled",
        "finalize s",
        "first call s",
    ]
    lines = [
        "",
        "## torch.compile",
        "",
        f"A transformer block{_shape(compiled)} under `torch.compile`: attention is a user kernel with scopes (benchmarks/kernels/compiled_block.py), "
        "the rest Inductor's own kernels. Step times are medians over "
        f"{compiled['rounds']} interleaved rounds of {compiled['steps']} steps, synchronized once per "
        f"round; 'first steps' are the {compiled['short_steps']} steps that open each session, whose "
        "records all stay in the device pool (later steps wait for the drain as the pool fills). The "
        "first call is trace, compile and run in a fresh process with empty Inductor and Triton caches.",
        "",
        *table(header, rows),
        "",
        f"One profiled step, every kernel recording: {exact['launches']} launches recorded "
        f"({', '.join(exact['kernels'])}); torch.profiler saw {exact['cupti_triton_launches']} launches of "
        f"Triton kernels; same kernels: {fmt(exact['same_kernels'])}; {exact['records']:,} records; outputs "
        f"bitwise equal to the unprofiled step: {fmt(compiled['outputs_equal'])}.",
    ]
    if proton.get("error"):
        lines.append(f"PyTorch's Proton integration failed: {proton['error']}")
    return lines
