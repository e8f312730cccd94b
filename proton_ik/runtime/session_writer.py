"""Writes a session file (``contract.session_format``) as launches come, so memory stays bounded.

The runtime streams each drained launch into it; tests and tools write whole sessions with
``write_session``. The viewer reads the file back (``viewer.session_file``).
"""

from __future__ import annotations

import functools
import io
import json
import os
import queue
import threading
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np

from proton_ik.contract.metadata import KernelMetadata
from proton_ik.contract.session_format import (
    MANIFEST,
    SESSION_INFO,
    STORED_KEY,
    TRIMMED,
    Capture,
    LaunchMeta,
    ManifestLaunch,
    WrittenSession,
    check_required_meta,
    launch_member,
    launch_meta_member,
    manifest,
)
from proton_ik.contract.trimmed import trim as trim_buffer
from proton_ik.runtime.stored_zip import StoredZipWriter

WRITE_PIECE_BYTES = 2 << 20  # the pieces the file writes a launch's buffer in
GATHER_BYTES = 64 << 10  # writes smaller than this go to the file's thread together (OverlappedFile)
COALESCE_WRITES = 256  # queued writes the file's thread makes in one system call, at most (IOV_MAX: 1024)


class SessionWriter:
    """Streams launches into a session file as they come, so memory stays bounded.

    ``add_launch`` writes the buffer straight into the zip (with ``trim``, only its headers and
    kept ring slots: see ``contract.trimmed``), then its metadata, then flushes the file to the
    operating system, so that a process killed later leaves every launch added so far readable
    (``viewer.session_file.recover``); ``close`` writes the manifest. Use it as a context manager, or call
    ``close`` in a ``finally``.
    """

    def __init__(
        self, path: str | Path, info: Mapping[str, Any], *, compress: bool = True, trim: bool = False
    ):
        self.path = Path(path)
        self.trim = trim
        self.info = dict(info)
        _to_json(self.info, "session info")
        self._entries: list[ManifestLaunch] = []
        self.written: WrittenSession | None = None  # once closed, where a stored file's members lie
        # Each kernel metadata dict's JSON, by identity (the dict kept, so its id stays its own):
        # most of a launch's metadata text, the same for every launch of a kernel.
        self._profile_texts: dict[int, tuple[Mapping[str, Any], str]] = {}
        self._file = OverlappedFile(self.path)
        # Stored, as the runtime writes: checksums on several threads, no serial pass
        # (``stored_zip``); compressed, as tools and tests may ask: zipfile's deflate.
        self._archive: zipfile.ZipFile | StoredZipWriter | None = (
            zipfile.ZipFile(
                self._file, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1, allowZip64=True
            )
            if compress
            else StoredZipWriter(self._file)
        )
        self._member(SESSION_INFO, [json.dumps(self.info).encode()])
        self._flush()

    def _member(self, name: str, parts: list[bytes | memoryview]) -> None:
        self._members([(name, parts)])

    def _members(self, members: list[tuple[str, list[bytes | memoryview]]]) -> None:
        assert self._archive is not None
        if isinstance(self._archive, StoredZipWriter):
            self._archive.add_many(members)
            return
        for name, parts in members:
            if len(parts) == 1 and isinstance(parts[0], bytes):  # a JSON member
                self._archive.writestr(name, parts[0])
            else:
                self._write_parts(self._archive, name, parts)

    @staticmethod
    def _write_parts(archive: zipfile.ZipFile, name: str, parts: list[bytes | memoryview]) -> None:
        with archive.open(name, "w", force_zip64=True) as member:
            for part in parts:
                member.write(part)

    def add_launches(self, launches: Iterable[tuple[Mapping[str, Any], np.ndarray, bool]]) -> None:
        """``add_launch`` each of (meta, buffer, trimmed on device), their members written
        together, with one flush after them all (also when one fails: the launches before it are
        written, and the caller may reuse the buffers once this returns)."""
        members: list[tuple[str, list[bytes | memoryview]]] = []
        entries: list[ManifestLaunch] = []
        try:
            for meta, buffer, trimmed_on_device in launches:
                entry = launch_member(len(self._entries) + len(entries))
                launch_meta, array, text = self._prepared(meta, buffer, trimmed_on_device)
                members.append((entry, npy_parts(array)))
                members.append((launch_meta_member(entry), [text.encode()]))
                entries.append({"entry": entry, "meta": cast(LaunchMeta, launch_meta)})
        finally:
            try:
                if members:
                    self._members(members)
                    self._entries.extend(entries)
            finally:
                self._flush()

    def add_launch(
        self,
        meta: Mapping[str, Any],
        buffer: np.ndarray,
        *,
        trimmed_on_device: bool = False,
        flush: bool = True,
    ) -> None:
        """Append one launch: its metadata (JSON-serialisable) and its raw uint8 buffer, or, with
        ``trimmed_on_device``, a buffer the runtime already trimmed (``meta["num_ctas"]`` says
        how many CTAs it holds). ``flush=False`` leaves it unflushed: the caller keeps the buffer
        unchanged until its next flush."""
        entry = launch_member(len(self._entries))
        launch_meta, array, text = self._prepared(meta, buffer, trimmed_on_device)
        self._members([(entry, npy_parts(array)), (launch_meta_member(entry), [text.encode()])])
        self._entries.append({"entry": entry, "meta": cast(LaunchMeta, launch_meta)})
        if flush:
            self._flush()

    def _prepared(
        self, meta: Mapping[str, Any], buffer: np.ndarray, trimmed_on_device: bool
    ) -> tuple[dict[str, Any], np.ndarray, str]:
        """A launch's metadata as stored, its buffer's bytes (one dimension) and its JSON,
        checked before anything of it is written."""
        if self._archive is None:
            raise ValueError(f"session file {self.path} is already closed; start a new session")
        check_required_meta(meta)
        meta = dict(meta)
        array = np.asarray(buffer)
        if array.dtype != np.uint8:
            raise ValueError(f"launch {meta['launch']}: the profile buffer must be uint8, got {array.dtype}")
        if trimmed_on_device:
            meta[STORED_KEY] = TRIMMED
        elif self.trim:
            # Only the headers and the kept ring slots: a mostly empty ring costs nothing.
            where = f"launch {meta['launch']} ({meta['kernel']})"
            layout = KernelMetadata.from_dict(meta["profile"], where, "profile").layout
            if not layout.aggregate:  # an aggregate launch's statistics fill its buffer: kept whole
                meta[STORED_KEY], meta["num_ctas"] = TRIMMED, array.size // layout.cta_bytes
                array = trim_buffer(array, layout)
        return meta, np.ascontiguousarray(array).reshape(-1), self._meta_json(meta)

    def _meta_json(self, meta: Mapping[str, Any]) -> str:
        """A launch's metadata as JSON, its kernel metadata (``profile``) last and encoded once
        per dict: launches of a kernel share one, never changed once handed here (as the
        manifest's ``numbered_profiles`` assumes)."""
        what = f"metadata of launch {meta['launch']}"
        profile = meta["profile"]
        known = self._profile_texts.get(id(profile))
        if known is None or known[0] is not profile:
            known = self._profile_texts[id(profile)] = (profile, _to_json(profile, what))
        rest = _to_json({key: value for key, value in meta.items() if key != "profile"}, what)
        return f'{rest[:-1]}, "profile": {known[1]}}}'  # rest holds "launch" and "kernel"

    def _flush(self) -> None:
        """Hand what is written to the operating system: it survives this process being killed.
        Also the caller's buffers are free again once this returns (``OverlappedFile``)."""
        self._file.flush()

    def close(self) -> Path:
        """Write the manifest and close the file; closing twice is harmless."""
        if self._archive is None:
            return self.path
        # Compact: an indented dump takes the json module's pure-Python path (0.5 s for 20,000 launches)
        text = json.dumps(manifest(self.info, self._entries)).encode()
        self._member(MANIFEST, [text])
        stored = self._archive.written() if isinstance(self._archive, StoredZipWriter) else None
        self._archive.close()
        self._archive = None
        self._file.close()
        if stored is not None:  # only once the file is whole
            self.written = WrittenSession(text, stored)
        return self.path

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def write_session(path: str | Path, info: Mapping[str, Any], launches: Iterable[Capture]) -> Path:
    """Write a whole session at once (for tests and tools; the runtime streams with SessionWriter)."""
    with SessionWriter(path, info) as writer:
        for launch in launches:
            writer.add_launch(launch.meta, launch.buffer)
    return Path(path)


@functools.lru_cache(maxsize=256)
def _npy_header(dtype: str, shape: tuple[int, ...]) -> bytes:
    """An ``.npy`` (version 2.0) header: the same for every launch of a kernel and grid, made
    once (numpy's takes 10 us, a third of writing a short launch)."""
    header = io.BytesIO()
    fields = {"descr": dtype, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_2_0(header, fields)
    return header.getvalue()


def npy_parts(array: np.ndarray) -> list[bytes | memoryview]:
    """``array`` (one dimension) as ``.npy`` bytes: its header, then its data where it lies
    (``np.save`` copies a non-file stream's data chunk by chunk first, which doubles the cost of
    a launch of megabytes), in pieces that the file writes one after another."""
    data = memoryview(array).cast("B")  # type: ignore[arg-type]  # numpy arrays are buffers
    return [
        _npy_header(array.dtype.str, array.shape),
        *(data[start : start + WRITE_PIECE_BYTES] for start in range(0, len(data), WRITE_PIECE_BYTES)),
    ]


class OverlappedFile:
    """The session file as ``zipfile`` writes it: each write is handed to a thread of the file's
    own and the call returns, so that the checksum zipfile computes of the next piece runs while
    this one is written (both outside the GIL). What depends on the file's state (``seek``,
    ``flush``, ``close``) waits for the queued writes first; ``tell`` is counted. A write keeps
    the caller's buffer until ``flush`` returns: callers flush before they reuse it.

    Writes under ``GATHER_BYTES`` (a member's header, a short launch, its metadata) are copied
    into one buffer that goes to the thread once it is full or before anything that depends on
    the file: handing each over took a lock, a queue and a wake-up of the thread, which cost a
    short launch more than its bytes did."""

    def __init__(self, path: Path):
        self._file = open(path, "wb", buffering=0)  # noqa: SIM115 (closed by close()); written by writev
        self._position = 0
        # Writes in order: data at the end, or (offset, bytes) patched in before it; None ends.
        self._queue: queue.SimpleQueue[memoryview | tuple[int, bytes] | None] = queue.SimpleQueue()
        self._gathered = bytearray()  # small writes not yet handed to the thread
        self._pending = 0
        self._done = threading.Condition(threading.Lock())
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._write_queued, name="proton_ik-file", daemon=True)
        self._thread.start()

    def write(self, data: Any) -> int:
        self._raise_if_failed()
        view = memoryview(data).cast("B")
        if view.nbytes < GATHER_BYTES:
            self._gathered += view  # copied: the caller may reuse it at once
            if len(self._gathered) >= GATHER_BYTES:
                self._hand_over_gathered()
        else:
            self._hand_over_gathered()
            self._queue_item(view)
        self._position += view.nbytes
        return view.nbytes

    def _hand_over_gathered(self) -> None:
        if self._gathered:
            gathered, self._gathered = self._gathered, bytearray()
            self._queue_item(memoryview(gathered))

    def _queue_item(self, item: memoryview | tuple[int, bytes]) -> None:
        with self._done:
            self._pending += 1
        self._queue.put(item)

    def tell(self) -> int:
        return self._position

    def patch(self, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset`` (before the end), after the writes queued so far, leaving
        the position where it is: a member's checksum, into its header (``stored_zip``)."""
        self._raise_if_failed()
        self._hand_over_gathered()  # the bytes it patches go first
        self._queue_item((offset, data))

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self._wait()
        self._position = self._file.seek(offset, whence)
        return self._position

    def flush(self) -> None:
        self._wait()
        self._file.flush()

    def close(self) -> None:
        if self._file.closed:
            return
        try:
            self._wait()
        finally:
            self._queue.put(None)
            self._thread.join()
            self._file.close()

    def _wait(self) -> None:
        self._hand_over_gathered()
        with self._done:
            self._done.wait_for(lambda: self._pending == 0)
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise OSError(f"writing the session file failed: {self._error}") from self._error

    def _write_queued(self) -> None:
        """The file's thread: what is queued, in order, each run of appended writes that has
        queued up meanwhile in one ``writev`` (``COALESCE_WRITES`` at most): one system call and
        one wait for the GIL for a drain batch's members, not one each."""
        ended = False
        while not ended:
            items: list[memoryview | tuple[int, bytes]] = []
            item = self._queue.get()
            while True:
                if item is None:  # the end: close() queues it after every write
                    ended = True
                    break
                items.append(item)
                if len(items) >= COALESCE_WRITES:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            try:
                if self._error is None:  # else the first failure stands; later writes are dropped
                    self._write_in_order(items)
            except BaseException as error:  # raised to the caller at its next call
                self._error = error
            finally:
                with self._done:
                    self._pending -= len(items)
                    self._done.notify_all()

    def _write_in_order(self, items: list[memoryview | tuple[int, bytes]]) -> None:
        appended: list[memoryview] = []
        for item in items:
            if isinstance(item, tuple):
                self._append_all(appended)
                appended = []
                offset, data = item
                os.pwrite(self._file.fileno(), data, offset)
            else:
                appended.append(item)
        self._append_all(appended)

    def _append_all(self, views: list[memoryview]) -> None:
        """Write ``views`` at the file's end, one after another, whatever ``writev`` takes a call."""
        descriptor = self._file.fileno()
        while views:
            written = os.writev(descriptor, views)
            if written <= 0 and any(view.nbytes for view in views):
                raise OSError(f"the file took no bytes of {sum(view.nbytes for view in views):,}")
            while views and written >= views[0].nbytes:
                written -= views[0].nbytes
                views = views[1:]
            if written:
                views = [views[0][written:], *views[1:]]


def _to_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"the {what} must be JSON-serialisable plain data: {error}") from None
