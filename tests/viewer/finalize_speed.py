"""How fast finalize is: a session file to a ``.pftrace`` (``render_session``, what finalize runs);
and, apart, loading the tables (``load``) and writing Chrome JSON from them.

    python tests/viewer/finalize_speed.py [--shape wide|deep|many|all] [--records 2000000] [--runs 5]

Sessions are written once with the tests' software writer model (conftest.py) into
``--cache`` and reused, stored as the runtime stores them (uncompressed, trimmed). Shapes, each about ``--records`` records:

    wide   8 launches of 1024 CTAs x 8 warps (8192 units per launch), few records per unit
    deep   1 launch of 132 CTAs x 8 warps, thousands of records per unit
    many   1000 launches of 16 CTAs x 4 warps

Prints finalize's records per second, seconds per million records for each stage, and the trace
files' bytes per event: the median over ``--runs`` runs, each in a fresh process (memory a
process touches first costs more).
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

import numpy as np

from proton_ik.viewer import SessionWriter, load, render_session

_spec = importlib.util.spec_from_file_location("viewer_conftest", Path(__file__).with_name("conftest.py"))
_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_model)
FakeLaunch, SmTimer = _model.FakeLaunch, _model.SmTimer

RECORDS_PER_ITERATION = 6
SHAPES = {  # launches, CTAs, units per CTA
    "wide": (8, 1024, 8),
    "deep": (1, 132, 8),
    "many": (1000, 16, 4),
}


def build_session(path: Path, shape: str, records: int, sms: int = 132) -> None:
    """A session whose every unit runs ``outer(a){ inner(b) } c`` in a loop, as ``busy_launch``."""
    launches, num_ctas, units = SHAPES[shape]
    iterations = max(1, records // (launches * num_ctas * units * RECORDS_PER_ITERATION))
    capacity = 1 << int(np.ceil(np.log2(iterations * RECORDS_PER_ITERATION)))
    rng = np.random.default_rng(0)
    timers = [SmTimer(1.755, 10_000_000 * (s + 1), 1_700_000_000_000_000_000 + 1_000 * s) for s in range(sms)]
    # Cycles after each record of one iteration: a begins, b begins, b ends, a ends, c begins, c ends.
    low = np.array([50, 100, 300, 20, 10, 40])
    high = np.array([51, 200, 900, 21, 11, 80])
    scope = np.tile([0, 1, 1, 0, 2, 2], iterations)
    is_end = np.tile([0, 0, 1, 1, 0, 1], iterations).astype(bool)
    with SessionWriter(path, {"name": shape, "time_shift_cycles": 40}, compress=False, trim=True) as writer:
        for launch in range(launches):
            fake = FakeLaunch(units=units, capacity=capacity, num_ctas=num_ctas)
            start = 400_000 * launch
            for cta in range(num_ctas):
                sm = cta % sms
                timer = timers[sm]
                fake.cta(cta, sm)
                base = timer.clock0 + start + (cta // sms) * 400_000
                for u in range(units):
                    clock = base + int(rng.integers(0, 100))
                    unit = fake.unit(cta, u, clock, timer.time(clock))
                    steps = rng.integers(np.tile(low, iterations), np.tile(high, iterations))
                    clocks = clock + np.cumsum(steps)
                    unit.record_many(scope, is_end, clocks)
                    end = int(clocks[-1]) + 30
                    unit.finish(end, timer.time(end))
            writer.add_launch(fake.meta(launch=launch, kernel=f"kernel{launch % 2}"), fake.buffer)


def measure(path: Path, out: Path) -> dict[str, float]:
    began = time.perf_counter()
    stats = render_session(path, {"pftrace": out / "t.pftrace"}, progress=False)
    finalized = time.perf_counter()
    trace = load(path)
    loaded = time.perf_counter()
    chrome = trace.write_chrome(out / "t.json", progress=False)
    chrome_done = time.perf_counter()
    millions = stats.records / 1e6
    return {
        "records": stats.records,
        "events": stats.events,
        "finalize records/s": stats.records / (finalized - began),
        "finalize (.pik to .pftrace) s/1M records": (finalized - began) / millions,
        "load (tables) s/1M records": (loaded - finalized) / millions,
        "json from tables s/1M records": (chrome_done - loaded) / millions,
        "pftrace bytes/event": (out / "t.pftrace").stat().st_size / stats.events,
        "json bytes/event": chrome.stat().st_size / stats.events,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=[*SHAPES, "all"], default="all")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "proton_ik_finalize_speed"
    )
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # one run, in a fresh process
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.cache)))
        return
    args.cache.mkdir(parents=True, exist_ok=True)
    for shape in SHAPES if args.shape == "all" else [args.shape]:
        path = args.cache / f"{shape}-{args.records}-trimmed.pik"
        if not path.exists():
            build_session(path, shape, args.records)
        runs = [
            json.loads(
                subprocess.run(
                    [sys.executable, __file__, "--measure", str(path), "--cache", str(args.cache)],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )
            for _ in range(args.runs)
        ]
        print(f"{shape}: median of {args.runs} run(s)")
        for key in runs[0]:
            value = statistics.median(run[key] for run in runs)
            print(f"  {key:40s} {value:,.3f}" if isinstance(value, float) else f"  {key:40s} {value:,}")


if __name__ == "__main__":
    main()
