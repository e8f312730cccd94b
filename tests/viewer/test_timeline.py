"""The slot timeline at scale: tracks bounded by SMs x resident CTAs x units whatever the grid,
counter tracks per SM, the launch's slice and its totals read back, and the option everywhere
traces are written."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

import proton_ik
from proton_ik import viewer
from proton_ik.cli import main
from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer import readback, render_session
from proton_ik.viewer.perfetto import write_perfetto
from proton_ik.viewer.tracks import COUNTERS, LAUNCH_TOTALS, check_timeline
from proton_ik.viewer.tracks.slots import most_at_once

DATA = Path(__file__).parents[1] / "data"
T0 = 1_700_000_000_000_000_000


def grid_tables(ctas: int, warps: int, sms: int, resident: int) -> tuple[pd.DataFrame, ...]:
    """One launch's tables, as ``Trace`` holds them: CTA i runs on SM i % sms, an SM holds
    ``resident`` CTAs at once (in waves, started a ns apart), each warp one scope in its lifetime."""
    rng = np.random.default_rng(0)
    cta = np.repeat(np.arange(ctas), warps)
    warp = np.tile(np.arange(warps), ctas)
    nth = cta // sms  # the CTA's place among its SM's
    start = T0 + (nth // resident) * 1_000 + nth % resident
    end = start + 900 + rng.integers(0, 50, len(cta))
    where = {"kernel": "k", "launch": 0, "sm": cta % sms, "cta": cta, "unit": warp, "warp": warp}
    events = pd.DataFrame(
        {
            **where,
            "host_scope": "",
            "lane": 0,
            "scope": "body",
            "depth": 0,
            "begin_ns": start + 10,
            "end_ns": end - 10,
            "begin_rel_ns": start + 10 - T0,
            "dur_ns": end - start - 20,
            "dur_cycles": 2 * (end - start - 20),
            "line": 7,
            "begin_record": 0,
            "end_record": 1,
        }
    )
    units = pd.DataFrame(
        {
            **where,
            "start_ns": start,
            "end_ns": end,
            "start_rel_ns": start - T0,
            "dur_ns": end - start,
            "start_cycles": 0,
            "end_cycles": 2 * (end - start),
            "count": 2,
            "overwritten": 0,
            "finished": True,
        }
    )
    totals = dict.fromkeys(LAUNCH_TOTALS, 0) | {"events": len(events), "records": 2 * len(events)}
    launches = pd.DataFrame(
        [
            {
                "launch": 0,
                "kernel": "k",
                "grid": f"{ctas}x1x1",
                "stream": 0,
                "warps_per_unit": 1,
                "host_scope": "",
                "ctas": ctas,
                "units": len(units),
                "mhz": 1755.0,
                "clock_source": "fit",
                **totals,
            }
        ]
    )
    return events, units, launches


def descriptors(path: Path) -> list:
    return [p.track_descriptor for p in readback.read_packets(path) if p.HasField("track_descriptor")]


def counter_series(path: Path) -> dict[tuple[str, str, str], list[tuple[int, int]]]:
    """Each counter track's points, by (launch track, SM track, counter) name, in time order:
    counter events, and the counts that slice events carry for the tracks their defaults name."""
    packets = readback.read_packets(path)
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in packets if p.HasField("track_descriptor")}
    points, track, extra, now = defaultdict(set), 0, [], 0
    for p in packets:
        if p.HasField("trace_packet_defaults"):
            track = p.trace_packet_defaults.track_event_defaults.track_uuid
            extra = list(p.trace_packet_defaults.track_event_defaults.extra_counter_track_uuids)
        if p.HasField("clock_snapshot"):
            now = p.clock_snapshot.clocks[0].timestamp
        if not p.HasField("track_event"):
            continue
        now += p.timestamp
        event = p.track_event
        if event.type == TrackEvent.TYPE_COUNTER:
            points[track].add((now, event.counter_value))
        for counter, value in zip(extra, event.extra_counter_values, strict=False):
            points[counter].add((now, value))
    series = {}
    for uuid, marks in points.items():
        sm = tracks[tracks[uuid].parent_uuid]
        series[tracks[sm.parent_uuid].name, sm.name, tracks[uuid].name] = sorted(marks)
    return series


def test_a_16384_cta_grid_of_4_warps_needs_at_most_132_x_64_warp_tracks(tmp_path):
    events, units, launches = grid_tables(ctas=16384, warps=4, sms=132, resident=16)
    path = write_perfetto(tmp_path / "grid.pftrace", events, units, launches)
    tracks = descriptors(path)
    warp_tracks = [d for d in tracks if re.fullmatch(r"warp \d+", d.name)]
    assert len(warp_tracks) <= 132 * 64
    assert len(warp_tracks) == 132 * 16 * 4  # as many slots as CTAs ran on an SM at once
    assert sum(d.name.startswith("slot ") for d in tracks) == 132 * 16
    assert Counter(d.name for d in tracks if d.HasField("counter")) == {name: 132 for name in COUNTERS}
    assert path.stat().st_size / len(events) <= 25  # bytes per event


def test_a_pftrace_reads_back_with_its_tracks_args_and_counters(tmp_path):
    events, units, launches = grid_tables(ctas=48, warps=2, sms=2, resident=4)
    path = write_perfetto(tmp_path / "g.pftrace", events, units, launches, title="proton_ik: g")
    # Counters: resident CTAs as the CTAs' spans count them, scopes in flight as the events'.
    series = counter_series(path)
    for sm in (0, 1):
        ctas = units[units["sm"] == sm].groupby("cta").agg(begin=("start_ns", "min"), end=("end_ns", "max"))
        resident = series["launch 0: k", f"SM {sm}", "resident CTAs"]
        assert (
            max(value for _, value in resident)
            == 4
            == most_at_once(
                np.zeros(len(ctas), np.int64), ctas["begin"].to_numpy(), ctas["end"].to_numpy(), 1
            )[0]
        )
        assert resident[0] == (ctas["begin"].min(), 1) and resident[-1] == (ctas["end"].max(), 0)
        mine = events[events["sm"] == sm]
        flying = series["launch 0: k", f"SM {sm}", "scopes in flight"]
        assert max(value for _, value in flying) == 4 * 2  # 4 CTAs of 2 warps
        assert sum(value for _, value in flying) > 0 and flying[-1] == (mine["end_ns"].max(), 0)
    # The repo's reader: every slice with its CTA, SM and warp, the launch with its totals.
    again = readback.read_perfetto(path, for_writing=True)
    columns = ["cta", "sm", "warp", "begin_ns", "dur_ns", "dur_cycles", "line"]

    def ordered(table: pd.DataFrame) -> pd.DataFrame:
        return table[columns].astype("int64").sort_values(columns).reset_index(drop=True)

    pd.testing.assert_frame_equal(ordered(again.trace.events), ordered(events))
    launch = again.trace.launches.iloc[0]
    assert (launch["grid"], launch["events"], launch["records"]) == ("48x1x1", 96, 192)
    assert (launch["ctas"], launch["units"], launch["mhz"]) == (48, 96, 1755.0)


def test_the_cta_timeline_draws_a_track_per_cta(tmp_path):
    events, units, launches = grid_tables(ctas=48, warps=2, sms=2, resident=4)
    path = write_perfetto(tmp_path / "g.pftrace", events, units, launches, timeline="ctas")
    tracks = descriptors(path)
    assert sorted(d.name for d in tracks if d.name.startswith("CTA ")) == sorted(
        f"CTA {c}" for c in range(48)
    )
    assert sum(re.fullmatch(r"warp \d+", d.name) is not None for d in tracks) == 96
    assert len(readback.read_perfetto(path).trace.events) == len(events)


def overlapping_session(path: Path, fake_launch, sm_timer) -> Path:
    """One launch of 24 CTAs of 2 warps on 2 SMs, 3 at once per SM, handed out in CTA order."""
    fake = fake_launch(units=2, capacity=8, num_ctas=24)
    timers = [sm_timer(1.5, 1_000_000 * (s + 1), T0 + 1_000 * s) for s in range(2)]
    for cta in range(24):
        sm, nth = cta % 2, cta // 2
        fake.cta(cta, smid=sm)
        base = timers[sm].clock0 + (nth // 3) * 30_000 + (nth % 3) * 2_000
        for u in range(2):
            unit = fake.unit(cta, u, base, timers[sm].time(base))
            unit.begin(0, base + 100)
            unit.end(0, base + 20_000)
            unit.finish(base + 25_000, timers[sm].time(base + 25_000))
    with SessionWriter(path, {"name": "o"}) as writer:
        capture = fake.capture()
        writer.add_launch(capture.meta, capture.buffer)
    return path


def test_a_launch_in_pieces_keeps_its_slots_and_its_counts(tmp_path, monkeypatch, fake_launch, sm_timer):
    session = overlapping_session(tmp_path / "o.pik", fake_launch, sm_timer)
    render_session(session, {"pftrace": tmp_path / "whole.pftrace", "json": tmp_path / "whole.json"})
    monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", 1)  # every CTA its own chunk
    render_session(session, {"pftrace": tmp_path / "pieces.pftrace", "json": tmp_path / "pieces.json"})
    whole, pieces = descriptors(tmp_path / "whole.pftrace"), descriptors(tmp_path / "pieces.pftrace")
    assert len({d.uuid for d in pieces}) == len(pieces)  # no track described twice
    assert sorted(d.name for d in pieces) == sorted(d.name for d in whole)
    assert sum(d.name.startswith("slot ") for d in pieces) == 2 * 3
    assert counter_series(tmp_path / "pieces.pftrace") == counter_series(tmp_path / "whole.pftrace")
    for suffix in ("pftrace", "json"):
        read = readback.read_perfetto if suffix == "pftrace" else readback.read_chrome
        assert read(tmp_path / f"pieces.{suffix}").summary_text() == viewer.load(session).summary_text()
    threads = [line for line in (tmp_path / "pieces.json").read_text().splitlines() if "thread_name" in line]
    assert len(threads) == 2 * 3 * 2  # SMs x slots x warps, each named once


@pytest.mark.parametrize("after_a_timed_launch", [True, False])
def test_a_launch_with_no_time_still_has_a_slice_with_its_totals(
    tmp_path, busy_launch, fake_launch, after_a_timed_launch
):
    never = fake_launch(units=1, capacity=8)
    never.cta(0, smid=0)  # its one unit never started, finished or recorded
    captures = [busy_launch(launch=0, num_ctas=2)] if after_a_timed_launch else []
    with SessionWriter(tmp_path / "s.pik", {"name": "s"}) as writer:
        for capture in [*captures, never.capture(launch=1, kernel="k1")]:
            writer.add_launch(capture.meta, capture.buffer)
    render_session(tmp_path / "s.pik", {"pftrace": tmp_path / "s.pftrace", "json": tmp_path / "s.json"})
    expected = viewer.load(tmp_path / "s.pik")
    for got in (readback.read_perfetto(tmp_path / "s.pftrace"), readback.read_chrome(tmp_path / "s.json")):
        launches = got.trace.launches.set_index("launch")
        assert list(launches.index) == expected.launches["launch"].tolist()
        assert (
            launches.loc[1, "units_unfinished"]
            == expected.launches.set_index("launch").loc[1, "units_unfinished"]
        )
    # A .pftrace carries no problems list; a Chrome trace carries the whole launch table.
    text = expected.summary_text()
    assert readback.read_chrome(tmp_path / "s.json").summary_text() == text
    assert readback.read_perfetto(tmp_path / "s.pftrace").summary_text() == text.split("\nproblems:")[0]


def test_a_timeline_that_does_not_exist_is_refused_everywhere(tmp_path, capsys):
    assert check_timeline(None) == "slots" and check_timeline("ctas") == "ctas"
    with pytest.raises(ValueError, match=r"timeline='rows': choose 'slots' .* or 'ctas'"):
        check_timeline("rows")
    with pytest.raises(ValueError, match="timeline='rows'"):
        render_session(DATA / "add.pik", {"pftrace": tmp_path / "a.pftrace"}, timeline="rows")
    with pytest.raises(ValueError, match="timeline='rows'"):
        proton_ik.start("t", out_dir=tmp_path, timeline="rows")
    with pytest.raises(SystemExit) as exited:
        main(["convert", str(DATA / "add.pik"), "--to", "perfetto", "--timeline", "rows"])
    assert exited.value.code == 2
    assert "invalid choice: 'rows'" in capsys.readouterr().err


@pytest.mark.parametrize("source", ["add.pik", "add.json"])
def test_convert_draws_the_timeline_asked_for(tmp_path, capsys, source):
    if source.endswith(".json"):
        viewer.load(DATA / "add.pik").write_chrome(tmp_path / source)
    path = DATA / source if source.endswith(".pik") else tmp_path / source
    for timeline, places in (("ctas", 16), ("slots", None)):
        out = tmp_path / f"{timeline}.pftrace"
        assert main(["convert", str(path), "--to", "perfetto", "-o", str(out), "--timeline", timeline]) == 0
        names = [d.name for d in descriptors(out)]
        if places:
            assert sum(name.startswith("CTA ") for name in names) == places
        else:
            assert not any(name.startswith("CTA ") for name in names) and any(
                n.startswith("slot ") for n in names
            )
    capsys.readouterr()
