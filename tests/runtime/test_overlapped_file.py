"""The session file's writes on a thread of their own (``session_writer.OverlappedFile``): the
zip it holds is byte for byte the one zipfile writes to a plain file, and a failed write is
raised at the writer's next call, never lost."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from proton_ik.runtime.session_writer import WRITE_PIECE_BYTES, OverlappedFile, npy_parts


def _zip(target, arrays) -> None:
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for index, array in enumerate(arrays):
            with archive.open(f"launches/{index:06d}.npy", "w", force_zip64=True) as member:
                for part in npy_parts(array):
                    member.write(part)
            archive.writestr(f"launches/{index:06d}.json", f'{{"launch": {index}}}')


def test_the_zip_is_the_one_a_plain_file_gets(tmp_path):
    rng = np.random.default_rng(0)
    sizes = (0, 1, 4096, WRITE_PIECE_BYTES - 1, WRITE_PIECE_BYTES, 3 * WRITE_PIECE_BYTES + 17)
    arrays = [rng.integers(0, 256, size, dtype=np.uint8) for size in sizes]
    _zip(tmp_path / "plain.zip", arrays)
    overlapped = OverlappedFile(tmp_path / "overlapped.zip")
    _zip(overlapped, arrays)
    overlapped.close()
    assert (tmp_path / "overlapped.zip").read_bytes() == (tmp_path / "plain.zip").read_bytes()
    with zipfile.ZipFile(tmp_path / "overlapped.zip") as archive:
        assert archive.testzip() is None


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a device that is always full")
def test_a_failed_write_is_raised_at_the_next_call():
    file = OverlappedFile(Path("/dev/full"))
    file.write(b"header" * 100_000)  # queued: the write fails on the file's thread
    with pytest.raises(OSError, match=r"writing the session file failed.*No space left"):
        file.flush()
    with pytest.raises(OSError, match="No space left"):
        file.close()


def test_a_patch_lands_at_its_offset_after_the_writes_before_it(tmp_path):
    file = OverlappedFile(tmp_path / "p.bin")
    file.write(b"a" * 10)
    file.patch(2, b"XY")
    file.write(b"b" * 5)
    assert file.tell() == 15
    file.close()
    assert (tmp_path / "p.bin").read_bytes() == b"aaXYaaaaaa" + b"bbbbb"


def test_small_writes_go_to_the_file_together_and_in_order(tmp_path):
    """Writes under GATHER_BYTES are copied and handed to the file's thread together (the
    caller may reuse a small buffer at once); a large write, a patch or a flush hands them over
    first, so the bytes land in the order written."""
    from proton_ik.runtime.session_writer import GATHER_BYTES

    file = OverlappedFile(tmp_path / "g.bin")
    reused = bytearray(b"x" * 10)
    expected = bytearray()
    for index in range(1000):
        reused[:] = bytes([index % 251]) * 10
        file.write(reused)
        expected += reused
    large = bytes(range(256)) * (GATHER_BYTES // 256 + 1)
    file.write(large)
    expected += large
    file.write(b"tail")
    expected += b"tail"
    file.patch(5, b"PATCH")
    expected[5:10] = b"PATCH"
    assert file.tell() == len(expected)
    file.flush()
    assert (tmp_path / "g.bin").read_bytes() == bytes(expected)
    file.close()


def test_writes_queued_together_land_in_order_whatever_each_writev_takes(tmp_path, monkeypatch):
    """The file's thread writes the appends queued meanwhile with one ``writev``, patches between
    them in their place; a ``writev`` that takes only part of its views (as a system call may)
    is continued where it stopped."""
    import os
    import threading

    from proton_ik.runtime import session_writer

    calls: list[int] = []
    plain_writev = os.writev

    def short_writev(descriptor: int, views) -> int:
        gate.wait()  # the first write holds the thread until the rest is queued behind it
        calls.append(len(views))
        taken, budget = [], 1000  # at most 1000 bytes a call, cut anywhere
        for view in views:
            if budget <= 0:
                break
            part = memoryview(view)[:budget]
            taken.append(part)
            budget -= part.nbytes
        return plain_writev(descriptor, taken)

    monkeypatch.setattr(session_writer.os, "writev", short_writev)
    gate = threading.Event()
    file = OverlappedFile(tmp_path / "c.bin")
    rng = np.random.default_rng(1)
    expected = bytearray()
    for index in range(6):
        block = rng.integers(0, 256, 70_000, dtype=np.uint8).tobytes()
        file.write(block)
        expected += block
        if index == 3:
            file.patch(3, b"PATCH")
            expected[3:8] = b"PATCH"
    gate.set()
    file.close()
    assert (tmp_path / "c.bin").read_bytes() == bytes(expected)
    assert max(calls) >= 2  # appends queued together went to one call
