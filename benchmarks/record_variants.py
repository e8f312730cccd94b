"""Where the cycles of one record go: variants of the emitted PTX, timed on the GPU.

Each variant changes one thing in the PTX that proton_ik emits for single records (pairs=off),
in a kernel whose loop holds nothing but empty scopes. Cycles per record come from the warps'
own start and end clocks in the unit headers: (lifetime(n) - lifetime(0)) / records.
This is the experiment behind docs/PERFORMANCE.md. Run on a GPU, from the repository root:
python -m benchmarks.record_variants
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import triton
import triton.language as tl
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime._allocation import set_profile_allocator

import proton_ik
import proton_ik.language as pl
from proton_ik.contract import layout
from proton_ik.contract.layout import ENTRY_BYTES
from proton_ik.mode import Mode

SCOPES_PER_ITERATION = 4
CTAS = 132
STAGE_ENTRIES = 1024  # the shared-memory variant's ring, in entries of ENTRY_BYTES
ROOT = Path(__file__).resolve().parents[1]


@triton.jit
def empty_scopes(out, n):
    for _ in range(n):
        pl.enter_scope("a")
        pl.exit_scope("a")
        pl.enter_scope("b")
        pl.exit_scope("b")
        pl.enter_scope("c")
        pl.exit_scope("c")
        pl.enter_scope("d")
        pl.exit_scope("d")
    tl.store(out + tl.program_id(0), n)


# A single record's store, its L2 policy and all (``lowering.stores_ptx``).
_SINGLE_STORE = re.compile(
    r"\t@%pik_w st\.global\.L2::cache_hint\.v2\.b32 \t\[%pik_a\], (?P<values>\{\d+, %pik_c\}), %pik_pol;\n"
)


def streaming_stores(ptx: str) -> str:
    return ptx.replace(
        "@%pik_w st.global.L2::cache_hint.v2.b32", "@%pik_w st.global.cs.L2::cache_hint.v2.b32"
    )


def no_clock_read(ptx: str) -> str:
    return re.sub(r"mov.u32 \t%pik_c, %clock;", "add.u32 \t%pik_c, %pik_n, 7;", ptx)


def _kept_alive(ptx: str, clocks: re.Pattern[str], replacement: str) -> str:
    """``ptx`` with each store that ``clocks`` matches replaced by ``replacement``, which adds its
    clocks into ``%pik_sum``; the epilogue writes the sum where it writes a zero, so that ptxas
    cannot drop the clock reads (an unused ``mov %clock`` is dead code to it)."""
    edited, stores = clocks.subn(replacement, ptx)
    declared = edited.replace(".reg .b32 \t%pik_n,", ".reg .b32 \t%pik_sum, %pik_n,", 1)
    zeroed = declared.replace("\tmov.u32 \t%pik_n, 0;", "\tmov.u32 \t%pik_n, 0;\n\tmov.u32 \t%pik_sum, 0;", 1)
    result = zeroed.replace("%pik_tally, 0};", "%pik_tally, %pik_sum};")
    if not stores or zeroed == declared or result == zeroed:
        raise RuntimeError("the emitted PTX no longer holds the stores, registers or epilogue this edits")
    return result


def no_store(ptx: str) -> str:
    return _kept_alive(ptx, _SINGLE_STORE, "\tadd.s32 \t%pik_sum, %pik_sum, %pik_c;\n")


# A pair's store (``lowering.stores_ptx``): its begin's clock in %pik_bN, its end's in %pik_c.
_PAIR_STORE = re.compile(
    r"\t@%pik_w st\.global\.L2::cache_hint\.v4\.b32 \t\[%pik_a\], "
    r"\{(?P<begin_tag>\d+), (?P<begin>%pik_b\d+), (?P<end_tag>\d+), %pik_c\}, %pik_pol;\n"
)


def pair_no_store(ptx: str) -> str:
    return _kept_alive(
        ptx,
        _PAIR_STORE,
        "\tadd.s32 \t%pik_sum, %pik_sum, \\g<begin>;\n\tadd.s32 \t%pik_sum, %pik_sum, %pik_c;\n",
    )


def pair_no_clock_read(ptx: str) -> str:
    edited = re.sub(r"mov\.u32 \t(%pik_b\d+), %clock;", r"add.u32 \t\1, %pik_n, 3;", ptx)
    return no_clock_read(edited)


def no_ring_mask(ptx: str) -> str:
    return re.sub(r"and.b32 \t%pik_t, %pik_n, \d+;", "mov.b32 \t%pik_t, %pik_n;", ptx)


def clock64(ptx: str) -> str:
    return ptx.replace(
        "mov.u32 \t%pik_c, %clock;", "mov.u64 \t%pik_clk64, %clock64;\n\tcvt.u32.u64 \t%pik_c, %pik_clk64;"
    )


def shared_memory(ptx: str) -> str:
    ptx = ptx.replace(
        ".address_size 64",
        f".address_size 64\n.shared .align {ENTRY_BYTES} .b8 pik_stage[{STAGE_ENTRIES * ENTRY_BYTES}];",
        1,
    )
    ptx = ptx.replace("\tmov.u32 \t%pik_n, 0;", "\tmov.u32 \t%pik_n, 0;\n\tmov.u32 \t%pik_sm, pik_stage;", 1)
    ptx = re.sub(r"and.b32 \t%pik_t, %pik_n, \d+;", f"and.b32 \t%pik_t, %pik_n, {STAGE_ENTRIES - 1};", ptx)
    ptx = ptx.replace(
        f"mad.wide.u32 \t%pik_a, %pik_t, {ENTRY_BYTES}, %pik_rec;",
        f"mad.lo.u32 \t%pik_t, %pik_t, {ENTRY_BYTES}, %pik_sm;",
    )
    return _SINGLE_STORE.sub(lambda m: f"\t@%pik_w st.shared.v2.b32 \t[%pik_t], {m['values']};\n", ptx)


# The edited variants rewrite layout 2's stores, line by line.
SINGLES = Mode(capacity=1 << 15, pairs=False, layout=2)
PAIRS_V2 = Mode(capacity=1 << 15, layout=2)
VARIANTS: dict[str, tuple[Mode, Callable[[str], str] | None]] = {
    "single records (pairs=off)": (SINGLES, None),
    "st.global.cs": (SINGLES, streaming_stores),
    "no clock read": (SINGLES, no_clock_read),
    "no store": (SINGLES, no_store),
    "no ring mask": (SINGLES, no_ring_mask),
    "%clock64": (SINGLES, clock64),
    "shared memory": (SINGLES, shared_memory),
    "pairs=on (default)": (Mode(capacity=1 << 15), None),
    "pairs=on, layout=2": (PAIRS_V2, None),
    "pairs: no store": (PAIRS_V2, pair_no_store),
    "pairs: no clock read": (PAIRS_V2, pair_no_clock_read),
    "granularity=cta, pairs=off": (Mode(granularity="cta", capacity=1 << 15, pairs=False), None),
    "granularity=cta, pairs=on": (Mode(granularity="cta", capacity=1 << 15), None),
}


def patched(transform: Callable[[str], str], ptx: str) -> str:
    """``transform(ptx)``, refused when it changes nothing: the emitted PTX no longer holds the text
    the variant rewrites (see lowering/pikgpu_to_ptx.py), so it would time the baseline."""
    result = transform(ptx)
    if result == ptx:
        raise RuntimeError(f"{transform.__name__}: the emitted PTX holds none of the text it rewrites")
    return result


def compile_variant(mode: Mode, transform: Callable[[str], str] | None):
    """``empty_scopes`` for sm_90 under ``mode``, its instrumented PTX passed through ``transform``."""
    with proton_ik.instrumented(mode):
        instrumenting = knobs.runtime.add_stages_inspection_hook

        def hook(backend, stages, options, language, capability):
            instrumenting(backend, stages, options, language, capability)
            if transform is not None:
                emit = stages["ptx"]
                stages["ptx"] = lambda src, metadata: patched(transform, emit(src, metadata))

        knobs.runtime.add_stages_inspection_hook = hook
        knobs.compilation.always_compile = True
        try:
            options = {"instrumentation_mode": mode.knob, "num_warps": 4}
            source = ASTSource(empty_scopes, signature={"out": "*i32", "n": "i32"})
            return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
        finally:
            knobs.runtime.add_stages_inspection_hook = instrumenting
            knobs.compilation.always_compile = False


_buffers: dict[int, Any] = {}  # torch tensors; torch is imported where a GPU runs


def _allocate(size: int, alignment: int, stream: int) -> Any:
    import torch

    if size not in _buffers:
        _buffers[size] = torch.zeros(size, dtype=torch.uint8, device="cuda")
    return _buffers[size]


def median_lifetime(kernel, n: int) -> float:
    import torch

    out = torch.zeros(CTAS, dtype=torch.int32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    for _ in range(3):
        kernel.run(CTAS, 1, 1, stream, kernel.function, kernel.packed_metadata, None, None, None, out, n)
    torch.cuda.synchronize()
    shape = layout.BufferLayout.from_dict(kernel.metadata.proton_ik["layout"])
    raw = _buffers[CTAS * shape.cta_bytes].cpu().numpy().reshape(CTAS, shape.cta_bytes)
    spans = []
    for unit in range(shape.units):
        offset = shape.unit_offset(unit)
        header = (
            raw[:, offset : offset + layout.UNIT_HEADER_BYTES].copy().view(layout.UNIT_HEADER_DTYPE).ravel()
        )
        spans.append((header["end_clock"] - header["start_clock"]).astype(np.int64))
    return float(np.median(np.concatenate(spans)))


def measure(name: str) -> float:
    set_profile_allocator(_allocate)
    iterations = 1024
    mode, transform = VARIANTS[name]
    kernel = compile_variant(mode, transform)
    return (median_lifetime(kernel, iterations) - median_lifetime(kernel, 0)) / (
        2 * SCOPES_PER_ITERATION * iterations
    )


def measure_all() -> dict[str, dict[str, float | str]]:
    """Every variant, each in a process of its own: one that faults must not take the others down."""
    results: dict[str, dict[str, float | str]] = {}
    for name in VARIANTS:
        run = subprocess.run(
            [sys.executable, "-m", "benchmarks.record_variants", name],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        last = (run.stdout.strip() or run.stderr.strip() or "no output").splitlines()[-1]
        results[name] = {"cycles_per_record": float(last)} if run.returncode == 0 else {"error": last[:200]}
    return results


def main() -> None:
    print("| variant | cycles/record |\n|---|---|")
    for name, result in measure_all().items():
        print(
            f"| {name} | {result.get('cycles_per_record', 'failed: ' + str(result.get('error')))} |",
            flush=True,
        )


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(f"{measure(sys.argv[1]):.1f}")
    else:
        main()
