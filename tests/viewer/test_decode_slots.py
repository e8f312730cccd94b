"""Layout version 3's slots decoded (``viewer.decode.slots``), and version 2's entries still.

Buffers come from ``conftest``'s writer model, which stores slots as the PTX writer does. What
each test expects follows from the program written and the ring's rule alone: slot i goes to
position i % capacity and the newest ``capacity`` slots are kept, so a long pair or a value mark
whose first slot was overwritten leaves its end record, or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proton_ik import viewer
from proton_ik.contract.layout import READ_VERSIONS, BufferLayout
from proton_ik.contract.tags import (
    COMPACT_DURATION_LIMIT,
    COMPACT_SCOPES,
    MAX_EVENT_INSTANCES,
    MAX_SCOPES,
    RecordKind,
    ValueType,
    make_tag,
)
from proton_ik.contract.trimmed import inflate, trim, trimmed_view
from proton_ik.runtime.session_writer import write_session
from proton_ik.viewer.decode import decode_buffer, decode_views

WRAP = 1 << 32
LOW32 = WRAP - 1
START = 5 * WRAP - 3_000  # a unit's start: its clocks' low words wrap soon after


def decoded_records(decoded, unit_row: int = 0) -> list[tuple]:
    """(tag, clock, paired, value, value type) of each decoded record of a unit, in order."""
    records = decoded.records
    rows = records.unit_row == unit_row
    return list(
        zip(
            records.tag[rows].tolist(),
            records.clock[rows].tolist(),
            records.paired[rows].tolist(),
            records.value[rows].tolist(),
            records.value_type[rows].tolist(),
            strict=True,
        )
    )


def one_unit(fake_launch, capacity: int = 16, version: int = 3):
    fake = fake_launch(units=1, capacity=capacity, version=version)
    fake.cta(0, smid=0)
    return fake, fake.unit(0, 0, START, 0)


@pytest.mark.parametrize("version", READ_VERSIONS)
def test_short_and_long_pairs_and_large_scope_ids_decode_to_their_records(fake_launch, version):
    """A pair shorter than COMPACT_DURATION_LIMIT of a scope id below COMPACT_SCOPES takes one
    slot in version 3, any other two; in version 2 each takes one entry. All decode alike."""
    fake, unit = one_unit(fake_launch, version=version)
    wrap, limit = 5 * WRAP, COMPACT_DURATION_LIMIT
    last = wrap + 200 + limit + 10_000
    pairs = [  # written at their ends, in time order
        (COMPACT_SCOPES - 1, wrap - 10, wrap + 20),  # one slot, its end's low word past a wrap
        (3, wrap + 100, wrap + 100 + limit - 1),  # one slot: the longest pair that fits one
        (3, wrap + 200, last),  # two slots: too long for one
        (COMPACT_SCOPES, last + 30, last + 40),  # two slots: its scope id is too large for one
        (MAX_SCOPES - 1, last + 50, last + 50),  # two slots; zero cycles long
    ]
    for scope, begin, end in pairs:
        unit.pair(scope, begin, end)
    unit.finish(last + 100, 1_000_000)

    decoded = decode_buffer(fake.buffer, fake.layout)

    records = [(make_tag(s, False), b, True, 0, 0) for s, b, _ in pairs]
    records += [(make_tag(s, True), e, True, 0, 0) for s, _, e in pairs]
    assert decoded_records(decoded) == sorted(records, key=lambda record: record[1])
    assert decoded.units.entries.tolist() == [5 if version == 2 else 2 * 1 + 3 * 2]
    assert decoded.units.count.tolist() == [10] and decoded.units.overwritten.tolist() == [0]
    assert decoded.problems == ()


@pytest.mark.parametrize("value_type", list(ValueType))
@pytest.mark.parametrize("version", READ_VERSIONS)
def test_a_value_mark_keeps_its_32_bits_and_their_type(fake_launch, version, value_type):
    fake, unit = one_unit(fake_launch, version=version)
    unit.value(4, START + 10, 0xFFFFFFF0, value_type)
    unit.value(MAX_SCOPES - 1, START + 20, 7, value_type)
    unit.record(4, False, START + 30, RecordKind.MARK)
    unit.finish(START + 40, 100)

    decoded = decode_buffer(fake.buffer, fake.layout)

    value = make_tag(4, False, RecordKind.VALUE)
    assert decoded_records(decoded) == [
        (value, START + 10, False, 0xFFFFFFF0, value_type),
        (make_tag(MAX_SCOPES - 1, False, RecordKind.VALUE), START + 20, False, 7, value_type),
        (make_tag(4, False, RecordKind.MARK), START + 30, False, 0, 0),
    ]
    assert decoded.units.count.tolist() == [3] and decoded.units.entries.tolist() == [
        5 if version == 3 else 3
    ]


def test_events_keep_their_instance(fake_launch):
    fake, unit = one_unit(fake_launch)
    unit.record(2, False, START + 10, RecordKind.EVENT, index=MAX_EVENT_INSTANCES - 1)
    unit.record(2, True, START + 20, RecordKind.EVENT, index=3)
    unit.finish(START + 30, 100)

    decoded = decode_buffer(fake.buffer, fake.layout)

    assert decoded.records.instance.tolist() == [MAX_EVENT_INSTANCES - 1, 3]
    assert decoded.records.kind.tolist() == [RecordKind.EVENT] * 2
    assert decoded.records.is_end.tolist() == [False, True]


def test_a_long_pair_whose_begin_the_ring_overwrote_leaves_its_end(fake_launch):
    """Slots 0 and 1 hold a long pair, 2 to 4 short ones: a ring of 4 keeps slots 1 to 4, the
    long pair's end alone among them."""
    fake, unit = one_unit(fake_launch, capacity=4)
    later = START + 2 * COMPACT_DURATION_LIMIT
    unit.pair(0, START + 10, START + 10 + COMPACT_DURATION_LIMIT)
    for i in range(3):
        unit.pair(1, later + 100 * i, later + 100 * i + 50)
    unit.finish(later + 1_000, 1_000)

    decoded = decode_buffer(fake.buffer, fake.layout)

    end = (make_tag(0, True), START + 10 + COMPACT_DURATION_LIMIT, False, 0, 0)
    assert decoded_records(decoded)[0] == end  # a record of its own: no pair holds it now
    assert decoded.records.scope.tolist() == [0, 1, 1, 1, 1, 1, 1]
    units = decoded.units
    assert (units.entries[0], units.kept_entries[0]) == (5, 4)
    assert (units.count[0], units.kept[0], units.overwritten[0]) == (8, 7, 1)
    assert decoded.records.index.tolist() == list(range(1, 8))


def test_a_value_mark_whose_record_the_ring_overwrote_leaves_nothing(fake_launch):
    """Slots 0 and 1 hold a value mark, 2 to 4 records: a ring of 4 keeps slots 1 to 4, the
    mark's payload, which holds no record, among them."""
    fake, unit = one_unit(fake_launch, capacity=4)
    unit.value(1, START + 10, 123, ValueType.UINT32)
    for i in range(3):
        unit.record(2, i % 2 == 1, START + 20 + i)
    unit.finish(START + 40, 100)

    decoded = decode_buffer(fake.buffer, fake.layout)

    assert decoded.records.clock.tolist() == [START + 20, START + 21, START + 22]
    assert decoded.records.value.tolist() == [0, 0, 0]
    units = decoded.units
    assert (units.count[0], units.kept[0], units.overwritten[0]) == (4, 3, 1)
    assert decoded.records.index.tolist() == [1, 2, 3]


def test_a_long_pair_that_ends_one_units_ring_takes_nothing_of_the_next(fake_launch):
    """Slots are read unit after unit, so a unit's last kept slot sits next to the next unit's
    first: a long begin there has no end (a writer never leaves it so) and stays a record."""
    fake = fake_launch(units=2, capacity=4, version=3)
    fake.cta(0, smid=0)
    first, second = fake.unit(0, 0, START, 0), fake.unit(0, 1, START, 0)
    first.pair(0, START + 10, START + 10 + COMPACT_DURATION_LIMIT)
    first.count -= 1  # the end's slot was never counted: the unit keeps the begin alone
    first.finish(START + 2 * COMPACT_DURATION_LIMIT, 1_000)
    second.record(1, True, START + 20)
    second.finish(START + 30, 100)

    decoded = decode_buffer(fake.buffer, fake.layout)

    assert decoded_records(decoded, 0) == [(make_tag(0, False), START + 10, False, 0, 0)]
    assert decoded_records(decoded, 1) == [(make_tag(1, True), START + 20, False, 0, 0)]


def test_a_header_of_another_layout_version_is_named_in_the_problem(fake_launch):
    fake, unit = one_unit(fake_launch, capacity=4, version=2)
    unit.finish(START + 10, 10)
    layout = BufferLayout(units=1, capacity=8, version=3)  # the same bytes: a v3 ring of 8 slots

    decoded = decode_buffer(fake.buffer, layout)

    assert decoded.ctas.valid.tolist() == [False]
    assert any("(layout version 3, 1 units of 8 slots," in problem for problem in decoded.problems)


# --- random programs: what the decoder reads is what the model wrote -----------------------------
SCOPE_IDS = st.sampled_from([0, 1, 9, COMPACT_SCOPES - 1, COMPACT_SCOPES, MAX_SCOPES - 1])
DURATIONS = st.one_of(
    st.integers(0, 100),
    st.sampled_from([COMPACT_DURATION_LIMIT - 1, COMPACT_DURATION_LIMIT]),
    st.integers(0, 1 << 31),
)
GAPS = st.integers(1, 1 << 20)
OPS = st.one_of(
    st.tuples(st.just("pair"), SCOPE_IDS, DURATIONS, GAPS),
    st.tuples(
        st.just("record"),
        SCOPE_IDS,
        st.sampled_from([RecordKind.SCOPE, RecordKind.EVENT, RecordKind.MARK]),
        st.booleans(),
        st.integers(0, MAX_EVENT_INSTANCES - 1),
        GAPS,
    ),
    st.tuples(st.just("value"), SCOPE_IDS, st.integers(0, LOW32), st.sampled_from(list(ValueType)), GAPS),
)
PROGRAMS = st.lists(st.lists(OPS, max_size=30), min_size=1, max_size=3)  # one program per unit
CAPACITIES = st.sampled_from([2, 4, 8, 64])


@dataclass(frozen=True)
class Written:
    """What one write of a program stored: its slots, and its records as (tag, clock, paired,
    value, value type)."""

    slots: int
    records: list[tuple]
    long_pair: bool  # two slots, the second holding the end record


def written(program: list[tuple], version: int) -> list[Written]:
    """Each write of a unit's ``program`` and its clocks, from START, without a writer model."""
    clock, out = START, []
    for op in program:
        clock += op[-1]
        if op[0] == "pair":
            _, scope, duration, _ = op
            begin = (make_tag(scope, False), clock - duration, True, 0, 0)
            one_slot = version == 2 or (duration < COMPACT_DURATION_LIMIT and scope < COMPACT_SCOPES)
            out.append(
                Written(
                    1 if one_slot else 2, [begin, (make_tag(scope, True), clock, True, 0, 0)], not one_slot
                )
            )
        elif op[0] == "record":
            _, scope, kind, is_end, index, _ = op
            is_end = is_end and kind != RecordKind.MARK
            index = index if kind == RecordKind.EVENT else 0
            out.append(Written(1, [(make_tag(scope, is_end, kind, index=index), clock, False, 0, 0)], False))
        else:
            _, scope, bits, value_type, _ = op
            record = (make_tag(scope, False, RecordKind.VALUE), clock, False, bits, int(value_type))
            out.append(Written(1 if version == 2 else 2, [record], False))
    return out


def kept(writes: list[Written], capacity: int) -> list[tuple]:
    """The records in a ring's newest ``capacity`` slots, in time order (stable: records of one
    clock in the order written)."""
    first_kept = max(0, sum(write.slots for write in writes) - capacity)
    at, records = 0, []
    for write in writes:
        if at >= first_kept:
            records += write.records
        elif at + write.slots > first_kept and write.long_pair:
            tag, clock, _, value, value_type = write.records[1]
            records.append((tag, clock, False, value, value_type))  # its end alone
        at += write.slots
    return sorted(records, key=lambda record: record[1])


def write(fake_launch, programs: list[list[tuple]], capacity: int, version: int):
    """A launch of one CTA whose unit u runs ``programs[u]`` through the writer model."""
    fake = fake_launch(units=len(programs), capacity=capacity, version=version)
    fake.cta(0, smid=0)
    for u, program in enumerate(programs):
        unit = fake.unit(0, u, START, 0)
        clock = START
        for op in program:
            clock += op[-1]
            if op[0] == "pair":
                unit.pair(op[1], clock - op[2], clock)
            elif op[0] == "record":
                _, scope, kind, is_end, index, _ = op
                is_end = is_end and kind != RecordKind.MARK
                unit.record(scope, is_end, clock, kind, index if kind == RecordKind.EVENT else 0)
            else:
                unit.value(op[1], clock, op[2], op[3])
        unit.finish(clock + 10, clock - START)
    return fake


# The fixture only hands out the writer model's class: nothing of it carries over between examples.
EXAMPLES = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@settings(EXAMPLES, max_examples=300)
@given(programs=PROGRAMS, capacity=CAPACITIES, version=st.sampled_from(READ_VERSIONS))
def test_every_kept_record_decodes_as_written_and_counts_are_exact(fake_launch, programs, capacity, version):
    fake = write(fake_launch, programs, capacity, version)

    decoded = decode_buffer(fake.buffer, fake.layout)

    units = decoded.units
    for u, program in enumerate(programs):
        writes = written(program, version)
        expected = kept(writes, capacity)
        assert decoded_records(decoded, u) == expected
        count = sum(len(write.records) for write in writes)
        assert units.entries[u] == sum(write.slots for write in writes)
        assert (units.count[u], units.kept[u], units.overwritten[u]) == (
            count,
            len(expected),
            count - len(expected),
        )
        rows = decoded.records.unit_row == u
        assert decoded.records.index[rows].tolist() == list(range(count - len(expected), count))


@settings(EXAMPLES, max_examples=150)
@given(programs=PROGRAMS, capacity=CAPACITIES, version=st.sampled_from(READ_VERSIONS))
def test_the_trimmed_form_decodes_as_the_raw_buffer(fake_launch, programs, capacity, version):
    fake = write(fake_launch, programs, capacity, version)
    layout = fake.layout
    stored = trim(fake.buffer, layout)
    slots = sum(min(sum(w.slots for w in written(program, version)), capacity) for program in programs)

    raw = decode_buffer(fake.buffer, layout)
    from_view = decode_views([trimmed_view(stored, layout, 1)], layout)
    inflated = decode_buffer(inflate(stored, layout, 1), layout)

    assert stored.size == 64 + len(programs) * 48 + slots * layout.slot_bytes
    for other in (from_view, inflated):
        for name in ("unit_row", "index", "tag", "clock", "paired", "value", "value_type"):
            assert np.array_equal(getattr(raw.records, name), getattr(other.records, name)), name
        for name in ("entries", "kept_entries", "count", "kept", "overwritten"):
            assert np.array_equal(getattr(raw.units, name), getattr(other.units, name)), name


def test_a_session_of_kernels_of_both_versions_renders_each_with_its_own(fake_launch, tmp_path):
    """``layout=auto`` gives each kernel its layout: one session holds launches of both, each
    decoded with the layout its metadata names."""
    captures = []
    for launch, version in enumerate(READ_VERSIONS):
        fake = fake_launch(units=1, capacity=4, version=version)
        fake.cta(0, smid=3)
        unit = fake.unit(0, 0, start_clock=1000, start_time=10**9)
        unit.pair(0, 1100, 1100 + 40 * (launch + 1))
        unit.pair(1, 1200, 1200 + COMPACT_DURATION_LIMIT)  # two slots in version 3
        unit.finish(1200 + COMPACT_DURATION_LIMIT + 50, 10**9 + 200_000)
        captures.append(fake.capture(launch=launch, kernel=f"v{version}", scopes=["short", "long"]))
    trace = viewer.load(write_session(tmp_path / "both.pik", {"name": "both"}, captures))
    durations = trace.events.groupby(["kernel", "scope"], observed=True)["dur_cycles"].first().to_dict()
    assert durations == {
        ("v2", "short"): 40,
        ("v2", "long"): COMPACT_DURATION_LIMIT,
        ("v3", "short"): 80,
        ("v3", "long"): COMPACT_DURATION_LIMIT,
    }
    assert trace.launches["overwritten"].tolist() == [0, 0]


# A real capture (tests/gpu/capture.py, an H200): a persistent kernel whose K steps are pairs of
# one slot each and whose tiles (a loop between begin and end) are two records, and a spin's
# scopes of 300,000 cycles, longer than a one-slot pair may be.
SLOTS_CAPTURE = Path(__file__).parents[1] / "data" / "slots.pik"


def test_a_real_layout_3_capture_decodes_exactly():
    session = viewer.read_session(SLOTS_CAPTURE)
    persistent, spin = session.launches
    for launch, slots_per_unit in ((persistent, 3 * 2 + 12), (spin, 2)):
        layout = BufferLayout.from_dict(launch.meta["profile"]["layout"])
        assert layout.version == 3
        units = decode_buffer(launch.buffer, layout).units
        assert (units.entries == slots_per_unit).all() and (units.overwritten == 0).all()

    trace = viewer.load(SLOTS_CAPTURE)
    assert trace.problems == [] and trace.record_count == 968
    events = trace.events
    tiles = events[events.scope == "tile"]
    steps = events[events.scope == "k"]
    # 8 programs x 4 warps; 24 tiles taken by stride 8: 3 tiles a program, 4 K steps a tile.
    assert tiles.groupby(["cta", "warp"], observed=True).size().eq(3).all() and len(tiles) == 96
    assert steps.groupby(["cta", "warp"], observed=True).size().eq(12).all() and len(steps) == 384
    for (cta, warp), inner in steps.groupby(["cta", "warp"], observed=True):
        outer = tiles[(tiles.cta == cta) & (tiles.warp == warp)].sort_values("begin_cycles")
        holder = np.searchsorted(outer.begin_cycles.to_numpy(), inner.begin_cycles.to_numpy(), "right") - 1
        assert (holder >= 0).all()
        assert (inner.end_cycles.to_numpy() <= outer.end_cycles.to_numpy()[holder]).all()
    spins = events[events.scope == "spin"]
    assert len(spins) == 4 and spins.dur_cycles.between(COMPACT_DURATION_LIMIT, 300_000 + 200).all()
    assert (spins.dur_cycles >= 300_000).all()
