"""The session file format: the writer stores what the format names, and a session file is told
apart from traces by its content."""

from __future__ import annotations

import json
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest

from proton_ik.contract.layout import BufferLayout, ring_capacity
from proton_ik.contract.metadata import METADATA_KEY, KernelMetadata
from proton_ik.contract.session_format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    REQUIRED_META,
    SESSION_INFO,
    check_required_meta,
    is_session_file,
    launch_member,
    launch_meta_member,
)
from proton_ik.runtime.session_writer import write_session


def launch(number: int) -> SimpleNamespace:
    kernel = KernelMetadata(BufferLayout(units=1, capacity=ring_capacity(1)))
    buffer = np.zeros(kernel.layout.cta_bytes, dtype=np.uint8)
    return SimpleNamespace(meta={"launch": number, "kernel": "k", "profile": kernel.to_dict()}, buffer=buffer)


def test_the_writer_stores_the_members_and_manifest_the_format_names(tmp_path):
    path = write_session(tmp_path / "s.pik", {"name": "s"}, [launch(0), launch(1)])
    with zipfile.ZipFile(path) as archive:
        assert archive.namelist() == [
            SESSION_INFO,
            launch_member(0),
            launch_meta_member(launch_member(0)),
            launch_member(1),
            launch_meta_member(launch_member(1)),
            MANIFEST,
        ]
        assert json.loads(archive.read(SESSION_INFO)) == {"name": "s"}
        assert json.loads(archive.read(launch_meta_member(launch_member(1))))["launch"] == 1
        manifest = json.loads(archive.read(MANIFEST))
    assert (manifest["format"], manifest["format_version"]) == (FORMAT_NAME, FORMAT_VERSION)
    assert [item["entry"] for item in manifest["launches"]] == ["launches/000000.npy", "launches/000001.npy"]
    assert is_session_file(path)


def test_traces_and_missing_paths_are_not_session_files(tmp_path):
    (tmp_path / "t.json").write_text('{"traceEvents": []}')
    assert not is_session_file(tmp_path / "t.json")
    assert not is_session_file(tmp_path / "missing.pik")
    assert not is_session_file(tmp_path)


def test_a_launch_must_name_itself_its_kernel_and_its_profile():
    assert REQUIRED_META == ("launch", "kernel", "profile")
    with pytest.raises(
        ValueError, match=rf"lacks \['kernel', 'profile'\].*the kernel's '{METADATA_KEY}' metadata"
    ):
        check_required_meta({"launch": 0})
