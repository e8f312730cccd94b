"""The compile-time switch: one mode at a time, blocks that nest and restore, and a language that
reads it without loading the lowering."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from triton import knobs

from proton_ik import compile_mode
from proton_ik.mode import Mode

OUTER = Mode(capacity=64)
INNER = Mode(granularity="cta", capacity=16)


def _state() -> tuple[Mode | None, str]:
    return compile_mode.active_mode(), knobs.compilation.instrumentation_mode


def test_blocks_nest_and_each_restores_the_mode_it_found():
    hook_before = knobs.runtime.add_stages_inspection_hook
    with compile_mode.compiling(OUTER):
        outer_hook = knobs.runtime.add_stages_inspection_hook
        assert _state() == (OUTER, OUTER.knob)
        with compile_mode.compiling(INNER):
            assert _state() == (INNER, INNER.knob)
            assert knobs.runtime.add_stages_inspection_hook is outer_hook  # installed once
            with compile_mode.compiling(None):
                assert _state() == (None, "")
                assert knobs.runtime.add_stages_inspection_hook is hook_before
            assert _state() == (INNER, INNER.knob)
        assert _state() == (OUTER, OUTER.knob)
    assert _state() == (None, "")
    assert knobs.runtime.add_stages_inspection_hook is hook_before


def test_a_block_that_raises_restores_the_mode_and_the_hook():
    hook_before = knobs.runtime.add_stages_inspection_hook
    with compile_mode.compiling(OUTER):
        with pytest.raises(RuntimeError, match="ptxas failed"), compile_mode.compiling(INNER):
            raise RuntimeError("ptxas failed")
        assert _state() == (OUTER, OUTER.knob)
    with pytest.raises(KeyError), compile_mode.compiling(OUTER):
        raise KeyError("compile failed")
    assert _state() == (None, "")
    assert knobs.runtime.add_stages_inspection_hook is hook_before


def test_set_mode_returns_the_mode_it_replaces():
    assert compile_mode.set_mode(OUTER) is None
    try:
        assert compile_mode.set_mode(INNER) is OUTER
    finally:
        assert compile_mode.set_mode(None) is INNER
    assert compile_mode.set_mode(None) is None  # plain twice: nothing to remove


def test_the_mode_is_per_process_not_per_thread():
    seen: list[Mode | None] = []
    with compile_mode.compiling(OUTER):
        thread = threading.Thread(target=lambda: seen.append(compile_mode.active_mode()))
        thread.start()
        thread.join()
    assert seen == [OUTER]


def test_the_language_reads_the_switch_without_loading_the_lowering():
    """``import proton_ik.language`` (and the package it sits in) loads the switch and the marker
    dialect, which is xDSL, but not the lowering: that loads when a mode is first set."""
    script = (
        "import sys, proton_ik.language\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('proton_ik.'))\n"
        "assert 'proton_ik.compile_mode' in loaded, loaded\n"
        "assert not any(m.startswith('proton_ik.lowering') for m in loaded), loaded\n"
        "from proton_ik import compile_mode\n"
        "from proton_ik.mode import Mode\n"
        "compile_mode.set_mode(Mode())\n"
        "assert 'proton_ik.lowering.triton_hook' in sys.modules\n"
        "compile_mode.set_mode(None)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
