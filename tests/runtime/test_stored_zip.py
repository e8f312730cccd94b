"""The session file's container (``runtime.stored_zip``): checksums combined from pieces equal
zlib's of the whole, and the archive is one that zipfile reads, tests and lists, member for
member (a session file cut anywhere: tests/viewer/test_session_file.py)."""

from __future__ import annotations

import io
import zipfile
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proton_ik.runtime.stored_zip import PIECE_BYTES, StoredZipWriter, crc32, crc32_combine


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=300))
def test_combined_checksums_are_zlibs_of_the_whole(first, second):
    assert crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second)) == zlib.crc32(first + second)


@pytest.mark.parametrize(
    "size", [0, 1, PIECE_BYTES - 1, 4 * PIECE_BYTES, 4 * PIECE_BYTES + 1, 9 * PIECE_BYTES + 12345]
)
def test_a_checksum_on_many_threads_is_zlibs(size):
    from concurrent.futures import ThreadPoolExecutor

    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    with ThreadPoolExecutor(4) as pool:
        assert crc32(memoryview(data), pool) == zlib.crc32(data) == crc32(memoryview(data), None)


def test_zipfile_reads_every_member_as_written(tmp_path):
    rng = np.random.default_rng(1)
    members = {
        "session.json": [b'{"name": "s"}'],
        "launches/000000.npy": [
            b"head",
            memoryview(rng.integers(0, 256, 5 * PIECE_BYTES + 7, dtype=np.uint8)),
        ],
        "empty": [],
        "naïve/ünïcode.json": [b"{}", b""],
    }
    path = tmp_path / "a.zip"
    with open(path, "wb") as file:
        writer = StoredZipWriter(file, workers=3)
        for name, parts in members.items():
            writer.add(name, parts)
        writer.close()
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None
        assert archive.namelist() == list(members)
        for name, parts in members.items():
            assert archive.read(name) == b"".join(bytes(part) for part in parts)
            assert archive.getinfo(name).compress_type == zipfile.ZIP_STORED


def test_a_name_twice_or_a_closed_archive_is_refused():
    writer = StoredZipWriter(io.BytesIO(), workers=1)
    writer.add("a", [b"1"])
    with pytest.raises(ValueError, match="already holds a member named 'a'"):
        writer.add("a", [b"2"])
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.add("b", [b"3"])


def test_a_large_member_checksummed_while_written_reads_back(tmp_path):
    from proton_ik.runtime.session_writer import OverlappedFile
    from proton_ik.runtime.stored_zip import PARALLEL_FROM

    data = np.random.default_rng(2).integers(0, 256, PARALLEL_FROM + 3 * PIECE_BYTES + 5, dtype=np.uint8)
    file = OverlappedFile(tmp_path / "o.zip")
    writer = StoredZipWriter(file, workers=2)
    writer.add("big.npy", [b"header", memoryview(data)[:100], memoryview(data)[100:]])
    writer.add("after.json", [b"{}"])
    writer.close()
    file.close()
    with zipfile.ZipFile(tmp_path / "o.zip") as archive:
        assert archive.testzip() is None
        assert archive.read("big.npy") == b"header" + data.tobytes()


@pytest.mark.parametrize("together_bytes", [None, 40])
@pytest.mark.parametrize("overlapped", [False, True])
def test_members_written_together_are_the_bytes_written_one_by_one(
    tmp_path, monkeypatch, overlapped, together_bytes
):
    """``add_many`` (a drain batch's members in one call) writes what ``add`` writes member by
    member: small members gathered (into writes of ``TOGETHER_BYTES`` or so), a large one alone
    with its checksum overlapped."""
    from proton_ik.runtime import stored_zip
    from proton_ik.runtime.session_writer import OverlappedFile

    monkeypatch.setattr(stored_zip.time, "time", lambda: 1_700_000_000.0)
    if together_bytes is not None:
        monkeypatch.setattr(stored_zip, "TOGETHER_BYTES", together_bytes)
    rng = np.random.default_rng(7)
    sizes = [0, 5, stored_zip.SMALL_MEMBER - 1, stored_zip.SMALL_MEMBER, 3, stored_zip.PARALLEL_FROM + 11, 9]
    members = [
        (f"launches/{n:06d}.npy", [b"header", memoryview(rng.integers(0, 256, size, dtype=np.uint8))])
        for n, size in enumerate(sizes)
    ]

    def written(path, write):
        file = OverlappedFile(path) if overlapped else open(path, "wb")  # noqa: SIM115
        writer = StoredZipWriter(file, workers=3)
        write(writer)
        places = writer.written()
        writer.close()
        file.close()
        return path.read_bytes(), places

    one_by_one = written(tmp_path / "a.zip", lambda w: [w.add(name, parts) for name, parts in members])
    together = written(tmp_path / "b.zip", lambda w: w.add_many(members))
    assert together == one_by_one
    with zipfile.ZipFile(tmp_path / "b.zip") as archive:
        assert archive.testzip() is None


@pytest.mark.parametrize(("bad", "error"), [(("a", [b"3"]), ValueError), (("c", [5]), TypeError)])
def test_a_member_refused_in_one_call_keeps_the_members_before_it(tmp_path, bad, error):
    """A name twice, or a part that is no buffer: the members before it are written and listed."""
    path = tmp_path / "a.zip"
    with open(path, "wb") as file:
        writer = StoredZipWriter(file)
        with pytest.raises(error):
            writer.add_many([("a", [b"1"]), ("b", [b"2"]), bad])
        writer.close()
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None
        assert [(name, archive.read(name)) for name in archive.namelist()] == [("a", b"1"), ("b", b"2")]
