"""Protobuf wire encoding for the Perfetto writer: field keys taken from perfetto's own
descriptors, fields whose values are known in advance as bytes, the interned names (and source
locations) a sequence starts with, and debug annotations, both as columns of ``arrays.byterows`` rows
and as protos.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    BUILTIN_CLOCK_BOOTTIME,
    ClockSnapshot,
    DebugAnnotation,
    Trace,
    TracePacket,
    TracePacketDefaults,
    TrackDescriptor,
    TrackEvent,
)

from proton_ik.viewer.arrays import Rows, varint_bytes
from proton_ik.viewer.tracks import HOST_ARGS, KIND_ARG, KINDS, LAUNCH_ARGS, SLICE_ARGS

# Clock ids 64..127 are scoped to one packet sequence; only those may be incremental.
INCREMENTAL_CLOCK_ID = 64
# Every arg name, interned by each sequence.
ANNOTATION_IID = {
    name: iid
    for iid, name in enumerate(dict.fromkeys([*SLICE_ARGS, KIND_ARG, *LAUNCH_ARGS, *HOST_ARGS]), start=1)
}
KIND_IID = {kind: iid for iid, kind in enumerate(KINDS, start=1)}  # interned string values


# --- protobuf keys, from perfetto's own descriptors ---------------------------------------------

_WIRE_TYPES = {
    **dict.fromkeys(
        (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES), 2
    ),
    **dict.fromkeys(
        (
            FieldDescriptor.TYPE_INT32,
            FieldDescriptor.TYPE_INT64,
            FieldDescriptor.TYPE_UINT32,
            FieldDescriptor.TYPE_UINT64,
            FieldDescriptor.TYPE_BOOL,
            FieldDescriptor.TYPE_ENUM,
        ),
        0,
    ),
}


def field_key(message: Descriptor, name: str) -> bytes:
    """The key (field number and wire type) that starts a field of ``message``."""
    field = message.fields_by_name[name]
    return varint_bytes(field.number << 3 | _WIRE_TYPES[field.type])


def field_value(message: Descriptor, name: str, value: int) -> bytes:
    """A varint field with a value known in advance, as bytes."""
    return field_key(message, name) + varint_bytes(value)


TRACE_PACKET = field_key(Trace.DESCRIPTOR, "packet")
PACKET, EVENT, TRACK = TracePacket.DESCRIPTOR, TrackEvent.DESCRIPTOR, TrackDescriptor.DESCRIPTOR


# --- fields known in advance ----------------------------------------------------------------

CLOCK = ClockSnapshot.Clock.DESCRIPTOR
DEFAULTS = TracePacketDefaults.DESCRIPTOR
INCREMENTAL = field_value(CLOCK, "clock_id", INCREMENTAL_CLOCK_ID)
BOOTTIME = field_value(CLOCK, "clock_id", BUILTIN_CLOCK_BOOTTIME)
IS_INCREMENTAL = field_value(CLOCK, "is_incremental", 1)
PRIMARY_BOOTTIME = field_value(ClockSnapshot.DESCRIPTOR, "primary_trace_clock", BUILTIN_CLOCK_BOOTTIME)
DEFAULT_CLOCK = field_value(DEFAULTS, "timestamp_clock_id", INCREMENTAL_CLOCK_ID)
BEGIN = field_value(EVENT, "type", TrackEvent.TYPE_SLICE_BEGIN)
END_EVENT = field_value(EVENT, "type", TrackEvent.TYPE_SLICE_END)
COUNTER_EVENT = field_value(EVENT, "type", TrackEvent.TYPE_COUNTER)
NEEDS_STATE = field_value(PACKET, "sequence_flags", TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)


# --- interned names and debug annotations ---------------------------------------------------


def interning_packet(
    names: dict[str, int], sequence: int, locations: Mapping[tuple[str, int], int] | None = None
) -> TracePacket:
    """A sequence's first packet: it clears incremental state and interns every name, and the
    source locations (file, line; -1: none) of its slices."""
    packet = TracePacket(trusted_packet_sequence_id=sequence, first_packet_on_sequence=True)
    packet.sequence_flags = (
        TracePacket.SEQ_INCREMENTAL_STATE_CLEARED | TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    )
    for name, iid in names.items():
        packet.interned_data.event_names.add(iid=iid, name=name)
    for name, iid in ANNOTATION_IID.items():
        packet.interned_data.debug_annotation_names.add(iid=iid, name=name)
    for kind, iid in KIND_IID.items():
        packet.interned_data.debug_annotation_string_values.add(iid=iid, str=kind.encode())
    for (file, line), iid in (locations or {}).items():
        location = packet.interned_data.source_locations.add(iid=iid, file_name=file)
        if line >= 0:
            location.line_number = line
    return packet


def kind_annotation(kind: str) -> bytes:
    """A slice's kind (one of ``tracks.KINDS``) as a debug annotation field, interned."""
    body = field_value(DebugAnnotation.DESCRIPTOR, "name_iid", ANNOTATION_IID[KIND_ARG]) + field_value(
        DebugAnnotation.DESCRIPTOR, "string_value_iid", KIND_IID[kind]
    )
    return field_key(EVENT, "debug_annotations") + varint_bytes(len(body)) + body


ANNOTATIONS_KEY = field_key(EVENT, "debug_annotations")
OPTIONAL_ANNOTATIONS = ("line", "cluster", "cluster_rank")  # -1: the slice has no such annotation


def annotation_prefix(name: str) -> bytes:
    """A whole-number debug annotation's body up to its value: its interned name, then the key of
    its ``int_value``."""
    return field_value(DebugAnnotation.DESCRIPTOR, "name_iid", ANNOTATION_IID[name]) + field_key(
        DebugAnnotation.DESCRIPTOR, "int_value"
    )


def annotation_rows(n: int, values: dict[str, np.ndarray]) -> Rows:
    """TrackEvent.debug_annotations fields, with interned names, in the order of SLICE_ARGS."""
    rows = Rows(n)
    for annotation in SLICE_ARGS:
        if annotation not in values:
            continue
        column = values[annotation]
        present = column >= 0 if annotation in OPTIONAL_ANNOTATIONS else None
        if present is not None:
            column = np.maximum(column, 0)  # an absent annotation's value is never written
        body = Rows(n).constant(annotation_prefix(annotation)).varint(column)
        rows.message(ANNOTATIONS_KEY, body, present)
    return rows


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


_NAME_IID = field_key(DebugAnnotation.DESCRIPTOR, "name_iid")
_INT_VALUE = field_key(DebugAnnotation.DESCRIPTOR, "int_value")
_REMEMBERED = 1 << 16  # encoded annotations kept, at most (a launch's own numbers fill the rest)


def _delimited(body: bytes) -> bytes:
    return ANNOTATIONS_KEY + varint_bytes(len(body)) + body


_remembered: dict[tuple, bytes] = {}


def annotation_field(name_iid: int, value: Any) -> bytes:
    """``debug_annotation(value)`` named by ``name_iid``, encoded as a TrackEvent's
    ``debug_annotations`` field (b"" for none): the same bytes as protobuf's, made by hand for an
    integer and remembered for integers, text and truth values (a launch's CTAs, its kernel's
    name, its clock source: the same in many launches), so that a session of many small
    launches does not build a protobuf message per value."""
    number = None
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        number = int(value)
        key: tuple | None = (name_iid, number)
    elif isinstance(value, (str, bool, np.bool_)):  # not floats: a key would take -0.0 for 0.0
        key = (name_iid, type(value), value)
    else:
        key = None
    if key is not None:
        encoded = _remembered.get(key)
        if encoded is not None:
            return encoded
    if number is not None and _INT64_MIN <= number <= _INT64_MAX:
        encoded = _delimited(_NAME_IID + varint_bytes(name_iid) + _INT_VALUE + varint_bytes(number))
    else:
        annotation = debug_annotation(value)
        if annotation is None:
            encoded = b""
        else:
            annotation.name_iid = name_iid
            encoded = _delimited(annotation.SerializeToString())
    if key is not None and len(_remembered) < _REMEMBERED:
        _remembered[key] = encoded
    return encoded


def debug_annotation(value: Any) -> DebugAnnotation | None:
    """A plain value (number, text, dictionary, list) as a debug annotation; None for none. An
    integer past int64 (a launch metric of 2^64 flops, say) is written as a double."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, (Mapping, list, tuple, np.ndarray)) and not len(value):
        return None  # an empty dictionary and an empty list would read back alike
    annotation = DebugAnnotation()
    if isinstance(value, (bool, np.bool_)):
        annotation.bool_value = bool(value)
    elif isinstance(value, numbers.Integral) and _INT64_MIN <= int(value) <= _INT64_MAX:
        annotation.int_value = int(value)
    elif isinstance(value, numbers.Real):
        annotation.double_value = float(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            entry = debug_annotation(item)
            if entry is not None:
                entry.name = str(key)
                annotation.dict_entries.append(entry)
    elif isinstance(value, (list, tuple, np.ndarray)):
        for item in value:
            entry = debug_annotation(item)
            if entry is not None:
                annotation.array_values.append(entry)
    else:
        annotation.string_value = str(value)
    return annotation
