"""The full fuzz run (not in CI): 10,000 malformed inputs across the three formats, each read
as ``proton-ik show`` reads it in a worker process, with a time limit and its peak memory measured.

    python tests/fuzz_run.py [--inputs 10000] [--workers 2] [--timeout 20] [--seed 0]

Counts tracebacks (any exception but SessionFileError), hangs (past the time limit) and inputs
whose peak memory passes 50x their size plus a fixed allowance (``ALLOWANCE``). The peak is the
worker's resident high-water mark over the read, reset before each input (Linux clear_refs), less
what it held before. The last result is in docs/ROBUSTNESS.md.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fuzz.malformed import MUTATIONS, malformed, seeds, show

from proton_ik.viewer import SessionFileError

ALLOWANCE = 128 << 20  # bytes: the decoder's fixed working set, beside 50x the input
RATIO = 50


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def _worker(jobs: mp.Queue, results: mp.Queue) -> None:
    while (job := jobs.get()) is not None:
        number, path = job
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak to the current size
        before = _rss_kib("VmRSS:")
        began = time.perf_counter()
        try:
            show(Path(path))
            outcome = "read"
        except SessionFileError:
            outcome = "refused"
        except BaseException:
            outcome = "traceback:" + traceback.format_exc(limit=-3)
        peak = (_rss_kib("VmHWM:") - before) * 1024
        results.put((number, outcome, max(peak, 0), time.perf_counter() - began))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="proton-ik-fuzz-"))
    seed_files = seeds(folder)
    rng = random.Random(args.seed)
    kinds = list(MUTATIONS)
    inputs = []
    for number in range(args.inputs):
        kind = kinds[number % len(kinds)]
        suffix, data = malformed(kind, seed_files, random.Random(rng.getrandbits(64)))
        path = folder / f"{number:05d}{suffix}"
        path.write_bytes(data)
        inputs.append((kind, path, len(data)))
    context = mp.get_context("fork")
    results: mp.Queue = context.Queue()
    outcomes, tracebacks, hangs, over, worst = Counter(), Counter(), 0, [], (0.0, None)
    largest = (0, None)
    pending = list(enumerate(inputs))[::-1]
    workers: dict[int, tuple] = {}  # worker slot -> (process, jobs queue, current job, started)
    began = time.perf_counter()

    def start(slot: int) -> None:
        jobs = context.Queue()
        process = context.Process(target=_worker, args=(jobs, results), daemon=True)
        process.start()
        workers[slot] = (process, jobs, None, 0.0)

    for slot in range(args.workers):
        start(slot)
    done = 0
    while done < len(inputs):
        for slot, (process, jobs, job, started) in list(workers.items()):
            if job is None and pending:
                number, (kind, path, size) = pending.pop()
                jobs.put((number, str(path)))
                workers[slot] = (process, jobs, number, time.perf_counter())
            elif job is not None and time.perf_counter() - started > args.timeout:
                process.kill()
                hangs += 1
                done += 1
                outcomes["hang"] += 1
                print(f"hang: {inputs[job][1]}", file=sys.stderr)
                start(slot)
        try:
            number, outcome, peak, _ = results.get(timeout=0.05)
        except Exception:
            continue
        slot = next(s for s, w in workers.items() if w[2] == number)
        process, jobs, _, _ = workers[slot]
        workers[slot] = (process, jobs, None, 0.0)
        done += 1
        kind, path, size = inputs[number]
        outcomes[outcome.split(":")[0]] += 1
        if outcome.startswith("traceback"):
            tracebacks[outcome.splitlines()[-1]] += 1
            print(f"traceback on {path}:\n{outcome[10:]}", file=sys.stderr)
        if peak > RATIO * size + ALLOWANCE:
            over.append((path, size, peak))
        if peak > largest[0]:
            largest = (peak, (path, size))
        ratio = peak / size
        if ratio > worst[0]:
            worst = (ratio, (path, size, peak))
    for _, jobs, _, _ in workers.values():
        jobs.put(None)
    elapsed = time.perf_counter() - began
    print(f"{len(inputs)} inputs ({', '.join(kinds)}; {elapsed:.0f} s): {dict(outcomes)}")
    print(f"tracebacks: {sum(tracebacks.values())}, hangs (> {args.timeout:.0f} s): {hangs}")
    print(f"over {RATIO}x size + {ALLOWANCE >> 20} MiB: {len(over)}")
    if worst[1]:
        path, size, peak = worst[1]
        print(f"largest peak/size: {worst[0]:.0f}x ({peak / 2**20:.1f} MiB for {size:,} bytes, {path.name})")
    if largest[1]:
        path, size = largest[1]
        print(f"largest peak: {largest[0] / 2**20:.1f} MiB ({size:,}-byte input, {path.name})")
    for message, count in tracebacks.most_common():
        print(f"  {count} x {message}")


if __name__ == "__main__":
    main()
