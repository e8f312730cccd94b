import numpy as np
import pytest

from proton_ik.contract.layout import READ_VERSIONS, BufferLayout
from proton_ik.contract.tags import make_tag
from proton_ik.viewer.decode.buffers import decode_buffer, decode_buffers, extend_clocks

WRAP = 1 << 32


def test_headers_and_records_decode_as_written(fake_launch):
    fake = fake_launch(units=2, capacity=8, num_ctas=2)
    fake.cta(0, smid=5)
    fake.cta(1, smid=7)
    first = fake.unit(0, 0, start_clock=1000, start_time=5000)
    for scope, is_end, clock in [(0, False, 1100), (0, True, 1200), (1, False, 1300), (1, True, 1450)]:
        first.record(scope, is_end, clock)
    first.finish(1500, 6000)
    second = fake.unit(0, 1, start_clock=1010, start_time=5008)
    second.begin(2, 1050)
    second.end(2, 1060)
    second.finish(1100, 5100)
    fake.unit(1, 0, 7000, 9000).finish(7100, 9100)
    fake.unit(1, 1, 7000, 9000).finish(7100, 9100)

    decoded = decode_buffer(fake.buffer, fake.layout)

    assert decoded.ctas.valid.tolist() == [True, True]
    assert decoded.ctas.smid.tolist() == [5, 7]
    assert decoded.ctas.nctaid.tolist() == [[2, 1, 1], [2, 1, 1]]
    units = decoded.units
    assert units.cta.tolist() == [0, 0, 1, 1]
    assert units.unit.tolist() == [0, 1, 0, 1]
    assert units.smid.tolist() == [5, 5, 7, 7]
    assert units.start_clock.tolist() == [1000, 1010, 7000, 7000]
    assert units.end_time.tolist() == [6000, 5100, 9100, 9100]
    assert units.count.tolist() == [4, 2, 0, 0]
    assert units.overwritten.tolist() == [0, 0, 0, 0]
    assert units.finished.all()
    records = decoded.records
    assert records.unit_row.tolist() == [0, 0, 0, 0, 1, 1]
    assert records.index.tolist() == [0, 1, 2, 3, 0, 1]
    assert records.scope.tolist() == [0, 0, 1, 1, 2, 2]
    assert records.is_end.tolist() == [False, True, False, True, False, True]
    assert records.clock.tolist() == [1100, 1200, 1300, 1450, 1050, 1060]
    assert records.tag.tolist() == [
        make_tag(s, e) for s, e in zip(records.scope, records.is_end, strict=True)
    ]
    assert decoded.problems == ()


@pytest.mark.parametrize("version", READ_VERSIONS)
def test_ring_keeps_the_newest_records_and_counts_the_rest(fake_launch, version):
    fake = fake_launch(units=1, capacity=4, version=version)
    fake.cta(0, smid=0)
    unit = fake.unit(0, 0, 0, 0)
    for i in range(10):
        unit.record(i % 3, i % 2 == 1, 100 * (i + 1))
    unit.finish(2000, 2000)

    decoded = decode_buffer(fake.buffer, fake.layout)

    assert decoded.units.count.tolist() == [10]
    assert decoded.units.kept.tolist() == [4]
    assert decoded.units.overwritten.tolist() == [6]
    assert decoded.records.index.tolist() == [6, 7, 8, 9]
    assert decoded.records.scope.tolist() == [0, 1, 2, 0]
    assert decoded.records.is_end.tolist() == [False, True, False, True]
    assert decoded.records.clock.tolist() == [700, 800, 900, 1000]


def test_64_bit_clocks_survive_32_bit_wraps(fake_launch):
    fake = fake_launch(units=2, capacity=16)
    fake.cta(0, smid=3)
    start = 3 * WRAP - 500
    # Across a wrap, and with a gap just under 2**32 cycles between two records.
    clocks = [start + 100, start + 499, start + 501, start + 900, start + 900 + WRAP - 7, start + WRAP + 2000]
    finished = fake.unit(0, 0, start, 0)
    for i, clock in enumerate(clocks):
        finished.record(0, i % 2 == 1, clock)
    finished.finish(clocks[-1] + 10, 10)
    # An unfinished unit that did store its count: decoded forwards from its start clock.
    running = fake.unit(0, 1, start, 0)
    for i, clock in enumerate(clocks[:4]):
        running.record(1, i % 2 == 1, clock)
    running.write_count()

    decoded = decode_buffer(fake.buffer, fake.layout)

    assert decoded.units.finished.tolist() == [True, False]
    assert decoded.units.decoded.tolist() == [True, True]
    assert decoded.records.clock.tolist() == clocks + clocks[:4]
    assert any("did not reach their epilogue" in p for p in decoded.problems)


def test_unfinished_unit_without_a_count_is_skipped_and_reported(fake_launch):
    fake = fake_launch(units=2, capacity=8)
    fake.cta(0, smid=0)
    fake.unit(0, 0, 0, 0).finish(10, 10)
    crashed = fake.unit(0, 1, 0, 0)
    crashed.begin(0, 5)  # its count was never stored: the field still holds unwritten memory

    decoded = decode_buffer(fake.buffer, fake.layout)

    assert decoded.units.decoded.tolist() == [True, False]
    assert decoded.units.kept.tolist() == [0, 0]
    assert len(decoded.records) == 0
    assert any("1 unfinished units have no usable record count" in p for p in decoded.problems)


def test_ctas_that_never_ran_or_disagree_are_counted_not_decoded(fake_launch):
    fake = fake_launch(units=1, capacity=8, num_ctas=3)
    fake.cta(0, smid=1)
    fake.unit(0, 0, 0, 0).finish(10, 10)
    fake.cta(2, smid=1, capacity=16)  # CTA 1 never ran; CTA 2's header disagrees with the metadata

    decoded = decode_buffer(fake.buffer, fake.layout)

    assert decoded.ctas.ran.tolist() == [True, False, True]
    assert decoded.ctas.valid.tolist() == [True, False, False]
    assert decoded.units.cta.tolist() == [0]
    assert any(p.startswith("1 of 3 CTAs have no header") for p in decoded.problems)
    assert any(p.startswith("1 CTAs have a header that disagrees") for p in decoded.problems)


def test_records_more_than_2_to_32_cycles_apart_are_reported(fake_launch):
    fake = fake_launch(units=1, capacity=8)
    fake.cta(0, smid=0)
    unit = fake.unit(0, 0, 1000, 0)
    unit.begin(0, 2000)
    unit.end(0, 2000 + WRAP + 5)
    unit.finish(2000 + WRAP + 10, 10)

    decoded = decode_buffer(fake.buffer, fake.layout)

    assert any("more than 2**32 cycles apart" in p for p in decoded.problems)


@pytest.mark.parametrize("version", READ_VERSIONS)
def test_a_unit_that_ran_past_a_clock_wrap_gets_its_whole_start_back(fake_launch, version):
    """The kernel rebuilds the start at the exit from its low 32 bits, so a unit that ran 2**32
    cycles or more reads a start whole wraps late; its %globaltimer span (2.5 s) allows that, and
    its first record puts the start back where it was."""
    fake = fake_launch(units=2, capacity=8, version=version)
    fake.cta(0, smid=0)
    true_start, end = 7 * WRAP + 1000, 7 * WRAP + 1000 + WRAP + 600_000_000
    rebuilt = end - ((end - true_start) % WRAP)
    long_unit = fake.unit(0, 0, rebuilt, 10**9)
    long_unit.pair(0, true_start + 1000, true_start + 3_000_000_000)
    long_unit.pair(1, true_start + WRAP + 100, true_start + WRAP + 200)
    long_unit.finish(end, 10**9 + 2_500_000_000)
    short_unit = fake.unit(0, 1, 5 * WRAP, 10**9)  # 10 ns: a record before its start is a gap
    short_unit.pair(0, 5 * WRAP - 50, 5 * WRAP + 20)
    short_unit.finish(5 * WRAP + 30, 10**9 + 10)

    decoded = decode_buffer(fake.buffer, fake.layout)

    assert rebuilt == true_start + WRAP
    assert decoded.units.start_clock.tolist() == [true_start, 5 * WRAP]
    assert decoded.records.clock[:4].tolist() == [
        true_start + 1000,
        true_start + 3_000_000_000,
        true_start + WRAP + 100,
        true_start + WRAP + 200,
    ]
    assert next(p for p in decoded.problems if "2**32" in p).startswith(
        "1 units have records more than 2**32 cycles apart"
    )  # the short unit only


def test_a_buffer_that_is_not_whole_ctas_is_rejected():
    layout = BufferLayout(units=2, capacity=8)
    with pytest.raises(ValueError, match="not a whole number of"):
        decode_buffer(np.zeros(layout.cta_bytes + 8, dtype=np.uint8), layout)


def test_extend_clocks_matches_a_random_walk_in_both_directions():
    rng = np.random.default_rng(7)
    sizes = [1, 50, 300, 7]
    group = np.repeat(np.arange(len(sizes)), sizes)
    steps = rng.integers(0, WRAP, size=len(group), dtype=np.int64)
    starts = rng.integers(0, 1 << 40, size=len(sizes), dtype=np.int64)
    full = np.concatenate(
        [s + np.cumsum(steps[group == g]) for g, s in enumerate(starts)]
    )  # each group's clocks, strictly after its start
    ends = np.array([full[group == g][-1] + 3 for g in range(len(sizes))])
    from_end = np.array([True, False, True, False])
    anchor = np.where(from_end, ends, starts)

    rebuilt = extend_clocks(full & (WRAP - 1), group, anchor, from_end)

    assert np.array_equal(rebuilt, full)


@pytest.mark.parametrize("version", READ_VERSIONS)
def test_pair_entries_expand_into_time_ordered_records(fake_launch, version):
    """Nested scopes in straight-line code: the inner pair's entry is written before the outer's,
    yet the outer begin came first; singles and pairs mix in one ring."""
    fake = fake_launch(units=1, capacity=8, version=version)
    fake.cta(0, smid=3)
    unit = fake.unit(0, 0, start_clock=1000, start_time=0)
    unit.begin(2, 1050)  # a single begin: its end sits in another block
    unit.pair(1, 1200, 1300)  # inner scope, written at 1300
    unit.pair(0, 1100, 1400)  # outer scope, written at 1400, begun at 1100
    unit.end(2, 1500)
    unit.finish(1600, 100)

    decoded = decode_buffer(fake.buffer, fake.layout)

    records = decoded.records
    assert records.clock.tolist() == [1050, 1100, 1200, 1300, 1400, 1500]
    assert records.scope.tolist() == [2, 0, 1, 1, 0, 2]
    assert records.is_end.tolist() == [False, False, False, True, True, True]
    assert records.index.tolist() == [0, 1, 2, 3, 4, 5]
    # The pair bit is a detail of the entry, not part of the record's tag.
    assert records.tag.tolist() == [
        make_tag(s, e) for s, e in zip(records.scope, records.is_end, strict=True)
    ]
    units = decoded.units
    assert units.entries.tolist() == [4]
    assert units.count.tolist() == [6] and units.kept.tolist() == [6] and units.overwritten.tolist() == [0]


@pytest.mark.parametrize("version", READ_VERSIONS)
def test_a_ring_of_pairs_counts_overwritten_records_exactly(fake_launch, version):
    fake = fake_launch(units=1, capacity=4, version=version)
    fake.cta(0, smid=0)
    unit = fake.unit(0, 0, start_clock=0, start_time=0)
    unit.begin(0, 10)  # single: 1 record
    for i in range(6):  # 6 pairs: 12 records
        unit.pair(1, 100 + 20 * i, 110 + 20 * i)
    unit.end(0, 300)  # single: 1 record
    unit.finish(400, 400)

    decoded = decode_buffer(fake.buffer, fake.layout)

    units = decoded.units
    assert units.entries.tolist() == [8] and units.kept_entries.tolist() == [4]
    # 14 records written; the newest 4 entries hold 3 pairs and the final single: 7 records.
    assert units.count.tolist() == [14] and units.kept.tolist() == [7] and units.overwritten.tolist() == [7]
    assert decoded.records.clock.tolist() == [160, 170, 180, 190, 200, 210, 300]
    assert decoded.records.index.tolist() == list(range(7, 14))


@pytest.mark.parametrize("version", READ_VERSIONS)
def test_pair_clocks_extend_across_a_32_bit_wrap(fake_launch, version):
    fake = fake_launch(units=1, capacity=4, version=version)
    fake.cta(0, smid=0)
    start = WRAP - 100
    unit = fake.unit(0, 0, start_clock=start, start_time=0)
    unit.pair(0, WRAP - 50, WRAP + 50)  # begun before the low word wrapped, ended after
    unit.finish(WRAP + 80, 1)

    decoded = decode_buffer(fake.buffer, fake.layout)

    assert decoded.records.clock.tolist() == [WRAP - 50, WRAP + 50]


def _broken_launch(fake_launch):
    """Two CTAs: CTA 1 never ran, and of CTA 0's four units (on SM 1) unit 0 crashed mid-scope."""
    broken = fake_launch(units=4, capacity=64, num_ctas=2)
    broken.cta(0, smid=1)
    for u in range(4):
        unit = broken.unit(0, u, 0, 0)
        unit.begin(0, 10)
        if u:
            unit.end(0, 20)
            unit.finish(30, 30)
    return broken


def test_launches_decoded_together_match_each_decoded_alone(busy_launch, fake_launch):
    broken = _broken_launch(fake_launch)
    buffers = [busy_launch(launch=0).buffer, broken.buffer, busy_launch(launch=2, num_ctas=3).buffer]

    together = decode_buffers(buffers, broken.layout)

    rows = 0
    for launch, buffer in enumerate(buffers):
        alone = decode_buffer(buffer, broken.layout)
        assert together.problems[launch] == alone.problems
        for name, table in (("ctas", alone.ctas), ("units", alone.units)):
            mine = getattr(together, name).launch == launch
            for field in set(table.__dataclass_fields__) - {"launch"}:
                assert np.array_equal(getattr(getattr(together, name), field)[mine], getattr(table, field)), (
                    field
                )
        records = together.units.launch[together.records.unit_row] == launch
        assert np.array_equal(together.records.clock[records], alone.records.clock)
        assert np.array_equal(together.records.unit_row[records] - rows, alone.records.unit_row)
        rows += len(alone.units)
    assert together.problems[1] and not together.problems[0]


@pytest.mark.parametrize("shares", [2, 3])
def test_a_share_of_sms_decodes_as_the_whole_launch_decoded_then_kept_to_its_sms(
    busy_launch, fake_launch, shares
):
    """``decode_records(on_sms=...)`` skips the other SMs' records before reading them; what it
    gives is the whole decode's rows on those SMs (a unit that crashed and a CTA that never ran
    included), each record pointing at its unit's new row."""
    from proton_ik.viewer.decode import decode_headers, decode_records
    from proton_ik.viewer.decode.buffers import raw_view

    broken = _broken_launch(fake_launch)
    buffers = [busy_launch(launch=0, num_ctas=12, sms=5).buffer, broken.buffer]
    views = [raw_view(buffer, broken.layout) for buffer in buffers]
    whole = decode_records(views, broken.layout, *decode_headers(views, broken.layout))
    for share in range(shares):

        def holds(sm, share=share):
            return sm % shares == share

        alone = decode_records(views, broken.layout, *decode_headers(views, broken.layout), on_sms=holds)
        kept = whole.on_sms(holds)
        for name in ("ctas", "units", "records"):
            table, expected = getattr(alone, name), getattr(kept, name)
            for field in table.__dataclass_fields__:
                assert np.array_equal(getattr(table, field), getattr(expected, field)), (name, field)
        assert len(alone.units) and np.all(holds(alone.units.smid))
        units_of_records = alone.units.smid[alone.records.unit_row]
        assert np.all(holds(units_of_records)) and len(alone.records) == len(kept.records)
