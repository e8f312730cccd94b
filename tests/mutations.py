"""Plant known bugs one at a time and report which CPU tests catch each (issue 13). Not a test module.

    python tests/mutations.py                 # every mutation, against the whole CPU suite
    python tests/mutations.py --only cta-id-drops-z -- tests/compile

Each run is a fresh ``pytest`` process in which one module is imported from its source text with
one edit applied; no file on disk changes, so a run interrupted at any point leaves the tree
as it was and never disturbs anyone else's tests. A baseline run without a mutation comes first:
a test that fails there is reported apart and never counted as catching a bug.

Every edit must match its module's source exactly once; when the source moves on, the script
says which mutation no longer applies rather than planting nothing.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    """One planted bug: in ``module``'s source, ``old`` (which must occur exactly once) becomes ``new``."""

    name: str
    module: str
    old: str
    new: str
    description: str

    def apply(self, source: str) -> str:
        count = source.count(self.old)
        if count != 1:
            raise SystemExit(
                f"mutation {self.name}: {self.old!r} occurs {count} times in {self.module}, not once; "
                "update tests/mutations.py to the module's current source"
            )
        return source.replace(self.old, self.new)


MUTATIONS = [
    Mutation(
        "epilogue-swaps-start-clock-and-time",
        "proton_ik.lowering.frame_ptx",
        '{"start_clock": START_CLOCK64, "start_time": START_TIME64}',
        '{"start_clock": START_TIME64, "start_time": START_CLOCK64}',
        "the epilogue stores the rebuilt start's globaltimer and clock64 into each other's fields",
    ),
    Mutation(
        "cta-id-drops-z",
        "proton_ik.lowering.frame_ptx",
        'f"\\tmad.lo.u32 \\t{CTA}, {CTA_Z}, {GRID_Y}, {CTA_Y};"',
        'f"\\tmov.u32 \\t{CTA}, {CTA_Y};"',
        "the linear CTA id is x + y * nx, without %ctaid.z",
    ),
    Mutation(
        "fit-uncentred",
        "proton_ik.viewer.tables.timebase",
        "cx, cy = dx - mean_dx[group], dy - mean_dy[group]",
        "cx, cy = dx, dy",
        "the clock-rate fit is uncentred: its slope is fitted through the earliest anchor",
    ),
    Mutation(
        "fit-drops-offset",
        "proton_ik.viewer.tables.timebase",
        "offset=fit.mean_dy - slope * fit.mean_dx,",
        "offset=np.zeros_like(slope),",
        "the fitted time offset is dropped: each line goes through its earliest anchor",
    ),
    Mutation(
        "end-passes-scope-work",
        "proton_ik.lowering.placement",
        "while after < end and sinkable(lines[after]) and not reads_any(lines[after], inside):",
        "while after < end and sinkable(lines[after]):",
        "a loop's end sinks past arithmetic that reads what its scope computed, and measures the wait",
    ),
    Mutation(
        "records-lose-l2-policy",
        "proton_ik.lowering.slots_ptx",
        'return f"\\t@{WRITER} st.global.L2::cache_hint.{shape} \\t{at}, {operands}, {RECORD_POLICY};"',
        'return f"\\t@{WRITER} st.global.{shape} \\t{at}, {operands};"',
        "the records' stores go without their L2 policy: their lines leave L2 between entries",
    ),
    Mutation(
        "capacity-unbounded",
        "proton_ik.mode",
        "return 1 <= entries <= MAX_CAPACITY and",
        "return 1 <= entries and",
        "the mode accepts any power-of-two capacity, with no upper bound",
    ),
    # Layout version 3 (issue 28)
    Mutation(
        "compact-pair-stores-its-end-clock",
        "proton_ik.lowering.slots_ptx",
        'ring.store(SLOT_DTYPE, {"tag": PAIR_WORD, "clock": begin}),',
        'ring.store(SLOT_DTYPE, {"tag": PAIR_WORD, "clock": CLOCK}),',
        "a one-slot pair stores its end's clock where its begin's goes",
    ),
    Mutation(
        "compact-limit-one-too-high",
        "proton_ik.lowering.slots_ptx",
        'f"\\tsetp.ge.u32 \\t{LONG_PAIR}, {PAIR_WORD}, {COMPACT_DURATION_LIMIT};",',
        'f"\\tsetp.ge.u32 \\t{LONG_PAIR}, {PAIR_WORD}, {COMPACT_DURATION_LIMIT + 1};",',
        "a pair of exactly 2**18 cycles takes one slot, its duration spilling into the scope id",
    ),
    Mutation(
        "long-pair-untallied",
        "proton_ik.lowering.slots_ptx",
        "_add(TALLY, 2),",
        "_add(TALLY, 0),",
        "a pair in two slots counts four records, not two",
    ),
    Mutation(
        "decoder-compact-end-one-late",
        "proton_ik.viewer.decode.slots",
        "clock + compact_duration(tag), second_clock)",
        "clock + compact_duration(tag) + 1, second_clock)",
        "the decoder reads a one-slot pair's end a cycle late",
    ),
]
BY_NAME = {m.name: m for m in MUTATIONS}


class _PatchedLoader(importlib.machinery.SourceFileLoader):
    """Compiles the module from its edited source, never from a cached .pyc."""

    def __init__(self, fullname: str, path: str, mutation: Mutation) -> None:
        super().__init__(fullname, path)
        self.mutation = mutation

    def get_code(self, fullname: str):
        source = Path(self.path).read_text()
        return compile(self.mutation.apply(source), self.path, "exec", dont_inherit=True)


class _PlantingFinder(importlib.abc.MetaPathFinder):
    """Finds the mutated module through the other finders (the editable install's among them),
    then swaps in the patching loader."""

    def __init__(self, mutation: Mutation) -> None:
        self.mutation = mutation

    def find_spec(self, fullname, path, target=None):
        if fullname != self.mutation.module:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                spec.loader = _PatchedLoader(fullname, spec.origin, self.mutation)
                return spec
        return None


class _Failures:
    """A pytest plugin that collects the node ids of failing tests (setup and teardown included)."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed and report.nodeid not in self.failed:
            self.failed.append(report.nodeid)

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.failed.append(report.nodeid)


def _child(mutation: str | None, result: Path, pytest_args: list[str]) -> int:
    """Run pytest in this process, with ``mutation`` planted; write the failing tests to ``result``."""
    import pytest

    if mutation is not None:
        sys.meta_path.insert(0, _PlantingFinder(BY_NAME[mutation]))
    failures = _Failures()
    code = pytest.main(["-q", "-p", "no:cacheprovider", *pytest_args], plugins=[failures])
    loaded = mutation is None or BY_NAME[mutation].module in sys.modules
    result.write_text(json.dumps({"failed": failures.failed, "exit": int(code), "loaded": loaded}))
    return 0


def _run(mutation: str | None, pytest_args: list[str], workdir: Path) -> dict:
    result = workdir / f"{mutation or 'baseline'}.json"
    command = [
        sys.executable,
        __file__,
        "--child",
        mutation or "",
        "--result",
        str(result),
        "--",
        *pytest_args,
    ]
    subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    if not result.exists():
        raise SystemExit(f"the pytest run for {mutation or 'the baseline'} crashed before reporting")
    return json.loads(result.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", action="append", choices=list(BY_NAME), help="run only these mutations")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("pytest_args", nargs="*", help="after --: what pytest runs (default: tests)")
    args = parser.parse_args()
    pytest_args = args.pytest_args or ["tests"]
    if args.child is not None:
        return _child(args.child or None, args.result, pytest_args)

    names = args.only or list(BY_NAME)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="mutations-") as workdir:
        baseline = _run(None, pytest_args, Path(workdir))
        print(f"baseline: {len(baseline['failed'])} failing", flush=True)
        for test in baseline["failed"]:
            print(f"  {test}")
        for name in names:
            outcome = _run(name, pytest_args, Path(workdir))
            caught = [t for t in outcome["failed"] if t not in baseline["failed"]]
            # A test that fails again without the mutation is flaky (or the tree changed under us).
            flaky = _run(None, caught, Path(workdir))["failed"] if caught else []
            caught = [t for t in caught if t not in flaky]
            results[name] = {"description": BY_NAME[name].description, "caught_by": caught, "flaky": flaky}
            verdict = f"caught by {len(caught)}" if caught else "NOT CAUGHT"
            if not outcome["loaded"]:
                verdict += f" ({BY_NAME[name].module} was never imported)"
            print(f"{name}: {verdict}", flush=True)
            for test in caught:
                print(f"  {test}")
            for test in flaky:
                print(f"  (failed, but also without the mutation: {test})")
    if args.json:
        args.json.write_text(
            json.dumps({"baseline_failed": baseline["failed"], "mutations": results}, indent=2)
        )
    return 0 if all(r["caught_by"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
