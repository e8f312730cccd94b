"""``diff``: sessions with a known change, sessions from one distribution, matching, clocks.

Sessions are written as the runtime writes a kernel of straight-line scopes (one pair entry per
scope and warp), from durations drawn per event: each CTA has its own factor (its SM, its wave),
so the events of a CTA are correlated, as on a GPU, and only a resampling by CTA keeps the
false-positive rate at the stated level.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from proton_ik import viewer
from proton_ik.contract.layout import (
    CTA_HEADER_DTYPE,
    MAGIC,
    SLOT_BYTES,
    SLOT_DTYPE,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    BufferLayout,
    ring_capacity,
)
from proton_ik.contract.tags import COMPACT_DURATION_LIMIT, compact_tag
from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer import SessionFileError, load
from proton_ik.viewer.diff import (
    FASTER,
    NEGLIGIBLE,
    NO_CHANGE,
    ONLY_A,
    ONLY_B,
    SLOWER,
    DiffOptions,
    diff,
    format_diff,
)
from proton_ik.viewer.diff.bootstrap import MedianBand, resample_counts
from proton_ik.viewer.diff.compare import compare, kernel_table
from proton_ik.viewer.diff.sample import ScopeKey, SessionSample
from proton_ik.viewer.tables import Pipeline, TimeShift, runs

DATA = Path(__file__).parents[1] / "data"
# name, source line, median cycles
SCOPES = (("load", 18, 2000), ("compute", 21, 6000), ("store", 24, 1500))
GAP_CYCLES = 40  # between one scope's end and the next one's begin


def write_session(
    path: Path,
    *,
    num_ctas: int = 64,
    units: int = 4,
    launches: int = 1,
    scopes: Sequence[tuple[str, int, int]] = SCOPES,
    factor: Mapping[str, float] | None = None,
    ghz: float = 1.755,
    cta_spread: float = 0.1,
    event_spread: float = 0.05,
    seed: int = 0,
    kernel: str = "kernel",
    sms: int = 132,
) -> Path:
    """A session of ``launches`` launches of ``num_ctas`` CTAs x ``units`` warps, each warp running
    ``scopes`` one after another, durations lognormal around their medians (times ``factor[name]``)
    with a per-CTA factor of spread ``cta_spread``, on SMs clocked at ``ghz``. Each scope is a pair
    of one slot (layout version 3), as the device writes a short one."""
    factor = factor or {}
    layout = BufferLayout(units=units, capacity=ring_capacity(len(scopes)), version=3)
    rng = np.random.default_rng(seed)
    median = np.array([cycles * factor.get(name, 1.0) for name, _, cycles in scopes])
    profile = {
        "mode": "instrumentation",
        "num_warps": units,
        "warps_per_unit": 1,
        "layout": layout.to_dict(),
        "scopes": [{"id": i, "name": name, "line": line} for i, (name, line, _) in enumerate(scopes)],
    }
    cta, count = np.arange(num_ctas), len(scopes)
    sm = cta % sms
    clock0 = 10_000_000 * (sm + 1)
    time0 = 1_700_000_000_000_000_000 + 1_000 * sm
    info = {"name": path.stem, "time_shift_cycles": {"single": 0, "pair": 0}}
    with SessionWriter(path, info, compress=False, trim=False) as writer:
        for launch in range(launches):
            buffer = np.full(num_ctas * layout.cta_bytes, 0xCD, dtype=np.uint8)
            header = np.ndarray((num_ctas,), CTA_HEADER_DTYPE, buffer, 0, (layout.cta_bytes,))
            for name, value in {
                "magic": MAGIC, "version": 3, "cta": cta, "smid": sm, "nctaid_x": num_ctas,
                "nctaid_y": 1, "nctaid_z": 1, "units": units, "capacity": layout.capacity, "reserved": 0,
                "cluster": cta, "cluster_rank": 0, "cluster_ctas": 1,
            }.items():  # fmt: skip
                header[name] = value
            spread = cta_spread * rng.standard_normal((num_ctas, 1, 1))
            noise = event_spread * rng.standard_normal((num_ctas, units, count))
            durations = np.rint(median * np.exp(spread + noise)).astype(np.int64)
            steps = np.empty((num_ctas, units, 2 * count), dtype=np.int64)
            steps[..., 0::2], steps[..., 1::2] = GAP_CYCLES, durations
            start = (clock0 + 50_000_000 * launch + (cta // sms) * 400_000)[:, None]
            start = start + rng.integers(0, 100, (num_ctas, units))
            clocks = start[..., None] + np.cumsum(steps, axis=-1)
            end = clocks[..., -1] + 30
            unit = np.ndarray(
                (num_ctas, units),
                UNIT_HEADER_DTYPE,
                buffer,
                layout.unit_offset(0),
                (layout.cta_bytes, layout.unit_bytes),
            )

            def timer(clock: np.ndarray) -> np.ndarray:
                now = time0[:, None] + np.floor((clock - clock0[:, None]) / ghz).astype(np.int64)
                return now - now % 32

            unit["start_clock"], unit["start_time"] = start, timer(start)
            unit["end_clock"], unit["end_time"] = end, timer(end)
            # One slot a pair, two records a slot: nothing for the tally to take off.
            unit["entries"], unit["tally"], unit["end_magic"] = count, 0, MAGIC
            slots = np.ndarray(
                (num_ctas, units, count),
                SLOT_DTYPE,
                buffer,
                layout.unit_offset(0) + UNIT_HEADER_BYTES,
                (layout.cta_bytes, layout.unit_bytes, SLOT_BYTES),
            )
            assert durations.max() < COMPACT_DURATION_LIMIT, "a pair this long takes two slots"
            slots["tag"] = np.array([compact_tag(i) for i in range(count)], np.uint32) | durations
            slots["clock"] = clocks[..., 0::2] & 0xFFFFFFFF
            meta = {"launch": launch, "kernel": kernel, "num_warps": units, "profile": profile}
            writer.add_launch(meta, buffer)
    return path


def sample(
    rng: np.random.Generator, ctas: int = 48, events: int = 8, cta_spread: float = 0.3, shift: float = 1.0
) -> SessionSample:
    """A session reduced straight to a sample: one scope, ``events`` per CTA, a per-CTA factor."""
    cta = np.repeat(np.arange(ctas), events)
    level = np.exp(cta_spread * rng.standard_normal(ctas))[cta]
    durations = np.rint(shift * 1000 * level * np.exp(0.2 * rng.standard_normal(len(cta)))).astype(np.int64)
    return SessionSample(
        label="synthetic",
        keys=(ScopeKey("kernel", "body", 7),),
        event_key=np.zeros(len(cta), dtype=np.int64),
        event_cta=cta,
        event_ns=durations,
        cta_launch=np.zeros(ctas, dtype=np.int64),
        cta_warp_ns=np.bincount(cta, durations, minlength=ctas) * 1.25,
        launch_kernel=("kernel",),
        launch_span_ns=np.array([10_000.0]),
        mhz=1755.0,
        records=2 * len(cta),
    )


def row(frame: pd.DataFrame, scope: str) -> pd.Series:
    (index,) = np.flatnonzero(frame["scope"] == scope)
    return frame.iloc[index]


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("diff")
    return {
        "a": write_session(folder / "a.pik", seed=1),
        "b": write_session(folder / "b.pik", seed=2, factor={"compute": 1.1}),
        "same": write_session(folder / "same.pik", seed=3),
        "fast_clock": write_session(folder / "fast_clock.pik", seed=4, ghz=1.98),
        "moved": write_session(
            folder / "moved.pik",
            seed=5,
            scopes=(("load", 18, 2000), ("compute", 23, 6000), ("store", 24, 1500)),
        ),
        "other": write_session(folder / "other.pik", seed=6, kernel="other_kernel"),
    }


def test_a_scope_ten_percent_slower_is_found_slower_and_the_others_unchanged(sessions):
    frame = diff(sessions["a"], sessions["b"])
    compute = row(frame, "compute")
    assert compute["verdict"] == SLOWER
    assert 0 < compute["change_low"] < 0.1 < compute["change_high"] < 0.2
    assert compute["change"] == pytest.approx(0.1, abs=0.03)
    assert compute["share_change_low"] > 0
    for scope in ("load", "store"):
        assert row(frame, scope)["verdict"] == NO_CHANGE
        assert row(frame, scope)["change_low"] < 0 < row(frame, scope)["change_high"]
    # Swapped, the same change is faster.
    assert row(diff(sessions["b"], sessions["a"]), "compute")["verdict"] == FASTER


def test_the_medians_and_shares_are_those_show_prints(sessions):
    frame = diff(sessions["a"], sessions["b"])
    for name, side in (("a", "a"), ("b", "b")):
        scopes = load(sessions[name]).summary().scopes.set_index("scope")
        for scope in ("load", "compute", "store"):
            assert row(frame, scope)[f"median_{side}_ns"] == scopes.loc[scope, "median_ns"]
            assert row(frame, scope)[f"share_{side}"] == pytest.approx(scopes.loc[scope, "share"])
            assert row(frame, scope)[f"count_{side}"] == scopes.loc[scope, "count"]


def test_the_kernel_change_is_explained_by_the_scope_that_changed(sessions):
    frame = diff(sessions["a"], sessions["b"])
    (kernel,) = kernel_table(frame).itertuples()
    assert kernel.launches_a == kernel.launches_b == 1
    assert kernel.warp_change_low > 0
    top = frame.loc[frame["per_launch_change_ns"].abs().idxmax()]
    assert top["scope"] == "compute"
    assert top["explains"] == pytest.approx(
        top["per_launch_change_ns"] / (kernel.warp_b_ns - kernel.warp_a_ns)
    )
    text = format_diff(frame)
    assert "the scopes whose time per launch changed most: compute (line 21)" in text


def test_a_session_against_one_from_the_same_distribution_shows_no_change(sessions):
    frame = diff(sessions["a"], sessions["same"])
    assert set(frame["verdict"]) == {NO_CHANGE}


def test_a_small_significant_change_below_min_change_is_negligible(sessions):
    frame = diff(sessions["a"], sessions["b"], min_change=0.2)
    assert row(frame, "compute")["verdict"] == NEGLIGIBLE
    assert "significant changes under 20.0% of A's median are negligible" in format_diff(frame)


def test_the_intervals_follow_the_seed_and_narrow_with_confidence(sessions):
    first = diff(sessions["a"], sessions["b"], seed=7)
    again = diff(sessions["a"], sessions["b"], seed=7)
    pd.testing.assert_frame_equal(first, again)
    other = diff(sessions["a"], sessions["b"], seed=8)
    assert not np.allclose(first["change_ns_low"], other["change_ns_low"])
    narrow = diff(sessions["a"], sessions["b"], seed=7, confidence=0.5)
    assert (
        narrow["change_ns_high"] - narrow["change_ns_low"] < first["change_ns_high"] - first["change_ns_low"]
    ).all()


def test_sessions_at_different_clocks_compare_in_ns_and_the_report_says_so(sessions):
    frame = diff(sessions["a"], sessions["fast_clock"])
    # The same cycles at a faster clock take less time.
    assert set(frame["verdict"]) == {FASTER}
    assert frame["change"].to_numpy() == pytest.approx(1.755 / 1.98 - 1, abs=0.03)
    assert frame.attrs["clocks_differ"]
    assert frame.attrs["sessions"]["a"]["mhz"] == pytest.approx(1755, rel=1e-3)
    assert frame.attrs["sessions"]["b"]["mhz"] == pytest.approx(1980, rel=1e-3)
    mhz_a, mhz_b = (frame.attrs["sessions"][side]["mhz"] for side in "ab")
    note = f"note: the SM clocks differ by {mhz_b / mhz_a - 1:.1%} (A {mhz_a:,.0f} MHz, B {mhz_b:,.0f} MHz)"
    assert note in format_diff(frame)
    assert not diff(sessions["a"], sessions["same"]).attrs["clocks_differ"]
    assert "clocks differ" not in format_diff(diff(sessions["a"], sessions["same"]))


def test_a_scope_whose_line_moved_is_not_paired_unless_lines_are_ignored(sessions):
    frame = diff(sessions["a"], sessions["moved"])
    moved = frame[frame["scope"] == "compute"].set_index("verdict")
    assert sorted(moved.index) == [ONLY_A, ONLY_B]
    assert moved.loc[ONLY_A, "line_a"] == 21 and pd.isna(moved.loc[ONLY_A, "line_b"])
    assert moved.loc[ONLY_B, "line_b"] == 23 and pd.isna(moved.loc[ONLY_B, "median_a_ns"])
    assert "scope compute is at line 21 in A and 23 in B, so it is not paired" in format_diff(frame)
    paired = diff(sessions["a"], sessions["moved"], ignore_lines=True)
    compute = row(paired, "compute")
    assert (compute["line_a"], compute["line_b"], compute["verdict"]) == (21, 23, NO_CHANGE)


def test_sessions_with_no_scope_in_common_say_so_and_list_their_kernels(sessions):
    with pytest.raises(ValueError, match="no scope in common") as error:
        diff(sessions["a"], sessions["other"])
    assert "kernel: load (line 18)" in str(error.value)
    assert "other_kernel: load (line 18)" in str(error.value)
    with pytest.raises(ValueError, match="kernel 'missing' is in neither session"):
        diff(sessions["a"], sessions["b"], kernel="missing")


def test_bad_inputs_and_options_are_named(sessions, tmp_path):
    with pytest.raises(SessionFileError, match="does not exist"):
        diff(tmp_path / "nothing.pik", sessions["a"])
    (tmp_path / "text.pik").write_text("not a session")
    with pytest.raises(SessionFileError, match=r"text\.pik"):
        diff(sessions["a"], tmp_path / "text.pik")
    for options, fragment in (
        ({"confidence": 1.5}, "confidence=1.5"),
        ({"resamples": 10}, "resamples=10"),
        ({"min_change": -0.1}, "min_change=-0.1"),
    ):
        with pytest.raises(ValueError, match=fragment):
            diff(sessions["a"], sessions["b"], **options)


def test_the_package_exports_diff_and_imports_it_only_when_asked():
    import proton_ik

    check = "import sys, proton_ik; print('proton_ik.viewer.diff' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], capture_output=True, text=True).stdout == "False\n"
    assert proton_ik.diff is diff
    assert "diff" in proton_ik.__all__
    with pytest.raises(AttributeError, match="no attribute 'difff'"):
        proton_ik.difff  # noqa: B018


def test_a_loaded_trace_compares_as_its_file(sessions):
    from_files = diff(sessions["a"], sessions["b"])
    from_traces = diff(load(sessions["a"]), load(sessions["b"]))
    columns = ["scope", "median_a_ns", "median_b_ns", "change_ns_low", "change_ns_high", "share_a"]
    pd.testing.assert_frame_equal(from_files[columns], from_traces[columns])


def test_a_session_decoded_in_many_chunks_gives_the_same_diff(sessions, monkeypatch):
    whole = diff(sessions["a"], sessions["b"])
    monkeypatch.setattr(runs, "GROUP_BYTES", 2048)  # a few CTAs per chunk
    assert len(list(Pipeline(viewer.read_session(sessions["a"]).launches, TimeShift()).chunks())) > 10
    pd.testing.assert_frame_equal(diff(sessions["a"], sessions["b"]), whole)


def test_ctas_of_several_launches_resample_within_their_launch(tmp_path):
    a = write_session(tmp_path / "a.pik", launches=3, num_ctas=16, seed=1)
    b = write_session(tmp_path / "b.pik", launches=2, num_ctas=24, seed=2, factor={"load": 0.8})
    frame = diff(a, b)
    (kernel,) = kernel_table(frame).itertuples()
    assert (kernel.launches_a, kernel.launches_b) == (3, 2)
    assert row(frame, "load")["verdict"] == FASTER
    assert row(frame, "load")["ctas_a"] == 48
    counts = resample_counts(np.random.default_rng(0), np.array([3, 5, 3]), 200)
    assert (counts[:, :3].sum(axis=1) == 3).all() and (counts[:, 3:8].sum(axis=1) == 5).all()


def test_the_resampled_median_is_the_median_of_the_drawn_ctas_events():
    rng = np.random.default_rng(3)
    cta = np.repeat(np.arange(40), rng.integers(1, 6, 40))
    values = rng.integers(0, 50, len(cta))  # many ties
    band = MedianBand.build(values, cta, 40)
    counts = resample_counts(rng, np.array([40]), 300)
    medians = band.medians(counts, counts @ band.size, counts @ band.below)
    expected = [np.median(np.repeat(values, row[cta].astype(int))) for row in counts]
    np.testing.assert_array_equal(medians, expected)


def test_a_narrow_band_falls_back_to_every_record_and_stays_exact():
    rng = np.random.default_rng(4)
    cta = np.repeat(np.arange(30), 5)
    values = rng.integers(0, 1000, len(cta))
    wide = MedianBand.build(values, cta, 30)
    order = np.argsort(values, kind="stable")
    ranked, ranked_cta = values[order], cta[order]
    below = np.bincount(ranked_cta[:74], minlength=30).astype(float)
    narrow = MedianBand(values, cta, 74, ranked[74:76], ranked_cta[74:76], wide.size, below)
    assert narrow.median == wide.median == np.median(values)
    counts = resample_counts(rng, np.array([30]), 200)
    np.testing.assert_array_equal(
        narrow.medians(counts, counts @ narrow.size, counts @ narrow.below),
        wide.medians(counts, counts @ wide.size, counts @ wide.below),
    )


def test_false_positives_stay_at_the_stated_level_over_many_pairs():
    """200 pairs of sessions drawn from one distribution with correlated CTAs: at 90% confidence
    about 20 pairs differ by chance; more than 30 has a chance under 1% (Binomial(200, 0.1))."""
    rng = np.random.default_rng(11)
    options = DiffOptions(confidence=0.9, resamples=400)
    verdicts = [compare(sample(rng), sample(rng), options)["verdict"].iloc[0] for _ in range(200)]
    false_positives = sum(v != NO_CHANGE for v in verdicts)
    assert false_positives <= 30
    # And the same statistic finds a shift of 30% in nearly every pair.
    found = [compare(sample(rng), sample(rng, shift=1.3), options)["verdict"].iloc[0] for _ in range(20)]
    assert found.count(SLOWER) >= 18


def test_the_cli_report_prints_the_table_and_kernel_summary(sessions):
    text = format_diff(diff(sessions["a"], sessions["b"]))
    assert text.splitlines()[0].startswith(f"A: {sessions['a']} (1 launch(es), ")
    assert "95% intervals from 1,000 resamples of the CTAs of each launch (seed 0)" in text
    header = next(line for line in text.splitlines() if "median A ns" in line).split()
    assert header == [
        "scope",
        "line",
        "median",
        "A",
        "ns",
        "median",
        "B",
        "ns",
        "change",
        "95%",
        "CI",
        "share",
        "A",
        "share",
        "B",
        "verdict",
    ]
    assert "kernel: 1 launch(es) in A, 1 in B; span per launch" in text


@pytest.mark.skipif(
    not (DATA / "diff_a.pik").exists() or not (DATA / "diff_b.pik").exists(),
    reason="tests/data/diff_a.pik and diff_b.pik are not captured yet (tests/gpu/capture_diff.py)",
)
def test_the_captured_block_sizes_compare():
    """diff_a: add_kernel at BLOCK 256 (384 CTAs), diff_b: at BLOCK 1024 (96 CTAs), 4 warps, one
    launch each: every warp runs load, compute and store once."""
    frame = diff(DATA / "diff_a.pik", DATA / "diff_b.pik")
    assert list(frame["scope"]) == ["load", "compute", "store"]
    assert (frame["count_a"] == 384 * 4).all() and (frame["count_b"] == 96 * 4).all()
    assert (frame["ctas_a"] == 384).all() and (frame["ctas_b"] == 96).all()
    assert set(frame["verdict"]) <= {SLOWER, FASTER, NO_CHANGE}
    assert (frame["change_ns_low"] < frame["change_ns_high"]).all()
    (kernel,) = kernel_table(frame).itertuples()
    assert (kernel.kernel, kernel.launches_a, kernel.launches_b) == ("add_kernel", 1, 1)
    assert f"{kernel.kernel}: 1 launch(es) in A, 1 in B" in format_diff(frame)


@pytest.mark.skipif(
    not os.environ.get("PROTON_IK_DIFF_SPEED"), reason="set PROTON_IK_DIFF_SPEED=1: 10M-record sessions"
)
def test_diff_of_two_ten_million_record_sessions_takes_under_ten_seconds(tmp_path):
    # 10 launches x 16384 CTAs x 8 warps x 3 scopes x 2 records: 7.9M records; 13 launches: 10.2M.
    a = write_session(tmp_path / "a.pik", launches=13, num_ctas=16384, units=8, seed=1)
    b = write_session(
        tmp_path / "b.pik", launches=13, num_ctas=16384, units=8, seed=2, factor={"compute": 1.01}
    )
    began = time.perf_counter()
    frame = diff(a, b)
    took = time.perf_counter() - began
    records = frame.attrs["sessions"]["a"]["records"] + frame.attrs["sessions"]["b"]["records"]
    print(f"diff of {records:,} records in {took:.2f} s")
    assert frame.attrs["sessions"]["a"]["records"] >= 10_000_000
    assert row(frame, "compute")["verdict"] == SLOWER
    assert took < 10
