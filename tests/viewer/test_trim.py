"""Trimmed storage: only headers and kept ring slots are stored, and the decode is unchanged."""

import zipfile
from pathlib import Path

import numpy as np
import pytest

from proton_ik import viewer
from proton_ik.contract.layout import ENTRY_BYTES, READ_VERSIONS, BufferLayout
from proton_ik.contract.trimmed import inflate, trim
from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer.decode import decode_buffer

DATA = Path(__file__).parents[1] / "data"
# Layout version 2 (16-byte entries) and, in slots.pik, version 3 (8-byte slots).
CAPTURES = [DATA / "add.pik", DATA / "ring.pik", DATA / "spin.pik", DATA / "slots.pik"]


def _same_decode(a: np.ndarray, b: np.ndarray, layout: BufferLayout) -> None:
    first, second = decode_buffer(a, layout), decode_buffer(b, layout)
    for name in ("unit_row", "index", "tag", "clock", "paired"):
        assert np.array_equal(getattr(first.records, name), getattr(second.records, name)), name
    for name in ("entries", "count", "kept", "overwritten", "start_clock", "end_clock", "finished"):
        assert np.array_equal(getattr(first.units, name), getattr(second.units, name)), name
    assert first.problems == second.problems


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
def test_real_buffers_trim_and_inflate_to_the_same_decode(path):
    for launch in viewer.read_session(path).launches:
        layout = BufferLayout.from_dict(launch.meta["profile"]["layout"])
        raw = launch.buffer
        stored = trim(raw, layout)
        assert stored.size <= raw.size
        num_ctas = raw.size // layout.cta_bytes
        _same_decode(raw, inflate(stored, layout, num_ctas), layout)


@pytest.mark.parametrize("version", READ_VERSIONS)
def test_a_ring_that_wrapped_keeps_every_slot_and_an_empty_one_none(fake_launch, version):
    fake = fake_launch(units=2, capacity=4, version=version)
    fake.cta(0, smid=1)
    wrapped = fake.unit(0, 0, start_clock=0, start_time=0)
    for i in range(7):
        wrapped.pair(0, 10 * i, 10 * i + 5)  # one slot (v3) or entry (v2) each
    wrapped.finish(100, 100)
    fake.unit(0, 1, start_clock=0, start_time=0).finish(100, 100)

    stored = trim(fake.buffer, fake.layout)

    assert stored.size == 64 + 2 * 48 + 4 * fake.layout.slot_bytes
    _same_decode(fake.buffer, inflate(stored, fake.layout, 1), fake.layout)


@pytest.mark.parametrize("version", READ_VERSIONS)
def test_a_trimmed_buffer_that_does_not_match_its_headers_is_refused(fake_launch, version):
    fake = fake_launch(units=1, capacity=4, version=version)
    fake.cta(0, smid=0)
    unit = fake.unit(0, 0, start_clock=0, start_time=0)
    unit.pair(0, 1, 2)
    unit.finish(10, 10)
    stored = trim(fake.buffer, fake.layout)
    with pytest.raises(ValueError, match="does not match the slot counts"):
        inflate(stored[:-1], fake.layout, 1)


@pytest.mark.parametrize("name", ["add", "ring"])
def test_the_session_writer_trims_and_the_reader_inflates(tmp_path, name):
    source = viewer.read_session(DATA / f"{name}.pik")
    path = tmp_path / "trimmed.pik"
    with SessionWriter(path, source.info, compress=False, trim=True) as writer:
        for launch in source.launches:
            writer.add_launch(dict(launch.meta), launch.buffer)
    raw_bytes = sum(launch.buffer.size for launch in source.launches)
    with zipfile.ZipFile(path) as archive:
        stored_bytes = sum(m.file_size for m in archive.infolist() if m.filename.endswith(".npy"))
    npy_header = 128
    if name == "add":  # 16 CTAs of 4 warps, 3 pair entries each, in rings of 8: 5 slots unstored
        assert stored_bytes - npy_header == 16 * (64 + 4 * 48 + 4 * 3 * ENTRY_BYTES)
        assert stored_bytes < raw_bytes
    else:  # full rings: everything is kept
        assert stored_bytes - npy_header == raw_bytes
    again = viewer.load(path)
    original = viewer.load(DATA / f"{name}.pik")
    columns = ["cta", "warp", "scope", "begin_cycles", "end_cycles", "depth"]
    assert again.events[columns].to_numpy().tolist() == original.events[columns].to_numpy().tolist()
    assert again.launches["overwritten"].tolist() == original.launches["overwritten"].tolist()
