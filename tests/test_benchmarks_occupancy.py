"""Issue 10's measurements that need no GPU: CUDA's occupancy rule (benchmarks/residency.py), the
occupancy table compiled for sm_90 (benchmarks/occupancy.py), the parts of the default mode
(benchmarks/scope_parts.py), the new suite kernels, and the runner's imports without torch.

Everything of ``benchmarks`` runs in a subprocess from the repository root, as
tests/test_benchmarks_report.py explains: xdsl installs a top-level package of the same name.
The rule alone is pure arithmetic and is loaded from its file.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_residency():
    spec = importlib.util.spec_from_file_location("pik_bench_residency", ROOT / "benchmarks" / "residency.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


residency = _load_residency()


def run_python(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


# --- the rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("registers", "warps", "shared", "ctas", "limited_by"),
    [
        # issue 10's table: gelu plain and under the default mode, softmax plain
        (72, 4, 0, 7, "registers"),  # 2304 registers a warp: 7 warps per sub-partition, 28 per SM
        (92, 4, 0, 5, "registers"),  # 2944 -> 3072 a warp: 5 per sub-partition, 20 warps
        (63, 8, 32, 4, "registers"),  # 2016 -> 2048 a warp: 8 per sub-partition, 32 warps
        (78, 4, 0, 6, "registers"),  # 2496 -> 2560 a warp: 6 per sub-partition, 24 warps
        # sub-partitions: 80 registers give 6 warps in each (24), not 65536 // 2560 = 25
        (80, 1, 0, 24, "registers"),
        (255, 8, 0, 1, "registers"),  # 8192 a warp: 2 per sub-partition, 8 warps
        (32, 16, 0, 4, "registers, warps"),  # 16 warps per sub-partition; 64 warp slots
        (16, 1, 0, 32, "CTA slots"),  # 512 a warp: 128 warps by registers, 64 by slots, 32 CTAs
        (128, 8, 131332, 1, "shared memory"),  # 132356 -> 132480 bytes of 233472; registers allow 2
        (32, 4, 48 * 1024, 4, "shared memory"),  # 49152 + 1024 bytes: 4 fit in 228 KiB
        (32, 4, 0, 16, "registers, warps"),
        (0, 4, 0, 16, "warps"),
        (256, 1, 0, 0, "registers"),  # more than 255 per thread: cannot launch
        (32, 4, 227 * 1024 + 1, 0, "shared memory"),  # more than 227 KiB per CTA
    ],
)
def test_resident_ctas(registers: int, warps: int, shared: int, ctas: int, limited_by: str) -> None:
    fit = residency.resident_ctas(registers, warps, shared)
    assert fit.ctas == ctas, fit
    assert fit.limited_by == limited_by


def test_resident_ctas_refuses_a_cta_of_no_warps() -> None:
    with pytest.raises(ValueError, match="warps=0"):
        residency.resident_ctas(32, 0, 0)


# --- the table, compiled without a GPU ---------------------------------------------------------


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("occupancy") / "occupancy.json"
    run = run_python("-m", "benchmarks.occupancy", "--only", "gelu,softmax", "--json", str(out))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "## Registers and resident CTAs per SM" in run.stdout
    return json.loads(out.read_text())


def test_the_table_covers_plain_the_parts_ours_and_protons(table: dict) -> None:
    labels = [v["label"] for v in table["variants"]]
    assert labels == [
        "plain",
        "proton_ik[markers only]",
        "proton_ik[prologue+epilogue]",
        "proton_ik",
        "proton_global",
        "proton_shared",
    ]
    assert table["compiled"] == "sm_90"
    for name in ("gelu", "softmax"):
        assert table["kernels"][name]["errors"] == {}
        assert set(table["kernels"][name]["variants"]) == set(labels)


def test_the_plain_kernels_are_those_of_the_issue(table: dict) -> None:
    gelu = table["kernels"]["gelu"]["variants"]["plain"]
    softmax = table["kernels"]["softmax"]["variants"]["plain"]
    assert (gelu["registers"], gelu["warps"], gelu["spills"], gelu["ctas"]) == (72, 4, 0, 7)
    assert (softmax["registers"], softmax["warps"], softmax["spills"], softmax["ctas"]) == (63, 8, 0, 4)


def test_every_row_follows_the_rule(table: dict) -> None:
    for kernel in table["kernels"].values():
        for row in kernel["variants"].values():
            fit = residency.resident_ctas(row["registers"], row["warps"], row["shared"])
            assert (row["ctas"], row["limited_by"]) == (fit.ctas, fit.limited_by)


def test_the_parts_build_up_to_the_default_mode(table: dict) -> None:
    for name, kernel in table["kernels"].items():
        rows = kernel["variants"]
        # Markers alone change nothing ptxas sees: the same registers, no profile buffer.
        assert rows["proton_ik[markers only]"]["registers"] == rows["plain"]["registers"], name
        assert rows["proton_ik[markers only]"]["profile_scratch_per_cta"] == 0
        # The frame writes headers into the buffer of the mode it was cut from.
        frame, ours = rows["proton_ik[prologue+epilogue]"], rows["proton_ik"]
        assert frame["profile_scratch_per_cta"] > 0 and ours["profile_scratch_per_cta"] > 0
    proton_shared = table["kernels"]["gelu"]["variants"]["proton_shared"]
    assert proton_shared["shared"] > table["kernels"]["gelu"]["variants"]["plain"]["shared"]


# --- the parts' PTX --------------------------------------------------------------------------------

PARTS_SCRIPT = """
import json, tempfile, triton
from benchmarks import compile_check, kernels, scope_parts
triton.knobs.cache.dir = tempfile.mkdtemp()
gelu = kernels.suite(False, 132)[0]
found = {}
try:  # first, while the cache holds no plain gelu that it could return
    with scope_parts.compiling("frame"):
        triton.compile(compile_check.source(gelu.fn, gelu.signature, gelu.constexprs), target=compile_check.TARGET, options=gelu.options)
except RuntimeError as error:
    found["without_knob"] = str(error)
for part in scope_parts.PARTS:
    with scope_parts.compiling(part) as knob:
        source = compile_check.source(gelu.fn, gelu.signature, gelu.constexprs)
        compiled = triton.compile(source, target=compile_check.TARGET, options={**gelu.options, "instrumentation_mode": knob})
    ptx = compiled.asm["ptx"]
    found[part] = {"knob": knob, "markers": scope_parts.markers_in(ptx), "lowered": "%pik_" in ptx,
                   "clock32": ptx.count("%clock;"), "clock64": "%clock64" in ptx, "stores": ptx.count("st.global"),
                   "proton_ik": bool(getattr(compiled.metadata, "proton_ik", None))}
plain = compile_check.compile_kernel(gelu.fn, gelu.signature, gelu.constexprs, gelu.options, None)
found["plain_stores"] = plain.asm["ptx"].count("st.global")
print(json.dumps(found))
"""


def test_the_parts_lower_what_they_say() -> None:
    run = run_python("-c", PARTS_SCRIPT)
    assert run.returncode == 0, run.stderr[-4000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    markers, frame = found["markers"], found["frame"]
    assert markers["knob"] != frame["knob"]  # a cache key of its own each
    # gelu's three scopes: a begin and an end each, kept as comments, lowered to nothing
    assert (markers["markers"], markers["lowered"], markers["proton_ik"]) == (6, False, False)
    assert markers["stores"] == found["plain_stores"]
    # The frame: the start's 32-bit clock, the end's 64-bit one and the header stores, no record's
    assert (frame["markers"], frame["lowered"], frame["proton_ik"]) == (0, True, True)
    assert frame["clock64"] and frame["clock32"] == 1
    assert frame["stores"] > found["plain_stores"]
    assert "instrumentation_mode=" in found["without_knob"]


# --- the runner without torch ----------------------------------------------------------------------

NO_TORCH = """
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("no torch here")
sys.meta_path.insert(0, NoTorch())
import benchmarks.run, benchmarks.occupancy, benchmarks.report, benchmarks.residency
import benchmarks.scope_parts, benchmarks.variants, benchmarks.kernels, benchmarks.compile_check
names = [p.name for p in benchmarks.kernels.suite(False, 132)]
print(",".join(names))
"""


def test_the_runner_imports_without_torch() -> None:
    run = run_python("-c", NO_TORCH)
    assert run.returncode == 0, run.stderr[-3000:]
    names = run.stdout.strip().split(",")
    assert {"layer_norm", "add_rms_norm"} <= set(names)
    assert len(names) == len(set(names))


def test_help_names_the_new_sections_and_options() -> None:
    run = run_python("-m", "benchmarks.run", "--help")
    assert run.returncode == 0, run.stderr
    for word in ("occupancy", "decomposition", "--sample-mode"):
        assert word in run.stdout
