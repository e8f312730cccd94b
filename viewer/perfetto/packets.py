"""A chunk's event stream written in C, one pass per batch (``packets/packets.c``, built at run
time by ``proton_ik.native``): the bytes of ``slices.event_rows`` laid out by
``arrays.assemble``, which stay the reference and run where the C cannot be built or
``PROTON_IK_COMPILED=0`` asks for it.

Why: numpy encodes a packet field by field, each a few passes over a column of words, so a
begin's twenty-odd fields cost about 6 ns each, read three times (docs/PERFORMANCE.md, "What a
compiled encoder would buy"). Here each kind of row is a program, built below from the wire
constants of ``wire`` and run by the C row after row, reading each value once.

The operations, each a tuple whose first item is its code:

    (CONST, bytes)                                         the bytes
    (CONST_IF, bytes, condition, at, test)                 the bytes where the test passes
    (FIELD, key, column, at)                               a key (b"" for none) and a varint
    (FIELD_IF, key, column, at, condition, at, test)       a key and a varint where the test passes
    (ANNOTATION, key, prefix, column, at, optional)        a debug annotation (none where
                                                           optional and the value is negative)
    (TABLE, data, offsets, at)                             entry ``at`` of a table of bytes
    (OPEN, key) ... (CLOSE,)                               a nested message (``key``: any bytes
                                                           before it, its key last)

Columns are int64 arrays read at the row's own index (``ROW``: a marker's or a header's), its
slice, its track or its launch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import ClockSnapshot, TrackEventDefaults

from proton_ik import native
from proton_ik.viewer.arrays import Rows, assemble
from proton_ik.viewer.perfetto.slices import Markers, carried_annotations, event_rows
from proton_ik.viewer.perfetto.wire import (
    ANNOTATIONS_KEY,
    BEGIN,
    BOOTTIME,
    CLOCK,
    COUNTER_EVENT,
    DEFAULT_CLOCK,
    DEFAULTS,
    END_EVENT,
    EVENT,
    INCREMENTAL,
    IS_INCREMENTAL,
    NEEDS_STATE,
    OPTIONAL_ANNOTATIONS,
    PACKET,
    PRIMARY_BOOTTIME,
    TRACE_PACKET,
    annotation_prefix,
    field_key,
    kind_annotation,
)
from proton_ik.viewer.tracks import KINDS

SOURCES = Path(__file__).with_name("packets")
MODULE_NAME = "proton_ik_packets"

CONST, CONST_IF, FIELD, FIELD_IF, ANNOTATION, TABLE, OPEN, CLOSE = range(8)
ROW, SLICE, TRACK, LAUNCH = range(4)  # where a column is read
IF_ZERO, IF_NOT_NEGATIVE, IF_POSITIVE, IF_NOT_ZERO = range(4)

_SCOPE_KIND, _UNIT_KIND, _ = KINDS
_TIMESTAMP = field_key(PACKET, "timestamp")
_TRACK_EVENT = field_key(PACKET, "track_event")
_CLOCKS = field_key(ClockSnapshot.DESCRIPTOR, "clocks")
_CLOCK_TIMESTAMP = field_key(CLOCK, "timestamp")
_TRACK_UUID = field_key(TrackEventDefaults.DESCRIPTOR, "track_uuid")
_COUNTER_TRACKS = field_key(TrackEventDefaults.DESCRIPTOR, "extra_counter_track_uuids")
_COUNTER_VALUES = field_key(EVENT, "extra_counter_values")

Op = tuple[Any, ...]


_built = native.part(SOURCES, MODULE_NAME)


def encoder() -> ModuleType | None:
    """The compiled module (``encode``), or None: the reference writes the stream."""
    return _built()[0]


def why_reference() -> str | None:
    """Why the event stream is written by numpy; None when the C writes it."""
    return _built()[1]


def event_stream(markers: Markers) -> Callable[[int, int], bytes | np.ndarray]:
    """A function of (lo, hi) giving output rows lo to hi of the chunk's event stream, as bytes."""
    compiled = encoder()
    programs = None if compiled is None else programs_for(markers)
    if compiled is None or programs is None:
        return lambda lo, hi: assemble(event_rows(markers, lo, hi))[0]
    columns = (_ints(markers.header_row), _ints(markers.row), _ints(markers.slice), _ints(markers.track))
    limits = (markers.scopes, markers.lives)
    return lambda lo, hi: compiled.encode(programs, *columns, *limits, lo, hi)


def programs_for(markers: Markers) -> list[list[Op]] | None:
    """The program of each kind of row (header, scope, lifetime, launch, end, counter point), in
    the C's order; None where a table cannot be laid out (a row under 8 bytes, which
    ``assemble`` refuses)."""
    shared = _table(markers.shared)
    launches = _table(markers.launch_events)
    if shared is None or launches is None:
        return None
    delta, count, counted = _ints(markers.delta), _ints(markers.count), _ints(markers.counted)
    on_sequence = (CONST, markers.on_sequence)

    def packet(event: list[Op], needs_state: bool) -> list[Op]:
        state = [(CONST, NEEDS_STATE)] if needs_state else []
        return [
            (OPEN, TRACE_PACKET),
            *[(FIELD, _TIMESTAMP, delta, ROW), on_sequence],
            *[(OPEN, _TRACK_EVENT), *event, (CLOSE,)],
            *state,
            (CLOSE,),
        ]

    in_flight = (FIELD_IF, _COUNTER_VALUES, count, ROW, counted, ROW, IF_NOT_ZERO)
    location = _ints(markers.location)
    scope = [
        *_begin(markers, shared, lifetime=False),
        in_flight,
        (FIELD_IF, field_key(EVENT, "source_location_iid"), location, SLICE, location, SLICE, IF_POSITIVE),
    ]
    programs = [
        _header(markers),
        packet(scope, needs_state=True),
        packet(_begin(markers, shared, lifetime=True), needs_state=True),
        packet([(TABLE, *launches, LAUNCH)], needs_state=True),
        packet([(CONST, END_EVENT), in_flight], needs_state=False),
        packet([(FIELD, COUNTER_EVENT + field_key(EVENT, "counter_value"), count, ROW)], False),
    ]
    return [_fused(program) for program in programs]


def _fused(program: list[Op]) -> list[Op]:
    """The same bytes in fewer operations: a constant joins the constant, field or message that
    follows it (each operation costs the C a dispatch)."""
    fused: list[Op] = []
    for op in program:
        last = fused[-1] if fused else None
        if last is not None and last[0] == CONST and op[0] in (CONST, FIELD, OPEN):
            fused[-1] = (op[0], last[1] + op[1], *op[2:])
        else:
            fused.append(op)
    return fused


def _begin(markers: Markers, shared: tuple[bytes, np.ndarray], lifetime: bool) -> list[Op]:
    """A scope's or a unit lifetime's begin, up to its name (``slices._begin_rows``)."""
    ops: list[Op] = [(TABLE, *shared, TRACK)]
    for name in carried_annotations(markers, lifetime):
        values = _ints(markers.values[name])
        ops.append(
            (
                ANNOTATION,
                ANNOTATIONS_KEY,
                annotation_prefix(name),
                values,
                SLICE,
                name in OPTIONAL_ANNOTATIONS,
            )
        )
    kind = kind_annotation(_UNIT_KIND if lifetime else _SCOPE_KIND)
    return [*ops, (FIELD, kind + BEGIN + field_key(EVENT, "name_iid"), _ints(markers.name), SLICE)]


def _header(markers: Markers) -> list[Op]:
    """A track's header (``slices._header_rows``): its clock anchor, and the sequence's defaults."""
    ts, flying, first = _ints(markers.header_ts), _ints(markers.header_counter), _ints(markers.header_row)
    return [
        (OPEN, TRACE_PACKET),
        (OPEN, field_key(PACKET, "clock_snapshot")),
        *[
            (OPEN, _CLOCKS),
            (FIELD, INCREMENTAL + _CLOCK_TIMESTAMP, ts, ROW),
            (CONST, IS_INCREMENTAL),
            (CLOSE,),
        ],
        *[(OPEN, _CLOCKS), (FIELD, BOOTTIME + _CLOCK_TIMESTAMP, ts, ROW), (CLOSE,)],
        (CONST_IF, PRIMARY_BOOTTIME, first, ROW, IF_ZERO),
        (CLOSE,),
        (CONST, markers.on_sequence),
        (OPEN, field_key(PACKET, "trace_packet_defaults")),
        (OPEN, field_key(DEFAULTS, "track_event_defaults")),
        (FIELD, _TRACK_UUID, _ints(markers.header_uuid), ROW),
        (FIELD_IF, _COUNTER_TRACKS, flying, ROW, flying, ROW, IF_NOT_NEGATIVE),
        (CLOSE,),
        (CONST, DEFAULT_CLOCK),
        (CLOSE,),
        (CLOSE,),
    ]


def _table(rows: Rows) -> tuple[bytes, np.ndarray] | None:
    """``rows`` as one run of bytes and each row's start (and the end), or None where a row is
    too short for ``assemble``."""
    if rows.n == 0:
        return b"", np.zeros(1, dtype=np.int64)
    lengths = rows.lengths
    if np.min(lengths) < 8:
        return None
    data, ends = assemble([(rows, np.arange(rows.n))])
    return data.tobytes(), np.concatenate([[0], ends]).astype(np.int64)


def _ints(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int64)
