"""Events paired across the warps of a CTA, marks and values, from synthetic buffers.

Buffers are written the way the device writes them (``conftest``'s model, in layout version 3
unless a test says otherwise); what each test expects follows from the program the buffer models: which
warp starts which instance when, and which warps end it.
"""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd
import pytest

from proton_ik.cli import main
from proton_ik.contract.layout import READ_VERSIONS, VERSION
from proton_ik.contract.tags import RecordKind, ValueType
from proton_ik.runtime.session_writer import write_session
from proton_ik.viewer.decode import decode_buffer
from proton_ik.viewer.pairing.async_events import CLOCK_SKEW_CYCLES, MATCHED, NO_END, NO_START, pair_events
from proton_ik.viewer.trace import Trace

SCOPE, TMA, FREE, TILE, PHASE = range(5)
TABLE = [
    {"id": SCOPE, "name": "reduce", "line": 10},
    {"id": TMA, "name": "tma", "line": 20, "kind": "event", "instances": 2},
    {"id": FREE, "name": "free", "line": 30, "kind": "event", "instances": 2},
    {"id": TILE, "name": "tile", "line": 40, "kind": "mark"},
    {"id": PHASE, "name": "phase", "line": 50, "kind": "mark"},
]
CLOCK0 = 5_000_000
TIME0 = 1_700_000_000_000_000_000


def event(unit, name: int, is_end: bool, clock: int, index: int = 0) -> None:
    unit.record(name, is_end, clock, RecordKind.EVENT, index=index)


def mark(unit, name: int, clock: int, value: int | float | None = None, value_type=ValueType.INT32) -> None:
    if value is None:
        unit.record(name, False, clock, RecordKind.MARK)
    else:
        fmt = {ValueType.INT32: "<i", ValueType.UINT32: "<I", ValueType.FLOAT32: "<f"}[value_type]
        unit.value(name, clock, struct.unpack("<I", struct.pack(fmt, value))[0], value_type)


class Cta:
    """A CTA's units, each on the CTA's SM clock, started at CLOCK0 and finished at ``end``."""

    def __init__(self, launch, cta: int, sm: int = 0):
        launch.cta(cta, sm)
        self.units = [launch.unit(cta, u, CLOCK0, TIME0) for u in range(launch.layout.units)]

    def finish(self, end: int = CLOCK0 + 100_000) -> None:
        for unit in self.units:
            unit.finish(end, TIME0 + (end - CLOCK0))


def decoded(launch):
    return decode_buffer(launch.buffer, launch.layout)


def spans_of(launch) -> list[tuple]:
    """(status, start unit, end unit, event, instance, start clock, end clock) per row, sorted."""
    d = decoded(launch)
    s = pair_events(d.records, d.units)
    unit = d.units.unit
    rows = zip(
        s.status.tolist(),
        np.where(s.start_unit_row >= 0, unit[s.start_unit_row], -1).tolist(),
        np.where(s.end_unit_row >= 0, unit[s.end_unit_row], -1).tolist(),
        s.event.tolist(),
        s.instance.tolist(),
        np.where(s.start_unit_row >= 0, s.start_clock - CLOCK0, -1).tolist(),
        np.where(s.end_unit_row >= 0, s.end_clock - CLOCK0, -1).tolist(),
        strict=True,
    )
    return sorted(rows)


def test_one_producer_start_pairs_with_each_consumer_warps_end(fake_launch):
    """Warp 2 starts instance i of "tma" at 100 * i; warps 0 and 1 end it after their waits."""
    launch = fake_launch(units=3, capacity=32)
    cta = Cta(launch, 0)
    consumers, producer = cta.units[:2], cta.units[2]
    for i in range(4):
        event(producer, TMA, False, CLOCK0 + 1000 * i, index=i % 2)
    for i in range(4):
        for w, consumer in enumerate(consumers):
            event(consumer, TMA, True, CLOCK0 + 1000 * i + 300 + 10 * w, index=i % 2)
    cta.finish()
    expected = [
        (MATCHED, 2, w, TMA, i % 2, 1000 * i, 1000 * i + 300 + 10 * w) for i in range(4) for w in range(2)
    ]
    assert spans_of(launch) == sorted(expected)


def test_starts_by_several_warps_pair_with_one_end(fake_launch):
    """Warps 0 and 1 free a slot (one batch); warp 2 ends "free" once its wait returns."""
    launch = fake_launch(units=3, capacity=32)
    cta = Cta(launch, 0)
    for i in range(3):
        for w in range(2):
            event(cta.units[w], FREE, False, CLOCK0 + 1000 * i + w, index=0)
        event(cta.units[2], FREE, True, CLOCK0 + 1000 * i + 500, index=0)
    cta.finish()
    expected = [(MATCHED, w, 2, FREE, 0, 1000 * i + w, 1000 * i + 500) for i in range(3) for w in range(2)]
    assert spans_of(launch) == sorted(expected)


def test_instances_in_flight_pair_first_in_first_out(fake_launch):
    """No index: warp 1 starts three before warp 0 ends any; each start is its own instance."""
    launch = fake_launch(units=2, capacity=32)
    cta = Cta(launch, 0)
    for i in range(3):
        event(cta.units[1], TMA, False, CLOCK0 + 10 * i)
    for i in range(3):
        event(cta.units[0], TMA, True, CLOCK0 + 1000 + 10 * i)
    cta.finish()
    assert spans_of(launch) == [(MATCHED, 1, 0, TMA, 0, 10 * i, 1000 + 10 * i) for i in range(3)]


def test_unmatched_starts_and_ends_are_counted_not_dropped(fake_launch):
    """An end before any start, a start never ended, and instances and CTAs kept apart: the end
    of instance 1 does not close instance 0, and CTA 1's end does not close CTA 0's start."""
    launch = fake_launch(units=2, capacity=32, num_ctas=2)
    first, second = Cta(launch, 0), Cta(launch, 1, sm=1)
    late = CLOCK_SKEW_CYCLES + 1  # beyond the clock skew between warps: really before
    event(first.units[0], TMA, True, CLOCK0 + 5, index=0)  # nothing started yet
    event(first.units[1], TMA, False, CLOCK0 + 5 + late, index=0)
    event(first.units[0], TMA, True, CLOCK0 + 100, index=1)  # another instance
    event(second.units[0], TMA, True, CLOCK0 + 110, index=0)  # another CTA
    first.finish()
    second.finish()
    assert spans_of(launch) == [
        (NO_END, 1, -1, TMA, 0, 5 + late, -1),
        (NO_START, -1, 0, TMA, 0, -1, 5),
        (NO_START, -1, 0, TMA, 0, -1, 110),
        (NO_START, -1, 0, TMA, 1, -1, 100),
    ]


def test_a_start_a_clock_skew_after_another_warps_end_still_comes_first(fake_launch):
    """The H100's barrier case: every warp starts an instance, all meet at a bar.sync, every warp
    ends it, and one warp's start reads the clock 2 cycles after another warp's end."""
    launch = fake_launch(units=2, capacity=32)
    cta = Cta(launch, 0)
    event(cta.units[0], TMA, False, CLOCK0 + 40)
    event(cta.units[0], TMA, True, CLOCK0 + 50)
    event(cta.units[1], TMA, False, CLOCK0 + 52)
    event(cta.units[1], TMA, True, CLOCK0 + 60)
    cta.finish()
    assert sorted(spans_of(launch)) == [
        (MATCHED, 0, 0, TMA, 0, 40, 50),
        (MATCHED, 0, 1, TMA, 0, 40, 60),
        (MATCHED, 1, 0, TMA, 0, 52, 50),
        (MATCHED, 1, 1, TMA, 0, 52, 60),
    ]


def test_within_a_unit_the_order_written_holds(fake_launch):
    """The tolerance is between units only: a unit's end is never taken as after its own start
    that it wrote later, however close their clocks."""
    launch = fake_launch(units=1, capacity=32)
    cta = Cta(launch, 0)
    event(cta.units[0], TMA, True, CLOCK0 + 100)
    event(cta.units[0], TMA, False, CLOCK0 + 101)
    cta.finish()
    assert spans_of(launch) == [(NO_END, 0, -1, TMA, 0, 101, -1), (NO_START, -1, 0, TMA, 0, -1, 100)]


def test_an_end_at_the_clock_of_its_start_pairs(fake_launch):
    launch = fake_launch(units=2, capacity=8)
    cta = Cta(launch, 0)
    event(cta.units[1], TMA, True, CLOCK0 + 50)
    event(cta.units[0], TMA, False, CLOCK0 + 50)
    cta.finish()
    assert spans_of(launch) == [(MATCHED, 0, 1, TMA, 0, 50, 50)]


def pipeline_capture(fake_launch, version: int = VERSION, **meta):
    """A producer (unit 2) and two consumer warps, two slots, four tiles; the consumers mark
    each tile's phase (a value) and the producer marks the end of its loop; the last start is
    never ended (the consumer stopped early), and a stray end has no start."""
    launch = fake_launch(units=3, capacity=64, version=version)
    cta = Cta(launch, 0)
    producer = cta.units[2]
    for i in range(4):
        event(producer, TMA, False, CLOCK0 + 1000 * i, index=i % 2)
        for w in range(2):
            if i < 3:
                event(cta.units[w], TMA, True, CLOCK0 + 1000 * i + 200 + 100 * w, index=i % 2)
            mark(cta.units[w], PHASE, CLOCK0 + 1000 * i + 400, value=(i // 2) & 1)
    mark(producer, TILE, CLOCK0 + 5000)
    mark(producer, TILE, CLOCK0 + 5100, value=-7)
    mark(producer, TILE, CLOCK0 + 5200, value=0xFFFFFFF0, value_type=ValueType.UINT32)
    mark(producer, TILE, CLOCK0 + 5300, value=0.25, value_type=ValueType.FLOAT32)
    event(producer, FREE, True, CLOCK0 + 6000)
    cta.finish()
    capture = launch.capture(**meta)
    capture.meta["profile"]["scopes"] = TABLE
    return capture


@pytest.mark.parametrize("version", READ_VERSIONS)
def test_the_tables_of_a_session(fake_launch, version):
    trace = Trace.from_captures({"name": "t"}, [pipeline_capture(fake_launch, version)])
    events = trace.async_events
    matched = events[events["status"] == "matched"]
    assert len(matched) == 6 and set(matched["event"]) == {"tma"}
    assert sorted(matched["dur_cycles"].tolist()) == [200, 200, 200, 300, 300, 300]
    assert (matched["start_warp"] == 2).all() and sorted(set(matched["end_warp"])) == [0, 1]
    assert (matched["dur_ns"] > 0).all() and (matched["line"] == 20).all()
    lost = events[events["status"] != "matched"]
    assert sorted(zip(lost["event"], lost["status"], lost["index"], strict=True)) == [
        ("free", "no start", 0),
        ("tma", "no end", 1),
    ]
    no_end = lost[lost["status"] == "no end"].iloc[0]
    assert no_end["end_warp"] is pd.NA and no_end["start_cycles"] == CLOCK0 + 3000
    assert trace.marks[["mark", "warp", "cycles"]].values.tolist() == [["tile", 2, CLOCK0 + 5000]]
    values = trace.values
    phases = values[values["mark"] == "phase"]
    assert len(phases) == 8 and sorted(set(phases["value"])) == [0.0, 1.0]
    tiles = values[values["mark"] == "tile"].sort_values("cycles")
    assert tiles["value"].tolist() == [-7.0, float(0xFFFFFFF0), 0.25]
    assert tiles["value_type"].astype(str).tolist() == ["i32", "u32", "f32"]
    assert trace.problems == []


def test_the_summary_has_latency_statistics_per_event(fake_launch):
    trace = Trace.from_captures({"name": "t"}, [pipeline_capture(fake_launch)])
    stats = trace.summary().events.set_index("event")
    assert (
        stats.loc["tma", "count"] == 6
        and stats.loc["tma", "no_end"] == 1
        and stats.loc["tma", "no_start"] == 0
    )
    assert stats.loc["free", "count"] == 0 and stats.loc["free", "no_start"] == 1
    cycles = np.array([200, 200, 200, 300, 300, 300])
    assert stats.loc["tma", "mean_cycles"] == pytest.approx(cycles.mean())
    assert stats.loc["tma", "median_cycles"] == pytest.approx(np.median(cycles))
    assert stats.loc["tma", "p99_cycles"] == pytest.approx(np.quantile(cycles, 0.99))
    text = trace.summary_text()
    assert "kernel: events, from their start to their end in any warp of the CTA" in text
    assert "p99 ns" in text and "no end" in text


def test_show_prints_the_event_statistics(fake_launch, tmp_path, capsys):
    path = write_session(tmp_path / "events.pik", {"name": "events"}, [pipeline_capture(fake_launch)])
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    heading = out.index("kernel: events, from their start")
    rows = {line.split()[0]: line.split() for line in out[heading:].splitlines()[2:4]}
    assert rows["tma"][1:3] == ["20", "6"] and rows["tma"][-2:] == ["1", "0"]
    assert rows["free"][1:3] == ["30", "0"] and rows["free"][-2:] == ["0", "1"]
