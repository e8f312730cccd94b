"""A TTGIR override written for triton.profiler is refused with a message that says what to do,
before Triton's parser fails on its proton.record ops."""

from __future__ import annotations

import pytest
from triton import knobs

import proton_ik
from proton_ik.lowering.errors import ProtonOverrideError
from proton_ik.mode import Mode

PROTON_TTGIR = 'tt.func public @add() {\n  proton.record start "load"\n  tt.return\n}\n'


class _Options:
    instrumentation_mode = ""
    ir_override = None
    num_warps = 4


def _run_hook(options) -> None:
    with proton_ik.instrumented(Mode()):
        knobs.runtime.add_stages_inspection_hook(None, {"ptx": lambda src, metadata: src}, options, None, 90)


def test_an_override_folder_with_proton_records_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "override" / "somehash"
    folder.mkdir(parents=True)
    (folder / "add.ttgir").write_text(PROTON_TTGIR)
    monkeypatch.setattr(knobs.compilation, "override", True)
    monkeypatch.setattr(knobs.cache, "override_dir", str(tmp_path / "override"))
    with pytest.raises(
        ProtonOverrideError, match=r"add\.ttgir records with proton\.record ops.*pl\.enter_scope"
    ):
        _run_hook(_Options())


def test_an_autotune_ir_override_with_proton_records_is_refused(tmp_path):
    path = tmp_path / "add.ttgir"
    path.write_text(PROTON_TTGIR)
    options = _Options()
    options.ir_override = str(path)
    with pytest.raises(ProtonOverrideError, match=r"triton\.profiler"):
        _run_hook(options)


def test_an_override_without_proton_records_compiles_on(tmp_path, monkeypatch):
    folder = tmp_path / "override"
    folder.mkdir()
    (folder / "add.ttgir").write_text(PROTON_TTGIR.replace("proton.record", "// nothing"))
    monkeypatch.setattr(knobs.compilation, "override", True)
    monkeypatch.setattr(knobs.cache, "override_dir", str(folder))
    _run_hook(_Options())  # no error: the stage hook wraps the stages as usual
