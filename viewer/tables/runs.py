"""A session's launches checked against their metadata (``prepare``), and cut into runs of
consecutive launches of up to ``GROUP_BYTES`` of stored data, a larger launch in pieces of whole
CTAs (``runs``): what both passes of the pipeline (``pipeline``) walk."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from proton_ik.contract.buffer_view import BufferView, raw_view
from proton_ik.contract.layout import BufferLayout
from proton_ik.contract.metadata import KernelMetadata
from proton_ik.contract.session_format import Capture, check_required_meta
from proton_ik.viewer.session_file import StoredLaunch

# Stored bytes decoded at once: enough for whole-array work to pay, and few enough that a run's
# arrays (a few MB) are reused from the heap and the caches. Measured (docs/PERFORMANCE.md, change
# 5): 4 MB renders 20 to 40% faster than 32 MB, whose arrays are fresh, page-faulted memory.
GROUP_BYTES = 4 << 20


@dataclass(frozen=True)
class Launch:
    """A launch checked against its metadata: its place in the session, decode key and kernel."""

    index: int
    capture: Capture
    key: tuple[str, str]  # kernel and profile: launches that decode together
    kernel: KernelMetadata

    @property
    def meta(self) -> Mapping[str, Any]:
        return self.capture.meta

    @property
    def layout(self) -> BufferLayout:
        return self.kernel.layout

    @property
    def where(self) -> str:
        return f"launch {self.meta['launch']} ({self.meta['kernel']})"

    @property
    def headers_view_keeps(self) -> bool:
        """Whether ``view(headers_only=True)`` reads the whole launch and its view may be kept at
        no cost in memory: a launch in memory, or a raw stored one read in place from the mapped
        file. Not a trimmed launch (its front alone holds the headers), nor a deflated one or
        one of a file that cannot be mapped (each read is a copy: keeping every launch's until
        it is decoded would hold the whole session)."""
        if not isinstance(self.capture, StoredLaunch):
            return True
        return not self.capture.trimmed and self.capture.read_in_place

    def view(self, *, headers_only: bool = False) -> BufferView:
        """The launch's headers and ring slots, from its stored form (a trimmed one is not rebuilt)."""
        if isinstance(self.capture, StoredLaunch):
            return self.capture.view(self.layout, headers_only=headers_only)
        try:
            return raw_view(self.capture.buffer, self.layout)
        except ValueError as error:
            raise ValueError(f"{self.where}: {error}") from None


def prepare(captures: Sequence[Capture]) -> list[Launch]:
    """Check every launch's metadata, before anything is decoded."""
    launches = []
    # One copy of each key and its kernel metadata, however many launches share them.
    kernels: dict[tuple[str, str], tuple[tuple[str, str], KernelMetadata]] = {}
    # The key of each kernel metadata dict seen, by identity: launches of one kernel often share
    # one (the runtime's, or a session file's, whose reader gives equal ones one dict).
    keyed: dict[int, str] = {}
    for index, capture in enumerate(captures):
        meta = capture.meta
        check_required_meta(meta)
        where = f"launch {meta['launch']} ({meta['kernel']})"
        profile = meta["profile"]
        text = keyed.get(id(profile))
        if text is None:
            try:
                text = keyed[id(profile)] = json.dumps(profile, sort_keys=True)
            except (TypeError, ValueError) as error:
                raise ValueError(f"{where}: {error}") from None
        key = (str(meta["kernel"]), text)
        if key not in kernels:
            kernels[key] = key, KernelMetadata.from_dict(profile, where, "profile")
        launches.append(Launch(index, capture, *kernels[key]))
    return launches


@dataclass(frozen=True)
class Piece:
    """Whole CTAs of one launch, from CTA ``first_cta`` on."""

    launch: Launch
    first_cta: int
    view: BufferView
    last: bool  # the launch's last piece


def runs(
    launches: Sequence[Launch], view: Callable[[Launch], BufferView], split: bool
) -> Iterator[list[Piece]]:
    """Consecutive launches in runs of up to GROUP_BYTES of stored bytes. With ``split``, a larger
    launch comes in pieces of whole CTAs, each its own run or the end or start of one."""
    run: list[Piece] = []
    size = 0
    for launch in launches:
        whole = view(launch)
        for piece in _pieces(launch, whole) if split else [Piece(launch, 0, whole, True)]:
            run.append(piece)
            size += _bytes(piece.view)
            if size >= GROUP_BYTES:
                yield run
                run, size = [], 0
    if run:
        yield run


def _bytes(view: BufferView) -> int:
    return view.cta_headers.nbytes + view.unit_headers.nbytes + view.slots.nbytes


def _pieces(launch: Launch, view: BufferView) -> list[Piece]:
    """The launch in pieces of whole CTAs, each about GROUP_BYTES of stored bytes (at least one CTA)."""
    if _bytes(view) <= GROUP_BYTES or view.num_ctas <= 1:
        return [Piece(launch, 0, view, True)]
    # A CTA's bytes: its headers and the slots up to the next CTA's (in either stored form).
    reach = np.diff(np.append(view.slot0[:, 0], len(view.slots))) * view.slots.itemsize
    size = view.cta_headers.itemsize + view.unit_headers[0].nbytes + np.maximum(reach, 0)
    window = (np.cumsum(size) - size) // max(GROUP_BYTES, 1)
    bounds = [0, *(np.flatnonzero(np.diff(window)) + 1).tolist(), view.num_ctas]
    return [Piece(launch, a, view.ctas(a, b), b == view.num_ctas) for a, b in itertools.pairwise(bounds)]
