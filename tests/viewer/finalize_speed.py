"""How fast finalize is: a session file to a ``.pftrace`` (``render_session``, what finalize runs);
and, apart, loading the tables (``load``) and writing Chrome JSON from them.

    python tests/viewer/finalize_speed.py [--shape wide|deep|many|launches|large|all] [--records 2000000]
        [--runs 5] [--finalize-only]

Sessions are written once into ``--cache`` and reused. The first three come from the tests'
software writer model (conftest.py), each about ``--records`` records of single begin and end
records, stored trimmed:

    wide   8 launches of 1024 CTAs x 8 warps (8192 units per launch), few records per unit
    deep   1 launch of 132 CTAs x 8 warps, thousands of records per unit
    many   1000 launches of 16 CTAs x 4 warps

The others are written as the runtime writes a kernel whose segments are sized from the code
(capacity 4): raw buffers, one pair entry per scope, scopes one after another, metadata as the
launch hooks give it, CTAs in waves of ``RESIDENT`` at once on an SM, as on the device (a CTA's
slot track is shared with the CTAs before and after it); ``--records`` does not apply:

    launches  4010 launches of 256 CTAs x 4 warps, 3 scopes per warp (6144 records per launch)
    large     5 launches of 16384 CTAs x 8 warps, 4 scopes per warp (1,048,576 records per launch)
    kernels   100 launches of 4096 CTAs x 4 warps, 1 scope per warp (32,768 records per launch):
              what unscoped=kernel records of a compiled model's kernels
    small     20,000 launches of 16 CTAs x 4 warps, 1 scope per warp (128 records per launch):
              a loop of short kernels, as many launches as records allow
    gelu      1000 launches of 64 CTAs x 4 warps, 3 scopes per warp (1536 records per launch):
              the benchmark runner's host section

Sessions of more than one part (``render.plan.PART_BYTES`` of stored data) render in parts,
on ``--workers`` processes (default: one per core). Prints finalize's records per second, seconds per million records for each stage, and the trace
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

from proton_ik.contract.layout import (
    CTA_HEADER_DTYPE,
    ENTRY_BYTES,
    ENTRY_DTYPE,
    MAGIC,
    READ_VERSIONS,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    VERSION,
    BufferLayout,
)
from proton_ik.contract.tags import make_tag
from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer import load, render_session

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
PAIRED_SHAPES = {  # launches, CTAs, units per CTA, scopes per unit
    "launches": (4010, 256, 4, 3),
    "large": (5, 16384, 8, 4),
    "kernels": (100, 4096, 4, 1),  # unscoped=kernel on a compiled model: many CTAs, one scope a warp
    "small": (20_000, 16, 4, 1),  # issue 24's many small launches: 128 records each
    "gelu": (1000, 64, 4, 3),  # the runner's host section: 1000 launches of its short GELU
}
PAIRED_CAPACITY = 4
RESIDENT = 8  # CTAs at once on an SM: four_scopes' 8 warps on an H100 (64 warps an SM)


def build_session(path: Path, shape: str, records: int, sms: int = 132, version: int = VERSION) -> None:
    """A session whose every unit runs ``outer(a){ inner(b) } c`` in a loop, as ``busy_launch``,
    in layout ``version``."""
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
            fake = FakeLaunch(units=units, capacity=capacity, num_ctas=num_ctas, version=version)
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


def build_paired_session(path: Path, shape: str, sms: int = 132) -> None:
    """A session as the runtime writes a kernel sized from its code: raw buffers, every unit writing
    one pair entry per scope (scopes one after another), its clocks as an SM at 1.755 GHz reads them."""
    launches, num_ctas, units, scopes = PAIRED_SHAPES[shape]
    layout = BufferLayout(units=units, capacity=PAIRED_CAPACITY)
    rng = np.random.default_rng(0)
    ghz, clock0 = 1.755, 10_000_000 * (np.arange(sms) + 1)
    time0 = 1_700_000_000_000_000_000 + 1_000 * np.arange(sms)
    names = ["load", "compute", "store", "reduce"][:scopes]
    profile = {
        "mode": "instrumentation",
        "num_warps": units,
        "warps_per_unit": 1,
        "layout": layout.to_dict(),
        "scopes": [{"id": i, "name": n, "line": 20 + 3 * i} for i, n in enumerate(names)],
        "capacity": {
            "entries": PAIRED_CAPACITY,
            "source": "bound",
            "bound": scopes,
            "reason": "PTX: no cycle",
        },
    }
    cta = np.arange(num_ctas)
    sm = cta % sms
    info = {"name": shape, "time_shift_cycles": {"single": 20, "pair": 2}}
    with SessionWriter(path, info, compress=False, trim=False) as writer:
        for launch in range(launches):
            buffer = np.full(num_ctas * layout.cta_bytes, 0xCD, dtype=np.uint8)
            header = np.ndarray((num_ctas,), CTA_HEADER_DTYPE, buffer, 0, (layout.cta_bytes,))
            for name, value in {
                "magic": MAGIC, "version": VERSION, "cta": cta, "smid": sm, "nctaid_x": num_ctas,
                "nctaid_y": 1, "nctaid_z": 1, "units": units, "capacity": PAIRED_CAPACITY, "reserved": 0,
                "cluster": cta, "cluster_rank": 0, "cluster_ctas": 1,
            }.items():  # fmt: skip
                header[name] = value
            # Waves of RESIDENT CTAs per SM, a wave's CTAs overlapping as on the device.
            wave, in_wave = divmod(cta // sms, RESIDENT)
            start = clock0[sm] + 2_000_000 * launch + wave * 9_000 + in_wave * 50
            start = start[:, None]
            start = start + rng.integers(0, 100, (num_ctas, units))
            steps = rng.integers(40, 400, (num_ctas, units, 2 * scopes + 1))
            clocks = start[..., None] + np.cumsum(steps, axis=-1)
            end = clocks[..., -1] + 30
            offset = layout.unit_offset(0)
            unit = np.ndarray(
                (num_ctas, units), UNIT_HEADER_DTYPE, buffer, offset, (layout.cta_bytes, layout.unit_bytes)
            )

            def time(clock: np.ndarray) -> np.ndarray:
                now = time0[sm][:, None] + np.floor((clock - clock0[sm][:, None]) / ghz).astype(np.int64)
                return now - now % 32

            unit["start_clock"], unit["start_time"] = start, time(start)
            unit["end_clock"], unit["end_time"] = end, time(end)
            unit["entries"], unit["tally"], unit["end_magic"] = scopes, 0, MAGIC
            entries = np.ndarray(
                (num_ctas, units, scopes),
                ENTRY_DTYPE,
                buffer,
                offset + UNIT_HEADER_BYTES,
                (layout.cta_bytes, layout.unit_bytes, ENTRY_BYTES),
            )
            entries["first"]["tag"] = [make_tag(i, False, paired=True) for i in range(scopes)]
            entries["second"]["tag"] = [make_tag(i, True) for i in range(scopes)]
            entries["first"]["clock"] = clocks[..., 0 : 2 * scopes : 2] & 0xFFFFFFFF
            entries["second"]["clock"] = clocks[..., 1 : 2 * scopes : 2] & 0xFFFFFFFF
            meta = {
                "launch": launch,
                "kernel": "fused_kernel",
                "stream": 7,
                "device": 0,
                "num_warps": units,
                "num_ctas": num_ctas,
                "profile": profile,
            }
            writer.add_launch(meta, buffer)


def measure(path: Path, out: Path, tables: bool, workers: int | None = None) -> dict[str, float]:
    began = time.perf_counter()
    stats = render_session(path, {"pftrace": out / "t.pftrace"}, progress=False, workers=workers)
    finalized = time.perf_counter()
    finalize = {
        "records": stats.records,
        "events": stats.events,
        "launches/s": stats.launches / (finalized - began),
        "finalize records/s": stats.records / (finalized - began),
        "finalize (.pik to .pftrace) s/1M records": (finalized - began) / (stats.records / 1e6),
        "pftrace bytes/event": (out / "t.pftrace").stat().st_size / stats.events,
    }
    if not tables:
        return finalize
    trace = load(path)
    loaded = time.perf_counter()
    chrome = trace.write_chrome(out / "t.json", progress=False)
    chrome_done = time.perf_counter()
    millions = stats.records / 1e6
    return {
        **finalize,
        "load (tables) s/1M records": (loaded - finalized) / millions,
        "json from tables s/1M records": (chrome_done - loaded) / millions,
        "json bytes/event": chrome.stat().st_size / stats.events,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=[*SHAPES, *PAIRED_SHAPES, "all"], default="all")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "proton_ik_finalize_speed"
    )
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--layout", type=int, choices=READ_VERSIONS, default=VERSION, help="the model shapes' layout version"
    )
    parser.add_argument("--finalize-only", action="store_true", help="skip the tables and the JSON")
    parser.add_argument(
        "--workers", type=int, help="processes for a session of several parts (default: one per core)"
    )
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # one run, in a fresh process
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.cache, not args.finalize_only, args.workers)))
        return
    args.cache.mkdir(parents=True, exist_ok=True)
    for shape in [*SHAPES, *PAIRED_SHAPES] if args.shape == "all" else [args.shape]:
        if shape in PAIRED_SHAPES:
            path = args.cache / f"{shape}-resident{RESIDENT}.pik"
            if not path.exists():
                build_paired_session(path, shape)
        else:
            layout = "" if args.layout == VERSION else f"-layout{args.layout}"
            path = args.cache / f"{shape}-{args.records}{layout}-trimmed.pik"
            if not path.exists():
                build_session(path, shape, args.records, version=args.layout)
        runs = [
            json.loads(
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--measure",
                        str(path),
                        "--cache",
                        str(args.cache),
                        *(["--finalize-only"] if args.finalize_only else []),
                        *(["--workers", str(args.workers)] if args.workers else []),
                    ],
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
