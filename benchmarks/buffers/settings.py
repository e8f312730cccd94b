"""How long and how much each buffers measurement runs, and the summary of its rounds."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

LOOP_BUDGET_S = 60.0  # a timed loop stops early past this; the results say how far it got
STEP_BUDGET_S = 90.0  # a step starts no round that would likely end later: the whole run fits 10 minutes


@dataclass(frozen=True)
class Settings:
    quick: bool
    num_sms: int
    scratch: Path  # session files and traces; removed as soon as a measurement is done with them
    rounds: int  # interleaved rounds of the host-side loop
    log: Callable[[str], None] = print

    @property
    def host_launches(self) -> int:
        return 100 if self.quick else 1000

    @property
    def e2e_launches(self) -> int:
        return 10 if self.quick else 100

    @property
    def e2e_rounds(self) -> int:
        # Every profiled round ends in a finalize of e2e_launches x 1M records (not timed).
        return 2 if self.quick else 3

    @property
    def finalize_launches(self) -> int:
        return 5 if self.quick else 25

    @property
    def autotune_elements(self) -> int:
        return 1 << (22 if self.quick else 24)


def out_of_budget(began: float, rounds_done: int, minimum: int) -> bool:
    """Whether one more round, as long as the rounds so far on average, would end past
    STEP_BUDGET_S (never before ``minimum`` rounds are done). The results say how many ran."""
    if rounds_done < minimum:
        return False
    elapsed = time.perf_counter() - began
    return elapsed + elapsed / rounds_done > STEP_BUDGET_S


def median(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")


def spread_pct(values: list[float]) -> float:
    middle = median(values)
    return 100.0 * (max(values) - min(values)) / middle if values and middle else float("nan")


def rounds_summary(values: list[float]) -> dict[str, Any]:
    return {"median": median(values), "rounds": values, "spread_pct": spread_pct(values)}
