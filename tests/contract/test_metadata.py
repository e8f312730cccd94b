"""The kernel metadata: what the lowering writes reads back the same, old sessions still read,
and every field that is wrong is named."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from proton_ik.contract.fields import SchemaError
from proton_ik.contract.layout import CTA_ALIGN, READ_VERSIONS, BufferLayout
from proton_ik.contract.metadata import (
    METADATA_KEY,
    SCRATCH_ALIGN_KEY,
    SCRATCH_SIZE_KEY,
    Capacity,
    KernelMetadata,
    Scope,
    read_compile_metadata,
    write_compile_metadata,
)

DATA = Path(__file__).parents[1] / "data"
KERNEL = KernelMetadata(
    layout=BufferLayout(units=4, capacity=16),
    scopes=(Scope(0, "load", 12), Scope(1, "store", None)),
    warps_per_unit=1,
    num_warps=4,
    mode="instrumentation:granularity=warp:capacity=auto:pairs=on",
    capacity=Capacity(16, "bound", 10, "the kernel writes at most 10 entries"),
)


def test_a_kernel_round_trips_through_the_compile_metadata():
    metadata: dict = {"name": "k"}
    write_compile_metadata(metadata, KERNEL)
    assert metadata[SCRATCH_SIZE_KEY] == KERNEL.layout.cta_bytes
    assert metadata[SCRATCH_ALIGN_KEY] == CTA_ALIGN
    assert list(metadata[METADATA_KEY]) == [
        "mode",
        "num_warps",
        "warps_per_unit",
        "layout",
        "capacity",
        "scopes",
    ]
    assert read_compile_metadata(json.loads(json.dumps(metadata)), "kernel k") == KERNEL
    assert KERNEL.sized_from_bound


@pytest.mark.parametrize("version", READ_VERSIONS)
def test_each_layout_version_read_keeps_its_version_and_slot_size(version):
    kernel = KernelMetadata(layout=BufferLayout(units=4, capacity=16, version=version))
    read = KernelMetadata.from_dict(json.loads(json.dumps(kernel.to_dict())), "kernel k")
    assert read == kernel and read.layout.to_dict()["version"] == version
    assert read.layout.unit_bytes == 48 + 16 * read.layout.slot_bytes


def test_a_kernel_without_our_metadata_is_not_ours():
    assert read_compile_metadata({"name": "plain"}, "kernel plain") is None


def test_sessions_from_before_the_capacity_was_recorded_still_read():
    with zipfile.ZipFile(DATA / "add.pik") as archive:
        manifest = json.loads(archive.read("manifest.json"))
    profile = manifest["launches"][0]["meta"]["profile"]
    assert "capacity" not in profile
    kernel = KernelMetadata.from_dict(profile, "launch 0", "profile")
    assert kernel.capacity is None and not kernel.sized_from_bound
    assert kernel.layout.version == 2 and kernel.layout.slot_bytes == 16  # before 8-byte slots
    assert [scope.name for scope in kernel.scopes] == ["load", "compute", "store"]
    assert kernel.to_dict() == profile


def test_a_scopes_file_is_written_only_where_known_and_reads_back():
    kernel = KernelMetadata(
        layout=BufferLayout(units=1, capacity=4),
        scopes=(Scope(0, "load", 12, file="matmul.py"), Scope(1, "store", 20)),
    )
    scopes = kernel.to_dict()["scopes"]
    assert scopes == [
        {"id": 0, "name": "load", "line": 12, "file": "matmul.py"},
        {"id": 1, "name": "store", "line": 20},
    ]
    read = KernelMetadata.from_dict(json.loads(json.dumps(kernel.to_dict())), "kernel k")
    assert [scope.file for scope in read.scopes] == ["matmul.py", None]
    assert read == kernel


def bad(change) -> dict:
    data = json.loads(json.dumps(KERNEL.to_dict()))
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("layout"), "kernel k: proton_ik.layout is None (a NoneType), not a JSON object"),
        (lambda d: d["layout"].update(version=1), "kernel k: buffer layout version 1 is not one this proton_ik reads"),
        (lambda d: d["layout"].update(cta_bytes=7), "proton_ik.layout.cta_bytes is 7, but 4 units of 16"),
        (lambda d: d.update(warps_per_unit=0), "proton_ik: 'warps_per_unit' is 0 (a int), not a whole number"),
        (lambda d: d["capacity"].update(source="guess"), "proton_ik.capacity: 'source' is 'guess' (a str)"),
        (lambda d: d["capacity"].update(bound=[1]), "not a table of plain values"),
        (lambda d: d["scopes"].append({"id": 0, "name": "again"}), "proton_ik.scopes[2]: scope id 0 is listed twice"),
        (lambda d: d["scopes"][1].update(name=5), "proton_ik.scopes[1]: 'name' is 5 (a int), not text"),
        (lambda d: d["scopes"][0].update(line=-1), "proton_ik.scopes[0]: 'line' is -1"),
        (lambda d: d["scopes"][0].update(file=5), "proton_ik.scopes[0]: 'file' is 5 (a int), not printable text"),
    ],
)  # fmt: skip
def test_a_wrong_field_is_named(change, message):
    with pytest.raises(SchemaError) as raised:
        KernelMetadata.from_dict(bad(change), "kernel k")
    assert message in str(raised.value)


def test_scope_names_from_a_file_are_held_to_the_scope_name_rule():
    """In memory any text names a scope; from a file, only what the language accepts."""
    data = bad(lambda d: d["scopes"][0].update(name="a$b"))
    assert KernelMetadata.from_dict(data, "kernel k").scopes[0].name == "a$b"
    with pytest.raises(SchemaError, match=r"proton_ik.scopes\[0\]: scope name 'a\$b' has characters"):
        KernelMetadata.from_dict(data, "kernel k", check_names=True)
