"""The sessions of a job (its ranks, its GPUs) in one Perfetto trace: a root track per session,
labelled with its rank, and every kernel and scope of every session on one time axis.

Each session is rendered as usual, with its tracks, flows and packet sequences numbered in a
range of its own (``PerfettoWriter``'s ``merge_index``), and the files are concatenated: a
Perfetto trace is a sequence of packets, so the concatenation is one trace.

Time: every record's time is its GPU's ``%globaltimer`` (nanoseconds), which the driver sets
from the host's clock but which drifts from it, and from other GPUs', by microseconds. Each
session records pairs of host time and %globaltimer (``runtime.clock_sync``, at its start and
its finalize); where every session has them, each is moved onto the host's clock by the mean
offset of its pairs, so that GPUs line up to the spread of their clock reads. Where one lacks
them (a session from before they were read), none is moved, and the merge warns.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

from proton_ik.contract.session_format import host_offset_ns
from proton_ik.viewer.perfetto import MAX_MERGED
from proton_ik.viewer.ranks.scopes import label_of
from proton_ik.viewer.render import render_session
from proton_ik.viewer.session_file import read_session

__all__ = ["files_named", "merge_sessions", "sessions_of"]


def files_named(paths: str | Path | Sequence[str | Path]) -> list[Path]:
    """The files named (one path, or several): files as given, folders for the session files
    (``.pik``) in them, in name order."""
    named = [paths] if isinstance(paths, (str, Path)) else list(paths)
    return [
        path
        for given in map(Path, named)
        for path in (sorted(given.glob("*.pik")) if given.is_dir() else [given])
    ]


def sessions_of(paths: str | Path | Sequence[str | Path]) -> list[Path]:
    """The session files named (``files_named``), each once."""
    named = [paths] if isinstance(paths, (str, Path)) else list(paths)
    found: list[Path] = []
    # Each session's file, resolved, and the path it was first found by: a session merged twice
    # would draw as two ranks.
    seen: dict[Path, Path] = {}
    for path in files_named(named):
        first = seen.setdefault(path.resolve(), path)
        if first is not path:
            raise ValueError(
                f"{path} is named twice (also as {first}, through {', '.join(map(str, named))}): "
                "name each session once"
            )
        found.append(path)
    if not found:
        raise ValueError(f"no session file in {', '.join(map(str, named))}: name .pik files or their folder")
    if len(found) > MAX_MERGED:
        raise ValueError(f"{len(found)} sessions: one trace holds at most {MAX_MERGED}")
    return found


def merge_sessions(
    paths: str | Path | Sequence[str | Path],
    output: str | Path,
    *,
    timeline: str | None = None,
    host_offsets_ns: Sequence[int] | None = None,
) -> Path:
    """Write one Perfetto trace of the sessions ``paths`` (files, or folders of ``.pik`` files),
    each under a root track named by its rank (or file) and session; return its path.
    ``host_offsets_ns``: what to add to each session's times, in place of its clock pairs' offset
    (``torch_profiler`` aligns sessions to a ``torch.profiler`` trace so)."""
    sessions = sessions_of(paths)
    output = Path(output)
    labels: list[str] = []
    offsets: list[int | None] = []
    for path in sessions:
        info = read_session(path).info
        offsets.append(host_offset_ns(info))
        label = label_of(info, path.name)
        labels.append(
            f"{label}: {info.get('name', path.stem)} ({path.name})" if label != path.name else label
        )
    aligned = [offset or 0 for offset in offsets]
    if host_offsets_ns is None and len(sessions) > 1 and None in offsets:
        unaligned = ", ".join(p.name for p, o in zip(sessions, offsets, strict=True) if o is None)
        warnings.warn(
            f"proton_ik: {unaligned} recorded no host and GPU clock pairs; the sessions are merged "
            "on their GPUs' own timers, which may disagree by microseconds",
            stacklevel=2,
        )
        aligned = [0] * len(sessions)
    if host_offsets_ns is not None:
        if len(host_offsets_ns) != len(sessions):
            raise ValueError(f"{len(host_offsets_ns)} offsets for {len(sessions)} sessions")
        aligned = [int(offset) for offset in host_offsets_ns]
    with tempfile.TemporaryDirectory(prefix=".merge-", dir=output.parent) as scratch:
        parts = []
        for index, (path, label) in enumerate(zip(sessions, labels, strict=True)):
            part = Path(scratch) / f"{index}.pftrace"
            render_session(
                path,
                {"pftrace": part},
                timeline=timeline,
                title=label,
                merge_index=index,
                host_offset_ns=aligned[index],
            )
            parts.append(part)
        whole = Path(scratch) / "merged.pftrace"
        with open(whole, "wb") as merged:
            for part in parts:
                with open(part, "rb") as piece:
                    shutil.copyfileobj(piece, merged)
        whole.replace(output)
    return output
