"""``proton-ik`` on the committed real captures: show, convert and demo, in-process and as a script."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

from proton_ik import demo, viewer
from proton_ik.cli import CONVERSIONS, main
from proton_ik.runtime.session_writer import write_session
from proton_ik.session import gpu_available
from proton_ik.viewer.diff import SCOPE_COLUMNS
from proton_ik.viewer.readback import read_packets
from proton_ik.viewer.trace import time_shift_cycles
from proton_ik.viewer.tracks import LIFETIME

DATA = Path(__file__).parent / "data"
# The console script installed beside this interpreter (pip puts both in one bin folder).
SCRIPT = Path(sys.executable).parent / "proton-ik"
DEMO_EVENTS = {"k_step": 2 * 64 * 8 * 16, "epilogue": 2 * 64 * 8}


def shifted(capture: Path) -> str:
    """The summary's words for the time shift that the capture's own session file records."""
    return f"scope begins shifted by {time_shift_cycles(viewer.read_session(capture).info)}"


# (capture, scope counts, other text the summary must hold). Ring: 16 warps each wrote 21 pair
# entries (20 steps, then outer) into 16 slots: each kept outer and steps 5..19 whole, the ring
# overwrote steps 0..4 (10 records), and as it drops whole pairs, no end lost its begin.
SHOWN = {
    "add": (
        DATA / "add.pik",
        {"load": 64, "compute": 64, "store": 64},
        [
            "add_kernel: 1 launch(es), 64 units",
            shifted(DATA / "add.pik"),
            "records: 384 kept, 0 overwritten by the ring",
        ],
    ),
    "ring": (
        DATA / "ring.pik",
        {"outer": 16, "step": 240},
        [
            "loop_kernel: 1 launch(es), 16 units",
            shifted(DATA / "ring.pik"),
            "records: 512 kept, 160 overwritten by the ring; "
            "unmatched: 0 begins, 0 ends, 0 ends lost to the ring",
        ],
    ),
    "spin": (
        DATA / "spin.pik",
        {"spin": 8},
        [
            "spin_kernel: 1 launch(es), 8 units",
            shifted(DATA / "spin.pik"),
            "records: 16 kept, 0 overwritten by the ring",
        ],
    ),
    "demo": (
        demo.bundled_capture(),
        DEMO_EVENTS,
        [
            "matmul_kernel: 2 launch(es), 1024 units",
            shifted(demo.bundled_capture()),
            "records: 34,816 kept, 0 overwritten by the ring",
        ],
    ),
}
STAT_COLUMNS = ("mean ns", "median ns", "p90 ns", "mean cyc", "median cyc", "p90 cyc", "share")


def cell(text: str, scope: str, column: str) -> str:
    """The value of ``column`` in ``scope``'s row of a summary table (columns are right-aligned
    under their header, as pandas prints them)."""
    lines = text.splitlines()
    header = next(line for line in lines if re.match(r"\s+scope\s", line))
    match = re.search(rf"(?<!\S){re.escape(column)}(?!\S)", header)
    assert match, f"no {column!r} column in {header!r}"
    row = next(line for line in lines if line.split()[:1] == [scope])
    return row[: match.end()].split()[-1]


def pftrace_scope_counts(path: Path) -> Counter:
    names, counts = {}, Counter()
    for packet in read_packets(path):
        names.update({entry.iid: entry.name for entry in packet.interned_data.event_names})
        if packet.HasField("track_event") and packet.track_event.type == TrackEvent.TYPE_SLICE_BEGIN:
            counts[names[packet.track_event.name_iid]] += 1
    counts.pop(LIFETIME, None)
    return counts


def chrome_scope_counts(path: Path) -> Counter:
    events = json.loads(path.read_text())["traceEvents"]
    return Counter(e["name"] for e in events if e["ph"] == "X" and e["name"] != LIFETIME)


def assert_one_line_error(err: str, command: str, *fragments: str) -> None:
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"proton-ik {command}: ")
    for fragment in fragments:
        assert fragment in err


def truncated(tmp_path: Path) -> Path:
    data = (DATA / "add.pik").read_bytes()
    path = tmp_path / "cut.pik"
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize("name", SHOWN)
def test_show_prints_each_scope_with_its_exact_count(name, capsys):
    path, counts, lines = SHOWN[name]
    assert main(["show", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    for scope, count in counts.items():
        assert cell(out, scope, "count") == str(count), scope
    for line in lines:
        assert line in out
    assert "SM clock 1000 MHz" not in out
    assert re.search(r"SM clock \d{3,4} MHz", out)


@pytest.mark.parametrize("name", SHOWN)
def test_show_prints_the_statistics_the_viewer_computes(name, capsys):
    path, counts, _ = SHOWN[name]
    main(["show", str(path)])
    out = capsys.readouterr().out
    scopes = viewer.load(path).summary().scopes.set_index("scope")
    for scope, count in counts.items():
        row = scopes.loc[scope]
        assert row["count"] == count
        share = cell(out, scope, "share")
        assert share == f"{row['share']:.1%}"
        assert 0 <= float(share.rstrip("%")) <= 100
        assert cell(out, scope, "mean ns") == f"{row['mean_ns']:,.0f}"
        assert cell(out, scope, "median ns") == f"{row['median_ns']:,.0f}"
        assert cell(out, scope, "p90 ns") == f"{row['p90_ns']:,.0f}"
        assert cell(out, scope, "mean cyc") == f"{row['mean_cycles']:,.0f}"
        assert cell(out, scope, "median cyc") == f"{row['median_cycles']:,.0f}"
        assert cell(out, scope, "p90 cyc") == f"{row['p90_cycles']:,.0f}"


def test_show_prints_mean_median_and_p90_in_both_ns_and_cycles(capsys):
    main(["show", str(DATA / "add.pik")])
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if re.match(r"\s+scope\s", line))
    missing = [column for column in STAT_COLUMNS if column not in header]
    assert not missing, f"the summary lacks {missing}: {header!r}"


@pytest.mark.parametrize("kind, suffix", [("perfetto", ".pftrace"), ("chrome", ".json")])
@pytest.mark.parametrize("name", ["ring", "demo"])
def test_convert_writes_a_trace_that_parses_back(name, kind, suffix, tmp_path, capsys):
    path, counts, _ = SHOWN[name]
    output = tmp_path / f"out{suffix}"
    assert main(["convert", str(path), "--to", kind, "-o", str(output)]) == 0
    assert capsys.readouterr().out == f"wrote {output}\n"
    parsed = pftrace_scope_counts(output) if kind == "perfetto" else chrome_scope_counts(output)
    assert parsed == Counter(counts)


def test_convert_writes_next_to_the_session_by_default(tmp_path, capsys):
    session = tmp_path / "add.pik"
    session.write_bytes((DATA / "add.pik").read_bytes())
    assert main(["convert", str(session), "--to", "chrome"]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'add.json'}\n"
    assert chrome_scope_counts(tmp_path / "add.json") == Counter(load=64, compute=64, store=64)


def test_convert_rejects_an_unknown_format(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["convert", str(DATA / "add.pik"), "--to", "svg"])
    assert exited.value.code == 2
    assert "invalid choice: 'svg'" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["show"], ["convert", "--to", "perfetto"]])
def test_a_missing_file_is_one_line_and_exit_code_1(command, tmp_path, capsys):
    missing = tmp_path / "nope.pik"
    assert main([command[0], str(missing), *command[1:]]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert_one_line_error(err, command[0], str(missing), "does not exist")


@pytest.mark.parametrize("command", [["show"], ["convert", "--to", "chrome"]])
def test_a_truncated_file_is_one_line_and_exit_code_1(command, tmp_path, capsys):
    path = truncated(tmp_path)
    assert main([command[0], str(path), *command[1:]]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert_one_line_error(err, command[0], str(path), "truncated or corrupt")
    assert not (tmp_path / "cut.json").exists()


def test_a_damaged_compressed_file_is_one_line_and_exit_code_1(tmp_path, capsys):
    """Damaged deflate data raises zlib.error, which the CLI neither expects nor catches."""
    session = viewer.read_session(DATA / "add.pik")
    path = write_session(
        tmp_path / "add.pik", session.info, [viewer.LaunchCapture(s.meta, s.buffer) for s in session]
    )
    with zipfile.ZipFile(path) as archive:
        header = archive.getinfo("launches/000000.npy").header_offset
    raw = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack_from("<HH", raw, header + 26)
    start = header + 30 + name_length + extra_length + 8  # into the deflate stream
    raw[start : start + 64] = bytes(b ^ 0x5A for b in raw[start : start + 64])
    path.write_bytes(bytes(raw))
    assert main(["show", str(path)]) == 1
    assert_one_line_error(capsys.readouterr().err, "show", str(path), "corrupt")


def test_demo_without_a_gpu_renders_the_bundled_capture(tmp_path, capsys):
    if gpu_available():
        pytest.skip("a CUDA GPU is present: demo profiles the matmul instead")
    assert main(["demo", "--out-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert out.startswith("No CUDA GPU found")
    assert "NVIDIA H200" in out.splitlines()[0]
    for scope, count in DEMO_EVENTS.items():
        assert cell(out, scope, "count") == str(count)
    pftrace, chrome = tmp_path / "proton_ik_demo.pftrace", tmp_path / "proton_ik_demo.json"
    assert f" pftrace: {pftrace}" in out.splitlines()
    assert f"    json: {chrome}" in out.splitlines()
    assert pftrace_scope_counts(pftrace) == Counter(DEMO_EVENTS)
    assert chrome_scope_counts(chrome) == Counter(DEMO_EVENTS)
    assert "ui.perfetto.dev" in out.splitlines()[-1]
    # The session too, so that every command of the README has a file to start from.
    session = tmp_path / "proton_ik_demo.pik"
    assert f" session: {session}" in out.splitlines() and "proton-ik show" in out
    assert main(["show", str(session)]) == 0
    capsys.readouterr()
    # A second run says what it replaced.
    assert main(["demo", "--out-dir", str(tmp_path)]) == 0
    assert "(replaced the demo's files of an earlier run: proton_ik_demo.json" in capsys.readouterr().out


def test_help_has_no_markup(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "``" not in capsys.readouterr().out


def test_demo_creates_its_output_directory(tmp_path, capsys):
    if gpu_available():
        pytest.skip("a CUDA GPU is present: demo profiles the matmul instead")
    out_dir = tmp_path / "new" / "dir"
    code = main(["demo", "--out-dir", str(out_dir)])
    assert capsys.readouterr().err == ""
    assert code == 0
    assert (out_dir / "proton_ik_demo.pftrace").is_file()
    assert (out_dir / "proton_ik_demo.json").is_file()


@pytest.mark.parametrize("kind, suffix", [("perfetto", ".pftrace"), ("chrome", ".json")])
def test_show_summarises_a_trace_file_like_its_session(kind, suffix, tmp_path, capsys):
    output = tmp_path / f"add{suffix}"
    main(["convert", str(DATA / "add.pik"), "--to", kind, "-o", str(output)])
    capsys.readouterr()
    assert main(["show", str(output)]) == 0
    out = capsys.readouterr().out
    for scope in ("load", "compute", "store"):
        assert cell(out, scope, "count") == "64"


@pytest.mark.skipif(not SCRIPT.exists(), reason="the proton-ik console script is not installed")
def test_the_console_script_shows_a_capture_and_fails_cleanly_on_a_missing_one(tmp_path):
    shown = subprocess.run(
        [str(SCRIPT), "show", str(DATA / "add.pik")], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    for scope in ("load", "compute", "store"):
        assert cell(shown.stdout, scope, "count") == "64"
    missing = subprocess.run(
        [str(SCRIPT), "show", str(tmp_path / "nope.pik")], capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert_one_line_error(missing.stderr, "show", "does not exist")


def copy_of(name: str, tmp_path: Path) -> Path:
    path = tmp_path / name
    path.write_bytes((DATA / name).read_bytes())
    return path


def test_convert_refuses_to_write_over_its_input(tmp_path, capsys):
    session = copy_of("add.pik", tmp_path)
    before = session.read_bytes()
    for extra in ([], ["--force"]):
        assert main(["convert", str(session), "--to", "perfetto", "-o", str(session), *extra]) == 2
        assert_one_line_error(capsys.readouterr().err, "convert", "is the input file")
    assert session.read_bytes() == before


def test_convert_replaces_an_existing_file_only_with_force(tmp_path, capsys):
    session = copy_of("add.pik", tmp_path)
    output = tmp_path / "add.json"
    output.write_text("keep me")
    assert main(["convert", str(session), "--to", "chrome"]) == 2
    assert_one_line_error(capsys.readouterr().err, "convert", "exists", "--force")
    assert output.read_text() == "keep me"
    assert main(["convert", str(session), "--to", "chrome", "--force"]) == 0
    assert chrome_scope_counts(output) == Counter(load=64, compute=64, store=64)


def shown(path: Path, capsys) -> str:
    assert main(["show", str(path)]) == 0
    return capsys.readouterr().out


def converted(path: Path, kind: str, output: Path, capsys) -> Path:
    assert main(["convert", str(path), "--to", kind, "-o", str(output)]) == 0
    assert capsys.readouterr().out == f"wrote {output}\n"
    return output


@pytest.mark.parametrize(
    "first, second", [("perfetto", "chrome"), ("chrome", "perfetto"), ("perfetto", "perfetto")]
)
@pytest.mark.parametrize("name", ["add", "ring"])
def test_convert_writes_a_trace_from_a_trace_that_shows_the_same_summary(
    name, first, second, tmp_path, capsys
):
    trace = converted(DATA / f"{name}.pik", first, tmp_path / f"first{CONVERSIONS[first]}", capsys)
    expected = shown(trace, capsys)
    again = converted(trace, second, tmp_path / f"second{CONVERSIONS[second]}", capsys)
    got = shown(again, capsys)
    assert got == expected
    for scope, count in SHOWN[name][1].items():
        assert cell(got, scope, "count") == str(count)
        for column in ("mean ns", "median ns", "mean cyc", "median cyc"):
            assert cell(got, scope, column) == cell(expected, scope, column)


def test_a_session_converted_to_perfetto_then_chrome_shows_as_the_session(tmp_path, capsys):
    pftrace = converted(DATA / "ring.pik", "perfetto", tmp_path / "ring.pftrace", capsys)
    chrome = converted(pftrace, "chrome", tmp_path / "ring.json", capsys)
    assert shown(chrome, capsys) == shown(DATA / "ring.pik", capsys)


def test_a_trace_converted_keeps_its_tracks_and_launch_metadata(tmp_path, capsys):
    """Warp tracks nest each unit's scopes in its lifetime, and the launch table comes through."""
    pftrace = converted(DATA / "add.pik", "perfetto", tmp_path / "add.pftrace", capsys)
    chrome = converted(pftrace, "chrome", tmp_path / "add.json", capsys)
    document = json.loads(chrome.read_text())
    threads = [o for o in document["traceEvents"] if o.get("name") == "thread_name"]
    assert len(threads) == 64  # one unit per warp: 64 warps, each its own thread
    expected = viewer.load(DATA / "add.pik").launches.iloc[0]
    launch = document["otherData"]["launches"][0]
    for key in ("launch", "kernel", "grid", "warps_per_unit", "records", "events", "capacity"):
        assert launch[key] == expected[key], key
    back = converted(chrome, "perfetto", tmp_path / "back.pftrace", capsys)
    depth: dict[int, int] = {}
    for packet in read_packets(back):
        if packet.HasField("trace_packet_defaults"):
            track = packet.trace_packet_defaults.track_event_defaults.track_uuid
        if packet.WhichOneof("data") == "track_event":
            steps = {TrackEvent.TYPE_SLICE_BEGIN: 1, TrackEvent.TYPE_SLICE_END: -1}  # counters: 0
            step = steps.get(packet.track_event.type, 0)
            depth[track] = depth.get(track, 0) + step
            assert depth[track] >= 0
    assert set(depth.values()) == {0}
    assert pftrace_scope_counts(back) == Counter(load=64, compute=64, store=64)


def test_convert_of_a_trace_refuses_to_write_over_it(tmp_path, capsys):
    trace = converted(DATA / "add.pik", "chrome", tmp_path / "add.json", capsys)
    before = trace.read_bytes()
    assert main(["convert", str(trace), "--to", "chrome", "-o", str(trace), "--force"]) == 2
    assert_one_line_error(capsys.readouterr().err, "convert", "is the input file")
    assert trace.read_bytes() == before


def test_convert_of_a_damaged_trace_is_one_line_and_leaves_no_output(tmp_path, capsys):
    trace = converted(DATA / "add.pik", "perfetto", tmp_path / "add.pftrace", capsys)
    trace.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])
    assert main(["convert", str(trace), "--to", "chrome"]) == 1
    assert_one_line_error(capsys.readouterr().err, "convert", str(trace), "truncated")
    assert not (tmp_path / "add.json").exists()


def test_bad_usage_is_exit_code_2_and_bad_input_exit_code_1(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["show"])
    assert exited.value.code == 2
    capsys.readouterr()
    garbage = tmp_path / "garbage.pik"
    garbage.write_bytes(b"PK\x03\x04 not a zip at all")
    assert main(["show", str(garbage)]) == 1
    assert_one_line_error(capsys.readouterr().err, "show", str(garbage))


def test_names_from_a_file_reach_the_terminal_escaped(tmp_path, capsys):
    """A kernel name with an ANSI colour escape and a right-to-left override: shown, not obeyed."""
    kernel = "k\x1b[31mred\u202e"
    session = viewer.read_session(DATA / "add.pik")
    captures = [viewer.LaunchCapture({**s.meta, "kernel": kernel}, s.buffer) for s in session]
    path = write_session(tmp_path / "s.pik", session.info, captures)
    assert main(["show", str(path)]) == 1  # the manifest's schema wants printable names
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err
    assert_one_line_error(err, "show", "'kernel' is", "not printable text")
    trace = viewer.Trace.from_captures(session.info, captures).write_perfetto(tmp_path / "s.pftrace")
    assert main(["show", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert "k\\x1b[31mred\\u202e" in out


def test_show_writes_the_numbers_it_prints_as_csv_for_a_session_and_its_trace(tmp_path, capsys):
    """``show --csv``: each file's per-scope table, the file's name first, the counts and medians
    the text prints; the trace's rows are the session's."""
    add = DATA / "add.pik"
    trace = tmp_path / "add.pftrace"
    assert main(["convert", str(add), "--to", "perfetto", "-o", str(trace)]) == 0
    table = tmp_path / "show.csv"
    assert main(["show", str(add), str(trace), "--csv", str(table)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(f"wrote {table}")
    written = pd.read_csv(table)
    assert list(written.columns[:3]) == ["path", "host_scope", "kernel"]
    assert {"scope", "line", "count", "median_ns"} <= set(written.columns)
    by_file = {name: rows.set_index("scope") for name, rows in written.groupby("path")}
    assert sorted(by_file) == sorted([str(add), str(trace)])
    session, from_trace = by_file[str(add)], by_file[str(trace)]
    assert session.loc[["compute", "load", "store"], "count"].tolist() == [64, 64, 64]
    assert from_trace.loc[session.index, "count"].tolist() == session["count"].tolist()
    printed = next(line for line in out.splitlines() if line.split()[:1] == ["compute"]).split()
    assert int(printed[2]) == session.loc["compute", "count"]  # scope, line, count, ...
    assert float(printed[4].replace(",", "")) == pytest.approx(session.loc["compute", "median_ns"], abs=1)


def test_show_writes_over_a_csv_only_with_force(tmp_path, capsys):
    table = tmp_path / "show.csv"
    table.write_text("keep")
    add = str(DATA / "add.pik")
    assert main(["show", add, "--csv", str(table)]) == 2
    assert_one_line_error(capsys.readouterr().err, "show", "exists; pass --force")
    assert table.read_text() == "keep"
    assert main(["show", add, "--csv", str(table), "--force"]) == 0
    assert table.read_text().startswith("path,")
    assert main(["show", add, "--csv", add]) == 2
    assert_one_line_error(capsys.readouterr().err, "show", "is an input file")


def test_diff_prints_each_kernel_and_scope_and_writes_the_table_as_csv(tmp_path, capsys):
    table = tmp_path / "diff.csv"
    add = str(DATA / "add.pik")
    assert main(["diff", add, add, "--csv", str(table), "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "add_kernel: 1 launch(es) in A, 1 in B" in out
    assert "95% intervals from 200 resamples of the CTAs of each launch (seed 0)" in out
    header = next(line for line in out.splitlines() if "median A ns" in line)
    assert header.split()[:2] == ["scope", "line"] and header.split()[-1] == "verdict"
    assert out.rstrip().endswith(f"wrote {table}")
    written = pd.read_csv(table)
    assert list(written.columns) == list(SCOPE_COLUMNS)
    assert sorted(written["scope"]) == ["compute", "load", "store"]
    # A session against itself: every median the same, every interval around zero.
    assert (written["change_ns"] == 0).all() and (written["verdict"] == "no significant change").all()
    assert (written["count_a"] == 64).all()


def test_diff_writes_over_a_csv_only_with_force(tmp_path, capsys):
    table = tmp_path / "diff.csv"
    table.write_text("keep")
    add = str(DATA / "add.pik")
    assert main(["diff", add, add, "--csv", str(table)]) == 2
    assert_one_line_error(capsys.readouterr().err, "diff", "exists; pass --force")
    assert table.read_text() == "keep"
    assert main(["diff", add, add, "--csv", str(table), "--force"]) == 0
    assert table.read_text().startswith("kernel,scope,")
    assert main(["diff", add, add, "--csv", add]) == 2
    assert_one_line_error(capsys.readouterr().err, "diff", "is an input file")


def test_diff_of_sessions_with_no_scope_in_common_lists_their_kernels(capsys):
    assert main(["diff", str(DATA / "add.pik"), str(DATA / "ring.pik")]) == 1
    assert_one_line_error(
        capsys.readouterr().err, "diff", "no scope in common", "add_kernel: load (line", "loop_kernel: "
    )
    assert main(["diff", str(DATA / "add.pik"), str(DATA / "add.pik"), "--kernel", "nope"]) == 1
    assert_one_line_error(
        capsys.readouterr().err, "diff", "kernel 'nope' is in neither session", "add_kernel"
    )


def test_diff_of_a_missing_file_a_trace_or_bad_options_says_which(tmp_path, capsys):
    add = str(DATA / "add.pik")
    missing = tmp_path / "nope.pik"
    assert main(["diff", add, str(missing)]) == 1
    assert_one_line_error(capsys.readouterr().err, "diff", str(missing), "does not exist")
    trace = viewer.load(DATA / "add.pik").write_perfetto(tmp_path / "add.pftrace")
    assert main(["diff", str(trace), add]) == 1
    assert_one_line_error(
        capsys.readouterr().err, "diff", "is a perfetto trace", "diff compares session files"
    )
    for option in (["--confidence", "1.5"], ["--resamples", "10"], ["--min-change", "-1"]):
        assert main(["diff", add, add, *option]) == 2
        assert_one_line_error(capsys.readouterr().err, "diff", f"{option[0][2:].replace('-', '_')}=")


@pytest.mark.parametrize("line", [(1 << 31) - 2, (1 << 21) - 1])  # the readers allow up to 1 << 31
def test_diff_names_scopes_right_whatever_their_lines(tmp_path, capsys, line):
    """Lines are whatever a session file holds: each scope keeps its own name, nothing crashes."""
    from proton_ik.runtime.session_writer import SessionWriter

    stored = viewer.read_session(DATA / "add.pik")
    path = tmp_path / "lines.pik"
    with SessionWriter(path, stored.info) as writer:
        for launch in stored:
            profile = dict(launch.meta["profile"])
            profile["scopes"] = [{**scope, "line": line + scope["id"]} for scope in profile["scopes"]]
            writer.add_launch(
                {**launch.meta, "profile": profile}, launch.buffer, trimmed_on_device=launch.trimmed
            )
    table = tmp_path / "lines.csv"
    assert main(["diff", str(path), str(path), "--csv", str(table), "--resamples", "200"]) == 0
    written = pd.read_csv(table).sort_values("line_a")
    assert written["scope"].tolist() == ["load", "compute", "store"]
    assert written["line_a"].tolist() == written["line_b"].tolist() == [line, line + 1, line + 2]
    assert (written["count_a"] == 64).all()


def test_a_convert_that_fails_halfway_leaves_no_output_and_the_retry_needs_no_force(
    tmp_path, capsys, monkeypatch
):
    session = tmp_path / "add.pik"
    session.write_bytes((DATA / "add.pik").read_bytes())
    render = viewer.render_session

    def fails_halfway(source, outputs, **options):
        for path in outputs.values():
            Path(path).write_bytes(b"half a trace")
        raise OSError("No space left on device")

    monkeypatch.setattr(viewer, "render_session", fails_halfway)
    assert main(["convert", str(session), "--to", "perfetto"]) == 1
    assert_one_line_error(capsys.readouterr().err, "convert", "No space left")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["add.pik"]  # nothing written, nothing aside
    monkeypatch.setattr(viewer, "render_session", render)
    assert main(["convert", str(session), "--to", "perfetto"]) == 0
    assert read_packets(tmp_path / "add.pftrace")


def test_report_of_a_file_that_is_no_session_says_so_before_anything_about_its_output(tmp_path, capsys):
    page = tmp_path / "run.html"
    page.write_text("<html></html>")
    assert main(["report", str(page)]) == 1
    err = capsys.readouterr().err
    assert "not a proton_ik file" in err and "would destroy" not in err, err


def test_a_warning_is_a_line_of_the_commands_own(tmp_path, capsys):
    data = (DATA / "torch_profiler.pik").read_bytes()
    cut = tmp_path / "cut.pik"
    cut.write_bytes(data[: len(data) * 3 // 4])
    main(["show", str(cut)])
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if "never closed" in line]
    assert warned and all(line.startswith("proton-ik show: warning: ") for line in warned), err
    assert ".py:" not in err, err


def test_show_of_a_folder_shows_the_sessions_in_it(tmp_path, capsys):
    job = tmp_path / "job"
    job.mkdir()
    for name in ("a.rank0.pik", "a.rank1.pik"):
        (job / name).write_bytes((DATA / "add.pik").read_bytes())
    assert main(["show", str(job)]) == 0
    out = capsys.readouterr().out
    assert f"== {job / 'a.rank0.pik'}" in out and f"== {job / 'a.rank1.pik'}" in out
    assert "side by side" in out
    (tmp_path / "empty").mkdir()
    assert main(["show", str(tmp_path / "empty")]) == 2
    assert "no session file" in capsys.readouterr().err
