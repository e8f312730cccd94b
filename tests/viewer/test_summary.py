import pytest

from proton_ik.viewer import Trace

T0 = 1_700_000_000_000_000_000
A, B = 0, 1


def test_scope_statistics_match_hand_computed_values(fake_launch):
    # A 1 GHz clock and a 1 ns globaltimer: nanoseconds equal cycles, so every number is exact.
    fake = fake_launch(units=2, capacity=16)
    fake.cta(0, smid=0)
    first = fake.unit(0, 0, 0, T0)
    for begin, end in [(1000, 1100), (2000, 2200), (3000, 3300), (4000, 4400)]:
        first.begin(A, begin)
        first.end(A, end)
    first.begin(B, 5000)
    first.end(B, 5050)
    first.begin(B, 6000)  # never closed
    first.finish(30_000, T0 + 30_000)
    second = fake.unit(0, 1, 0, T0)
    second.begin(B, 100)
    second.end(B, 250)
    second.finish(20_000, T0 + 20_000)
    summary = Trace.from_captures({"name": "s"}, [fake.capture(scopes=["a", "b"])]).summary()

    rows = summary.scopes.set_index("scope")
    a, b = rows.loc["a"], rows.loc["b"]
    assert (a["count"], a["mean_ns"], a["median_ns"], a["p90_ns"]) == (4, 250, 250, pytest.approx(370))
    assert (a["mean_cycles"], a["p90_cycles"], a["total_ns"]) == (250, pytest.approx(370), 1000)
    assert (b["count"], b["mean_ns"], b["median_ns"], b["p90_ns"]) == (2, 100, 100, pytest.approx(140))
    # Share: the scope's total over the kernel's unit lifetimes (30 us + 20 us).
    assert a["share"] == pytest.approx(1000 / 50_000)
    assert b["share"] == pytest.approx(200 / 50_000)
    assert (a["unmatched_begin"], b["unmatched_begin"], b["unmatched_end"]) == (0, 1, 0)
    (kernel,) = summary.kernels.itertuples()
    assert (kernel.records, kernel.events, kernel.unmatched_begin, kernel.lifetime_ns) == (13, 6, 1, 50_000)
    assert kernel.mhz == pytest.approx(1000)

    text = str(summary)
    assert "kernel: 1 launch(es), 2 units, SM clock 1000 MHz, 6 events" in text
    assert "370" in text and "2.0%" in text
    assert "1 begins" in text


def test_an_empty_session_summarizes_to_a_sentence():
    assert str(Trace.from_captures({}, []).summary()) == "proton_ik: no launches were captured"
