"""Write BENCHMARKS.md from a run's generated files: run.py's results.md, then the per-record
experiment's table (record_variants.py's output). Nothing in it is typed by hand.

    python benchmarks/report.py RESULTS_DIR RECORD_VARIANTS_MD > BENCHMARKS.md
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def main(results_dir: Path, variants: Path) -> str:
    results = (results_dir / "results.md").read_text()
    # Older runs recorded the output folder, a path on the machine that ran them.
    results = re.sub(r"--out \S+", "--out DIR", results)
    table = variants.read_text().strip()
    return (
        f"{results.rstrip()}\n\n## Where one record's cycles go\n\n"
        "`python benchmarks/record_variants.py`, the same run: each variant changes one thing in the "
        "PTX emitted for single records, in a loop of empty scopes (132 CTAs x 4 warps); cycles per "
        "record from the warps' own clocks. See docs/PERFORMANCE.md.\n\n"
        f"{table}\n"
    )


if __name__ == "__main__":
    sys.stdout.write(main(Path(sys.argv[1]), Path(sys.argv[2])))
