import numpy as np
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import DebugAnnotation

from proton_ik.viewer.arrays import Rows, assemble, join


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decimal(value: int, digits: int = 1) -> bytes:
    return ("-" if value < 0 else "").encode() + str(abs(value)).zfill(digits).encode()


def random_ints(rng, n):
    """Small and large, zero and negative, and the extremes of int64."""
    scale = 10 ** rng.integers(0, 19, n)
    values = rng.integers(-(2**62), 2**62, n) // scale
    values[:4] = [0, -1, np.iinfo(np.int64).max, 1 << 56]
    return values


def test_every_kind_of_field_matches_a_row_at_a_time_reference():
    rng = np.random.default_rng(5)
    n = 500
    a, b = random_ints(rng, n), rng.integers(0, 10**6, n)
    present = rng.random(n) < 0.6
    codes = rng.integers(0, 3, n)
    entries = [b"load", b"a much longer scope name, 33 bytes", b""]
    rows = (
        Rows(n)
        .constant(b'{"ph":"X","name":')
        .varint(a)
        .decimal(a)
        .constant(b"|")
        .decimal(b, digits=3)
        .field(b"\x20", b, where=present)
        .pick(codes, entries)
        .decimal(b, where=~present)
        .constant(b"}\n")
    )
    expected = b"".join(
        b'{"ph":"X","name":'
        + varint(int(a[i]))
        + decimal(int(a[i]))
        + b"|"
        + decimal(int(b[i]), 3)
        + (b"\x20" + varint(int(b[i])) if present[i] else b"")
        + entries[codes[i]]
        + (b"" if present[i] else decimal(int(b[i])))
        + b"}\n"
        for i in range(n)
    )
    assert join(rows).tobytes() == expected
    assert rows.lengths.sum() == len(expected)


def test_numbers_of_any_width_can_start_a_row():
    # A row's first 8 bytes are written last, from its leading fields: short and long numbers mixed.
    values = np.array([7, 123_456_789, -5, 10**17, 0, 99_999_999_999])
    rows = Rows(len(values)).decimal(values).varint(values).constant(b";;;;;;;;")
    expected = b"".join(decimal(int(v)) + varint(int(v)) + b";;;;;;;;" for v in values)
    assert join(rows).tobytes() == expected


def test_varints_are_what_protobuf_writes():
    values = random_ints(np.random.default_rng(1), 300)
    rows = Rows(len(values)).field(b"\x20", values).constant(b"|padding")
    expected = b"".join(DebugAnnotation(int_value=int(v)).SerializeToString() + b"|padding" for v in values)
    assert join(rows).tobytes() == expected


def test_nested_messages_carry_their_length():
    values = np.array([1, 300, 1 << 40])
    body = Rows(3).field(b"\x08", values).constant(b"\x10\x01")
    rows = Rows(3).message(b"\x0a", body).constant(b"tail....")
    expected = b"".join(
        b"\x0a" + varint(len(varint(v)) + 3) + b"\x08" + varint(v) + b"\x10\x01tail...."
        for v in values.tolist()
    )
    assert join(rows).tobytes() == expected


def test_kinds_interleave_in_any_order():
    rng = np.random.default_rng(2)
    n_long, n_short = 300, 700
    order = rng.permutation(n_long + n_short)
    long_slots, short_slots = np.sort(order[:n_long]), np.sort(order[n_long:])
    values = rng.integers(0, 1 << 30, n_long)
    long_rows = Rows(n_long).constant(b"LONG").decimal(values).constant(b";")
    short_rows = Rows(n_short).constant(b"short::").varint(np.arange(n_short) % 200)
    data, ends = assemble([(long_rows, long_slots), (short_rows, short_slots)])

    pieces = [b""] * (n_long + n_short)
    for i, slot in enumerate(long_slots.tolist()):
        pieces[slot] = b"LONG" + decimal(int(values[i])) + b";"
    for i, slot in enumerate(short_slots.tolist()):
        pieces[slot] = b"short::" + varint(i % 200)
    assert data.tobytes() == b"".join(pieces)
    assert ends.tolist() == np.cumsum([len(p) for p in pieces]).tolist()


def test_rows_shorter_than_a_word_are_refused():
    with pytest.raises(ValueError, match="at least 8 bytes"):
        join(Rows(2).constant(b"tiny"))
    assert join(Rows(0).constant(b"anything")).size == 0
