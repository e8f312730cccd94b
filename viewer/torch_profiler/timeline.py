"""A session and a ``torch.profiler`` trace of the same steps on one time axis: each of the
session's launches matched to the kernel CUPTI recorded for it, and both drawn in one Perfetto
trace (``proton-ik merge --torch-trace``).

Matching: a launch and a CUPTI kernel match when they ran on one device, under one name, and
line up in time. The session's times are its GPU's ``%globaltimer``; CUPTI's are the host's
realtime clock. The session's clock pairs (``runtime.clock_sync``) give a first offset between
the two, good to the latency of a launch (tens of microseconds under the profiler); the offset
is then found again from the launches themselves: each launch votes for the offsets to the
nearest CUPTI kernels of its name, the most voted one (to a microsecond) wins, and each launch
that then lies inside a CUPTI kernel of its name is matched to it, one to one, nearest first,
then in launch order where that also fits (CUPTI's correlation ids count launch calls as our
launch numbers do: two streams' launches of one name running together may lie inside both
kernels, and the nearest begin would swap them). The offset drawn is the
median, over the matched launches, of the distance between the midpoints of CUPTI's kernel and
the launch's span (first warp's start to last warp's end), so that what remains is the ramp at
each end: CUPTI's kernel begins before the first warp starts and ends after the last one exits.

Streams are matched by what ran on them (our stream handles are pointers, CUPTI's stream ids
small numbers): the alignment reports the mapping it found, and a launch matched against it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

from proton_ik.contract.session_format import host_offset_ns
from proton_ik.viewer.perfetto import MAX_MERGED, SEQUENCE_ID, SEQUENCES_PER_SESSION, UUID_BITS
from proton_ik.viewer.torch_profiler.kineto import KinetoTrace, kineto_packets, read_kineto

__all__ = ["Alignment", "align_launches", "launch_spans", "merge_torch_trace"]

VOTE_BIN_NS = 1_000  # offsets voted for to a microsecond
NEIGHBOURS = 4  # CUPTI kernels of a launch's name on each side of it that it votes for
MATCH_WITHIN_NS = 20_000  # a match: within this of the voted offset
LONG_KERNEL_NS = 10_000  # the error is reported on kernels of at least this (issue 27's 10 us)


@dataclass(frozen=True)
class Alignment:
    """How a session's launches fall on a ``torch.profiler`` trace's kernels.

    ``offset_ns``: what to add to the session's times to put them on the trace's clock (None
    where nothing matched). ``matches``: one row per matched launch: launch, kernel, device,
    stream, cupti_stream, correlation, event (CUPTI's kernel's index in the trace's events),
    cupti_ns (its duration), begin_error_ns (how far the launch's first warp starts after
    CUPTI's begin) and end_error_ns (how far its last warp exits before CUPTI's end)."""

    offset_ns: int | None
    matches: pd.DataFrame
    unmatched: list[int] = field(default_factory=list)  # launches no CUPTI kernel matched
    streams: dict[int, int] = field(default_factory=dict)  # our stream handle -> CUPTI's stream
    cupti_kernels: int = 0  # kernels in the trace on the session's devices

    def errors(self, min_ns: int = LONG_KERNEL_NS) -> dict[str, float]:
        """Median and worst begin and end errors (ns) over kernels CUPTI timed at ``min_ns`` or
        longer; an empty dict when there are none."""
        long = self.matches[self.matches["cupti_ns"] >= min_ns]
        if long.empty:
            return {}
        begin, end = long["begin_error_ns"].abs(), long["end_error_ns"].abs()
        return {
            "kernels": float(len(long)),
            "begin_median_ns": float(begin.median()),
            "begin_worst_ns": float(begin.max()),
            "end_median_ns": float(end.median()),
            "end_worst_ns": float(end.max()),
        }

    def describe(self) -> str:
        matched = len(self.matches)
        text = f"{matched} of {matched + len(self.unmatched)} launches matched to CUPTI's kernels"
        if self.offset_ns is None:
            return text + "; nothing to align on"
        errors = self.errors()
        if errors:
            text += (
                f"; on {int(errors['kernels'])} kernels of {LONG_KERNEL_NS // 1000} us or more, the "
                f"first warp starts {errors['begin_median_ns'] / 1000:.2f} us after CUPTI's begin "
                f"(median; worst {errors['begin_worst_ns'] / 1000:.2f} us) and the last exits "
                f"{errors['end_median_ns'] / 1000:.2f} us before its end "
                f"(worst {errors['end_worst_ns'] / 1000:.2f} us)"
            )
        if self.unmatched:
            shown = ", ".join(map(str, self.unmatched[:8])) + (" ..." if len(self.unmatched) > 8 else "")
            text += f". Unmatched launches (ran outside the profiler's window?): {shown}"
        return text


def launch_spans(session_path: str | Path) -> tuple[pd.DataFrame, dict]:
    """Each launch of a session with its kernel, device, stream and span (``start_ns`` of its
    first unit to ``end_ns`` of its last, on the GPU's timer), and the session's info. Read from
    the unit headers alone (``tables.launch_spans``): the records are decoded once, by the render."""
    from proton_ik.viewer.session_file import read_session
    from proton_ik.viewer.tables import fit_session, prepare
    from proton_ik.viewer.tables import launch_spans as header_spans

    session = read_session(session_path)
    launches = prepare(session.launches)
    spans = pd.DataFrame(header_spans(launches, fit_session(launches).clocks))
    metas = pd.DataFrame(
        [
            {
                "launch": int(launch.meta["launch"]),
                "kernel": str(launch.meta["kernel"]),
                "device": launch.meta.get("device"),
                "stream": launch.meta.get("stream"),
            }
            for launch in launches
        ],
        columns=["launch", "kernel", "device", "stream"],
    )
    table = metas.set_index("launch").join(spans.set_index("launch"), how="inner").reset_index()
    return table, dict(session.info)


def align_launches(spans: pd.DataFrame, kernels: pd.DataFrame, prior_ns: int | None) -> Alignment:
    """Match ``spans`` (``launch_spans``) to CUPTI's ``kernels`` (``KinetoTrace.kernels``);
    ``prior_ns``: a first offset from the session's times to the trace's (its clock pairs')."""
    kernels = kernels[kernels["device"].isin(spans["device"].unique())]
    empty = pd.DataFrame(
        columns=[
            "launch", "kernel", "device", "stream", "cupti_stream", "correlation", "event",
            "cupti_ns", "begin_error_ns", "end_error_ns",
        ]
    )  # fmt: skip
    if spans.empty or kernels.empty:
        return Alignment(None, empty, sorted(spans["launch"].tolist()), {}, len(kernels))
    candidates = _candidates(spans, kernels, prior_ns)
    if candidates.empty:
        return Alignment(None, empty, sorted(spans["launch"].tolist()), {}, len(kernels))
    voted = _voted_offset(candidates, prior_ns)
    chosen = _in_launch_order(_one_to_one(candidates, voted), candidates, kernels, voted)
    mid_offset = int(np.median(chosen["mid_offset"])) if len(chosen) else voted
    matches = _matches(chosen, spans, kernels, mid_offset)
    unmatched = sorted(set(spans["launch"].tolist()) - set(matches["launch"].tolist()))
    streams = (
        matches.groupby("stream")["cupti_stream"].agg(lambda s: int(s.mode().iloc[0])).to_dict()
        if len(matches)
        else {}
    )
    return Alignment(
        mid_offset, matches, unmatched, {int(k): int(v) for k, v in streams.items()}, len(kernels)
    )


def _candidates(spans: pd.DataFrame, kernels: pd.DataFrame, prior_ns: int | None) -> pd.DataFrame:
    """(launch, CUPTI kernel) pairs of one device and name that may match: each launch with the
    ``NEIGHBOURS`` kernels of its name nearest it on each side, by time moved by ``prior_ns``;
    with no prior, by order, around the kernel of the same rank among its name's."""
    rows = []
    for (device, name), ours in spans.groupby(["device", "kernel"], sort=False):
        theirs = kernels[(kernels["device"] == device) & (kernels["name"] == name)]
        if theirs.empty:
            continue
        ours = ours.sort_values("start_ns")
        if prior_ns is not None:
            center = np.searchsorted(theirs["begin_ns"].to_numpy(), ours["start_ns"].to_numpy() + prior_ns)
            spread = NEIGHBOURS
        else:  # the k-th launch of a name near CUPTI's k-th, allowing for launches outside its window
            center = np.arange(len(ours))
            spread = abs(len(theirs) - len(ours)) + NEIGHBOURS
        lo = np.clip(center - spread, 0, len(theirs))
        hi = np.clip(center + spread + 1, 0, len(theirs))
        ours_index = np.repeat(np.arange(len(ours)), hi - lo)
        theirs_index = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True)])
        a, b = ours.iloc[ours_index], theirs.iloc[theirs_index.astype(np.int64)]
        rows.append(
            pd.DataFrame(
                {
                    "launch": a["launch"].to_numpy(),
                    "cupti": b.index.to_numpy(),
                    "begin_offset": b["begin_ns"].to_numpy() - a["start_ns"].to_numpy(),
                    "end_offset": b["end_ns"].to_numpy() - a["end_ns"].to_numpy(),
                    "mid_offset": (b["begin_ns"].to_numpy() + b["end_ns"].to_numpy()) // 2
                    - (a["start_ns"].to_numpy() + a["end_ns"].to_numpy()) // 2,
                }
            )
        )
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def _voted_offset(candidates: pd.DataFrame, prior_ns: int | None) -> int:
    """The begin offset most launches agree on, to ``VOTE_BIN_NS``; among equals, the one
    nearest ``prior_ns``."""
    bins = np.floor_divide(candidates["begin_offset"].to_numpy(), VOTE_BIN_NS)
    # A vote counts neighbouring bins too: an offset on a bin's edge is not split in two.
    votes = pd.Series(np.concatenate([bins - 1, bins, bins + 1])).value_counts()
    best = votes[votes == votes.max()].index.to_numpy()
    if prior_ns is not None:
        best = best[np.argsort(np.abs(best * VOTE_BIN_NS - prior_ns), kind="stable")]
    center = int(best[0]) * VOTE_BIN_NS + VOTE_BIN_NS // 2
    near = candidates["begin_offset"][np.abs(candidates["begin_offset"] - center) <= 2 * VOTE_BIN_NS]
    return int(near.median()) if len(near) else center


def _one_to_one(candidates: pd.DataFrame, voted: int) -> pd.DataFrame:
    """Pairs whose launch, moved by the voted offset, lies inside CUPTI's kernel (to
    ``MATCH_WITHIN_NS``), nearest begin first, each launch and each CUPTI kernel used once. A
    kernel's warps may start well after CUPTI's begin (another stream's kernel holds the SMs),
    but never before it, nor end after its end."""
    inside = _inside(candidates, voted)
    left = candidates[inside].assign(cost=(candidates["begin_offset"] - voted).abs())
    left = left.sort_values("cost", kind="stable")
    chosen = []
    while len(left):
        # Each launch's nearest kernel, kept where no nearer launch wants that kernel; those
        # launches and kernels leave, and the rest choose again among what is left.
        best = left.drop_duplicates("launch").drop_duplicates("cupti")
        chosen.append(best)
        left = left[~left["launch"].isin(best["launch"]) & ~left["cupti"].isin(best["cupti"])]
    return pd.concat(chosen) if chosen else left


def _inside(candidates: pd.DataFrame, voted: int) -> pd.Series:
    """Whether each candidate pair, moved by the voted offset, lies inside its CUPTI kernel."""
    return (candidates["begin_offset"] - voted <= MATCH_WITHIN_NS) & (
        candidates["end_offset"] - voted >= -MATCH_WITHIN_NS
    )


def _in_launch_order(
    chosen: pd.DataFrame, candidates: pd.DataFrame, kernels: pd.DataFrame, voted: int
) -> pd.DataFrame:
    """The matches of each name with their CUPTI kernels in launch order. Launches of one name on
    two streams at once may each lie inside both kernels, and the nearest begin can then swap
    them (a kernel's warps wait while the other stream's kernel holds the SMs). Launch numbers
    and CUPTI's correlation ids both count launch calls in the order made: where the chosen
    kernels, handed to the chosen launches in that order, still each hold their launch, that is
    the matching kept."""
    if chosen.empty or (kernels.loc[chosen["cupti"].to_numpy(), "correlation"] < 0).any():
        return chosen  # no order to follow
    allowed = set(
        zip(*(candidates.loc[_inside(candidates, voted), ["launch", "cupti"]].T.to_numpy()), strict=True)
    )
    names = kernels.loc[chosen["cupti"].to_numpy(), ["device", "name"]].to_numpy()
    groups = []
    for key in dict.fromkeys(map(tuple, names.tolist())):
        group = chosen[(names[:, 0] == key[0]) & (names[:, 1] == key[1])]
        by_launch = group.sort_values("launch", kind="stable")
        cupti = by_launch["cupti"].to_numpy()
        ordered = cupti[np.argsort(kernels.loc[cupti, "correlation"].to_numpy(), kind="stable")]
        pairs = zip(by_launch["launch"].tolist(), ordered.tolist(), strict=True)
        if (ordered != cupti).any() and all(pair in allowed for pair in pairs):
            index = pd.MultiIndex.from_arrays([by_launch["launch"].to_numpy(), ordered])
            by_launch = candidates.set_index(["launch", "cupti"]).loc[index].reset_index()
        groups.append(by_launch)
    return pd.concat(groups, ignore_index=True)


def _matches(chosen: pd.DataFrame, spans: pd.DataFrame, kernels: pd.DataFrame, offset: int) -> pd.DataFrame:
    ours = spans.set_index("launch").loc[chosen["launch"].to_numpy()]
    theirs = kernels.loc[chosen["cupti"].to_numpy()]
    begin = ours["start_ns"].to_numpy() + offset
    end = ours["end_ns"].to_numpy() + offset
    table = pd.DataFrame(
        {
            "launch": chosen["launch"].to_numpy(),
            "kernel": ours["kernel"].to_numpy(),
            "device": ours["device"].to_numpy(),
            "stream": ours["stream"].to_numpy(),
            "cupti_stream": theirs["stream"].to_numpy(),
            "correlation": theirs["correlation"].to_numpy(),
            "event": theirs["event"].to_numpy(),
            "cupti_ns": (theirs["end_ns"] - theirs["begin_ns"]).to_numpy(),
            "begin_error_ns": begin - theirs["begin_ns"].to_numpy(),
            "end_error_ns": theirs["end_ns"].to_numpy() - end,
        }
    )
    return table.sort_values("launch", kind="stable").reset_index(drop=True)


def merge_torch_trace(
    session_paths: Sequence[str | Path],
    torch_trace: str | Path | KinetoTrace,
    output: str | Path,
    *,
    timeline: str | None = None,
) -> tuple[Path, list[Alignment]]:
    """Write one Perfetto trace of the sessions and a ``torch.profiler`` trace of the same
    steps, each session moved onto the trace's clock by its alignment; return its path and the
    alignments (one per session)."""
    from proton_ik.viewer.ranks import merge_sessions

    trace = torch_trace if isinstance(torch_trace, KinetoTrace) else read_kineto(torch_trace)
    if len(session_paths) + 1 > MAX_MERGED:
        raise ValueError(f"{len(session_paths)} sessions: one trace holds at most {MAX_MERGED - 1} beside it")
    alignments, offsets = [], []
    notes: dict[int, dict[str, int | str]] = {}
    for path in session_paths:
        spans, info = launch_spans(path)
        prior = host_offset_ns(info)
        alignment = align_launches(spans, trace.kernels, prior)
        alignments.append(alignment)
        offsets.append(alignment.offset_ns if alignment.offset_ns is not None else prior or 0)
        for row in alignment.matches.itertuples(index=False):
            notes[int(row.event)] = {
                "proton_ik session": Path(path).name,
                "proton_ik launch": int(row.launch),
                "first warp starts after (ns)": int(row.begin_error_ns),
                "last warp exits before (ns)": int(row.end_error_ns),
            }
    output = Path(output)
    merge_sessions(session_paths, output, timeline=timeline, host_offsets_ns=offsets)
    index = len(session_paths)
    packets = kineto_packets(
        trace, uuid_base=index << UUID_BITS, sequence=SEQUENCE_ID + index * SEQUENCES_PER_SESSION, notes=notes
    )
    with open(output, "ab") as file:  # a Perfetto trace is its packets, one after another
        while batch := list(itertools.islice(packets, 4096)):
            file.write(Trace(packet=batch).SerializeToString())
    return output, alignments
