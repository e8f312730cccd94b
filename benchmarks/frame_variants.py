"""Where the prologue and epilogue cost goes on short CTAs (issue 10): the default mode's frame
(``scope_parts``: prologue and epilogue, no records), changed in one way per variant, timed
against plain and the frame itself on the kernels whose frame costs most (gelu, layer_norm: one
short CTA per block or row). The experiment behind docs/PERFORMANCE.md. On a GPU, from the
repository root: ``python -m benchmarks.frame_variants [OUT.json]``.

``--records`` times ``RECORD_EXPERIMENTS`` instead: the mode with its records, changed.

Each change is a text edit of the frame's PTX (``lowering/pikgpu_to_ptx.py`` emits
it), refused when it finds nothing to edit, so that no variant times the frame unchanged.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from benchmarks.frame_edits import FRAME_EXPERIMENTS, RECORD_EXPERIMENTS
from proton_ik.mode import Mode

__all__ = ["FRAME_EXPERIMENTS", "KERNELS", "RECORD_EXPERIMENTS", "main", "variants"]

KERNELS = ("gelu", "layer_norm")
ROUNDS = 7


def variants(records: bool = False):
    from benchmarks.variants import Variant, part_variants

    mode = Mode()
    if records:  # the records' stores: to the buffer (stage=off), staged (the default), dropped
        direct = Mode(stage=False)
        return [
            Variant("plain", None),
            *(
                Variant(f"full/{name}", "proton_ik", str(direct), f"full/{name}")
                for name in RECORD_EXPERIMENTS
            ),
            Variant("proton_ik[stage=off]", "proton_ik", str(direct)),
            Variant("proton_ik", "proton_ik", str(mode)),
            Variant("proton_shared", "proton", "default"),
        ]
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
    parser.add_argument("--records", action="store_true", help="the records experiments instead")
    parser.add_argument("--kernels", default=",".join(KERNELS))
    args = parser.parse_args()
    names = args.kernels.split(",")
    scratch = Path(tempfile.mkdtemp(prefix="pik_frame_"))
    triton.knobs.cache.dir = str(scratch / "triton_cache")
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    compared = variants(args.records)
    ctx = harness.Context(args, num_sms, compared, harness.ScratchPool(), harness.ClockSampler(), scratch)
    problems = [p for p in kernels.suite(args.quick, num_sms) if p.name in names]
    results = compare(ctx, problems, compared, args.rounds)
    rows = ["| variant | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for variant in compared[1:]:
        cells = []
        for name in names:
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
