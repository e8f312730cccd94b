"""The event stream written in C (``perfetto.packets``) against its reference, numpy's
``slices.event_rows`` laid out by ``arrays.assemble``: the same bytes for every chunk of every
bundled capture and model session, in either timeline, in any window of rows; and clear errors
for a program or columns the C cannot run."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proton_ik.viewer.arrays import assemble
from proton_ik.viewer.perfetto import packets, writer
from proton_ik.viewer.perfetto.slices import Markers, event_rows
from proton_ik.viewer.render.session import render_session

DATA = Path(__file__).parents[1] / "data"
CAPTURES = sorted(path.name for path in DATA.glob("*.pik"))

needs_c = pytest.mark.skipif(packets.encoder() is None, reason=f"no C encoder: {packets.why_reference()}")


def _markers(session: Path, out: Path, timeline: str = "slots") -> list[Markers]:
    """Every chunk's markers, as the Perfetto writer made them rendering ``session``."""
    seen: list[Markers] = []
    original = writer.event_stream

    def spy(markers: Markers):  # type: ignore[no-untyped-def]
        seen.append(markers)
        return original(markers)

    writer.event_stream = spy
    try:
        render_session(
            session, {"pftrace": out / "trace.pftrace"}, progress=False, workers=1, timeline=timeline
        )
    finally:
        writer.event_stream = original
    return seen


def _windows(rows: int) -> Iterator[tuple[int, int]]:
    """The whole stream, batches, and windows that start and end anywhere."""
    yield 0, rows
    cuts = sorted({0, rows, 1, rows // 3, rows // 2, max(rows - 1, 0), min(7, rows)})
    yield from itertools.pairwise(cuts)


def _same_bytes(markers: Markers, lo: int, hi: int) -> None:
    encoder = packets.encoder()
    assert encoder is not None
    programs = packets.programs_for(markers)
    assert programs is not None, "every bundled chunk's tables can be laid out"
    columns = [
        np.ascontiguousarray(c, dtype=np.int64)
        for c in (markers.header_row, markers.row, markers.slice, markers.track)
    ]
    compiled = encoder.encode(programs, *columns, markers.scopes, markers.lives, lo, hi)
    reference = assemble(event_rows(markers, lo, hi))[0].tobytes()
    assert compiled == reference, f"rows {lo} to {hi}: the C wrote other bytes than the reference"


@needs_c
@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("timeline", ["slots", "ctas"])
def test_every_capture_encodes_as_the_reference_does(capture: str, timeline: str, tmp_path: Path) -> None:
    chunks = _markers(DATA / capture, tmp_path, timeline)
    assert chunks
    for markers in chunks:
        for lo, hi in _windows(markers.rows):
            _same_bytes(markers, lo, hi)
    assert any((markers.slice >= 0).any() for markers in chunks), "slices begin"
    assert any((markers.slice == -1).any() for markers in chunks), "and end"


@needs_c
def test_the_paths_write_the_same_trace_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole render, compressed and all: the file is the same either way."""
    for capture in ("clusters.pik", "events.pik", "torch_profiler.pik"):
        render_session(DATA / capture, {"pftrace": tmp_path / "c.pftrace"}, progress=False, workers=1)
        with monkeypatch.context() as patch:
            patch.setattr(packets, "encoder", lambda: None)
            render_session(DATA / capture, {"pftrace": tmp_path / "numpy.pftrace"}, progress=False, workers=1)
        assert (tmp_path / "c.pftrace").read_bytes() == (tmp_path / "numpy.pftrace").read_bytes(), capture


@needs_c
@settings(max_examples=60, deadline=None)
@given(
    deltas=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=40),
    width=st.integers(0, 300),
)
def test_varints_and_long_messages_match_protobuf(deltas: list[int], width: int) -> None:
    """Negative values (ten bytes), and a nested message of 128 bytes and more (a length of two
    bytes: its body moves up), as protobuf writes them."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket

    n = len(deltas)
    values = np.array(deltas, dtype=np.int64)
    payload = bytes(range(1, 1 + width % 200)) * (1 + width // 200)
    key = packets.field_key(packets.PACKET, "timestamp")
    program = [
        (packets.OPEN, packets.TRACE_PACKET),
        (packets.FIELD, key, values, packets.ROW),
        (packets.OPEN, packets.field_key(packets.PACKET, "synchronization_marker")),
        (packets.CONST, payload),
        (packets.CLOSE,),
        (packets.CLOSE,),
    ]
    empty = [(packets.CONST, b"")]
    marker_row = np.arange(n, dtype=np.int64)
    slices = np.full(n, -1, dtype=np.int64)  # every row an "end": its program runs
    programs = [empty, empty, empty, empty, program, empty]
    encoded = packets.encoder().encode(
        programs, np.zeros(0, np.int64), marker_row, slices, slices, 0, 0, 0, n
    )
    expected = Trace(
        packet=[TracePacket(timestamp=v % 2**64, synchronization_marker=payload) for v in deltas]
    ).SerializeToString()
    assert encoded == expected


@needs_c
def test_a_bad_program_or_column_is_an_error_not_a_crash() -> None:
    encode = packets.encoder().encode
    rows = np.arange(2, dtype=np.int64)
    ends = np.full(2, -1, dtype=np.int64)
    empty = [(packets.CONST, b"")]

    def run(end_program: list[tuple]) -> bytes:
        return encode([empty] * 4 + [end_program, empty], np.zeros(0, np.int64), rows, ends, ends, 0, 0, 0, 2)

    short = np.zeros(1, dtype=np.int64)  # one value for two rows
    with pytest.raises(ValueError, match="outside its columns"):
        run([(packets.FIELD, b"\x08", short, packets.ROW)])
    with pytest.raises(TypeError, match="int64"):
        run([(packets.FIELD, b"\x08", np.zeros(2, dtype=np.int32), packets.ROW)])
    with pytest.raises(ValueError, match="unknown or has the wrong fields"):
        run([(99, b"")])
    with pytest.raises(ValueError, match="open and close in pairs"):
        run([(packets.OPEN, b"\x0a")])
    with pytest.raises(ValueError, match="offsets"):
        run([(packets.TABLE, b"abc", np.array([0, 2], dtype=np.int64), packets.ROW)])
    with pytest.raises(ValueError, match="neither a header nor a marker"):
        encode([empty] * 6, np.zeros(0, np.int64), np.array([0, 5]), ends, ends, 0, 0, 0, 2)
