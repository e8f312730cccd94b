"""A job's sessions merged into one Perfetto trace: a root track per session, named by its rank,
every track and flow numbered apart, every slice of every session kept at its own time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import proton_ik
from proton_ik.cli import main
from proton_ik.viewer.pftrace_packets import read_packets
from proton_ik.viewer.render import render_session

DATA = Path(__file__).parents[1] / "data"


def _slices(packets) -> list[tuple[int, int]]:
    """(sequence, timestamp) of every slice begin."""
    return [
        (p.trusted_packet_sequence_id, p.timestamp)
        for p in packets
        if p.HasField("track_event") and p.track_event.type == p.track_event.TYPE_SLICE_BEGIN
    ]


def test_two_ranks_merge_into_one_trace_with_a_root_each(tmp_path, as_rank):
    ranks = [
        as_rank(DATA / "events.pik", tmp_path / "job" / "dist.rank0.pik", 0),
        as_rank(DATA / "add.pik", tmp_path / "job" / "dist.rank1.pik", 1),
    ]
    merged = proton_ik.merge([tmp_path / "job"], tmp_path / "dist.pftrace")
    packets = read_packets(merged)
    descriptors = [p.track_descriptor for p in packets if p.HasField("track_descriptor")]
    uuids = Counter(d.uuid for d in descriptors)
    assert max(uuids.values()) == 1  # no track declared twice
    roots = [d for d in descriptors if not d.HasField("parent_uuid")]
    assert [r.name.split(":")[0] for r in roots] == ["rank 0", "rank 1"]
    assert all(d.parent_uuid in uuids for d in descriptors if d.HasField("parent_uuid"))
    # Each session's slices, at their own times, on sequences of their own.
    alone = []
    for index, path in enumerate(ranks):
        part = tmp_path / f"alone{index}.pftrace"
        render_session(path, {"pftrace": part})
        alone.append(sorted(t for _, t in _slices(read_packets(part))))
    slices = _slices(packets)
    assert sorted(t for _, t in slices) == sorted(alone[0] + alone[1])
    first_sequences = {s for s, _ in _slices(read_packets(tmp_path / "alone0.pftrace"))}
    assert {s for s, _ in slices[: len(alone[0])]} == first_sequences
    assert not first_sequences & {s for s, _ in slices[len(alone[0]) :]}


def test_the_command_line_merges_and_keeps_what_exists(tmp_path, capsys, as_rank):
    rank0 = as_rank(DATA / "add.pik", tmp_path / "r0.pik", 0)
    rank1 = as_rank(DATA / "diff_a.pik", tmp_path / "r1.pik", 1)
    output = tmp_path / "job.pftrace"
    assert main(["merge", str(rank0), str(rank1), "-o", str(output)]) == 0
    assert "2 sessions" in capsys.readouterr().out
    assert main(["merge", str(rank0), str(rank1), "-o", str(output)]) == 2  # exists: --force
    assert main(["merge", str(rank0), "-o", str(rank0)]) == 2  # the input itself
    assert main(["merge", str(tmp_path / "nothing"), "-o", str(tmp_path / "x.pftrace")]) == 1  # unreadable


def test_one_folder_may_be_named_alone(tmp_path, as_rank):
    as_rank(DATA / "add.pik", tmp_path / "job" / "a.rank0.pik", 0)
    as_rank(DATA / "add.pik", tmp_path / "job" / "a.rank1.pik", 1)
    merged = proton_ik.merge(str(tmp_path / "job"), tmp_path / "a.pftrace")
    roots = [p.track_descriptor for p in read_packets(merged) if p.HasField("track_descriptor")]
    assert sum(1 for d in roots if not d.HasField("parent_uuid")) == 2
