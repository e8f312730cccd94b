"""Registers and resident CTAs: ``occupancy=keep``'s arithmetic and its ``.maxnreg``, and the suite's
kernels compiled for sm_90, plain and instrumented, read with Triton's bundled ``cuobjdump`` (in a
subprocess from the repository root: xdsl installs a top-level package also named ``benchmarks``).

The register counts are not timings: they are what ptxas gives for one PTX, so a bound on them
holds on every machine. What the lowering guarantees: with ``occupancy=keep`` (the default)
every suite kernel keeps the plain kernel's resident CTAs per SM; with ``occupancy=free`` every
kernel but gelu keeps them too, and gelu loses one CTA of seven, not the two it lost before
begins were placed above the pure arithmetic before them (docs/PERFORMANCE.md, issue 10).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from proton_ik.contract.metadata import Occupancy
from proton_ik.lowering import occupancy, staging

SM90 = occupancy.SM_LIMITS[90]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "registers, warps, shared, ctas",
    [
        (72, 4, 0, 7),  # gelu plain: 2304 registers a warp, 28 warps
        (80, 4, 0, 6),
        (92, 4, 0, 5),
        (32, 4, 0, 16),  # 64 warps per SM
        (32, 1, 0, 32),  # 32 CTAs per SM
        (64, 4, 100_000, 2),  # shared memory: 2 x (100000 + 1024) bytes fit 228 KiB
    ],
)
def test_resident_ctas_follow_the_sm_limits(registers, warps, shared, ctas):
    assert occupancy.resident_ctas(registers, warps, shared, SM90) == ctas


@pytest.mark.parametrize(
    "registers, warps, shared, cap",
    [
        (72, 4, 0, 72),  # 7 CTAs: 65536 / 28 warps, in units of 256 registers a warp
        (73, 4, 0, 80),  # 6 CTAs from 73 up to 80
        (103, 8, 0, 128),  # 2 CTAs of 8 warps up to 128
        (90, 8, 150_000, 255),  # one CTA by shared memory: all 255
    ],
)
def test_the_cap_is_the_most_registers_that_keep_the_plain_kernels_ctas(registers, warps, shared, cap):
    assert occupancy.register_cap(registers, warps, shared, SM90) == cap
    keep = occupancy.resident_ctas(registers, warps, shared, SM90)
    assert occupancy.resident_ctas(cap, warps, shared, SM90) == keep
    if cap < occupancy.MAX_REGISTERS:
        assert occupancy.resident_ctas(cap + 1, warps, shared, SM90) < keep


PTX = ".version 8.7\n.target sm_90a\n.visible .entry k(\n\t.param .u64 k_param_0\n)\n.reqntid 128\n{\n\tret;\n}\n"


class _FakePtxas(occupancy.Ptxas):
    def registers(self, ptx: str) -> tuple[int, int]:
        return 72, 0


def test_keep_caps_the_entry_and_lowers_a_higher_maxnreg_but_keeps_a_lower_one():
    ptxas = _FakePtxas("ptxas", "sm_90a")
    capped, found = occupancy.keep(PTX, PTX, ptxas, 90, 4, 0)
    assert capped.splitlines()[5:7] == [".maxnreg 72", ".reqntid 128"]
    assert found == Occupancy(72, 7, 72, found.reason) and "72 registers" in found.reason
    higher = PTX.replace(".reqntid 128", ".maxnreg 128\n.reqntid 128")
    assert ".maxnreg 72\n" in occupancy.keep(PTX, higher, ptxas, 90, 4, 0)[0]
    lower = PTX.replace(".reqntid 128", ".maxnreg 64\n.reqntid 128")
    kept, found = occupancy.keep(PTX, lower, ptxas, 90, 4, 0)
    assert kept == lower and found.cap == 64


def test_keep_without_sm_limits_or_ptxas_sets_no_cap_and_says_why():
    ptx, found = occupancy.keep(PTX, PTX, _FakePtxas("ptxas", "sm_75"), 75, 4, 0)
    assert ptx == PTX and found.cap is None and "no table of SM limits for sm_75" in found.reason
    ptx, found = occupancy.keep(PTX, PTX, occupancy.Ptxas("/nonexistent/ptxas", "sm_90a"), 90, 4, 0)
    assert ptx == PTX and found.cap is None and "no cap" in found.reason


def test_a_kernel_that_sets_its_warp_groups_registers_gets_no_cap():
    ws = PTX.replace("\tret;", "\tsetmaxnreg.inc.sync.aligned.u32 240;\n\tret;")
    asked = []
    ptx, found = occupancy.keep_measured(lambda: asked.append(1) or (72, 0), ws, 90, 4, 0)
    assert ptx == ws and found.cap is None and "setmaxnreg" in found.reason and not asked


def test_the_plain_ptxas_runs_beside_and_a_run_not_wanted_is_stopped_and_cleaned(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    script = tmp_path / "ptxas"
    script.write_text("#!/bin/sh\nsleep 0.2\necho 'ptxas info    : Used 40 registers' >&2\n")
    script.chmod(0o755)
    ptxas = occupancy.Ptxas(str(script), "sm_90a", ())
    run = ptxas.start(PTX)
    assert run.result() == (40, 0)
    run.cancel()  # nothing left to do
    stopped = ptxas.start(PTX)
    assert len(list(scratch.iterdir())) == 1  # its PTX, while it runs
    stopped.cancel()
    assert not list(scratch.iterdir())
    with pytest.raises(OSError):
        occupancy.Ptxas(str(tmp_path / "none"), "sm_90a").start(PTX).result()


# --- the suite ----------------------------------------------------------------------------------

# Compiles every suite kernel plain, in the default mode (occupancy=keep) and with occupancy=free; prints, per
# kernel and mode: registers per thread, stack bytes, warps, shared bytes, the occupancy metadata.
_MEASURE = """
import json, os, re, subprocess, sys, tempfile
import triton
from benchmarks import kernels
from benchmarks.compile_check import compile_kernel
from proton_ik.mode import Mode
triton.knobs.cache.dir = tempfile.mkdtemp(prefix="pik_occupancy_test_")
triton.knobs.compilation.always_compile = True
cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
found = {}
for problem in kernels.suite(False, 132):
    for label, mode in (("plain", None), ("default", Mode()), ("free", Mode(occupancy="free"))):
        kernel = compile_kernel(problem.fn, problem.signature, problem.constexprs, problem.options, mode)
        with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
            file.write(kernel.asm["cubin"])
            file.flush()
            usage = subprocess.run([cuobjdump, "-res-usage", file.name], capture_output=True, text=True, check=True).stdout
        registers, stack = map(int, re.search(r"REG:(\\d+) STACK:(\\d+)", usage).groups())
        meta = kernel.metadata
        found.setdefault(problem.name, {})[label] = [
            registers, stack, meta.num_warps, meta.shared, (getattr(meta, "proton_ik", None) or {}).get("occupancy")
        ]
json.dump(found, sys.stdout)
"""


@pytest.fixture(scope="module")
def suite() -> dict:
    run = subprocess.run(
        [sys.executable, "-c", _MEASURE], cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def _ctas(row: list) -> int:
    registers, _, warps, shared, _ = row
    return occupancy.resident_ctas(registers, warps, shared, SM90)


def test_the_default_occupancy_keep_keeps_every_suite_kernels_resident_ctas(suite):
    for name, rows in suite.items():
        plain, keep = rows["plain"], rows["default"]
        assert _ctas(keep) == _ctas(plain), (name, keep, plain)
        found = keep[4]
        if found["cap"] is None:  # warp-specialized: it sets its warp groups' registers itself
            assert "setmaxnreg" in found["reason"], (name, found)
            continue
        assert (found["plain_registers"], found["plain_ctas"]) == (plain[0], _ctas(plain)), name
        assert keep[0] <= found["cap"], name
    assert suite["gluon_ws_add"]["default"][4]["cap"] is None


def test_occupancy_free_loses_no_resident_cta_but_one_of_gelus(suite):
    assert "gelu" in suite and len(suite) >= 7
    for name, rows in suite.items():
        lost = _ctas(rows["plain"]) - _ctas(rows["free"])
        assert lost <= (name == "gelu"), (name, rows)


def test_gelu_fits_six_ctas_and_matmul_spills_nothing_with_occupancy_free(suite):
    """Before begins were placed: gelu 92 registers (5 CTAs), matmul 4 bytes of spills."""
    assert suite["gelu"]["free"][0] <= 80
    assert suite["matmul"]["free"][1] == suite["matmul"]["plain"][1] == 0


@pytest.mark.parametrize(
    "shared, warps, units, capability, fits",
    [
        (0, 4, 4, 90, True),  # gelu: 1 KiB (512 bytes of stage, padded), 16 CTAs by warps either way
        (0, 4, 4, 80, False),  # no cp.async.bulk before sm_90
        (0, 4, 4, 75, False),  # no table of SM limits
        (49_152 - 512, 4, 4, 90, False),  # past 48 KiB on its own: Triton opts in only for its own
        (60_000, 4, 4, 90, True),  # the kernel's own already has the opt-in
        (232_448 - 512, 4, 4, 90, False),  # past the SM's shared memory for one CTA
        (100_000, 8, 8, 90, True),  # 2 CTAs by shared memory either way
        (115_000, 8, 8, 90, False),  # 2 CTAs by shared memory, 1 with the stages
    ],
)
def test_stages_fit_beside_the_kernels_shared_memory_without_costing_a_cta(
    shared, warps, units, capability, fits
):
    assert staging.fits(shared, warps, units, capability) is fits
