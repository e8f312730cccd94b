import json
import struct
import zipfile

import numpy as np
import pytest

from proton_ik.contract.session_format import FORMAT_VERSION, MANIFEST
from proton_ik.runtime.session_writer import SessionWriter, write_session
from proton_ik.viewer import SessionFileError, read_session
from proton_ik.viewer.session_file import session_from_portable, session_from_written
from proton_ik.viewer.session_file.zip_members import MemberPlace

INFO = {"name": "matmul", "device": "NVIDIA H100", "sm_count": 132}


def test_launches_round_trip_in_order(tmp_path, busy_launch):
    captures = [busy_launch(launch=0), busy_launch(launch=1, num_ctas=3)]
    path = tmp_path / "s.pik"
    with SessionWriter(path, INFO) as writer:
        for capture in captures:
            writer.add_launch(capture.meta, capture.buffer)

    session = read_session(path)

    assert session.info == INFO
    assert [launch.meta for launch in session] == [capture.meta for capture in captures]
    for launch, capture in zip(session, captures, strict=True):
        assert launch.buffer.dtype == np.uint8
        assert np.array_equal(launch.buffer, capture.buffer)


def test_launches_of_one_kernel_share_its_metadata_and_its_reading(tmp_path, busy_launch):
    """The reader gives equal kernel metadata one dict, and the tables read it once."""
    from proton_ik.viewer.tables.runs import prepare

    captures = [busy_launch(launch=n, num_ctas=1 + n % 2) for n in range(4)]
    session = read_session(write_session(tmp_path / "s.pik", INFO, captures))
    profiles = {id(launch.meta["profile"]) for launch in session}
    assert len(profiles) == 1
    assert [launch.meta for launch in session] == [capture.meta for capture in captures]
    launches = prepare(session.launches)
    by_kernel = {(launch.meta["kernel"], id(launch.kernel)) for launch in launches}
    assert len(by_kernel) == len({launch.meta["kernel"] for launch in launches}) == 2  # kernel0, kernel1


@pytest.mark.parametrize("compress", [False, True])
def test_a_session_handed_to_a_worker_as_json_reads_the_same_launches(tmp_path, busy_launch, compress):
    """The form a session travels in to a worker process (``render.parts``): the same info,
    metadata (one dict a kernel still), places and buffers, the buffers still checked on read."""
    captures = [busy_launch(launch=n, num_ctas=1 + n % 2) for n in range(4)]
    path = tmp_path / "s.pik"
    with SessionWriter(path, INFO, compress=compress) as writer:
        for capture in captures:
            writer.add_launch(capture.meta, capture.buffer)
    session = read_session(path)
    assert session.launches[0].buffer.size  # a map made here does not travel: the worker maps the file itself
    copy = session_from_portable(json.loads(json.dumps(session.portable())))
    assert copy.path == path and copy.info == session.info
    assert [launch.meta for launch in copy] == [launch.meta for launch in session]
    assert [list(launch.meta) for launch in copy] == [list(launch.meta) for launch in session]  # key order
    assert len({id(launch.meta["profile"]) for launch in copy}) == 1
    for ours, theirs in zip(session, copy, strict=True):
        assert (theirs.entry, theirs.member.file_size, theirs.shape) == (
            ours.entry,
            ours.member.file_size,
            ours.shape,
        )
        assert np.array_equal(theirs.buffer, ours.buffer)
    damaged = bytearray(path.read_bytes())
    at = session.launches[1].member.header_offset + 200
    damaged[at] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(SessionFileError, match=r"the buffer of launch 1 \(launches/000001.npy\) is corrupt"):
        _ = session_from_portable(json.loads(json.dumps(session.portable()))).launches[1].buffer


def test_launches_with_different_metadata_keys_travel_to_a_worker_in_their_order(tmp_path, busy_launch):
    """The worker's form keeps metadata as values under key lists: launches named, in host
    scopes, replayed in a graph or tuned, each with its own keys in its own order."""
    extras = [
        {},
        {"name": "step 3", "launch_metrics": {"flops": 2.5}},
        {"host_scope": ["train", "forward"]},
        {"graph": 0, "replay": 4},
        {"config": {"BLOCK": 64, "kwargs": {"BLOCK": 64}}, "name": "tuned"},
    ]
    path = tmp_path / "s.pik"
    with SessionWriter(path, INFO, compress=False) as writer:
        for number, extra in enumerate(extras):
            capture = busy_launch(launch=number)
            writer.add_launch({**extra, **capture.meta}, capture.buffer)
    session = read_session(path)
    copy = session_from_portable(json.loads(json.dumps(session.portable())))
    assert [list(launch.meta.items()) for launch in copy] == [list(launch.meta.items()) for launch in session]
    assert len(session.portable()["meta_keys"]) == len(extras)


def test_a_session_as_its_writer_left_it_reads_as_the_file_does(tmp_path, busy_launch):
    """``finalize`` renders the file it has just written from what its writer kept
    (``session_from_written``): the same info, metadata, places, shapes and buffers as a read
    of the file, its manifest checked alike, the buffers still checked against their CRCs."""
    captures = [busy_launch(launch=n, num_ctas=1 + n % 2) for n in range(4)]
    path = tmp_path / "s.pik"
    with SessionWriter(
        path, {**INFO, "unrecorded": [{"kernel": "k", "reason": "r", "count": 2}]}, compress=False
    ) as writer:
        for capture in captures:
            writer.add_launch(capture.meta, capture.buffer)
        assert writer.written is None  # not before the file is whole
    assert writer.written is not None
    moved = path.rename(tmp_path / "moved.pik")  # as finalize places the file on its final name
    session, known = read_session(moved), session_from_written(moved, writer.written)
    assert known.path == moved and known.info == session.info
    assert [launch.meta for launch in known] == [launch.meta for launch in session]
    assert len({id(launch.meta["profile"]) for launch in known}) == 1
    for ours, theirs in zip(session, known, strict=True):
        assert MemberPlace.of(theirs.member) == MemberPlace.of(ours.member)
        assert theirs.shape == ours.shape
        assert np.array_equal(theirs.buffer, ours.buffer)
    with SessionWriter(tmp_path / "deflated.pik", INFO) as deflated:
        deflated.add_launch(captures[0].meta, captures[0].buffer)
    assert deflated.written is None  # zipfile's members: read back from the file
    damaged = bytearray(moved.read_bytes())
    damaged[session.launches[2].member.header_offset + 200] ^= 0xFF
    moved.write_bytes(bytes(damaged))
    with pytest.raises(SessionFileError, match=r"the buffer of launch 2 \(launches/000002.npy\) is corrupt"):
        _ = session_from_written(moved, writer.written).launches[2].buffer
    bad = writer.written._replace(
        manifest_json=writer.written.manifest_json.replace(b'"launch": 1', b'"launch": -1')
    )
    with pytest.raises(SessionFileError, match="launch"):
        session_from_written(moved, bad)


@pytest.mark.parametrize("compress", [False, True])
def test_a_file_system_that_cannot_map_the_file_is_read_member_by_member(
    tmp_path, busy_launch, monkeypatch, compress
):
    captures = [busy_launch(launch=n) for n in range(3)]
    path = tmp_path / "s.pik"
    with SessionWriter(path, INFO, compress=compress) as writer:
        for capture in captures:
            writer.add_launch(capture.meta, capture.buffer)

    def refuse(*args, **kwargs):
        raise OSError("mmap: no such device")  # as a FUSE mount without mmap says

    monkeypatch.setattr(np, "memmap", refuse)
    for launch, capture in zip(read_session(path), captures, strict=True):
        assert np.array_equal(launch.buffer, capture.buffer)


def test_a_truncated_file_with_no_session_info_says_so(tmp_path, busy_launch):
    path = write_session(tmp_path / "s.pik", INFO, [busy_launch()])
    with zipfile.ZipFile(path) as archive:  # as a session of format 1 was: no session.json
        members = {name: archive.read(name) for name in archive.namelist() if name != "session.json"}
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SessionFileError, match=r"truncated or corrupt.*Capture the session again"):
        read_session(path)


def test_a_truncated_file_gives_its_complete_launches_and_says_where_it_ends(tmp_path, busy_launch):
    captures = [busy_launch(launch=n) for n in range(3)]
    path = write_session(tmp_path / "s.pik", INFO, captures)
    with zipfile.ZipFile(path) as archive:
        second_ends = max(m.header_offset for m in archive.infolist() if m.filename == "launches/000001.json")
    data = path.read_bytes()
    path.write_bytes(data[: second_ends + 55])  # past launch 1's metadata header (50 bytes), in its data
    with pytest.warns(
        UserWarning, match=r"never closed.*recovered 1 complete launch; .* inside 'launches/000001.json'"
    ):
        session = read_session(path)
    assert [launch.meta["launch"] for launch in session] == [0]
    assert np.array_equal(session.launches[0].buffer, captures[0].buffer)
    assert "recovered 1 complete launch" in session.info["recovered"]


def test_a_file_that_was_never_closed_says_so(tmp_path):
    path = tmp_path / "s.pik"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("launches/000000.npy", b"")
    with pytest.raises(SessionFileError, match="never closed"):
        read_session(path)


def rewrite_manifest(path, change):
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    manifest = json.loads(entries[MANIFEST])
    change(manifest)
    entries[MANIFEST] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)


def test_another_format_version_names_both_versions(tmp_path, busy_launch):
    path = write_session(tmp_path / "s.pik", INFO, [busy_launch()])
    rewrite_manifest(path, lambda manifest: manifest.update(format_version=FORMAT_VERSION + 1))
    with pytest.raises(
        SessionFileError, match=f"version {FORMAT_VERSION + 1}.*reads versions 1, 2 and {FORMAT_VERSION}"
    ):
        read_session(path)


def test_a_missing_buffer_entry_is_named(tmp_path, busy_launch):
    path = write_session(tmp_path / "s.pik", INFO, [busy_launch()])
    rewrite_manifest(path, lambda manifest: manifest["launches"][0].update(entry="launches/999999.npy"))
    with pytest.raises(SessionFileError, match=r"launches/999999\.npy.*which the file does not hold"):
        read_session(path)


def test_a_buffer_of_the_wrong_kind_is_rejected_on_read(tmp_path, busy_launch):
    capture = busy_launch()
    path = tmp_path / "s.pik"
    with zipfile.ZipFile(path, "w") as archive:
        with archive.open("launches/000000.npy", "w") as file:
            np.save(file, np.zeros(capture.buffer.size // 4, dtype=np.float32))
        manifest = {"format": "proton_ik-session", "format_version": FORMAT_VERSION, "info": {}}
        manifest["launches"] = [{"entry": "launches/000000.npy", "meta": capture.meta}]
        archive.writestr(MANIFEST, json.dumps(manifest))
    (launch,) = read_session(path).launches
    with pytest.raises(SessionFileError, match="not the 1-D uint8 buffer"):
        _ = launch.buffer


def test_the_writer_refuses_what_it_could_not_read_back(tmp_path, busy_launch):
    capture = busy_launch()
    writer = SessionWriter(tmp_path / "s.pik", INFO)
    with pytest.raises(ValueError, match="lacks \\['profile'\\]"):
        writer.add_launch({"launch": 0, "kernel": "k"}, capture.buffer)
    with pytest.raises(ValueError, match="JSON-serialisable"):
        writer.add_launch({**capture.meta, "stream": object()}, capture.buffer)
    with pytest.raises(ValueError, match="must be uint8"):
        writer.add_launch(capture.meta, capture.buffer.view(np.int8))
    writer.close()
    with pytest.raises(ValueError, match="already closed"):
        writer.add_launch(capture.meta, capture.buffer)
    assert read_session(tmp_path / "s.pik").launches == []


@pytest.mark.parametrize("compress", [True, False])
def test_buffers_read_back_stored_or_deflated(tmp_path, busy_launch, compress):
    captures = [busy_launch(launch=i) for i in range(3)]
    with SessionWriter(tmp_path / "s.pik", INFO, compress=compress) as writer:
        for capture in captures:
            writer.add_launch(capture.meta, capture.buffer)
    for launch, capture in zip(read_session(tmp_path / "s.pik"), captures, strict=True):
        assert np.array_equal(launch.buffer, capture.buffer)


@pytest.mark.parametrize("compress", [True, False])
def test_a_damaged_buffer_is_named(tmp_path, busy_launch, compress):
    path = tmp_path / "s.pik"
    with SessionWriter(path, INFO, compress=compress) as writer:
        writer.add_launch(busy_launch().meta, busy_launch().buffer)
    with zipfile.ZipFile(path) as archive:
        member = archive.getinfo("launches/000000.npy")
    raw = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack_from("<HH", raw, member.header_offset + 26)
    middle = member.header_offset + 30 + name_length + extra_length + member.compress_size // 2
    raw[middle] ^= 0x5A
    path.write_bytes(bytes(raw))
    (launch,) = read_session(path).launches
    with pytest.raises(SessionFileError, match=r"launch 0 \(launches/000000\.npy\) is corrupt"):
        _ = launch.buffer


def manifest_problem(tmp_path, busy_launch, change):
    path = write_session(tmp_path / "s.pik", INFO, [busy_launch()])
    rewrite_manifest(path, change)
    with pytest.raises(SessionFileError) as raised:
        read_session(path)
    return str(raised.value)


def set_in(path, value):
    """A change to the manifest: the field at ``path`` set to ``value``."""

    def change(manifest):
        table = manifest
        for key in path[:-1]:
            table = table[key]
        table[path[-1]] = value

    return change


@pytest.mark.parametrize(
    "path, value, fragment",
    [
        (("profiles", 0, "scopes", 0, "id"), 99_999_999, "'id' is 99999999"),
        (("info", "time_shift_cycles"), 10**30, "time_shift_cycles: 'single' is"),
        (("launches", 0, "meta", "launch"), "0", "'launch' is '0' (a str)"),
        (("profiles", 0, "layout", "capacity"), 3, "power of two"),
        (("profiles", 0, "layout", "cta_bytes"), 12, "cta_bytes is 12"),
        (("profiles", 0, "scopes"), {"id": 0}, "profile.scopes is a dict"),
        (("launches", 0, "meta", "profile"), None, "profile is None (a NoneType), not a JSON object"),
        (("launches", 0, "meta", "grid"), [4, "x"], "grid is [4, 'x']"),
        (("launches", 0, "meta", "num_ctas"), 10**6, "where its metadata declares"),
        (("launches", 0, "meta", "kernel"), "a\x1bb", "not printable text"),
        (("info", "unrecorded"), [{"kernel": "k"}], "info.unrecorded[0]: 'reason'"),
    ],
)
def test_the_manifest_schema_names_the_field_that_is_wrong(tmp_path, busy_launch, path, value, fragment):
    message = manifest_problem(tmp_path, busy_launch, set_in(path, value))
    assert fragment in message
    assert "capture the session again" in message


def test_a_format_version_of_the_wrong_type_says_so(tmp_path, busy_launch):
    message = manifest_problem(tmp_path, busy_launch, set_in(("format_version",), "1"))
    assert "version '1' (a str); this proton_ik reads versions 1, 2 and 3" in message


def test_launches_that_share_one_buffer_are_refused_before_any_is_read(tmp_path, busy_launch):
    def repeat(manifest):
        manifest["launches"] = manifest["launches"] * 100_000

    message = manifest_problem(tmp_path, busy_launch, repeat)
    assert "launch #1 names the buffer launches/000000.npy, which an earlier launch names too" in message


def test_a_huge_manifest_is_refused_by_its_declared_size(tmp_path, busy_launch):
    path = write_session(tmp_path / "s.pik", INFO, [busy_launch()])
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    entries[MANIFEST] = entries[MANIFEST] + b" " * (64 << 20)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    assert path.stat().st_size < 1 << 20
    with pytest.raises(SessionFileError, match=r"manifest\.json is 67,\d{3},\d{3} bytes, more than"):
        read_session(path)


def test_a_member_that_inflates_past_its_declared_size_is_refused(tmp_path, busy_launch):
    path = tmp_path / "s.pik"
    with SessionWriter(path, INFO, compress=True) as writer:
        writer.add_launch(busy_launch().meta, busy_launch().buffer)
    raw = bytearray(path.read_bytes())
    name = MANIFEST.encode()
    # The central directory's record of the manifest (where zipfile reads sizes): one byte less.
    central = next(
        i for i in range(len(raw)) if raw.startswith(b"PK\x01\x02", i) and raw[i + 46 :].startswith(name)
    )
    struct.pack_into("<I", raw, central + 24, struct.unpack_from("<I", raw, central + 24)[0] - 1)
    path.write_bytes(bytes(raw))
    with pytest.raises(SessionFileError, match="inflates to more than its declared"):
        read_session(path)


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_a_member_compressed_another_way_is_refused_up_front(tmp_path, busy_launch, method):
    path = write_session(tmp_path / "s.pik", INFO, [busy_launch()])
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    with pytest.raises(SessionFileError, match=f"compressed with method {method}"):
        read_session(path)


@pytest.mark.parametrize("depth", [3, 900])
def test_a_hostile_value_is_shown_bounded_in_the_message(tmp_path, busy_launch, depth):
    """Found by the fuzzer: a format_version of deeply nested lists made a 10 kB message."""
    path = write_session(tmp_path / "s.pik", {"name": "s"}, [busy_launch()])
    nested = "[" * depth + "]" * depth
    rewrite_manifest(path, lambda m: m.update(format_version="@@") or m)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members[MANIFEST] = members[MANIFEST].replace(b'"@@"', nested.encode())
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(SessionFileError, match="session format version") as refused:
        read_session(path)
    assert len(str(refused.value)) < 600


@pytest.mark.parametrize("compress", [True, False])  # zipfile's deflate, or the runtime's stored_zip
def test_a_file_cut_at_every_sixteenth_gives_every_launch_whole_before_the_cut(
    tmp_path, busy_launch, compress
):
    import warnings

    captures = [busy_launch(launch=n) for n in range(5)]
    whole = tmp_path / "whole.pik"
    with SessionWriter(whole, INFO, compress=compress) as writer:
        for capture in captures:
            writer.add_launch(capture.meta, capture.buffer)
    with zipfile.ZipFile(whole) as archive:
        members = archive.infolist()
    data = whole.read_bytes()
    ends = {}
    for m in members:  # where each member's data ends, from its local header's own lengths
        name_length, extra_length = struct.unpack_from("<HH", data, m.header_offset + 26)
        ends[m.filename] = m.header_offset + 30 + name_length + extra_length + m.compress_size
    for sixteenth in range(1, 16):
        cut = len(data) * sixteenth // 16
        path = tmp_path / f"cut{sixteenth}.pik"
        path.write_bytes(data[:cut])
        expected = [n for n in range(5) if ends[f"launches/{n:06d}.json"] <= cut]
        if ends["session.json"] > cut:
            with pytest.raises(SessionFileError, match="no session info"):
                read_session(path)
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            session = read_session(path)
        assert [launch.meta["launch"] for launch in session] == expected
        assert all(
            np.array_equal(launch.buffer, captures[n].buffer)
            for n, launch in zip(expected, session, strict=True)
        )
        assert len(caught) == 1 and "end at byte" in str(caught[0].message)


def test_the_manifest_lists_each_kernels_metadata_once(tmp_path, busy_launch):
    """Format 3: ``profiles`` holds each distinct kernel metadata once (equal dicts that are not one
    object too), each launch names its index; its own metadata member still carries it whole."""
    captures = [busy_launch(launch=n, num_ctas=1 + n % 2) for n in range(4)]
    copied = busy_launch(launch=4)
    copied.meta["profile"] = json.loads(json.dumps(captures[0].meta["profile"]))  # equal, not the same
    path = write_session(tmp_path / "s.pik", INFO, [*captures, copied])
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read(MANIFEST))
        whole = json.loads(archive.read("launches/000004.json"))
    assert manifest["format_version"] == FORMAT_VERSION == 3
    assert manifest["profiles"] == [captures[0].meta["profile"]]
    assert [item["meta"]["profile"] for item in manifest["launches"]] == [0] * 5
    assert whole["profile"] == captures[0].meta["profile"]
    session = read_session(path)
    assert len({id(launch.meta["profile"]) for launch in session}) == 1
    assert [launch.meta for launch in session] == [capture.meta for capture in [*captures, copied]]


@pytest.mark.parametrize(
    "change, fragment",
    [
        (
            set_in(("launches", 0, "meta", "profile"), 7),
            "launch #0 (launches/000000.npy): its profile is #7, but the manifest lists 1",
        ),
        (set_in(("launches", 0, "meta", "profile"), -1), "its profile is #-1"),
        (set_in(("launches", 0, "meta", "profile"), True), "profile is True (a bool), not a JSON object"),
        (set_in(("profiles",), {"0": {}}), "'profiles' is a dict, not a list"),
    ],
)
def test_a_launch_that_names_no_listed_kernel_metadata_is_refused(tmp_path, busy_launch, change, fragment):
    message = manifest_problem(tmp_path, busy_launch, change)
    assert fragment in message


def test_a_version_3_manifest_may_give_a_launchs_kernel_metadata_whole(tmp_path, busy_launch):
    """As a file recovered after its process was killed gives it (from each launch's member)."""
    capture = busy_launch()
    path = write_session(tmp_path / "s.pik", INFO, [capture])
    rewrite_manifest(path, set_in(("launches", 0, "meta", "profile"), capture.meta["profile"]))
    (launch,) = read_session(path).launches
    assert launch.meta == capture.meta


def test_a_version_2_manifest_reads_as_before(tmp_path, busy_launch):
    captures = [busy_launch(launch=n) for n in range(3)]
    path = write_session(tmp_path / "s.pik", INFO, captures)

    def as_version_2(manifest):
        for item in manifest["launches"]:
            item["meta"]["profile"] = manifest["profiles"][item["meta"]["profile"]]
        del manifest["profiles"]
        manifest["format_version"] = 2

    rewrite_manifest(path, as_version_2)
    session = read_session(path)
    assert [launch.meta for launch in session] == [capture.meta for capture in captures]
    assert len({id(launch.meta["profile"]) for launch in session}) == 1
