"""The Triton stage hook, driven with a fake "ptx" stage: no compile needed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from triton import knobs

import proton_ik
from proton_ik import compile_mode
from proton_ik.contract.layout import CTA_ALIGN, BufferLayout, next_power_of_two
from proton_ik.contract.metadata import METADATA_KEY
from proton_ik.lowering import triton_hook
from proton_ik.mode import Mode, code_fingerprint, fingerprint, fingerprinted_files

sys.path.insert(0, str(Path(__file__).parents[1]))
from package_layout import FOLDERS, modules


def run_stage(kernel_ptx: str, options, metadata: dict) -> str:
    stages = {"ptx": lambda src, md: kernel_ptx}
    knobs.runtime.add_stages_inspection_hook(None, stages, options, None, None)
    return stages["ptx"]("llir", metadata)


def test_the_switch_sets_the_knob_and_installs_the_hook():
    mode = Mode(capacity=64)
    hook_before = knobs.runtime.add_stages_inspection_hook
    with compile_mode.compiling(mode):
        assert compile_mode.active_mode() is mode
        knob = knobs.compilation.instrumentation_mode
        assert knob == f"proton_ik@{code_fingerprint()}:instrumentation:granularity=warp:capacity=64:pairs=on"
        assert Mode.from_knob(knob) == mode
        assert knobs.runtime.add_stages_inspection_hook is not hook_before
    assert compile_mode.active_mode() is None
    assert knobs.compilation.instrumentation_mode == ""
    assert knobs.runtime.add_stages_inspection_hook is hook_before


def test_the_stage_instruments_and_fills_the_metadata(kernel_ptx: str):
    mode = Mode(capacity=256)
    metadata = {"num_warps": 8}
    with compile_mode.compiling(mode):
        ptx = run_stage(kernel_ptx, SimpleNamespace(instrumentation_mode="", num_warps=8), metadata)
    layout = BufferLayout(units=8, capacity=256)
    assert "// pik record" in ptx and "pik.marker" not in ptx
    assert metadata["profile_scratch_size"] == layout.cta_bytes
    assert metadata["profile_scratch_align"] == CTA_ALIGN
    # "load" is entered, the kernel may return, then "load" is exited: two single records.
    bound = 2
    found = metadata[METADATA_KEY].pop("occupancy")  # no capability here, so no SM limits
    assert found["cap"] is None and "no table of SM limits" in found["reason"]
    assert metadata[METADATA_KEY] == {
        "mode": str(mode),
        "num_warps": 8,
        "warps_per_unit": 1,
        "layout": layout.to_dict(),
        "capacity": {
            "entries": 256,
            "source": "option",
            "bound": bound,
            "reason": "capacity=256 is set in the mode",
        },
        "scopes": [{"id": 0, "name": "load", "line": 12, "file": "k.py"}],  # the PTX's .file, base name
    }


class FakeModule:
    """What Triton's "ttir" stage returns: an MLIR module whose ``str`` is its text."""

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text


def test_the_ttir_stage_hands_its_text_to_the_ptx_stage(loop_ptx: str, loop_ttir: str):
    """The PTX of a loop shows no trip count; the TTIR does. The text travels in the metadata
    from one stage to the next, and is gone when Triton writes the metadata."""
    module = FakeModule(loop_ttir)
    stages = {"ttir": lambda src, md: module, "ptx": lambda src, md: loop_ptx}
    metadata: dict = {"num_warps": 4}
    with compile_mode.compiling(Mode()):
        knobs.runtime.add_stages_inspection_hook(
            None, stages, SimpleNamespace(instrumentation_mode=""), None, None
        )
        assert stages["ttir"]("ast", metadata) is module
        stages["ptx"](module, metadata)
    assert sorted(metadata) == sorted(
        ["num_warps", "profile_scratch_size", "profile_scratch_align", METADATA_KEY]
    )
    bound = 8 * 2  # for i in range(8): "step", a pair of one slot, or two (layout=auto: 3)
    assert metadata[METADATA_KEY]["capacity"] == {
        "entries": next_power_of_two(bound),
        "source": "bound",
        "bound": bound,
        "reason": f"the loop at loop.py:12 runs 8 times: at most {bound} slots",
    }
    assert metadata["profile_scratch_size"] == BufferLayout(4, next_power_of_two(bound), version=3).cta_bytes


def test_the_options_mode_wins_over_the_installed_one(kernel_ptx: str):
    metadata: dict = {"num_warps": 4}
    with compile_mode.compiling(Mode()):
        options = SimpleNamespace(instrumentation_mode=Mode(granularity="cta", capacity=16).knob, num_warps=4)
        run_stage(kernel_ptx, options, metadata)
    assert metadata[METADATA_KEY]["layout"]["capacity"] == 16
    assert metadata[METADATA_KEY]["warps_per_unit"] == 4


def test_another_tools_instrumentation_mode_is_left_alone(kernel_ptx: str):
    metadata: dict = {"num_warps": 4}
    with compile_mode.compiling(Mode()):
        ptx = run_stage(kernel_ptx, SimpleNamespace(instrumentation_mode="consan", num_warps=4), metadata)
    assert ptx == kernel_ptx
    assert metadata == {"num_warps": 4}


def test_a_kernel_without_markers_is_untouched(kernel_ptx: str):
    plain = "\n".join(line for line in kernel_ptx.splitlines() if "pik.marker" not in line) + "\n"
    metadata: dict = {"num_warps": 4}
    with compile_mode.compiling(Mode()):
        ptx = run_stage(plain, SimpleNamespace(instrumentation_mode="", num_warps=4), metadata)
    assert ptx == plain
    assert metadata == {"num_warps": 4}


def test_an_existing_hook_is_chained_and_restored(monkeypatch: pytest.MonkeyPatch, kernel_ptx: str):
    calls = []

    def previous(backend, stages, options, language, capability):
        calls.append(sorted(stages))

    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", previous)
    with compile_mode.compiling(Mode()), compile_mode.compiling(Mode(capacity=32)):
        assert knobs.runtime.add_stages_inspection_hook is not previous
        ptx = run_stage(kernel_ptx, SimpleNamespace(instrumentation_mode="", num_warps=4), {"num_warps": 4})
        assert "and.b32 \t%pik_t, %pik_n, 31;" in ptx
    assert calls == [["ptx"]]
    assert knobs.runtime.add_stages_inspection_hook is previous


def test_install_twice_chains_once_and_uninstall_twice_is_harmless(monkeypatch: pytest.MonkeyPatch):
    def previous(backend, stages, options, language, capability):
        pass

    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", previous)
    triton_hook.install()
    installed = knobs.runtime.add_stages_inspection_hook
    triton_hook.install()
    assert knobs.runtime.add_stages_inspection_hook is installed and installed is not previous
    triton_hook.uninstall()
    triton_hook.uninstall()
    assert knobs.runtime.add_stages_inspection_hook is previous


def test_the_knob_changes_with_the_code_that_lowers(tmp_path):
    """Triton's cache key holds the knob but not the stage hook's code: a kernel compiled by an
    earlier proton_ik must not come back from the cache after the lowering changed. Run from the
    layout a wheel installs (the mapped folders under proton_ik/), whose fingerprint is the
    checkout's for the same code."""
    copy = tmp_path / "proton_ik"
    shutil.copytree(FOLDERS["proton_ik"], copy, ignore=shutil.ignore_patterns("__pycache__"))
    for package, folder in FOLDERS.items():
        if package != "proton_ik":
            shutil.copytree(
                folder, copy / package.rpartition(".")[2], ignore=shutil.ignore_patterns("__pycache__")
            )
    script = "from proton_ik.mode import Mode; print(Mode().knob)"

    def knob() -> str:
        run = subprocess.run(
            [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True
        )
        return run.stdout.strip()

    before = knob()
    assert before == Mode().knob and Mode.from_knob(before) == Mode()
    with open(copy / "lowering" / "pikgpu_to_ptx.py", "a") as source:
        source.write("\n# changed\n")
    assert knob() != before
    with open(copy / "viewer" / "trace.py", "a") as source:
        source.write("\n# the viewer does not change the binary\n")
    after_lowering = knob()
    (copy / "viewer" / "trace.py").write_text((copy / "viewer" / "trace.py").read_text() + "# again\n")
    assert knob() == after_lowering


@pytest.mark.skipif(
    Path(proton_ik.__file__).resolve().parent != FOLDERS["proton_ik"],
    reason="proton_ik is not this checkout's",
)
def test_the_fingerprint_covers_the_checkouts_folders():
    """In a checkout the dialect and the lowering sit beside proton_ik/: the fingerprint reads them
    there, and every module of the package but the viewer's."""
    covered = {path.resolve() for path in fingerprinted_files().values()}
    expected = {path for name, path in modules().items() if not name.startswith("proton_ik.viewer")}
    assert covered == expected
    assert FOLDERS["proton_ik.lowering"] / "pikgpu_to_ptx.py" in covered


def test_editing_the_lowering_changes_the_fingerprint(tmp_path):
    files = fingerprinted_files()
    name = "proton_ik/lowering/pikgpu_to_ptx.py"
    edited = tmp_path / "pikgpu_to_ptx.py"
    edited.write_bytes(files[name].read_bytes() + b"\n# changed\n")
    assert fingerprint(files) == code_fingerprint()
    assert fingerprint({**files, name: edited}) != code_fingerprint()
