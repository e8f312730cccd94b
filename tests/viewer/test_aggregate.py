"""Aggregate launches (``aggregate=on``) read back: synthetic buffers built with layout.py's dtypes,
decoded into the per-(launch, CTA, unit, scope) table, summarised, stored and rendered.

``FakeAggregateLaunch`` models the device: the prologue zeroes each unit's statistics (the rest
of the buffer keeps its garbage), and each end adds ``end - begin`` of its scope's latest open
begin to the sum, max, inverted min and histogram bin. The same scopes are also written as a
trace (``FakeLaunch``), so that the two modes of one run can be compared as the GPU test does.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from proton_ik import viewer
from proton_ik.cli import main
from proton_ik.contract.buffer_view import raw_view
from proton_ik.contract.layout import (
    AGGREGATE_STATS_DTYPE,
    HISTOGRAM_BINS,
    MAGIC,
    READ_VERSIONS,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    VERSION,
    BufferLayout,
    histogram_bin,
)
from proton_ik.contract.session_format import STORED_KEY
from proton_ik.contract.trimmed import trim, trimmed_view
from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer import LaunchCapture
from proton_ik.viewer.summary.aggregate import ESTIMATE_NOTE, histogram_quantile
from proton_ik.viewer.tables.aggregate import AGGREGATE_COLUMNS, HIST_COLUMNS, decode_stats
from proton_ik.viewer.trace import Trace

from .conftest import write_cta_header

UNWRITTEN = 0xCD
SCOPES = ["outer", "inner"]
INFO = {"name": "agg", "time_shift_cycles": {"single": 30, "pair": 12}}
GHZ = 1.5
TIME0 = 1_700_000_000_000_000_000


class FakeAggregateLaunch:
    """One aggregate launch's buffer, written as the device writes it, in layout ``version`` (it
    has no ring, but the version says what a view's slots are)."""

    def __init__(self, units: int = 2, num_ctas: int = 2, scopes: int = len(SCOPES), version: int = VERSION):
        self.layout = BufferLayout(units=units, capacity=0, aggregate_scopes=scopes, version=version)
        self.num_ctas = num_ctas
        self.buffer = np.full(num_ctas * self.layout.cta_bytes, UNWRITTEN, dtype=np.uint8)
        self.open: dict[tuple[int, int, int], int] = {}

    def stats(self, cta: int, unit: int) -> np.ndarray:
        offset = cta * self.layout.cta_bytes + self.layout.stats_offset(unit)
        return np.ndarray((self.layout.aggregate_scopes,), AGGREGATE_STATS_DTYPE, self.buffer, offset)

    def header(self, cta: int, unit: int) -> np.ndarray:
        offset = cta * self.layout.cta_bytes + self.layout.unit_offset(unit)
        return np.ndarray((), UNIT_HEADER_DTYPE, self.buffer, offset)

    def cta(self, cta: int, smid: int) -> None:
        write_cta_header(self.buffer, self.layout, self.num_ctas, cta, smid)  # capacity 0: no ring

    def start(self, cta: int, unit: int, clock: int) -> None:
        header = self.header(cta, unit)
        header["start_clock"], header["start_time"] = clock, TIME0 + int(clock / GHZ)
        header["entries"] = header["end_magic"] = header["tally"] = header["reserved"] = 0
        self.stats(cta, unit)[...] = np.zeros((), AGGREGATE_STATS_DTYPE)

    def begin(self, cta: int, unit: int, scope: int, clock: int) -> None:
        self.open[cta, unit, scope] = clock & 0xFFFFFFFF

    def end(self, cta: int, unit: int, scope: int, clock: int) -> None:
        begin = self.open.pop((cta, unit, scope), None)
        if begin is None:
            return
        d = ((clock & 0xFFFFFFFF) - begin) & 0xFFFFFFFF
        stats = self.stats(cta, unit)
        stats["sum"][scope] += d
        stats["max"][scope] = max(int(stats["max"][scope]), d)
        stats["min_inverted"][scope] = max(int(stats["min_inverted"][scope]), ~d & 0xFFFFFFFF)
        stats["bins"][scope, histogram_bin(d)] += 1

    def finish(self, cta: int, unit: int, clock: int) -> None:
        header = self.header(cta, unit)
        header["end_clock"], header["end_time"], header["end_magic"] = clock, TIME0 + int(clock / GHZ), MAGIC

    def meta(self, launch: int = 0, kernel: str = "kernel") -> dict:
        profile = {
            "mode": "instrumentation:granularity=warp:capacity=auto:pairs=on:aggregate=on",
            "num_warps": self.layout.units,
            "warps_per_unit": 1,
            "layout": self.layout.to_dict(),
            "capacity": {"entries": 0, "source": "aggregate", "bound": None, "reason": "aggregate=on"},
            "scopes": [{"id": i, "name": name, "line": 10 + i} for i, name in enumerate(SCOPES)],
        }
        return {"launch": launch, "kernel": kernel, "grid": [self.num_ctas, 1, 1], "profile": profile}


def run(launch: FakeAggregateLaunch, trace=None, iterations: int = 5, seed: int = 0) -> dict:
    """Every unit: ``iterations`` of outer(inner), a stray end of inner first (nothing open), and
    inner begun twice before its end once. The same records go to ``trace`` (a ``FakeLaunch``),
    where each scope's begins and ends alternate (the stray and doubled records left out).
    Returns each (cta, unit, scope)'s durations as the model pairs them."""
    rng = np.random.default_rng(seed)
    durations: dict[tuple[int, int, int], list[int]] = {}
    for cta in range(launch.num_ctas):
        launch.cta(cta, smid=cta % 2)
        if trace is not None:
            trace.cta(cta, cta % 2)
        for unit in range(launch.layout.units):
            clock = (1 << 32) - 20_000 + 1_000_000 * cta + 10_000 * unit  # wraps during the run
            launch.start(cta, unit, clock)
            recorder = None if trace is None else trace.unit(cta, unit, clock, TIME0 + int(clock / GHZ))
            launch.end(cta, unit, 1, clock + 5)  # nothing open: adds nothing
            clock += 10
            launch.begin(cta, unit, 1, clock)  # overwritten by the next begin
            for _ in range(iterations):
                clock += int(rng.integers(5, 50))
                outer = clock
                launch.begin(cta, unit, 0, outer)
                clock += int(rng.integers(5, 50))
                inner = clock
                launch.begin(cta, unit, 1, inner)
                clock += int(rng.integers(100, 5000))
                launch.end(cta, unit, 1, clock)
                durations.setdefault((cta, unit, 1), []).append(clock - inner)
                if recorder is not None:
                    recorder.pair(1, inner, clock)
                clock += int(rng.integers(5, 50))
                launch.end(cta, unit, 0, clock)
                durations.setdefault((cta, unit, 0), []).append(clock - outer)
                if recorder is not None:
                    recorder.pair(0, outer, clock)
            clock += 100
            launch.finish(cta, unit, clock)
            if recorder is not None:
                recorder.finish(clock, TIME0 + int(clock / GHZ))
    return durations


@pytest.fixture(params=READ_VERSIONS)
def aggregate_launch(request) -> tuple[FakeAggregateLaunch, dict]:
    launch = FakeAggregateLaunch(version=request.param)
    return launch, run(launch)


def test_decode_stats_reads_what_each_unit_added(aggregate_launch):
    launch, durations = aggregate_launch
    ctas, units, stats = decode_stats(raw_view(launch.buffer, launch.layout), launch.layout)
    assert ctas.valid.all() and units.finished.all() and len(stats) == 2 * 2 * 2
    for row in range(len(stats)):
        unit_row, scope = int(stats.unit_row[row]), int(stats.scope[row])
        key = (int(units.cta[unit_row]), int(units.unit[unit_row]), scope)
        expected = durations[key]
        assert stats.count[row] == len(expected) == 5
        assert (stats.sum[row], stats.min[row], stats.max[row]) == (
            sum(expected),
            min(expected),
            max(expected),
        )
        assert (
            stats.bins[row].tolist()
            == np.bincount(histogram_bin(expected), minlength=HISTOGRAM_BINS).tolist()
        )


def test_the_table_has_a_row_per_launch_cta_unit_and_scope_with_shifted_and_raw_cycles(aggregate_launch):
    launch, durations = aggregate_launch
    trace = Trace.from_captures(INFO, [LaunchCapture(launch.meta(), launch.buffer)])
    table = trace.aggregates
    assert list(table.columns) == list(AGGREGATE_COLUMNS)
    assert len(table) == 8 and len(trace.events) == 0  # statistics, no events
    table = table.sort_values(["cta", "unit", "scope_id"])
    for row in table.itertuples():
        expected = durations[row.cta, row.unit, row.scope_id]
        assert (row.count, row.sum_cycles_raw, row.min_cycles_raw, row.max_cycles_raw) == (
            len(expected),
            sum(expected),
            min(expected),
            max(expected),
        )
        assert row.sum_cycles == sum(expected) - 12 * len(expected)  # the calibrated pair shift
        assert row.min_cycles == min(expected) - 12 and row.scope == SCOPES[row.scope_id]
        assert row.line == 10 + row.scope_id and row.finished
        assert row.ns_per_cycle == pytest.approx(1 / GHZ, rel=1e-3)
        assert row.mean_ns == pytest.approx(row.mean_cycles / GHZ, rel=1e-3)
    assert table[list(HIST_COLUMNS)].to_numpy().sum() == table["count"].sum()


def test_aggregate_and_trace_of_the_same_run_agree(fake_launch):
    aggregate, trace = FakeAggregateLaunch(), fake_launch(units=2, capacity=64, num_ctas=2)
    run(aggregate, trace)
    both = Trace.from_captures(
        INFO,
        [LaunchCapture(aggregate.meta(0), aggregate.buffer), trace.capture(launch=1, scopes=SCOPES)],
    )
    events = both.events.assign(raw=both.events["end_cycles"] - both.events["begin_cycles_raw"])
    from_trace = events.groupby(["cta", "unit", "scope_id"])["raw"].agg(["size", "sum"])
    from_aggregate = both.aggregates.set_index(["cta", "unit", "scope_id"])[["count", "sum_cycles_raw"]]
    joined = from_trace.join(from_aggregate)
    assert (joined["size"] == joined["count"]).all() and (joined["sum"] == joined["sum_cycles_raw"]).all()
    assert set(both.aggregates["launch"]) == {0} and set(both.events["launch"]) == {1}


def test_units_without_a_duration_have_missing_extremes():
    launch = FakeAggregateLaunch(units=1, num_ctas=1)
    launch.cta(0, 0)
    launch.start(0, 0, 1000)
    launch.finish(0, 0, 90_000)
    table = Trace.from_captures(INFO, [LaunchCapture(launch.meta(), launch.buffer)]).aggregates
    assert table["count"].tolist() == [0, 0]
    assert table["min_cycles"].isna().all() and table["max_cycles_raw"].isna().all()
    assert table["mean_ns"].isna().all() and (table["sum_cycles"] == 0).all()


def test_a_cta_that_never_ran_has_no_rows():
    launch = FakeAggregateLaunch(num_ctas=3)
    run(launch)
    launch.buffer[2 * launch.layout.cta_bytes :] = UNWRITTEN  # CTA 2 wrote nothing
    table = Trace.from_captures(INFO, [LaunchCapture(launch.meta(), launch.buffer)]).aggregates
    assert sorted(set(table["cta"])) == [0, 1]


def test_histogram_quantiles_are_estimates_inside_the_right_bin():
    values = np.array([100, 200, 300, 300, 700, 5000, 5000, 5000])
    bins = np.bincount(histogram_bin(values), minlength=HISTOGRAM_BINS)[None, :]
    low, high = np.array([values.min()]), np.array([values.max()])
    median = histogram_quantile(bins, 0.5, low, high)[0]
    assert 256 <= median < 1024  # between the 4th and 5th value's bins, as ranks go
    assert histogram_quantile(bins, 0.9, low, high)[0] == pytest.approx(5000)  # clipped to the max
    assert histogram_quantile(bins, 0.0, low, high)[0] == pytest.approx(100)  # clipped to the min
    single = np.bincount(histogram_bin([37] * 9), minlength=HISTOGRAM_BINS)[None, :]
    assert histogram_quantile(single, 0.5, [37], [37])[0] == 37
    assert np.isnan(histogram_quantile(np.zeros((1, HISTOGRAM_BINS)), 0.5, [0], [0])[0])


def test_the_summary_adds_units_up_per_scope(aggregate_launch):
    launch, durations = aggregate_launch
    trace = Trace.from_captures(INFO, [LaunchCapture(launch.meta(), launch.buffer)])
    rows = trace.summary().aggregates.set_index("scope")
    for scope_id, name in enumerate(SCOPES):
        every = [d for (_, _, s), values in durations.items() if s == scope_id for d in values]
        row = rows.loc[name]
        assert (row["count"], row["units"]) == (len(every), 4)
        assert row["mean_cycles"] == pytest.approx(np.mean(every) - 12)
        assert (row["min_cycles"], row["max_cycles"]) == (min(every) - 12, max(every) - 12)
        lower = 1 << (int(np.median(every)).bit_length() - 2)
        assert lower - 12 <= row["median_cycles"] <= 2 * int(np.median(every))


def test_show_prints_the_aggregate_statistics_and_says_what_is_estimated(aggregate_launch, tmp_path, capsys):
    launch, _ = aggregate_launch
    path = tmp_path / "agg.pik"
    with SessionWriter(path, INFO, trim=True) as writer:
        writer.add_launch(launch.meta(), launch.buffer)
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert ESTIMATE_NOTE in out and "ring: none, per-scope statistics instead (aggregate=on)" in out
    lines = [line.split() for line in out.splitlines()]
    counts = {line[0]: int(line[2]) for line in lines if line and line[0] in SCOPES}
    assert counts == {"outer": 20, "inner": 20}


def test_an_aggregate_launch_is_stored_whole_and_read_back(aggregate_launch, tmp_path):
    launch, _ = aggregate_launch
    path = tmp_path / "agg.pik"
    with SessionWriter(path, INFO, trim=True) as writer:  # trims trace launches, not this one
        writer.add_launch(launch.meta(), launch.buffer)
    stored = viewer.read_session(path).launches[0]
    assert STORED_KEY not in stored.meta
    assert np.array_equal(stored.buffer, launch.buffer)
    table = viewer.aggregate_table(path)
    direct = Trace.from_captures(INFO, [LaunchCapture(launch.meta(), launch.buffer)]).aggregates
    pd.testing.assert_frame_equal(table, direct)


def test_statistics_trimmed_away_are_refused(aggregate_launch):
    launch, _ = aggregate_launch
    stored = trim(launch.buffer, launch.layout)  # headers only: what must never be stored
    with pytest.raises(ValueError, match="must be stored whole, not trimmed"):
        decode_stats(trimmed_view(stored, launch.layout, launch.num_ctas), launch.layout)


def test_trace_files_of_an_aggregate_session_hold_unit_spans_and_no_scope_events(aggregate_launch, tmp_path):
    launch, _ = aggregate_launch
    path = tmp_path / "agg.pik"
    with SessionWriter(path, INFO) as writer:
        writer.add_launch(launch.meta(), launch.buffer)
    rendered = viewer.render(path, tmp_path / "agg")
    assert rendered.perfetto.stat().st_size > 0 and rendered.chrome.stat().st_size > 0
    chrome = rendered.chrome.read_text()
    assert '"outer"' not in chrome and '"inner"' not in chrome


def test_a_trace_layout_has_no_statistics():
    with pytest.raises(ValueError, match="a trace, not an aggregate launch"):
        layout = BufferLayout(units=1, capacity=4)
        decode_stats(raw_view(np.zeros(layout.cta_bytes, np.uint8), layout), layout)
    assert BufferLayout(1, 0, 1).stats_offset(0) - BufferLayout(1, 0, 1).unit_offset(0) == UNIT_HEADER_BYTES
