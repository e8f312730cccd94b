"""A launch's begin event (``perfetto.slices.launch_event``), encoded field by field, is the same
bytes protobuf writes for the message built from the same row, whatever the row holds."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

from proton_ik.viewer.perfetto.slices import launch_event
from proton_ik.viewer.perfetto.wire import ANNOTATION_IID, KIND_IID, debug_annotation
from proton_ik.viewer.tracks import KIND_ARG, KINDS, LAUNCH_ARGS, launch_slice_name

_INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    _INT64,
    st.integers(1 << 63, 1 << 70),  # past int64: written as a double
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    _INT64.map(np.int64),
    st.floats(width=32).map(np.float32),
)
_VALUE = st.one_of(
    _SCALAR,
    st.lists(_SCALAR, max_size=3),
    st.dictionaries(st.text(max_size=5), _SCALAR, max_size=3),
)


def _reference(row: dict, names: dict[str, int]) -> bytes:
    """The event as protobuf builds it: every annotation a message."""
    values = {name: row.get(name) for name in LAUNCH_ARGS}
    values["config"] = row.get("config_args")
    values["time_shift_cycles"] = row.get("time_shift_cycles", 0)
    values["time_shift_pair_cycles"] = row.get("time_shift_pair_cycles", values["time_shift_cycles"])
    event = TrackEvent(type=TrackEvent.TYPE_SLICE_BEGIN, name_iid=names[launch_slice_name(row)])
    for name, value in values.items():
        annotation = debug_annotation(value)
        if annotation is not None:
            annotation.name_iid = ANNOTATION_IID[name]
            event.debug_annotations.append(annotation)
    event.debug_annotations.add(name_iid=ANNOTATION_IID[KIND_ARG], string_value_iid=KIND_IID[KINDS[2]])
    return event.SerializeToString()


@settings(max_examples=300, deadline=None)
@given(
    values=st.fixed_dictionaries({}, optional={name: _VALUE for name in (*LAUNCH_ARGS, "config_args")}),
    launch=st.integers(0, 1 << 40),
    kernel=st.text(min_size=1, max_size=10),
    name_iid=st.integers(1, 1 << 20),
)
def test_a_launch_begin_is_the_bytes_protobuf_writes(values, launch, kernel, name_iid):
    row = {**values, "launch": launch, "kernel": kernel}
    names = {launch_slice_name(row): name_iid}
    assert launch_event(row, names) == _reference(row, names)
    assert launch_event(row, names) == _reference(row, names)  # the second time, from what was kept
