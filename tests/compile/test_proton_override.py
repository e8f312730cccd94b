"""Triton Proton's IR override workflow: a TTGIR dump with ``proton.record`` ops inserted (as
``insert_proton_records`` writes them), given through ``TRITON_KERNEL_OVERRIDE`` or an autotune
config's ``ir_override``, compiles instrumented under proton_ik with those scopes, and the
user's file is left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
import triton
import triton.language as tl
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.runtime.cache import get_override_manager

import proton_ik
from proton_ik.lowering.errors import ProtonOverrideError
from proton_ik.lowering.proton_records import translate
from proton_ik.mode import Mode

TARGET = GPUTarget("cuda", 90, 32)


@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(x + offsets, mask=mask)
    b = tl.load(y + offsets, mask=mask)
    tl.store(out + offsets, a + b, mask=mask)


def _source():
    signature = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    return triton.compiler.ASTSource(add, signature=signature, constexprs={"BLOCK": 1024})


def _with_records(ttgir: str) -> str:
    """What Proton's tutorial does: "kernel" around the whole body, "load" around the loads."""
    out = []
    for line in ttgir.splitlines(keepends=True):
        if "tt.get_program_id" in line:
            out.append('    proton.record start "kernel" loc(#loc1)\n')
        if "tt.return" in line:
            out.append('    proton.record end "kernel" loc(#loc1)\n')
        if "tt.load" in line and not any('"load"' in o for o in out):
            out.append('    proton.record start "load"\n')
        out.append(line)
        if "tt.load" in line and sum("tt.load" in o for o in out) == 2:
            out.append('    proton.record end "load"\n')
    return "".join(out)


@pytest.fixture(scope="module")
def ttgir() -> str:
    return _with_records(triton.compile(_source(), target=TARGET, options={"num_warps": 4}).asm["ttgir"])


def _compile(options: dict) -> triton.compiler.CompiledKernel:
    with proton_ik.instrumented(Mode()) as mode:
        return triton.compile(
            _source(), target=TARGET, options={"num_warps": 4, **options, "instrumentation_mode": mode.knob}
        )


def _scopes(kernel) -> list[str]:
    return sorted(scope["name"] for scope in kernel.metadata.proton_ik["scopes"])


def test_an_autotune_ir_override_records_its_proton_records(tmp_path, ttgir):
    path = tmp_path / "add.ttgir"
    path.write_text(ttgir)
    kernel = _compile({"ir_override": str(path)})
    assert _scopes(kernel) == ["kernel", "load"]
    assert path.read_text() == ttgir  # the user's file, as written
    assert "pik.marker" in kernel.asm["ptx"] or kernel.metadata.profile_scratch_size > 0


def _override_folder(tmp_path: Path, ttgir: str, monkeypatch) -> Path:
    """TRITON_KERNEL_OVERRIDE on, with the kernel's folder holding ``ttgir`` as add.ttgir."""
    monkeypatch.setattr(knobs.compilation, "override", True)
    monkeypatch.setattr(knobs.cache, "override_dir", str(tmp_path / "override"))
    monkeypatch.setattr(knobs.compilation, "always_compile", True)
    folder = Path(get_override_manager(_source().hash()).cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "add.ttgir").write_text(ttgir)
    return folder


def test_a_kernel_override_folder_records_its_proton_records(tmp_path, ttgir, monkeypatch):
    folder = _override_folder(tmp_path, ttgir, monkeypatch)
    kernel = _compile({})
    assert _scopes(kernel) == ["kernel", "load"]
    assert (folder / "add.ttgir").read_text() == ttgir


def test_the_translation_keeps_everything_else_and_each_record_in_place():
    text = 'a = 1\n  proton.record start "x" loc(#loc1)\n// proton.record in a comment\n  proton.record end "x"\n'
    out = translate(text, "k.ttgir").splitlines()
    assert out[0] == "a = 1" and out[2] == "// proton.record in a comment"
    assert out[1].startswith("  %pik_proton_record_2 = tt.elementwise_inline_asm ")
    assert out[1].endswith("-> i32 loc(#loc1)") and "kind = \\22begin\\22, scope = \\22x\\22" in out[1]
    assert "kind = \\22end\\22" in out[3]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('  proton.record start "bad$name"', r"k\.ttgir: line 1: scope name 'bad\$name' has characters"),
        ("  proton.record start name", r"k\.ttgir: line 1 is not a form proton_ik reads"),
        ('  %0 = proton.record "x"', r"line 1 is not a form proton_ik reads"),
    ],
)
def test_a_record_proton_ik_cannot_read_is_named_with_its_line(line, message):
    with pytest.raises(ProtonOverrideError, match=message):
        translate(line + "\n", "k.ttgir")


def test_an_override_folder_that_also_holds_later_stages_is_warned_of(tmp_path, ttgir, monkeypatch):
    """What Proton's dump script deletes: with the dump's PTX beside the edited TTGIR, Triton takes
    that PTX as it is, and the records would be compiled away without a word."""
    plain_ptx = triton.compile(_source(), target=TARGET, options={"num_warps": 4}).asm["ptx"]
    folder = _override_folder(tmp_path, ttgir, monkeypatch)
    (folder / "add.ptx").write_text(plain_ptx)
    with pytest.warns(UserWarning, match=r"also holds add\.ptx.*Keep only add\.ttgir"):
        _compile({})  # compiles, from the stale PTX: the records are gone, as the warning says
