"""Events, marks and values read back from both trace formats: the session's tables, row for row
in what a trace carries, on a real capture and on a session with unmatched starts and ends."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from proton_ik import viewer
from proton_ik.viewer import Trace, readback

sys.path.insert(0, str(Path(__file__).parent))
from test_async_events import CLOCK0, pipeline_capture

DATA = Path(__file__).parents[1] / "data"
READERS = {
    ".json": (Trace.write_chrome, readback.read_chrome, "rel_ns"),
    ".pftrace": (Trace.write_perfetto, readback.read_perfetto, "ns"),
}
EVENT_KEYS = [
    "kernel", "launch", "cta", "event", "index", "status", "start_warp", "end_warp", "start_cycles",
    "end_cycles", "dur_cycles", "dur_ns", "line",
]  # fmt: skip
MARK_KEYS = ["kernel", "launch", "cta", "mark", "warp", "cycles"]


def _rows(table: pd.DataFrame, keys: list[str]) -> Counter:
    """The table's rows as a multiset of plain values (NA as None)."""
    values = table[keys].astype(object).where(table[keys].notna(), None)
    return Counter(
        tuple(str(v) if isinstance(v, str) else v for v in row) for row in values.itertuples(index=False)
    )


def _session(name: str, fake_launch) -> Trace:
    if name == "events.pik":
        return viewer.load(DATA / name)
    return Trace.from_captures({"name": "t"}, [pipeline_capture(fake_launch)])


def _read_back(session: Trace, suffix: str, tmp_path: Path) -> Trace:
    write, read, _ = READERS[suffix]
    return read(write(session, tmp_path / f"trace{suffix}")).trace


def _matched_cycles_unknown(table: pd.DataFrame) -> pd.DataFrame:
    """A matched event's own start and end cycles: a trace carries its duration only."""
    matched = (table["status"] == "matched").to_numpy()
    out = table.copy()
    for column in ("start_cycles", "end_cycles"):
        out[column] = out[column].astype("Int64").mask(matched)
    return out


@pytest.mark.parametrize("suffix", READERS)
@pytest.mark.parametrize("name", ["events.pik", "unmatched"])
def test_the_event_table_reads_back_as_the_sessions(name, suffix, fake_launch, tmp_path):
    session = _session(name, fake_launch)
    got = _read_back(session, suffix, tmp_path).async_events
    expected = _matched_cycles_unknown(session.async_events)
    assert len(got) == len(expected) > 0
    assert _rows(got, EVENT_KEYS) == _rows(expected, EVENT_KEYS)
    assert got["status"].value_counts().to_dict() == expected["status"].value_counts().to_dict()
    pairs = ["start_warp", "end_warp"]
    assert _rows(got, pairs) == _rows(expected, pairs)
    time = READERS[suffix][2]
    times = [f"start_{time}", f"end_{time}"]
    assert _rows(got, ["event", "status", *times]) == _rows(expected, ["event", "status", *times])


@pytest.mark.parametrize("suffix", READERS)
def test_unmatched_starts_and_ends_keep_their_side(suffix, fake_launch, tmp_path):
    events = _read_back(_session("unmatched", fake_launch), suffix, tmp_path).async_events
    lost = events[events["status"] != "matched"].set_index("status")
    assert lost.loc["no end", "event"] == "tma" and lost.loc["no end", "start_cycles"] == CLOCK0 + 3000
    assert lost.loc["no end", "start_warp"] == 2 and pd.isna(lost.loc["no end", "end_warp"])
    assert lost.loc["no start", "event"] == "free" and lost.loc["no start", "end_cycles"] == CLOCK0 + 6000
    assert pd.isna(lost.loc["no start", "start_warp"]) and pd.isna(lost.loc["no start", "dur_ns"])


@pytest.mark.parametrize("suffix", READERS)
@pytest.mark.parametrize("name", ["events.pik", "unmatched"])
def test_marks_and_values_read_back_as_the_sessions(name, suffix, fake_launch, tmp_path):
    session = _session(name, fake_launch)
    trace = _read_back(session, suffix, tmp_path)
    time = READERS[suffix][2]
    assert len(trace.marks) + len(trace.values) > 0
    assert _rows(trace.marks, [*MARK_KEYS, time]) == _rows(session.marks, [*MARK_KEYS, time])
    assert _rows(trace.values, [*MARK_KEYS, time, "value"]) == _rows(
        session.values, [*MARK_KEYS, time, "value"]
    )


@pytest.mark.parametrize("suffix", READERS)
@pytest.mark.parametrize("name", ["events.pik", "unmatched"])
def test_the_event_statistics_are_the_sessions(name, suffix, fake_launch, tmp_path):
    session = _session(name, fake_launch)
    write, read, _ = READERS[suffix]
    got = read(write(session, tmp_path / f"trace{suffix}")).summary().events
    expected = session.summary().events
    assert len(expected) > 0
    pd.testing.assert_frame_equal(
        got.reset_index(drop=True), expected.reset_index(drop=True), check_dtype=False
    )
