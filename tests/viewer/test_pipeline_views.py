"""The pipeline's two passes read a raw stored launch once: the clock fit keeps the views it read
whole, and the decoding pass takes them (``Pipeline._kept``); a trimmed launch's headers are read
apart, and its whole view when it is decoded. Either way the tables are the same."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer.session_file import StoredLaunch, read_session
from proton_ik.viewer.tables import Pipeline, pipeline, time_shift_cycles

DATA = Path(__file__).parents[1] / "data"


def _events(path: Path, reads: Counter) -> list[dict[str, np.ndarray]]:
    session = read_session(path)
    built = Pipeline(session.launches, time_shift_cycles(session.info))
    chunks = [chunk.events for chunk in built.chunks()]
    assert not built._kept  # every kept view was taken
    return chunks


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """How often each stored launch is viewed, headers only or whole."""
    counted: Counter = Counter()
    original = StoredLaunch.view

    def view(self, layout, *, headers_only=False):
        counted[(self.entry, headers_only)] += 1
        return original(self, layout, headers_only=headers_only)

    monkeypatch.setattr(StoredLaunch, "view", view)
    return counted


def _same(first: list[dict[str, np.ndarray]], second: list[dict[str, np.ndarray]]) -> None:
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        assert a.keys() == b.keys()
        for name in a:
            assert np.array_equal(a[name], b[name]), name


def test_a_raw_launch_is_read_once_for_both_passes(reads, monkeypatch):
    kept = _events(DATA / "slots.pik", reads)
    assert reads and all(count == 1 and headers_only for (_, headers_only), count in reads.items())
    reads.clear()
    monkeypatch.setattr(pipeline, "KEPT_VIEWS_AT_MOST", 0)  # past the bound: read again to decode
    again = _events(DATA / "slots.pik", reads)
    assert sorted(reads.values()) == [1] * len(reads) and {whole for _, whole in reads} == {True, False}
    _same(kept, again)


def test_a_trimmed_launch_is_read_for_its_headers_then_whole(reads, tmp_path):
    trimmed = tmp_path / "ring_trimmed.pik"
    session = read_session(DATA / "ring.pik")
    with SessionWriter(trimmed, session.info, trim=True) as writer:
        for launch in session.launches:
            writer.add_launch(launch.meta, launch.buffer)
    events = _events(trimmed, reads)
    assert set(reads.values()) == {1} and {whole for _, whole in reads} == {True, False}
    reads.clear()
    _same(events, _events(DATA / "ring.pik", reads))


@pytest.mark.parametrize("why", ["deflated", "not mapped"])
def test_a_launch_read_as_a_copy_is_not_kept(reads, tmp_path, monkeypatch, why):
    """A deflated member is inflated into memory, and a file that cannot be mapped is read
    launch by launch: keeping each launch's view until it is decoded would hold the session."""
    path = tmp_path / "s.pik"
    session = read_session(DATA / "slots.pik")
    with SessionWriter(path, session.info, compress=why == "deflated") as writer:
        for launch in session.launches:
            writer.add_launch(launch.meta, launch.buffer)
    if why == "not mapped":
        from proton_ik.viewer.session_file import reader

        monkeypatch.setattr(reader, "mapped_file", lambda path: None)
    events = _events(path, reads)
    assert set(reads.values()) == {1} and {whole for _, whole in reads} == {True, False}
    reads.clear()
    _same(events, _events(DATA / "slots.pik", reads))
