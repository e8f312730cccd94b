"""Millions of small byte records at once: protobuf packets and JSON objects, built with whole-array numpy.

A trace file is millions of records of a few kinds, each kind the same sequence of fields with
different numbers in them. ``Rows`` describes one kind: fields appended in order (constant bytes,
protobuf varints, decimal numbers, strings from a table, nested rows), each a column with one
value per row, any of them optionally absent per row. ``assemble`` lays rows of several kinds out
in one byte array, interleaved in any order.

How: a field is packed into 64-bit little-endian words of up to 8 bytes, with a byte length per
row; adjacent fields are merged into one word while they surely fit. Row offsets come from a
running sum of row lengths, and each word is written at its offset in every row by one scatter of
unaligned 8-byte stores. A store may write past its word's length; the row's next word, stored in
a later pass, overwrites that. What spills past a row's end lands in the first 8 bytes of the next
row, and a last pass stores every row's exact first 8 bytes. So every row must be at least 8 bytes
long, and the bytes of a word past its length must be zero (they are ORed when words merge). Two
stores of one pass overlap only inside a row's first 8 bytes, so nothing depends on the order in
which numpy stores within a scatter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

WORD = 8
_U64 = np.uint64
_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=_U64)
_ALL_BITS = (1 << 64) - 1
# The high bit of the first 0, 1, ... 8 bytes: a varint's "more bytes follow" flags.
_CONTINUATION = np.array([sum(0x80 << (8 * j) for j in range(m)) for m in range(WORD + 1)], dtype=_U64)
_POW10 = np.array([10**k for k in range(20)], dtype=_U64)
# Four ASCII digits of every number below 10**4, the first digit in the lowest byte.
_ASCII4 = np.array([int.from_bytes(f"{i:04d}".encode(), "little") for i in range(10_000)], dtype=_U64)


@dataclass(frozen=True)
class _Word:
    """Up to 8 bytes per row, little-endian in a uint64; bytes past ``length`` are zero."""

    value: np.ndarray | np.uint64  # uint64, per row or one for all rows
    length: np.ndarray | int  # int64, per row or one for all rows
    most: int  # the largest length of any row


class Rows:
    """``n`` rows of bytes, each the concatenation of the fields appended so far.

    Every ``where`` argument is an optional bool array: the field is absent from rows where it is False.
    """

    def __init__(self, n: int):
        self.n = n
        self._words: list[_Word] = []
        self._length: np.ndarray | int = 0
        self._most = 0  # the longest row can be
        self._packed: list[_Word] | None = None

    def constant(self, data: bytes, where: np.ndarray | None = None) -> Rows:
        """The same bytes in every row."""
        for start in range(0, len(data), WORD):
            chunk = data[start : start + WORD]
            self._add(_U64(int.from_bytes(chunk, "little")), len(chunk), len(chunk), where)
        return self

    def varint(self, values: np.ndarray | int, where: np.ndarray | None = None) -> Rows:
        """A protobuf base-128 varint; negative int64 values take ten bytes, as protobuf writes them."""
        if isinstance(values, (int, np.integer)):
            return self.constant(varint_bytes(int(values)), where)
        if _in_no_row(where):
            return self
        values = np.asarray(values).astype(np.int64, copy=False).view(_U64)
        length, most = _count(values, _VARINT_LIMITS)
        for first in range(0, most, WORD):
            if most == 1:
                self._add(values, 1, 1, where)
                break
            word = np.zeros(self.n, dtype=_U64)
            for k in range(first, min(most, first + WORD)):
                # Group k, bits 7k to 7k + 6, goes to byte k - first of this word.
                group = values & _U64((0x7F << (7 * k)) & _ALL_BITS)
                shift = k - 8 * first
                word |= group << _U64(shift) if shift >= 0 else group >> _U64(-shift)
            word |= _CONTINUATION[np.clip(length - 1 - first, 0, WORD)]
            self._add(word, np.clip(length - first, 0, WORD), min(most - first, WORD), where)
        return self

    def field(self, key: bytes, values: np.ndarray, where: np.ndarray | None = None) -> Rows:
        """A protobuf varint field: its key, then its value."""
        return self.constant(key, where).varint(values, where)

    def decimal(self, values: np.ndarray, where: np.ndarray | None = None, digits: int = 1) -> Rows:
        """A decimal integer in ASCII, with at least ``digits`` digits (zero-padded)."""
        values = np.asarray(values, dtype=np.int64)
        negative = values < 0
        if negative.any():
            self.constant(b"-", negative if where is None else negative & where)
        magnitude = np.abs(values).view(_U64)
        count, most = _count(magnitude, _POW10[1:])
        count, most = np.maximum(count, digits), max(most, digits)
        if most <= 4:
            self._add(_ASCII4[magnitude] >> _shift(4 - count), count, most, where)
            return self
        if most <= WORD:
            self._add(_ascii8(magnitude) >> _shift(WORD - count), count, most, where)
            return self
        # Up to three groups of eight digits; the first may be short.
        groups = -(-np.asarray(count) // WORD)
        low = _ascii8(magnitude % _U64(10**8))
        middle = _ascii8((magnitude // _U64(10**8)) % _U64(10**8))
        high = _ascii8(magnitude // _U64(10**16)) if most > 2 * WORD else middle
        lead = count - WORD * (groups - 1)
        first = np.where(groups == 1, low, np.where(groups == 2, middle, high))
        self._add(first >> _shift(WORD - lead), lead, WORD, where)
        second = np.where(groups == 2, low, np.where(groups == 3, middle, _U64(0)))
        self._add(second, np.where(groups >= 2, WORD, 0), WORD, where)
        if most > 2 * WORD:
            self._add(np.where(groups == 3, low, _U64(0)), np.where(groups == 3, WORD, 0), WORD, where)
        return self

    def pick(self, codes: np.ndarray, entries: Sequence[bytes], where: np.ndarray | None = None) -> Rows:
        """``entries[code]`` in each row."""
        longest = max((len(entry) for entry in entries), default=0)
        width = -(-longest // WORD)
        table = np.zeros((max(len(entries), 1), width), dtype=_U64)
        sizes = np.zeros(max(len(entries), 1), dtype=np.int64)
        for i, entry in enumerate(entries):
            sizes[i] = len(entry)
            padded = entry.ljust(width * WORD, b"\0")
            table[i] = np.frombuffer(padded, dtype="<u8")
        codes = np.asarray(codes, dtype=np.int64)
        size = sizes[codes]
        for w in range(width):
            self._add(
                table[codes, w], np.clip(size - WORD * w, 0, WORD), min(longest - WORD * w, WORD), where
            )
        return self

    def rows(self, other: Rows) -> Rows:
        """Every field of ``other`` (rows of the same count), e.g. an embedded message."""
        if other.n != self.n:
            raise ValueError(f"cannot append {other.n} rows to {self.n}")
        self._words.extend(other._words)
        self._length = self._length + other._length
        self._most += other._most
        self._packed = None
        return self

    def take(self, other: Rows, index: np.ndarray) -> Rows:
        """Row ``index[i]`` of ``other`` in row i: fields shared by many rows (say, by every event
        of a track) are encoded once, in ``other``, and copied from there."""
        for word in other.packed():
            value = word.value[index] if isinstance(word.value, np.ndarray) else word.value
            length = word.length[index] if isinstance(word.length, np.ndarray) else word.length
            self._add(value, length, word.most, None)
        return self

    def message(self, key: bytes, body: Rows, where: np.ndarray | None = None) -> Rows:
        """A length-delimited protobuf field holding ``body``."""
        if _in_no_row(where):
            return self
        where = _unless_in_every_row(where)
        self.constant(key, where)
        if isinstance(body.lengths, np.ndarray) and body._most < 0x80:
            self._add(body.lengths.view(_U64), 1, 1, where)  # a one-byte varint is the number itself
        else:
            self.varint(body.lengths, where)
        if where is None:
            return self.rows(body)
        for word in body._words:
            self._add(word.value, word.length, word.most, where)
        return self

    @property
    def lengths(self) -> np.ndarray | int:
        """Bytes in each row: one int when all rows are as long."""
        return self._length

    def _add(
        self, value: np.ndarray | np.uint64, length: np.ndarray | int, most: int, where: np.ndarray | None
    ) -> None:
        """Append a word: ``most`` bounds its length in any row."""
        if not most or _in_no_row(where):
            return
        if isinstance(length, np.integer):
            length = int(length)
        where = _unless_in_every_row(where)
        if where is not None:
            value = np.where(where, value, _U64(0))
            length = np.where(where, length, 0)
        self._words.append(_Word(value, length, most))
        self._length = self._length + length
        self._most += most
        self._packed = None

    def packed(self) -> list[_Word]:
        """The fields merged into as few words as surely fit 8 bytes."""
        if self._packed is not None:
            return self._packed
        merged: list[_Word] = []
        for word in self._words:
            last = merged[-1] if merged else None
            if last is not None and last.most + word.most <= WORD:
                merged[-1] = _Word(
                    last.value | (word.value << _shift(last.length)),
                    last.length + word.length,
                    last.most + word.most,
                )
            else:
                merged.append(word)
        self._packed = merged
        return merged


def _in_no_row(where: np.ndarray | None) -> bool:
    """Whether a field is absent from every row: it then adds no word at all. A word of zero
    bytes would still cost its passes over the rows, and its bound would keep the words beside it
    from merging."""
    return where is not None and not where.any()


def _unless_in_every_row(where: np.ndarray | None) -> np.ndarray | None:
    """``where``, or None for a field present in every row (no mask to apply)."""
    return None if where is None or where.all() else where


def varint_bytes(value: int) -> bytes:
    """One protobuf varint, as bytes (negative values as their 64-bit two's complement)."""
    value &= _ALL_BITS
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _count(values: np.ndarray, limits: np.ndarray) -> tuple[np.ndarray | int, int]:
    """1 + how many of the ascending ``limits`` each value reaches (one int when that is the same
    for all), and the largest such count."""
    top = values.max(initial=_U64(0))
    low = values.min(initial=_U64(0))
    reached = int(np.searchsorted(limits, top, side="right"))
    if reached == int(np.searchsorted(limits, low, side="right")):
        return 1 + reached, 1 + reached
    count = np.ones(len(values), dtype=np.int64)
    for limit in limits[:reached]:
        count += values >= limit
    return count, 1 + reached


def _ascii8(values: np.ndarray) -> np.ndarray:
    """Eight zero-padded ASCII digits of each value below 10**8, the first digit in the lowest byte."""
    high, low = np.divmod(values.astype(np.int64), 10_000)
    return _ASCII4[high] | (_ASCII4[low] << _U64(32))


def _shift(length: np.ndarray | int) -> np.ndarray | np.uint64:
    """Bits in ``length`` bytes, as a uint64 shift count."""
    if isinstance(length, np.ndarray):
        return length.astype(_U64) << _U64(3)
    return _U64(8 * length)


def _head(words: list[_Word], n: int) -> np.ndarray:
    """Each row's first 8 bytes."""
    head = np.zeros(n, dtype=_U64)
    offset: np.ndarray | int = 0
    for word in words:
        if isinstance(offset, int):
            head |= word.value << _U64(8 * offset)
        else:
            inside = offset < WORD
            head |= np.where(inside, word.value << _shift(np.minimum(offset, WORD - 1)), _U64(0))
        offset = offset + word.length
        if np.min(offset) >= WORD:
            break
    return head


def assemble(kinds: Sequence[tuple[Rows, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Lay out rows of several kinds in one byte array: ``(rows, slots)`` puts row i of ``rows`` at
    output row ``slots[i]``; the slots of all kinds together must number the rows 0, 1, 2, ...

    Returns the bytes (uint8) and each output row's end offset.
    """
    count = sum(rows.n for rows, _ in kinds)
    lengths = np.empty(count, dtype=np.int64)
    for rows, slots in kinds:
        lengths[slots] = rows.lengths
    if count and lengths.min() < WORD:
        raise ValueError(f"every row must be at least {WORD} bytes long")
    ends = np.cumsum(lengths)
    size = int(ends[-1]) if count else 0
    out = np.zeros(size + WORD, dtype=np.uint8)
    stores = np.ndarray((size + 1,), dtype="<u8", buffer=out, offset=0, strides=(1,))
    heads = []
    for rows, slots in kinds:
        start = ends[slots] - lengths[slots]
        words = rows.packed()
        heads.append((start, words, rows.n))
        offset = start
        for word in words:
            stores[offset] = word.value
            offset = offset + word.length
    for start, words, n in heads:
        stores[start] = _head(words, n)
    return out[:size], ends


def join(rows: Rows) -> np.ndarray:
    """The rows one after another, as uint8."""
    return assemble([(rows, np.arange(rows.n))])[0]
