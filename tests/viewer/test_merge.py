"""A job's sessions merged into one Perfetto trace: a root track per session, named by its rank,
every track and flow numbered apart, every slice of every session kept at its own time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import proton_ik
from proton_ik.cli import main
from proton_ik.viewer.readback.packets import read_packets
from proton_ik.viewer.render import render_session

DATA = Path(__file__).parents[1] / "data"
# The captures here were recorded before sessions read clock pairs: merges of them say so.
pytestmark = pytest.mark.filterwarnings("ignore:.*recorded no host and GPU clock pairs")


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


def _pairs(offset_ns: int) -> dict:
    """Clock pairs, as a session's start and finalize read them, of a GPU ``offset_ns`` behind the host."""
    return {
        "clock_pairs": [
            {"host_ns": 10_000 + offset_ns, "globaltimer_ns": 10_000, "read_ns": 9_000},
            {"host_ns": 90_000 + offset_ns + 2, "globaltimer_ns": 90_000, "read_ns": 9_000},
        ]
    }


def test_sessions_are_moved_onto_the_host_clock_by_their_clock_pairs(tmp_path, as_rank, clock_anchors):
    ranks = [
        as_rank(DATA / "add.pik", tmp_path / "job" / "dist.rank0.pik", 0, **_pairs(1_000)),
        as_rank(DATA / "add.pik", tmp_path / "job" / "dist.rank1.pik", 1, **_pairs(-7_000)),
    ]
    merged = proton_ik.merge([tmp_path / "job"], tmp_path / "dist.pftrace")
    alone = tmp_path / "alone.pftrace"
    render_session(ranks[0], {"pftrace": alone})
    own = clock_anchors(alone)
    # each session by the mean offset of its pairs: +1001 and -6999 ns
    assert clock_anchors(merged) == sorted([t + 1_001 for t in own] + [t - 6_999 for t in own])


def test_a_session_without_clock_pairs_leaves_every_session_on_its_gpu_timer(
    tmp_path, as_rank, clock_anchors
):
    as_rank(DATA / "add.pik", tmp_path / "job" / "a.rank0.pik", 0, **_pairs(1_000))
    as_rank(DATA / "add.pik", tmp_path / "job" / "a.rank1.pik", 1)
    with pytest.warns(UserWarning, match=r"a\.rank1\.pik recorded no host and GPU clock pairs"):
        merged = proton_ik.merge([tmp_path / "job"], tmp_path / "a.pftrace")
    alone = tmp_path / "alone.pftrace"
    render_session(tmp_path / "job" / "a.rank1.pik", {"pftrace": alone})
    own = clock_anchors(alone)
    assert clock_anchors(merged) == sorted(own + own)


def test_a_jobs_trace_is_not_read_back_as_one_session_and_says_what_to_do(tmp_path, capsys, as_rank):
    ranks = [as_rank(DATA / "add.pik", tmp_path / f"r.rank{rank}.pik", rank) for rank in (0, 1)]
    job = proton_ik.merge(ranks, tmp_path / "job.pftrace")
    assert main(["convert", str(job), "--to", "chrome"]) == 1
    said = capsys.readouterr().err
    assert "holds 2 sessions" in said and "each session's .pik" in said


def test_a_session_named_twice_is_refused_not_drawn_as_two_ranks(tmp_path, capsys, as_rank):
    rank0 = as_rank(DATA / "add.pik", tmp_path / "job" / "a.rank0.pik", 0)
    as_rank(DATA / "add.pik", tmp_path / "job" / "a.rank1.pik", 1)
    output = tmp_path / "job.pftrace"
    for named in ([rank0, rank0], [tmp_path / "job", rank0]):
        assert main(["merge", *map(str, named), "-o", str(output)]) == 2
        assert "named twice" in capsys.readouterr().err
        with pytest.raises(ValueError, match="name each session once"):
            proton_ik.merge([str(path) for path in named], output)
    assert not output.exists()


def test_a_file_that_is_no_session_is_named_for_what_it_is(tmp_path, capsys, as_rank):
    rank0 = as_rank(DATA / "add.pik", tmp_path / "r0.pik", 0)
    trace = proton_ik.merge([str(rank0)], tmp_path / "r0.pftrace")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a session")
    for other, said in ((trace, "Perfetto"), (notes, "not")):
        assert main(["merge", str(rank0), str(other), "-o", str(tmp_path / "x.pftrace")]) == 1
        err = capsys.readouterr().err
        assert said.lower() in err.lower() and "truncated" not in err, err
