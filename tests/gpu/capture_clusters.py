"""Capture the cluster session that the CPU tests decode: a ``tl.dot`` matmul launched as
thread-block clusters of two CTAs (``cluster_kernels``, Hopper and later).

Run on a GPU machine from the repository root: ``python tests/gpu/capture_clusters.py OUT_DIR``.
It writes ``clusters.pik`` (8 programs, so 16 CTAs in 8 clusters, 4 warps each, one "k_step"
scope per K step: a few kB) and prints one JSON line: the file's size, the CTAs and clusters
found, whether each CTA's cluster and rank are the ones Triton's launch gives it (cluster =
CTA // num_ctas, rank = CTA % num_ctas), the worst start and end skews, and whether the result
matches torch's.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch

import proton_ik

sys.path.insert(0, str(Path(__file__).parent))
import cluster_kernels as ck

NUM_CTAS = 2


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    a = torch.randn(ck.M, ck.K, device="cuda", dtype=torch.float16)
    b = torch.randn(ck.K, ck.N, device="cuda", dtype=torch.float16)
    c = torch.empty(ck.M, ck.N, device="cuda", dtype=torch.float32)
    ck.launch(a, b, c, NUM_CTAS)  # compile and warm up outside the session
    proton_ik.start("clusters", out_dir=out_dir / "work", formats=())
    ck.launch(a, b, c, NUM_CTAS)
    torch.cuda.synchronize()
    result = proton_ik.finalize()
    target = out_dir / "clusters.pik"
    shutil.copy(result.paths["session"], target)
    units, clusters = result.trace.units, result.trace.clusters
    ctas = units.groupby("cta")[["cluster", "cluster_rank", "sm"]].first()
    exact = bool(
        (ctas["cluster"] == ctas.index // NUM_CTAS).all()
        and (ctas["cluster_rank"] == ctas.index % NUM_CTAS).all()
    )
    report = {
        "clusters.pik": target.stat().st_size,
        "device": torch.cuda.get_device_name(),
        "num_ctas": NUM_CTAS,
        "programs": ck.grid()[0],
        "ctas": len(ctas),
        "clusters": len(clusters),
        "cluster sizes": sorted(set(clusters["size"].tolist())),
        "cluster = cta // num_ctas and rank = cta % num_ctas": exact,
        "clusters on one SM": int((clusters["sms"].map(lambda sms: len(set(sms))) == 1).sum()),
        "worst start skew ns": int(clusters["start_skew_ns"].max()),
        "worst end skew ns": int(clusters["end_skew_ns"].max()),
        "problems": result.trace.problems,
        "matches torch": bool(torch.allclose(c, a.float() @ b.float(), atol=1e-2, rtol=1e-2)),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
