"""Malformed inputs for every reader, built by structural mutations of real files: the session
manifest's fields, the zip's headers, the launch arrays' .npy headers, a .pftrace's packets and a
Chrome trace's JSON. ``run`` runs ``proton-ik show``, ``convert`` or ``diff`` on one, which may
only succeed or say in one line what is wrong. The CI tests (test_readers.py) and the full run
(tests/fuzz_run.py) share this."""

from __future__ import annotations

import contextlib
import io
import json
import random
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from proton_ik import viewer
from proton_ik.contract.layout import (
    CTA_HEADER_DTYPE,
    MAGIC,
    SLOT_DTYPE,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    BufferLayout,
)
from proton_ik.contract.tags import (
    COMPACT_DURATION_LIMIT,
    RecordKind,
    ValueType,
    compact_tag,
    make_tag,
    payload_tag,
)
from proton_ik.runtime.session_writer import write_session
from proton_ik.viewer.perfetto import write_perfetto

DATA = Path(__file__).parents[1] / "data"
ODD_VALUES = [
    None, "", "1", "abc", "\x1b[31m", -1, 0, 1, 3, 2**31, 99_999_999, 10**30, 2**64, 1.5, float("inf"),
    True, [], [1, 2], {}, {"id": 1}, "x" * 5000,
]  # fmt: skip


DEEP = "<deep>"  # replaced by JSON nested deeper than any parser's recursion


def _dumps(value: object) -> bytes:
    return json.dumps(value).replace(json.dumps(DEEP), "[" * 5000 + "]" * 5000).encode()


COMMANDS = ("show", "convert", "diff")


def run(command: str, path: Path, scratch: Path) -> tuple[int, str]:
    """``proton-ik COMMAND`` on ``path`` as a user runs it (convert: into ``scratch``; diff:
    against a real session): its exit code and what it printed on stderr. It may only succeed or
    print one line that names the file, after its warnings' lines (a cut-short file recovered,
    say); an exception out of it is a traceback."""
    from proton_ik.cli import main

    argv = {
        "show": ["show", str(path)],
        "convert": ["convert", str(path), "--to", "perfetto", "-o", str(scratch / "out.pftrace"), "--force"],
        "diff": ["diff", str(DATA / "add.pik"), str(path), "--resamples", "200"],
    }[command]
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, errors.getvalue()


def layout_3_capture() -> viewer.LaunchCapture:
    """A launch in layout version 3, written as its kernel would (no real capture exists yet):
    2 CTAs of 2 units, rings of 4 slots, with a one-slot pair, a long pair (two slots), a value
    mark and its payload, and a ring that wrapped."""
    layout = BufferLayout(units=2, capacity=4, version=3)
    buffer = np.zeros(2 * layout.cta_bytes, np.uint8)
    for cta in range(2):
        header = np.ndarray((), CTA_HEADER_DTYPE, buffer, cta * layout.cta_bytes)
        for name, value in {"magic": MAGIC, "version": 3, "cta": cta, "smid": cta, "nctaid_x": 2,
                            "nctaid_y": 1, "nctaid_z": 1, "units": 2, "capacity": 4,
                            "cluster": cta, "cluster_ctas": 1}.items():  # fmt: skip
            header[name] = value
        for unit in range(2):
            start = 1000 * (cta + 1) + 100 * unit
            slots = [
                (compact_tag(0) | 40, start + 10),
                (make_tag(1, False, paired=True), start + 60),
                (make_tag(1, True), start + 60 + COMPACT_DURATION_LIMIT),
                (make_tag(2, False, RecordKind.VALUE), start + COMPACT_DURATION_LIMIT + 80),
                (payload_tag(ValueType.INT32), 7 + unit),
            ][: 5 - unit]  # unit 0 wraps its ring of 4, unit 1 fills it
            offset = layout.unit_offset(unit) + cta * layout.cta_bytes
            ring = np.ndarray((layout.capacity,), SLOT_DTYPE, buffer, offset + UNIT_HEADER_BYTES)
            for count, (tag, clock) in enumerate(slots):
                ring[count % layout.capacity] = (tag, clock)
            records = 2 + 2 + (1 if len(slots) == 5 else 0)
            head = np.ndarray((), UNIT_HEADER_DTYPE, buffer, offset)
            head["start_clock"], head["end_clock"] = start, start + COMPACT_DURATION_LIMIT + 100
            head["start_time"], head["end_time"] = 10**9 + start, 10**9 + start + 200_000
            head["entries"], head["tally"], head["end_magic"] = len(slots), 2 * len(slots) - records, MAGIC
    profile = {
        "mode": "instrumentation:granularity=warp:capacity=4:pairs=on:layout=3",
        "num_warps": 2,
        "warps_per_unit": 1,
        "layout": layout.to_dict(),
        "scopes": [
            {"id": 0, "name": "short", "line": 10},
            {"id": 1, "name": "long", "line": 11},
            {"id": 2, "name": "value", "line": 12, "kind": "mark"},
        ],
    }
    meta = {"launch": 0, "kernel": "k", "stream": 0, "grid": [2, 1, 1], "num_warps": 2, "profile": profile}
    return viewer.LaunchCapture(meta, buffer)


def seeds(tmp: Path) -> dict[str, bytes]:
    """Real files of each format: the captures, stored and deflated, and their traces; and a
    layout 3 session from ``layout_3_capture``."""
    out = {
        "layout3.pik": write_session(tmp / "layout3.pik", {"name": "v3"}, [layout_3_capture()]).read_bytes()
    }
    for name in ("add", "ring", "spin"):
        out[f"{name}.pik"] = (DATA / f"{name}.pik").read_bytes()
        session = viewer.read_session(DATA / f"{name}.pik")
        captures = [viewer.LaunchCapture(s.meta, s.buffer) for s in session]
        deflated = write_session(tmp / f"{name}-z.pik", session.info, captures)
        out[f"{name}-z.pik"] = deflated.read_bytes()
    trace = viewer.load(DATA / "add.pik")
    out["add.pftrace"] = trace.write_perfetto(tmp / "add.pftrace").read_bytes()
    plain = write_perfetto(tmp / "plain.pftrace", trace.events, trace.units, trace.launches, compress=False)
    out["add-plain.pftrace"] = plain.read_bytes()
    out["add.json"] = trace.write_chrome(tmp / "add.json").read_bytes()
    return out


def _zip_entries(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _rezip(entries: dict[str, bytes], deflate: bool) -> bytes:
    out = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(out, "w", compression=method) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return out.getvalue()


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    """Every path into a JSON value."""
    paths = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            paths += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:8]):
            paths += _paths(item, (*prefix, index))
    return paths


def mutate_json(value: object, rng: random.Random) -> object:
    """One structural change at a random place: a field dropped, retyped, set out of range,
    duplicated, or nested deeply."""
    value = json.loads(json.dumps(value))  # a copy
    path = rng.choice(_paths(value)[1:] or [()])
    if not path:
        return rng.choice(ODD_VALUES)
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    key, action = path[-1], rng.randrange(5)
    if action == 0 and isinstance(parent, dict):
        del parent[key]
    elif action == 1 and isinstance(parent, list):
        parent.extend([parent[key]] * rng.choice([1, 10, 1000]))
    elif action == 2:
        parent[key] = DEEP if rng.random() < 0.2 else [parent[key]]
    else:
        parent[key] = rng.choice(ODD_VALUES)
    return value


def mutate_manifest(data: bytes, rng: random.Random) -> bytes:
    entries = _zip_entries(data)
    manifest = json.loads(entries["manifest.json"])
    for _ in range(rng.choice([1, 1, 2, 3])):
        manifest = mutate_json(manifest, rng)
    entries["manifest.json"] = _dumps(manifest)
    return _rezip(entries, deflate=rng.random() < 0.5)


def mutate_npy(data: bytes, rng: random.Random) -> bytes:
    entries = _zip_entries(data)
    name = rng.choice([n for n in entries if n.endswith(".npy")])
    array = entries[name]
    header_length = struct.unpack_from("<I" if array[6] == 2 else "<H", array, 8)[0]
    start = 12 if array[6] == 2 else 10
    header = array[start : start + header_length].decode("latin1")
    choice = rng.randrange(6)
    if choice == 0:
        header = header.replace("'|u1'", rng.choice(["'<f4'", "'|O'", "'V0'", "'|u1", "'<u8'"]))
    elif choice == 1:
        header = header.replace("(", rng.choice(["(-1, ", "(10**30, ", "(0, 0, ", "((((", "(2, "]), 1)
    elif choice == 2:
        header = header.replace("False", rng.choice(["True", "None", "1"]))
    elif choice == 3:
        header = "{" + "[" * 5000
    elif choice == 4:
        array = array[:6] + bytes([rng.choice([1, 2, 3, 9])]) + array[7:]
    else:
        length = rng.choice([0, 1, 2**16 - 1, 2**31, header_length + 16])
        array = (
            array[:8]
            + struct.pack("<I" if array[6] == 2 else "<H", length % (2**32 if array[6] == 2 else 2**16))
            + array[start:]
        )
        entries[name] = array
        return _rezip(entries, deflate=rng.random() < 0.5)
    encoded = header.encode("latin1")
    length_format = "<I" if array[6] == 2 else "<H"
    entries[name] = (
        array[:8]
        + struct.pack(length_format, len(encoded) % 65536)
        + encoded
        + array[start + header_length :]
    )
    return _rezip(entries, deflate=rng.random() < 0.5)


# Fields of a zip's local file header and central directory record: (offset, struct format).
_LOCAL_FIELDS = [(4, "<H"), (6, "<H"), (8, "<H"), (14, "<I"), (18, "<I"), (22, "<I"), (26, "<H"), (28, "<H")]
_CENTRAL_FIELDS = [
    (10, "<H"),
    (8, "<H"),
    (16, "<I"),
    (20, "<I"),
    (24, "<I"),
    (28, "<H"),
    (30, "<H"),
    (42, "<I"),
]
_END_FIELDS = [(8, "<H"), (10, "<H"), (12, "<I"), (16, "<I"), (20, "<H")]


def mutate_zip(data: bytes, rng: random.Random) -> bytes:
    """One field of a zip header set to an odd value: a method, flags, sizes, CRC, offsets, lengths."""
    raw = bytearray(data)
    kinds = [(b"PK\x03\x04", _LOCAL_FIELDS), (b"PK\x01\x02", _CENTRAL_FIELDS), (b"PK\x05\x06", _END_FIELDS)]
    signature, fields = rng.choice(kinds)
    places = [i for i in range(len(raw)) if raw.startswith(signature, i)]
    if not places:
        return bytes(raw)
    place = rng.choice(places)
    offset, fmt = rng.choice(fields)
    most = 2 ** (8 * struct.calcsize(fmt)) - 1
    value = rng.choice([0, 1, 8, 12, 14, 99, most, most // 2, rng.randrange(most + 1), len(raw), 2**20])
    if place + offset + struct.calcsize(fmt) <= len(raw):
        struct.pack_into(fmt, raw, place + offset, value % (most + 1))
    return bytes(raw)


def _packets(data: bytes) -> list[bytes]:
    """The packets of an uncompressed trace, each as its bytes (tag and length included)."""
    out, at = [], 0
    while at < len(data):
        start, at = at, at + 1
        length, shift = 0, 0
        while True:
            byte = data[at]
            at += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        at += length
        out.append(data[start:at])
    return out


def _packet(body: bytes) -> bytes:
    length, varint = len(body), bytearray()
    while True:
        varint.append((length & 0x7F) | (0x80 if length > 0x7F else 0))
        length >>= 7
        if not length:
            return b"\x0a" + bytes(varint) + body


def mutate_pftrace(data: bytes, rng: random.Random) -> bytes:
    """Packets dropped, repeated, reordered, cut or crafted: a track that is its own parent, a
    length beyond the file, a bundle that inflates far, an odd annotation."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

    packets = _packets(data)
    choice = rng.randrange(7)
    at = rng.randrange(len(packets))
    if choice == 0:
        del packets[at]
    elif choice == 1:
        packets.insert(at, packets[rng.randrange(len(packets))] * rng.choice([1, 50]))
    elif choice == 2:
        rng.shuffle(packets)
    elif choice == 3:
        packet = TracePacket()
        packet.track_descriptor.uuid = rng.choice([5, 1, 2**63])
        packet.track_descriptor.parent_uuid = packet.track_descriptor.uuid
        packet.track_descriptor.name = rng.choice(["launch 0: k", "x", "launch 99999999999999999999: k"])
        packets.insert(at, _packet(packet.SerializeToString()))
    elif choice == 4:
        packets[at] = b"\x0a" + bytes([0xFF] * rng.choice([3, 9, 11])) + packets[at][2:]
    elif choice == 5:
        import zlib

        packet = TracePacket(compressed_packets=zlib.compress(b"\x0a\x80\x80\x80\x01" + b"\0" * 2_000_000))
        packets.insert(at, _packet(packet.SerializeToString()))
    else:
        body = bytearray(packets[at])
        for _ in range(rng.choice([1, 4])):
            body[rng.randrange(len(body))] = rng.randrange(256)
        packets[at] = bytes(body)
    out = b"".join(packets)
    return out[: rng.randrange(len(out))] if rng.random() < 0.1 else out


def mutate_chrome(data: bytes, rng: random.Random) -> bytes:
    document = json.loads(data)
    return _dumps(mutate_json(document, rng))


MUTATIONS: dict[str, tuple[str, Callable[[bytes, random.Random], bytes]]] = {
    "manifest": (".pik", mutate_manifest),
    "npy": (".pik", mutate_npy),
    "zip": (".pik", mutate_zip),
    "pftrace": (".pftrace", mutate_pftrace),
    "json": (".json", mutate_chrome),
}


def malformed(kind: str, seeds: dict[str, bytes], rng: random.Random) -> tuple[str, bytes]:
    """One malformed input of a kind: its suffix and bytes."""
    suffix, mutate = MUTATIONS[kind]
    if kind == "pftrace":
        return suffix, mutate(seeds["add-plain.pftrace"], rng)
    names = [name for name in seeds if name.endswith(suffix) and not name.endswith("plain.pftrace")]
    return suffix, mutate(seeds[rng.choice(names)], rng)


def said_one_error(command: str, path: Path, errors: str) -> bool:
    """Whether ``errors`` (stderr of a refused command) is its warnings' lines, then one line of
    its own that names ``path``."""
    warned = f"proton-ik {command}: warning: "
    lines = errors.splitlines()
    return (
        errors.endswith("\n")
        and all(line.startswith(warned) for line in lines[:-1])
        and lines[-1].startswith(f"proton-ik {command}: ")
        and not lines[-1].startswith(warned)
        and str(path) in lines[-1]
        and len(lines[-1]) < 2000
    )
