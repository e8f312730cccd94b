"""Issue 11's benchmark section without a GPU: the kernels of events, marks and values against
scopes (benchmarks/kernels/micro.py) compiled for sm_90 plain and in the default mode, and the
report of the section (benchmarks/report/event_cost.py) rendered from results of known numbers.

Everything of ``benchmarks`` runs in a subprocess from the repository root, as
tests/test_benchmarks_report.py explains: xdsl installs a top-level package of the same name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "results.json"
UNROLL = 8  # micro.RECORD_COST_UNROLL, checked below
KERNELS = ["scope", "event", "event_const", "mark", "value"]


def run_python(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


# --- the kernels, compiled for sm_90 ------------------------------------------------------------

COMPILE_SCRIPT = r"""
import json, re, tempfile, triton
from benchmarks import compile_check, run
from benchmarks.kernels import micro
from benchmarks.occupancy import cubin_resources
from proton_ik.mode import Mode
triton.knobs.cache.dir = tempfile.mkdtemp()
found = {"unroll": micro.RECORD_COST_UNROLL, "records_per_iter": micro.RECORDS_PER_ITER,
         "sections": list(run.SECTIONS), "kernels": {},
         "compile_check": [fn.__name__ for fn, _, _ in micro.MICRO_KERNELS.values()]}
for name, (fn, what) in micro.EVENT_COST_KERNELS.items():
    kernel = found["kernels"][name] = {"what": what, "function": fn.__name__}
    for label, mode in (("plain", None), ("proton_ik", Mode())):
        compiled = compile_check.compile_kernel(fn, {"out_ptr": "*i64", "n_iters": "i32"},
            {"BLOCK": micro.MICRO_BLOCK, "UNROLL": micro.RECORD_COST_UNROLL}, micro.MICRO_OPTIONS, mode)
        markers = [line for line in compiled.asm["ttir"].splitlines() if "pik.marker" in line]
        meta = getattr(compiled.metadata, "proton_ik", None) or {}
        kernel[label] = {
            "kinds": [re.search(r"kind = \\22(\w+)\\22", m).group(1) for m in markers],
            "index_reg": sum("index_reg = " in m for m in markers),
            "index": [int(i) for m in markers for i in re.findall(r"index = (\d+)", m)],
            "values": sum("value = " in m for m in markers),
            "names": [[s["name"], s.get("kind", "scope")] for s in meta.get("scopes", [])],
            "registers": cubin_resources(compiled.asm["cubin"])[0],
        }
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def compiled() -> dict:
    run = run_python("-c", COMPILE_SCRIPT)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_every_kernel_records_the_same_per_iteration(compiled: dict) -> None:
    assert compiled["unroll"] == UNROLL and compiled["records_per_iter"] == 2
    assert list(compiled["kernels"]) == KERNELS  # the scope first: the baseline
    for name, kernel in compiled["kernels"].items():
        assert kernel["plain"]["kinds"] == [] and kernel["plain"]["names"] == [], name
        assert len(kernel["proton_ik"]["kinds"]) == 2 * UNROLL, name
        assert kernel["proton_ik"]["registers"] > 0


def test_each_kernel_records_what_its_row_says(compiled: dict) -> None:
    kernels = {name: k["proton_ik"] for name, k in compiled["kernels"].items()}
    assert Counter(kernels["scope"]["kinds"]) == {"begin": UNROLL, "end": UNROLL}
    assert kernels["scope"]["names"] == [["empty", "scope"]]
    for name in ("event", "event_const"):
        assert Counter(kernels[name]["kinds"]) == {"event_start": UNROLL, "event_end": UNROLL}
        assert kernels[name]["names"] == [["pair", "event"]]
    # the loop counter % 2: a register; the unrolled copy's number % 2: constants 0, 1, 0, 1, ...
    assert kernels["event"]["index_reg"] == 2 * UNROLL and kernels["event"]["index"] == []
    assert kernels["event_const"]["index_reg"] == 0
    assert kernels["event_const"]["index"] == [u % 2 for u in range(UNROLL) for _ in "se"]
    for name in ("mark", "value"):
        assert kernels[name]["kinds"] == ["mark"] * 2 * UNROLL
        assert kernels[name]["names"] == [["first", "mark"], ["second", "mark"]]
    assert kernels["mark"]["values"] == 0 and kernels["value"]["values"] == 2 * UNROLL


def test_the_section_runs_before_sampling_and_compile_check_covers_its_kernels(compiled: dict) -> None:
    sections = compiled["sections"]
    assert sections[-1] == "sampling"
    assert sections.index("record") < sections.index("events") < sections.index("sampling")
    functions = [kernel["function"] for kernel in compiled["kernels"].values()]
    assert functions[0] == "record_cost_kernel" and len(set(functions)) == len(KERNELS)
    assert set(functions) <= set(compiled["compile_check"])
    help_text = run_python("-m", "benchmarks.run", "--help").stdout
    assert "- events (event_cost.py)" in help_text


# --- the report ----------------------------------------------------------------------------------

RENDER_SCRIPT = """
import json, sys
from benchmarks import report
print(json.dumps([[report.render(r), report.summary(r)] for r in json.load(sys.stdin)]))
"""
SMI_MHZ = 1980.0
L = 1024


def _variant(cycles_per_record: float, device_ns_per_record: float, registers: int) -> dict:
    records = 2 * L
    return {
        "registers": registers,
        "spills": 0,
        "iters": {
            "0": {"records_per_warp": 0, "clock_cycles": 400.0, "device_ms": 0.003},
            str(L): {
                "records_per_warp": records,
                "clock_cycles": 400.0 + records * cycles_per_record,
                "device_ms": 0.003 + records * device_ns_per_record / 1e6,
                "cycles_per_record": cycles_per_record,
                "device_ns_per_record": device_ns_per_record,
                "device_cycles_per_record": device_ns_per_record * SMI_MHZ / 1000.0,
            },
        },
    }


def events_section(event_cycles: float) -> dict:
    """The section as a GPU run writes it; proton_ik's cycles per record by the clock: the scope
    8, an event ``event_cycles``, an event of constant index 9.6, a mark 8.8, a value 10."""
    ours = {"scope": 8.0, "event": event_cycles, "event_const": 9.6, "mark": 8.8, "value": 10.0}
    return {
        "errors": {},
        "grid": [132, 1, 1],
        "warps_per_cta": 4,
        "unroll": UNROLL,
        "records_per_iter": 2,
        "rounds": 7,
        "smi_mhz_used": SMI_MHZ,
        "kernels": {
            name: {
                "what": f"what {name} records",
                "variants": {"plain": _variant(0.0, 0.0, 16), "proton_ik": _variant(cycles, cycles / 2, 30)},
            }
            for name, cycles in ours.items()
        },
    }


@pytest.fixture(scope="module")
def rendered() -> dict[str, tuple[str, str]]:
    committed = json.loads(RESULTS.read_text())
    without = {key: value for key, value in committed.items() if key != "events"}
    cases = {
        "absent": without,
        "over": {**committed, "events": events_section(12.0)},
        "within": {**committed, "events": events_section(9.9)},
        "failed": {**committed, "events": {"error": "RuntimeError('no GPU')"}},
    }
    run = run_python("-c", RENDER_SCRIPT, stdin=json.dumps(list(cases.values())))
    assert run.returncode == 0, run.stderr[-4000:]
    return dict(zip(cases, map(tuple, json.loads(run.stdout)), strict=True))


HEADING = "## Events, marks and values against scopes (issue 11)"
GOAL = "issue 11: an event record costs at most 1.25x a scope record (clock)"


def test_the_table_shows_each_kernel_against_the_scope(rendered: dict) -> None:
    text, summary = rendered["over"]
    assert HEADING in text
    section = text[text.index(HEADING) :]
    assert "at L=1024 iterations against L=0" in section and "(1980 MHz), median of 7" in section
    # the scope: 8 cycles by the clock, 4 ns = 7.92 cycles by device time; x scope 1.00
    assert (
        "| scope | what scope records | 2,048 | 8.0 | 1.00 | 7.9 | 1.00 | 4.00 | 0.0 | 16 / 30 |" in section
    )
    assert (
        "| event | what event records | 2,048 | 12.0 | 1.50 | 11.9 | 1.50 | 6.00 | 0.0 | 16 / 30 |" in section
    )
    assert (
        "| value | what value records | 2,048 | 10.0 | 1.25 | 9.9 | 1.25 | 5.00 | 0.0 | 16 / 30 |" in section
    )
    # after the per-record cost section, before the next one
    assert text.index("## Per-record cost") < text.index(HEADING)
    assert "scope 8.0, event 12.0 (1.50x), event_const 9.6 (1.20x), mark 8.8 (1.10x)" in summary


def test_the_target_row_is_judged_from_the_same_numbers(rendered: dict) -> None:
    over, within = rendered["over"][0], rendered["within"][0]
    assert (
        f"| {GOAL} | event 1.50x, event_const 1.20x (scope 8.0 cycles) | **no** | event: 12.0 cycles per "
        "record against 8.0 for a scope, 10.0 allowed |"
    ) in over
    assert f"| {GOAL} | event 1.24x, event_const 1.20x (scope 8.0 cycles) | yes |  |" in within


def test_a_run_without_the_section_renders_as_before(rendered: dict) -> None:
    text, summary = rendered["absent"]
    assert HEADING not in text and "issue 11" not in text and "events against scopes" not in summary
    # The committed report, less the section and its target row, is the same text.
    committed = (ROOT / "BENCHMARKS.md").read_text()
    assert HEADING in committed and GOAL in committed
    target_row = next(line for line in committed.splitlines() if line.startswith(f"| {GOAL} |"))
    section = committed[committed.index(HEADING) : committed.index("## ", committed.index(HEADING) + 3)]
    assert text == committed.replace(target_row + "\n", "").replace(section, "")


def test_a_failed_section_is_listed_and_its_target_says_why(rendered: dict) -> None:
    text, _ = rendered["failed"]
    assert HEADING not in text
    assert f"| {GOAL} | - | not measured | failed: RuntimeError('no GPU') |" in text
    assert "- events: RuntimeError('no GPU')" in text.split("## Sections that failed")[1]
