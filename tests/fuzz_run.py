"""The full fuzz run (not in CI): 10,000 malformed inputs across the three formats, each given to
``proton-ik show``, ``convert`` and ``diff`` in a worker process, with a time limit and its peak
memory measured.

    python tests/fuzz_run.py [--inputs 10000] [--workers 2] [--timeout 20] [--seed 0]

Counts, per command, tracebacks (an exception out of the command, or an exit code other than 0
and 1, or an error other than one line naming the file), hangs (past the time limit) and inputs
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

from fuzz.malformed import COMMANDS, MUTATIONS, malformed, run, said_one_error, seeds

ALLOWANCE = 128 << 20  # bytes: the decoder's fixed working set, beside 50x the input
RATIO = 50


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def _worker(jobs: mp.Queue, results: mp.Queue) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="proton-ik-fuzz-out-"))
    while (job := jobs.get()) is not None:
        number, command, path = job
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak to the current size
        before = _rss_kib("VmRSS:")
        began = time.perf_counter()
        try:
            code, errors = run(command, Path(path), scratch)
            if code == 0:
                outcome = "read"
            elif code == 1 and said_one_error(command, Path(path), errors):
                outcome = "refused"
            else:
                outcome = f"traceback:exit {code}: {errors[-500:]}"
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
        inputs += [(kind, command, path, len(data)) for command in COMMANDS]
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
                number, (kind, command, path, size) = pending.pop()
                jobs.put((number, command, str(path)))
                workers[slot] = (process, jobs, number, time.perf_counter())
            elif job is not None and time.perf_counter() - started > args.timeout:
                process.kill()
                hangs += 1
                done += 1
                outcomes[(inputs[job][1], "hang")] += 1
                print(f"hang: {inputs[job][1]} on {inputs[job][2]}", file=sys.stderr)
                start(slot)
        try:
            number, outcome, peak, _ = results.get(timeout=0.05)
        except Exception:
            continue
        slot = next(s for s, w in workers.items() if w[2] == number)
        process, jobs, _, _ = workers[slot]
        workers[slot] = (process, jobs, None, 0.0)
        done += 1
        kind, command, path, size = inputs[number]
        outcomes[(command, outcome.split(":")[0])] += 1
        if outcome.startswith("traceback"):
            tracebacks[f"{command}: {outcome.splitlines()[-1]}"] += 1
            print(f"traceback of {command} on {path}:\n{outcome[10:]}", file=sys.stderr)
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
    print(
        f"{len(inputs) // len(COMMANDS)} inputs ({', '.join(kinds)}), each to {', '.join(COMMANDS)} ({elapsed:.0f} s)"
    )
    for command in COMMANDS:
        counts = {outcome: n for (name, outcome), n in sorted(outcomes.items()) if name == command}
        print(f"  {command}: {counts}")
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
