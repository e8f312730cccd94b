"""The frame experiments (benchmarks/frame_variants.py): each edits what it says in the frame's
PTX, and the edited kernel still assembles, so that the GPU times what the name claims."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, tempfile, triton
from benchmarks import compile_check, frame_variants, kernels, scope_parts
triton.knobs.cache.dir = tempfile.mkdtemp()
found = {}
for problem in kernels.suite(False, 132):
    if problem.name not in frame_variants.KERNELS:
        continue
    for name in ["", *frame_variants.FRAME_EXPERIMENTS]:
        part = f"frame/{name}" if name else "frame"
        with scope_parts.compiling(part) as knob:
            source = compile_check.source(problem.fn, problem.signature, problem.constexprs)
            compiled = triton.compile(
                source, target=compile_check.TARGET, options={**problem.options, "instrumentation_mode": knob}
            )
        ptx = compiled.asm["ptx"]
        head, tail = ptx.split("$pik_exit:")
        found[f"{problem.name} {part}"] = {
            "globaltimer": ptx.count("%globaltimer;") + ptx.count("%globaltimer_lo;"),
            "clock": ptx.count("%clock64;") + ptx.count("%clock;"), "smid": "%smid;" in ptx,
            "head_stores": head.count("st.global"), "tail_stores": tail.count("st.global"),
            "end_read_first": tail.index("%pik_clk64,") < tail.index("ld.param.u64"),
            "cubin": len(compiled.asm["cubin"]),
        }
print(json.dumps(found))
"""


def _changes(found: dict, kernel: str, name: str) -> dict:
    """What the experiment ``name`` changed in ``kernel``'s frame, besides the cubin."""
    frame = found[f"{kernel} frame"]
    edited = found[f"{kernel} frame/{name}"]
    return {key: value for key, value in edited.items() if value != frame[key] and key != "cubin"}


def test_each_experiment_edits_what_it_says() -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stderr[-4000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert all(entry["cubin"] > 0 for entry in found.values())
    for kernel in ("gelu", "layer_norm"):
        frame = found[f"{kernel} frame"]
        assert (frame["globaltimer"], frame["clock"], frame["smid"], frame["tail_stores"]) == (2, 2, True, 6)
        assert _changes(found, kernel, "no_globaltimer") == {"globaltimer": 0}
        assert _changes(found, kernel, "no_time_reads") == {"globaltimer": 0, "clock": 0}
        assert _changes(found, kernel, "no_smid") == {"smid": False}
        assert _changes(found, kernel, "no_header_stores") == {"tail_stores": 0}
        assert _changes(found, kernel, "no_cta_header") == {"tail_stores": 3}
        assert _changes(found, kernel, "no_unit_times") == {"tail_stores": 4}
        assert _changes(found, kernel, "full_cta_header") == {"tail_stores": 7}
        assert _changes(found, kernel, "headers_bulk") == {"tail_stores": 0}  # copied, not stored
        assert frame["end_read_first"]
        assert _changes(found, kernel, "region_first") == {"end_read_first": False}
        assert _changes(found, kernel, "one_cta_store") == {"tail_stores": 4}
        assert _changes(found, kernel, "region_first_one_cta_store") == {
            "tail_stores": 4,
            "end_read_first": False,
        }
        # the old prologue: the CTA header's three stores, the start times and the cleared counts
        assert _changes(found, kernel, "prologue_stores") == {
            "head_stores": frame["head_stores"] + 5,
            "globaltimer": 3,
            "clock": 3,
        }


RECORDS_SCRIPT = """
import json, tempfile, triton
from benchmarks import compile_check, kernels, scope_parts
from proton_ik.mode import Mode
triton.knobs.cache.dir = tempfile.mkdtemp()
found = {}
for problem in kernels.suite(False, 132):
    if problem.name not in ("gelu", "softmax"):
        continue
    for part in (
        "full/records_to_shared",
        "full/records_copied_every_16",
        "full/records_never_stored",
        "full/records_to_one_slot",
        "full/records_default_l2_policy",
        "full/records_half_bytes",
        "full/records_without_clocks",
    ):
        with scope_parts.compiling(part, Mode(stage=False)) as knob:
            source = compile_check.source(problem.fn, problem.signature, problem.constexprs)
            compiled = triton.compile(
                source, target=compile_check.TARGET, options={**problem.options, "instrumentation_mode": knob}
            )
        ptx = compiled.asm["ptx"]
        found[f"{problem.name} {part}"] = {
            "record_stores": ptx.count("st.global.L2::cache_hint.v4.b32 \\t[%pik_a]"),
            "unhinted": ptx.count("st.global.v4.b32 \\t[%pik_a]"),
            "staged": ptx.count("st.shared.v4.b32 \\t[%pik_sh]"),
            "copies": ptx.count("cp.async.bulk.global.shared::cta.bulk_group"),
            "never": ptx.count("setp.eq.and.u64 \\t%pik_w, %pik_scratch, 1, %pik_w;"),
            "ring_slots": ptx.count("and.b32 \\t%pik_t, %pik_n,"),
            "half": ptx.count("st.global.L2::cache_hint.v2.b32 \\t[%pik_a]"),
            "clock_reads": ptx.count(", %clock;"),
            "cubin": len(compiled.asm["cubin"]),
        }
print(json.dumps(found))
"""


def test_the_records_experiment_sends_every_record_store_to_shared_memory() -> None:
    run = subprocess.run(
        [sys.executable, "-c", RECORDS_SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stderr[-4000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    # gelu: three pairs per warp; softmax: one pair, in the row loop
    for kernel, pairs in (("gelu", 3), ("softmax", 1)):
        edited = found[f"{kernel} full/records_to_shared"]
        assert (edited["record_stores"], edited["staged"], edited["copies"]) == (0, pairs, 0)
        assert edited["cubin"] > 0
        copied = found[f"{kernel} full/records_copied_every_16"]
        assert (copied["record_stores"], copied["staged"], copied["copies"]) == (0, pairs, pairs)
        # The stores stay, turned off at run time by one test in the prologue; or all to slot 0.
        never = found[f"{kernel} full/records_never_stored"]
        assert (never["record_stores"], never["never"], never["ring_slots"]) == (pairs, 1, pairs)
        one_slot = found[f"{kernel} full/records_to_one_slot"]
        assert (one_slot["record_stores"], one_slot["never"], one_slot["ring_slots"]) == (pairs, 0, 0)
        assert never["cubin"] > 0 and one_slot["cubin"] > 0
        # The same stores without their L2 eviction policy; or 8 bytes each at an 8-byte stride.
        default = found[f"{kernel} full/records_default_l2_policy"]
        assert (default["record_stores"], default["unhinted"], default["cubin"] > 0) == (0, pairs, True)
        # The records' clock reads gone (the unit's start read stays), their stores kept.
        unclocked = found[f"{kernel} full/records_without_clocks"]
        assert (unclocked["record_stores"], unclocked["clock_reads"]) == (pairs, 1)
        half = found[f"{kernel} full/records_half_bytes"]
        assert (half["record_stores"], half["half"], half["cubin"] > 0) == (0, pairs, True)
