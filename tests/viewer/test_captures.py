"""Decode real buffers captured on an H200 (``tests/gpu/capture.py``) and check what the kernels imply.

add.pik:  add_kernel, 16 CTAs x 4 warps, scopes load, compute, store; capacity 8, no wrap.
ring.pik: loop_kernel, 4 CTAs x 4 warps, one "outer" around 20 "step" scopes (42 records per
          warp); capacity 16, so each warp keeps records 26..41 and the ring overwrote 0..25.
spin.pik: spin_kernel, 8 CTAs x 1 warp, one "spin" scope around a >= 20000-cycle clock64 spin;
          spin_reference.txt holds each CTA's own measured span.
demo.pik: the demo matmul, 2 launches of 64 CTAs x 8 warps, 16 k_step then 1 epilogue per warp.
"""

from __future__ import annotations

import functools
import json
import struct
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

from proton_ik import demo, viewer
from proton_ik.layout import CTA_HEADER_DTYPE, MAGIC, UNIT_HEADER_DTYPE, VERSION, BufferLayout
from proton_ik.viewer.perfetto import LIFETIME
from proton_ik.viewer.session_file import read_session

DATA = Path(__file__).parents[1] / "data"
SM_COUNT = 132  # H200
GLOBALTIMER_TICK_NS = 32
UNIT_KEY = ["launch", "cta", "unit"]


@dataclass(frozen=True)
class Expected:
    """What a capture must hold, derived from its kernel and launch configuration."""

    path: Path
    kernel: str
    launches: int
    grid: tuple[int, int, int]
    warps: int
    capacity: int
    written: int  # records each warp wrote, overwritten ones included
    events: dict[str, int]  # paired events per warp per launch, by scope
    scopes: tuple[str, ...]  # the kernel's scope table, in id order

    @property
    def ctas(self) -> int:
        return int(np.prod(self.grid))

    @property
    def kept(self) -> int:
        return min(self.written, self.capacity)


CAPTURES = {
    "add": Expected(
        DATA / "add.pik", "add_kernel", 1, (16, 1, 1), 4, 8, 6,
        {"load": 1, "compute": 1, "store": 1}, ("load", "compute", "store"),
    ),
    "ring": Expected(
        DATA / "ring.pik", "loop_kernel", 1, (4, 1, 1), 4, 16, 42, {"step": 7}, ("outer", "step"),
    ),
    "spin": Expected(DATA / "spin.pik", "spin_kernel", 1, (8, 1, 1), 1, 2, 2, {"spin": 1}, ("spin",)),
    "demo": Expected(
        demo.bundled_capture(), "matmul_kernel", 2, (8, 8, 1), 8, 64, 34,
        {"k_step": 16, "epilogue": 1}, ("k_step", "epilogue"),
    ),
}  # fmt: skip
NAMES = list(CAPTURES)
UNWRAPPED = ["add", "spin", "demo"]


@functools.cache
def load(name: str) -> viewer.Trace:
    return viewer.load(CAPTURES[name].path)


def kept_records(trace: viewer.Trace) -> pd.DataFrame:
    """Every decoded record once, paired or not: (launch, cta, unit, record, cycles, scope, end)."""
    columns = [*UNIT_KEY, "record", "cycles", "scope", "end"]
    events = trace.events.assign(scope=trace.events["scope"].astype(str))
    begins = events[[*UNIT_KEY, "begin_record", "begin_cycles", "scope"]].assign(end=False)
    ends = events[[*UNIT_KEY, "end_record", "end_cycles", "scope"]].assign(end=True)
    unmatched = trace.unmatched.assign(scope=trace.unmatched["scope"].astype(str), end=True)
    frames = [
        begins.set_axis(columns, axis=1),
        ends.set_axis(columns, axis=1),
        unmatched[[*UNIT_KEY, "record", "cycles", "scope", "end"]].set_axis(columns, axis=1),
    ]
    return pd.concat(frames, ignore_index=True).sort_values([*UNIT_KEY, "record"], ignore_index=True)


@pytest.mark.parametrize("name", NAMES)
def test_session_holds_the_launches_of_one_kernel_on_an_h200(name):
    expected, trace = CAPTURES[name], load(name)
    assert trace.device == "NVIDIA H200"
    assert trace.info["sm_count"] == SM_COUNT
    assert trace.launches["launch"].tolist() == list(range(expected.launches))
    assert set(trace.launches["kernel"]) == {expected.kernel}
    assert (trace.launches["ctas"] == expected.ctas).all()
    assert (trace.launches["ctas_missing"] == 0).all()
    assert (trace.launches["ctas_bad_header"] == 0).all()
    assert (trace.launches["grid"] == "x".join(map(str, expected.grid))).all()
    assert (trace.launches["units"] == expected.ctas * expected.warps).all()
    assert trace.problems == []


@pytest.mark.parametrize("name", NAMES)
def test_raw_cta_and_unit_headers_are_valid(name):
    """Read the headers straight from the bytes with layout.py's dtypes, not through the decoder."""
    expected = CAPTURES[name]
    launches = read_session(expected.path).launches
    assert len(launches) == expected.launches
    for launch in launches:
        layout = BufferLayout.from_dict(launch.meta["profile"]["layout"])
        assert (layout.units, layout.capacity) == (expected.warps, expected.capacity)
        assert [s["name"] for s in launch.meta["profile"]["scopes"]] == list(expected.scopes)
        regions = launch.buffer.reshape(expected.ctas, layout.cta_bytes)
        cta = regions[:, : CTA_HEADER_DTYPE.itemsize].copy().view(CTA_HEADER_DTYPE).reshape(-1)
        assert (cta["magic"] == MAGIC).all()
        assert (cta["version"] == VERSION).all()
        assert sorted(cta["cta"].tolist()) == list(range(expected.ctas))
        assert (cta["cta"] == np.arange(expected.ctas)).all()  # each CTA writes its own slot
        assert ((cta["smid"] >= 0) & (cta["smid"] < SM_COUNT)).all()
        nctaid = np.stack([cta["nctaid_x"], cta["nctaid_y"], cta["nctaid_z"]], axis=1)
        assert (nctaid == expected.grid).all()
        assert (cta["units"] == expected.warps).all() and (cta["capacity"] == expected.capacity).all()
        for unit in range(expected.warps):
            start = layout.unit_offset(unit)
            raw = regions[:, start : start + UNIT_HEADER_DTYPE.itemsize].copy()
            header = raw.view(UNIT_HEADER_DTYPE).reshape(-1)
            assert (header["end_magic"] == MAGIC).all()
            assert (header["count"] == expected.written).all()
            assert (header["end_clock"] > header["start_clock"]).all()
            assert (header["end_time"] > header["start_time"]).all()


@pytest.mark.parametrize("name", NAMES)
def test_every_warp_finished_and_kept_the_newest_records(name):
    expected, trace = CAPTURES[name], load(name)
    units = trace.units
    assert len(units) == expected.launches * expected.ctas * expected.warps
    assert units["finished"].all() and units["decoded"].all()
    assert (units["count"] == expected.written).all()
    assert (units["kept"] == expected.kept).all()
    assert (units["overwritten"] == expected.written - expected.kept).all()
    per_launch = units.groupby("launch").size()
    assert (per_launch == expected.ctas * expected.warps).all()
    assert sorted(units.groupby(["launch", "cta"]).size().unique()) == [expected.warps]
    assert trace.record_count == len(units) * expected.kept


@pytest.mark.parametrize("name", NAMES)
def test_events_per_warp_per_scope(name):
    expected, trace = CAPTURES[name], load(name)
    events = trace.events
    per_warp = events.groupby([*UNIT_KEY, events["scope"].astype(str)], observed=True).size()
    warps = expected.launches * expected.ctas * expected.warps
    for scope, count in expected.events.items():
        assert (per_warp.xs(scope, level="scope") == count).all(), scope
        assert len(per_warp.xs(scope, level="scope")) == warps, scope
    assert set(events["scope"].astype(str)) == set(expected.events)
    assert len(events) == warps * sum(expected.events.values())
    assert (events["warp"] == events["unit"]).all()  # granularity=warp: one warp per unit
    assert (trace.launches["events"] == len(events) // expected.launches).all()


@pytest.mark.parametrize("name", UNWRAPPED)
def test_no_unmatched_records_where_the_ring_did_not_wrap(name):
    trace = load(name)
    assert len(trace.unmatched) == 0
    stats = trace.launches
    assert (stats[["unmatched_begin", "unmatched_end", "lost_to_ring", "overwritten"]] == 0).all().all()
    assert (trace.events["depth"] == 0).all()  # these kernels' scopes follow one another
    assert (trace.events["lane"] == 0).all()


def test_add_scopes_follow_source_order_in_every_warp():
    events = load("add").events.sort_values([*UNIT_KEY, "begin_record"])
    for _, warp in events.groupby(UNIT_KEY):
        assert warp["scope"].astype(str).tolist() == ["load", "compute", "store"]
        assert warp["begin_record"].tolist() == [0, 2, 4]
        assert warp["end_record"].tolist() == [1, 3, 5]


def test_demo_runs_sixteen_k_steps_then_the_epilogue_in_every_warp():
    events = load("demo").events.sort_values([*UNIT_KEY, "begin_record"])
    for _, warp in events.groupby(UNIT_KEY):
        assert warp["scope"].astype(str).tolist() == ["k_step"] * 16 + ["epilogue"]
        assert warp["begin_record"].tolist() == list(range(0, 34, 2))
        assert warp["end_record"].tolist() == list(range(1, 34, 2))


def test_ring_keeps_records_26_to_41_and_reports_both_orphaned_ends_as_lost_to_ring():
    """Records: 0 = outer begin, 2i+1 / 2i+2 = step i begin / end, 41 = outer end. The ring
    keeps 26..41: step 12's end (its begin was overwritten), steps 13..19 whole, outer's end."""
    trace = load("ring")
    events = trace.events.sort_values([*UNIT_KEY, "begin_record"])
    for _, warp in events.groupby(UNIT_KEY):
        assert warp["scope"].astype(str).tolist() == ["step"] * 7
        assert warp["begin_record"].tolist() == list(range(27, 40, 2))
        assert warp["end_record"].tolist() == list(range(28, 41, 2))

    lost = trace.unmatched.sort_values([*UNIT_KEY, "record"])
    assert len(lost) == 2 * 16
    assert (lost["kind"] == "lost to ring").all()
    for _, warp in lost.groupby(UNIT_KEY):
        assert list(zip(warp["scope"].astype(str), warp["record"], strict=True)) == [
            ("step", 26),
            ("outer", 41),
        ]

    stats = trace.launches.iloc[0]
    assert (stats["overwritten"], stats["lost_to_ring"]) == (16 * 26, 32)
    assert (stats["unmatched_begin"], stats["unmatched_end"]) == (0, 0)
    scopes = trace.summary().scopes.set_index("scope")
    assert scopes.loc["outer", ["count", "lost_to_ring", "unmatched_end"]].tolist() == [0, 16, 0]
    assert scopes.loc["step", ["count", "lost_to_ring", "unmatched_end"]].tolist() == [112, 16, 0]


def test_ring_steps_lie_inside_outer_even_though_outer_lost_its_begin():
    """Outer never pairs (its begin was overwritten), so no step is nested under a paired outer
    (depth 0); in time every kept step still lies before outer's end and after the warp started."""
    trace = load("ring")
    events = trace.events
    assert (events["depth"] == 0).all() and (events["lane"] == 0).all()
    assert "outer" not in set(events["scope"].astype(str))
    outer_end = trace.unmatched[trace.unmatched["scope"] == "outer"].set_index(UNIT_KEY)
    joined = events.join(outer_end[["record", "cycles"]], on=UNIT_KEY, how="inner")
    assert len(joined) == len(events)
    assert (joined["end_record"] < joined["record"]).all()
    assert (joined["end_cycles"] <= joined["cycles"]).all()
    start = trace.units.set_index(UNIT_KEY)["start_cycles"]
    assert (events.join(start, on=UNIT_KEY)["start_cycles"] < events["begin_cycles"]).all()


@pytest.mark.parametrize("name", NAMES)
def test_every_kept_record_is_decoded_once_and_clocks_never_go_back(name):
    expected, trace = CAPTURES[name], load(name)
    records = kept_records(trace)
    assert len(records) == len(trace.units) * expected.kept
    first = expected.written - expected.kept
    for _, warp in records.groupby(UNIT_KEY):
        assert warp["record"].tolist() == list(range(first, expected.written))
        assert (np.diff(warp["cycles"].to_numpy()) >= 0).all()
    units = trace.units.set_index(UNIT_KEY)
    bounds = records.join(units[["start_cycles", "end_cycles"]], on=UNIT_KEY)
    assert (bounds["start_cycles"] <= bounds["cycles"]).all()
    assert (bounds["cycles"] <= bounds["end_cycles"]).all()


@pytest.mark.parametrize("name", NAMES)
def test_event_times_are_monotone_and_inside_their_warp_lifetime(name):
    trace = load(name)
    events = trace.events.sort_values([*UNIT_KEY, "begin_record"])
    assert (events["end_cycles"] >= events["begin_cycles"]).all()
    assert (events["end_ns"] >= events["begin_ns"]).all()
    for _, warp in events.groupby(UNIT_KEY):
        assert warp["begin_ns"].is_monotonic_increasing
        assert warp["end_ns"].is_monotonic_increasing
        assert warp["begin_rel_ns"].is_monotonic_increasing
    units = trace.units.set_index(UNIT_KEY)[["start_ns", "end_ns"]].rename(columns=lambda c: f"unit_{c}")
    joined = events.join(units, on=UNIT_KEY)
    assert (joined["unit_start_ns"] <= joined["begin_ns"]).all()
    assert (joined["end_ns"] <= joined["unit_end_ns"]).all()
    assert (events["begin_rel_ns"] >= 0).all()
    assert trace.units["start_rel_ns"].min() == 0


@pytest.mark.parametrize("name", NAMES)
def test_inferred_sm_clock_is_a_plausible_measured_rate(name):
    trace = load(name)
    for mhz in trace.launches["mhz"]:
        assert 500 < mhz < 2500
        assert mhz != 1000.0
    assert len(trace.events) and (trace.events["dur_ns"] != trace.events["dur_cycles"]).any()


@pytest.mark.parametrize("name", NAMES)
def test_durations_in_ns_are_cycles_over_the_sm_clock(name):
    trace = load(name)
    mhz = trace.events["launch"].map(trace.launches.set_index("launch")["mhz"])
    events = trace.events.assign(mhz=mhz.to_numpy())
    predicted = events["dur_cycles"] * 1e3 / events["mhz"]
    # 1 ns of rounding at each end; 1% for per-SM rates that may differ from the launch median.
    tolerance = 2 + 0.01 * predicted
    assert ((events["dur_ns"] - predicted).abs() <= tolerance).all()
    units = trace.units.assign(mhz=trace.units["launch"].map(trace.launches.set_index("launch")["mhz"]))
    cycles = (units["end_cycles"] - units["start_cycles"]).astype(float)
    assert ((units["dur_ns"] - cycles * 1e3 / units["mhz"]).abs() <= 2 + 0.01 * units["dur_ns"]).all()


def test_spin_scope_covers_the_spin_each_cta_measured_with_a_small_bias():
    """The scope's clock reads sit just outside the kernel's own reads, so it is never shorter;
    on the H200 capture it is 55 cycles longer in every CTA (the marker's own cost)."""
    reference = [int(v) for v in (DATA / "spin_reference.txt").read_text().split()]
    events = load("spin").events.sort_values("cta")
    assert events["cta"].tolist() == list(range(len(reference)))
    assert all(span >= 20_000 for span in reference)
    bias = events["dur_cycles"].to_numpy() - np.array(reference)
    assert (bias >= 0).all() and (bias <= 200).all(), bias
    assert bias.tolist() == [55] * len(reference)


def test_spin_duration_in_ns_agrees_with_the_globaltimer():
    """%globaltimer is a clock independent of %clock64: the spin fills nearly all of its warp's
    globaltimer-measured lifetime, so the scope's converted ns must match it closely."""
    trace = load("spin")
    units = trace.units.set_index(UNIT_KEY)
    lifetime = units["globaltimer_end_ns"] - units["globaltimer_start_ns"]
    joined = trace.events.join(lifetime.rename("lifetime"), on=UNIT_KEY)
    assert (joined["dur_ns"] <= joined["lifetime"] + GLOBALTIMER_TICK_NS).all()
    assert (joined["dur_ns"] >= 0.98 * joined["lifetime"]).all()


@pytest.mark.parametrize("name", UNWRAPPED)
def test_shares_of_scopes_that_follow_one_another_sum_to_at_most_the_kernel_time(name):
    scopes = load(name).summary().scopes
    assert scopes["share"].between(0, 1).all()
    assert scopes["share"].sum() <= 1


@pytest.mark.parametrize("name", NAMES)
def test_perfetto_trace_of_a_capture_parses_back_with_every_event(name, tmp_path, pftrace_packets):
    trace = load(name)
    path = trace.write_perfetto(tmp_path / f"{name}.pftrace")
    names, begins, ends = {}, Counter(), 0
    for packet in pftrace_packets(path):
        names.update({entry.iid: entry.name for entry in packet.interned_data.event_names})
        if packet.HasField("track_event"):
            if packet.track_event.type == TrackEvent.TYPE_SLICE_BEGIN:
                begins[names[packet.track_event.name_iid]] += 1
            elif packet.track_event.type == TrackEvent.TYPE_SLICE_END:
                ends += 1
    lifetimes = begins.pop(LIFETIME)
    assert sum(begins.values()) == len(trace.events)
    assert begins == Counter(trace.events["scope"].astype(str))
    assert lifetimes == int(trace.units["finished"].sum())
    assert ends == len(trace.events) + lifetimes


@pytest.mark.parametrize("name", NAMES)
def test_chrome_trace_of_a_capture_parses_back_with_every_event(name, tmp_path):
    trace = load(name)
    path = trace.write_chrome(tmp_path / f"{name}.json")
    document = json.loads(path.read_text())
    slices = [event for event in document["traceEvents"] if event["ph"] == "X"]
    scopes = [event for event in slices if event["name"] != LIFETIME]
    assert len(scopes) == len(trace.events)
    assert Counter(event["name"] for event in scopes) == Counter(trace.events["scope"].astype(str))
    assert sum(event["args"]["cycles"] for event in scopes) == trace.events["dur_cycles"].sum()
    assert sum(round(event["dur"] * 1000) for event in scopes) == trace.events["dur_ns"].sum()
    assert len(slices) - len(scopes) == int(trace.units["finished"].sum())
    assert document["otherData"]["proton_ik"]["device"] == "NVIDIA H200"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("keep", [0.5, 0.99, 0.01], ids=["half", "all-but-the-end", "first-bytes"])
def test_a_truncated_capture_raises_the_viewers_clear_error(name, keep, tmp_path):
    data = CAPTURES[name].path.read_bytes()
    path = tmp_path / f"{name}.pik"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(viewer.SessionFileError, match="truncated or corrupt") as caught:
        viewer.load(path)
    assert isinstance(caught.value, ValueError)
    assert not isinstance(caught.value, zipfile.BadZipFile)
    assert str(path) in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def _entry_data_offset(path: Path, entry: str) -> int:
    """Where an entry's (possibly compressed) bytes start: after its local header, name and extra."""
    with zipfile.ZipFile(path) as archive:
        offset = archive.getinfo(entry).header_offset
    raw = path.read_bytes()
    name_length, extra_length = struct.unpack_from("<HH", raw, offset + 26)
    return offset + 30 + name_length + extra_length


def _damage(path: Path, start: int, length: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[start : start + length] = bytes(b ^ 0x5A for b in raw[start : start + length])
    path.write_bytes(bytes(raw))


def test_a_damaged_buffer_in_a_capture_raises_session_file_error(tmp_path):
    """The runtime stores buffers uncompressed; damage inside one fails its CRC. StoredLaunch
    raises SessionFileError, but viewer.load must not turn it into a plain ValueError."""
    path = tmp_path / "add.pik"
    path.write_bytes(CAPTURES["add"].path.read_bytes())
    _damage(path, _entry_data_offset(path, "launches/000000.npy") + 1024, 16)
    with pytest.raises(viewer.SessionFileError, match="corrupt"):
        viewer.load(path)


def test_a_damaged_compressed_buffer_raises_session_file_error(tmp_path):
    """SessionWriter compresses by default; damaged deflate data raises zlib.error, which must
    become a SessionFileError like any other damage."""
    session = read_session(CAPTURES["add"].path)
    path = viewer.write_session(
        tmp_path / "add.pik", session.info, [viewer.LaunchCapture(s.meta, s.buffer) for s in session]
    )
    _damage(path, _entry_data_offset(path, "launches/000000.npy") + 8, 64)
    with pytest.raises(viewer.SessionFileError, match="corrupt"):
        read_session(path).launches[0].buffer  # noqa: B018
