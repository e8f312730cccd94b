"""The drain's writer takes copied launches a batch at a time (``write_batches.next_batch``) and
writes each batch with one flush of the session file (``SessionWriter.add_launches``)."""

from __future__ import annotations

import json
import queue
import zipfile
from pathlib import Path

import numpy as np
import pytest

from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.runtime.write_batches import next_batch
from proton_ik.viewer.session_file import read_session

ADD = Path(__file__).parents[1] / "data" / "add.pik"


def _queue(*items):
    waiting: queue.SimpleQueue = queue.SimpleQueue()
    for item in items:
        waiting.put(item)
    return waiting


def test_a_batch_takes_what_is_already_queued_and_stops_at_its_bounds():
    waiting = _queue(*range(10))
    assert next_batch(waiting, lambda item: 1, launches=4) == ([0, 1, 2, 3], False)
    # 4 + 5 bytes reach the 9-byte bound: 6 waits for the next batch
    assert next_batch(waiting, lambda item: item, limit_bytes=9) == ([4, 5], False)
    assert next_batch(waiting, lambda item: 1) == ([6, 7, 8, 9], False)
    waiting.put(10)
    assert next_batch(waiting, lambda item: 1) == ([10], False)  # one waiting: a batch of one


def test_the_end_of_the_queue_ends_the_batch_after_its_launches():
    assert next_batch(_queue(1, 2, None, 3), lambda item: 1) == ([1, 2], True)
    assert next_batch(_queue(None), lambda item: 1) == ([], True)


def _launches():
    return [(launch.meta, launch.buffer, launch.trimmed) for launch in read_session(ADD)]


def test_a_batch_is_written_whole_with_one_flush(tmp_path, monkeypatch):
    launches = _launches() * 3
    launches = [
        ({**meta, "launch": number}, buffer, trimmed)
        for number, (meta, buffer, trimmed) in enumerate(launches)
    ]
    flushes = []
    monkeypatch.setattr(SessionWriter, "_flush", lambda self: flushes.append(self._file.flush()))
    with SessionWriter(tmp_path / "s.pik", {"name": "s"}, compress=False) as writer:
        flushes.clear()  # the session info's own
        writer.add_launches(launches)
        assert len(flushes) == 1
    stored = list(read_session(tmp_path / "s.pik"))
    assert [launch.meta["launch"] for launch in stored] == [0, 1, 2]
    for launch, (_, buffer, _) in zip(stored, launches, strict=True):
        assert np.array_equal(launch.buffer, buffer)


def test_a_launch_refused_in_a_batch_still_flushes_those_before_it(tmp_path, monkeypatch):
    ((meta, buffer, trimmed),) = _launches()
    bad = ({**meta, "launch": 1, "extra": object()}, buffer, trimmed)  # not JSON
    flushes = []
    monkeypatch.setattr(SessionWriter, "_flush", lambda self: flushes.append(self._file.flush()))
    writer = SessionWriter(tmp_path / "s.pik", {"name": "s"}, compress=False)
    flushes.clear()
    with pytest.raises(ValueError, match="launch 1"):
        writer.add_launches([(meta, buffer, trimmed), bad])
    assert len(flushes) == 1  # the buffers may be reused once add_launches returns or raises
    writer.close()
    with zipfile.ZipFile(tmp_path / "s.pik") as archive:
        assert archive.testzip() is None
    assert [launch.meta["launch"] for launch in read_session(tmp_path / "s.pik")] == [0]


def test_each_launchs_metadata_member_reads_back_as_its_metadata(tmp_path):
    """The writer encodes a kernel's metadata once per dict and splices it into each launch's
    JSON member: every member still parses to that launch's metadata, for launches sharing one
    dict, an equal dict of their own, or another kernel's; what is not plain data is refused."""
    (meta, buffer, _), *_ = _launches()
    profile = meta["profile"]
    other = {**profile, "num_warps": 8}
    metas = [
        {**meta, "launch": 0},
        {**meta, "launch": 1, "name": "named", "launch_metrics": {"flops": 2.5}},
        {**meta, "launch": 2, "profile": dict(profile)},
        {**meta, "launch": 3, "profile": other},
        {**meta, "launch": 4},
    ]
    path = tmp_path / "s.pik"
    with SessionWriter(path, {"name": "s"}, compress=False) as writer:
        for each in metas:
            writer.add_launch(each, buffer)
        with pytest.raises(ValueError, match="metadata of launch 5 must be JSON-serialisable"):
            writer.add_launch({**meta, "launch": 5, "profile": {**profile, "bad": object()}}, buffer)
    with zipfile.ZipFile(path) as archive:
        members = sorted(
            name for name in archive.namelist() if name.startswith("launches/") and name.endswith(".json")
        )
        assert [json.loads(archive.read(name)) for name in members] == metas
    assert [launch.meta["profile"]["num_warps"] for launch in read_session(path)] == [
        profile["num_warps"]] * 3 + [8, profile["num_warps"]]  # fmt: skip
