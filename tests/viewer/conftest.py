"""A software model of what an instrumented kernel writes, to build profile buffers in tests.

It writes headers and records with the values the device gives them (layout.py's dtypes and
offsets): a CTA header once, each unit's start clock and time (the device writes them at the
exit, rebuilt; the bytes are the same), slot i into ring position i % capacity, and the end
clock, time, slot count, tally and end magic in the unit's epilogue. Its slots are those of its
launch's layout version, as the PTX writer stores them (``contract.layout``): in version 3 a
record takes one 8-byte slot, a short pair one (``tags.compact_tag``), a long pair two and a
value mark two (its record, then its payload); in version 2 each takes one 16-byte entry, a
record its first half only. Unwritten memory is filled with 0xCD, as device memory is not
cleared.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

from proton_ik.contract.layout import (
    CTA_HEADER_DTYPE,
    MAGIC,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    VERSION,
    BufferLayout,
)
from proton_ik.contract.tags import (
    COMPACT_DURATION_LIMIT,
    COMPACT_SCOPES,
    TAG_END_BIT,
    RecordKind,
    ValueType,
    compact_tag,
    make_tag,
    payload_tag,
)
from proton_ik.viewer import LaunchCapture
from proton_ik.viewer.readback import read_packets

UNWRITTEN = 0xCD
LOW32 = (1 << 32) - 1


class FakeUnit:
    """One unit's segment: lane 0 of the unit's first warp writing records."""

    def __init__(self, launch: FakeLaunch, cta: int, unit: int, start_clock: int, start_time: int):
        self.layout = launch.layout
        offset = cta * self.layout.cta_bytes + self.layout.unit_offset(unit)
        self.header = np.ndarray((), UNIT_HEADER_DTYPE, launch.buffer, offset)
        # Each slot's 32-bit words: two in version 3, four (an entry) in version 2.
        self.ring = np.ndarray(
            (self.layout.capacity, self.layout.slot_bytes // 4),
            np.uint32,
            launch.buffer,
            offset + UNIT_HEADER_BYTES,
        )
        self.header["start_clock"] = start_clock
        self.header["start_time"] = start_time
        self.count = 0  # slots written: the header's ``entries``
        self.tally = 0  # the header's ``tally``: twice the slots less the records (``records_written``)

    @property
    def version(self) -> int:
        return self.layout.version

    def _store(self, *slots: Sequence[int]) -> None:
        """Slots one after another, at the next ring positions; a record in version 2 fills its
        entry's first half only."""
        for words in slots:
            self.ring[self.count % self.layout.capacity, : len(words)] = [word & LOW32 for word in words]
            self.count += 1

    def record(
        self, scope: int, is_end: bool, clock: int, kind: RecordKind = RecordKind.SCOPE, index: int = 0
    ) -> None:
        """One record of its own: a scope's begin or end, an event's start or end, a mark."""
        self._store((make_tag(scope, is_end, kind, index=index), clock))
        self.tally += 1

    def pair(self, scope: int, begin_clock: int, end_clock: int) -> None:
        """A begin and its end in straight-line code, written at the end: in version 3 one slot
        when the pair is short and its scope id small, else two; in version 2 one entry."""
        begin, end = make_tag(scope, False, paired=True), make_tag(scope, True)
        duration = (end_clock - begin_clock) & LOW32
        if self.version == 2:
            self._store((begin, begin_clock, end, end_clock))
        elif duration < COMPACT_DURATION_LIMIT and scope < COMPACT_SCOPES:
            self._store((compact_tag(scope) | duration, begin_clock))
        else:
            self._store((begin, begin_clock), (end, end_clock))
            self.tally += 2

    def value(self, name: int, clock: int, bits: int, value_type: ValueType = ValueType.INT32) -> None:
        """A value mark: its record and the value's 32 bits (``bits``) of ``value_type``."""
        tag = make_tag(name, False, RecordKind.VALUE)
        if self.version == 2:
            self._store((tag, clock, bits, int(value_type)))
            self.tally += 1
        else:
            self._store((tag, clock), (payload_tag(value_type), bits))
            self.tally += 3

    def record_many(self, scope: np.ndarray, is_end: np.ndarray, clock: np.ndarray) -> None:
        """``record`` for each element in turn, written with whole-array operations."""
        tags = (np.asarray(is_end, dtype=np.uint32) << np.uint32(TAG_END_BIT)) | np.asarray(scope, np.uint32)
        slot = (self.count + np.arange(len(tags))) % self.layout.capacity
        # Later writes to a slot win, as on the device: keep each slot's last write only.
        last = np.unique(slot[::-1], return_index=True)[1]
        keep = len(tags) - 1 - last
        self.ring[slot[keep], 0] = tags[keep]
        self.ring[slot[keep], 1] = np.asarray(clock, dtype=np.int64)[keep] & LOW32
        self.count += len(tags)
        self.tally += len(tags)

    def begin(self, scope: int, clock: int) -> None:
        self.record(scope, False, clock)

    def end(self, scope: int, clock: int) -> None:
        self.record(scope, True, clock)

    def write_count(self) -> None:
        self.header["entries"] = self.count
        self.header["tally"] = self.tally & LOW32

    def finish(self, end_clock: int, end_time: int) -> None:
        self.header["end_clock"] = end_clock
        self.header["end_time"] = end_time
        self.write_count()
        self.header["end_magic"] = MAGIC


def write_cta_header(
    buffer: np.ndarray, layout: BufferLayout, num_ctas: int, cta: int, smid: int, **overrides: int
) -> None:
    """CTA ``cta``'s header in a launch of ``num_ctas`` CTAs (a 1-D grid), as the epilogue writes it."""
    header = np.ndarray((), CTA_HEADER_DTYPE, buffer, cta * layout.cta_bytes)
    fields = {
        "magic": MAGIC,
        "version": layout.version,
        "cta": cta,
        "smid": smid,
        "nctaid_x": num_ctas,
        "nctaid_y": 1,
        "nctaid_z": 1,
        "units": layout.units,
        "capacity": layout.capacity,
        # What an sm_90 kernel launched without clusters records: a cluster of its own.
        "cluster": cta,
        "cluster_rank": 0,
        "cluster_ctas": 1,
        "reserved": 0,
        **overrides,
    }
    for name, value in fields.items():
        header[name] = value


class FakeLaunch:
    """One launch's buffer: ``num_ctas`` CTA regions of ``units`` units of ``capacity`` slots, in
    layout ``version``."""

    def __init__(self, units: int = 2, capacity: int = 16, num_ctas: int = 1, version: int = VERSION):
        self.layout = BufferLayout(units=units, capacity=capacity, version=version)
        self.num_ctas = num_ctas
        self.buffer = np.full(num_ctas * self.layout.cta_bytes, UNWRITTEN, dtype=np.uint8)

    def cta(self, cta: int, smid: int, **overrides: int) -> None:
        write_cta_header(self.buffer, self.layout, self.num_ctas, cta, smid, **overrides)

    def unit(self, cta: int, unit: int, start_clock: int, start_time: int) -> FakeUnit:
        return FakeUnit(self, cta, unit, start_clock, start_time)

    def meta(self, launch: int = 0, kernel: str = "kernel", scopes: list[str] | None = None, **extra) -> dict:
        names = scopes if scopes is not None else ["a", "b", "c"]
        warps_per_unit = extra.pop("warps_per_unit", 1)
        profile = {
            "mode": "instrumentation:granularity=warp:capacity=16",
            "num_warps": self.layout.units * warps_per_unit,
            "warps_per_unit": warps_per_unit,
            "layout": self.layout.to_dict(),
            "scopes": [{"id": i, "name": n, "line": 10 + i} for i, n in enumerate(names)],
        }
        return {
            "launch": launch,
            "kernel": kernel,
            "stream": 0,
            "grid": [self.num_ctas, 1, 1],
            "num_warps": self.layout.units * warps_per_unit,
            "profile": profile,
            **extra,
        }

    def capture(self, **meta) -> LaunchCapture:
        return LaunchCapture(self.meta(**meta), self.buffer.copy())


class SmTimer:
    """An SM whose %clock64 runs at ``ghz`` from ``clock0`` while %globaltimer (ticking every
    ``tick`` ns) reads ``time0`` at ``clock0``."""

    def __init__(self, ghz: float, clock0: int, time0: int, tick: int = 32):
        self.ghz, self.clock0, self.time0, self.tick = ghz, clock0, time0, tick

    def time(self, clock: int) -> int:
        """The %globaltimer reading: whole ticks (integer arithmetic, as 1.7e18 ns has no ns in a float)."""
        now = self.time0 + math.floor((clock - self.clock0) / self.ghz)
        return now - now % self.tick

    def exact_ns(self, clock: int) -> int:
        return self.time0 + round((clock - self.clock0) / self.ghz)


@pytest.fixture
def fake_launch() -> type[FakeLaunch]:
    return FakeLaunch


@pytest.fixture
def sm_timer() -> type[SmTimer]:
    return SmTimer


@pytest.fixture
def pftrace_packets() -> Callable[[Path], list[TracePacket]]:
    return read_packets


@pytest.fixture
def clock_anchors() -> Callable[[Path], list[int]]:
    """The absolute times (ns) a ``.pftrace``'s incremental clocks restart at, sorted: every
    track's first timestamp, on the clock the trace is drawn on."""

    def anchors(path: Path) -> list[int]:
        return sorted(
            clock.timestamp
            for p in read_packets(path)
            if p.HasField("clock_snapshot")
            for clock in p.clock_snapshot.clocks
            if not clock.is_incremental
        )

    return anchors


@pytest.fixture
def busy_launch() -> Callable[..., LaunchCapture]:
    """A launch where every unit of every CTA runs ``iterations`` of a nested loop body:
    outer(a){ inner(b) } then c, with realistic clocks and globaltimer readings."""

    def build(
        num_ctas: int = 4,
        units: int = 4,
        iterations: int = 8,
        capacity: int = 64,
        launch: int = 0,
        sms: int = 2,
        version: int = VERSION,
    ) -> LaunchCapture:
        fake = FakeLaunch(units=units, capacity=capacity, num_ctas=num_ctas, version=version)
        rng = np.random.default_rng(launch)
        timers = [
            SmTimer(1.755, 10_000_000 * (s + 1), 1_700_000_000_000_000_000 + 1_000 * s) for s in range(sms)
        ]
        for cta in range(num_ctas):
            sm = cta % sms
            timer = timers[sm]
            fake.cta(cta, sm)
            base = timer.clock0 + (cta // sms) * 400_000
            for u in range(units):
                clock = base + int(rng.integers(0, 100))
                unit = fake.unit(cta, u, clock, timer.time(clock))
                for _ in range(iterations):
                    clock += 50
                    unit.begin(0, clock)
                    clock += int(rng.integers(100, 200))
                    unit.begin(1, clock)
                    clock += int(rng.integers(300, 900))
                    unit.end(1, clock)
                    clock += 20
                    unit.end(0, clock)
                    clock += 10
                    unit.begin(2, clock)
                    clock += int(rng.integers(40, 80))
                    unit.end(2, clock)
                clock += 30
                unit.finish(clock, timer.time(clock))
        return fake.capture(launch=launch, kernel=f"kernel{launch % 2}")

    return build


@pytest.fixture
def as_rank():
    """``as_rank(source, target, rank, **info)``: ``source``'s launches written to ``target`` as
    rank ``rank`` of a job of two would have written them (its info says its rank, and ``info``
    more)."""
    from proton_ik.runtime.session_writer import SessionWriter
    from proton_ik.viewer.session_file import read_session

    def write(source: Path, target: Path, rank: int, **more: Any) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        stored = read_session(source)
        info = {**stored.info, "rank": rank, "world_size": 2, **more}
        with SessionWriter(target, info, compress=False) as writer:
            for launch in stored:
                writer.add_launch(launch.meta, launch.buffer, trimmed_on_device=launch.trimmed)
        return target

    return write
