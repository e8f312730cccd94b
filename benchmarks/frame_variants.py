"""Where the prologue and epilogue cost goes on short CTAs (issue 10): the default mode's frame
(``scope_parts``: prologue and epilogue, no records), changed in one way per variant, timed
against plain and the frame itself on the kernels whose frame costs most (gelu, layer_norm: one
short CTA per block or row). The experiment behind docs/PERFORMANCE.md. On a GPU, from the
repository root: ``python -m benchmarks.frame_variants [OUT.json]``.

Each change is a text edit of the frame's PTX (``proton_ik/lowering/pikgpu_to_ptx.py`` emits
it), refused when it finds nothing to edit, so that no variant times the frame unchanged.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from proton_ik.mode import Mode

EXIT = "$pik_exit:"
STORE = re.compile(r"^\t@%pik_[hw] st\.global\.\S+\s+\[[^\]]+\], \{[^}]*\};$", re.MULTILINE)
START_TIMES = ("\tmov.u64 \t%pik_clk64, %clock64;", "\tmov.u64 \t%pik_gtime, %globaltimer;")


def _split(ptx: str) -> tuple[str, str]:
    """(before the epilogue, the epilogue on)."""
    at = ptx.index(EXIT)
    return ptx[:at], ptx[at:]


def _changed(name: str, before: str, after: str) -> str:
    if after == before:
        raise RuntimeError(f"{name}: the frame's PTX holds none of the text it edits")
    return after


def no_globaltimer(ptx: str) -> str:
    """%globaltimer never read: the start and end times are the clocks."""
    return _changed("no_globaltimer", ptx, ptx.replace(START_TIMES[1], "\tmov.u64 \t%pik_gtime, %pik_clk64;"))


def no_time_reads(ptx: str) -> str:
    """Neither %clock64 nor %globaltimer read: constants stored in their place."""
    edited = ptx.replace(START_TIMES[0], "\tmov.u64 \t%pik_clk64, 0;")
    return _changed("no_time_reads", ptx, edited.replace(START_TIMES[1], "\tmov.u64 \t%pik_gtime, 0;"))


def no_smid(ptx: str) -> str:
    """%smid never read."""
    return _changed("no_smid", ptx, ptx.replace("\tmov.u32 \t%pik_sm, %smid;", "\tmov.u32 \t%pik_sm, 0;"))


def no_prologue_stores(ptx: str) -> str:
    """The CTA and unit headers not written at the start (the epilogue's stores stay)."""
    head, tail = _split(ptx)
    return _changed("no_prologue_stores", ptx, STORE.sub("", head) + tail)


def no_epilogue_stores(ptx: str) -> str:
    """The unit's end times and counts not written."""
    head, tail = _split(ptx)
    return _changed("no_epilogue_stores", ptx, head + STORE.sub("", tail))


def full_cta_header(ptx: str) -> str:
    """The CTA header's last 16 bytes written too, so that no 32-byte sector of it is partial."""
    line = "\t@%pik_h st.global.v4.b32 \t[%pik_base+32], {"
    at = ptx.index(line)
    end = ptx.index("\n", at) + 1
    extra = "\t@%pik_h st.global.v4.b32 \t[%pik_base+48], {0, 0, 0, 0};\n"
    return _changed("full_cta_header", ptx, ptx[:end] + extra + ptx[end:])


def stores_at_exit(ptx: str) -> str:
    """Every header store at the epilogue: the start times wait in registers of their own, and
    the kernel's first loads wait for no store of ours."""
    head, tail = _split(ptx)
    stores = STORE.findall(head)
    head = STORE.sub("", head)
    head = head.replace(START_TIMES[0], "\tmov.u64 \t%pik_clk64_start, %clock64;")
    head = head.replace(START_TIMES[1], "\tmov.u64 \t%pik_gtime_start, %globaltimer;")
    head = head.replace(
        "\t.reg .pred \t%pik_w", "\t.reg .b64 \t%pik_clk64_start, %pik_gtime_start;\n\t.reg .pred \t%pik_w", 1
    )
    moved = [
        line.replace("{%pik_clk64, %pik_gtime}", "{%pik_clk64_start, %pik_gtime_start}")
        for line in stores
        if "{0, 0, 0, 0}" not in line  # the epilogue writes those 16 bytes anyway
    ]
    label, rest = tail.split("\n", 1)
    return _changed("stores_at_exit", ptx, head + label + "\n" + "\n".join(moved) + "\n" + rest)


FRAME_EXPERIMENTS: dict[str, Callable[[str], str]] = {
    change.__name__: change
    for change in (
        no_globaltimer,
        no_time_reads,
        no_smid,
        no_prologue_stores,
        no_epilogue_stores,
        full_cta_header,
        stores_at_exit,
    )
}
KERNELS = ("gelu", "layer_norm")
ROUNDS = 7


def variants():
    from benchmarks.variants import Variant, part_variants

    mode = Mode()
    frame = [v for v in part_variants(mode) if v.part == "frame"]
    return [
        Variant("plain", None),
        *frame,
        *(Variant(f"frame/{name}", "proton_ik", str(mode), f"frame/{name}") for name in FRAME_EXPERIMENTS),
        Variant("proton_ik", "proton_ik", str(mode)),
    ]


def main() -> None:
    import torch
    import triton

    from benchmarks import harness, kernels
    from benchmarks.overhead import compare

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="results as JSON")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--reuse-cache", action="store_true")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="pik_frame_"))
    triton.knobs.cache.dir = str(scratch / "triton_cache")
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    compared = variants()
    ctx = harness.Context(args, num_sms, compared, harness.ScratchPool(), harness.ClockSampler(), scratch)
    problems = [p for p in kernels.suite(args.quick, num_sms) if p.name in KERNELS]
    results = compare(ctx, problems, compared, args.rounds)
    rows = ["| variant | " + " | ".join(KERNELS) + " |", "|---|" + "---|" * len(KERNELS)]
    for variant in compared[1:]:
        cells = []
        for name in KERNELS:
            timing = results.get(name, {}).get("timing", {})
            if variant.label in timing and "plain" in timing:
                ratio = timing[variant.label]["median_ms"] / timing["plain"]["median_ms"]
                cells.append(f"{(ratio - 1) * 100:+.1f}")
            else:
                cells.append("failed")
        rows.append(f"| {variant.label} | " + " | ".join(cells) + " |")
    print("\n".join(rows))
    if args.out:
        Path(args.out).write_text(
            json.dumps({"device": harness.environment(num_sms), "kernels": results}, indent=1)
        )


if __name__ == "__main__":
    sys.exit(main())
