"""How fast the HTML report is at 10M records: writing it (``write_report``), its size, and the time
headless chromium takes to draw its first screen.

    python tests/viewer/report_speed.py [--launches 10] [--runs 3] [--cache DIR]

The session is ``finalize_speed``'s "large" shape with ``--launches`` launches: 16384 CTAs x 8
warps on 132 SMs, 4 scopes a warp, 1,048,576 records a launch (10 launches: 10.5M records), written
once into ``--cache``. Each run writes the report in a fresh process. The first screen is timed
as chromium's ``--screenshot`` of a 1400x1000 window, the report against an empty page (chromium's
own start), the median of ``--runs``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
_spec = importlib.util.spec_from_file_location(
    "finalize_speed", Path(__file__).with_name("finalize_speed.py")
)
_speed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_speed)


def screenshot_seconds(page: Path, folder: Path) -> float:
    """Wall time of headless chromium's screenshot of ``page``'s first screen."""
    began = time.perf_counter()
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={folder / 'profile'}",
            f"--screenshot={folder / 'shot.png'}",
            "--window-size=1400,1000",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - began


def measure(session: Path, out: Path) -> dict[str, float]:
    """One run, in this process: the report written, timed from the import on."""
    began = time.perf_counter()
    from proton_ik.viewer.report import write_report

    write_report(session, out)
    return {"write s": time.perf_counter() - began, "bytes": out.stat().st_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "proton_ik_report_speed")
    parser.add_argument("--measure", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    args.cache.mkdir(parents=True, exist_ok=True)
    shape = f"report{args.launches}"
    session = args.cache / f"{shape}.pik"
    _speed.PAIRED_SHAPES[shape] = (args.launches, *_speed.PAIRED_SHAPES["large"][1:])
    if not session.exists():
        _speed.build_paired_session(session, shape)
    out = args.cache / f"{shape}.html"
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, __file__, "--measure", str(session), str(out)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        for _ in range(args.runs)
    ]
    empty = args.cache / "empty.html"
    empty.write_text("<!DOCTYPE html><html><body></body></html>")
    draws = [screenshot_seconds(out, args.cache) for _ in range(args.runs)]
    blanks = [screenshot_seconds(empty, args.cache) for _ in range(args.runs)]
    records = args.launches * _speed.PAIRED_SHAPES["large"][1] * _speed.PAIRED_SHAPES["large"][2] * 8
    print(
        f"{session.name}: {records:,} records, {session.stat().st_size / 1e6:,.0f} MB; median of {args.runs} run(s)"
    )
    print(
        f"  report written (fresh process, imports included) s {statistics.median(r['write s'] for r in runs):8.2f}"
    )
    print(f"  report size MB                                     {runs[0]['bytes'] / 1e6:8.2f}")
    print(f"  chromium first screen (screenshot) s               {statistics.median(draws):8.2f}")
    print(f"  chromium, an empty page s                          {statistics.median(blanks):8.2f}")


if __name__ == "__main__":
    main()
