"""Launches' begin events (``perfetto.slices.launch_events``), encoded for many launches at once,
are the same bytes protobuf writes for the messages built from the same rows, whatever they hold."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

from proton_ik.viewer.arrays import join
from proton_ik.viewer.perfetto.slices import launch_events
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


def _each(rows: list[dict], names: dict[str, int]) -> list[bytes]:
    encoded = launch_events(rows, names)
    whole = join(encoded).tobytes()
    lengths = np.broadcast_to(np.asarray(encoded.lengths), (len(rows),))
    ends = np.cumsum(lengths)
    return [whole[end - length : end] for end, length in zip(ends, lengths, strict=True)]


_ROW = st.fixed_dictionaries(
    {"launch": st.integers(0, 1 << 40), "kernel": st.text(min_size=1, max_size=10)},
    optional={name: _VALUE for name in (*LAUNCH_ARGS, "config_args") if name not in ("launch", "kernel")},
)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(_ROW, min_size=1, max_size=6), name_iid=st.integers(1, 1 << 20))
def test_launch_begins_are_the_bytes_protobuf_writes(rows, name_iid):
    names = {launch_slice_name(row): name_iid + i for i, row in enumerate(rows)}
    expected = [_reference(row, names) for row in rows]
    assert _each(rows, names) == expected
    assert _each(rows, names) == expected  # the second time, from the annotations kept


def test_launches_of_one_kernel_share_their_annotations_and_differ_in_their_numbers():
    rows = [{"launch": n, "kernel": "k", "ctas": 16, "records": 128 + n, "mhz": 1980.0} for n in range(3)]
    names = {launch_slice_name(row): 7 for row in rows}
    assert _each(rows, names) == [_reference(row, names) for row in rows]


def test_values_that_compare_equal_but_encode_apart_stay_apart():
    # 1, True and 1.0 are equal (and hash alike) in Python; a launch's annotation says each as it is.
    values = [1, True, 1.0, -0.0, 0.0, np.float32(1.0), np.int64(1), "1"]
    configs = [{"a": 1}, {"a": True}, {"a": 1.0}, [1], [True], None, {"a": 1}, [1.0]]
    rows = [
        {"launch": n, "kernel": "k", "mhz": mhz, "config_args": config}
        for n, (mhz, config) in enumerate(zip(values, configs, strict=True))
    ]
    names = {launch_slice_name(row): 3 for row in rows}
    assert _each(rows, names) == [_reference(row, names) for row in rows]
